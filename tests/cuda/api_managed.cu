// Managed and mapped memory through libvcudart, checked against host references: cudaMallocManaged seen by host and
// device alike (host writes before launches, device writes after synchronizations of every kind, host and device
// writing different bytes of one page concurrently, large and partial updates), copies and memsets on managed memory,
// __managed__ variables, prefetch/advice/range attributes, pointer attributes, zero-copy memory (cudaHostAllocMapped,
// cudaHostRegisterMapped, cudaHostGetDevicePointer on cudaMallocHost memory), graphs over managed memory, error codes.
// With the argument "multi" (two GPUs, possibly of two daemons): managed and mapped memory of each GPU used by its
// kernels and by the host, copies between them. Prints "OK <checks>" on success.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

__managed__ int mcounter[8];
__managed__ int minit = 42;

__global__ void add_k(int *p, int k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += k;
}

__global__ void set_odd(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && (i & 1)) p[i] = 1000 + i;
}

__global__ void bump_vars() {
    mcounter[threadIdx.x] += threadIdx.x + minit;
    if (threadIdx.x == 0) minit += 1;
}

__global__ void xor_bytes(unsigned char *p, unsigned char x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] ^= x;
}

__global__ void sum_into(int *out, const int *a, const int *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

static void test_managed_basics() {
    int v = 0;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, 0));
    OKC(v == 1);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0));
    OKC(v == 1);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrCanMapHostMemory, 0));
    OKC(v == 1);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    OKC(prop.managedMemory == 1 && prop.concurrentManagedAccess == 1 && prop.canMapHostMemory == 1);

    const int n = 3000;                                   // several pages, not a whole number of them
    int *m;
    CHECK(cudaMallocManaged(&m, n * sizeof(int)));
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, m + 5));
    OKC(pa.type == cudaMemoryTypeManaged && pa.device == 0 && pa.devicePointer == m + 5 && pa.hostPointer == m + 5);
    for (int i = 0; i < n; i++) OKC(m[i] == 0);          // zero-filled on both sides
    for (int i = 0; i < n; i++) m[i] = i;
    add_k<<<(n + 127) / 128, 128>>>(m, 7, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) OKC(m[i] == i + 7);
    // a partial host update, then a kernel: only what the host changed travels, all of it arrives
    m[0] = -1;
    m[2999] = -2;
    m[1500] = 12345;
    add_k<<<(n + 127) / 128, 128>>>(m, 1, n);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    add_k<<<(n + 127) / 128, 128, 0, s>>>(m, 1, n);
    CHECK(cudaStreamSynchronize(s));
    OKC(m[0] == 1 && m[2999] == 0 && m[1500] == 12347 && m[1] == 1 + 7 + 2);
    // the host and the device write different bytes of the same pages at the same time
    for (int i = 0; i < n; i++) m[i] = 0;
    set_odd<<<(n + 127) / 128, 128, 0, s>>>(m, n);
    for (int i = 0; i < n; i += 2) m[i] = 2 * i;          // while the kernel may run
    cudaEvent_t e;
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(e, s));
    CHECK(cudaEventSynchronize(e));
    for (int i = 0; i < n; i++) OKC(m[i] == ((i & 1) ? 1000 + i : 2 * i));
    // and the merged page goes back to the device intact
    add_k<<<(n + 127) / 128, 128, 0, s>>>(m, 3, n);
    while (cudaStreamQuery(s) == cudaErrorNotReady) {}
    for (int i = 0; i < n; i++) OKC(m[i] == ((i & 1) ? 1003 + i : 2 * i + 3));
    // memset and copies on managed memory
    CHECK(cudaMemset(m, 0, 100 * sizeof(int)));
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 100; i++) OKC(m[i] == 0);
    OKC(m[100] == 203);
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemcpy(d, m, n * sizeof(int), cudaMemcpyDefault));            // managed -> device
    add_k<<<(n + 127) / 128, 128>>>(d, 10, n);
    CHECK(cudaMemcpy(m + 1000, d + 1000, 500 * sizeof(int), cudaMemcpyDeviceToDevice));   // device -> managed
    for (int i = 1000; i < 1500; i++) OKC(m[i] == ((i & 1) ? 1013 + i : 2 * i + 13));
    std::vector<int> host(n, 7);
    CHECK(cudaMemcpy(m, host.data(), 10 * sizeof(int), cudaMemcpyHostToDevice));   // host -> managed
    for (int i = 0; i < 10; i++) OKC(m[i] == 7);
    add_k<<<1, 32>>>(m, 1, 10);
    CHECK(cudaMemcpy(host.data(), m, 10 * sizeof(int), cudaMemcpyDeviceToHost));   // managed -> host, synchronous
    for (int i = 0; i < 10; i++) OKC(host[i] == 8);
    CHECK(cudaFree(d));
    CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s));

    // a large allocation: every page written on both sides
    const size_t big = 8 << 20;
    unsigned char *b;
    CHECK(cudaMallocManaged(&b, big, cudaMemAttachHost));
    for (size_t i = 0; i < big; i++) b[i] = (unsigned char)(i * 7);
    xor_bytes<<<(int)(big / 256), 256>>>(b, 0x5A, big);
    CHECK(cudaDeviceSynchronize());
    size_t bad = 0;
    for (size_t i = 0; i < big; i++) bad += b[i] != (unsigned char)((i * 7) ^ 0x5A);
    OKC(bad == 0);
    b[12345] = 1;                                         // one byte on the host, one block on the device
    xor_bytes<<<1, 256>>>(b + 4096 * 1000, 0xFF, 256);
    CHECK(cudaDeviceSynchronize());
    OKC(b[12345] == 1 && b[4096 * 1000 + 5] == (unsigned char)(((4096 * 1000 + 5) * 7) ^ 0x5A ^ 0xFF));
    bad = 0;
    for (size_t i = 4096 * 1000 + 256; i < big; i++) bad += b[i] != (unsigned char)((i * 7) ^ 0x5A);
    OKC(bad == 0);
    CHECK(cudaFree(b));

    // freeing and allocating again (the address may come back)
    CHECK(cudaFree(m));
    CHECK(cudaMallocManaged(&m, 64 * sizeof(int)));
    for (int i = 0; i < 64; i++) m[i] = i;
    add_k<<<1, 64>>>(m, 2, 64);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 64; i++) OKC(m[i] == i + 2);
    CHECK(cudaFree(m));
}

static void test_managed_variables_and_hints() {
    OKC(minit == 42);                                     // the module's initializer, seen by the host
    for (int i = 0; i < 8; i++) mcounter[i] = 100 * i;
    bump_vars<<<1, 8>>>();
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 8; i++) OKC(mcounter[i] == 100 * i + i + 42);
    OKC(minit == 43);
    minit = 10;
    bump_vars<<<1, 8>>>();
    CHECK(cudaDeviceSynchronize());
    OKC(mcounter[3] == 300 + 3 + 42 + 3 + 10 && minit == 11);

    int *m;
    const size_t bytes = 1 << 16;
    CHECK(cudaMallocManaged(&m, bytes));
    cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};
    for (int i = 0; i < 1024; i++) m[i] = i;
    CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, dev0));
    CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetPreferredLocation, dev0));
    CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetAccessedBy, host));
    CHECK(cudaMemPrefetchAsync(m, bytes, dev0, 0, 0));
    add_k<<<4, 256>>>(m, 5, 1024);
    CHECK(cudaMemPrefetchAsync(m, bytes, host, 0, 0));
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 1024; i++) OKC(m[i] == i + 5);
    int rm = -1, pref = -9, last = -9, acc[4];
    CHECK(cudaMemRangeGetAttribute(&rm, 4, cudaMemRangeAttributeReadMostly, m, bytes));
    CHECK(cudaMemRangeGetAttribute(&pref, 4, cudaMemRangeAttributePreferredLocation, m, bytes));
    CHECK(cudaMemRangeGetAttribute(&last, 4, cudaMemRangeAttributeLastPrefetchLocation, m, bytes));
    CHECK(cudaMemRangeGetAttribute(acc, sizeof acc, cudaMemRangeAttributeAccessedBy, m, bytes));
    OKC(rm == 1 && pref == 0 && last == cudaCpuDeviceId && acc[0] == cudaCpuDeviceId && acc[1] == cudaInvalidDeviceId);
    CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseUnsetReadMostly, dev0));
    CHECK(cudaMemRangeGetAttribute(&rm, 4, cudaMemRangeAttributeReadMostly, m, bytes));
    OKC(rm == 0);

    // a captured graph over managed memory replays what the stream did
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    add_k<<<4, 256, 0, s>>>(m, 1, 1024);
    add_k<<<4, 256, 0, s>>>(m, 2, 1024);
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 3; rep++) {
        m[rep] = -100;                                    // a host write between replays reaches the next one
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
    }
    OKC(m[0] == -100 + 9 && m[1] == -100 + 6 && m[2] == -100 + 3 && m[3] == 3 + 5 + 9 && m[1023] == 1023 + 14);
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));

    // errors
    int *bad;
    bad = (int *)&s;
    CHECK(cudaMallocManaged(&bad, 0));                    // as NVIDIA's runtime answers it (no driver call)
    OKC(bad == nullptr);
    EXPECT_ERR(cudaMallocManaged(&bad, 16, 7), cudaErrorInvalidValue);
    EXPECT_ERR(cudaFreeHost(m), cudaErrorInvalidValue);
    EXPECT_ERR(cudaMemAdvise(m, bytes, (cudaMemoryAdvise)42, dev0), cudaErrorInvalidValue);
    EXPECT_ERR(cudaMemAdvise(m, bytes + 1, cudaMemAdviseSetReadMostly, dev0), cudaErrorInvalidValue);
    int stack_var;
    EXPECT_ERR(cudaMemPrefetchAsync(&stack_var, 4, dev0, 0, 0), cudaErrorInvalidValue);
    EXPECT_ERR(cudaStreamAttachMemAsync(0, &stack_var, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    cudaMemLocation nodev = {cudaMemLocationTypeDevice, 77};
    EXPECT_ERR(cudaMemPrefetchAsync(m, 4, nodev, 0, 0), cudaErrorInvalidDevice);
    cudaGetLastError();
    checks += 7;
    CHECK(cudaFree(m));
}

static void test_mapped_memory() {
    const int n = 2048;
    int *h;
    CHECK(cudaHostAlloc(&h, n * sizeof(int), cudaHostAllocMapped));
    int *dp;
    CHECK(cudaHostGetDevicePointer((void **)&dp, h, 0));
    OKC(dp == h);                                         // unified addressing: one pointer
    unsigned flags = 0;
    CHECK(cudaHostGetFlags(&flags, h));
    OKC(flags & cudaHostAllocMapped);
    for (int i = 0; i < n; i++) h[i] = 3 * i;
    add_k<<<n / 256, 256>>>(dp, 1, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) OKC(h[i] == 3 * i + 1);
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, h));
    OKC(pa.type == cudaMemoryTypeHost && pa.devicePointer == h && pa.hostPointer == h);
    EXPECT_ERR(cudaFree(h), cudaErrorInvalidValue);      // host memory: cudaFreeHost's
    cudaGetLastError();
    CHECK(cudaFreeHost(h));

    // registered host memory: the device copy lives elsewhere, the host keeps its pointer
    int *r = (int *)aligned_alloc(4096, n * sizeof(int));
    for (int i = 0; i < n; i++) r[i] = i;
    CHECK(cudaHostRegister(r, n * sizeof(int), cudaHostRegisterMapped));
    int *rd;
    CHECK(cudaHostGetDevicePointer((void **)&rd, r + 10, 0));
    OKC(rd != r + 10);
    add_k<<<n / 256, 256>>>(rd - 10, 5, n);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) OKC(r[i] == i + 5);
    r[7] = 70;
    add_k<<<1, 16>>>(rd - 10, 1, 16);
    CHECK(cudaHostUnregister(r));
    OKC(r[7] == 71 && r[15] == 21 && r[16] == 21);      // the device's last writes arrived before unregistering
    r[0] = 1;                                             // plain memory again
    free(r);

    // cudaMallocHost memory is mapped on request
    int *ph;
    CHECK(cudaMallocHost(&ph, 256 * sizeof(int)));
    for (int i = 0; i < 256; i++) ph[i] = -i;
    int *pd;
    CHECK(cudaHostGetDevicePointer((void **)&pd, ph, 0));
    add_k<<<1, 256>>>(pd, 1000, 256);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 256; i++) OKC(ph[i] == 1000 - i);
    CHECK(cudaFreeHost(ph));
    int stack_var;
    EXPECT_ERR(cudaHostGetDevicePointer((void **)&pd, &stack_var, 0), cudaErrorInvalidValue);
    cudaGetLastError();
}

// Two GPUs (of one or two daemons): each has managed and mapped memory its kernels use; the host sees all of it.
static void test_multi() {
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    EXPECT(ndev >= 2);
    const int n = 1500;
    int *m[2], *z[2], *d[2];
    for (int g = 0; g < 2; g++) {
        CHECK(cudaSetDevice(g));
        CHECK(cudaMallocManaged(&m[g], n * sizeof(int)));
        CHECK(cudaHostAlloc(&z[g], n * sizeof(int), cudaHostAllocMapped));
        CHECK(cudaMalloc(&d[g], n * sizeof(int)));
        for (int i = 0; i < n; i++) {
            m[g][i] = (g + 1) * i;
            z[g][i] = 7 * g;
        }
        cudaPointerAttributes pa;
        CHECK(cudaPointerGetAttributes(&pa, m[g]));
        OKC(pa.device == g);
    }
    for (int rep = 0; rep < 3; rep++) {
        for (int g = 0; g < 2; g++) {
            CHECK(cudaSetDevice(g));
            add_k<<<(n + 255) / 256, 256>>>(m[g], 10 * (g + 1), n);
            sum_into<<<(n + 255) / 256, 256>>>(z[g], z[g], m[g], n);
        }
        for (int g = 0; g < 2; g++) {
            CHECK(cudaSetDevice(g));
            CHECK(cudaDeviceSynchronize());
        }
        for (int g = 0; g < 2; g++) {
            int base = 7 * g;
            for (int i = 0; i < n; i++) {
                int mv = (g + 1) * i + 10 * (g + 1) * (rep + 1);
                OKC(m[g][i] == mv);
                OKC(z[g][i] == base + mv);                 // z was reset to 7g after the previous round
            }
        }
        m[0][rep] += 1000;                                 // host writes on both GPUs' memory between rounds
        m[1][rep] += 2000;
        for (int g = 0; g < 2; g++)
            for (int i = 0; i < n; i++) z[g][i] = 7 * g;
        m[0][rep] -= 1000;
        m[1][rep] -= 2000;
    }
    // copies between the GPUs' managed memory, and from it to device memory of the other GPU
    CHECK(cudaMemcpy(m[1], m[0], 100 * sizeof(int), cudaMemcpyDefault));
    CHECK(cudaSetDevice(1));
    add_k<<<1, 128>>>(m[1], 1, 100);
    CHECK(cudaMemcpy(d[1], m[0], n * sizeof(int), cudaMemcpyDefault));
    sum_into<<<(n + 255) / 256, 256>>>(d[1], d[1], m[1], n);
    std::vector<int> back(n);
    CHECK(cudaMemcpy(back.data(), d[1], n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        int m0 = i + 30, m1 = i < 100 ? i + 30 + 1 : 2 * i + 60;
        OKC(m[1][i] == m1 && back[i] == m0 + m1);
    }
    for (int g = 0; g < 2; g++) {
        CHECK(cudaSetDevice(g));
        CHECK(cudaFree(m[g]));
        CHECK(cudaFreeHost(z[g]));
        CHECK(cudaFree(d[g]));
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "multi")) {
        test_multi();
        printf("OK %ld\n", checks);
        return 0;
    }
    test_managed_basics();
    test_managed_variables_and_hints();
    test_mapped_memory();
    printf("OK %ld\n", checks);
    return 0;
}
