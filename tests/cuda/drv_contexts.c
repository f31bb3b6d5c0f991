// Driver-API contexts: the per-thread current-context stack (create, push, pop, set), primary contexts, and
// several threads each working in its own context, spread over every device (GPUs of different hosts driven from
// different threads at once). Usage: drv_contexts PTX_FILE [THREADS]. Prints "OK <checks>".
// `drv_contexts PTX_FILE THREADS stress ROUNDS`: each thread creates a context on its device (several threads a
// device), allocates, copies, checks its pointers, frees and destroys the context, ROUNDS times: frees and
// allocations of one device's threads interleave, so one thread gets back the addresses another just freed, and
// contexts are destroyed while other contexts of the device hold live allocations (which must stay).
#include <pthread.h>
#include <string.h>

#include "drv_check.h"

static const char *ptx;
static int ndev;

static void stack_rules(void)
{
    CUcontext cur, a, b, prim, popped;
    CUdevice dev;
    DCHECK(cuCtxGetCurrent(&cur));
    DEXPECT(cur == NULL);
    DEXPECT_ERR(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
    DEXPECT_ERR(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
    DCHECK(cuCtxCreate(&a, NULL, 0, 0));
    DCHECK(cuCtxGetCurrent(&cur));
    DEXPECT(cur == a);
    DCHECK(cuCtxCreate(&b, NULL, 0, ndev - 1));   // pushed on top of a
    DCHECK(cuCtxGetDevice(&dev));
    DEXPECT(dev == ndev - 1);
    DCHECK(cuDevicePrimaryCtxRetain(&prim, 0));
    DEXPECT(prim != a && prim != b);
    DCHECK(cuCtxPushCurrent(prim));
    DCHECK(cuCtxPopCurrent(&popped));
    DEXPECT(popped == prim);
    DCHECK(cuCtxPopCurrent(&popped));
    DEXPECT(popped == b);
    DCHECK(cuCtxGetCurrent(&cur));
    DEXPECT(cur == a);
    DCHECK(cuCtxSetCurrent(b));   // replaces the top
    DCHECK(cuCtxGetCurrent(&cur));
    DEXPECT(cur == b);
    DCHECK(cuCtxSetCurrent(NULL));
    DCHECK(cuCtxGetCurrent(&cur));
    DEXPECT(cur == NULL);
    unsigned flags;
    int active;
    DCHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    DEXPECT(active == 1);
    DCHECK(cuDevicePrimaryCtxRelease(0));
    DCHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    DEXPECT(active == 0);
    DCHECK(cuCtxDestroy(a));
    DCHECK(cuCtxDestroy(b));
    DEXPECT_ERR(cuCtxPushCurrent(a), CUDA_ERROR_INVALID_CONTEXT);
    DEXPECT_ERR(cuCtxSetCurrent((CUcontext)(uintptr_t)-1), CUDA_ERROR_INVALID_CONTEXT);
}

struct job { int index, device, ok; };

static void *worker(void *arg)
{
    struct job *j = arg;
    CUcontext ctx, popped;
    CUmodule mod;
    CUfunction f;
    CUdevice dev;
    enum { N = 5000 };
    static __thread float a[N], b[N], c[N];
    DCHECK(cuCtxCreate(&ctx, NULL, 0, j->device));
    DCHECK(cuModuleLoad(&mod, ptx));
    DCHECK(cuModuleGetFunction(&f, mod, "vadd"));
    for (int i = 0; i < N; i++) {
        a[i] = (float)(i + j->index);
        b[i] = (float)(2 * i);
    }
    // pop the context, do nothing in between, push it back: the work below must land on its device
    DCHECK(cuCtxPopCurrent(&popped));
    DEXPECT(popped == ctx);
    DCHECK(cuCtxPushCurrent(ctx));
    DCHECK(cuCtxGetDevice(&dev));
    DEXPECT(dev == j->device);
    CUdeviceptr da, db, dc;
    DCHECK(cuMemAlloc(&da, sizeof a));
    DCHECK(cuMemAlloc(&db, sizeof b));
    DCHECK(cuMemAlloc(&dc, sizeof c));
    int n = N;
    for (int round = 0; round < 3; round++) {
        DCHECK(cuMemcpyHtoD(da, a, sizeof a));
        DCHECK(cuMemcpyHtoD(db, b, sizeof b));
        void *params[] = { &da, &db, &dc, &n };
        DCHECK(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
        DCHECK(cuMemcpyDtoH(c, dc, sizeof c));
        for (int i = 0; i < N; i++)
            DEXPECT(c[i] == a[i] + b[i]);
        a[round] += 1.0f;
    }
    CUdevice owner;
    DCHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dc));
    DEXPECT(owner == j->device);
    DCHECK(cuMemFree(da));
    DCHECK(cuMemFree(db));
    DCHECK(cuMemFree(dc));
    DCHECK(cuModuleUnload(mod));
    DCHECK(cuCtxDestroy(ctx));
    j->ok = 1;
    return NULL;
}

static int rounds;

static void *stress_worker(void *arg)
{
    struct job *j = arg;
    enum { N = 4096 };
    unsigned char h[N], back[N];
    for (int r = 0; r < rounds; r++) {
        CUcontext ctx;
        CUdeviceptr p[3];
        DCHECK(cuCtxCreate(&ctx, NULL, 0, j->device));
        for (int k = 0; k < 3; k++) {
            DCHECK(cuMemAlloc(&p[k], N));
            memset(h, (j->index * 31 + r * 7 + k) & 0xff, N);
            DCHECK(cuMemcpyHtoD(p[k], h, N));
        }
        for (int k = 0; k < 3; k++) {
            CUdevice owner;
            DCHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p[k]));
            DEXPECT(owner == j->device);
            DCHECK(cuMemcpyDtoH(back, p[k], N));
            memset(h, (j->index * 31 + r * 7 + k) & 0xff, N);
            DEXPECT(memcmp(h, back, N) == 0);
            DCHECK(cuMemFree(p[k]));
        }
        DCHECK(cuCtxDestroy(ctx));
    }
    j->ok = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: drv_contexts PTX_FILE [THREADS]\n");
        return 2;
    }
    ptx = argv[1];
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    int stress = argc > 4 && strcmp(argv[3], "stress") == 0;
    rounds = stress ? atoi(argv[4]) : 0;
    DCHECK(cuInit(0));
    DCHECK(cuDeviceGetCount(&ndev));
    if (!stress)
        stack_rules();
    pthread_t t[64];
    struct job jobs[64];
    for (int i = 0; i < threads && i < 64; i++) {
        jobs[i] = (struct job){ i, i % ndev, 0 };
        DEXPECT(pthread_create(&t[i], NULL, stress ? stress_worker : worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < threads && i < 64; i++) {
        pthread_join(t[i], NULL);
        DEXPECT(jobs[i].ok);
    }
    printf("OK %d devices %d threads\n", ndev, threads);
    return 0;
}
