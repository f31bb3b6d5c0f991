// Graph memory nodes, checked against host results and CUDA's rules: allocation and free nodes built with the
// explicit API (cudaGraphAddMemAllocNode / MemFreeNode / cudaGraphAddNode) and captured from cudaMallocAsync /
// cudaFreeAsync; an allocation's address fixed across launches; an allocation not freed in its graph used after the
// launch, freed by cudaFree / cudaFreeAsync / another graph's free node, and a relaunch before that refused unless
// the exec auto-frees; the restrictions on graphs with memory nodes (no clone, child use, node or edge removal, one
// exec at a time); the graph-memory attributes. Prints "OK <checks>".
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

static const int N = 5000;

__global__ void fill(int *p, int base, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = base + i;
}

__global__ void square(int *out, const int *in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * in[i];
}

static cudaMemAllocNodeParams alloc_params(size_t bytes)
{
    cudaMemAllocNodeParams p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = cudaMemAllocationTypePinned;
    p.poolProps.location.type = cudaMemLocationTypeDevice;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    return p;
}

static cudaGraphNode_t kernel_node(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, void *fn, void **args)
{
    cudaKernelNodeParams k;
    memset(&k, 0, sizeof k);
    k.func = fn;
    k.gridDim = dim3((N + 127) / 128);
    k.blockDim = dim3(128);
    k.kernelParams = args;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, deps, n, &k));
    return node;
}

static bool squares_ok(const int *h, int base)
{
    for (int i = 0; i < N; i++)
        if (h[i] != (base + i) * (base + i))
            return false;
    return true;
}

// alloc A, fill A, alloc B, B = A*A, copy B to the host, free A, free B; launched three times.
static void explicit_api()
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams pa = alloc_params(N * sizeof(int)), pb = alloc_params(N * sizeof(int));
    cudaGraphNode_t na, nb, nf, ns, nc, fa, fb;
    CHECK(cudaGraphAddMemAllocNode(&na, g, nullptr, 0, &pa));
    OKC(pa.dptr != nullptr);
    int *a = (int *)pa.dptr;
    int base = 7, n = N;
    void *fargs[] = { &a, &base, &n };
    nf = kernel_node(g, &na, 1, (void *)fill, fargs);
    CHECK(cudaGraphAddMemAllocNode(&nb, g, &na, 1, &pb));
    OKC(pb.dptr != nullptr && pb.dptr != pa.dptr);
    int *b = (int *)pb.dptr;
    cudaGraphNode_t before_sq[2] = { nf, nb };
    void *sargs[] = { &b, &a, &n };
    ns = kernel_node(g, before_sq, 2, (void *)square, sargs);
    std::vector<int> host(N, -1);
    CHECK(cudaGraphAddMemcpyNode1D(&nc, g, &ns, 1, host.data(), b, N * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaGraphAddMemFreeNode(&fa, g, &ns, 1, a));
    CHECK(cudaGraphAddMemFreeNode(&fb, g, &nc, 1, b));
    cudaGraphNode_t dup;
    EXPECT_ERR(cudaGraphAddMemFreeNode(&dup, g, &nc, 1, b), cudaErrorInvalidValue);   // freed twice in one graph
    cudaMemAllocNodeParams got;
    CHECK(cudaGraphMemAllocNodeGetParams(nb, &got));
    OKC(got.dptr == b && got.bytesize == N * sizeof(int) && got.poolProps.location.id == 0);
    void *freed = nullptr;
    CHECK(cudaGraphMemFreeNodeGetParams(fa, &freed));
    OKC(freed == a);
    cudaGraphNodeType t;
    CHECK(cudaGraphNodeGetType(na, &t));
    OKC(t == cudaGraphNodeTypeMemAlloc);
    CHECK(cudaGraphNodeGetType(fb, &t));
    OKC(t == cudaGraphNodeTypeMemFree);

    // the restrictions of a graph with memory nodes
    cudaGraph_t clone, parent;
    EXPECT_ERR(cudaGraphClone(&clone, g), cudaErrorNotSupported);
    EXPECT_ERR(cudaGraphDestroyNode(nc), cudaErrorNotSupported);
    EXPECT_ERR(cudaGraphRemoveDependencies(g, &ns, &nc, nullptr, 1), cudaErrorNotSupported);
    CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t child;
    EXPECT_ERR(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, g), cudaErrorNotSupported);
    CHECK(cudaGraphDestroy(parent));
    CHECK(cudaGetLastError() == cudaErrorNotSupported ? cudaSuccess : cudaErrorUnknown);

    cudaGraphExec_t x, x2;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    EXPECT_ERR(cudaGraphInstantiate(&x2, g, 0), cudaErrorNotSupported);             // one exec at a time
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int rep = 0; rep < 3; rep++) {
        std::fill(host.begin(), host.end(), -1);
        CHECK(cudaGraphLaunch(x, s));                     // freed in the graph: relaunching is fine
        CHECK(cudaStreamSynchronize(s));
        OKC(squares_ok(host.data(), 7));
    }
    EXPECT_ERR(cudaFree(a), cudaErrorInvalidValue);       // its own graph frees it
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphInstantiate(&x2, g, 0));               // after the first exec is gone
    CHECK(cudaGraphLaunch(x2, s));
    CHECK(cudaStreamSynchronize(s));
    OKC(squares_ok(host.data(), 7));
    CHECK(cudaGraphExecDestroy(x2));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
}

// An allocation that outlives the launch: used after it, freed outside the graph, by another graph, or auto-freed.
static void outliving_allocation()
{
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    alignas(cudaGraphNodeParams) unsigned char raw[sizeof(cudaGraphNodeParams)] = {};   // (no C++ constructor)
    cudaGraphNodeParams *gp = reinterpret_cast<cudaGraphNodeParams *>(raw);
    gp->type = cudaGraphNodeTypeMemAlloc;
    cudaMemAllocNodeParams ap = alloc_params(N * sizeof(int));
    memcpy(&gp->alloc, &ap, sizeof ap);
    cudaGraphNode_t na;
    CHECK(cudaGraphAddNode(&na, g, nullptr, nullptr, 0, gp));    // the generic form
    int *c = (int *)gp->alloc.dptr;
    OKC(c != nullptr);
    int base = 100, n = N;
    void *args[] = { &c, &base, &n };
    kernel_node(g, &na, 1, (void *)fill, args);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    std::vector<int> host(N);
    unsigned long long used = 0, reserved = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    OKC(reserved >= N * sizeof(int));
    for (int way = 0; way < 3; way++) {
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaMemcpyAsync(host.data(), c, N * sizeof(int), cudaMemcpyDeviceToHost, s));   // after the graph
        CHECK(cudaStreamSynchronize(s));
        bool ok = true;
        for (int i = 0; i < N; i++)
            ok = ok && host[i] == 100 + i;
        OKC(ok);
        CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
        OKC(used == N * sizeof(int));
        EXPECT_ERR(cudaGraphLaunch(x, s), cudaErrorInvalidValue);   // still live: no relaunch
        if (way == 0) {
            CHECK(cudaFree(c));
        } else if (way == 1) {
            CHECK(cudaFreeAsync(c, s));
        } else {                                          // a free node in another graph
            cudaGraph_t g2;
            CHECK(cudaGraphCreate(&g2, 0));
            cudaGraphNode_t nf;
            CHECK(cudaGraphAddMemFreeNode(&nf, g2, nullptr, 0, c));
            cudaGraphNode_t again;
            EXPECT_ERR(cudaGraphAddMemFreeNode(&again, g, nullptr, 0, c), cudaErrorInvalidValue);
            cudaGraphExec_t x2;
            CHECK(cudaGraphInstantiate(&x2, g2, 0));
            CHECK(cudaGraphLaunch(x2, s));
            CHECK(cudaGraphExecDestroy(x2));
            CHECK(cudaGraphDestroy(g2));
        }
        CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
        OKC(used == 0);
        EXPECT_ERR(cudaFree(c), cudaErrorInvalidValue);   // not allocated now
    }
    CHECK(cudaGetLastError() == cudaErrorInvalidValue ? cudaSuccess : cudaErrorUnknown);
    unsigned long long high = 0, zero = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
    OKC(high >= N * sizeof(int));
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
    OKC(high == 0);
    EXPECT_ERR(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero), cudaErrorInvalidValue);
    CHECK(cudaDeviceGraphMemTrim(0));
    CHECK(cudaGraphExecDestroy(x));

    // auto-free on launch: each launch frees the previous one's allocation
    CHECK(cudaGraphInstantiateWithFlags(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    for (int rep = 0; rep < 3; rep++)
        CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaMemcpyAsync(host.data(), c, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    OKC(host[N - 1] == 100 + N - 1);
    // the graph and its exec go; the live allocation stays usable until freed
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaMemcpy(host.data(), c, N * sizeof(int), cudaMemcpyDeviceToHost));
    OKC(host[5] == 105);
    CHECK(cudaFree(c));
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    OKC(reserved == 0);                                   // nothing can use it any more: it went back

    cudaGraph_t bad;
    CHECK(cudaGraphCreate(&bad, 0));
    cudaGraphNode_t nb;
    cudaMemAllocNodeParams p = alloc_params(0);
    EXPECT_ERR(cudaGraphAddMemAllocNode(&nb, bad, nullptr, 0, &p), cudaErrorInvalidValue);
    p = alloc_params(64);
    p.poolProps.location.id = 99;
    EXPECT_ERR(cudaGraphAddMemAllocNode(&nb, bad, nullptr, 0, &p), cudaErrorInvalidDevice);
    int *plain;
    CHECK(cudaMalloc(&plain, 64));
    EXPECT_ERR(cudaGraphAddMemFreeNode(&nb, bad, nullptr, 0, plain), cudaErrorInvalidValue);
    size_t count = 0;
    CHECK(cudaGraphGetNodes(bad, nullptr, &count));
    OKC(count == 0);                                      // refused nodes leave nothing behind
    CHECK(cudaGetLastError() == cudaErrorInvalidValue ? cudaSuccess : cudaErrorUnknown);
    CHECK(cudaFree(plain));
    CHECK(cudaGraphDestroy(bad));
    CHECK(cudaStreamDestroy(s));
}

// Stream capture: cudaMallocAsync / cudaFreeAsync become allocation and free nodes; the graph runs repeatedly.
static void captured()
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<int> host(N, -1);
    cudaGraph_t g;
    int *a = nullptr, *b = nullptr;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync(&a, N * sizeof(int), s));
    CHECK(cudaMallocAsync(&b, N * sizeof(int), s));
    fill<<<(N + 127) / 128, 128, 0, s>>>(a, 3, N);
    square<<<(N + 127) / 128, 128, 0, s>>>(b, a, N);
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaMemcpyAsync(host.data(), b, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(b, s));
    CHECK(cudaStreamEndCapture(s, &g));
    OKC(a != nullptr && b != nullptr);
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CHECK(cudaGraphGetNodes(g, nodes.data(), &count));
    int allocs = 0, frees = 0;
    for (auto node : nodes) {
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(node, &t));
        allocs += t == cudaGraphNodeTypeMemAlloc;
        frees += t == cudaGraphNodeTypeMemFree;
    }
    OKC(allocs == 2 && frees == 2);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 3; rep++) {
        std::fill(host.begin(), host.end(), -1);
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        OKC(squares_ok(host.data(), 3));
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
}

int main()
{
    explicit_api();
    outliving_allocation();
    captured();
    printf("OK %ld\n", checks);
    return 0;
}
