// Stream-ordered memory pools through libvcudart: cudaMallocAsync/cudaFreeAsync from the default and created pools,
// stream-ordered reuse (a block freed on one stream and reallocated on another is written in order), release
// threshold and trimming, attributes (current/high watermarks), per-device current pool, access descriptors,
// maximum pool size, allocations inside a capture, and CUDA's error codes. Prints "OK <checks>" on success.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

__global__ void fill(int *p, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}

__global__ void add_from(int *dst, const int *src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

static uint64_t attr64(cudaMemPool_t p, cudaMemPoolAttr a) {
    uint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(p, a, &v));
    return v;
}

int main() {
    int dev = 0, ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev));
    OKC(supported == 1);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    OKC(prop.memoryPoolsSupported == 1);

    cudaMemPool_t def, cur;
    CHECK(cudaDeviceGetDefaultMemPool(&def, dev));
    CHECK(cudaDeviceGetMemPool(&cur, dev));
    OKC(def == cur);
    uint64_t keep_all = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &keep_all));
    OKC(attr64(def, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX);

    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    const int n = 4096;
    const size_t bytes = n * sizeof(int);
    int *a = nullptr, *b = nullptr, *c = nullptr;
    CHECK(cudaMallocAsync(&a, bytes, s1));
    CHECK(cudaMallocAsync(&c, bytes, s1));
    OKC(a && c && a != c);
    OKC(attr64(def, cudaMemPoolAttrUsedMemCurrent) >= 2 * bytes);
    uint64_t reserved = attr64(def, cudaMemPoolAttrReservedMemCurrent);
    OKC(reserved >= 2 * bytes);
    fill<<<n / 256, 256, 0, s1>>>(a, 1000, n);
    fill<<<n / 256, 256, 0, s1>>>(c, 0, n);
    add_from<<<n / 256, 256, 0, s1>>>(c, a, n);          // c = 1000 + 2i
    CHECK(cudaFreeAsync(a, s1));
    // stream-ordered reuse: s2 gets a's block; its writes come after s1's use of a
    CHECK(cudaMallocAsync(&b, bytes, s2));
    OKC(b == a);
    OKC(attr64(def, cudaMemPoolAttrReservedMemCurrent) == reserved);    // no new device memory
    fill<<<n / 256, 256, 0, s2>>>(b, 5, n);
    CHECK(cudaStreamSynchronize(s2));
    std::vector<int> hb(n), hc(n);
    CHECK(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hc.data(), c, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) OKC(hb[i] == 5 + i && hc[i] == 1000 + 2 * i);
    CHECK(cudaFreeAsync(b, s2));
    CHECK(cudaFreeAsync(c, s1));
    CHECK(cudaDeviceSynchronize());
    OKC(attr64(def, cudaMemPoolAttrUsedMemCurrent) == 0);
    OKC(attr64(def, cudaMemPoolAttrUsedMemHigh) >= 2 * bytes);
    OKC(attr64(def, cudaMemPoolAttrReservedMemCurrent) == reserved);    // kept: threshold is "keep all"
    uint64_t zero = 0;
    CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &zero));
    OKC(attr64(def, cudaMemPoolAttrUsedMemHigh) == 0);

    // releasing: trim, then a zero threshold releases at the next synchronization
    size_t free0, free1, total;
    CHECK(cudaMemGetInfo(&free0, &total));
    CHECK(cudaMemPoolTrimTo(def, 0));
    OKC(attr64(def, cudaMemPoolAttrReservedMemCurrent) == 0);
    CHECK(cudaMemGetInfo(&free1, &total));
    OKC(free1 >= free0 + reserved);
    CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &zero));
    int *d;
    CHECK(cudaMallocAsync(&d, 1 << 20, s1));
    CHECK(cudaFreeAsync(d, s1));
    OKC(attr64(def, cudaMemPoolAttrReservedMemCurrent) >= (1u << 20));
    CHECK(cudaStreamSynchronize(s1));
    OKC(attr64(def, cudaMemPoolAttrReservedMemCurrent) == 0);

    // a created pool, made the device's current pool
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    props.maxSize = 1 << 20;
    cudaMemPool_t mine;
    CHECK(cudaMemPoolCreate(&mine, &props));
    OKC(mine != def);
    int *e;
    CHECK(cudaMallocFromPoolAsync(&e, 512 << 10, mine, s1));
    EXPECT_ERR(cudaMallocFromPoolAsync(&d, 768 << 10, mine, s1), cudaErrorMemoryAllocation);   // over maxSize
    cudaGetLastError();
    CHECK(cudaDeviceSetMemPool(dev, mine));
    CHECK(cudaDeviceGetMemPool(&cur, dev));
    OKC(cur == mine);
    int *f;
    CHECK(cudaMallocAsync(&f, 256 << 10, s2));                 // from `mine` now
    OKC(attr64(mine, cudaMemPoolAttrUsedMemCurrent) == (768u << 10));
    fill<<<1, 64, 0, s2>>>(f, 7, 64);
    int hf[64];
    CHECK(cudaMemcpyAsync(hf, f, sizeof hf, cudaMemcpyDeviceToHost, s2));
    CHECK(cudaStreamSynchronize(s2));
    for (int i = 0; i < 64; i++) OKC(hf[i] == 7 + i);
    CHECK(cudaFree(f));                                       // cudaFree works on pool memory too
    CHECK(cudaFreeAsync(e, s1));
    int access = -1;
    cudaMemLocation loc = {cudaMemLocationTypeDevice, dev};
    CHECK(cudaMemPoolGetAccess((cudaMemAccessFlags *)&access, mine, &loc));
    OKC(access == cudaMemAccessFlagsProtReadWrite);
    cudaMemAccessDesc ro = {loc, cudaMemAccessFlagsProtRead};
    EXPECT_ERR(cudaMemPoolSetAccess(mine, &ro, 1), cudaErrorInvalidValue);                     // the owner keeps RW
    if (ndev > 1) {
        cudaMemAccessDesc peer = {{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
        CHECK(cudaMemPoolSetAccess(mine, &peer, 1));
        cudaMemLocation l1 = {cudaMemLocationTypeDevice, 1};
        CHECK(cudaMemPoolGetAccess((cudaMemAccessFlags *)&access, mine, &l1));
        OKC(access == cudaMemAccessFlagsProtReadWrite);
    }
    CHECK(cudaMemPoolDestroy(mine));
    CHECK(cudaDeviceGetMemPool(&cur, dev));
    OKC(cur == def);                                          // the device is back on its default pool

    // allocations inside a captured graph stay valid for its launches
    cudaGraph_t g;
    int *gp = nullptr;
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync(&gp, bytes, s1));
    fill<<<n / 256, 256, 0, s1>>>(gp, 3, n);
    CHECK(cudaMemcpyAsync(hb.data(), gp, bytes, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(gp, s1));
    CHECK(cudaStreamEndCapture(s1, &g));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        memset(hb.data(), 0, bytes);
        CHECK(cudaGraphLaunch(x, s1));
        CHECK(cudaStreamSynchronize(s1));
        for (int i = 0; i < n; i++) OKC(hb[i] == 3 + i);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));

    // errors
    EXPECT_ERR(cudaMemPoolDestroy(def), cudaErrorInvalidValue);
    int v = 1;
    EXPECT_ERR(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReservedMemCurrent, &v), cudaErrorInvalidValue);
    uint64_t nonzero = 5;
    EXPECT_ERR(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &nonzero), cudaErrorInvalidValue);
    props.location.id = 99;
    EXPECT_ERR(cudaMemPoolCreate(&mine, &props), cudaErrorInvalidDevice);
    props.location.id = dev;
    props.allocType = cudaMemAllocationTypeInvalid;
    EXPECT_ERR(cudaMemPoolCreate(&mine, &props), cudaErrorInvalidValue);
    EXPECT_ERR(cudaDeviceGetDefaultMemPool(&cur, 99), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaFreeAsync((void *)0x1234, s1), cudaErrorInvalidValue);
    cudaGetLastError();
    checks += 7;

    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    printf("OK %ld\n", checks);
    return 0;
}
