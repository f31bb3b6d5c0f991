// Memory round trips through libvcudart: every copy kind, many sizes, 2D, memset, symbols, host memory, mem info.
// Prints "OK <checks>" on success; any mismatch prints FAIL and exits 1. Usage: api_memory [max_bytes]
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>

#include "check.h"

static void fill(unsigned char *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; p[i] = (unsigned char)x; }
}

static long checks = 0;

static void roundtrip(size_t n, unsigned seed) {
    unsigned char *h = (unsigned char *)malloc(n), *back = (unsigned char *)malloc(n);
    EXPECT(h && back);
    fill(h, n, seed);
    void *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, n));
    CHECK(cudaMalloc(&b, n));
    CHECK(cudaMemcpy(a, h, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    memset(back, 0, n);
    CHECK(cudaMemcpy(back, b, n, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(h, back, n) == 0);
    // cudaMemcpyDefault infers the direction from the pointers
    fill(h, n, seed + 7);
    CHECK(cudaMemcpy(a, h, n, cudaMemcpyDefault));
    CHECK(cudaMemcpy(b, a, n, cudaMemcpyDefault));
    memset(back, 0, n);
    CHECK(cudaMemcpy(back, b, n, cudaMemcpyDefault));
    EXPECT(memcmp(h, back, n) == 0);
    // host to host
    memset(back, 0, n);
    CHECK(cudaMemcpy(back, h, n, cudaMemcpyHostToHost));
    EXPECT(memcmp(h, back, n) == 0);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    free(h);
    free(back);
    checks += 4;
}

int main(int argc, char **argv) {
    size_t max_bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t)1 << 20;
    for (size_t n = 1; n <= max_bytes; n = n < 16 ? n + 1 : n * 4 + 3) roundtrip(n, (unsigned)n);
    roundtrip(max_bytes, 99);

    // offsets inside an allocation
    {
        const size_t n = 4096;
        unsigned char h[n], back[n];
        fill(h, n, 5);
        unsigned char *d;
        CHECK(cudaMalloc(&d, n));
        CHECK(cudaMemset(d, 0xAB, n));
        CHECK(cudaMemcpy(d + 100, h, 1000, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) EXPECT(back[i] == ((i >= 100 && i < 1100) ? h[i - 100] : 0xAB));
        CHECK(cudaMemcpy(d + 2000, d + 100, 1000, cudaMemcpyDeviceToDevice));
        CHECK(cudaMemcpy(back, d + 2000, 1000, cudaMemcpyDeviceToHost));
        EXPECT(memcmp(back, h, 1000) == 0);
        CHECK(cudaFree(d));
        checks += 2;
    }

    // memset and async variants on a stream
    {
        const size_t n = 1 << 16;
        unsigned char *h, *d;
        CHECK(cudaMallocHost((void **)&h, n));
        EXPECT(((uintptr_t)h & 255) == 0);
        CHECK(cudaMalloc(&d, n));
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        CHECK(cudaMemsetAsync(d, 0x5A, n, s));
        CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        for (size_t i = 0; i < n; i++) EXPECT(h[i] == 0x5A);
        fill(h, n, 3);
        unsigned char *copy = (unsigned char *)malloc(n);
        memcpy(copy, h, n);
        CHECK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
        memset(h, 0, n);
        CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        EXPECT(memcmp(h, copy, n) == 0);
        CHECK(cudaStreamDestroy(s));
        CHECK(cudaFree(d));
        CHECK(cudaFreeHost(h));
        free(copy);
        checks += 3;
    }

    // host allocations
    {
        void *p;
        CHECK(cudaHostAlloc(&p, 1000, cudaHostAllocDefault));
        EXPECT(((uintptr_t)p & 255) == 0);
        unsigned flags = 99;
        CHECK(cudaHostGetFlags(&flags, p));
        EXPECT(flags == 0);
        cudaPointerAttributes at;
        CHECK(cudaPointerGetAttributes(&at, p));
        EXPECT(at.type == cudaMemoryTypeHost);
        CHECK(cudaFreeHost(p));
        char local[64];
        CHECK(cudaHostRegister(local, sizeof local, 0));
        CHECK(cudaHostUnregister(local));
        checks += 3;
    }

    // 2D copies and memset2D
    {
        const size_t w = 37, hgt = 19, spitch = 50;
        size_t dpitch;
        unsigned char *d;
        CHECK(cudaMallocPitch((void **)&d, &dpitch, w, hgt));
        EXPECT(dpitch >= w);
        unsigned char src[spitch * hgt], back[spitch * hgt];
        fill(src, sizeof src, 11);
        CHECK(cudaMemset2D(d, dpitch, 0x11, w, hgt));
        CHECK(cudaMemcpy2D(d, dpitch, src, spitch, w - 5, hgt, cudaMemcpyHostToDevice));
        memset(back, 0, sizeof back);
        CHECK(cudaMemcpy2D(back, spitch, d, dpitch, w, hgt, cudaMemcpyDeviceToHost));
        for (size_t r = 0; r < hgt; r++)
            for (size_t c = 0; c < w; c++)
                EXPECT(back[r * spitch + c] == (c < w - 5 ? src[r * spitch + c] : 0x11));
        unsigned char *d2;
        CHECK(cudaMalloc(&d2, w * hgt));
        CHECK(cudaMemcpy2D(d2, w, d, dpitch, w, hgt, cudaMemcpyDeviceToDevice));
        unsigned char packed[w * hgt];
        CHECK(cudaMemcpy(packed, d2, sizeof packed, cudaMemcpyDeviceToHost));
        for (size_t r = 0; r < hgt; r++) EXPECT(memcmp(packed + r * w, back + r * spitch, w) == 0);
        CHECK(cudaMemcpy2DAsync(back, w, d2, w, w, hgt, cudaMemcpyDeviceToHost, 0));
        CHECK(cudaDeviceSynchronize());
        EXPECT(memcmp(back, packed, sizeof packed) == 0);
        EXPECT(cudaMemcpy2D(d2, 4, d, dpitch, w, hgt, cudaMemcpyDeviceToDevice) == cudaErrorInvalidPitchValue);
        EXPECT(cudaGetLastError() == cudaErrorInvalidPitchValue);
        CHECK(cudaFree(d));
        CHECK(cudaFree(d2));
        checks += 4;
    }

    // mem info reflects allocations. cudaMemGetInfo's free is the device's: NVIDIA documents (cuMemGetInfo) that it
    // is the memory free "according to the OS", and that in a multi-tenant situation an allocation or free by
    // another process, or another thread of this one, between two calls moves it too. On a GPU shared with other
    // work (the real-GPU check runs 8 test processes on one GPU; this check failed there in GPU runs 1 and 4, passed
    // in run 2) a 64 MiB allocation need not show in one pair of calls, so it must show in one of a few tries (each
    // with the allocation freed again); the total never changes. tools/gpu_probes/gpu_probe_va_hints.py records
    // what cuMemCreate and cuMemAlloc move free by natively on a GPU host.
    {
        size_t f0, t0, f1, t1;
        int seen = 0;
        for (int tries = 0; tries < 8 && !seen; tries++) {
            CHECK(cudaMemGetInfo(&f0, &t0));
            EXPECT(t0 > 0 && f0 <= t0);
            void *p;
            CHECK(cudaMalloc(&p, 64 << 20));
            CHECK(cudaMemGetInfo(&f1, &t1));
            EXPECT(t1 == t0);
            seen = f1 + (64 << 20) <= f0;
            cudaPointerAttributes at;
            CHECK(cudaPointerGetAttributes(&at, (char *)p + 5));
            EXPECT(at.type == cudaMemoryTypeDevice && at.device == 0);
            CHECK(cudaFree(p));
        }
        EXPECT(seen);
        checks += 2;
    }
    CHECK(cudaDeviceSynchronize());
    printf("OK %ld\n", checks);
    return 0;
}
