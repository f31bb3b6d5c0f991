/* Memory: device allocations in the current context's device, host (pinned or mapped) memory, every 1D/2D/3D copy
 * and memset of the driver API (on the core's copies: fire-and-forget host-to-device data, device-to-host copies
 * that wait; on a capturing stream they become graph nodes), address ranges and pointer attributes from what the
 * core knows of an address. The _ptds/_ptsz twins are the same calls: the daemon serializes a device's work, so the
 * per-thread default stream and the legacy one coincide. */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define PTR(p) ((void *)(uintptr_t)(p))

/* ------------------------------------------------------------------------------------------ allocations */
static CUresult alloc_on(struct pv_device *d, size_t size, CUdeviceptr *out)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = 0;
    cudaError_t err = pv_malloc_unique(d, size, pv_tls_owner(), &p);
    if (err != PV_SUCCESS)
        return drv_result(err);
    *out = p;
    return CUDA_SUCCESS;
}

PV_API CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size)
{
    struct pv_device *d;
    CUresult r = out ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? alloc_on(d, size, out) : r;
}

PV_API CUresult cuMemAllocPitch_v2(CUdeviceptr *out, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    if (!pitch || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511;   /* the texture pitch alignment of the snapshot devices */
    CUresult r = cuMemAlloc_v2(out, p * height);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

/* Device memory of every kind: plain, from a pool (it leaves its pool), managed. */
PV_API CUresult cuMemFree_v2(CUdeviceptr p)
{
    DRV_RETURN(pv_mem_free(PTR(p)));
}

PV_API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    struct pv_device *d;
    CUresult r = drv_cur_device(&d);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t ft[2];
    r = drv_result(pv_call_MEM_GET_INFO(d, ft));
    if (r == CUDA_SUCCESS) {
        if (free_b)
            *free_b = (size_t)ft[0];
        if (total_b)
            *total_b = (size_t)ft[1];
    }
    return r;
}

PV_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_ptr_info pi;
    pv_ptr_classify(PTR(p), &pi);
    if (pi.type != PV_PTR_DEVICE && pi.type != PV_PTR_MANAGED)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = pi.base;
    if (size)
        *size = pi.size;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ host memory */
/* CU_MEMHOSTALLOC_DEVICEMAP (2, cudaHostAllocMapped's number) gives the memory a coherent device copy. */
PV_API CUresult cuMemHostAlloc(void **out, size_t size, unsigned flags)
{
    CUresult r = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_mem_host_alloc(out, size, flags)) : r;
}

PV_API CUresult cuMemAllocHost_v2(void **out, size_t size) { return cuMemHostAlloc(out, size, 0); }

PV_API CUresult cuMemFreeHost(void *p)
{
    DRV_RETURN(pv_mem_free_host(p));
}

PV_API CUresult cuMemHostGetFlags(unsigned *flags, void *p)
{
    CUresult r = flags ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_mem_host_flags(p, flags)) : r;
}

/* Pinning has no meaning on a client whose GPUs are remote: plain registration changes nothing; with
 * CU_MEMHOSTREGISTER_DEVICEMAP the memory gets a coherent device copy (core managed.c). */
PV_API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
    DRV_RETURN(pv_host_register(p, size, flags));
}

PV_API CUresult cuMemHostUnregister(void *p)
{
    DRV_RETURN(pv_host_unregister(p));
}

PV_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *out, void *p, unsigned flags)
{
    CUresult r = out && !flags ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    void *dev;
    if (r == CUDA_SUCCESS && (r = drv_result(pv_host_device_pointer(p, &dev))) == CUDA_SUCCESS)
        *out = (CUdeviceptr)(uintptr_t)dev;
    return r;
}

/* ------------------------------------------------------------------------------------------ 1D copies */
static CUresult copy(void *dst, const void *src, size_t n, int kind, CUstream s)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (pv_capturing(s))
        return drv_result(pv_capture_copy1d(s, dst, src, n, kind));
    if (n == 0)
        return CUDA_SUCCESS;
    return drv_result(pv_memcpy(dst, src, n, kind, s, s != NULL));
}

#define HTOD(name, ...)                                                                                           \
    PV_API CUresult name(CUdeviceptr dst, const void *src, size_t n __VA_OPT__(, ) __VA_ARGS__)
HTOD(cuMemcpyHtoD_v2) { return copy(PTR(dst), src, n, cudaMemcpyHostToDevice, NULL); }
HTOD(cuMemcpyHtoD_v2_ptds) { return copy(PTR(dst), src, n, cudaMemcpyHostToDevice, NULL); }
HTOD(cuMemcpyHtoDAsync_v2, CUstream s) { return copy(PTR(dst), src, n, cudaMemcpyHostToDevice, s); }
HTOD(cuMemcpyHtoDAsync_v2_ptsz, CUstream s) { return copy(PTR(dst), src, n, cudaMemcpyHostToDevice, s); }

#define DTOH(name, ...) PV_API CUresult name(void *dst, CUdeviceptr src, size_t n __VA_OPT__(, ) __VA_ARGS__)
DTOH(cuMemcpyDtoH_v2) { return copy(dst, PTR(src), n, cudaMemcpyDeviceToHost, NULL); }
DTOH(cuMemcpyDtoH_v2_ptds) { return copy(dst, PTR(src), n, cudaMemcpyDeviceToHost, NULL); }
DTOH(cuMemcpyDtoHAsync_v2, CUstream s) { return copy(dst, PTR(src), n, cudaMemcpyDeviceToHost, s); }
DTOH(cuMemcpyDtoHAsync_v2_ptsz, CUstream s) { return copy(dst, PTR(src), n, cudaMemcpyDeviceToHost, s); }

#define DTOD(name, ...) PV_API CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n __VA_OPT__(, ) __VA_ARGS__)
DTOD(cuMemcpyDtoD_v2) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDeviceToDevice, NULL); }
DTOD(cuMemcpyDtoD_v2_ptds) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDeviceToDevice, NULL); }
DTOD(cuMemcpyDtoDAsync_v2, CUstream s) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDeviceToDevice, s); }
DTOD(cuMemcpyDtoDAsync_v2_ptsz, CUstream s) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDeviceToDevice, s); }
/* Unified addressing: the direction follows from where the pointers live. */
DTOD(cuMemcpy) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDefault, NULL); }
DTOD(cuMemcpy_ptds) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDefault, NULL); }
DTOD(cuMemcpyAsync, CUstream s) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDefault, s); }
DTOD(cuMemcpyAsync_ptsz, CUstream s) { return copy(PTR(dst), PTR(src), n, cudaMemcpyDefault, s); }

static CUresult peer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s)
{
    struct pv_device *dd, *sd, *chk;
    CUresult r = drv_ctx_device(dc, &dd);
    if (r == CUDA_SUCCESS)
        r = drv_ctx_device(sc, &sd);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if (!pv_stream_ok(s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (pv_dev_range(PTR(dst), n, &chk) != 0 || chk != dd || pv_dev_range(PTR(src), n, &chk) != 0 || chk != sd)
        return CUDA_ERROR_INVALID_VALUE;
    if (pv_capturing(s))
        return drv_result(pv_capture_copy1d(s, PTR(dst), PTR(src), n, cudaMemcpyDefault));
    return drv_result(pv_copy_d2d(dd, dst, sd, src, n, 0));
}

#define PEER(name, ...)                                                                                           \
    PV_API CUresult name(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,                           \
                         size_t n __VA_OPT__(, ) __VA_ARGS__)
PEER(cuMemcpyPeer) { return peer(dst, dc, src, sc, n, NULL); }
PEER(cuMemcpyPeer_ptds) { return peer(dst, dc, src, sc, n, NULL); }
PEER(cuMemcpyPeerAsync, CUstream s) { return peer(dst, dc, src, sc, n, s); }
PEER(cuMemcpyPeerAsync_ptsz, CUstream s) { return peer(dst, dc, src, sc, n, s); }

/* ------------------------------------------------------------------------------------------ 2D and 3D copies */
/* Every 2D/3D form, arrays included, is the core's 3D copy (captured on a capturing stream). */
static CUresult copy3d(const struct cudaMemcpy3DParms *p, CUresult conv, CUstream s)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS || (r = conv) != CUDA_SUCCESS)
        return r;
    return drv_result(pv_memcpy3d(p, s));
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s)
{
    struct cudaMemcpy3DParms p;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->WidthInBytes == 0 || c->Height == 0)
        return drv_ready();
    return copy3d(&p, drv_copy2d_in(c, &p), s);
}

PV_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s); }
PV_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s); }

static CUresult copy3d_drv(const CUDA_MEMCPY3D *c, CUstream s)
{
    struct cudaMemcpy3DParms p;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->WidthInBytes == 0 || c->Height == 0 || c->Depth == 0)
        return drv_ready();
    return copy3d(&p, drv_copy3d_in(c, &p), s);
}

PV_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { return copy3d_drv(c, NULL); }
PV_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c) { return copy3d_drv(c, NULL); }
PV_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s) { return copy3d_drv(c, s); }
PV_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream s) { return copy3d_drv(c, s); }

/* The peer form names the contexts of both sides; pointers carry their GPU here, so they are only checked. */
static CUresult copy3d_peer(const CUDA_MEMCPY3D_PEER *c, CUstream s)
{
    struct pv_device *d;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_ctx_device(c->srcContext, &d);
    if (r == CUDA_SUCCESS)
        r = drv_ctx_device(c->dstContext, &d);
    if (r != CUDA_SUCCESS)
        return r;
    CUDA_MEMCPY3D plain;
    memcpy(&plain, c, sizeof plain);             /* the same layout; the contexts sit in the reserved fields */
    plain.reserved0 = plain.reserved1 = NULL;
    return copy3d_drv(&plain, s);
}

PV_API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *c) { return copy3d_peer(c, NULL); }
PV_API CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *c) { return copy3d_peer(c, NULL); }
PV_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *c, CUstream s) { return copy3d_peer(c, s); }
PV_API CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *c, CUstream s) { return copy3d_peer(c, s); }

/* ------------------------------------------------------------------------------------------ memset */
static CUresult set(CUdeviceptr p, size_t pitch, unsigned value, int elem, size_t width, size_t height, CUstream s)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (p % (unsigned)elem || (height > 1 && pitch % (unsigned)elem))
        return CUDA_ERROR_INVALID_VALUE;
    struct cudaMemsetParams m = { PTR(p), pitch, value, (unsigned)elem, width, height };
    return drv_result(pv_memset_any(&m, s));
}

#define SET1(name, T, elem, ...)                                                                                 \
    PV_API CUresult name(CUdeviceptr p, T v, size_t n __VA_OPT__(, ) __VA_ARGS__)
SET1(cuMemsetD8_v2, unsigned char, 1) { return set(p, n, v, 1, n, 1, NULL); }
SET1(cuMemsetD8_v2_ptds, unsigned char, 1) { return set(p, n, v, 1, n, 1, NULL); }
SET1(cuMemsetD16_v2, unsigned short, 2) { return set(p, 2 * n, v, 2, n, 1, NULL); }
SET1(cuMemsetD16_v2_ptds, unsigned short, 2) { return set(p, 2 * n, v, 2, n, 1, NULL); }
SET1(cuMemsetD32_v2, unsigned int, 4) { return set(p, 4 * n, v, 4, n, 1, NULL); }
SET1(cuMemsetD32_v2_ptds, unsigned int, 4) { return set(p, 4 * n, v, 4, n, 1, NULL); }
SET1(cuMemsetD8Async, unsigned char, 1, CUstream s) { return set(p, n, v, 1, n, 1, s); }
SET1(cuMemsetD8Async_ptsz, unsigned char, 1, CUstream s) { return set(p, n, v, 1, n, 1, s); }
SET1(cuMemsetD16Async, unsigned short, 2, CUstream s) { return set(p, 2 * n, v, 2, n, 1, s); }
SET1(cuMemsetD16Async_ptsz, unsigned short, 2, CUstream s) { return set(p, 2 * n, v, 2, n, 1, s); }
SET1(cuMemsetD32Async, unsigned int, 4, CUstream s) { return set(p, 4 * n, v, 4, n, 1, s); }
SET1(cuMemsetD32Async_ptsz, unsigned int, 4, CUstream s) { return set(p, 4 * n, v, 4, n, 1, s); }

#define SET2(name, T, ...)                                                                                       \
    PV_API CUresult name(CUdeviceptr p, size_t pitch, T v, size_t w, size_t h __VA_OPT__(, ) __VA_ARGS__)
SET2(cuMemsetD2D8_v2, unsigned char) { return set(p, pitch, v, 1, w, h, NULL); }
SET2(cuMemsetD2D8_v2_ptds, unsigned char) { return set(p, pitch, v, 1, w, h, NULL); }
SET2(cuMemsetD2D16_v2, unsigned short) { return set(p, pitch, v, 2, w, h, NULL); }
SET2(cuMemsetD2D16_v2_ptds, unsigned short) { return set(p, pitch, v, 2, w, h, NULL); }
SET2(cuMemsetD2D32_v2, unsigned int) { return set(p, pitch, v, 4, w, h, NULL); }
SET2(cuMemsetD2D32_v2_ptds, unsigned int) { return set(p, pitch, v, 4, w, h, NULL); }
SET2(cuMemsetD2D8Async, unsigned char, CUstream s) { return set(p, pitch, v, 1, w, h, s); }
SET2(cuMemsetD2D8Async_ptsz, unsigned char, CUstream s) { return set(p, pitch, v, 1, w, h, s); }
SET2(cuMemsetD2D16Async, unsigned short, CUstream s) { return set(p, pitch, v, 2, w, h, s); }
SET2(cuMemsetD2D16Async_ptsz, unsigned short, CUstream s) { return set(p, pitch, v, 2, w, h, s); }
SET2(cuMemsetD2D32Async, unsigned int, CUstream s) { return set(p, pitch, v, 4, w, h, s); }
SET2(cuMemsetD2D32Async_ptsz, unsigned int, CUstream s) { return set(p, pitch, v, 4, w, h, s); }

/* ------------------------------------------------------------------------------------------ pointer attributes */
enum { PA_CONTEXT = 1, PA_MEMORY_TYPE = 2, PA_DEVICE_POINTER = 3, PA_HOST_POINTER = 4, PA_SYNC_MEMOPS = 6,
       PA_BUFFER_ID = 7, PA_IS_MANAGED = 8, PA_DEVICE_ORDINAL = 9, PA_RANGE_START_ADDR = 11, PA_RANGE_SIZE = 12,
       PA_MAPPED = 13 };

/* One attribute of what the core knows about p; CUDA_ERROR_INVALID_VALUE when p is no memory this process knows
 * (except the attributes CUDA answers for any address), or the attribute does not apply (the host pointer of device
 * memory). Managed memory is device memory that IS_MANAGED, with the same address on both sides. */
static CUresult attribute(void *data, int attr, const struct pv_ptr_info *pi)
{
    int known = pi->type != PV_PTR_UNKNOWN, on_dev = pi->type == PV_PTR_DEVICE || pi->type == PV_PTR_MANAGED;
    void *ptr;
    int v;
    uint64_t u;
    switch (attr) {
    case PA_CONTEXT:
        ptr = !known ? NULL : on_dev ? (void *)drv_primary(pi->device) : (void *)drv_ctx_top();
        memcpy(data, &ptr, sizeof ptr);
        return CUDA_SUCCESS;
    case PA_MEMORY_TYPE:
        v = !known ? 0 : on_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        memcpy(data, &v, sizeof v);
        return CUDA_SUCCESS;
    case PA_DEVICE_ORDINAL:
        memcpy(data, &pi->device, sizeof pi->device);
        return CUDA_SUCCESS;
    case PA_DEVICE_POINTER:
    case PA_HOST_POINTER:
        u = attr == PA_DEVICE_POINTER ? pi->dev : pi->host;
        if (!known || !u)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(data, &u, sizeof u);
        return CUDA_SUCCESS;
    case PA_RANGE_START_ADDR:
    case PA_RANGE_SIZE:
    case PA_BUFFER_ID:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        u = attr == PA_RANGE_SIZE ? pi->size : pi->base;
        memcpy(data, &u, sizeof u);
        return CUDA_SUCCESS;
    case PA_SYNC_MEMOPS:
    case PA_IS_MANAGED:
    case PA_MAPPED:
        /* "a boolean" in cuda.h, four bytes in practice: NVIDIA's runtime reads an unsigned int (a one-byte
         * answer left its upper bytes as garbage and turned pinned memory into managed memory) */
        v = attr == PA_MAPPED ? known : attr == PA_IS_MANAGED ? pi->type == PV_PTR_MANAGED : 0;
        memcpy(data, &v, sizeof v);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

PV_API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
    CUresult r = data ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_ptr_info pi;
    pv_ptr_classify(PTR(p), &pi);
    r = attribute(data, attr, &pi);
    return pi.type == PV_PTR_UNKNOWN && r != CUDA_ERROR_NOT_SUPPORTED ? CUDA_ERROR_INVALID_VALUE : r;
}

/* As CUDA: memory this process does not know is not an error here; its attributes read as empty (type 0). */
PV_API CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p)
{
    CUresult r = attrs && data ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    struct pv_ptr_info pi;
    pv_ptr_classify(PTR(p), &pi);
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
        if (!data[i])
            continue;
        CUresult e = attribute(data[i], attrs[i], &pi);
        if (e == CUDA_ERROR_NOT_SUPPORTED)
            return e;
        if (e != CUDA_SUCCESS)
            memset(data[i], 0, 8);   /* only the pointer, range and id attributes fail: all 8 bytes wide */
    }
    return r;
}
