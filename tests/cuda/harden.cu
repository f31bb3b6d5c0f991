// Hang and bound scenarios driven by tests/security/test_hangs.py. Timings go to stderr as "<WHAT> <error> <ms>".
//   harden printf BYTES : every thread prints one 64-byte line, BYTES / 64 threads in all (BYTES = 1 MiB fills
//                         the default printf FIFO exactly), then cudaDeviceSynchronize
//   harden long         : a small kernel (the daemon's --emu-slowdown makes it last), "LAUNCHED" on stdout, then
//                         cudaDeviceSynchronize
//   harden grid         : an empty kernel over the largest grid the device takes, then cudaDeviceSynchronize
//   harden idle SECONDS : allocates, sleeps SECONDS without a CUDA call, then uses the allocation ("IDLE OK")
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 63 characters + newline: "line 0000123 ......\n"
__global__ void print_lines() {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    printf("line %07u abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX\n", i);
}

__global__ void touch(int *p) {
    if (threadIdx.x == 0) p[blockIdx.x] += 1;
}

__global__ void empty() {}

static void report(const char *what, cudaError_t e, double t0) {
    fprintf(stderr, "%s %s %.0f\n", what, cudaGetErrorName(e), now_ms() - t0);
    fflush(stderr);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "printf") == 0) {
        unsigned lines = (unsigned)(strtoull(argc > 2 ? argv[2] : "1048576", nullptr, 10) / 64);
        print_lines<<<lines / 256, 256>>>();
        CHECK(cudaGetLastError());
        double t0 = now_ms();
        cudaError_t e = cudaDeviceSynchronize();
        fflush(stdout);
        report("SYNC", e, t0);
        return e == cudaSuccess ? 0 : 1;
    }
    if (strcmp(mode, "long") == 0) {
        int *p;
        CHECK(cudaMalloc(&p, 64 * sizeof(int)));
        CHECK(cudaMemset(p, 0, 64 * sizeof(int)));
        touch<<<64, 32>>>(p);
        printf("LAUNCHED\n");
        fflush(stdout);
        double t0 = now_ms();
        cudaError_t e = cudaDeviceSynchronize();
        report("SYNC", e, t0);
        int h[64];
        CHECK(cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost));
        EXPECT(h[0] == 1 && h[63] == 1);
        return e == cudaSuccess ? 0 : 1;
    }
    if (strcmp(mode, "grid") == 0) {
        int max_x;
        CHECK(cudaDeviceGetAttribute(&max_x, cudaDevAttrMaxGridDimX, 0));
        double t0 = now_ms();
        empty<<<dim3((unsigned)max_x, 65535, 1), 1024>>>();
        cudaError_t e = cudaDeviceSynchronize();
        report("SYNC", e, t0);
        return 0;
    }
    if (strcmp(mode, "idle") == 0) {
        int *p;
        CHECK(cudaMalloc(&p, 4096));
        sleep((unsigned)atoi(argc > 2 ? argv[2] : "1"));
        CHECK(cudaMemset(p, 1, 4096));
        int h = 0;
        CHECK(cudaMemcpy(&h, p, sizeof h, cudaMemcpyDeviceToHost));
        EXPECT(h == 0x01010101);
        CHECK(cudaFree(p));
        printf("IDLE OK\n");
        return 0;
    }
    fprintf(stderr, "usage: harden printf BYTES | long | grid | idle SECONDS\n");
    return 2;
}
