/* Launches: cuLaunchKernel with kernelParams (one pointer per parameter; the layout comes from the module-load
 * reply) or with extra (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE: the parameter buffer already laid out),
 * cuLaunchKernelEx with launch attributes and cooperative launches (the core's launch_ex.c); occupancy, computed as
 * libvcudart does (core). The function may be a CUfunction or a CUkernel (NVIDIA's runtime passes a CUkernel): it runs on the current
 * context's device, its module loaded there on first use. */
#include "driver.h"

/* The current context's device and the kernel function h names there. */
static CUresult launch_target(CUfunction h, struct pv_device **d, struct pv_func **f)
{
    CUresult r = drv_cur_device(d);
    if (r == CUDA_SUCCESS && !(*f = drv_func_of(h, *d)))
        r = drv_func_error(h);
    return r;
}

/* On a capturing stream the launch becomes a kernel node (checked and packed now, as CUDA does). */
static CUresult launch(CUfunction h, dim3 grid, dim3 block, unsigned shmem, CUstream s, void **params, void **extra)
{
    struct pv_device *d;
    struct pv_func *f;
    CUresult r = launch_target(h, &d, &f);
    return r == CUDA_SUCCESS ? drv_result(pv_launch_on(f, d, grid, block, shmem, s, params, extra)) : r;
}

#define LAUNCH(name)                                                                                              \
    PV_API CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,         \
                         unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)                  \
    {                                                                                                             \
        return launch(f, (dim3){ gx, gy, gz }, (dim3){ bx, by, bz }, shmem, s, params, extra);                  \
    }
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)

/* The attributes are the core's (launch_ex.c, with libvcudart's cudaLaunchKernelExC): CUlaunchAttribute has the
 * runtime's layout and ids. */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction h, void **params, void **extra)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    struct pv_device *d;
    struct pv_func *f;
    CUresult r = launch_target(h, &d, &f);
    if (r != CUDA_SUCCESS)
        return r;
    return drv_result(pv_launch_ex(f, d, (dim3){ c->gridDimX, c->gridDimY, c->gridDimZ },
                                   (dim3){ c->blockDimX, c->blockDimY, c->blockDimZ }, c->sharedMemBytes, c->hStream,
                                   (const struct pv_launch_attr *)c->attrs, c->numAttrs, params, extra));
}

PV_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex(c, f, params, extra);
}

PV_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex(c, f, params, extra);
}

static CUresult launch_cooperative(CUfunction h, dim3 grid, dim3 block, unsigned shmem, CUstream s, void **params)
{
    struct pv_device *d;
    struct pv_func *f;
    CUresult r = launch_target(h, &d, &f);
    return r == CUDA_SUCCESS ? drv_result(pv_launch_cooperative(f, d, grid, block, shmem, s, params)) : r;
}

#define LAUNCH_COOPERATIVE(name)                                                                                  \
    PV_API CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,         \
                         unsigned bz, unsigned shmem, CUstream s, void **params)                                 \
    {                                                                                                             \
        return launch_cooperative(f, (dim3){ gx, gy, gz }, (dim3){ bx, by, bz }, shmem, s, params);              \
    }
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

/* The current device and h's kernel information there, for the occupancy calls. */
static CUresult occupancy_of(CUfunction h, struct pv_device **d, struct pv_kinfo **ki)
{
    struct pv_func *f;
    CUresult r = launch_target(h, d, &f);
    return r == CUDA_SUCCESS ? drv_result(pv_kinfo_get(f, *d, ki)) : r;
}

static CUresult occupancy(int *n, CUfunction h, int block, size_t dyn)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    CUresult r = n ? occupancy_of(h, &d, &ki) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *n = pv_occupancy(d, ki, block, dyn);
    return r;
}

PV_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dyn, CUfunction h, int nblocks, int block)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    CUresult r = dyn ? occupancy_of(h, &d, &ki) : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_occupancy_dyn_smem(d, ki, nblocks, block, dyn)) : r;
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
