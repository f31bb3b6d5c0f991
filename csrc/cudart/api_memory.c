/* Memory: device allocations, copies of every kind (1D, 2D, peer, symbols), memsets, host memory, mem info,
 * pointer attributes. The transfers themselves are the core's (core/copy.c). */
#include <stdlib.h>
#include <string.h>

#include "cudart.h"

/* A copy on a capturing stream becomes a node of its graph. */
static cudaError_t capture_copy(cudaStream_t s, const struct cudaMemcpy3DParms *p)
{
    return pv_capture_params(s, PV_cudaGraphNodeTypeMemcpy, p);
}

/* ------------------------------------------------------------------------------------------ alloc/free */
PV_API cudaError_t cudaMalloc(void **ptr, size_t size)
{
    struct pv_device *d;
    if (!ptr)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    if (size == 0) {
        *ptr = NULL;
        return PV_SUCCESS;
    }
    uint64_t p = 0;
    err = pv_malloc_unique(d, size, pv_tls_owner(), &p);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *ptr = (void *)(uintptr_t)p;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height)
{
    if (!pitch)
        return pv_ret(PV_cudaErrorInvalidValue);
    size_t p = (width + 511) & ~(size_t)511;
    cudaError_t err = cudaMalloc(ptr, p * height);
    if (err == PV_SUCCESS)
        *pitch = p;
    return err;
}

PV_API cudaError_t cudaFree(void *ptr) { return pv_ret(pv_mem_free(ptr)); }

PV_API cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    uint64_t ft[2];
    err = pv_call_MEM_GET_INFO(d, ft);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    if (free_b)
        *free_b = (size_t)ft[0];
    if (total_b)
        *total_b = (size_t)ft[1];
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ host memory */
PV_API cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned flags)
{
    return pv_ret(pv_mem_host_alloc(ptr, size, flags));
}

PV_API cudaError_t cudaMallocHost(void **ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }
PV_API cudaError_t cudaFreeHost(void *ptr) { return pv_ret(pv_mem_free_host(ptr)); }
PV_API cudaError_t cudaHostGetFlags(unsigned *flags, void *ptr) { return pv_ret(pv_mem_host_flags(ptr, flags)); }

PV_API cudaError_t cudaPointerGetAttributes(void *attrs, const void *ptr)
{
    if (!attrs)
        return pv_ret(PV_cudaErrorInvalidValue);
    static const int types[] = { [PV_PTR_UNKNOWN] = cudaMemoryTypeUnregistered, [PV_PTR_HOST] = cudaMemoryTypeHost,
                                 [PV_PTR_DEVICE] = cudaMemoryTypeDevice, [PV_PTR_MANAGED] = PV_cudaMemoryTypeManaged };
    struct pv_ptr_info pi;
    pv_ptr_classify(ptr, &pi);
    char *p = attrs;
    memset(p, 0, PV_cudaPointerAttributes_SIZE);
    void *dptr = (void *)(uintptr_t)pi.dev, *hptr = (void *)(uintptr_t)pi.host;
    memcpy(p + PV_cudaPointerAttributes_type, &types[pi.type], sizeof(int));
    memcpy(p + PV_cudaPointerAttributes_device, &pi.device, sizeof pi.device);
    memcpy(p + PV_cudaPointerAttributes_devicePointer, &dptr, sizeof dptr);
    memcpy(p + PV_cudaPointerAttributes_hostPointer, &hptr, sizeof hptr);
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ 1D copies */
PV_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    return pv_ret(pv_memcpy(dst, src, n, kind, NULL, 0));
}

PV_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
    if (pv_capturing(s))
        return pv_ret(pv_capture_copy1d(s, dst, src, n, kind));
    return pv_ret(pv_memcpy(dst, src, n, kind, s, 1));
}

static cudaError_t peer(void *dst, int dstDev, const void *src, int srcDev, size_t n)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    struct pv_device *dd = pv_device(dstDev), *sd = pv_device(srcDev), *chk;
    if (!dd || !sd)
        return PV_cudaErrorInvalidDevice;
    if (n == 0)
        return PV_SUCCESS;
    if (pv_dev_range(dst, n, &chk) != 0 || chk != dd || pv_dev_range(src, n, &chk) != 0 || chk != sd)
        return PV_cudaErrorInvalidValue;
    return pv_copy_d2d(dd, (uint64_t)(uintptr_t)dst, sd, (uint64_t)(uintptr_t)src, n, 0);
}

PV_API cudaError_t cudaMemcpyPeer(void *dst, int dstDev, const void *src, int srcDev, size_t n)
{
    return pv_ret(peer(dst, dstDev, src, srcDev, n));
}

PV_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDev, const void *src, int srcDev, size_t n, cudaStream_t s)
{
    if (!pv_stream_ok(s))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    return pv_ret(peer(dst, dstDev, src, srcDev, n));
}

/* ------------------------------------------------------------------------------------------ 2D copies */
PV_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                size_t height, int kind)
{
    return pv_ret(pv_memcpy2d(dst, dpitch, src, spitch, width, height, kind, NULL));
}

PV_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, int kind, cudaStream_t s)
{
    if (pv_capturing(s))
        return pv_ret(pv_capture_copy2d(s, dst, dpitch, src, spitch, width, height, kind));
    return pv_ret(pv_memcpy2d(dst, dpitch, src, spitch, width, height, kind, s));
}

/* ------------------------------------------------------------------------------------------ 3D copies */
PV_API cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) { return pv_ret(pv_memcpy3d(p, NULL)); }
PV_API cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    return pv_ret(pv_memcpy3d(p, s));
}
PV_API cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p) { return cudaMemcpy3D(p); }
PV_API cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    return cudaMemcpy3DAsync(p, s);
}

PV_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *out, struct cudaExtent e)
{
    if (!out)
        return pv_ret(PV_cudaErrorInvalidValue);
    size_t pitch;
    void *p = NULL;
    cudaError_t err = cudaMallocPitch(&p, &pitch, e.width, e.height * e.depth);
    if (err == PV_SUCCESS)
        *out = (struct cudaPitchedPtr){ p, pitch, e.width, e.height };
    return err;
}

/* ------------------------------------------------------------------------------------------ memset */
static cudaError_t memset_1d(void *ptr, int value, size_t n, cudaStream_t s)
{
    struct cudaMemsetParams p = { ptr, n, (unsigned)value & 0xffu, 1, n, 1 };
    return pv_memset_any(&p, s);
}

static cudaError_t memset_2d(void *ptr, size_t pitch, int value, size_t width, size_t height, cudaStream_t s)
{
    if (width && height && width > pitch)
        return PV_cudaErrorInvalidPitchValue;
    struct cudaMemsetParams p = { ptr, pitch, (unsigned)value & 0xffu, 1, width, height };
    return pv_memset_any(&p, s);
}

PV_API cudaError_t cudaMemset(void *p, int v, size_t n) { return pv_ret(memset_1d(p, v, n, NULL)); }
PV_API cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { return pv_ret(memset_1d(p, v, n, s)); }
PV_API cudaError_t cudaMemset2D(void *p, size_t pitch, int v, size_t w, size_t h)
{
    return pv_ret(memset_2d(p, pitch, v, w, h, NULL));
}
PV_API cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s)
{
    return pv_ret(memset_2d(p, pitch, v, w, h, s));
}

static cudaError_t memset_3d(struct cudaPitchedPtr pp, int value, struct cudaExtent e, cudaStream_t s)
{
    if (e.width > pp.pitch && (e.height > 1 || e.depth > 1))
        return PV_cudaErrorInvalidPitchValue;
    if (e.depth > 1 && pp.ysize < e.height)
        return PV_cudaErrorInvalidValue;
    if (e.depth == 1 || pp.ysize == e.height)           /* the slices are contiguous rows */
        return memset_2d(pp.ptr, pp.pitch, value, e.width, e.height * e.depth, s);
    for (size_t z = 0; z < e.depth; z++) {
        cudaError_t err = memset_2d((char *)pp.ptr + z * pp.ysize * pp.pitch, pp.pitch, value, e.width, e.height, s);
        if (err != PV_SUCCESS)
            return err;
    }
    return PV_SUCCESS;
}

PV_API cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int v, struct cudaExtent e)
{
    return pv_ret(memset_3d(p, v, e, NULL));
}
PV_API cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr p, int v, struct cudaExtent e, cudaStream_t s)
{
    return pv_ret(memset_3d(p, v, e, s));
}
PV_API cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr p, int v, struct cudaExtent e) { return cudaMemset3D(p, v, e); }
PV_API cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr p, int v, struct cudaExtent e, cudaStream_t s)
{
    return cudaMemset3DAsync(p, v, e, s);
}

/* ------------------------------------------------------------------------------------------ symbols */
static cudaError_t symbol_addr(const void *symbol, struct pv_device **dout, uint64_t *addr, size_t *size)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return err;
    struct pv_var *v = pv_var_by_host(symbol);
    if (!v)
        return PV_cudaErrorInvalidSymbol;
    err = pv_module_ensure(v->fb, d);
    if (err != PV_SUCCESS)
        return err;
    if (!v->have[d->index])
        return PV_cudaErrorInvalidSymbol;
    *dout = d;
    *addr = v->addr[d->index];
    *size = v->size;
    return PV_SUCCESS;
}

/* Checks shared by the symbol copies: n bytes at offset lie within the symbol and, unless n is 0, the other side's
 * pointer ptr is set. On success *d is the current device and *addr the device address of symbol + offset. */
static cudaError_t symbol_span(const void *symbol, size_t n, size_t offset, const void *ptr, struct pv_device **d,
                               uint64_t *addr)
{
    size_t size;
    cudaError_t err = symbol_addr(symbol, d, addr, &size);
    if (err != PV_SUCCESS)
        return err;
    if (offset > size || n > size - offset)
        return PV_cudaErrorInvalidValue;
    if (n != 0 && !ptr)
        return PV_cudaErrorInvalidValue;
    *addr += offset;
    return PV_SUCCESS;
}

/* A copy between a symbol (+offset) and memory: to the symbol from src, or from the symbol into dst. kind says where
 * the other side lives (cudaMemcpyDefault: found out from the pointer). */
static cudaError_t symbol_copy(int to_symbol, const void *symbol, void *other, size_t n, size_t offset, int kind,
                               cudaStream_t s, int async)
{
    struct pv_device *d, *od;
    uint64_t addr;
    cudaError_t err = symbol_span(symbol, n, offset, other, &d, &addr);
    if (err != PV_SUCCESS || n == 0)
        return err;
    int host_kind = to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    if (kind == cudaMemcpyDefault)
        kind = pv_is_device_ptr(other) ? cudaMemcpyDeviceToDevice : host_kind;
    if (kind == host_kind)
        return to_symbol ? pv_copy_h2d_landed(d, addr, other, n, pv_stream_for(s, d), !async)
                         : pv_copy_d2h(d, other, addr, n, pv_stream_for(s, d));
    if (kind != cudaMemcpyDeviceToDevice)
        return PV_cudaErrorInvalidMemcpyDirection;
    if (pv_dev_range(other, n, &od) != 0)
        return PV_cudaErrorInvalidValue;
    uint64_t o = (uint64_t)(uintptr_t)other;
    return to_symbol ? pv_copy_d2d(d, addr, od, o, n, pv_stream_for(s, od)) : pv_copy_d2d(od, o, d, addr, n, pv_stream_for(s, d));
}

static cudaError_t to_symbol(const void *symbol, const void *src, size_t n, size_t offset, int kind, cudaStream_t s,
                             int async)
{
    return symbol_copy(1, symbol, (void *)src, n, offset, kind, s, async);
}

static cudaError_t from_symbol(void *dst, const void *symbol, size_t n, size_t offset, int kind, cudaStream_t s)
{
    return symbol_copy(0, symbol, dst, n, offset, kind, s, 0);
}

PV_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset, int kind)
{
    return pv_ret(to_symbol(symbol, src, n, offset, kind, NULL, 0));
}
/* A symbol copy on a capturing stream: a 1D memcpy node to or from the symbol's address on the current device. */
static cudaError_t capture_symbol(cudaStream_t s, const void *symbol, void *ptr, size_t n, size_t offset, int kind,
                                  int to)
{
    struct pv_device *d;
    uint64_t addr;
    cudaError_t err = symbol_span(symbol, n, offset, ptr, &d, &addr);
    if (err != PV_SUCCESS)
        return err;
    struct cudaMemcpy3DParms p;
    void *sym = (void *)(uintptr_t)addr;
    if (to)
        pv_copy1d_params(&p, sym, ptr, n, kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                                              kind == cudaMemcpyDefault ? kind : -1);
    else
        pv_copy1d_params(&p, ptr, sym, n, kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                                              kind == cudaMemcpyDefault ? kind : -1);
    return p.kind < 0 ? PV_cudaErrorInvalidMemcpyDirection : capture_copy(s, &p);
}

PV_API cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t offset, int kind,
                                           cudaStream_t s)
{
    if (!pv_stream_ok(s))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (pv_capturing(s))
        return pv_ret(capture_symbol(s, symbol, (void *)src, n, offset, kind, 1));
    return pv_ret(to_symbol(symbol, src, n, offset, kind, s, 1));
}
PV_API cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset, int kind)
{
    return pv_ret(from_symbol(dst, symbol, n, offset, kind, NULL));
}
PV_API cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n, size_t offset, int kind,
                                             cudaStream_t s)
{
    if (!pv_stream_ok(s))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (pv_capturing(s))
        return pv_ret(capture_symbol(s, symbol, dst, n, offset, kind, 0));
    return pv_ret(from_symbol(dst, symbol, n, offset, kind, s));
}

/* cudaGetSymbolAddress / cudaGetSymbolSize: exactly one of dev_ptr and size is wanted. */
static cudaError_t symbol_query(const void *symbol, void **dev_ptr, size_t *size)
{
    struct pv_device *d;
    uint64_t addr;
    size_t sz;
    if (!dev_ptr && !size)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = symbol_addr(symbol, &d, &addr, &sz);
    if (err != PV_SUCCESS)
        return err;
    if (dev_ptr)
        *dev_ptr = (void *)(uintptr_t)addr;
    if (size)
        *size = sz;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    return devPtr ? pv_ret(symbol_query(symbol, devPtr, NULL)) : pv_ret(PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    return size ? pv_ret(symbol_query(symbol, NULL, size)) : pv_ret(PV_cudaErrorInvalidValue);
}
