/* CUDA arrays, the 1D array copies (cuMemcpy?toA / Ato?), texture and surface objects, on the core's arrays.c and
 * textures.c (the 2D/3D copies with arrays are api_memory.c's). The driver's descriptions are translated into the
 * runtime's (convert.c): an array format is a channel description, a texture's flags its read mode and coordinates. */
#include "driver.h"

#define PTR(p) ((void *)(uintptr_t)(p))

/* ------------------------------------------------------------------------------------------ arrays */
static CUresult array_create(CUarray *out, int format, unsigned nchannels, size_t w, size_t h, size_t d,
                             unsigned flags)
{
    struct pv_device *dev;
    struct cudaChannelFormatDesc cd;
    CUresult r = out ? drv_cur_device(&dev) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = drv_format_in(format, nchannels, &cd)) == CUDA_SUCCESS)
        r = drv_result(pv_array_create(out, &cd, w, h, d, flags));
    return r;
}

PV_API CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *a)
{
    return a ? array_create(out, a->Format, a->NumChannels, a->Width, a->Height, 0, 0) : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *a)
{
    return a ? array_create(out, a->Format, a->NumChannels, a->Width, a->Height, a->Depth, a->Flags)
             : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuArrayDestroy(CUarray a)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return pv_array_of(a) ? drv_result(pv_array_destroy(a)) : CUDA_ERROR_INVALID_HANDLE;
}

/* The array's description as allocated. */
static CUresult describe(CUarray a, CUDA_ARRAY3D_DESCRIPTOR *out)
{
    int dev;
    uint64_t remote;
    struct cudaChannelFormatDesc d;
    struct cudaExtent e;
    unsigned flags;
    CUresult r = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (pv_array_info(a, &dev, &remote, &d, &e, &flags) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (CUDA_ARRAY3D_DESCRIPTOR){ e.width, e.height, e.depth, 0, 0, flags };
    return drv_format_out(&d, &out->Format, &out->NumChannels);
}

PV_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *out, CUarray a) { return describe(a, out); }

PV_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *out, CUarray a)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult r = out ? describe(a, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *out = (CUDA_ARRAY_DESCRIPTOR){ d.Width, d.Height, d.Format, d.NumChannels };
    return r;
}

/* The widest 1D texture over linear memory (the snapshot's attribute; the format does not change it here). */
PV_API CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *w, int format, unsigned nchannels, CUdevice dev)
{
    struct cudaChannelFormatDesc cd;
    CUresult r = w ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = drv_format_in(format, nchannels, &cd);
    struct pv_device *d = pv_device(dev);
    int v;
    if (r == CUDA_SUCCESS && !d)
        r = CUDA_ERROR_INVALID_DEVICE;
    if (r == CUDA_SUCCESS)
        *w = pv_dev_attr(d, PV_cudaDevAttrMaxTexture1DLinearWidth, &v) == 0 ? (size_t)v : 0;
    return r;
}

/* ------------------------------------------------------------------------------------------ 1D array copies */
/* A byte offset into an array as (byte in row, row): the 1D copies run row after row from there. */
static CUresult array_offset(CUarray a, size_t offset, size_t *x, size_t *y)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult r = describe(a, &d);
    if (r != CUDA_SUCCESS)
        return r;
    struct cudaChannelFormatDesc cd;
    drv_format_in(d.Format, d.NumChannels, &cd);
    size_t row = d.Width * pv_format_bytes(&cd);
    if (!row)
        return CUDA_ERROR_INVALID_VALUE;
    *x = offset % row;
    *y = offset / row;
    return CUDA_SUCCESS;
}

static CUresult array_1d(int to_array, CUarray a, size_t offset, void *mem, size_t n, CUstream s)
{
    size_t x, y;
    CUresult r = array_offset(a, offset, &x, &y);
    if (r != CUDA_SUCCESS || !n)
        return r;
    return drv_result(pv_array_copy1d(to_array, a, x, y, mem, n, cudaMemcpyDefault, s));
}

PV_API CUresult cuMemcpyHtoA_v2(CUarray a, size_t off, const void *src, size_t n)
{
    return array_1d(1, a, off, (void *)src, n, NULL);
}
PV_API CUresult cuMemcpyHtoA_v2_ptds(CUarray a, size_t off, const void *src, size_t n)
{
    return array_1d(1, a, off, (void *)src, n, NULL);
}
PV_API CUresult cuMemcpyHtoAAsync_v2(CUarray a, size_t off, const void *src, size_t n, CUstream s)
{
    return array_1d(1, a, off, (void *)src, n, s);
}
PV_API CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray a, size_t off, const void *src, size_t n, CUstream s)
{
    return array_1d(1, a, off, (void *)src, n, s);
}
PV_API CUresult cuMemcpyAtoH_v2(void *dst, CUarray a, size_t off, size_t n) { return array_1d(0, a, off, dst, n, NULL); }
PV_API CUresult cuMemcpyAtoH_v2_ptds(void *dst, CUarray a, size_t off, size_t n)
{
    return array_1d(0, a, off, dst, n, NULL);
}
PV_API CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray a, size_t off, size_t n, CUstream s)
{
    return array_1d(0, a, off, dst, n, s);
}
PV_API CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dst, CUarray a, size_t off, size_t n, CUstream s)
{
    return array_1d(0, a, off, dst, n, s);
}
PV_API CUresult cuMemcpyDtoA_v2(CUarray a, size_t off, CUdeviceptr src, size_t n)
{
    return array_1d(1, a, off, PTR(src), n, NULL);
}
PV_API CUresult cuMemcpyDtoA_v2_ptds(CUarray a, size_t off, CUdeviceptr src, size_t n)
{
    return array_1d(1, a, off, PTR(src), n, NULL);
}
PV_API CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray a, size_t off, size_t n)
{
    return array_1d(0, a, off, PTR(dst), n, NULL);
}
PV_API CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray a, size_t off, size_t n)
{
    return array_1d(0, a, off, PTR(dst), n, NULL);
}

PV_API CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
    size_t dx, dy, sx, sy;
    CUresult r = array_offset(dst, doff, &dx, &dy);
    if (r == CUDA_SUCCESS)
        r = array_offset(src, soff, &sx, &sy);
    if (r != CUDA_SUCCESS || !n)
        return r;
    return drv_result(pv_array_copy1d_a2a(dst, dx, dy, src, sx, sy, n, cudaMemcpyDefault));
}
PV_API CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
    return cuMemcpyAtoA_v2(dst, doff, src, soff, n);
}

/* ------------------------------------------------------------------------------------------ textures, surfaces */
PV_API CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                                  const CUDA_RESOURCE_VIEW_DESC *view)
{
    struct cudaResourceDesc r;
    struct cudaTextureDesc t;
    struct cudaChannelFormatDesc fmt;
    CUresult e = out && res && tex ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (e == CUDA_SUCCESS)
        e = drv_resource_in(res, &r);
    if (e != CUDA_SUCCESS)
        return e;
    pv_resource_format(&r, &fmt);      /* a texture's read mode depends on it */
    drv_texture_in(tex, &fmt, &t);
    return drv_result(pv_texture_create(out, &r, &t, view));
}

PV_API CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
    struct cudaResourceDesc r;
    CUresult e = out && res ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (e == CUDA_SUCCESS)
        e = drv_resource_in(res, &r);
    return e == CUDA_SUCCESS ? drv_result(pv_surface_create(out, &r)) : e;
}

PV_API CUresult cuTexObjectDestroy(CUtexObject t) { DRV_RETURN(pv_texobj_destroy(t, 0)); }
PV_API CUresult cuSurfObjectDestroy(CUsurfObject s) { DRV_RETURN(pv_texobj_destroy(s, 1)); }

static CUresult resource_of(CUDA_RESOURCE_DESC *out, unsigned long long value, int surface)
{
    struct cudaResourceDesc r;
    CUresult e = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (e == CUDA_SUCCESS)
        e = drv_result(pv_texobj_descs(value, surface, &r, NULL, NULL));
    return e == CUDA_SUCCESS ? drv_resource_out(&r, out) : e;
}

PV_API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUtexObject t) { return resource_of(out, t, 0); }
PV_API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUsurfObject s) { return resource_of(out, s, 1); }

PV_API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *out, CUtexObject t)
{
    struct cudaTextureDesc d;
    CUresult e = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (e == CUDA_SUCCESS && (e = drv_result(pv_texobj_descs(t, 0, NULL, &d, NULL))) == CUDA_SUCCESS)
        drv_texture_out(&d, out);
    return e;
}

PV_API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *out, CUtexObject t)
{
    CUresult e = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return e == CUDA_SUCCESS ? drv_result(pv_texobj_descs(t, 0, NULL, NULL, out)) : e;
}
