/* Texture and surface objects over CUDA arrays and linear memory, on the core's textures.c. */
#include "cudart.h"

/* NVIDIA's runtime refuses linear filtering of integer elements itself, with cudaErrorInvalidFilterSetting (its
 * static build makes no driver call for it: tools/driver_probe); the driver's answer, and the daemon's, is
 * cudaErrorInvalidValue. */
PV_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t *out, const struct cudaResourceDesc *r,
                                           const struct cudaTextureDesc *t, const struct cudaResourceViewDesc *v)
{
    struct cudaChannelFormatDesc fmt;
    if (r && t && t->filterMode == PV_cudaFilterModeLinear && t->readMode == PV_cudaReadModeElementType) {
        pv_resource_format(r, &fmt);
        if (fmt.x && fmt.f != PV_cudaChannelFormatKindFloat)
            return pv_ret(PV_cudaErrorInvalidFilterSetting);
    }
    return pv_ret(pv_texture_create(out, r, t, v));
}

PV_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *out, const struct cudaResourceDesc *r)
{
    return pv_ret(pv_surface_create(out, r));
}

PV_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t t) { return pv_ret(pv_texobj_destroy(t, 0)); }
PV_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t s) { return pv_ret(pv_texobj_destroy(s, 1)); }

PV_API cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *out, cudaTextureObject_t t)
{
    return pv_ret(out ? pv_texobj_descs(t, 0, out, NULL, NULL) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *out, cudaTextureObject_t t)
{
    return pv_ret(out ? pv_texobj_descs(t, 0, NULL, out, NULL) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc *out, cudaTextureObject_t t)
{
    return pv_ret(out ? pv_texobj_descs(t, 0, NULL, NULL, out) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *out, cudaSurfaceObject_t s)
{
    return pv_ret(out ? pv_texobj_descs(s, 1, out, NULL, NULL) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaDeviceGetTexture1DLinearMaxWidth(size_t *w, const struct cudaChannelFormatDesc *fmt,
                                                        int device)
{
    if (!w || !fmt)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    struct pv_device *d = pv_device(device);
    int v;
    if (!d)
        return pv_ret(PV_cudaErrorInvalidDevice);
    *w = pv_dev_attr(d, PV_cudaDevAttrMaxTexture1DLinearWidth, &v) == 0 ? (size_t)v : 0;
    return PV_SUCCESS;
}
