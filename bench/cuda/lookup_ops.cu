// N calls of one kind, for bench/alloc_lookup_bench.py's count of the client's address lookups per call: run once
// with N and once with 0, the difference over N is what one call costs in lookups. Usage: lookup_ops MODE N, MODE
// one of launch, memset, h2d_pageable, h2d_pinned, d2h_pageable, d2d, memcpy_default.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

__global__ void touch(float *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1.0f;
}

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorName(e)); return 1; } } while (0)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODE N\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    int n = atoi(argv[2]);
    const size_t sizes[] = { 512, 4096, 65536, 1 << 20 };
    float *bufs[16];
    for (int i = 0; i < 16; i++)
        CHECK(cudaMalloc(&bufs[i], sizes[i % 4]));
    float *pinned, *pageable = (float *)malloc(4096);
    CHECK(cudaMallocHost(&pinned, 4096));
    memset(pageable, 0, 4096);
    for (int i = 0; i < n; i++) {
        float *d = bufs[i % 16];
        if (!strcmp(mode, "launch"))
            touch<<<1, 32>>>(d, 32);
        else if (!strcmp(mode, "memset"))
            CHECK(cudaMemsetAsync(d, 0, 256));
        else if (!strcmp(mode, "h2d_pageable"))
            CHECK(cudaMemcpyAsync(d, pageable, 256, cudaMemcpyHostToDevice));
        else if (!strcmp(mode, "h2d_pinned"))
            CHECK(cudaMemcpyAsync(d, pinned, 256, cudaMemcpyHostToDevice));
        else if (!strcmp(mode, "d2h_pageable"))
            CHECK(cudaMemcpy(pageable, d, 256, cudaMemcpyDeviceToHost));
        else if (!strcmp(mode, "d2d"))
            CHECK(cudaMemcpyAsync(bufs[(i + 1) % 16], d, 256, cudaMemcpyDeviceToDevice));
        else if (!strcmp(mode, "memcpy_default"))
            CHECK(cudaMemcpyAsync(d, pageable, 256, cudaMemcpyDefault));
        else {
            fprintf(stderr, "unknown mode %s\n", mode);
            return 2;
        }
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("OK %s %d\n", mode, n);
    return 0;
}
