// Two hosts = two GPUs: each thread drives one GPU; copies between the GPUs are staged through the client.
// Holds its allocations until a line arrives on stdin so the test can inspect each daemon, then prints "OK".
// `api_multihost churn`: each thread allocates and frees many blocks of mixed sizes on its GPU (small ones, that a
// real GPU's backend sub-allocates, and large ones), fills and checks them with cudaMemcpyDefault, and frees half of
// the other thread's; every allocation is printed as "RANGE <device> <address> <size>" and every free as "FREE
// <device> <address>" so the test can check that no two live blocks' addresses overlap; every block kept to the end
// must still hold its own bytes (a range of one host misrouted to another would be overwritten); prints "CHURN OK".
// `api_multihost managed`: managed memory on GPU0, then on GPU1: the second is either elsewhere or refused with
// cudaErrorMemoryAllocation ("MANAGED1 <error name>"), and the first keeps its bytes; prints "MANAGED OK".
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
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

static const size_t churn_sizes[] = {100, 4096, 1 << 20, (3 << 20) + 5, 256, 65536 + 3};
struct Block { unsigned char *p; size_t n; int seed; };
static std::vector<Block> kept[2];
static std::mutex out_mu;

static std::vector<unsigned char> pattern(size_t n, int seed) {
    std::vector<unsigned char> h(n);
    for (size_t k = 0; k < n; k++) h[k] = (unsigned char)(k * 13 + seed);
    return h;
}

static void print_free(int dev, const unsigned char *p) {
    std::lock_guard<std::mutex> g(out_mu);
    printf("FREE %d %llu\n", dev, (unsigned long long)(uintptr_t)p);
}

static void churn(int dev) {
    CHECK(cudaSetDevice(dev));
    std::vector<Block> live;
    for (int i = 0; i < 120; i++) {
        size_t n = churn_sizes[i % 6];
        unsigned char *p;
        CHECK(cudaMalloc(&p, n));
        {
            std::lock_guard<std::mutex> g(out_mu);
            printf("RANGE %d %llu %zu\n", dev, (unsigned long long)(uintptr_t)p, n);
        }
        int seed = i + dev * 77;
        std::vector<unsigned char> h = pattern(n, seed), back(n);
        CHECK(cudaMemcpy(p, h.data(), n, cudaMemcpyDefault));
        CHECK(cudaMemcpy(back.data(), p, n, cudaMemcpyDefault));
        EXPECT(memcmp(h.data(), back.data(), n) == 0);
        live.push_back({p, n, seed});
        if (i % 3 == 2) {                       // free one of the older ones: addresses are reused
            Block &b = live[live.size() / 2];
            print_free(dev, b.p);
            CHECK(cudaFree(b.p));
            live.erase(live.begin() + live.size() / 2);
        }
    }
    kept[dev] = live;
}

static int churn_main() {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    EXPECT(n == 2);
    std::thread t0(churn, 0), t1(churn, 1);
    t0.join();
    t1.join();
    // every block still holds its own bytes: no other block (of either host) was written over it
    for (int dev = 0; dev < 2; dev++)
        for (const Block &b : kept[dev]) {
            std::vector<unsigned char> back(b.n);
            CHECK(cudaMemcpy(back.data(), b.p, b.n, cudaMemcpyDefault));
            EXPECT(back == pattern(b.n, b.seed));
        }
    // across the hosts with cudaMemcpyDefault: GPU0's block -> GPU1's block of the same size, checked on the host
    for (size_t i = 0; i < kept[0].size() && i < kept[1].size(); i++) {
        if (kept[0][i].n != kept[1][i].n)
            continue;
        size_t sz = kept[0][i].n;
        std::vector<unsigned char> a(sz), b(sz);
        CHECK(cudaMemcpy(kept[1][i].p, kept[0][i].p, sz, cudaMemcpyDefault));
        CHECK(cudaMemcpy(a.data(), kept[0][i].p, sz, cudaMemcpyDefault));
        CHECK(cudaMemcpy(b.data(), kept[1][i].p, sz, cudaMemcpyDefault));
        EXPECT(a == pattern(sz, kept[0][i].seed) && b == a);
    }
    // each thread frees the other GPU's blocks (a free finds its host by the pointer, whatever the current device)
    std::thread f0([] { CHECK(cudaSetDevice(0)); for (auto &b : kept[1]) { print_free(1, b.p); CHECK(cudaFree(b.p)); } });
    std::thread f1([] { CHECK(cudaSetDevice(1)); for (auto &b : kept[0]) { print_free(0, b.p); CHECK(cudaFree(b.p)); } });
    f0.join();
    f1.join();
    printf("CHURN OK\n");
    return 0;
}

static int managed_main() {
    const size_t n = 1 << 20;
    unsigned char *p0 = nullptr, *p1 = nullptr;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMallocManaged(&p0, n));
    memset(p0, 0x11, n);
    CHECK(cudaSetDevice(1));
    cudaError_t e = cudaMallocManaged(&p1, n);
    printf("MANAGED1 %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaSuccess || e == cudaErrorMemoryAllocation);
    if (e == cudaSuccess) {
        EXPECT(p1 + n <= p0 || p0 + n <= p1);
        memset(p1, 0x22, n);
        CHECK(cudaDeviceSynchronize());
        for (size_t i = 0; i < n; i++) EXPECT(p1[i] == 0x22);
        CHECK(cudaFree(p1));
    } else {
        cudaGetLastError();
    }
    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < n; i++) EXPECT(p0[i] == 0x11);
    CHECK(cudaFree(p0));
    printf("MANAGED OK\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "churn") == 0)
        return churn_main();
    if (argc > 1 && strcmp(argv[1], "managed") == 0)
        return managed_main();
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
