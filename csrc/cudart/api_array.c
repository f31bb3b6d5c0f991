/* CUDA arrays: allocation, queries, and every copy to, from and between them (the 2D, deprecated 1D, 3D and peer
 * forms, synchronous and on streams), on the core's arrays.c. */
#include "cudart.h"

PV_API cudaError_t cudaMallocArray(cudaArray_t *out, const struct cudaChannelFormatDesc *desc, size_t width,
                                   size_t height, unsigned flags)
{
    return pv_ret(pv_array_create(out, desc, width, height, 0, flags));
}

PV_API cudaError_t cudaMalloc3DArray(cudaArray_t *out, const struct cudaChannelFormatDesc *desc, struct cudaExtent e,
                                     unsigned flags)
{
    return pv_ret(pv_array_create(out, desc, e.width, e.height, e.depth, flags));
}

PV_API cudaError_t cudaFreeArray(cudaArray_t array) { return array ? pv_ret(pv_array_destroy(array)) : PV_SUCCESS; }

PV_API cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent, unsigned *flags,
                                    cudaArray_t array)
{
    int dev;
    uint64_t remote;
    struct cudaChannelFormatDesc d;
    struct cudaExtent e;
    unsigned f;
    if (pv_array_info(array, &dev, &remote, &d, &e, &f) != 0)
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (desc)
        *desc = d;
    if (extent)
        *extent = e;
    if (flags)
        *flags = f;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array)
{
    if (!desc)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (!pv_array_of(array))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    return cudaArrayGetInfo(desc, NULL, NULL, (cudaArray_t)array);
}

/* ------------------------------------------------------------------------------------------ 2D forms */
PV_API cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wo, size_t ho, const void *src, size_t spitch,
                                       size_t width, size_t height, int kind)
{
    return pv_ret(pv_array_copy2d(1, dst, wo, ho, (void *)src, spitch, width, height, kind, NULL));
}

PV_API cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wo, size_t ho, const void *src, size_t spitch,
                                            size_t width, size_t height, int kind, cudaStream_t s)
{
    return pv_ret(pv_array_copy2d(1, dst, wo, ho, (void *)src, spitch, width, height, kind, s));
}

PV_API cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t wo, size_t ho,
                                         size_t width, size_t height, int kind)
{
    return pv_ret(pv_array_copy2d(0, src, wo, ho, dst, dpitch, width, height, kind, NULL));
}

PV_API cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dpitch, cudaArray_const_t src, size_t wo, size_t ho,
                                              size_t width, size_t height, int kind, cudaStream_t s)
{
    return pv_ret(pv_array_copy2d(0, src, wo, ho, dst, dpitch, width, height, kind, s));
}

PV_API cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wod, size_t hod, cudaArray_const_t src,
                                            size_t wos, size_t hos, size_t width, size_t height, int kind)
{
    return pv_ret(pv_array_copy2d_a2a(dst, wod, hod, src, wos, hos, width, height, kind));
}

/* ------------------------------------------------------------------------------------------ deprecated 1D forms */
PV_API cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wo, size_t ho, const void *src, size_t count, int kind)
{
    return pv_ret(pv_array_copy1d(1, dst, wo, ho, (void *)src, count, kind, NULL));
}

PV_API cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wo, size_t ho, const void *src, size_t count,
                                          int kind, cudaStream_t s)
{
    return pv_ret(pv_array_copy1d(1, dst, wo, ho, (void *)src, count, kind, s));
}

PV_API cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t wo, size_t ho, size_t count, int kind)
{
    return pv_ret(pv_array_copy1d(0, src, wo, ho, dst, count, kind, NULL));
}

PV_API cudaError_t cudaMemcpyFromArrayAsync(void *dst, cudaArray_const_t src, size_t wo, size_t ho, size_t count,
                                            int kind, cudaStream_t s)
{
    return pv_ret(pv_array_copy1d(0, src, wo, ho, dst, count, kind, s));
}

PV_API cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wod, size_t hod, cudaArray_const_t src, size_t wos,
                                          size_t hos, size_t count, int kind)
{
    return pv_ret(pv_array_copy1d_a2a(dst, wod, hod, src, wos, hos, count, kind));
}

PV_API cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms *p) { return pv_ret(pv_memcpy3d_peer(p, NULL)); }
PV_API cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s)
{
    return pv_ret(pv_memcpy3d_peer(p, s));
}

/* ------------------------------------------------------------------------------------------ per-thread twins */
PV_API cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t d, size_t wo, size_t ho, const void *s, size_t sp, size_t w,
                                            size_t h, int k)
{
    return cudaMemcpy2DToArray(d, wo, ho, s, sp, w, h, k);
}
PV_API cudaError_t cudaMemcpy2DToArrayAsync_ptsz(cudaArray_t d, size_t wo, size_t ho, const void *s, size_t sp,
                                                 size_t w, size_t h, int k, cudaStream_t st)
{
    return cudaMemcpy2DToArrayAsync(d, wo, ho, s, sp, w, h, k, st);
}
PV_API cudaError_t cudaMemcpy2DFromArray_ptds(void *d, size_t dp, cudaArray_const_t s, size_t wo, size_t ho, size_t w,
                                              size_t h, int k)
{
    return cudaMemcpy2DFromArray(d, dp, s, wo, ho, w, h, k);
}
PV_API cudaError_t cudaMemcpy2DFromArrayAsync_ptsz(void *d, size_t dp, cudaArray_const_t s, size_t wo, size_t ho,
                                                   size_t w, size_t h, int k, cudaStream_t st)
{
    return cudaMemcpy2DFromArrayAsync(d, dp, s, wo, ho, w, h, k, st);
}
PV_API cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t d, size_t wod, size_t hod, cudaArray_const_t s,
                                                 size_t wos, size_t hos, size_t w, size_t h, int k)
{
    return cudaMemcpy2DArrayToArray(d, wod, hod, s, wos, hos, w, h, k);
}
PV_API cudaError_t cudaMemcpyToArray_ptds(cudaArray_t d, size_t wo, size_t ho, const void *s, size_t n, int k)
{
    return cudaMemcpyToArray(d, wo, ho, s, n, k);
}
PV_API cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t d, size_t wo, size_t ho, const void *s, size_t n, int k,
                                               cudaStream_t st)
{
    return cudaMemcpyToArrayAsync(d, wo, ho, s, n, k, st);
}
PV_API cudaError_t cudaMemcpyFromArray_ptds(void *d, cudaArray_const_t s, size_t wo, size_t ho, size_t n, int k)
{
    return cudaMemcpyFromArray(d, s, wo, ho, n, k);
}
PV_API cudaError_t cudaMemcpyFromArrayAsync_ptsz(void *d, cudaArray_const_t s, size_t wo, size_t ho, size_t n, int k,
                                                 cudaStream_t st)
{
    return cudaMemcpyFromArrayAsync(d, s, wo, ho, n, k, st);
}
PV_API cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t d, size_t wod, size_t hod, cudaArray_const_t s, size_t wos,
                                               size_t hos, size_t n, int k)
{
    return cudaMemcpyArrayToArray(d, wod, hod, s, wos, hos, n, k);
}
PV_API cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms *p) { return cudaMemcpy3DPeer(p); }
PV_API cudaError_t cudaMemcpy3DPeerAsync_ptsz(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s)
{
    return cudaMemcpy3DPeerAsync(p, s);
}
