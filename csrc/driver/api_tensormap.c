/* Tensor maps (cuTensorMapEncodeTiled/Im2col/Im2colWide, cuTensorMapReplaceAddress): a CUtensorMap is the GPU
 * host's driver's private 128-byte encoding, so it is made on the daemon of the current context's device
 * (TENSOR_MAP_ENCODE, TENSOR_MAP_REPLACE_ADDRESS) and copied into the caller's struct. Here only what must be known
 * to send the arrays is checked (pointers, the rank, the map's 64-byte alignment, as documented); every other rule
 * is the daemon's: a real GPU's driver's own, or the emulated GPU's documented checks (docs/driver.md). */
#include <string.h>

#include "driver.h"

#define TMAP_ALIGN 64          /* "tensorMap address must be aligned to 64 bytes" (cuda.h) */
#define TMAP_MAX_RANK 5

struct tmap_args {
    uint32_t kind, dtype, rank, channels, pixels, interleave, mode, swizzle, l2, oob;
    const void *addr;
    const uint64_t *dims, *strides;
    const uint32_t *box, *steps;
    const int *lower, *upper;
    size_t nbox, ncorners;
};

static CUresult tmap_usable(const void *tmap, uint32_t rank, uint32_t low, const void *dims, const void *strides,
                            const void *steps)
{
    if (!tmap || (uintptr_t)tmap % TMAP_ALIGN || rank < low || rank > TMAP_MAX_RANK || !dims || !steps ||
        (rank > 1 && !strides))
        return CUDA_ERROR_INVALID_VALUE;
    return drv_ready();
}

static CUresult tmap_encode(void *tmap, const struct tmap_args *a)
{
    struct pv_device *d;
    CUresult r = drv_cur_device(&d);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned char out[PV_TENSOR_MAP_BYTES];
    size_t got = 0, n = a->rank;
    cudaError_t err = pv_call_TENSOR_MAP_ENCODE(
        d, a->kind, a->dtype, a->rank, (uint64_t)(uintptr_t)a->addr, a->dims, n * sizeof *a->dims, a->strides,
        (n - 1) * sizeof *a->strides, a->box, a->nbox * sizeof *a->box, a->steps, n * sizeof *a->steps, a->lower,
        a->ncorners * sizeof *a->lower, a->upper, a->ncorners * sizeof *a->upper, a->channels, a->pixels,
        a->interleave, a->mode, a->swizzle, a->l2, a->oob, out, sizeof out, &got);
    if (err == PV_SUCCESS && got != sizeof out)
        err = PV_cudaErrorUnknown;
    if (err == PV_SUCCESS)
        memcpy(tmap, out, sizeof out);
    return drv_result(err);
}

PV_API CUresult cuTensorMapEncodeTiled(void *tmap, int dtype, uint32_t rank, void *addr, const uint64_t *dims,
                                       const uint64_t *strides, const uint32_t *box, const uint32_t *steps,
                                       int interleave, int swizzle, int l2, int oob)
{
    CUresult r = tmap_usable(tmap, rank, 1, dims, strides, steps);
    if (r != CUDA_SUCCESS || !box)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    struct tmap_args a = { .kind = PV_TENSOR_MAP_TILED, .dtype = (uint32_t)dtype, .rank = rank, .addr = addr,
                           .dims = dims, .strides = strides, .box = box, .steps = steps, .nbox = rank,
                           .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle, .l2 = (uint32_t)l2,
                           .oob = (uint32_t)oob };
    return tmap_encode(tmap, &a);
}

PV_API CUresult cuTensorMapEncodeIm2col(void *tmap, int dtype, uint32_t rank, void *addr, const uint64_t *dims,
                                        const uint64_t *strides, const int *lower, const int *upper,
                                        uint32_t channels, uint32_t pixels, const uint32_t *steps, int interleave,
                                        int swizzle, int l2, int oob)
{
    CUresult r = tmap_usable(tmap, rank, 3, dims, strides, steps);
    if (r != CUDA_SUCCESS || !lower || !upper)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    struct tmap_args a = { .kind = PV_TENSOR_MAP_IM2COL, .dtype = (uint32_t)dtype, .rank = rank, .addr = addr,
                           .dims = dims, .strides = strides, .lower = lower, .upper = upper,
                           .ncorners = rank - 2, .channels = channels, .pixels = pixels, .steps = steps,
                           .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle, .l2 = (uint32_t)l2,
                           .oob = (uint32_t)oob };
    return tmap_encode(tmap, &a);
}

PV_API CUresult cuTensorMapEncodeIm2colWide(void *tmap, int dtype, uint32_t rank, void *addr, const uint64_t *dims,
                                            const uint64_t *strides, int lower, int upper, uint32_t channels,
                                            uint32_t pixels, const uint32_t *steps, int interleave, int mode,
                                            int swizzle, int l2, int oob)
{
    CUresult r = tmap_usable(tmap, rank, 3, dims, strides, steps);
    if (r != CUDA_SUCCESS)
        return r;
    struct tmap_args a = { .kind = PV_TENSOR_MAP_IM2COL_WIDE, .dtype = (uint32_t)dtype, .rank = rank,
                           .addr = addr, .dims = dims, .strides = strides, .lower = &lower, .upper = &upper,
                           .ncorners = 1, .channels = channels, .pixels = pixels, .steps = steps,
                           .interleave = (uint32_t)interleave, .mode = (uint32_t)mode, .swizzle = (uint32_t)swizzle,
                           .l2 = (uint32_t)l2, .oob = (uint32_t)oob };
    return tmap_encode(tmap, &a);
}

PV_API CUresult cuTensorMapReplaceAddress(void *tmap, void *addr)
{
    if (!tmap || (uintptr_t)tmap % TMAP_ALIGN)
        return CUDA_ERROR_INVALID_VALUE;
    struct pv_device *d;
    CUresult r = drv_ready();
    if (r == CUDA_SUCCESS)
        r = drv_cur_device(&d);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned char out[PV_TENSOR_MAP_BYTES];
    size_t got = 0;
    cudaError_t err = pv_call_TENSOR_MAP_REPLACE_ADDRESS(d, tmap, sizeof out, (uint64_t)(uintptr_t)addr, out,
                                                         sizeof out, &got);
    if (err == PV_SUCCESS && got != sizeof out)
        err = PV_cudaErrorUnknown;
    if (err == PV_SUCCESS)
        memcpy(tmap, out, sizeof out);
    return drv_result(err);
}
