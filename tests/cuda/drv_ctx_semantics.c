// Context semantics of libvcuda on the daemon's one context per device: destroying a created context frees what it
// made (allocations, pinned memory, streams, events, modules) and nothing else; a primary-context reset while a
// created context lives frees only the primary context's; a CUfunction belongs to its context's device while a
// CUkernel runs anywhere. Usage: drv_ctx_semantics PTX_FILE (two GPUs). Prints "OK <checks>".
#include <string.h>

#include "drv_check.h"

static size_t free_mem(void)
{
    size_t f, t;
    DCHECK(cuMemGetInfo(&f, &t));
    return f;
}

/* A round trip through p: it is live device memory. */
static int usable(CUdeviceptr p)
{
    unsigned v = 0x5eed, back = 0;
    return cuMemcpyHtoD(p, &v, 4) == CUDA_SUCCESS && cuMemcpyDtoH(&back, p, 4) == CUDA_SUCCESS && back == v;
}

static void destroy_frees_what_it_made(const char *ptx)
{
    CUcontext prim, c;
    DCHECK(cuDevicePrimaryCtxRetain(&prim, 0));
    DCHECK(cuCtxSetCurrent(prim));
    CUdeviceptr keep;
    DCHECK(cuMemAlloc(&keep, 1 << 20));
    size_t before = free_mem();

    DCHECK(cuCtxCreate(&c, NULL, 0, 0));
    CUdeviceptr mine, managed;
    void *pinned;
    CUstream s;
    CUevent e;
    CUmodule m;
    CUfunction f;
    DCHECK(cuMemAlloc(&mine, 4 << 20));
    DCHECK(cuMemAllocManaged(&managed, 1 << 16, CU_MEM_ATTACH_GLOBAL));
    DCHECK(cuMemAllocHost(&pinned, 4096));
    DCHECK(cuStreamCreate(&s, 0));
    DCHECK(cuEventCreate(&e, 0));
    DCHECK(cuModuleLoadData(&m, ptx));
    DCHECK(cuModuleGetFunction(&f, m, "scale"));
    OKC(free_mem() < before);
    DCHECK(cuCtxDestroy(c));

    CUcontext cur;
    DCHECK(cuCtxGetCurrent(&cur));
    OKC(cur == prim);                                    // the context below it is current again
    OKC(free_mem() == before);                           // its device memory went back to the daemon
    DEXPECT_ERR(cuMemFree(mine), CUDA_ERROR_INVALID_VALUE);
    DEXPECT_ERR(cuMemFree(managed), CUDA_ERROR_INVALID_VALUE);
    DEXPECT_ERR(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
    DEXPECT_ERR(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    DEXPECT_ERR(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
    DEXPECT_ERR(cuModuleGetFunction(&f, m, "scale"), CUDA_ERROR_INVALID_HANDLE);
    checks += 6;
    OKC(usable(keep));                                   // the primary context's memory is untouched
    DCHECK(cuMemFree(keep));
}

static void primary_reset_spares_created(void)
{
    CUcontext prim, c;
    DCHECK(cuDevicePrimaryCtxRetain(&prim, 0));
    DCHECK(cuCtxCreate(&c, NULL, 0, 0));
    CUdeviceptr in_created;
    DCHECK(cuMemAlloc(&in_created, 4096));
    DCHECK(cuCtxPushCurrent(prim));
    CUdeviceptr in_primary;
    CUstream s;
    DCHECK(cuMemAlloc(&in_primary, 4096));
    DCHECK(cuStreamCreate(&s, 0));
    DCHECK(cuDevicePrimaryCtxReset(0));
    DEXPECT_ERR(cuMemFree(in_primary), CUDA_ERROR_INVALID_VALUE);   // the primary context's memory went
    DEXPECT_ERR(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    checks += 2;
    OKC(usable(in_created));                             // the created context's stays
    CUcontext popped;
    DCHECK(cuCtxPopCurrent(&popped));
    OKC(popped == prim);
    DCHECK(cuMemFree(in_created));
    DCHECK(cuCtxDestroy(c));
    DCHECK(cuDevicePrimaryCtxRelease(0));
}

static void functions_belong_to_a_device(const char *ptx, size_t len)
{
    CUcontext p0, p1;
    DCHECK(cuDevicePrimaryCtxRetain(&p0, 0));
    DCHECK(cuDevicePrimaryCtxRetain(&p1, 1));
    DCHECK(cuCtxSetCurrent(p0));
    CUmodule m;
    CUfunction f;
    DCHECK(cuModuleLoadData(&m, ptx));
    DCHECK(cuModuleGetFunction(&f, m, "scale"));
    CUdeviceptr x0, x1;
    float v = 1.0f, k = 4.0f;
    int n = 1;
    DCHECK(cuMemAlloc(&x0, 4));
    DCHECK(cuMemcpyHtoD(x0, &v, 4));
    void *args0[] = { &x0, &k, &n };
    DCHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args0, NULL));
    DCHECK(cuMemcpyDtoH(&v, x0, 4));
    OKC(v == 4.0f);

    DCHECK(cuCtxSetCurrent(p1));
    DCHECK(cuMemAlloc(&x1, 4));
    void *args1[] = { &x1, &k, &n };
    DEXPECT_ERR(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args1, NULL), CUDA_ERROR_INVALID_HANDLE);
    checks++;
    int regs = -1;
    DCHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));   // a query answers for its own device
    OKC(regs >= 0);

    // a library's kernel is context-independent: it runs in either context
    CUlibrary lib;
    CUkernel kern;
    DCHECK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    DCHECK(cuLibraryGetKernel(&kern, lib, "scale"));
    v = 2.0f;
    DCHECK(cuMemcpyHtoD(x1, &v, 4));
    DCHECK(cuLaunchKernel((CUfunction)kern, 1, 1, 1, 32, 1, 1, 0, NULL, args1, NULL));
    DCHECK(cuMemcpyDtoH(&v, x1, 4));
    OKC(v == 8.0f);
    CUfunction f1, f1again;
    DCHECK(cuKernelGetFunction(&f1, kern));              // the kernel in this context: a function of GPU1
    DCHECK(cuKernelGetFunction(&f1again, kern));
    OKC(f1 == f1again && f1 != f);
    DCHECK(cuCtxSetCurrent(p0));
    DEXPECT_ERR(cuLaunchKernel(f1, 1, 1, 1, 32, 1, 1, 0, NULL, args0, NULL), CUDA_ERROR_INVALID_HANDLE);
    checks++;
    (void)len;
    DCHECK(cuLibraryUnload(lib));
    DCHECK(cuModuleUnload(m));
    DCHECK(cuMemFree(x0));
    DCHECK(cuCtxSetCurrent(p1));
    DCHECK(cuMemFree(x1));
    DCHECK(cuDevicePrimaryCtxRelease(1));
    DCHECK(cuDevicePrimaryCtxRelease(0));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: %s PTX_FILE\n", argv[0]);
        return 2;
    }
    size_t len;
    char *ptx = drv_read_file(argv[1], &len);
    int n = 0;
    DCHECK(cuInit(0));
    DCHECK(cuDeviceGetCount(&n));
    DEXPECT(n >= 2);
    destroy_frees_what_it_made(ptx);
    primary_reset_spares_created();
    functions_belong_to_a_device(ptx, len);
    free(ptx);
    printf("OK %ld\n", checks);
    return 0;
}
