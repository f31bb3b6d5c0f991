// Threads driving GPUs on different hosts run in parallel: while thread 0 waits for a long kernel on GPU0, thread 1
// completes round trips on GPU1. Prints "T0 <ms>" (kernel + sync on GPU0), "T1 <ms>" (GPU1 work, measured while
// thread 0 is blocked) and "OK".
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "check.h"

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__global__ void spin(int *out, int iters) {
    int acc = threadIdx.x;
    for (int i = 0; i < iters; i++) acc = acc * 1664525 + 1013904223;
    out[threadIdx.x] = acc;
}

static std::atomic<int> started{0};

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    if (n != 2) { printf("FAIL need 2 GPUs, have %d\n", n); return 1; }
    double t0_ms = 0, t1_ms = 0;
    std::thread a([&] {
        CHECK(cudaSetDevice(0));
        int *d;
        CHECK(cudaMalloc(&d, 256 * sizeof(int)));
        double t = now_ms();
        spin<<<1, 256>>>(d, iters);
        started = 1;
        CHECK(cudaDeviceSynchronize());
        t0_ms = now_ms() - t;
    });
    std::thread b([&] {
        CHECK(cudaSetDevice(1));
        int *d, h[256];
        CHECK(cudaMalloc(&d, sizeof h));
        while (!started) std::this_thread::yield();
        double t = now_ms();
        for (int i = 0; i < 20; i++) {
            CHECK(cudaMemset(d, i, sizeof h));
            CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        }
        t1_ms = now_ms() - t;
    });
    a.join();
    b.join();
    printf("T0 %.0f\nT1 %.0f\nOK\n", t0_ms, t1_ms);
    return 0;
}
