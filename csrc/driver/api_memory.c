/* Memory: device allocations in the current context's device, host (pinned) memory, every copy and memset of the
 * driver API (all on the core's copy.c: fire-and-forget host-to-device data, device-to-host copies that wait),
 * address ranges and pointer attributes from the core's allocation table. The _ptds/_ptsz twins are the same calls:
 * the daemon serializes a device's work, so the per-thread default stream and the legacy one coincide. */
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
    cudaError_t err = pv_call_MALLOC(d, size, &p);
    if (err == PV_SUCCESS && p == 0)
        err = PV_cudaErrorUnknown;
    if (err != PV_SUCCESS)
        return drv_result(err);
    pv_alloc_add(p, size, d->index);
    *out = p;
    return CUDA_SUCCESS;
}

PV_API CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size)
{
    struct pv_device *d;
    CUresult r = out ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? alloc_on(d, size, out) : r;
}

/* Stream-ordered allocation: a device's work runs in arrival order on the daemon, so an allocation made now and a
 * free sent now are ordered after all work already submitted to the stream (as libvcudart's cudaMallocAsync). */
static CUresult alloc_async(CUdeviceptr *out, size_t size, CUstream s)
{
    struct pv_device *d;
    uint64_t remote;
    CUresult r = out ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = drv_result(pv_stream_target(s, &d, &remote));
    return r == CUDA_SUCCESS ? alloc_on(d, size, out) : r;
}

PV_API CUresult cuMemAllocAsync(CUdeviceptr *out, size_t size, CUstream s) { return alloc_async(out, size, s); }
PV_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *out, size_t size, CUstream s) { return alloc_async(out, size, s); }

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

PV_API CUresult cuMemFree_v2(CUdeviceptr p)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS || p == 0)
        return r;
    struct pv_alloc a;
    if (pv_alloc_find(p, &a) != 0 || a.dev < 0 || a.ptr != p)
        return CUDA_ERROR_INVALID_VALUE;
    cudaError_t err = pv_call_FREE(pv_device(a.dev), p);
    int dev;
    pv_alloc_remove(p, &dev);   /* forgotten whatever the answer, as libvcudart does (see cudaFree) */
    return drv_result(err);
}

PV_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    return pv_stream_ok(s) ? cuMemFree_v2(p) : CUDA_ERROR_INVALID_HANDLE;
}

PV_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

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
    struct pv_alloc a;
    if (pv_alloc_find(p, &a) != 0 || a.dev < 0)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = a.ptr;
    if (size)
        *size = a.size;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ host memory */
PV_API CUresult cuMemHostAlloc(void **out, size_t size, unsigned flags)
{
    CUresult r = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_host_alloc(size, flags, out)) : r;
}

PV_API CUresult cuMemAllocHost_v2(void **out, size_t size) { return cuMemHostAlloc(out, size, 0); }

PV_API CUresult cuMemFreeHost(void *p)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_host_free(p)) : r;
}

PV_API CUresult cuMemHostGetFlags(unsigned *flags, void *p)
{
    CUresult r = flags ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_host_flags(p, flags)) : r;
}

/* Pinning has no meaning on a client whose GPUs are remote: registration succeeds and changes nothing. */
PV_API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
    (void)flags;
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS && (!p || !size) ? CUDA_ERROR_INVALID_VALUE : r;
}

PV_API CUresult cuMemHostUnregister(void *p)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS && !p ? CUDA_ERROR_INVALID_VALUE : r;
}

/* ------------------------------------------------------------------------------------------ 1D copies */
static CUresult copy(void *dst, const void *src, size_t n, int kind, CUstream s)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
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
    return drv_result(pv_copy_d2d(dd, dst, sd, src, n, 0));
}

#define PEER(name, ...)                                                                                           \
    PV_API CUresult name(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,                           \
                         size_t n __VA_OPT__(, ) __VA_ARGS__)
PEER(cuMemcpyPeer) { return peer(dst, dc, src, sc, n, NULL); }
PEER(cuMemcpyPeer_ptds) { return peer(dst, dc, src, sc, n, NULL); }
PEER(cuMemcpyPeerAsync, CUstream s) { return peer(dst, dc, src, sc, n, s); }
PEER(cuMemcpyPeerAsync_ptsz, CUstream s) { return peer(dst, dc, src, sc, n, s); }

/* ------------------------------------------------------------------------------------------ 2D copies */
/* One side of a CUDA_MEMCPY2D: its address (offsets applied) and whether it is device memory. */
static CUresult side(int type, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch,
                     const char **addr, int *is_dev)
{
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        *addr = host;
        *is_dev = 0;
        break;
    case CU_MEMORYTYPE_DEVICE:
        *addr = PTR(dev);
        *is_dev = 1;
        break;
    case CU_MEMORYTYPE_UNIFIED:
        *addr = PTR(dev);
        *is_dev = pv_is_device_ptr(*addr);
        break;
    default:   /* CUDA arrays are not supported */
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!*addr)
        return CUDA_ERROR_INVALID_VALUE;
    *addr += y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s)
{
    CUresult r = c ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (c->WidthInBytes == 0 || c->Height == 0)
        return CUDA_SUCCESS;
    const char *src, *dst;
    int sdev, ddev;
    r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch, &src, &sdev);
    if (r == CUDA_SUCCESS)
        r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch, &dst, &ddev);
    if (r != CUDA_SUCCESS)
        return r;
    int kind = ddev ? (sdev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                    : (sdev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    size_t spitch = c->Height > 1 ? c->srcPitch : c->WidthInBytes, dpitch = c->Height > 1 ? c->dstPitch : c->WidthInBytes;
    return drv_result(pv_memcpy2d((void *)dst, dpitch, src, spitch, c->WidthInBytes, c->Height, kind, s));
}

PV_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL); }
PV_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s); }
PV_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s); }

/* ------------------------------------------------------------------------------------------ memset */
static CUresult set(CUdeviceptr p, size_t pitch, unsigned value, int elem, size_t width, size_t height, CUstream s)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (p % (unsigned)elem || (height > 1 && pitch % (unsigned)elem))
        return CUDA_ERROR_INVALID_VALUE;
    return drv_result(pv_memset(PTR(p), pitch, value, elem, width, height, s));
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

/* One attribute of p; CUDA_ERROR_INVALID_VALUE when p is not memory this process knows, or the attribute does not
 * apply (a host pointer of device memory). unknown: p is in no allocation. */
static CUresult attribute(void *data, int attr, CUdeviceptr p, int *unknown)
{
    struct pv_alloc a;
    *unknown = pv_alloc_find(p, &a) != 0;
    int is_dev = !*unknown && a.dev >= 0, dev = *unknown ? -2 : is_dev ? a.dev : pv_tls_device();
    void *ptr;
    int v;
    switch (attr) {
    case PA_CONTEXT:
        ptr = *unknown ? NULL : is_dev ? (void *)drv_primary(dev) : (void *)drv_ctx_top();
        memcpy(data, &ptr, sizeof ptr);
        break;
    case PA_MEMORY_TYPE:
        v = *unknown ? 0 : is_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        memcpy(data, &v, sizeof v);
        break;
    case PA_DEVICE_POINTER:
    case PA_HOST_POINTER:
        if (*unknown || is_dev != (attr == PA_DEVICE_POINTER))
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(data, &p, sizeof p);
        break;
    case PA_DEVICE_ORDINAL:
        memcpy(data, &dev, sizeof dev);
        break;
    case PA_RANGE_START_ADDR:
    case PA_RANGE_SIZE:
    case PA_BUFFER_ID:
        if (*unknown)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(data, attr == PA_RANGE_SIZE ? &a.size : &a.ptr, 8);
        break;
    case PA_SYNC_MEMOPS:
    case PA_IS_MANAGED:
    case PA_MAPPED:
        /* "a boolean" in cuda.h, four bytes in practice: NVIDIA's runtime reads an unsigned int (a one-byte
         * answer left its upper bytes as garbage and turned pinned memory into managed memory) */
        v = attr == PA_MAPPED && !*unknown;
        memcpy(data, &v, sizeof v);
        break;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return *unknown && attr != PA_DEVICE_ORDINAL && attr != PA_MEMORY_TYPE && attr != PA_CONTEXT
               ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

PV_API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
    CUresult r = data ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    int unknown;
    r = attribute(data, attr, p, &unknown);
    return unknown ? CUDA_ERROR_INVALID_VALUE : r;
}

/* As CUDA: memory this process does not know is not an error here; its attributes read as empty (type 0). */
PV_API CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p)
{
    CUresult r = attrs && data ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
        int unknown;
        if (!data[i])
            continue;
        CUresult e = attribute(data[i], attrs[i], p, &unknown);
        if (e == CUDA_ERROR_NOT_SUPPORTED)
            return e;
        if (e != CUDA_SUCCESS)
            memset(data[i], 0, 8);   /* only the pointer, range and id attributes fail: all 8 bytes wide */
    }
    return r;
}
