// Device queries, per-thread current device, error semantics, unsupported calls, streams and events.
// Prints "OK <checks>" on success; any failed expectation prints FAIL and exits 1.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <thread>

#include "check.h"

int main() {
    long checks = 0;
    int n = -1;
    CHECK(cudaGetDeviceCount(&n));
    EXPECT(n >= 1);
    printf("devices %d\n", n);

    // versions and error tables (answered locally)
    int v = 0;
    CHECK(cudaRuntimeGetVersion(&v));
    EXPECT(v == 13000);
    CHECK(cudaDriverGetVersion(&v));
    EXPECT(v >= 13000);
    EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
    EXPECT(strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0);
    EXPECT(strlen(cudaGetErrorString(cudaErrorMemoryAllocation)) > 10);
    checks += 5;

    // properties and attributes agree
    for (int d = 0; d < n; d++) {
        cudaDeviceProp p;
        memset(&p, 0xff, sizeof p);
        CHECK(cudaGetDeviceProperties(&p, d));
        printf("GPU%d %s sm_%d%d mem=%zu sms=%d\n", d, p.name, p.major, p.minor, p.totalGlobalMem,
               p.multiProcessorCount);
        EXPECT(strlen(p.name) > 0 && strlen(p.name) < 256);
        EXPECT(p.totalGlobalMem > 0 && p.warpSize == 32 && p.maxThreadsPerBlock >= 64);
        int a = -1;
        CHECK(cudaDeviceGetAttribute(&a, cudaDevAttrMaxThreadsPerBlock, d));
        EXPECT(a == p.maxThreadsPerBlock);
        CHECK(cudaDeviceGetAttribute(&a, cudaDevAttrMultiProcessorCount, d));
        EXPECT(a == p.multiProcessorCount);
        CHECK(cudaDeviceGetAttribute(&a, cudaDevAttrComputeCapabilityMajor, d));
        EXPECT(a == p.major);
        CHECK(cudaDeviceGetAttribute(&a, cudaDevAttrMaxBlockDimX, d));
        EXPECT(a == p.maxThreadsDim[0]);
        CHECK(cudaDeviceGetAttribute(&a, cudaDevAttrWarpSize, d));
        EXPECT(a == 32);
        checks += 6;
    }
    int a;
    EXPECT_ERR(cudaDeviceGetAttribute(&a, cudaDevAttrWarpSize, n), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaDeviceGetAttribute(&a, (cudaDeviceAttr)44, 0), cudaErrorInvalidValue);   // not an attribute
    EXPECT_ERR(cudaDeviceGetAttribute(&a, (cudaDeviceAttr)100000, 0), cudaErrorInvalidValue);
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    for (int at = 1; at < 148; at++) {   // every valid attribute has an answer
        if (at == 44 || (at > 101 && at < 106) || at == 107 || at == 110 || at == 136 || at == 137 || at == 146)
            continue;
        CHECK(cudaDeviceGetAttribute(&a, (cudaDeviceAttr)at, 0));
    }
    CHECK(cudaDeviceGetAttribute(&a, cudaDevAttrWarpSize, n - 1));
    EXPECT_ERR(cudaGetLastError(), cudaSuccess);

    // current device is per thread
    EXPECT_ERR(cudaSetDevice(n), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaGetLastError(), cudaSuccess);
    EXPECT_ERR(cudaSetDevice(-1), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    CHECK(cudaSetDevice(n - 1));
    int cur = -1;
    std::thread t([&] {
        int other = -1;
        cudaGetDevice(&other);
        EXPECT(other == 0);                       // a new thread starts on device 0
        EXPECT(cudaGetLastError() == cudaSuccess); // and with its own last error
    });
    t.join();
    CHECK(cudaGetDevice(&cur));
    EXPECT(cur == n - 1);
    CHECK(cudaSetDevice(0));
    checks += 10;

    // flags, peer queries
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    unsigned fl = 0;
    CHECK(cudaGetDeviceFlags(&fl));
    EXPECT(fl & cudaDeviceScheduleBlockingSync);
    int can = 7;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, n - 1));
    // emulated GPUs of one daemon reach each other's memory; GPUs of different daemons do not
    const char *hosts = getenv("PYVGPU_HOSTS");
    bool one_daemon = hosts && !strchr(hosts, ',');
    EXPECT(can == (n > 1 && one_daemon));
    checks += 2;

    // error semantics of memory calls
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 1024));
    char host[1024];
    EXPECT_ERR(cudaMemcpy(host, (char *)p + 1000, 100, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_ERR(cudaMemcpy(host, p, 100, (cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection);
    EXPECT_ERR(cudaFree((char *)p + 8), cudaErrorInvalidValue);
    int stack_var;
    EXPECT_ERR(cudaFree(&stack_var), cudaErrorInvalidValue);
    CHECK(cudaFree(p));
    EXPECT_ERR(cudaFree(p), cudaErrorInvalidValue);                               // double free
    EXPECT_ERR(cudaMemcpy(p, host, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue); // freed pointer
    EXPECT_ERR(cudaMemset(p, 0, 16), cudaErrorInvalidValue);
    CHECK(cudaFree(nullptr));
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    EXPECT_ERR(cudaGetLastError(), cudaSuccess);
    size_t huge = (size_t)1 << 50;
    EXPECT_ERR(cudaMalloc(&p, huge), cudaErrorMemoryAllocation);
    cudaGetLastError();
    checks += 11;

    // bad streams and events
    cudaStream_t bogus = (cudaStream_t)(uintptr_t)0x1234560;
    EXPECT_ERR(cudaStreamSynchronize(bogus), cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaStreamQuery(bogus), cudaErrorInvalidResourceHandle);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamDestroy(s));
    EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaMemsetAsync(host, 0, 4, bogus), cudaErrorInvalidResourceHandle);
    cudaEvent_t e;
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventDestroy(e));
    EXPECT_ERR(cudaEventSynchronize(e), cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaEventRecord((cudaEvent_t)(uintptr_t)0x999, 0), cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    checks += 8;

    // unsupported calls: cudaErrorNotSupported, recorded as the last error
    cudaIpcMemHandle_t ipc;
    EXPECT_ERR(cudaIpcGetMemHandle(&ipc, nullptr), cudaErrorNotSupported);
    EXPECT_ERR(cudaGetLastError(), cudaErrorNotSupported);
    memset(&ipc, 0, sizeof ipc);
    void *opened = nullptr;
    EXPECT_ERR(cudaIpcOpenMemHandle(&opened, ipc, cudaIpcMemLazyEnablePeerAccess), cudaErrorNotSupported);
    cudaGetLastError();
    checks += 3;

    // streams and events: ordering of async copies and memsets, event timing
    {
        const size_t N = 1 << 20;
        unsigned char *d, *h;
        CHECK(cudaMalloc(&d, N));
        CHECK(cudaMallocHost((void **)&h, N));
        cudaStream_t s1, s2;
        CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
        CHECK(cudaStreamCreateWithPriority(&s2, cudaStreamDefault, -1));
        unsigned f = 9;
        CHECK(cudaStreamGetFlags(s1, &f));
        EXPECT(f == cudaStreamNonBlocking);
        int prio = 1;
        CHECK(cudaStreamGetPriority(s2, &prio));
        EXPECT(prio == -1);
        cudaEvent_t start, mid, stop;
        CHECK(cudaEventCreate(&start));
        CHECK(cudaEventCreateWithFlags(&mid, cudaEventDisableTiming));
        CHECK(cudaEventCreate(&stop));
        CHECK(cudaEventRecord(start, s1));
        for (int i = 0; i < 20; i++) CHECK(cudaMemsetAsync(d, i, N, s1));   // last one wins
        CHECK(cudaEventRecord(mid, s1));
        CHECK(cudaStreamWaitEvent(s2, mid, 0));
        CHECK(cudaMemsetAsync(d + N / 2, 0xEE, N / 2, s2));                    // after all of s1's work
        CHECK(cudaEventRecord(stop, s2));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaEventQuery(stop));
        CHECK(cudaStreamQuery(s2));
        CHECK(cudaMemcpyAsync(h, d, N, cudaMemcpyDeviceToHost, s2));
        CHECK(cudaStreamSynchronize(s2));
        for (size_t i = 0; i < N; i++) EXPECT(h[i] == (i < N / 2 ? 19 : 0xEE));
        float ms = -1;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        EXPECT(ms >= 0.0f);
        EXPECT(cudaEventElapsedTime(&ms, start, mid) != cudaSuccess);   // mid has timing disabled
        cudaGetLastError();
        // legacy default stream orders with everything
        CHECK(cudaMemset(d, 0x42, N));
        CHECK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < N; i++) EXPECT(h[i] == 0x42);
        CHECK(cudaStreamDestroy(s1));
        CHECK(cudaStreamDestroy(s2));
        CHECK(cudaEventDestroy(start));
        CHECK(cudaEventDestroy(mid));
        CHECK(cudaEventDestroy(stop));
        CHECK(cudaFree(d));
        CHECK(cudaFreeHost(h));
        checks += 8;
    }
    // settings answered locally
    {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
        EXPECT(mode == cudaStreamCaptureModeGlobal);
        CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
        EXPECT(mode == cudaStreamCaptureModeRelaxed);
        size_t lim = 0;
        CHECK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
        EXPECT(lim > 0);
        CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
        cudaFuncCache cc = cudaFuncCachePreferNone;
        CHECK(cudaDeviceGetCacheConfig(&cc));
        EXPECT(cc == cudaFuncCachePreferShared);
        cudaDeviceProp want;
        memset(&want, 0, sizeof want);
        want.major = 7;
        int chosen = -1;
        CHECK(cudaChooseDevice(&chosen, &want));
        EXPECT(chosen >= 0 && chosen < n);
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
        unsigned long long id = 5;
        CHECK(cudaStreamGetCaptureInfo(0, &cs, &id));
        EXPECT(cs == cudaStreamCaptureStatusNone);
        checks += 6;
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaDeviceReset());
    size_t fr, tot;
    CHECK(cudaMemGetInfo(&fr, &tot));
    // reset released everything this process held on the device: all of an emulated GPU's memory is free again
    // (the test checks that); a real GPU's free memory is what every process on it left (tests/e2e/test_api_device.py)
    EXPECT(fr > 0 && fr <= tot);
    printf("after reset free %zu total %zu\n", fr, tot);
    checks += 1;
    printf("OK %ld\n", checks);
    return 0;
}
