// Which host-to-device copies tell the daemon to wait for them (HTOD_LANDED): the synchronous forms (cudaMemcpy,
// cudaMemcpyToSymbol, cudaMemcpyDefault from a host pointer), never the asynchronous ones (cudaMemcpyAsync,
// cudaMemcpyToSymbolAsync, on a stream or the default stream) and not cudaMemcpy2D (the daemon finishes a 2D copy
// before its next op anyway). The Python test counts the requests with PYVGPU_STATS (6 synchronous 1D copies of
// 15, none blocking); every copy's bytes are read back or summed on the device and checked. Prints "OK" at the end; "FAIL ..." and exit 1 on
// the first failure.
#include <cstring>

#include "check.h"

__device__ unsigned sym[64];

__global__ void sum(const unsigned *p, size_t n, unsigned *out)
{
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s += p[i];
    *out = s;
}

int main()
{
    const size_t n = 1024;
    unsigned h[n], back[n], got;
    unsigned *d, *out;
    CHECK(cudaMalloc(&d, sizeof h));
    CHECK(cudaMalloc(&out, sizeof got));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned want = 0;
    for (int r = 0; r < 3; r++) {                        // synchronous: 3
        for (size_t i = 0; i < n; i++)
            h[i] = (unsigned)(r * n + i);
        CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
        sum<<<1, 1, 0, s>>>(d, n, out);
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
        want = 0;
        for (size_t i = 0; i < n; i++)
            want += h[i];
        EXPECT(got == want);
    }
    for (int r = 0; r < 5; r++) {                        // asynchronous: 4 on s, 1 on the default stream
        for (size_t i = 0; i < n; i++)
            h[i] = (unsigned)(7 * r + i);
        CHECK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, r < 4 ? s : 0));
        CHECK(cudaStreamSynchronize(r < 4 ? s : 0));    // h is pageable: reused only after the copy
        CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
        EXPECT(memcmp(back, h, sizeof h) == 0);
    }
    for (int r = 0; r < 6; r++) {                        // to a symbol: 2 synchronous, 4 asynchronous
        unsigned v[64];
        for (int i = 0; i < 64; i++)
            v[i] = (unsigned)(r * 1000 + i);
        if (r < 2)
            CHECK(cudaMemcpyToSymbol(sym, v, sizeof v));
        else
            CHECK(cudaMemcpyToSymbolAsync(sym, v, sizeof v, 0, cudaMemcpyHostToDevice, s));
        CHECK(cudaStreamSynchronize(s));
        unsigned w[64];
        CHECK(cudaMemcpyFromSymbol(w, sym, sizeof w));
        EXPECT(memcmp(v, w, sizeof v) == 0);
    }
    for (size_t i = 0; i < n; i++)                       // cudaMemcpyDefault from a host pointer: synchronous, 1
        h[i] = (unsigned)(3 * i + 1);
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyDefault));
    CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back, h, sizeof h) == 0);
    for (size_t i = 0; i < n; i++)                       // 2D: none
        h[i] = (unsigned)(5 * i);
    CHECK(cudaMemcpy2D(d, 64 * sizeof(unsigned), h, 64 * sizeof(unsigned), 64 * sizeof(unsigned), n / 64,
                       cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back, h, sizeof h) == 0);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(out));
    printf("OK\n");
    return 0;
}
