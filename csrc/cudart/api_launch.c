/* Kernel launches (nvcc 13 ABI, cudaLaunchKernel, cudaLaunchKernelExC with launch attributes, cooperative launches;
 * the checks, packing and sending are the core's launch.c and launch_ex.c),
 * launch configuration (thread-local, answered locally), function attributes and occupancy (computed locally from
 * the module-load attributes and the device snapshot), cudaGetFuncBySymbol (the core's per-device handle, libvcuda's
 * CUfunction), cudaFuncSetAttribute (validated and recorded here, forwarded fire-and-forget as FUNC_SET_ATTR; set
 * device-wide, as NVIDIA's runtime sets them on the CUkernel: they hold after cudaDeviceReset). */
#include <stdlib.h>
#include <string.h>

#include "cudart.h"

PV_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream)
{
    struct pv_call_config c = { grid, block, shmem, stream };
    return pv_push_config(&c) == 0 ? 0u : 1u;
}

PV_API cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream)
{
    struct pv_call_config c;
    if (pv_pop_config(&c) != 0)
        return pv_ret(PV_cudaErrorInvalidConfiguration);
    if (grid)
        *grid = c.grid;
    if (block)
        *block = c.block;
    if (shmem)
        *shmem = c.shmem;
    if (stream)
        *(cudaStream_t *)stream = c.stream;
    return PV_SUCCESS;
}

static cudaError_t get_kernel(cudaKernel_t *k, const void *host_fun)
{
    if (!k)
        return PV_cudaErrorInvalidValue;
    struct pv_func *f = pv_func_by_host(host_fun);
    if (!f)
        return PV_cudaErrorInvalidDeviceFunction;
    *k = f;
    return PV_SUCCESS;
}

PV_API cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *host_fun) { return pv_ret(get_kernel(k, host_fun)); }
PV_API cudaError_t cudaGetKernel(cudaKernel_t *k, const void *host_fun) { return pv_ret(get_kernel(k, host_fun)); }

static cudaError_t launch(struct pv_func *f, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    return err == PV_SUCCESS ? pv_launch_on(f, d, grid, block, shmem, s, args, NULL) : err;
}

/* The kernel a host-side function (stub) address names, or a cudaKernel_t passed as the function; NULL if neither. */
struct pv_func *pv_func_of(const void *func)
{
    struct pv_func *f = pv_func_by_host(func);
    if (!f && pv_func_valid((const struct pv_func *)func))
        f = (struct pv_func *)func;
    return f;
}

PV_API cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void **args, size_t shmem,
                                      cudaStream_t s)
{
    if (!pv_func_valid(k))
        return pv_ret(PV_cudaErrorInvalidDeviceFunction);
    return pv_ret(launch(k, grid, block, args, shmem, s));
}

PV_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block, void **args, size_t shmem,
                                           cudaStream_t s)
{
    return __cudaLaunchKernel(k, grid, block, args, shmem, s);
}

PV_API cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                                    cudaStream_t s)
{
    struct pv_func *f = pv_func_of(func);
    if (!f)
        return pv_ret(PV_cudaErrorInvalidDeviceFunction);
    return pv_ret(launch(f, grid, block, args, shmem, s));
}

PV_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                                         cudaStream_t s)
{
    return cudaLaunchKernel(func, grid, block, args, shmem, s);
}

/* cudaLaunchKernelEx's C form (the C++ template in cuda_runtime.h calls it): the attributes are the core's
 * (launch_ex.c), with the driver's cuLaunchKernelEx. */
PV_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    if (!c)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_func *f = pv_func_of(func);
    if (!f)
        return pv_ret(PV_cudaErrorInvalidDeviceFunction);
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err == PV_SUCCESS)
        err = pv_launch_ex(f, d, c->gridDim, c->blockDim, c->dynamicSmemBytes, c->stream, c->attrs, c->numAttrs, args,
                           NULL);
    return pv_ret(err);
}

PV_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    return cudaLaunchKernelExC(c, func, args);
}

PV_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                                               cudaStream_t s)
{
    struct pv_func *f = pv_func_of(func);
    if (!f)
        return pv_ret(PV_cudaErrorInvalidDeviceFunction);
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    return pv_ret(err == PV_SUCCESS ? pv_launch_cooperative(f, d, grid, block, shmem, s, args) : err);
}

PV_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                                                    cudaStream_t s)
{
    return cudaLaunchCooperativeKernel(func, grid, block, args, shmem, s);
}

/* ------------------------------------------------------------------------------------------ attributes */
static cudaError_t func_info(const void *func, struct pv_device **d, struct pv_kinfo **ki)
{
    cudaError_t err = pv_cur(d);
    if (err != PV_SUCCESS)
        return err;
    struct pv_func *f = pv_func_of(func);
    if (!f)
        return PV_cudaErrorInvalidDeviceFunction;
    return pv_kinfo_get(f, *d, ki);
}

/* The driver's CUfunction of a kernel on the current device (its module loaded there, as a launch would): the core's
 * handle, the one libvcuda's cuLaunchKernel and cuFuncGetAttribute take (XLA launches its kernels so). */
PV_API cudaError_t cudaGetFuncBySymbol(void **out, const void *symbol)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    cudaError_t err = out ? func_info(symbol, &d, &ki) : PV_cudaErrorInvalidValue;
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *out = pv_func_handle(pv_func_of(symbol), d->index);
    return *out ? PV_SUCCESS : pv_ret(PV_cudaErrorMemoryAllocation);
}

PV_API cudaError_t cudaFuncGetAttributes(void *attr, const void *func)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    cudaError_t err = attr ? func_info(func, &d, &ki) : PV_cudaErrorInvalidValue;
    if (err != PV_SUCCESS)
        return pv_ret(err);
    char *p = attr;
    memset(p, 0, PV_cudaFuncAttributes_SIZE);
    pv_put_size(p, PV_cudaFuncAttributes_sharedSizeBytes, (size_t)ki->shared);
    pv_put_size(p, PV_cudaFuncAttributes_constSizeBytes, (size_t)ki->constant);
    pv_put_size(p, PV_cudaFuncAttributes_localSizeBytes, (size_t)ki->local);
    pv_put_int(p, PV_cudaFuncAttributes_maxThreadsPerBlock, (int)(ki->max_threads > 0 ? ki->max_threads : d->max_tpb));
    pv_put_int(p, PV_cudaFuncAttributes_numRegs, (int)ki->regs);
    pv_put_int(p, PV_cudaFuncAttributes_ptxVersion, (int)ki->ptx);
    pv_put_int(p, PV_cudaFuncAttributes_binaryVersion, (int)ki->binary);
    pv_put_int(p, PV_cudaFuncAttributes_maxDynamicSharedSizeBytes, (int)ki->max_dyn_shared);
    pv_put_int(p, PV_cudaFuncAttributes_preferredShmemCarveout, (int)ki->carveout);
    return PV_SUCCESS;
}

/* A pointer that is no kernel: NVIDIA's runtime (CUDA 13.0, H100) answers cudaErrorInvalidResourceHandle here, not
 * the cudaErrorInvalidDeviceFunction its documentation names (and cudaFuncGetAttributes answers): as the GPU does. */
PV_API cudaError_t cudaFuncSetAttribute(const void *func, int attr, int value)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    cudaError_t err = func_info(func, &d, &ki);
    if (err == PV_cudaErrorInvalidDeviceFunction)
        err = PV_cudaErrorInvalidResourceHandle;
    return pv_ret(err == PV_SUCCESS ? pv_func_set_attr(d, ki, attr, value, pv_func_of(func)) : err);
}

/* cudaFuncCachePrefer* is a hint: accepted, as on GPUs where it has no effect. */
PV_API cudaError_t cudaFuncSetCacheConfig(const void *func, int config)
{
    if (config < 0 || config > 3)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_func_by_host(func) ? PV_SUCCESS : pv_ret(PV_cudaErrorInvalidDeviceFunction);
}

PV_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *func, int block,
                                                                          size_t dyn, unsigned flags)
{
    (void)flags;
    struct pv_device *d;
    struct pv_kinfo *ki;
    cudaError_t err = n ? func_info(func, &d, &ki) : PV_cudaErrorInvalidValue;
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *n = pv_occupancy(d, ki, block, dyn);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func, int block, size_t dyn)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, func, block, dyn, 0);
}

PV_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dyn, const void *func, int nblocks, int block)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    cudaError_t err = dyn ? func_info(func, &d, &ki) : PV_cudaErrorInvalidValue;
    if (err == PV_SUCCESS)
        err = pv_occupancy_dyn_smem(d, ki, nblocks, block, dyn);
    return err == PV_SUCCESS ? PV_SUCCESS : pv_ret(err);
}

PV_API cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    if (!name)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_func *f = pv_func_of(func);
    if (!f)
        return pv_ret(PV_cudaErrorInvalidDeviceFunction);
    *name = f->name;
    return PV_SUCCESS;
}
