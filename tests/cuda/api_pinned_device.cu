// Page-locked host memory used directly by kernels under unified addressing, checked against host results: every
// cudaMallocHost / cudaHostAlloc allocation (mapped flag or not) reached by its own address from a kernel parameter
// (plain, inside a struct parameter, as an end pointer), the host's writes seen by later launches and the device's
// after a synchronization; a kernel spinning on a page-locked flag with a clock timeout, as NVIDIA's
// p2pBandwidthLatencyTest does; pointer attributes; registered memory copied through without a device copy, and
// given one by cudaHostGetDevicePointer; a pointer hidden in device memory faults instead of reading stale bytes.
// Prints "OK <checks>".
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

__global__ void twice_plus(int *p, int k, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 2 * p[i] + k;
}

struct Span { int *begin; int *end; int add; };

__global__ void add_span(Span s)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (s.begin + i < s.end) s.begin[i] += s.add;
}

__global__ void sum_range(const int *begin, const int *end, long long *out)
{
    long long t = 0;
    for (const int *q = begin; q != end; q++) t += *q;
    *out = t;
}

// Waits for the host's flag or a clock timeout, as NVIDIA's delay kernel; records how it ended.
__global__ void delay(volatile int *flag, int *ended, long long timeout_clocks)
{
    long long start = clock64();
    int how = 2;
    while (true) {
        if (*flag) { how = 1; break; }
        if (clock64() - start > timeout_clocks) break;
    }
    *ended = how;
}

__global__ void deref(int **pp, int *out) { *out = **pp; }

static void use_directly(int *h, int n, const char *what)
{
    for (int i = 0; i < n; i++) h[i] = i;
    twice_plus<<<(n + 127) / 128, 128>>>(h, 1, n);
    CHECK(cudaDeviceSynchronize());
    bool ok = true;
    for (int i = 0; i < n; i++) ok = ok && h[i] == 2 * i + 1;
    if (!ok) printf("  %s: kernel result wrong\n", what);
    OKC(ok);
    h[5] = 1000;                                          // a host write after the device's: reaches the next launch
    Span s = { h, h + n, 3 };
    add_span<<<(n + 127) / 128, 128>>>(s);                // pointers inside a struct parameter
    long long *sum;
    CHECK(cudaMallocHost(&sum, sizeof *sum));
    sum_range<<<1, 1>>>(h, h + n, sum);                   // begin and one-past-the-end
    CHECK(cudaStreamSynchronize(0));
    long long want = 0;
    for (int i = 0; i < n; i++) want += (i == 5 ? 1000 : 2 * i + 1) + 3;
    OKC(h[5] == 1003 && h[n - 1] == 2 * (n - 1) + 4);
    OKC(*sum == want);
    CHECK(cudaFreeHost(sum));
}

int main()
{
    int ua = 0;
    CHECK(cudaDeviceGetAttribute(&ua, cudaDevAttrUnifiedAddressing, 0));
    OKC(ua == 1);
    const int n = 3000;
    int *a, *b, *c;
    CHECK(cudaMallocHost(&a, n * sizeof(int)));
    CHECK(cudaHostAlloc(&b, n * sizeof(int), cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&c, n * sizeof(int), cudaHostAllocPortable | cudaHostAllocWriteCombined));
    use_directly(a, n, "cudaMallocHost");
    use_directly(b, n, "cudaHostAlloc default");
    use_directly(c, n, "cudaHostAlloc portable");

    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, b + 7));
    OKC(pa.type == cudaMemoryTypeHost && pa.hostPointer == b + 7 && pa.devicePointer != nullptr);

    // the flag a kernel spins on (p2pBandwidthLatencyTest's pattern): set after the launch, read by the kernel or
    // timed out, never an illegal address; the kernel's own write comes back
    int *flag, *ended;
    CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocPortable));
    CHECK(cudaMallocHost(&ended, sizeof(int)));
    *flag = 0;
    *ended = 0;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    delay<<<1, 1, 0, s>>>(flag, ended, 200000);
    *flag = 1;
    CHECK(cudaStreamSynchronize(s));
    OKC(*ended == 1 || *ended == 2);
    *flag = 1;                                            // set before the launch: seen at once
    delay<<<1, 1, 0, s>>>(flag, ended, 1LL << 40);
    CHECK(cudaStreamSynchronize(s));
    OKC(*ended == 1);

    // registered memory: plain copies through it need no device copy; cudaHostGetDevicePointer makes one
    int *r = (int *)aligned_alloc(4096, n * sizeof(int));
    CHECK(cudaHostRegister(r, n * sizeof(int), cudaHostRegisterMapped));
    EXPECT_ERR(cudaHostRegister(r + 1024, 64, 0), cudaErrorHostMemoryAlreadyRegistered);
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemset(d, 0, n * sizeof(int)));
    twice_plus<<<(n + 127) / 128, 128>>>(d, 9, n);
    CHECK(cudaMemcpyAsync(r, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    OKC(r[0] == 9 && r[n - 1] == 9);
    int *rd;
    CHECK(cudaHostGetDevicePointer((void **)&rd, r, 0));
    twice_plus<<<(n + 127) / 128, 128>>>(rd, 1, n);
    CHECK(cudaDeviceSynchronize());
    OKC(r[0] == 19 && r[n - 1] == 19);
    CHECK(cudaHostUnregister(r));
    EXPECT_ERR(cudaHostUnregister(r), cudaErrorHostMemoryNotRegistered);
    CHECK(cudaGetLastError() == cudaErrorHostMemoryNotRegistered ? cudaSuccess : cudaErrorUnknown);
    free(r);

    // a pinned pointer hidden in device memory is not translated: the kernel faults, it never reads stale bytes
    int *hidden;
    CHECK(cudaMallocHost(&hidden, 64 * sizeof(int)));
    int **pp;
    CHECK(cudaMalloc(&pp, sizeof(int *)));
    CHECK(cudaMemcpy(pp, &hidden, sizeof hidden, cudaMemcpyHostToDevice));
    int *out;
    CHECK(cudaMalloc(&out, sizeof(int)));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(a));
    CHECK(cudaFreeHost(b));
    CHECK(cudaFreeHost(c));
    CHECK(cudaFreeHost(flag));
    CHECK(cudaFreeHost(ended));
    deref<<<1, 1>>>(pp, out);
    OKC(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
    printf("OK %ld\n", checks);
    return 0;
}
