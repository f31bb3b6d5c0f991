/* Launches: cuLaunchKernel with kernelParams (one pointer per parameter; the layout comes from the module-load
 * reply) or with extra (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE: the parameter buffer already laid out), and
 * cuLaunchKernelEx for the attributes that can be honoured; occupancy, computed as libvcudart does (core). The
 * function may be a CUfunction or a CUkernel (NVIDIA's runtime passes a CUkernel): it runs on the current
 * context's device, its module loaded there on first use. */
#include "driver.h"

/* On a capturing stream the launch becomes a kernel node (checked and packed now, as CUDA does). */
static CUresult launch(CUfunction h, dim3 grid, dim3 block, unsigned shmem, CUstream s, void **params, void **extra)
{
    struct pv_device *d, *sd = NULL;
    CUresult r = drv_cur_device(&d);
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_func *f = drv_func_of(h, d);
    if (!f)
        return drv_func_error(h);
    uint64_t stream = 0;
    if (pv_stream_resolve(s, d, &stream, &sd) != PV_SUCCESS || sd != d)
        return CUDA_ERROR_INVALID_HANDLE;
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (pv_capturing(s))
        return drv_result(pv_capture_launch(s, f, d, grid, block, shmem, params, extra));
    const void *packed = NULL;
    size_t len = 0;
    if (extra && (r = drv_result(pv_launch_extra(extra, &packed, &len))) != CUDA_SUCCESS)
        return r;
    return drv_result(pv_launch(f, d, grid, block, shmem, stream, params, packed, len));
}

#define LAUNCH(name)                                                                                              \
    PV_API CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,         \
                         unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)                  \
    {                                                                                                             \
        return launch(f, (dim3){ gx, gy, gz }, (dim3){ bx, by, bz }, shmem, s, params, extra);                  \
    }
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)

/* Attributes a remote launch can honour: a priority (the daemon serializes a device's work: accepted), a
 * cooperative launch (all blocks of the emulated device are co-resident), a cluster of one block. */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    if (!c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        const CUlaunchAttribute *a = &c->attrs[i];
        int ok = a->id == CU_LAUNCH_ATTRIBUTE_IGNORE || a->id == CU_LAUNCH_ATTRIBUTE_PRIORITY ||
                 a->id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE ||
                 (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION && a->value.clusterDim.x <= 1 &&
                  a->value.clusterDim.y <= 1 && a->value.clusterDim.z <= 1);
        if (!ok)
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    return launch(f, (dim3){ c->gridDimX, c->gridDimY, c->gridDimZ }, (dim3){ c->blockDimX, c->blockDimY, c->blockDimZ },
                  c->sharedMemBytes, c->hStream, params, extra);
}

PV_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex(c, f, params, extra);
}

PV_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex(c, f, params, extra);
}

static CUresult occupancy(int *n, CUfunction h, int block, size_t dyn)
{
    struct pv_device *d;
    CUresult r = n ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_func *f = drv_func_of(h, d);
    if (!f)
        return drv_func_error(h);
    struct pv_kinfo *ki;
    r = drv_result(pv_kinfo_get(f, d, &ki));
    if (r == CUDA_SUCCESS)
        *n = pv_occupancy(d, ki, block, dyn);
    return r;
}

PV_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t dyn)
{
    return occupancy(n, f, block, dyn);
}

PV_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int block, size_t dyn,
                                                                      unsigned flags)
{
    (void)flags;
    return occupancy(n, f, block, dyn);
}
