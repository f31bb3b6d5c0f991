// Many threads share one connection per host: each drives its own stream with copies and launches concurrently
// (replies are demultiplexed by request id). Also: stream-ordered allocation, host functions and callbacks,
// capture status, PCI bus id. Prints "OK <checks>".
#include <cuda_runtime.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"

__global__ void scale(int *p, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * k + 1;
}

static std::atomic<long> checks{0};

static void worker(int t, int ndev) {
    CHECK(cudaSetDevice(t % ndev));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    const int n = 2048 + 64 * t;
    std::vector<int> h(n), back(n);
    int *d;
    CHECK(cudaMallocAsync((void **)&d, n * sizeof(int), s));
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < n; i++) h[i] = i ^ (t * 131 + round);
        CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
        scale<<<(n + 255) / 256, 256, 0, s>>>(d, n, t + 2);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) EXPECT(back[i] == h[i] * (t + 2) + 1);
        checks++;
    }
    CHECK(cudaFreeAsync(d, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
}

static void host_fn(void *arg) { ++*(int *)arg; }
static void callback(cudaStream_t, cudaError_t status, void *arg) { *(int *)arg = status == cudaSuccess ? 7 : -1; }

int main() {
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; t++) ts.emplace_back(worker, t, ndev);
    for (auto &t : ts) t.join();
    EXPECT(checks == 80);

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamIsCapturing(s, &cs));
    EXPECT(cs == cudaStreamCaptureStatusNone);
    int calls = 0, cbv = 0;
    CHECK(cudaLaunchHostFunc(s, host_fn, &calls));
    CHECK(cudaStreamAddCallback(s, callback, &cbv, 0));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(calls == 1 && cbv == 7);
    char pci[32] = {0};
    CHECK(cudaDeviceGetPCIBusId(pci, sizeof pci, 0));
    EXPECT(strchr(pci, ':') != nullptr);
    int back = -1;
    CHECK(cudaDeviceGetByPCIBusId(&back, pci));
    EXPECT(back == 0 || ndev > 1);
    unsigned long long id0 = 7, id1 = 7;
    CHECK(cudaStreamGetId(0, &id0));
    CHECK(cudaStreamGetId(s, &id1));
    EXPECT(id0 == 0 && id1 > 1);
    CHECK(cudaStreamDestroy(s));
    const char *fname = nullptr;
    CHECK(cudaFuncGetName(&fname, scale));
    EXPECT(fname && strstr(fname, "scale"));
    printf("OK %ld\n", checks.load() + 3);
    return 0;
}
