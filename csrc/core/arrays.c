/* CUDA arrays: allocation (1D, 2D, 3D, layered), queries, and copies to, from and between them (the 1D/2D/3D and
 * deprecated forms, synchronous and on streams). An array lives on the daemon (ARRAY_CREATE); every copy is one form
 * of a 3D copy in bytes and rows (MEMCPY3D_HTOD / _DTOH / _DTOD), whatever its API spelled it in. A copy between an
 * array and memory of another GPU goes through this process. */
#include <stdlib.h>
#include <string.h>

#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_coherence.h"
#include "pv_registry.h"
#include "pv_copy.h"
#include "pv_graph.h"

#define PV_ARRAY_MAGIC 0x41525259u
#define PV_ROWS_CHUNK ((size_t)16 << 20)       /* bytes of rows per frame of a large copy */

struct pv_array {
    uint32_t magic;
    int dev;
    uint64_t remote;
    struct cudaChannelFormatDesc desc;
    struct cudaExtent extent;                  /* as allocated: width, height (0: 1D), depth (0: 2D) */
    unsigned flags;
    size_t elem;                               /* bytes per element */
};

struct pv_array *pv_array_of(const void *a)
{
    const struct pv_array *p = a;
    return (p && pv_handle_valid(p) && p->magic == PV_ARRAY_MAGIC) ? (struct pv_array *)p : NULL;
}

int pv_array_info(const void *a, int *dev, uint64_t *remote, struct cudaChannelFormatDesc *desc,
                  struct cudaExtent *extent, unsigned *flags)
{
    struct pv_array *p = pv_array_of(a);
    if (!p)
        return -1;
    *dev = p->dev;
    *remote = p->remote;
    *desc = p->desc;
    *extent = p->extent;
    *flags = p->flags;
    return 0;
}

size_t pv_format_bytes(const struct cudaChannelFormatDesc *d)
{
    return (size_t)(d->x + d->y + d->z + d->w) / 8;
}

/* ------------------------------------------------------------------------------------------ allocation */
cudaError_t pv_array_create(cudaArray_t *out, const struct cudaChannelFormatDesc *desc, size_t w, size_t h, size_t d,
                            unsigned flags)
{
    if (!out || !desc)
        return PV_cudaErrorInvalidValue;
    struct pv_device *dev;
    cudaError_t err = pv_cur(&dev);
    if (err != PV_SUCCESS)
        return err;
    if (desc->x < 0 || desc->y < 0 || desc->z < 0 || desc->w < 0 || pv_format_bytes(desc) == 0)
        return PV_cudaErrorInvalidChannelDescriptor;
    uint64_t h64 = 0;
    err = pv_call_ARRAY_CREATE(dev, (uint32_t)desc->x, (uint32_t)desc->y, (uint32_t)desc->z, (uint32_t)desc->w,
                               desc->f, w, h, d, flags, &h64);
    if (err != PV_SUCCESS)
        return err;
    struct pv_array *a = calloc(1, sizeof *a);
    if (!a) {
        (void)pv_call_ARRAY_DESTROY(dev, h64);
        return PV_cudaErrorMemoryAllocation;
    }
    *a = (struct pv_array){ PV_ARRAY_MAGIC, dev->index, h64, *desc, { w, h, d }, flags, pv_format_bytes(desc) };
    pv_handle_add(a);
    *out = a;
    return PV_SUCCESS;
}

cudaError_t pv_array_destroy(cudaArray_t array)
{
    struct pv_array *a = pv_array_of(array);
    if (!a || pv_handle_remove(a) != 0)
        return PV_cudaErrorInvalidValue;
    struct pv_device *d = pv_device(a->dev);
    cudaError_t err = d ? pv_call_ARRAY_DESTROY(d, a->remote) : PV_cudaErrorInvalidDevice;
    a->magic = 0;
    free(a);
    return err;
}

/* ------------------------------------------------------------------------------------------ 3D copies in bytes */
/* One side of a copy: an array, device memory or host memory (the host copy of managed memory counts as host). */
struct side {
    struct pv_array *arr;
    char *ptr;                                 /* linear: the base the positions count from */
    size_t pitch, rows;                        /* linear: bytes per row, rows per slice */
    size_t x, y, z;                            /* bytes, rows, slices */
    struct pv_device *dev;                     /* the GPU (arrays, device memory); NULL for host memory */
};

static uint64_t stream_on(cudaStream_t s, struct pv_device *d)
{
    uint64_t remote = 0;
    struct pv_device *sd = NULL;
    if (pv_stream_resolve(s, d, &remote, &sd) != PV_SUCCESS || sd != d)
        return 0;
    return remote;
}

/* Where the rows of a host side are: row r of slice k starts at ptr + ((z+k)*rows + y + r)*pitch + x. */
static char *host_row(const struct side *h, size_t k, size_t r)
{
    return h->ptr + ((h->z + k) * h->rows + h->y + r) * h->pitch + h->x;
}

/* Rows between a device side and a host side, slice by slice in groups of at most PV_ROWS_CHUNK bytes, packed in
 * a buffer both ways (a host side may be managed memory, whose clean pages the socket could not write). */
static cudaError_t host_rows(const struct side *dev, const struct side *host, size_t w, size_t h, size_t d,
                             cudaStream_t s, int to_device)
{
    size_t per = w ? (PV_ROWS_CHUNK / w ? PV_ROWS_CHUNK / w : 1) : 1;
    char *buf = malloc((per < h ? per : h) * w);
    if (!buf)
        return PV_cudaErrorMemoryAllocation;
    cudaError_t err = PV_SUCCESS;
    uint64_t arr = dev->arr ? dev->arr->remote : 0, ptr = (uint64_t)(uintptr_t)dev->ptr;
    for (size_t k = 0; k < d && err == PV_SUCCESS; k++)
        for (size_t r = 0; r < h && err == PV_SUCCESS; r += per) {
            size_t n = h - r < per ? h - r : per, got = n * w;
            if (to_device) {
                for (size_t i = 0; i < n; i++)
                    memcpy(buf + i * w, host_row(host, k, r + i), w);
                err = pv_send_MEMCPY3D_HTOD(dev->dev, arr, ptr, dev->pitch, dev->rows, dev->x, dev->y + r, dev->z + k,
                                            w, n, 1, stream_on(s, dev->dev), buf, n * w);
                continue;
            }
            err = pv_call_MEMCPY3D_DTOH(dev->dev, arr, ptr, dev->pitch, dev->rows, dev->x, dev->y + r, dev->z + k, w,
                                        n, 1, stream_on(s, dev->dev), buf, n * w, &got);
            if (err == PV_SUCCESS && got != n * w)
                err = PV_cudaErrorUnknown;
            for (size_t i = 0; err == PV_SUCCESS && i < n; i++)
                memcpy(host_row(host, k, r + i), buf + i * w, w);
        }
    free(buf);
    return err;
}

/* An array side's box lies inside the array (checked here, so an asynchronous copy fails at the call, as in CUDA). */
static int inside(const struct side *a, size_t w, size_t h, size_t d)
{
    if (!a->arr)
        return 1;
    size_t row = a->arr->extent.width * a->arr->elem;
    size_t rows = a->arr->extent.height ? a->arr->extent.height : 1, slices = a->arr->extent.depth ? a->arr->extent.depth : 1;
    return a->x <= row && w <= row - a->x && a->y <= rows && h <= rows - a->y && a->z <= slices && d <= slices - a->z;
}

static cudaError_t copy_bytes(const struct side *dst, const struct side *src, size_t w, size_t h, size_t d,
                              cudaStream_t s)
{
    if (!w || !h || !d)
        return PV_SUCCESS;
    if (!inside(dst, w, h, d) || !inside(src, w, h, d))
        return PV_cudaErrorInvalidValue;
    if (!dst->dev && !src->dev) {                                    /* host to host */
        for (size_t k = 0; k < d; k++)
            for (size_t r = 0; r < h; r++)
                memmove(host_row(dst, k, r), host_row(src, k, r), w);
        return PV_SUCCESS;
    }
    if (!src->dev)
        return host_rows(dst, src, w, h, d, s, 1);
    if (!dst->dev)
        return host_rows(src, dst, w, h, d, s, 0);
    if (dst->dev == src->dev)
        return pv_send_MEMCPY3D_DTOD(dst->dev, dst->arr ? dst->arr->remote : 0, (uint64_t)(uintptr_t)dst->ptr,
                                     dst->pitch, dst->rows, dst->x, dst->y, dst->z, src->arr ? src->arr->remote : 0,
                                     (uint64_t)(uintptr_t)src->ptr, src->pitch, src->rows, src->x, src->y, src->z, w,
                                     h, d, stream_on(s, dst->dev));
    /* two GPUs: through a packed buffer here */
    char *buf = malloc(w * h * d);
    if (!buf)
        return PV_cudaErrorMemoryAllocation;
    struct side mid = { NULL, buf, w, h, 0, 0, 0, NULL };
    cudaError_t err = host_rows(src, &mid, w, h, d, s, 0);
    if (err == PV_SUCCESS)
        err = host_rows(dst, &mid, w, h, d, s, 1);
    free(buf);
    return err;
}

/* A linear side from a pointer: device memory of some GPU, or host memory (including managed memory's host copy,
 * brought up to date first when it is read). */
static cudaError_t linear_side(struct side *out, void *ptr, size_t pitch, size_t rows, size_t x, size_t y, size_t z,
                               int reading)
{
    *out = (struct side){ NULL, ptr, pitch, rows, x, y, z, NULL };
    struct pv_region_info info;
    if (pv_region_find(ptr, &info) == 0) {
        if (reading) {
            struct pv_device *d = pv_device(info.device);
            return d ? pv_call_DEVICE_SYNC(d) : PV_cudaErrorInvalidDevice;
        }
        return PV_SUCCESS;
    }
    int dev = pv_ptr_device(ptr);
    out->dev = dev >= 0 ? pv_device(dev) : NULL;
    return PV_SUCCESS;
}

static cudaError_t array_side(struct side *out, cudaArray_const_t array, size_t xbytes, size_t y, size_t z)
{
    struct pv_array *a = pv_array_of(array);
    if (!a)
        return PV_cudaErrorInvalidResourceHandle;
    *out = (struct side){ a, NULL, 0, 0, xbytes, y, z, pv_device(a->dev) };
    return out->dev ? PV_SUCCESS : PV_cudaErrorInvalidDevice;
}

/* cudaMemcpy3D's form (and memcpy nodes): positions and extent in elements of the array involved. */
cudaError_t pv_array_copy3d(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    struct pv_array *sa = p->srcArray ? pv_array_of(p->srcArray) : NULL, *da = p->dstArray ? pv_array_of(p->dstArray)
                                                                                         : NULL;
    if ((p->srcArray && !sa) || (p->dstArray && !da))
        return PV_cudaErrorInvalidResourceHandle;
    size_t elem = sa ? sa->elem : da->elem;
    if (sa && da && sa->elem != da->elem)
        return PV_cudaErrorInvalidValue;
    const struct cudaExtent *e = &p->extent;
    struct side dst, src;
    cudaError_t err = sa ? array_side(&src, sa, p->srcPos.x * elem, p->srcPos.y, p->srcPos.z)
                         : linear_side(&src, p->srcPtr.ptr, p->srcPtr.pitch, p->srcPtr.ysize, p->srcPos.x,
                                       p->srcPos.y, p->srcPos.z, 1);
    if (err == PV_SUCCESS)
        err = da ? array_side(&dst, da, p->dstPos.x * elem, p->dstPos.y, p->dstPos.z)
                 : linear_side(&dst, p->dstPtr.ptr, p->dstPtr.pitch, p->dstPtr.ysize, p->dstPos.x, p->dstPos.y,
                               p->dstPos.z, 0);
    if (err != PV_SUCCESS)
        return err;
    return copy_bytes(&dst, &src, e->width * elem, e->height ? e->height : 1, e->depth ? e->depth : 1, s);
}

/* ------------------------------------------------------------------------------------------ 2D forms */
/* The stream check every copy makes, and a capture turning the copy into a memcpy node (cudaMemcpy3DParms in elements
 * of the array: byte offsets and widths must be whole elements then). */
static cudaError_t begin(cudaStream_t s)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    return pv_stream_ok(s) ? PV_SUCCESS : PV_cudaErrorInvalidResourceHandle;
}

static cudaError_t capture(cudaStream_t s, struct cudaMemcpy3DParms *p, size_t elem, size_t *bytes[], int n)
{
    for (int i = 0; i < n; i++) {
        if (*bytes[i] % elem)
            return PV_cudaErrorInvalidValue;
        *bytes[i] /= elem;
    }
    return pv_capture_params(s, PV_cudaGraphNodeTypeMemcpy, p);
}

/* The 2D forms, either way: rows of `width` bytes between the array at (wo bytes, ho) and memory `mem` (host, device,
 * or managed) of row pitch `mpitch`. */
cudaError_t pv_array_copy2d(int to_array, cudaArray_const_t array, size_t wo, size_t ho, void *mem, size_t mpitch,
                            size_t width, size_t height, int kind, cudaStream_t s)
{
    cudaError_t err = begin(s);
    if (err != PV_SUCCESS)
        return err;
    if (kind < 0 || kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    if (!width || !height)
        return PV_SUCCESS;
    if (!mem || width > mpitch)
        return !mem ? PV_cudaErrorInvalidValue : PV_cudaErrorInvalidPitchValue;
    struct pv_array *a = pv_array_of(array);
    if (!a)
        return PV_cudaErrorInvalidResourceHandle;
    if (pv_capturing(s)) {
        struct cudaMemcpy3DParms p = { 0 };
        struct cudaPos at = { wo, ho, 0 };
        struct cudaPitchedPtr ptr = { mem, mpitch, width, height };
        if (to_array) {
            p.dstArray = a;
            p.dstPos = at;
            p.srcPtr = ptr;
        } else {
            p.srcArray = a;
            p.srcPos = at;
            p.dstPtr = ptr;
        }
        p.extent = (struct cudaExtent){ width, height, 1 };
        p.kind = kind;
        size_t *b[] = { to_array ? &p.dstPos.x : &p.srcPos.x, &p.extent.width };
        return capture(s, &p, a->elem, b, 2);
    }
    struct side as, ms;
    if ((err = array_side(&as, a, wo, ho, 0)) != PV_SUCCESS ||
        (err = linear_side(&ms, mem, mpitch, height, 0, 0, 0, to_array)) != PV_SUCCESS)
        return err;
    return to_array ? copy_bytes(&as, &ms, width, height, 1, s) : copy_bytes(&ms, &as, width, height, 1, s);
}

cudaError_t pv_array_copy2d_a2a(cudaArray_t dst, size_t wod, size_t hod, cudaArray_const_t src, size_t wos,
                                size_t hos, size_t width, size_t height, int kind)
{
    cudaError_t err = begin(NULL);
    if (err != PV_SUCCESS)
        return err;
    if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    struct side ds, ss;
    if ((err = array_side(&ds, dst, wod, hod, 0)) != PV_SUCCESS || (err = array_side(&ss, src, wos, hos, 0)) !=
        PV_SUCCESS)
        return err;
    return copy_bytes(&ds, &ss, width, height, 1, NULL);
}

/* ------------------------------------------------------------------------------------------ deprecated 1D forms */
/* count bytes from (wo, ho) on, row after row, as the deprecated calls define it: one piece to the end of the first
 * row, whole rows, and the start of the last row. */
static cudaError_t linear_run(struct pv_array *a, size_t wo, size_t ho, size_t count, char *host, int to_array,
                              cudaStream_t s)
{
    size_t row = a->extent.width * a->elem, rows = a->extent.height ? a->extent.height : 1;
    if (wo > row || ho >= rows || count > (rows - ho) * row - wo)
        return PV_cudaErrorInvalidValue;
    size_t done = 0;
    while (done < count) {
        size_t x = (wo + done) % row, y = ho + (wo + done) / row, left = count - done;
        size_t w, h;
        if (x == 0 && left >= row) {                     /* whole rows */
            w = row;
            h = left / row;
        } else {                                         /* the rest of one row */
            w = row - x < left ? row - x : left;
            h = 1;
        }
        size_t n = w * h;
        struct side arr_side, host_side;
        cudaError_t err = array_side(&arr_side, a, x, y, 0);
        if (err == PV_SUCCESS)
            err = linear_side(&host_side, host + done, w, h, 0, 0, 0, !to_array);
        if (err == PV_SUCCESS)
            err = to_array ? copy_bytes(&arr_side, &host_side, w, h, 1, s) : copy_bytes(&host_side, &arr_side, w, h, 1, s);
        if (err != PV_SUCCESS)
            return err;
        done += n;
    }
    return PV_SUCCESS;
}

cudaError_t pv_array_copy1d(int to_array, cudaArray_const_t array, size_t wo, size_t ho, void *mem, size_t count,
                            int kind, cudaStream_t s)
{
    cudaError_t err = begin(s);
    struct pv_array *a = pv_array_of(array);
    if (err != PV_SUCCESS)
        return err;
    if (kind < 0 || kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    if (!a)
        return PV_cudaErrorInvalidResourceHandle;
    return count ? (mem ? linear_run(a, wo, ho, count, mem, to_array, s) : PV_cudaErrorInvalidValue) : PV_SUCCESS;
}

/* Between two arrays, count bytes row after row on each side: through this process. */
cudaError_t pv_array_copy1d_a2a(cudaArray_t dst, size_t wod, size_t hod, cudaArray_const_t src, size_t wos,
                                size_t hos, size_t count, int kind)
{
    cudaError_t err = begin(NULL);
    struct pv_array *da = pv_array_of(dst), *sa = pv_array_of(src);
    if (err == PV_SUCCESS && (!da || !sa))
        err = PV_cudaErrorInvalidResourceHandle;
    if (err == PV_SUCCESS && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        err = PV_cudaErrorInvalidMemcpyDirection;
    if (err != PV_SUCCESS || !count)
        return err;
    char *buf = malloc(count);
    if (!buf)
        return PV_cudaErrorMemoryAllocation;
    err = linear_run(sa, wos, hos, count, buf, 0, NULL);
    if (err == PV_SUCCESS)
        err = linear_run(da, wod, hod, count, buf, 1, NULL);
    free(buf);
    return err;
}

/* cudaMemcpy3DPeer: a 3D copy whose sides name their GPUs; pointers carry their GPU already here, so the devices are
 * only checked, and a copy between GPUs goes through this process. */
cudaError_t pv_memcpy3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s)
{
    if (!p)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = begin(s);
    if (err != PV_SUCCESS)
        return err;
    if (!pv_device(p->srcDevice) || !pv_device(p->dstDevice))
        return PV_cudaErrorInvalidDevice;
    struct cudaMemcpy3DParms q = { p->srcArray, p->srcPos, p->srcPtr, p->dstArray, p->dstPos, p->dstPtr, p->extent,
                                   cudaMemcpyDefault };
    if ((!q.srcArray && !q.srcPtr.ptr) || (!q.dstArray && !q.dstPtr.ptr))
        return PV_cudaErrorInvalidValue;
    return pv_memcpy3d_run(&q, s);
}

/* ------------------------------------------------------------------------------------------ 3D copies */
/* Linear memory here; copies that involve a CUDA array are pv_array_copy3d's. */
cudaError_t pv_memcpy3d_run(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    if (p->srcArray || p->dstArray)
        return pv_array_copy3d(p, s);
    const struct cudaExtent *e = &p->extent;
    if (!e->width || !e->height || !e->depth)
        return PV_SUCCESS;
    const struct cudaPitchedPtr *sp = &p->srcPtr, *dp = &p->dstPtr;
    if (e->depth == 1 && e->height == 1 && !p->srcPos.y && !p->dstPos.y && !p->srcPos.z && !p->dstPos.z)
        return pv_memcpy((char *)dp->ptr + p->dstPos.x, (const char *)sp->ptr + p->srcPos.x, e->width, p->kind, s,
                         s != NULL);   /* the synchronous entry points pass no stream: their D2H copy must wait */
    if ((e->depth > 1 || p->srcPos.z || p->dstPos.z) && (!sp->ysize || !dp->ysize))
        return PV_cudaErrorInvalidValue;
    for (size_t z = 0; z < e->depth; z++) {
        const char *src = (const char *)sp->ptr + ((p->srcPos.z + z) * sp->ysize + p->srcPos.y) * sp->pitch +
                          p->srcPos.x;
        char *dst = (char *)dp->ptr + ((p->dstPos.z + z) * dp->ysize + p->dstPos.y) * dp->pitch + p->dstPos.x;
        cudaError_t err = pv_memcpy2d(dst, dp->pitch, src, sp->pitch, e->width, e->height, p->kind, s);
        if (err != PV_SUCCESS)
            return err;
    }
    return PV_SUCCESS;
}

cudaError_t pv_memcpy3d(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    if (!p)
        return PV_cudaErrorInvalidValue;
    if (p->kind < 0 || p->kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    if ((p->srcArray && p->srcPtr.ptr) || (p->dstArray && p->dstPtr.ptr) || (!p->srcArray && !p->srcPtr.ptr) ||
        (!p->dstArray && !p->dstPtr.ptr))
        return PV_cudaErrorInvalidValue;
    if (pv_capturing(s))
        return pv_capture_params(s, PV_cudaGraphNodeTypeMemcpy, p);
    cudaError_t err = pv_init_with_stream(s);
    return err != PV_SUCCESS ? err : pv_memcpy3d_run(p, s);
}
