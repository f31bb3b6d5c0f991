// cudaDeviceReset between two launches: shows what the runtime does with context-local storage on a reset.
#include <cstdio>
__global__ void k(int *a){ a[threadIdx.x] = 1; }
int main(){ int *d; cudaError_t e;
 e = cudaMalloc(&d, 64); fprintf(stderr, "==== malloc %d\n", e);
 k<<<1,16>>>(d); fprintf(stderr, "==== launch %d\n", cudaGetLastError());
 e = cudaDeviceReset(); fprintf(stderr, "==== reset %d\n", e);
 e = cudaMalloc(&d, 64); fprintf(stderr, "==== malloc2 %d\n", e);
 k<<<1,16>>>(d); fprintf(stderr, "==== launch2 %d\n", cudaGetLastError());
 return 0; }
