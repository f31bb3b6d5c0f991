// Emulator end-to-end program: __constant__/__device__ variables with cudaMemcpyToSymbol, local arrays and a
// non-inlined device function taking a struct, printf.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

__constant__ float cCoef[16];
__device__ int gCounter;
__device__ float gTable[8] = {1.f, 2.f, 3.f};   // short initializer: the rest is zero

extern "C" __global__ void useSymbols(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = cCoef[i % 16] * gTable[i % 8];
    if (i == 0) gCounter += 5;
}

struct S { int a; float b; double c; };

__device__ __noinline__ float callee(S s, const float* p, int k) {
    return s.a + s.b + (float)s.c + p[k];
}

extern "C" __global__ void localArr(const int* idx, const float* p, float* out, int n) {
    float arr[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 32; k++) arr[k] = k * 1.5f + i;
    if (i < n) {
        S s = {i, 0.5f, 2.0};
        out[i] = arr[idx[i] & 31] + callee(s, p, i % 4);
    }
}

extern "C" __global__ void hello(int n, float f, double d, const char* tag) {
    if (threadIdx.x < 2)
        printf("block %d thread %d n=%d f=%.3f d=%g x=%#x s=%s\n", blockIdx.x, threadIdx.x, n, f, d, 255, "hi");
}

extern "C" __global__ void fmtTest(int i, unsigned u, long long ll, double d, float f, const char* s) {
    printf("[%d|%5d|%-5d|%05d|%+d|%u|%x|%X|%#o|%lld|%llx|%c|%%]\n", i, i, i, i, i, u, u, u, u, ll, ll, 'A' + (i & 7));
    printf("[%f|%.2f|%10.3e|%g|%G|%e|%8.3g]\n", d, d, d, d, d * 1e20, (double)f, f);
    printf("[%s|%.3s|%8s|%-8s|%p]\n", s, s, s, s, (void*)0);
}

int main() {
    float coef[16];
    for (int i = 0; i < 16; i++) coef[i] = i * 0.5f;
    CHECK(cudaMemcpyToSymbol(cCoef, coef, sizeof coef));
    int zero = 10; CHECK(cudaMemcpyToSymbol(gCounter, &zero, 4));
    const int n = 100;
    float* dout; CHECK(cudaMalloc(&dout, n * 4));
    useSymbols<<<1, 128>>>(dout, n);
    float out[n];
    CHECK(cudaMemcpy(out, dout, n * 4, cudaMemcpyDeviceToHost));
    float tbl[8] = {1.f, 2.f, 3.f};
    for (int i = 0; i < n; i++) if (out[i] != coef[i % 16] * tbl[i % 8]) { printf("FAIL symbols %d\n", i); return 1; }
    int cnt; CHECK(cudaMemcpyFromSymbol(&cnt, gCounter, 4));
    if (cnt != 15) { printf("FAIL gCounter %d\n", cnt); return 1; }
    float* addr; CHECK(cudaGetSymbolAddress((void**)&addr, gTable));
    float t3; CHECK(cudaMemcpy(&t3, addr + 2, 4, cudaMemcpyDeviceToHost));
    if (t3 != 3.f) { printf("FAIL symbol address\n"); return 1; }

    int idx[n]; float p[4] = {10.f, 20.f, 30.f, 40.f};
    for (int i = 0; i < n; i++) idx[i] = i * 7;
    int* didx; float* dp;
    CHECK(cudaMalloc(&didx, n * 4)); CHECK(cudaMalloc(&dp, 16));
    CHECK(cudaMemcpy(didx, idx, n * 4, cudaMemcpyHostToDevice)); CHECK(cudaMemcpy(dp, p, 16, cudaMemcpyHostToDevice));
    localArr<<<1, 128>>>(didx, dp, dout, n);
    CHECK(cudaMemcpy(out, dout, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float e = ((idx[i] & 31) * 1.5f + i) + (i + 0.5f + 2.0f + p[i % 4]);
        if (out[i] != e) { printf("FAIL localArr %d: %f vs %f\n", i, out[i], e); return 1; }
    }
    hello<<<2, 32>>>(7, 1.5f, 2.25, "x");
    CHECK(cudaDeviceSynchronize());
    printf("PASS emu_misc\n");
    return 0;
}
