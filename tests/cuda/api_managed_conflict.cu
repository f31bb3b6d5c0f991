// Managed and mapped memory never give a merged value for bytes both sides changed: host threads and a kernel
// updating the same words with atomics at the same time (the pattern of NVIDIA's systemWideAtomics sample) end in
// the sticky conflict error at the synchronization and every call after, until cudaDeviceReset; host and device
// updating different words at the same time still merge exactly; writes ordered by a launch or a synchronization are
// no conflict. The device attributes say what pyvgpu provides. Argument: "atomics" | "kernel-after" | "mapped" |
// "thread" | "ordered" (one scenario per process, since a conflict is sticky). Prints "OK <checks>".
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

static const int BLOCKS = 16, THREADS = 128, LOOPS = 20;

__global__ void add_words(int *w, int nwords, int k)
{
    for (int i = 0; i < LOOPS; i++)
        for (int j = 0; j < nwords; j++)
            atomicAdd_system(&w[j], k);
}

__global__ void touch(int *w, int v) { w[threadIdx.x] = v; }

static void attributes()
{
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    OKC(p.managedMemory == 1 && p.concurrentManagedAccess == 1);
    OKC(p.pageableMemoryAccess == 0 && p.hostNativeAtomicSupported == 0 && p.directManagedMemAccessFromHost == 0);
    int v = -1;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrPageableMemoryAccessUsesHostPageTables, 0));
    OKC(v == 0);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
    OKC(v == 0);
}

// Every later call reports the conflict; a reset ends it, and the device works again.
static void sticky_until_reset(cudaError_t first)
{
    cudaError_t expect = cudaErrorIllegalState;
    OKC(first == expect);
    OKC(cudaGetLastError() == expect);
    void *p = nullptr;
    OKC(cudaMalloc(&p, 256) == expect);
    OKC(cudaDeviceSynchronize() == expect);
    CHECK(cudaDeviceReset());
    int *m;
    CHECK(cudaMallocManaged(&m, 64 * sizeof(int)));
    touch<<<1, 64>>>(m, 9);
    CHECK(cudaDeviceSynchronize());
    OKC(m[0] == 9 && m[63] == 9);
    CHECK(cudaFree(m));
}

// The sample's pattern: a kernel adds with system-scope atomics while the host adds to the same words.
static void atomics(bool mapped)
{
    int *w;
    if (mapped)
        CHECK(cudaHostAlloc(&w, 4 * sizeof(int), cudaHostAllocMapped));
    else
        CHECK(cudaMallocManaged(&w, 4 * sizeof(int)));
    memset(w, 0, 4 * sizeof(int));
    add_words<<<BLOCKS, THREADS>>>(w, 2, 10);
    for (int i = 0; i < BLOCKS * THREADS * LOOPS; i++) {
        __sync_fetch_and_add(&w[0], 10);
        __sync_fetch_and_add(&w[1], 10);
    }
    sticky_until_reset(cudaDeviceSynchronize());
}

// The host writes bytes a running kernel writes, then launches more work (the push finds the conflict).
static void kernel_after()
{
    int *w;
    CHECK(cudaMallocManaged(&w, 64 * sizeof(int)));
    touch<<<1, 64>>>(w, 1);
    w[5] = 2;                                            // same bytes, not ordered with the kernel
    touch<<<1, 1>>>(w + 32, 3);
    sticky_until_reset(cudaStreamSynchronize(0));
}

// Another host thread keeps adding to the word while the kernel runs and the main thread synchronizes: whichever
// side sees it first (a push, or the merge of a pull), the synchronization reports it.
static void thread_during_sync()
{
    int *w;
    CHECK(cudaMallocManaged(&w, 2 * sizeof(int)));
    std::atomic<bool> go(true);
    std::atomic<long> adds(0);
    add_words<<<BLOCKS, THREADS>>>(w, 1, 1);
    std::thread t([&] {
        while (go) {
            __sync_fetch_and_add(&w[0], 1);
            adds++;
            std::this_thread::yield();
        }
    });
    while (adds == 0)
        std::this_thread::yield();
    cudaError_t e = cudaDeviceSynchronize();
    go = false;
    t.join();
    sticky_until_reset(e);
}

// What is no conflict: disjoint words at the same time; the same words ordered by a launch or a synchronization.
static void ordered()
{
    int *w;
    CHECK(cudaMallocManaged(&w, 1024 * sizeof(int)));
    memset(w, 0, 1024 * sizeof(int));
    add_words<<<BLOCKS, THREADS>>>(w, 1, 3);             // the device adds to w[0] ...
    for (int i = 0; i < 1000; i++)
        __sync_fetch_and_add(&w[1], 2);                  // ... the host to w[1], same page, same time
    w[700] = 77;
    CHECK(cudaDeviceSynchronize());
    OKC(w[0] == BLOCKS * THREADS * LOOPS * 3 && w[1] == 2000 && w[700] == 77);
    w[0] += 1;                                           // after the synchronization: ordered
    add_words<<<1, 1>>>(w, 2, 5);                        // after the host's write: ordered
    CHECK(cudaDeviceSynchronize());
    OKC(w[0] == BLOCKS * THREADS * LOOPS * 3 + 1 + LOOPS * 5 && w[1] == 2000 + LOOPS * 5);
    int *h;
    CHECK(cudaHostAlloc(&h, 16 * sizeof(int), cudaHostAllocMapped));
    int *hd;
    CHECK(cudaHostGetDevicePointer((void **)&hd, h, 0));
    memset(h, 0, 16 * sizeof(int));
    add_words<<<BLOCKS, THREADS>>>(hd, 1, 1);
    h[8] = 5;
    CHECK(cudaStreamSynchronize(0));
    OKC(h[0] == BLOCKS * THREADS * LOOPS && h[8] == 5);
    CHECK(cudaFreeHost(h));
    CHECK(cudaFree(w));
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "ordered";
    attributes();
    if (!strcmp(what, "atomics"))
        atomics(false);
    else if (!strcmp(what, "mapped"))
        atomics(true);
    else if (!strcmp(what, "kernel-after"))
        kernel_after();
    else if (!strcmp(what, "thread"))
        thread_during_sync();
    else
        ordered();
    printf("OK %ld\n", checks);
    return 0;
}
