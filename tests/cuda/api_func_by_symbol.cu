// cudaGetFuncBySymbol as XLA uses it: the driver's CUfunction of a kernel registered by the runtime, launched with
// cuLaunchKernel and queried with cuFuncGetAttribute; its results must equal the same kernel launched through the
// runtime (and the host's), its attributes cudaFuncGetAttributes'. Errors as CUDA documents them.
// Built -cudart shared and linked with -lcuda. Prints "OK <checks>".
#include <cuda.h>
#include <cuda_runtime.h>
#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "drv_check.h"

__global__ void affine(const float *x, float *y, float a, float b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + b * (float)i;
}

static int not_a_kernel;

int main()
{
    const int n = 1000;
    const float a = 1.5f, b = -0.25f;
    std::vector<float> hx(n), by_runtime(n), by_driver(n);
    for (int i = 0; i < n; i++)
        hx[i] = (float)((i * 37) % 101) / 7.0f;
    float *x, *y1, *y2;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y1, n * sizeof(float)));
    CHECK(cudaMalloc(&y2, n * sizeof(float)));
    CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    affine<<<(n + 127) / 128, 128>>>(x, y1, a, b, n);
    CHECK(cudaGetLastError());

    cudaFunction_t f = nullptr, again = nullptr;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)affine));
    OKC(f != nullptr);
    CHECK(cudaGetFuncBySymbol(&again, (const void *)affine));
    OKC(again == f);                                      // one function per kernel and device
    int nn = n;
    float aa = a, bb = b;
    void *args[] = { &x, &y2, &aa, &bb, &nn };
    DCHECK(cuLaunchKernel((CUfunction)f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(by_runtime.data(), y1, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(by_driver.data(), y2, n * sizeof(float), cudaMemcpyDeviceToHost));
    OKC(memcmp(by_runtime.data(), by_driver.data(), n * sizeof(float)) == 0);
    int right = 0;
    for (int i = 0; i < n; i++)
        right += fabsf(by_driver[i] - (a * hx[i] + b * (float)i)) <= 1e-5f * (1.0f + fabsf(by_driver[i]));  // FMA
    OKC(right == n);

    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, (const void *)affine));
    int regs = -1, max_threads = -1;
    DCHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)f));
    DCHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, (CUfunction)f));
    OKC(regs == fa.numRegs && max_threads == fa.maxThreadsPerBlock);

    EXPECT_ERR(cudaGetFuncBySymbol(nullptr, (const void *)affine), cudaErrorInvalidValue);
    checks++;
    EXPECT_ERR(cudaGetFuncBySymbol(&again, (const void *)&not_a_kernel), cudaErrorInvalidDeviceFunction);
    checks++;
    CHECK(cudaFree(x));
    CHECK(cudaFree(y1));
    CHECK(cudaFree(y2));
    printf("OK %ld\n", checks);
    return 0;
}
