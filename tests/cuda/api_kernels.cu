// Kernel launches through the nvcc 13 ABI: parameter packing of mixed types, structs by value, symbols, printf,
// launch configuration errors, function attributes, occupancy, cudaLaunchKernel, stream ordering, deferred and
// sticky errors. Prints "OK <checks>" on success.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>

#include "check.h"

struct Params { char tag; double scale; int offset; };

__device__ int dev_table[64];
__constant__ float const_coeffs[16];

__global__ void saxpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void mixed(char c, short s, long long big, Params p, double *out) {
    out[0] = c;
    out[1] = s;
    out[2] = (double)big;
    out[3] = p.tag;
    out[4] = p.scale;
    out[5] = p.offset;
}

__global__ void use_symbols(float *out) {
    int i = threadIdx.x;
    out[i] = const_coeffs[i % 16] * dev_table[i];
    dev_table[i] += 1;
}

__global__ void hello(int v) {
    if (threadIdx.x == 0 && blockIdx.x == 0) printf("hello from the device %d\n", v);
}

__global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

__global__ void bad_store(int *p) { p[threadIdx.x] = 1; }

int main(int argc, char **argv) {
    long checks = 0;
    const int n = 1000;
    float hx[n], hy[n];
    for (int i = 0; i < n; i++) { hx[i] = (float)i; hy[i] = 1.0f; }
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, hy, sizeof hy, cudaMemcpyHostToDevice));
    saxpy<<<(n + 127) / 128, 128>>>(n, 2.0f, x, y);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(hy[i] == 2.0f * i + 1.0f);
    checks++;

    // cudaLaunchKernel with an explicit argument array
    {
        int nn = n;
        float a = -1.0f;
        void *args[] = {&nn, &a, &x, &y};
        CHECK(cudaLaunchKernel((const void *)saxpy, dim3(8), dim3(128), args, 0, 0));
        CHECK(cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) EXPECT(hy[i] == 1.0f * i + 1.0f);
        checks++;
    }

    // mixed scalar sizes and a struct by value
    {
        double *out, h[6];
        CHECK(cudaMalloc(&out, sizeof h));
        Params p = {'Z', 2.5, -77};
        mixed<<<1, 1>>>('A', (short)-1234, 1LL << 40, p, out);
        CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        EXPECT(h[0] == 'A' && h[1] == -1234 && h[2] == (double)(1LL << 40));
        EXPECT(h[3] == 'Z' && h[4] == 2.5 && h[5] == -77);
        CHECK(cudaFree(out));
        checks += 2;
    }

    // __device__ and __constant__ symbols
    {
        int vals[64];
        for (int i = 0; i < 64; i++) vals[i] = i;
        float coeffs[16];
        for (int i = 0; i < 16; i++) coeffs[i] = 0.5f * i;
        CHECK(cudaMemcpyToSymbol(dev_table, vals, sizeof vals));
        CHECK(cudaMemcpyToSymbol(const_coeffs, coeffs, sizeof coeffs));
        float *out, h[64];
        CHECK(cudaMalloc(&out, sizeof h));
        use_symbols<<<1, 64>>>(out);
        CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 64; i++) EXPECT(h[i] == coeffs[i % 16] * i);
        int back[64];
        CHECK(cudaMemcpyFromSymbol(back, dev_table, sizeof back));
        for (int i = 0; i < 64; i++) EXPECT(back[i] == i + 1);
        size_t sz = 0;
        CHECK(cudaGetSymbolSize(&sz, dev_table));
        EXPECT(sz == sizeof back);
        void *addr = nullptr;
        CHECK(cudaGetSymbolAddress(&addr, dev_table));
        int first = -1;
        CHECK(cudaMemcpy(&first, addr, sizeof first, cudaMemcpyDeviceToHost));
        EXPECT(first == 1);
        CHECK(cudaMemcpyToSymbolAsync(dev_table, vals, 8 * sizeof(int), 8 * sizeof(int), cudaMemcpyHostToDevice, 0));
        CHECK(cudaMemcpyFromSymbolAsync(back, dev_table, 16 * sizeof(int), 0, cudaMemcpyDeviceToHost, 0));
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < 16; i++) EXPECT(back[i] == (i < 8 ? i + 1 : i - 8));
        EXPECT_ERR(cudaMemcpyToSymbol(dev_table, vals, sizeof vals, 4), cudaErrorInvalidValue);
        int not_a_symbol;
        EXPECT_ERR(cudaMemcpyToSymbol(not_a_symbol, vals, 4), cudaErrorInvalidSymbol);
        cudaGetLastError();
        CHECK(cudaFree(out));
        checks += 6;
    }

    // device printf comes back on stdout, in order with the host's output
    printf("before printf kernel\n");
    hello<<<2, 32>>>(42);
    CHECK(cudaDeviceSynchronize());
    printf("after printf kernel\n");

    // launch configuration errors, answered before anything is sent
    EXPECT_ERR((saxpy<<<1, 2048>>>(n, 1.0f, x, y), cudaGetLastError()), cudaErrorInvalidConfiguration);
    EXPECT_ERR((saxpy<<<0, 32>>>(n, 1.0f, x, y), cudaGetLastError()), cudaErrorInvalidConfiguration);
    EXPECT_ERR((saxpy<<<1, dim3(32, 32, 2)>>>(n, 1.0f, x, y), cudaGetLastError()), cudaErrorInvalidConfiguration);
    checks += 3;

    // function attributes and occupancy
    {
        cudaFuncAttributes fa;
        memset(&fa, 0xff, sizeof fa);
        CHECK(cudaFuncGetAttributes(&fa, saxpy));
        EXPECT(fa.maxThreadsPerBlock > 0 && fa.maxThreadsPerBlock <= 1024);
        EXPECT(fa.numRegs >= 0 && fa.sharedSizeBytes < (1u << 20));
        int blocks = -1;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, saxpy, 128, 0));
        EXPECT(blocks >= 1 && blocks <= 32);
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, saxpy, 4096, 0));
        EXPECT(blocks == 0);
        int not_a_kernel;
        EXPECT_ERR(cudaFuncGetAttributes(&fa, &not_a_kernel), cudaErrorInvalidDeviceFunction);
        cudaGetLastError();
        checks += 4;
    }

    // many launches on two streams joined by an event: all applied, in order
    {
        const int m = 4096;
        int *p, h[m];
        CHECK(cudaMalloc(&p, sizeof h));
        CHECK(cudaMemset(p, 0, sizeof h));
        cudaStream_t s1, s2;
        cudaEvent_t ev;
        CHECK(cudaStreamCreate(&s1));
        CHECK(cudaStreamCreate(&s2));
        CHECK(cudaEventCreate(&ev));
        for (int i = 0; i < 25; i++) add_one<<<m / 256, 256, 0, s1>>>(p, m);
        CHECK(cudaEventRecord(ev, s1));
        CHECK(cudaStreamWaitEvent(s2, ev, 0));
        for (int i = 0; i < 25; i++) add_one<<<m / 256, 256, 0, s2>>>(p, m);
        CHECK(cudaMemcpyAsync(h, p, sizeof h, cudaMemcpyDeviceToHost, s2));
        CHECK(cudaStreamSynchronize(s2));
        for (int i = 0; i < m; i++) EXPECT(h[i] == 50);
        CHECK(cudaStreamDestroy(s1));
        CHECK(cudaStreamDestroy(s2));
        CHECK(cudaEventDestroy(ev));
        CHECK(cudaFree(p));
        checks++;
    }

    // a kernel memory fault: the launch returns success, the next synchronizing call reports it, and it is sticky
    if (argc > 1 && strcmp(argv[1], "fault") == 0) {
        bad_store<<<1, 32>>>((int *)(uintptr_t)0x10);
        EXPECT_ERR(cudaGetLastError(), cudaSuccess);
        cudaError_t e = cudaDeviceSynchronize();
        printf("fault %s\n", cudaGetErrorName(e));
        EXPECT(e == cudaErrorIllegalAddress);
        EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalAddress);   // sticky
        void *q;
        EXPECT(cudaMalloc(&q, 16) != cudaSuccess);
        checks += 3;
    }
    printf("OK %ld\n", checks);
    return 0;
}
