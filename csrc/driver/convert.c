/* The driver's parameter structs as the core's runtime ones (pv_types.h) and back: 2D/3D copies (bytes and memory
 * types here, elements of the array and a cudaMemcpyKind there), array formats (CUarray_format and a channel count
 * there, bits per channel and a kind here), resource, texture and memset descriptions. */
#include "driver.h"

enum { FMT_U8 = 0x01, FMT_U16 = 0x02, FMT_U32 = 0x03, FMT_S8 = 0x08, FMT_S16 = 0x09, FMT_S32 = 0x0a,
       FMT_HALF = 0x10, FMT_FLOAT = 0x20 };
enum { KIND_SIGNED = 0, KIND_UNSIGNED = 1, KIND_FLOAT = 2 };   /* cudaChannelFormatKind */

static const struct { int format, bits, kind; } formats[] = {
    { FMT_U8, 8, KIND_UNSIGNED },   { FMT_U16, 16, KIND_UNSIGNED }, { FMT_U32, 32, KIND_UNSIGNED },
    { FMT_S8, 8, KIND_SIGNED },     { FMT_S16, 16, KIND_SIGNED },   { FMT_S32, 32, KIND_SIGNED },
    { FMT_HALF, 16, KIND_FLOAT },   { FMT_FLOAT, 32, KIND_FLOAT },
};

/* ------------------------------------------------------------------------------------------ formats */
CUresult drv_format_in(int format, unsigned nchannels, struct cudaChannelFormatDesc *out)
{
    if (nchannels != 1 && nchannels != 2 && nchannels != 4)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (formats[i].format == format) {
            int b = formats[i].bits;
            *out = (struct cudaChannelFormatDesc){ b, nchannels > 1 ? b : 0, nchannels > 2 ? b : 0,
                                                   nchannels > 2 ? b : 0, formats[i].kind };
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_SUPPORTED;       /* block-compressed, NV12, the normalized 8/16-bit forms */
}

CUresult drv_format_out(const struct cudaChannelFormatDesc *d, int *format, unsigned *nchannels)
{
    unsigned n = (d->x > 0) + (d->y > 0) + (d->z > 0) + (d->w > 0);
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (formats[i].bits == d->x && formats[i].kind == d->f) {
            *format = formats[i].format;
            *nchannels = n;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------------------------ copies */
/* One side of a driver copy as the runtime's pointer/array, position and pitch; *dev: it is device memory
 * (arrays included), *unified: its kind follows from the pointer. */
struct dside { int type; const void *host; CUdeviceptr dev; CUarray array; size_t x, y, z, pitch, height; };

static CUresult side_in(const struct dside *s, size_t *elem, void **ptr, struct pv_array **array, struct cudaPos *pos,
                        int *is_dev, int *unified)
{
    *unified = 0;
    *array = NULL;
    *ptr = NULL;
    switch (s->type) {
    case CU_MEMORYTYPE_HOST:
        *ptr = (void *)s->host;
        *is_dev = 0;
        break;
    case CU_MEMORYTYPE_DEVICE:
        *ptr = (void *)(uintptr_t)s->dev;
        *is_dev = 1;
        break;
    case CU_MEMORYTYPE_UNIFIED:
        *ptr = (void *)(uintptr_t)s->dev;
        *is_dev = 1;
        *unified = 1;
        break;
    case CU_MEMORYTYPE_ARRAY: {
        int dev;
        uint64_t remote;
        struct cudaChannelFormatDesc d;
        struct cudaExtent e;
        unsigned flags;
        if (pv_array_info(s->array, &dev, &remote, &d, &e, &flags) != 0)
            return CUDA_ERROR_INVALID_HANDLE;
        *array = s->array;
        *is_dev = 1;
        *elem = pv_format_bytes(&d);
        break;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pos = (struct cudaPos){ s->x, s->y, s->z };
    return CUDA_SUCCESS;
}

/* Both sides of a driver copy: array positions and the width in elements when an array is involved. */
static CUresult copy_in(const struct dside *src, const struct dside *dst, size_t width, size_t height, size_t depth,
                        struct cudaMemcpy3DParms *out)
{
    size_t selem = 0, delem = 0;
    int sdev, ddev, su, du;
    struct pv_array *sa, *da;
    void *sp, *dp;
    memset(out, 0, sizeof *out);
    CUresult r = side_in(src, &selem, &sp, &sa, &out->srcPos, &sdev, &su);
    if (r == CUDA_SUCCESS)
        r = side_in(dst, &delem, &dp, &da, &out->dstPos, &ddev, &du);
    if (r != CUDA_SUCCESS)
        return r;
    size_t elem = selem ? selem : delem;
    if (selem && delem && selem != delem)
        return CUDA_ERROR_INVALID_VALUE;
    if (elem) {
        if (width % elem || (sa && out->srcPos.x % elem) || (da && out->dstPos.x % elem))
            return CUDA_ERROR_INVALID_VALUE;
        width /= elem;
        if (sa)
            out->srcPos.x /= elem;
        if (da)
            out->dstPos.x /= elem;
    }
    out->srcArray = sa;
    out->dstArray = da;
    /* one row needs no pitch (callers may leave it 0) */
    size_t sp_pitch = src->pitch ? src->pitch : width + src->x, dp_pitch = dst->pitch ? dst->pitch : width + dst->x;
    if (!sa)
        out->srcPtr = (struct cudaPitchedPtr){ sp, sp_pitch, sp_pitch, src->height };
    if (!da)
        out->dstPtr = (struct cudaPitchedPtr){ dp, dp_pitch, dp_pitch, dst->height };
    out->extent = (struct cudaExtent){ width, height, depth };
    out->kind = su || du ? cudaMemcpyDefault
                         : ddev ? (sdev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                : (sdev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    return CUDA_SUCCESS;
}

CUresult drv_copy3d_in(const CUDA_MEMCPY3D *c, struct cudaMemcpy3DParms *out)
{
    if (c->srcLOD || c->dstLOD)
        return CUDA_ERROR_NOT_SUPPORTED;   /* mipmap levels */
    struct dside s = { c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ,
                       c->srcPitch, c->srcHeight };
    struct dside d = { c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ,
                       c->dstPitch, c->dstHeight };
    return copy_in(&s, &d, c->WidthInBytes, c->Height, c->Depth, out);
}

CUresult drv_copy2d_in(const CUDA_MEMCPY2D *c, struct cudaMemcpy3DParms *out)
{
    struct dside s = { c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, 0,
                       c->srcPitch, 0 };
    struct dside d = { c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, 0,
                       c->dstPitch, 0 };
    return copy_in(&s, &d, c->WidthInBytes, c->Height, 1, out);
}

void drv_copy3d_out(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *c)
{
    size_t elem = 0;
    int dev;
    uint64_t remote;
    struct cudaChannelFormatDesc d;
    struct cudaExtent e;
    unsigned flags;
    const void *arr = p->srcArray ? (const void *)p->srcArray : (const void *)p->dstArray;
    if (arr && pv_array_info(arr, &dev, &remote, &d, &e, &flags) == 0)
        elem = pv_format_bytes(&d);
    int unified = p->kind == cudaMemcpyDefault;
    int sdev = p->kind == cudaMemcpyDeviceToHost || p->kind == cudaMemcpyDeviceToDevice;
    int ddev = p->kind == cudaMemcpyHostToDevice || p->kind == cudaMemcpyDeviceToDevice;
    memset(c, 0, sizeof *c);
    c->srcXInBytes = p->srcArray ? p->srcPos.x * elem : p->srcPos.x;
    c->srcY = p->srcPos.y;
    c->srcZ = p->srcPos.z;
    c->dstXInBytes = p->dstArray ? p->dstPos.x * elem : p->dstPos.x;
    c->dstY = p->dstPos.y;
    c->dstZ = p->dstPos.z;
    if (p->srcArray) {
        c->srcMemoryType = CU_MEMORYTYPE_ARRAY;
        c->srcArray = p->srcArray;
    } else {
        c->srcMemoryType = unified ? CU_MEMORYTYPE_UNIFIED : sdev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        if (c->srcMemoryType == CU_MEMORYTYPE_HOST)
            c->srcHost = p->srcPtr.ptr;
        else
            c->srcDevice = (CUdeviceptr)(uintptr_t)p->srcPtr.ptr;
        c->srcPitch = p->srcPtr.pitch;
        c->srcHeight = p->srcPtr.ysize;
    }
    if (p->dstArray) {
        c->dstMemoryType = CU_MEMORYTYPE_ARRAY;
        c->dstArray = p->dstArray;
    } else {
        c->dstMemoryType = unified ? CU_MEMORYTYPE_UNIFIED : ddev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        if (c->dstMemoryType == CU_MEMORYTYPE_HOST)
            c->dstHost = p->dstPtr.ptr;
        else
            c->dstDevice = (CUdeviceptr)(uintptr_t)p->dstPtr.ptr;
        c->dstPitch = p->dstPtr.pitch;
        c->dstHeight = p->dstPtr.ysize;
    }
    c->WidthInBytes = (p->srcArray || p->dstArray) && elem ? p->extent.width * elem : p->extent.width;
    c->Height = p->extent.height;
    c->Depth = p->extent.depth;
}

/* ------------------------------------------------------------------------------------------ resources, textures */
CUresult drv_resource_in(const CUDA_RESOURCE_DESC *r, struct cudaResourceDesc *out)
{
    memset(out, 0, sizeof *out);
    out->resType = r->resType;
    out->flags = r->flags;
    switch (r->resType) {
    case PV_cudaResourceTypeArray:
        out->res.array.array = r->res.array.hArray;
        return CUDA_SUCCESS;
    case PV_cudaResourceTypeMipmappedArray:
        return CUDA_ERROR_NOT_SUPPORTED;
    case PV_cudaResourceTypeLinear:
        out->res.linear.devPtr = (void *)(uintptr_t)r->res.linear.devPtr;
        out->res.linear.sizeInBytes = r->res.linear.sizeInBytes;
        return drv_format_in(r->res.linear.format, r->res.linear.numChannels, &out->res.linear.desc);
    case PV_cudaResourceTypePitch2D:
        out->res.pitch2D.devPtr = (void *)(uintptr_t)r->res.pitch2D.devPtr;
        out->res.pitch2D.width = r->res.pitch2D.width;
        out->res.pitch2D.height = r->res.pitch2D.height;
        out->res.pitch2D.pitchInBytes = r->res.pitch2D.pitchInBytes;
        return drv_format_in(r->res.pitch2D.format, r->res.pitch2D.numChannels, &out->res.pitch2D.desc);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult drv_resource_out(const struct cudaResourceDesc *r, CUDA_RESOURCE_DESC *out)
{
    memset(out, 0, sizeof *out);
    out->resType = r->resType;
    out->flags = r->flags;
    switch (r->resType) {
    case PV_cudaResourceTypeArray:
        out->res.array.hArray = r->res.array.array;
        return CUDA_SUCCESS;
    case PV_cudaResourceTypeLinear:
        out->res.linear.devPtr = (CUdeviceptr)(uintptr_t)r->res.linear.devPtr;
        out->res.linear.sizeInBytes = r->res.linear.sizeInBytes;
        return drv_format_out(&r->res.linear.desc, &out->res.linear.format, &out->res.linear.numChannels);
    case PV_cudaResourceTypePitch2D:
        out->res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)r->res.pitch2D.devPtr;
        out->res.pitch2D.width = r->res.pitch2D.width;
        out->res.pitch2D.height = r->res.pitch2D.height;
        out->res.pitch2D.pitchInBytes = r->res.pitch2D.pitchInBytes;
        return drv_format_out(&r->res.pitch2D.desc, &out->res.pitch2D.format, &out->res.pitch2D.numChannels);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The driver reads integer textures as normalized floats unless CU_TRSF_READ_AS_INTEGER says otherwise; 32-bit
 * integers are never normalized. */
void drv_texture_in(const CUDA_TEXTURE_DESC *t, const struct cudaChannelFormatDesc *fmt, struct cudaTextureDesc *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 3; i++)
        out->addressMode[i] = t->addressMode[i];
    out->filterMode = t->filterMode;
    int element = (t->flags & CU_TRSF_READ_AS_INTEGER) || (fmt->f != KIND_FLOAT && fmt->x == 32);
    out->readMode = element ? PV_cudaReadModeElementType : PV_cudaReadModeNormalizedFloat;
    out->sRGB = (t->flags & CU_TRSF_SRGB) != 0;
    for (int i = 0; i < 4; i++)
        out->borderColor[i] = t->borderColor[i];
    out->normalizedCoords = (t->flags & CU_TRSF_NORMALIZED_COORDINATES) != 0;
    out->maxAnisotropy = t->maxAnisotropy;
    out->mipmapFilterMode = t->mipmapFilterMode;
    out->mipmapLevelBias = t->mipmapLevelBias;
    out->minMipmapLevelClamp = t->minMipmapLevelClamp;
    out->maxMipmapLevelClamp = t->maxMipmapLevelClamp;
    out->disableTrilinearOptimization = (t->flags & CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION) != 0;
    out->seamlessCubemap = (t->flags & CU_TRSF_SEAMLESS_CUBEMAP) != 0;
}

void drv_texture_out(const struct cudaTextureDesc *t, CUDA_TEXTURE_DESC *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 3; i++)
        out->addressMode[i] = t->addressMode[i];
    out->filterMode = t->filterMode;
    out->flags = (t->readMode == PV_cudaReadModeElementType ? CU_TRSF_READ_AS_INTEGER : 0) |
                 (t->normalizedCoords ? CU_TRSF_NORMALIZED_COORDINATES : 0) | (t->sRGB ? CU_TRSF_SRGB : 0) |
                 (t->disableTrilinearOptimization ? CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION : 0) |
                 (t->seamlessCubemap ? CU_TRSF_SEAMLESS_CUBEMAP : 0);
    out->maxAnisotropy = t->maxAnisotropy;
    out->mipmapFilterMode = t->mipmapFilterMode;
    out->mipmapLevelBias = t->mipmapLevelBias;
    out->minMipmapLevelClamp = t->minMipmapLevelClamp;
    out->maxMipmapLevelClamp = t->maxMipmapLevelClamp;
    for (int i = 0; i < 4; i++)
        out->borderColor[i] = t->borderColor[i];
}

/* v1 and v2 share everything but v2's trailing context (not read here). */
void drv_memset_in(const CUDA_MEMSET_NODE_PARAMS *m, struct cudaMemsetParams *out)
{
    *out = (struct cudaMemsetParams){ (void *)(uintptr_t)m->dst, m->pitch, m->value, m->elementSize, m->width,
                                      m->height };
}
