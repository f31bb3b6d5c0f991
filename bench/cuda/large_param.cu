// The workload of NVIDIA's LargeKernelParameter sample at its defaults, written here: a one-thread kernel sums 8000
// ints, either 1024 of them from a 4 KB __grid_constant__ parameter and the rest from __constant__ memory copied
// before each launch, or all from a 32,000-byte parameter (CUDA 12.1's large kernel parameters); `iterations`
// (1000) launches of each after one checked launch of each, then the last result checked again.
//     large_param [iterations (1000)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); return 1; } } while (0)

#define TOTAL 8000
#define IN_PARAM 1024
#define IN_CONST (TOTAL - IN_PARAM)

struct SmallParams { int v[IN_PARAM]; };
struct LargeParams { int v[TOTAL]; };
__constant__ int overflow[IN_CONST];

__global__ void sumSmall(__grid_constant__ const SmallParams p, int *out)
{
    int s = 0;
    for (int i = 0; i < IN_PARAM; i++) s += p.v[i];
    for (int i = 0; i < IN_CONST; i++) s += overflow[i];
    *out = s;
}

__global__ void sumLarge(__grid_constant__ const LargeParams p, int *out)
{
    int s = 0;
    for (int i = 0; i < TOTAL; i++) s += p.v[i];
    *out = s;
}

int main(int argc, char **argv)
{
    const int iterations = argc > 1 ? atoi(argv[1]) : 1000;
    auto t0 = std::chrono::steady_clock::now();
    static SmallParams small;
    static LargeParams large;
    static int rest[IN_CONST];
    int expect = 0;
    for (int i = 0; i < TOTAL; i++) {
        int v = (i * 7 + 3) & 0xff;
        expect += v;
        large.v[i] = v;
        if (i < IN_PARAM) small.v[i] = v; else rest[i - IN_PARAM] = v;
    }
    int *dOut, got = 0;
    CHECK(cudaMalloc(&dOut, sizeof(int)));
    CHECK(cudaMemcpyToSymbol(overflow, rest, sizeof rest));
    sumSmall<<<1, 1>>>(small, dOut);
    CHECK(cudaMemcpy(&got, dOut, sizeof got, cudaMemcpyDeviceToHost));
    if (got != expect) { printf("FAIL large_param: 4 KB + constant sum %d, expected %d\n", got, expect); return 1; }
    sumLarge<<<1, 1>>>(large, dOut);
    CHECK(cudaMemcpy(&got, dOut, sizeof got, cudaMemcpyDeviceToHost));
    if (got != expect) { printf("FAIL large_param: 32 KB sum %d, expected %d\n", got, expect); return 1; }
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; i++) {
        CHECK(cudaMemcpyToSymbol(overflow, rest, sizeof rest));
        sumSmall<<<1, 1>>>(small, dOut);
    }
    CHECK(cudaDeviceSynchronize());
    auto t2 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; i++)
        sumLarge<<<1, 1>>>(large, dOut);
    CHECK(cudaMemcpy(&got, dOut, sizeof got, cudaMemcpyDeviceToHost));
    auto t3 = std::chrono::steady_clock::now();
    if (got != expect) { printf("FAIL large_param: 32 KB sum %d, expected %d after the loop\n", got, expect); return 1; }
    auto us = [](auto a, auto b, int k) { return std::chrono::duration<double, std::micro>(b - a).count() / k; };
    printf("4 KB params + constants: %.0f us/launch, 32 KB params: %.0f us/launch, %.1f s\n", us(t1, t2, iterations),
           us(t2, t3, iterations), std::chrono::duration<double>(t3 - t0).count());
    printf("PASS large_param\n");
    return 0;
}
