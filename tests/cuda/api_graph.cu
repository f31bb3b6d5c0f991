// CUDA graphs through libvcudart: stream capture (one stream, fork/join over three streams, captured host functions,
// symbol copies, memsets of 1/2/4-byte elements), the explicit API (kernel, memcpy, memset, host, child graph,
// empty, event record/wait nodes, dependencies and queries), instantiate/launch/update, and CUDA's error codes.
// Every graph replay is compared byte for byte with the same work issued on a plain stream, and with host
// references. Prints "OK <checks>" on success.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

__device__ int dev_bias;

__global__ void scale_add(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + (float)dev_bias;
}

__global__ void square(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * y[i] - 1.0f;
}

__global__ void sum_into(float *out, const float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + 2.0f * b[i];
}

__global__ void add_iota(int *p, int k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += k * i;
}

struct HostLog { int calls; float seen; const float *src; };
static void host_fn(void *arg) {
    HostLog *h = (HostLog *)arg;
    h->calls++;
    h->seen = h->src[7];               // reads host memory the graph copied back before this node
}

static const int N = 512;
static const int T = 128;

// The work under test, issued on stream s (captured or not): y = square(a*x + y + bias) then z = y + 2*x,
// memsets of every element size, copies there and back, a host function.
static int h_bias = 3;                // read when the copy runs: it must outlive a captured graph
static void issue(cudaStream_t s, float *dx, float *dy, float *dz, int *di, const float *hx, float *hout,
                  HostLog *log, float a) {
    CHECK(cudaMemcpyAsync(dx, hx, N * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemsetAsync(dy, 0, N * sizeof(float), s));
    CHECK(cudaMemcpyToSymbolAsync(dev_bias, &h_bias, sizeof h_bias, 0, cudaMemcpyHostToDevice, s));
    scale_add<<<N / T, T, 0, s>>>(dy, dx, a, N);
    square<<<N / T, T, 0, s>>>(dy, N);
    sum_into<<<N / T, T, 0, s>>>(dz, dy, dx, N);
    CHECK(cudaMemcpyAsync(dx, dz, N * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CHECK(cudaMemset2DAsync(di, 64, 0x11, 32, 4, s));
    add_iota<<<1, 64, 0, s>>>(di, 5, 64);
    CHECK(cudaMemcpyAsync(hout, dx, N * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaLaunchHostFunc(s, host_fn, log));
}

static float ref_z(float x, float a) {
    float y = a * x + 0.0f + 3.0f;
    y = y * y - 1.0f;
    return y + 2.0f * x;
}

static void test_capture_replay_equals_stream() {
    float *dx, *dy, *dz;
    int *di;
    CHECK(cudaMalloc(&dx, N * sizeof(float)));
    CHECK(cudaMalloc(&dy, N * sizeof(float)));
    CHECK(cudaMalloc(&dz, N * sizeof(float)));
    CHECK(cudaMalloc(&di, 256));
    std::vector<float> hx(N), plain(N), replay(N);
    for (int i = 0; i < N; i++) hx[i] = 0.25f * (i % 37) - 2.0f;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // plain stream
    HostLog log1 = {0, 0, plain.data()};
    issue(s, dx, dy, dz, di, hx.data(), plain.data(), &log1, 1.5f);
    CHECK(cudaStreamSynchronize(s));
    std::vector<int> ints_plain(64), ints_replay(64);
    CHECK(cudaMemcpy(ints_plain.data(), di, 256, cudaMemcpyDeviceToHost));
    OKC(log1.calls == 1 && log1.seen == plain[7]);
    for (int i = 0; i < N; i++) OKC(plain[i] == ref_z(hx[i], 1.5f));
    for (int i = 0; i < 64; i++) {
        unsigned char row[64]; memset(row, 0, 64);
        int r = i / 16;                               // 4 rows of 64 bytes, the first 32 bytes of each set to 0x11
        int byte0 = (i % 16) * 4;
        int v; unsigned char b[4];
        for (int k = 0; k < 4; k++) b[k] = (r < 4 && byte0 + k < 32) ? 0x11 : 0;
        memcpy(&v, b, 4);
        OKC(ints_plain[i] == v + 5 * i);
    }

    // capture the same calls, then replay: results must be the stream's, byte for byte
    CHECK(cudaMemset(dx, 0, N * sizeof(float)));
    CHECK(cudaMemset(dz, 0, N * sizeof(float)));
    CHECK(cudaMemset(di, 0, 256));
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s, &st));
    OKC(st == cudaStreamCaptureStatusNone);
    HostLog log2 = {0, 0, replay.data()};
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamIsCapturing(s, &st));
    OKC(st == cudaStreamCaptureStatusActive);
    issue(s, dx, dy, dz, di, hx.data(), replay.data(), &log2, 1.5f);
    unsigned long long id = 0;
    cudaGraph_t cg = nullptr;
    const cudaGraphNode_t *deps = nullptr;
    size_t ndeps = 0;
    CHECK(cudaStreamGetCaptureInfo(s, &st, &id, &cg, &deps, nullptr, &ndeps));
    OKC(st == cudaStreamCaptureStatusActive && id != 0 && cg != nullptr && ndeps == 1);
    cudaGraphNodeType last;
    CHECK(cudaGraphNodeGetType(deps[0], &last));
    OKC(last == cudaGraphNodeTypeHost);
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    OKC(g == cg);
    OKC(log2.calls == 0);                             // nothing ran while capturing
    std::vector<float> untouched(N);
    CHECK(cudaMemcpy(untouched.data(), dx, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) OKC(untouched[i] == 0.0f);
    size_t nn = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &nn));
    OKC(nn == 11);
    size_t ne = 0;
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &ne));
    OKC(ne == 10);                                    // a chain
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 3; rep++) {
        memset(replay.data(), 0, N * sizeof(float));
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        OKC(log2.calls == rep + 1 && log2.seen == plain[7]);
        OKC(memcmp(replay.data(), plain.data(), N * sizeof(float)) == 0);
        CHECK(cudaMemcpy(ints_replay.data(), di, 256, cudaMemcpyDeviceToHost));
        OKC(memcmp(ints_replay.data(), ints_plain.data(), 256) == 0);
        CHECK(cudaMemset(di, 0, 256));
    }
    // the host input is read when the graph runs, not when it was captured
    for (int i = 0; i < N; i++) hx[i] = 1.0f;
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) OKC(replay[i] == ref_z(1.0f, 1.5f));

    // update: the same calls captured with another scale factor
    HostLog log3 = {0, 0, replay.data()};
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    issue(s, dx, dy, dz, di, hx.data(), replay.data(), &log3, -0.5f);
    cudaGraph_t g2;
    CHECK(cudaStreamEndCapture(s, &g2));
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(x, g2, &info));
    OKC(info.result == cudaGraphExecUpdateSuccess);
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    OKC(log3.calls == 1 && log2.calls == 4);
    for (int i = 0; i < N; i++) OKC(replay[i] == ref_z(1.0f, -0.5f));
    // a graph of another shape cannot update it
    cudaGraph_t g3;
    CHECK(cudaGraphCreate(&g3, 0));
    cudaGraphNode_t e;
    CHECK(cudaGraphAddEmptyNode(&e, g3, nullptr, 0));
    EXPECT_ERR(cudaGraphExecUpdate(x, g3, &info), cudaErrorGraphExecUpdateFailure);
    OKC(info.result == cudaGraphExecUpdateErrorTopologyChanged);
    cudaGetLastError();
    CHECK(cudaGraphLaunch(x, s));                     // still the updated graph
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) OKC(replay[i] == ref_z(1.0f, -0.5f));

    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphDestroy(g3));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dx)); CHECK(cudaFree(dy)); CHECK(cudaFree(dz)); CHECK(cudaFree(di));
}

// Fork/join across three streams with events; the graph replays the diamond in dependency order.
static void test_fork_join() {
    int *a, *b, *c;
    CHECK(cudaMalloc(&a, 64 * sizeof(int)));
    CHECK(cudaMalloc(&b, 64 * sizeof(int)));
    CHECK(cudaMalloc(&c, 64 * sizeof(int)));
    cudaStream_t s0, s1, s2;
    CHECK(cudaStreamCreate(&s0)); CHECK(cudaStreamCreate(&s1)); CHECK(cudaStreamCreate(&s2));
    cudaEvent_t fork, j1, j2;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&j1, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&j2, cudaEventDisableTiming));
    int host[64];

    CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemsetAsync(a, 0, 64 * sizeof(int), s0));
    CHECK(cudaEventRecord(fork, s0));
    CHECK(cudaStreamWaitEvent(s1, fork, 0));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s1, &st));
    OKC(st == cudaStreamCaptureStatusActive);
    CHECK(cudaMemcpyAsync(b, a, 64 * sizeof(int), cudaMemcpyDeviceToDevice, s1));
    add_iota<<<1, 64, 0, s1>>>(b, 2, 64);
    CHECK(cudaMemsetAsync(c, 0, 64 * sizeof(int), s2));
    add_iota<<<1, 64, 0, s2>>>(c, 3, 64);
    // ending before the forked streams are joined back is an error that ends the capture
    cudaGraph_t bad;
    EXPECT_ERR(cudaStreamEndCapture(s0, &bad), cudaErrorStreamCaptureUnjoined);
    OKC(bad == nullptr);
    CHECK(cudaStreamIsCapturing(s1, &st));
    OKC(st == cudaStreamCaptureStatusNone);
    cudaGetLastError();

    CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemsetAsync(a, 0, 64 * sizeof(int), s0));
    add_iota<<<1, 64, 0, s0>>>(a, 1, 64);
    CHECK(cudaEventRecord(fork, s0));
    CHECK(cudaStreamWaitEvent(s1, fork, 0));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    CHECK(cudaMemcpyAsync(b, a, 64 * sizeof(int), cudaMemcpyDeviceToDevice, s1));
    add_iota<<<1, 64, 0, s1>>>(b, 2, 64);
    CHECK(cudaEventRecord(j1, s1));
    CHECK(cudaMemcpyAsync(c, a, 64 * sizeof(int), cudaMemcpyDeviceToDevice, s2));
    add_iota<<<1, 64, 0, s2>>>(c, 3, 64);
    CHECK(cudaEventRecord(j2, s2));
    CHECK(cudaStreamWaitEvent(s0, j1, 0));
    CHECK(cudaStreamWaitEvent(s0, j2, 0));
    add_iota<<<1, 64, 0, s0>>>(a, 10, 64);            // after both branches read a
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s0, &g));
    size_t nroots = 0, nn = 0;
    CHECK(cudaGraphGetRootNodes(g, nullptr, &nroots));
    CHECK(cudaGraphGetNodes(g, nullptr, &nn));
    OKC(nroots == 1 && nn == 7);
    std::vector<cudaGraphNode_t> nodes(nn);
    CHECK(cudaGraphGetNodes(g, nodes.data(), &nn));
    size_t nd = 0;
    CHECK(cudaGraphNodeGetDependencies(nodes[6], nullptr, nullptr, &nd));
    OKC(nd == 2);                                     // the join
    size_t nout = 0;
    CHECK(cudaGraphNodeGetDependentNodes(nodes[1], nullptr, nullptr, &nout));
    OKC(nout == 2);                                   // the fork
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        CHECK(cudaGraphLaunch(x, s1));               // any stream of the device
        CHECK(cudaStreamSynchronize(s1));
        CHECK(cudaMemcpy(host, a, sizeof host, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 64; i++) OKC(host[i] == 11 * i);
        CHECK(cudaMemcpy(host, b, sizeof host, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 64; i++) OKC(host[i] == 3 * i);
        CHECK(cudaMemcpy(host, c, sizeof host, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 64; i++) OKC(host[i] == 4 * i);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(fork)); CHECK(cudaEventDestroy(j1)); CHECK(cudaEventDestroy(j2));
    CHECK(cudaStreamDestroy(s0)); CHECK(cudaStreamDestroy(s1)); CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(a)); CHECK(cudaFree(b)); CHECK(cudaFree(c));
}

// The explicit API: a graph built node by node, with a child graph and event nodes.
static void test_explicit_api() {
    int *p, *q;
    CHECK(cudaMalloc(&p, 64 * sizeof(int)));
    CHECK(cudaMalloc(&q, 64 * sizeof(int)));
    int host[64], zero[64];
    memset(zero, 0, sizeof zero);
    HostLog log = {0, 0, nullptr};
    float hostf[8] = {0};
    log.src = hostf;

    cudaGraph_t g, child;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t memset_n, k1, k2, cpy, host_n, child_n, empty, rec, wait;
    cudaMemsetParams mp = {};
    mp.dst = p; mp.value = 7; mp.elementSize = 4; mp.width = 64; mp.height = 1;
    CHECK(cudaGraphAddMemsetNode(&memset_n, g, nullptr, 0, &mp));
    int k = 2, n = 64;
    void *args1[] = {&p, &k, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)add_iota; kp.gridDim = dim3(1); kp.blockDim = dim3(64); kp.kernelParams = args1;
    CHECK(cudaGraphAddKernelNode(&k1, g, &memset_n, 1, &kp));
    k = 100;                                          // parameters were copied when the node was added
    // the child: q = p, then q += 1*i
    cudaGraphNode_t c_cpy, c_k;
    CHECK(cudaGraphAddMemcpyNode1D(&c_cpy, child, nullptr, 0, q, p, 64 * sizeof(int), cudaMemcpyDeviceToDevice));
    int one = 1;
    void *args2[] = {&q, &one, &n};
    kp.kernelParams = args2;
    CHECK(cudaGraphAddKernelNode(&c_k, child, &c_cpy, 1, &kp));
    CHECK(cudaGraphAddChildGraphNode(&child_n, g, &k1, 1, child));
    CHECK(cudaGraphDestroy(child));                   // the node holds its own copy
    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    CHECK(cudaGraphAddEventRecordNode(&rec, g, &child_n, 1, ev));
    CHECK(cudaGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
    CHECK(cudaGraphAddEmptyNode(&empty, g, &wait, 1));
    void *args3[] = {&p, &one, &n};
    kp.kernelParams = args3;
    CHECK(cudaGraphAddKernelNode(&k2, g, &empty, 1, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&cpy, g, &k2, 1, host, p, sizeof host, cudaMemcpyDeviceToHost));
    cudaHostNodeParams hp = {host_fn, &log};
    CHECK(cudaGraphAddHostNode(&host_n, g, nullptr, 0, &hp));
    CHECK(cudaGraphAddDependencies(g, &cpy, &host_n, nullptr, 1));
    EXPECT_ERR(cudaGraphAddDependencies(g, &cpy, &host_n, nullptr, 1), cudaErrorInvalidValue);   // duplicate edge
    cudaGetLastError();

    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(child_n, &type));
    OKC(type == cudaGraphNodeTypeGraph);
    cudaGraph_t embedded;
    CHECK(cudaGraphChildGraphNodeGetGraph(child_n, &embedded));
    size_t cn = 0;
    CHECK(cudaGraphGetNodes(embedded, nullptr, &cn));
    OKC(cn == 2);
    cudaKernelNodeParams got;
    CHECK(cudaGraphKernelNodeGetParams(k1, &got));
    OKC(got.func == (void *)add_iota && got.blockDim.x == 64 && *(int *)got.kernelParams[1] == 2);
    size_t nroots = 0;
    CHECK(cudaGraphGetRootNodes(g, nullptr, &nroots));
    OKC(nroots == 1);

    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    memcpy(hostf, zero, sizeof hostf);
    CHECK(cudaGraphLaunch(x, 0));
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 64; i++) OKC(host[i] == 7 + 2 * i + i);
    int qh[64];
    CHECK(cudaMemcpy(qh, q, sizeof qh, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) OKC(qh[i] == 7 + 3 * i);
    OKC(log.calls == 1);
    CHECK(cudaEventQuery(ev));                        // recorded by the graph

    // per-exec parameter change: the exec changes, the graph does not
    int k3 = 5;
    void *args4[] = {&p, &k3, &n};
    kp.kernelParams = args4;
    CHECK(cudaGraphExecKernelNodeSetParams(x, k1, &kp));
    CHECK(cudaGraphLaunch(x, 0));
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 64; i++) OKC(host[i] == 7 + 5 * i + i);
    CHECK(cudaGraphKernelNodeGetParams(k1, &got));
    OKC(*(int *)got.kernelParams[1] == 2);
    // a disabled node is skipped
    CHECK(cudaGraphNodeSetEnabled(x, k2, 0));
    unsigned on = 1;
    CHECK(cudaGraphNodeGetEnabled(x, k2, &on));
    OKC(on == 0);
    CHECK(cudaGraphLaunch(x, 0));
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 64; i++) OKC(host[i] == 7 + 5 * i);
    OKC(log.calls == 3);

    // a cycle cannot be instantiated
    CHECK(cudaGraphAddDependencies(g, &host_n, &memset_n, nullptr, 1));
    cudaGraphExec_t bad;
    EXPECT_ERR(cudaGraphInstantiate(&bad, g, 0), cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaGraphRemoveDependencies(g, &host_n, &memset_n, nullptr, 1));
    cudaGraph_t clone;
    CHECK(cudaGraphClone(&clone, g));
    cudaGraphNode_t k1c;
    CHECK(cudaGraphNodeFindInClone(&k1c, k1, clone));
    CHECK(cudaGraphNodeGetType(k1c, &type));
    OKC(type == cudaGraphNodeTypeKernel && k1c != k1);
    CHECK(cudaGraphDestroyNode(k1c));
    size_t clone_n = 0;
    CHECK(cudaGraphGetNodes(clone, nullptr, &clone_n));
    OKC(clone_n == 8);

    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaFree(p)); CHECK(cudaFree(q));
}

static void test_errors() {
    cudaGraph_t g;
    EXPECT_ERR(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    EXPECT_ERR(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    EXPECT_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaErrorIllegalState);
    // synchronizing a capturing stream is not allowed and invalidates the capture
    EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s, &st));
    OKC(st == cudaStreamCaptureStatusInvalidated);
    int *d4;
    CHECK(cudaMalloc(&d4, 4));
    EXPECT_ERR(cudaMemsetAsync(d4, 0, 4, s), cudaErrorStreamCaptureInvalidated);   // work after the invalidation
    EXPECT_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    OKC(g == nullptr);
    CHECK(cudaStreamIsCapturing(s, &st));
    OKC(st == cudaStreamCaptureStatusNone);
    EXPECT_ERR(cudaGraphLaunch(nullptr, s), cudaErrorInvalidValue);
    EXPECT_ERR(cudaGraphInstantiate(nullptr, nullptr, 0), cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d4));
}

int main() {
    test_capture_replay_equals_stream();
    test_fork_join();
    test_explicit_api();
    test_errors();
    printf("OK %ld\n", checks);
    return 0;
}
