// Compressed bulk payloads (issue 10, P5) through the client core: with PYVGPU_COMPRESS=lz4|zstd every host-to-device
// copy of at least 64 KiB travels compressed, and with the daemon's --compress always every device-to-host reply does,
// the detached cudaMemcpyAsync into pinned memory included. The bytes must come back exactly: zeros, noise (blocks
// stored as they are), training-like floats, sizes that are not a multiple of the 1 MiB block, a small copy.
// Prints "OK" at the end; "FAIL ..." and exit 1 on the first failure.
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"

static void make(std::vector<unsigned char> &v, size_t n, uint32_t seed)
{
    v.resize(n);
    uint32_t x = seed;
    size_t third = n / 3;
    memset(v.data(), 0, third);                                   // zeros
    for (size_t i = third; i < 2 * third; i++) {                   // noise
        x = x * 1664525u + 1013904223u;
        v[i] = (unsigned char)(x >> 24);
    }
    for (size_t i = 2 * third; i + 4 <= n; i += 4) {               // small floats, half of them zero
        x = x * 1664525u + 1013904223u;
        float f = (x >> 31) ? 0.0f : (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
        memcpy(&v[i], &f, 4);
    }
}

int main()
{
    const size_t sizes[] = { (3u << 20) + 12345, 100, 70000 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        std::vector<unsigned char> src, back(n, 0xAB);
        make(src, n, 17 + (uint32_t)k);
        unsigned char *d = nullptr, *pinned = nullptr;
        CHECK(cudaMalloc(&d, n));
        CHECK(cudaMemcpy(d, src.data(), n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
        EXPECT(memcmp(back.data(), src.data(), n) == 0);
        CHECK(cudaMallocHost(&pinned, n));
        memset(pinned, 0xCD, n);
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        CHECK(cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s));     // detached reply (op 460)
        CHECK(cudaStreamSynchronize(s));
        EXPECT(memcmp(pinned, src.data(), n) == 0);
        CHECK(cudaStreamDestroy(s));
        CHECK(cudaFreeHost(pinned));
        CHECK(cudaFree(d));
    }
    printf("OK\n");
    return 0;
}
