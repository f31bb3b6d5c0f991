// Blocking round trips (issue 10, P4): cudaMemcpyAsync device-to-host into pinned memory returns before its bytes
// arrive and they are there after the synchronization that covers it; cudaEventElapsedTime after a synchronizing
// call needs no round trip. The Python test reads PYVGPU_STATS to count what blocked.
// Prints "OK" at the end; "FAIL ..." and exit 1 on the first failure.
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"

__global__ void fill(uint32_t *p, size_t n, uint32_t base)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = base + (uint32_t)i;
}

__global__ void poke(uint32_t *p) { *p = 7; }

static bool holds(const uint32_t *h, size_t n, uint32_t base)
{
    for (size_t i = 0; i < n; i++)
        if (h[i] != base + (uint32_t)i)
            return false;
    return true;
}

int main()
{
    const size_t n = 1 << 16;                 // 256 KiB
    uint32_t *d = nullptr, *h = nullptr;
    CHECK(cudaMalloc(&d, n * 4));
    CHECK(cudaMallocHost(&h, n * 4));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // 1. snapshot in stream order: the copy sees the first fill, not the second one queued after it
    fill<<<64, 256, 0, s>>>(d, n, 1000);
    memset(h, 0, n * 4);
    CHECK(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDeviceToHost, s));
    fill<<<64, 256, 0, s>>>(d, n, 5000);
    CHECK(cudaStreamSynchronize(s));
    EXPECT(holds(h, n, 1000));

    // 2. pieces into one buffer, covered by an event synchronization
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    memset(h, 0, n * 4);
    for (int k = 0; k < 4; k++)
        CHECK(cudaMemcpyAsync(h + k * (n / 4), d + k * (n / 4), n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaEventRecord(done, s));
    CHECK(cudaEventSynchronize(done));
    EXPECT(holds(h, n, 5000));

    // 3. more than the 64 MiB window in flight: 6 x 16 MiB, all correct after one device synchronization
    const size_t nbytes = (size_t)96 << 20;
    const size_t nw = nbytes / 4;
    uint32_t *dbig = nullptr, *hbig = nullptr;
    CHECK(cudaMalloc(&dbig, nbytes));
    CHECK(cudaMallocHost(&hbig, nbytes));
    fill<<<256, 256>>>(dbig, nw, 77);
    const size_t piece = ((size_t)16 << 20) / 4;
    for (int k = 0; k < 6; k++)
        CHECK(cudaMemcpyAsync(hbig + k * piece, dbig + k * piece, piece * 4, cudaMemcpyDeviceToHost, s));
    CHECK(cudaDeviceSynchronize());
    EXPECT(holds(hbig, nw, 77));

    // 4. freeing the pinned buffer while a copy into it is on its way waits for it
    fill<<<64, 256, 0, s>>>(d, n, 42);
    CHECK(cudaMemcpyAsync(hbig, d, n * 4, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeHost(hbig));
    CHECK(cudaFree(dbig));

    // 5. pageable destination: synchronous, as CUDA's (bytes there when the call returns)
    std::vector<uint32_t> pageable(n);
    CHECK(cudaMemcpyAsync(pageable.data(), d, n * 4, cudaMemcpyDeviceToHost, s));
    EXPECT(holds(pageable.data(), n, 42));

    // 6. event times: after a synchronizing call elapsed times need no round trip (the test counts EVENT_ELAPSED)
    cudaEvent_t e0, e1, untimed;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    CHECK(cudaEventRecord(e0, s));
    fill<<<64, 256, 0, s>>>(d, n, 1);
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaMemcpy(pageable.data(), d, n * 4, cudaMemcpyDeviceToHost));     // the step's synchronizing copy
    float a = -1, b = -1, c = -1;
    CHECK(cudaEventElapsedTime(&a, e0, e1));                                   // 0 round trips
    EXPECT(a >= 0);
    fill<<<64, 256, 0, s>>>(d, n, 2);
    CHECK(cudaEventRecord(e1, s));                                             // a newer record: not known yet
    CHECK(cudaEventElapsedTime(&b, e0, e1));                                   // 1 round trip (EVENT_ELAPSED)
    EXPECT(b >= a);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventElapsedTime(&c, e0, e1));                                   // 0: the sync's reply had it
    EXPECT(c - b < 1e-3f && b - c < 1e-3f);
    CHECK(cudaEventRecord(untimed, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT_ERR(cudaEventElapsedTime(&a, e0, untimed), cudaErrorInvalidResourceHandle);   // 1 round trip
    printf("elapsed %.6f %.6f %.6f\n", a, b, c);

    // 7. a failure of the detached copy is the next synchronization's (a kernel fault is sticky)
    poke<<<1, 1, 0, s>>>((uint32_t *)0x10);
    CHECK(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDeviceToHost, s));
    EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    CHECK(cudaDeviceReset());
    printf("OK\n");
    return 0;
}
