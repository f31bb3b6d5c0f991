// Emulator end-to-end program: a failing device assert ends the kernel with cudaErrorAssert.
#include <cstdio>
#include <cassert>
#include <cuda_runtime.h>

extern "C" __global__ void checkPositive(const int* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(v[i] >= 0);
}

int main() {
    int h[64];
    for (int i = 0; i < 64; i++) h[i] = i == 37 ? -1 : i;
    int* d; cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    checkPositive<<<2, 32>>>(d, 64);
    cudaError_t e = cudaDeviceSynchronize();
    printf("sync: %s\n", cudaGetErrorName(e));
    if (e != cudaErrorAssert) { printf("FAIL expected cudaErrorAssert\n"); return 1; }
    printf("PASS emu_assert\n");
    return 0;
}
