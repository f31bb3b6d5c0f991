// Launches with attributes: cudaLaunchKernelExC (through the cudaLaunchKernelEx template) and the driver's
// cuLaunchKernelEx with what CUB, thrust and frameworks pass. Hints (priority, programmatic stream serialization,
// memory-sync domain, access policy window, carveout, cluster scheduling, a cluster of one block) leave results as
// a plain launch computes them; programmatic and launch-completion events are recorded once the kernel is done (a
// stream waiting on them sees its writes); cooperative launches run (the attribute, cudaLaunchCooperativeKernel,
// cuLaunchKernelEx, cuLaunchCooperativeKernel), beyond the occupancy they are cudaErrorCooperativeLaunchTooLarge;
// bigger clusters, stream-only and unknown attributes are refused with CUDA's codes; a captured launch with attributes replays right. thrust::sort with a
// comparator and cub::DeviceMergeSort (both launched through cudaLaunchKernelExC) are checked against
// std::sort / std::stable_sort. Built -cudart shared and linked with -lcuda. Prints "OK <checks>".
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cub/cub.cuh>
#include <cuda.h>
#include <thrust/device_vector.h>
#include <thrust/sort.h>

#include "check.h"
#include "drv_check.h"

__global__ void affine(int *out, const int *in, int a, int b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a * in[i] + b;
}

__global__ void plus_one(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1;
}

struct Greater {
    __host__ __device__ bool operator()(int a, int b) const { return a > b; }
};
struct ByKeyMod {                       // a comparator that ties: merge sort must be stable
    __host__ __device__ bool operator()(int a, int b) const { return (a & 1023) < (b & 1023); }
};

static unsigned rng = 2024;
static int next_int(int mod) { rng = rng * 1103515245u + 12345u; return (int)((rng >> 8) % (unsigned)mod); }

static const int N = 3000;

static cudaLaunchAttribute attr(cudaLaunchAttributeID id)
{
    cudaLaunchAttribute a;
    memset(&a, 0, sizeof a);
    a.id = id;
    return a;
}

// Runs affine(out, in, 3, -7) with the given attributes on s; the result against the host.
static cudaError_t launch_with(const cudaLaunchAttribute *attrs, unsigned n, int *out, const int *in, cudaStream_t s)
{
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3((N + 127) / 128);
    c.blockDim = dim3(128);
    c.stream = s;
    c.attrs = const_cast<cudaLaunchAttribute *>(attrs);
    c.numAttrs = n;
    return cudaLaunchKernelEx(&c, affine, out, in, 3, -7, N);
}

static bool affine_ok(const int *d_out, const std::vector<int> &h)
{
    std::vector<int> got(N);
    CHECK(cudaMemcpy(got.data(), d_out, N * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (got[i] != 3 * h[i] - 7)
            return false;
    return true;
}

static void hints(int *d_out, const int *d_in, const std::vector<int> &h)
{
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    std::vector<cudaLaunchAttribute> all;
    cudaLaunchAttribute a = attr(cudaLaunchAttributePriority);
    a.val.priority = -1;
    all.push_back(a);
    a = attr(cudaLaunchAttributeProgrammaticStreamSerialization);
    a.val.programmaticStreamSerializationAllowed = 1;
    all.push_back(a);
    a = attr(cudaLaunchAttributeMemSyncDomain);
    a.val.memSyncDomain = cudaLaunchMemSyncDomainRemote;
    all.push_back(a);
    a = attr(cudaLaunchAttributeMemSyncDomainMap);
    a.val.memSyncDomainMap.default_ = 0;
    a.val.memSyncDomainMap.remote = 1;
    all.push_back(a);
    a = attr(cudaLaunchAttributeAccessPolicyWindow);
    a.val.accessPolicyWindow.base_ptr = (void *)d_in;
    a.val.accessPolicyWindow.num_bytes = N * sizeof(int);
    a.val.accessPolicyWindow.hitRatio = 0.5f;
    a.val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    a.val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    all.push_back(a);
    a = attr(cudaLaunchAttributePreferredSharedMemoryCarveout);
    a.val.sharedMemCarveout = 50;
    all.push_back(a);
    a = attr(cudaLaunchAttributeClusterSchedulingPolicyPreference);
    a.val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
    all.push_back(a);
    a = attr(cudaLaunchAttributeClusterDimension);
    a.val.clusterDim.x = a.val.clusterDim.y = a.val.clusterDim.z = 1;
    all.push_back(a);
    a = attr(cudaLaunchAttributeCooperative);
    a.val.cooperative = 0;                                  // explicitly not cooperative: a plain launch
    all.push_back(a);
    all.push_back(attr(cudaLaunchAttributeIgnore));
    for (size_t k = 0; k < all.size(); k++) {               // each alone, then all together
        CHECK(cudaMemset(d_out, 0, N * sizeof(int)));
        CHECK(launch_with(&all[k], 1, d_out, d_in, s));
        CHECK(cudaStreamSynchronize(s));
        OKC(affine_ok(d_out, h));
    }
    CHECK(cudaMemset(d_out, 0, N * sizeof(int)));
    CHECK(launch_with(all.data(), (unsigned)all.size(), d_out, d_in, s));
    CHECK(cudaStreamSynchronize(s));
    OKC(affine_ok(d_out, h));
    CHECK(launch_with(nullptr, 0, d_out, d_in, 0));         // no attributes, legacy stream
    CHECK(cudaDeviceSynchronize());
    OKC(affine_ok(d_out, h));
    CHECK(cudaStreamDestroy(s));
}

// A programmatic / launch-completion event is recorded after the kernel: a second stream that waits on it, then
// adds one, sees the affine result.
static void events(int *d_out, const int *d_in, const std::vector<int> &h)
{
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    cudaEvent_t e;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (int kind = 0; kind < 2; kind++) {
        cudaLaunchAttribute a = attr(kind ? cudaLaunchAttributeLaunchCompletionEvent
                                          : cudaLaunchAttributeProgrammaticEvent);
        if (kind) {
            a.val.launchCompletionEvent.event = e;
        } else {
            a.val.programmaticEvent.event = e;
            a.val.programmaticEvent.triggerAtBlockStart = 1;
        }
        CHECK(cudaMemset(d_out, 0, N * sizeof(int)));
        CHECK(cudaDeviceSynchronize());
        CHECK(launch_with(&a, 1, d_out, d_in, s1));
        CHECK(cudaStreamWaitEvent(s2, e, 0));
        plus_one<<<(N + 127) / 128, 128, 0, s2>>>(d_out, N);
        CHECK(cudaStreamSynchronize(s2));
        CHECK(cudaEventQuery(e));                           // recorded and complete
        std::vector<int> got(N);
        CHECK(cudaMemcpy(got.data(), d_out, N * sizeof(int), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < N; i++)
            ok = ok && got[i] == 3 * h[i] - 7 + 1;
        OKC(ok);
    }
    cudaEvent_t timed;                                      // events must disable timing
    CHECK(cudaEventCreate(&timed));
    cudaLaunchAttribute a = attr(cudaLaunchAttributeProgrammaticEvent);
    a.val.programmaticEvent.event = timed;
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, s1), cudaErrorInvalidValue);
    OKC(cudaGetLastError() == cudaErrorInvalidValue);
    a.val.programmaticEvent.event = e;
    a.val.programmaticEvent.flags = cudaEventRecordExternal;
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, s1), cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue ? cudaSuccess : cudaErrorUnknown);
    CHECK(cudaEventDestroy(timed));
    CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
}

// Cooperative launches run (grid-wide synchronization itself: tests/cuda/emu_coop.cu); beyond what can be resident
// at once they are refused before anything runs.
static void cooperative(int *d_out, const int *d_in, const std::vector<int> &h)
{
    int coop = -1, sms = 0, per_sm = 0;
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    OKC(coop == 1);
    CHECK(cudaMemset(d_out, 0x55, N * sizeof(int)));
    cudaLaunchAttribute a = attr(cudaLaunchAttributeCooperative);
    a.val.cooperative = 1;
    CHECK(launch_with(&a, 1, d_out, d_in, 0));
    OKC(affine_ok(d_out, h));
    void *args[] = { &d_out, &d_in, nullptr, nullptr, nullptr };
    int ka = 3, kb = -7, n = N;
    args[2] = &ka;
    args[3] = &kb;
    args[4] = &n;
    CHECK(cudaMemset(d_out, 0x55, N * sizeof(int)));
    CHECK(cudaLaunchCooperativeKernel((const void *)affine, dim3((N + 127) / 128), dim3(128), args, 0, 0));
    OKC(affine_ok(d_out, h));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, affine, 128, 0));
    EXPECT_ERR(cudaLaunchCooperativeKernel((const void *)affine, dim3(per_sm * sms + 1), dim3(128), args, 0, 0),
               cudaErrorCooperativeLaunchTooLarge);
    OKC(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge);
}

// What cannot be honoured is refused by name with CUDA's codes, and nothing runs.
static void refusals(int *d_out, const int *d_in)
{
    CHECK(cudaMemset(d_out, 0x55, N * sizeof(int)));
    cudaLaunchAttribute a = attr(cudaLaunchAttributeClusterDimension);
    a.val.clusterDim.x = 2;
    a.val.clusterDim.y = a.val.clusterDim.z = 1;
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, 0), cudaErrorNotSupported);
    a.val.clusterDim.x = 0;
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, 0), cudaErrorInvalidValue);
    a = attr(cudaLaunchAttributePreferredClusterDimension);
    a.val.preferredClusterDim.x = 4;
    a.val.preferredClusterDim.y = a.val.preferredClusterDim.z = 1;
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, 0), cudaErrorNotSupported);
    EXPECT_ERR(launch_with(&(a = attr(cudaLaunchAttributeSynchronizationPolicy)), 1, d_out, d_in, 0),
               cudaErrorInvalidValue);
    a = attr(cudaLaunchAttributeDeviceUpdatableKernelNode);
    a.val.deviceUpdatableKernelNode.deviceUpdatable = 1;
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, 0), cudaErrorInvalidValue);   // graphs only
    a = attr((cudaLaunchAttributeID)99);
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, 0), cudaErrorInvalidValue);
    a = attr(cudaLaunchAttributeMemSyncDomain);
    a.val.memSyncDomain = (cudaLaunchMemSyncDomain)7;
    EXPECT_ERR(launch_with(&a, 1, d_out, d_in, 0), cudaErrorInvalidValue);
    cudaLaunchConfig_t bad = {};
    bad.gridDim = dim3(1);
    bad.blockDim = dim3(4096);                              // the plain launch checks still apply
    EXPECT_ERR(cudaLaunchKernelEx(&bad, affine, d_out, d_in, 1, 0, 1), cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration ? cudaSuccess : cudaErrorUnknown);
    CHECK(cudaDeviceSynchronize());                         // no sticky error: refusals are API errors
    std::vector<int> got(N);
    CHECK(cudaMemcpy(got.data(), d_out, N * sizeof(int), cudaMemcpyDeviceToHost));
    bool untouched = true;
    for (int i = 0; i < N; i++)
        untouched = untouched && got[i] == 0x55555555;
    OKC(untouched);
}

// A launch with attributes (an event among them) captured into a graph, replayed twice.
static void captured(int *d_out, const int *d_in, const std::vector<int> &h)
{
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t e;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaLaunchAttribute a[2] = { attr(cudaLaunchAttributePriority), attr(cudaLaunchAttributeLaunchCompletionEvent) };
    a[1].val.launchCompletionEvent.event = e;
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(launch_with(a, 2, d_out, d_in, s));
    CHECK(cudaStreamEndCapture(s, &g));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
    OKC(nodes >= 1);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        CHECK(cudaMemset(d_out, 0, N * sizeof(int)));
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        OKC(affine_ok(d_out, h));
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s));
}

// The driver's cuLaunchKernelEx on the same attribute rules (a cudaKernel_t is a CUkernel, usable as a CUfunction).
static void driver(int *d_out, const int *d_in, const std::vector<int> &h)
{
    DCHECK(cuInit(0));
    cudaKernel_t k;
    CHECK(cudaGetKernel(&k, affine));
    CUlaunchAttribute a[2];
    memset(a, 0, sizeof a);
    a[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    a[1].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a[1].value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig c;
    memset(&c, 0, sizeof c);
    c.gridDimX = (N + 127) / 128;
    c.gridDimY = c.gridDimZ = 1;
    c.blockDimX = 128;
    c.blockDimY = c.blockDimZ = 1;
    c.attrs = a;
    c.numAttrs = 2;
    int ka = 3, kb = -7, n = N;
    void *args[] = { &d_out, &d_in, &ka, &kb, &n };
    CHECK(cudaMemset(d_out, 0, N * sizeof(int)));
    DCHECK(cuLaunchKernelEx(&c, (CUfunction)k, args, nullptr));
    DCHECK(cuCtxSynchronize());
    OKC(affine_ok(d_out, h));
    a[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a[0].value.cooperative = 1;
    CHECK(cudaMemset(d_out, 0, N * sizeof(int)));
    DCHECK(cuLaunchKernelEx(&c, (CUfunction)k, args, nullptr));
    DCHECK(cuCtxSynchronize());
    OKC(affine_ok(d_out, h));
    a[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a[0].value.clusterDim.x = 2;
    a[0].value.clusterDim.y = a[0].value.clusterDim.z = 1;
    OKC(cuLaunchKernelEx(&c, (CUfunction)k, args, nullptr) == CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cudaMemset(d_out, 0, N * sizeof(int)));
    DCHECK(cuLaunchCooperativeKernel((CUfunction)k, (N + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args));
    DCHECK(cuCtxSynchronize());
    OKC(affine_ok(d_out, h));
}

// thrust::sort with a comparator and cub::DeviceMergeSort: merge sorts, launched with cudaLaunchKernelExC.
static void merge_sorts()
{
    for (int n : { 1, 1000, 50000 }) {
        std::vector<int> h(n);
        for (int &x : h)
            x = next_int(2000001) - 1000000;
        thrust::device_vector<int> d(h.begin(), h.end());
        thrust::sort(d.begin(), d.end(), Greater());
        std::vector<int> got(n);
        thrust::copy(d.begin(), d.end(), got.begin());
        std::sort(h.begin(), h.end(), Greater());
        OKC(got == h);
    }
    const int n = 40000;
    std::vector<int> keys(n), vals(n);
    for (int i = 0; i < n; i++) {
        keys[i] = next_int(1 << 20);
        vals[i] = i;
    }
    int *dk, *dv;
    CHECK(cudaMalloc(&dk, n * sizeof(int)));
    CHECK(cudaMalloc(&dv, n * sizeof(int)));
    CHECK(cudaMemcpy(dk, keys.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv, vals.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    size_t temp = 0;
    CHECK(cub::DeviceMergeSort::StableSortPairs(nullptr, temp, dk, dv, n, ByKeyMod()));
    void *dt;
    CHECK(cudaMalloc(&dt, temp));
    CHECK(cub::DeviceMergeSort::StableSortPairs(dt, temp, dk, dv, n, ByKeyMod()));
    std::vector<int> gk(n), gv(n);
    CHECK(cudaMemcpy(gk.data(), dk, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(gv.data(), dv, n * sizeof(int), cudaMemcpyDeviceToHost));
    std::vector<std::pair<int, int>> ref(n);
    for (int i = 0; i < n; i++)
        ref[i] = { keys[i], vals[i] };
    std::stable_sort(ref.begin(), ref.end(),
                     [](const std::pair<int, int> &a, const std::pair<int, int> &b) { return ByKeyMod()(a.first, b.first); });
    bool same = true;
    for (int i = 0; i < n; i++)
        same = same && gk[i] == ref[i].first && gv[i] == ref[i].second;
    OKC(same);                                              // stable: ties keep their input order
    CHECK(cudaMemcpy(dk, keys.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    size_t temp2 = 0;
    CHECK(cub::DeviceMergeSort::SortKeys(nullptr, temp2, dk, n, Greater()));
    void *dt2;
    CHECK(cudaMalloc(&dt2, temp2));
    CHECK(cub::DeviceMergeSort::SortKeys(dt2, temp2, dk, n, Greater()));
    CHECK(cudaMemcpy(gk.data(), dk, n * sizeof(int), cudaMemcpyDeviceToHost));
    std::vector<int> sk = keys;
    std::sort(sk.begin(), sk.end(), Greater());
    OKC(gk == sk);
    CHECK(cudaFree(dk));
    CHECK(cudaFree(dv));
    CHECK(cudaFree(dt));
    CHECK(cudaFree(dt2));
}

int main()
{
    std::vector<int> h(N);
    for (int &x : h)
        x = next_int(100000) - 50000;
    int *d_in, *d_out;
    CHECK(cudaMalloc(&d_in, N * sizeof(int)));
    CHECK(cudaMalloc(&d_out, N * sizeof(int)));
    CHECK(cudaMemcpy(d_in, h.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    hints(d_out, d_in, h);
    events(d_out, d_in, h);
    cooperative(d_out, d_in, h);
    refusals(d_out, d_in);
    captured(d_out, d_in, h);
    driver(d_out, d_in, h);
    merge_sorts();
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_out));
    printf("OK %ld\n", checks);
    return 0;
}
