// The driver API as CUDA 13 programs use it, built with the 13.0 headers: a program that starts with the runtime
// API then asks the driver (cuCtxGetDevice and friends without ever calling cuInit itself), a context created from a
// zero-initialised CUctxCreateParams (and the parameters it refuses), and a context created on one thread and made
// current on others (cuCtxSetCurrent, cuCtxPushCurrent / cuCtxPopCurrent migration), each launching work that must
// all run; and what CUDA 13 loaders ask of a function (cuFuncIsLoaded, cuFuncLoad, cuFuncGetParamInfo,
// cuFuncGetParamCount, cuKernelGetParamInfo). Usage: drv_ctx13 PTX_FILE THREADS. Prints "OK <checks>" on success.
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>

#include "drv_check.h"

#define PER_THREAD 4096

static CUcontext shared_ctx;
static CUfunction scale_fn;
static CUdeviceptr data;

struct job { int index, push; };

static void *worker(void *arg)
{
    struct job *j = arg;
    CUcontext cur = NULL;
    if (j->push)
        DCHECK(cuCtxPushCurrent(shared_ctx));
    else
        DCHECK(cuCtxSetCurrent(shared_ctx));
    DCHECK(cuCtxGetCurrent(&cur));
    DEXPECT(cur == shared_ctx);
    CUdevice dev = -1;
    DCHECK(cuCtxGetDevice(&dev));
    DEXPECT(dev == 0);
    CUdeviceptr mine = data + (CUdeviceptr)j->index * PER_THREAD * sizeof(float);
    float s = 2.0f + (float)j->index;
    int n = PER_THREAD;
    void *params[] = { &mine, &s, &n };
    DCHECK(cuLaunchKernel(scale_fn, PER_THREAD / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    if (j->index % 3 == 0)
        DCHECK(cuCtxSynchronize());      // the others leave their launch in flight: the context has it
    if (j->push) {
        CUcontext popped = NULL;
        DCHECK(cuCtxPopCurrent(&popped));
        DEXPECT(popped == shared_ctx);
    } else {
        DCHECK(cuCtxSetCurrent(NULL));
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("usage: drv_ctx13 PTX_FILE THREADS\n");
        return 2;
    }
    int nthreads = atoi(argv[2]);

    // 1. the runtime first: the driver answers about the context the runtime made current, no cuInit needed
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        printf("FAIL runtime start-up\n");
        return 1;
    }
    CUdevice dev = -1;
    DCHECK(cuCtxGetDevice(&dev));
    OKC(dev == 0);
    CUcontext primary = NULL;
    DCHECK(cuCtxGetCurrent(&primary));
    OKC(primary != NULL);
    int version = 0;
    DCHECK(cuDriverGetVersion(&version));
    OKC(version >= 13000);

    // 2. a context from a zero-initialised CUctxCreateParams, and the parameters a remote driver cannot honour
    CUctxCreateParams params;
    memset(&params, 0, sizeof params);
    DCHECK(cuCtxCreate(&shared_ctx, &params, 0, 0));
    CUcontext cur = NULL;
    DCHECK(cuCtxGetCurrent(&cur));
    OKC(cur == shared_ctx && cur != primary);
    CUctxCigParam cig;
    memset(&cig, 0, sizeof cig);
    CUctxCreateParams with_cig = params;
    with_cig.cigParams = &cig;
    CUcontext refused = NULL;
    DEXPECT_ERR(cuCtxCreate(&refused, &with_cig, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
    CUexecAffinityParam aff;
    memset(&aff, 0, sizeof aff);
    aff.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    aff.param.smCount.val = 1;
    CUctxCreateParams with_aff = params;
    with_aff.execAffinityParams = &aff;
    with_aff.numExecAffinityParams = 1;
    DEXPECT_ERR(cuCtxCreate(&refused, &with_aff, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    checks += 2;

    // 3. the context's module and memory, made here; then it leaves this thread and serves the others
    CUmodule mod;
    DCHECK(cuModuleLoad(&mod, argv[1]));
    DCHECK(cuModuleGetFunction(&scale_fn, mod, "scale"));
    size_t total = (size_t)nthreads * PER_THREAD;
    float *host = malloc(total * sizeof(float)), *back = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++)
        host[i] = (float)(i % 977) + 0.5f;
    DCHECK(cuMemAlloc(&data, total * sizeof(float)));
    DCHECK(cuMemcpyHtoD(data, host, total * sizeof(float)));

    // 4. what CUDA 13 loaders ask of a function: its loading state, an explicit load, its parameters
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_MAX;
    DCHECK(cuFuncIsLoaded(&state, scale_fn));
    OKC(state == CU_FUNCTION_LOADING_STATE_LOADED);
    DCHECK(cuFuncLoad(scale_fn));
    size_t off = 0, sz = 0;
    DCHECK(cuFuncGetParamInfo(scale_fn, 2, &off, &sz));                  // scale(float *x, float s, int n)
    OKC(off == 12 && sz == 4);
    DEXPECT_ERR(cuFuncGetParamInfo(scale_fn, 3, &off, &sz), CUDA_ERROR_INVALID_VALUE);
    checks++;
    // cuFuncGetParamCount is CUDA 13.2's, newer than these headers: through cuGetProcAddress at the driver's version
    CUresult (*param_count)(CUfunction, size_t *) = NULL;
    CUdriverProcAddressQueryResult found;
    DCHECK(cuGetProcAddress("cuFuncGetParamCount", (void **)&param_count, version, 0, &found));
    size_t count = 0;
    DCHECK(param_count(scale_fn, &count));
    OKC(found == CU_GET_PROC_ADDRESS_SUCCESS && count == 3);
    CUlibrary lib;
    DCHECK(cuLibraryLoadFromFile(&lib, argv[1], NULL, NULL, 0, NULL, NULL, 0));
    CUkernel kern;
    DCHECK(cuLibraryGetKernel(&kern, lib, "scale"));
    DCHECK(cuKernelGetParamInfo(kern, 1, &off, &sz));
    OKC(off == 8 && sz == 4);
    DCHECK(cuLibraryUnload(lib));

    CUcontext popped = NULL;
    DCHECK(cuCtxPopCurrent(&popped));
    OKC(popped == shared_ctx);
    DCHECK(cuCtxGetCurrent(&cur));
    OKC(cur == primary);                                    // what was current before it, the runtime's
    pthread_t *t = malloc(sizeof *t * (size_t)nthreads);
    struct job *jobs = malloc(sizeof *jobs * (size_t)nthreads);
    for (int i = 0; i < nthreads; i++) {
        jobs[i] = (struct job){ i, i % 2 };
        DEXPECT(pthread_create(&t[i], NULL, worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);

    // every launch of every thread ran, in the migrated context
    DCHECK(cuCtxPushCurrent(shared_ctx));
    DCHECK(cuMemcpyDtoH(back, data, total * sizeof(float)));
    int all = 1;
    for (size_t i = 0; i < total; i++)
        all &= back[i] == host[i] * (2.0f + (float)(i / PER_THREAD));
    OKC(all);
    DCHECK(cuMemFree(data));
    DCHECK(cuModuleUnload(mod));
    DCHECK(cuCtxPopCurrent(&popped));
    DCHECK(cuCtxDestroy(shared_ctx));
    DCHECK(cuCtxGetDevice(&dev));                           // the runtime's context again
    OKC(dev == 0);
    free(host), free(back), free(t), free(jobs);
    printf("OK %ld\n", checks);
    return 0;
}
