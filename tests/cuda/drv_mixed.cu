// A program mixing the runtime (libvcudart) and the driver (libvcuda), as NVIDIA's libraries let it: after
// cudaSetDevice or any runtime call the thread's current context is that device's primary context; a runtime
// allocation made while a created context is current belongs to that context and goes with it. Two GPUs.
// Built -cudart shared and linked with -lcuda. Prints "OK <checks>".
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>

#include "check.h"
#include "drv_check.h"

static void *fresh_thread(void *)
{
    CUcontext cur, p0;
    DCHECK(cuCtxGetCurrent(&cur));
    OKC(cur == nullptr);                                 // nothing current yet on a new thread
    void *p;
    CHECK(cudaMalloc(&p, 256));                          // a runtime call binds device 0's primary context
    DCHECK(cuCtxGetCurrent(&cur));
    DCHECK(cuDevicePrimaryCtxRetain(&p0, 0));
    OKC(cur == p0);
    CHECK(cudaFree(p));
    DCHECK(cuDevicePrimaryCtxRelease(0));
    return nullptr;
}

int main()
{
    DCHECK(cuInit(0));
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    EXPECT(n >= 2);
    CUcontext p1, cur;
    CHECK(cudaSetDevice(1));
    CHECK(cudaFree(0));
    DCHECK(cuCtxGetCurrent(&cur));
    DCHECK(cuDevicePrimaryCtxRetain(&p1, 1));
    OKC(cur == p1);                                      // the runtime's device is the driver's context
    CUdevice dev;
    DCHECK(cuCtxGetDevice(&dev));
    OKC(dev == 1);

    // a created context pushed by the driver is what the runtime uses
    CUcontext c;
    DCHECK(cuCtxCreate(&c, NULL, 0, 0));
    int rd = -1;
    CHECK(cudaGetDevice(&rd));
    OKC(rd == 0);
    void *in_c;
    CHECK(cudaMalloc(&in_c, 1 << 20));
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, in_c));
    OKC(pa.type == cudaMemoryTypeDevice && pa.device == 0);
    DCHECK(cuCtxDestroy(c));                             // it takes the runtime's allocation with it
    EXPECT_ERR(cudaFree(in_c), cudaErrorInvalidValue);
    checks++;
    DCHECK(cuCtxGetCurrent(&cur));
    OKC(cur == p1);
    CHECK(cudaSetDevice(0));                             // cudaSetDevice replaces the current context
    CUcontext p0;
    DCHECK(cuDevicePrimaryCtxRetain(&p0, 0));
    DCHECK(cuCtxGetCurrent(&cur));
    OKC(cur == p0);

    pthread_t t;
    pthread_create(&t, nullptr, fresh_thread, nullptr);
    pthread_join(t, nullptr);
    DCHECK(cuDevicePrimaryCtxRelease(0));
    DCHECK(cuDevicePrimaryCtxRelease(1));
    printf("OK %ld\n", checks);
    return 0;
}
