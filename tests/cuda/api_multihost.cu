// Two hosts = two GPUs: each thread drives one GPU; copies between the GPUs are staged through the client.
// Holds its allocations until a line arrives on stdin so the test can inspect each daemon, then prints "OK".
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <thread>
#include <vector>

#include "check.h"

static const size_t MiB = 1 << 20;
static unsigned char *buf[2];
static size_t size_of[2] = {3 * MiB, 5 * MiB};

static void worker(int dev) {
    CHECK(cudaSetDevice(dev));
    int cur = -1;
    CHECK(cudaGetDevice(&cur));
    EXPECT(cur == dev);
    size_t n = size_of[dev];
    CHECK(cudaMalloc(&buf[dev], n));
    std::vector<unsigned char> h(n), back(n);
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + dev * 101 + round);
        CHECK(cudaMemcpy(buf[dev], h.data(), n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(back.data(), buf[dev], n, cudaMemcpyDeviceToHost));
        EXPECT(memcmp(h.data(), back.data(), n) == 0);
        CHECK(cudaGetDevice(&cur));
        EXPECT(cur == dev);   // the other thread's cudaSetDevice never leaks into this one
    }
    CHECK(cudaDeviceSynchronize());
}

int main() {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    EXPECT(n == 2);
    cudaDeviceProp p0, p1;
    CHECK(cudaGetDeviceProperties(&p0, 0));
    CHECK(cudaGetDeviceProperties(&p1, 1));
    std::thread t0(worker, 0), t1(worker, 1);
    t0.join();
    t1.join();
    printf("ptr0 %llu ptr1 %llu\n", (unsigned long long)(uintptr_t)buf[0], (unsigned long long)(uintptr_t)buf[1]);
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, buf[1]));
    EXPECT(a.type == cudaMemoryTypeDevice && a.device == 1);
    CHECK(cudaPointerGetAttributes(&a, buf[0]));
    EXPECT(a.device == 0);

    // GPU0 -> GPU1 (peer copy and cudaMemcpyDefault), then back through a host buffer
    CHECK(cudaSetDevice(1));
    unsigned char *b1;
    CHECK(cudaMalloc(&b1, size_of[0]));
    CHECK(cudaMemcpyPeer(b1, 1, buf[0], 0, size_of[0]));
    std::vector<unsigned char> x(size_of[0]), y(size_of[0]);
    CHECK(cudaMemcpy(x.data(), buf[0], size_of[0], cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(y.data(), b1, size_of[0], cudaMemcpyDeviceToHost));
    EXPECT(memcmp(x.data(), y.data(), x.size()) == 0);
    CHECK(cudaMemset(b1, 0x3C, size_of[0]));
    CHECK(cudaMemcpy(buf[0], b1, MiB, cudaMemcpyDefault));                // GPU1 -> GPU0
    CHECK(cudaMemcpyPeerAsync(buf[0] + MiB, 0, b1, 1, MiB, 0));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(x.data(), buf[0], size_of[0], cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < 2 * MiB; i++) EXPECT(x[i] == 0x3C);
    EXPECT(x[2 * MiB] == y[2 * MiB]);
    int can = 1;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
    EXPECT(can == 0);
    printf("READY\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
    CHECK(cudaFree(buf[0]));
    CHECK(cudaFree(buf[1]));
    CHECK(cudaFree(b1));
    printf("OK\n");
    return 0;
}
