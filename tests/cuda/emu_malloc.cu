// Device-side malloc/free/new/delete and __nv_aligned_device_malloc (CUDA C Programming Guide, "Dynamic Global
// Memory Allocation"): blocks of different sizes per thread, filled in one launch, read and freed by other threads
// in later launches (memory lives across launches); C++ new/delete of objects with constructors and destructors and
// of arrays; 16-byte and requested alignment; a heap set to 1 MiB with cudaDeviceSetLimit before the first malloc
// kernel answers NULL once full and serves again after free; the limit cannot change after that kernel ran
// (cudaErrorInvalidValue); cudaFree refuses a device-malloc pointer. Everything against host results.
// Prints "PASS emu_malloc".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"

static const int T = 96;       // threads of the fill/consume launches (3 warps, 2 blocks)

// Thread t allocates 1 + t % 37 ints, fills element i with t * 1000 + i, and leaves the pointer in ptrs[t].
__global__ void fill(int **ptrs, unsigned *misaligned) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int n = 1 + t % 37;
    int *p = (int *)malloc(n * sizeof(int));
    ptrs[t] = p;
    if (!p) return;
    if ((uintptr_t)p % 16) atomicAdd(misaligned, 1u);
    for (int i = 0; i < n; i++) p[i] = t * 1000 + i;
}

// Thread t sums the block of thread T-1-t (another thread's, allocated by another launch) and frees it.
__global__ void consume(int **ptrs, long long *sums) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int u = T - 1 - t;
    int *p = ptrs[u];
    long long s = -1;
    if (p) {
        s = 0;
        for (int i = 0; i < 1 + u % 37; i++) s += p[i];
    }
    sums[t] = s;
    free(p);
}

struct Counter {
    int value;
    int *log;
    __device__ Counter(int v, int *l) : value(v * 3), log(l) { atomicAdd(log, 1); }
    __device__ ~Counter() { atomicAdd(log + 1, 1); }
};

// new/delete: one object per thread, an array of 5 ints and an array of 3 objects (constructed and destroyed each).
__global__ void objects(int *out, int *log) {
    int t = threadIdx.x;
    Counter *c = new Counter(t, log);
    int *arr = new int[5];
    Counter *many = new Counter[3]{{t, log}, {t + 1, log}, {t + 2, log}};
    for (int i = 0; i < 5; i++) arr[i] = c->value + i;
    int s = 0;
    for (int i = 0; i < 5; i++) s += arr[i];
    for (int i = 0; i < 3; i++) s += many[i].value;
    out[t] = c && arr && many ? s : -1;
    delete c;
    delete[] arr;
    delete[] many;
}

__global__ void aligned(unsigned long long *out) {
    void *p = __nv_aligned_device_malloc(100, 4096);
    void *q = __nv_aligned_device_malloc(8, 256);
    out[0] = (unsigned long long)p;
    out[1] = (unsigned long long)q;
    free(p);
    free(q);
}

// One thread takes 64 KiB blocks until malloc answers NULL (at most 64 tries), frees them, and takes one again.
__global__ void exhaust(int *count, int *again) {
    void *blocks[64];
    int n = 0;
    while (n < 64 && (blocks[n] = malloc(64 << 10)) != nullptr) n++;
    *count = n;
    void *big = malloc(256 << 20);          // far beyond the heap (a driver may grant more than was asked)
    for (int i = 0; i < n; i++) free(blocks[i]);
    void *p = malloc(64 << 10);
    *again = (p != nullptr) + 2 * (big == nullptr);
    free(p);
}

// A kernel-side pointer handed to the host: cudaFree must refuse it.
__global__ void leak(void **out) { *out = malloc(32); }

int main() {
    // the heap size must be set before the first kernel that uses malloc
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 1 << 20));
    size_t heap = 0;
    CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    EXPECT(heap >= (1 << 20));

    int **ptrs;
    long long *sums;
    unsigned *mis;
    CHECK(cudaMalloc(&ptrs, T * sizeof(int *)));
    CHECK(cudaMalloc(&sums, T * sizeof(long long)));
    CHECK(cudaMalloc(&mis, sizeof(unsigned)));
    CHECK(cudaMemset(mis, 0, sizeof(unsigned)));
    fill<<<2, T / 2>>>(ptrs, mis);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<int *> hp(T);
    CHECK(cudaMemcpy(hp.data(), ptrs, T * sizeof(int *), cudaMemcpyDeviceToHost));
    int distinct = 0;
    for (int t = 0; t < T; t++) {
        EXPECT(hp[t] != nullptr);
        bool dup = false;
        for (int u = 0; u < t; u++) dup |= hp[u] == hp[t];
        distinct += !dup;
    }
    EXPECT(distinct == T);
    unsigned hmis = 1;
    CHECK(cudaMemcpy(&hmis, mis, sizeof(unsigned), cudaMemcpyDeviceToHost));
    EXPECT(hmis == 0);

    // the limit is fixed once a malloc kernel has run
    EXPECT(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 4 << 20) == cudaErrorInvalidValue);
    cudaGetLastError();

    consume<<<3, T / 3>>>(ptrs, sums);
    CHECK(cudaGetLastError());
    std::vector<long long> hs(T);
    CHECK(cudaMemcpy(hs.data(), sums, T * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int t = 0; t < T; t++) {
        int u = T - 1 - t, n = 1 + u % 37;
        long long want = (long long)u * 1000 * n + (long long)n * (n - 1) / 2;
        EXPECT(hs[t] == want);
    }

    int *out, *log;
    CHECK(cudaMalloc(&out, 64 * sizeof(int)));
    CHECK(cudaMalloc(&log, 2 * sizeof(int)));
    CHECK(cudaMemset(log, 0, 2 * sizeof(int)));
    objects<<<1, 64>>>(out, log);
    CHECK(cudaGetLastError());
    std::vector<int> ho(64);
    int hl[2];
    CHECK(cudaMemcpy(ho.data(), out, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hl, log, sizeof hl, cudaMemcpyDeviceToHost));
    for (int t = 0; t < 64; t++) EXPECT(ho[t] == 5 * 3 * t + 10 + 3 * (3 * t + 3));
    EXPECT(hl[0] == 64 * 4 && hl[1] == 64 * 4);

    unsigned long long *al, hal[2];
    CHECK(cudaMalloc(&al, sizeof hal));
    aligned<<<1, 1>>>(al);
    CHECK(cudaMemcpy(hal, al, sizeof hal, cudaMemcpyDeviceToHost));
    EXPECT(hal[0] != 0 && hal[0] % 4096 == 0 && hal[1] != 0 && hal[1] % 256 == 0);

    int *cnt;
    CHECK(cudaMalloc(&cnt, 2 * sizeof(int)));
    exhaust<<<1, 1>>>(cnt, cnt + 1);
    int hc[2];
    CHECK(cudaMemcpy(hc, cnt, sizeof hc, cudaMemcpyDeviceToHost));
    // the heap runs out: a 1 MiB heap holds about 16 blocks of 64 KiB (the driver may round the heap up and its
    // allocator has overhead; the emulator's exact count is tests/emu/test_emu_device_heap.py's)
    EXPECT(hc[0] >= 4 && hc[0] < 64);
    EXPECT(hc[1] == 3);

    void **lp, *hlp = nullptr;
    CHECK(cudaMalloc(&lp, sizeof(void *)));
    leak<<<1, 1>>>(lp);
    CHECK(cudaMemcpy(&hlp, lp, sizeof hlp, cudaMemcpyDeviceToHost));
    EXPECT(hlp != nullptr);
    EXPECT(cudaFree(hlp) != cudaSuccess);
    cudaGetLastError();
    CHECK(cudaDeviceSynchronize());

    CHECK(cudaFree(ptrs)); CHECK(cudaFree(sums)); CHECK(cudaFree(mis)); CHECK(cudaFree(out)); CHECK(cudaFree(log));
    CHECK(cudaFree(al)); CHECK(cudaFree(cnt)); CHECK(cudaFree(lp));
    printf("PASS emu_malloc\n");
    return 0;
}
