/* Texture and surface objects over CUDA arrays and linear memory. The daemon creates the object on the GPU that
 * holds the memory (TEX_CREATE / SURF_CREATE) and answers the value kernels take; the descriptors the program gave
 * are kept here for the descriptor queries. Mipmapped arrays, cube maps and format-changing resource views are
 * refused with cudaErrorNotSupported. */
#include <stdlib.h>
#include <string.h>

#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_features.h"

struct texobj {
    unsigned long long value;
    int dev;
    int surface;
    struct cudaResourceDesc res;
    struct cudaTextureDesc tex;
    struct cudaResourceViewDesc view;
    struct texobj *next;
};
static struct texobj *objs;
static pthread_mutex_t objs_mu = PTHREAD_MUTEX_INITIALIZER;

static cudaError_t remember(unsigned long long value, int dev, int surface, const struct cudaResourceDesc *res,
                            const struct cudaTextureDesc *tex, const struct cudaResourceViewDesc *view)
{
    struct texobj *o = calloc(1, sizeof *o);
    if (!o)
        return PV_cudaErrorMemoryAllocation;
    o->value = value;
    o->dev = dev;
    o->surface = surface;
    o->res = *res;
    if (tex)
        o->tex = *tex;
    if (view)
        o->view = *view;
    pthread_mutex_lock(&objs_mu);
    o->next = objs;
    objs = o;
    pthread_mutex_unlock(&objs_mu);
    return PV_SUCCESS;
}

/* A copy of the record of object `value` (of the given kind); 0 when found. Values of different GPUs may coincide:
 * the most recent one wins. */
static int lookup(unsigned long long value, int surface, struct texobj *out, int unlink)
{
    pthread_mutex_lock(&objs_mu);
    for (struct texobj **pp = &objs; *pp; pp = &(*pp)->next)
        if ((*pp)->value == value && (*pp)->surface == surface) {
            struct texobj *o = *pp;
            *out = *o;
            if (unlink) {
                *pp = o->next;
                free(o);
            }
            pthread_mutex_unlock(&objs_mu);
            return 0;
        }
    pthread_mutex_unlock(&objs_mu);
    return -1;
}

/* Where the resource is: its GPU, the array's daemon handle or the memory's address, its format and extent. */
struct res_loc {
    struct pv_device *dev;
    uint64_t array, ptr;
    struct cudaChannelFormatDesc fmt;
    size_t width, height, pitch;
};

static cudaError_t locate(const struct cudaResourceDesc *r, struct res_loc *out)
{
    memset(out, 0, sizeof *out);
    switch (r->resType) {
    case PV_cudaResourceTypeArray: {
        int dev;
        struct cudaExtent e;
        unsigned flags;
        if (pv_array_info(r->res.array.array, &dev, &out->array, &out->fmt, &e, &flags) != 0)
            return PV_cudaErrorInvalidResourceHandle;
        out->dev = pv_device(dev);
        return out->dev ? PV_SUCCESS : PV_cudaErrorInvalidDevice;
    }
    case PV_cudaResourceTypeLinear:
    case PV_cudaResourceTypePitch2D: {
        int lin = r->resType == PV_cudaResourceTypeLinear;
        out->ptr = (uint64_t)(uintptr_t)(lin ? r->res.linear.devPtr : r->res.pitch2D.devPtr);
        out->fmt = lin ? r->res.linear.desc : r->res.pitch2D.desc;
        size_t elem = (size_t)(out->fmt.x + out->fmt.y + out->fmt.z + out->fmt.w) / 8;
        if (!elem)
            return PV_cudaErrorInvalidChannelDescriptor;
        out->width = lin ? r->res.linear.sizeInBytes / elem : r->res.pitch2D.width;
        out->height = lin ? 0 : r->res.pitch2D.height;
        out->pitch = lin ? 0 : r->res.pitch2D.pitchInBytes;
        int dev = pv_ptr_device((void *)(uintptr_t)out->ptr);
        out->dev = dev >= 0 ? pv_device(dev) : NULL;
        return out->dev ? PV_SUCCESS : PV_cudaErrorInvalidValue;
    }
    case PV_cudaResourceTypeMipmappedArray:
        return PV_cudaErrorNotSupported;
    default:
        return PV_cudaErrorInvalidValue;
    }
}

cudaError_t pv_texture_create(cudaTextureObject_t *out, const struct cudaResourceDesc *r,
                              const struct cudaTextureDesc *t, const struct cudaResourceViewDesc *v)
{
    if (!out || !r || !t)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    if (v && v->format != PV_cudaResViewFormatNone)
        return PV_cudaErrorNotSupported;              /* views that reinterpret the format */
    struct res_loc loc;
    if ((err = locate(r, &loc)) != PV_SUCCESS)
        return err;
    uint64_t value = 0;
    err = pv_call_TEX_CREATE(loc.dev, r->resType, loc.array, loc.ptr, (uint32_t)loc.fmt.x, (uint32_t)loc.fmt.y,
                             (uint32_t)loc.fmt.z, (uint32_t)loc.fmt.w, loc.fmt.f, loc.width, loc.height, loc.pitch,
                             t->addressMode[0], t->addressMode[1], t->addressMode[2], t->filterMode, t->readMode,
                             t->normalizedCoords, t->sRGB, t->borderColor[0], t->borderColor[1], t->borderColor[2],
                             t->borderColor[3], &value);
    if (err == PV_SUCCESS && (err = remember(value, loc.dev->index, 0, r, t, v)) != PV_SUCCESS)
        (void)pv_call_TEX_DESTROY(loc.dev, value);
    if (err == PV_SUCCESS)
        *out = value;
    return err;
}

cudaError_t pv_texobj_destroy(unsigned long long value, int surface)
{
    if (!value)
        return PV_SUCCESS;
    struct texobj o;
    if (lookup(value, surface, &o, 1) != 0)
        return PV_cudaErrorInvalidValue;
    struct pv_device *d = pv_device(o.dev);
    if (!d)
        return PV_cudaErrorInvalidDevice;
    return surface ? pv_call_SURF_DESTROY(d, value) : pv_call_TEX_DESTROY(d, value);
}

cudaError_t pv_texobj_descs(unsigned long long value, int surface, struct cudaResourceDesc *res,
                            struct cudaTextureDesc *tex, struct cudaResourceViewDesc *view)
{
    struct texobj o;
    if (lookup(value, surface, &o, 0) != 0)
        return PV_cudaErrorInvalidValue;
    if (res)
        *res = o.res;
    if (tex)
        *tex = o.tex;
    if (view)
        *view = o.view;
    return PV_SUCCESS;
}

cudaError_t pv_surface_create(cudaSurfaceObject_t *out, const struct cudaResourceDesc *r)
{
    if (!out || !r || r->resType != PV_cudaResourceTypeArray)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_init();
    struct res_loc loc;
    if (err != PV_SUCCESS || (err = locate(r, &loc)) != PV_SUCCESS)
        return err;
    uint64_t value = 0;
    err = pv_call_SURF_CREATE(loc.dev, loc.array, &value);
    if (err == PV_SUCCESS && (err = remember(value, loc.dev->index, 1, r, NULL, NULL)) != PV_SUCCESS)
        (void)pv_call_SURF_DESTROY(loc.dev, value);
    if (err == PV_SUCCESS)
        *out = value;
    return err;
}

void pv_resource_format(const struct cudaResourceDesc *r, struct cudaChannelFormatDesc *fmt)
{
    int dev;
    uint64_t remote;
    struct cudaExtent e;
    unsigned flags;
    memset(fmt, 0, sizeof *fmt);
    if (r->resType == PV_cudaResourceTypeArray)
        pv_array_info(r->res.array.array, &dev, &remote, fmt, &e, &flags);
    else if (r->resType == PV_cudaResourceTypeLinear)
        *fmt = r->res.linear.desc;
    else if (r->resType == PV_cudaResourceTypePitch2D)
        *fmt = r->res.pitch2D.desc;
}
