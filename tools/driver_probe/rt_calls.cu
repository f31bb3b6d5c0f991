// Runtime API calls, each announced on stderr, so a probe log (PROBE_LOG unset: same stderr) shows which driver
// calls each runtime call makes. Results are printed, not checked: the probe's device runs no kernels.
#include <cuda_runtime.h>
#include <cstdio>

__constant__ float cCoef[16];
__device__ int gCounter;

__global__ void axpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i] * cCoef[0];
}

__global__ void dyn(float *out) {
    extern __shared__ float s[];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
    atomicAdd(&gCounter, 1);
}

static void CUDART_CB host_fn(void *) {}
static void CUDART_CB stream_cb(cudaStream_t, cudaError_t, void *) {}

#define CALL(x)                                                                                                   \
    do {                                                                                                          \
        fprintf(stderr, "==== %s\n", #x);                                                                         \
        cudaError_t e_ = (x);                                                                                     \
        fprintf(stderr, "==== -> %s\n", cudaGetErrorName(e_));                                                   \
    } while (0)

int main() {
    int n = 0, dev = -1, v = 0;
    CALL(cudaGetDeviceCount(&n));
    cudaDeviceProp p;
    CALL(cudaGetDeviceProperties(&p, 0));
    CALL(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    CALL(cudaSetDevice(0));
    CALL(cudaGetDevice(&dev));
    CALL(cudaFree(0));
    size_t fr = 0, tot = 0, lim = 0;
    CALL(cudaMemGetInfo(&fr, &tot));
    CALL(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 1 << 20));
    CALL(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
    float *x, *y, *h, *hp;
    CALL(cudaMalloc(&x, 4096));
    CALL(cudaMalloc(&y, 4096));
    CALL(cudaMallocHost(&h, 4096));
    CALL(cudaHostAlloc(&hp, 4096, cudaHostAllocMapped));
    static float reg[1024];
    CALL(cudaHostRegister(reg, sizeof reg, cudaHostRegisterDefault));
    CALL(cudaMemcpy(x, h, 4096, cudaMemcpyHostToDevice));
    CALL(cudaMemcpy(h, x, 4096, cudaMemcpyDeviceToHost));
    CALL(cudaMemcpy(y, x, 4096, cudaMemcpyDeviceToDevice));
    CALL(cudaMemcpy(hp, h, 4096, cudaMemcpyHostToHost));
    CALL(cudaMemcpy(y, h, 4096, cudaMemcpyDefault));
    CALL(cudaMemcpy2D(x, 64, h, 64, 64, 8, cudaMemcpyHostToDevice));
    CALL(cudaMemset(x, 0, 4096));
    cudaPointerAttributes pa;
    CALL(cudaPointerGetAttributes(&pa, x));
    CALL(cudaPointerGetAttributes(&pa, h));
    cudaStream_t s, s2;
    cudaEvent_t e0, e1;
    CALL(cudaStreamCreate(&s));
    CALL(cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, -1));
    CALL(cudaEventCreate(&e0));
    CALL(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    CALL(cudaMemcpyAsync(x, h, 4096, cudaMemcpyHostToDevice, s));
    CALL(cudaMemsetAsync(y, 1, 4096, s));
    CALL(cudaEventRecord(e0, s));
    CALL(cudaStreamWaitEvent(s2, e0, 0));
    float c[16] = {1};
    CALL(cudaMemcpyToSymbol(cCoef, c, sizeof c));
    CALL(cudaMemcpyFromSymbol(c, cCoef, sizeof c));
    void *sym = nullptr;
    CALL(cudaGetSymbolAddress(&sym, gCounter));
    fprintf(stderr, "==== axpy<<<4, 256, 0, s>>>\n");
    axpy<<<4, 256, 0, s>>>(2.0f, x, y, 1024);
    CALL(cudaGetLastError());
    fprintf(stderr, "==== dyn<<<1, 64, 256>>>\n");
    dyn<<<1, 64, 256>>>(y);
    CALL(cudaPeekAtLastError());
    float a = 3.0f;
    int nn = 1024;
    void *args[] = {&a, &x, &y, &nn};
    CALL(cudaLaunchKernel((void *)axpy, dim3(4), dim3(256), args, 0, s2));
    cudaFuncAttributes fa;
    CALL(cudaFuncGetAttributes(&fa, axpy));
    CALL(cudaFuncSetAttribute(dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    int blocks = 0;
    CALL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, axpy, 256, 0));
    CALL(cudaLaunchHostFunc(s, host_fn, nullptr));
    CALL(cudaStreamAddCallback(s, stream_cb, nullptr, 0));
    CALL(cudaEventRecord(e1, s2));
    CALL(cudaStreamQuery(s));
    CALL(cudaStreamSynchronize(s));
    CALL(cudaEventSynchronize(e1));
    float ms = 0;
    CALL(cudaEventElapsedTime(&ms, e0, e0));
    CALL(cudaEventQuery(e0));
    void *pooled = nullptr;
    CALL(cudaMallocAsync(&pooled, 4096, s));
    CALL(cudaFreeAsync(pooled, s));
    CALL(cudaDeviceSynchronize());
    CALL(cudaEventDestroy(e0));
    CALL(cudaEventDestroy(e1));
    CALL(cudaStreamDestroy(s));
    CALL(cudaStreamDestroy(s2));
    CALL(cudaHostUnregister(reg));
    CALL(cudaFreeHost(h));
    CALL(cudaFreeHost(hp));
    CALL(cudaFree(x));
    CALL(cudaFree(y));
    CALL(cudaDeviceReset());
    return 0;
}
