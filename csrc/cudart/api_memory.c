/* Memory: device allocations, copies of every kind (1D, 2D, peer, symbols), memsets, host memory, mem info,
 * pointer attributes. A copy goes to the host that owns the device pointer; copies between GPUs are staged
 * through this process. Host-to-device data and memsets are fire-and-forget; device-to-host copies wait for the
 * reply, whose payload is read straight into the caller's buffer. */
#include <stdlib.h>
#include <string.h>

#include "graph.h"

#define PV_CHUNK ((size_t)16 << 20)   /* bytes per frame of a large copy; < 32 MiB: daemon buffers stay in malloc heap */

/* ------------------------------------------------------------------------------------------ primitives */
static cudaError_t h2d(struct pv_device *d, uint64_t dst, const void *src, size_t n, uint64_t stream)
{
    for (size_t off = 0; off < n; off += PV_CHUNK) {
        size_t k = n - off < PV_CHUNK ? n - off : PV_CHUNK;
        cudaError_t err = pv_send_MEMCPY_HTOD(d, dst + off, stream, (const char *)src + off, k);
        if (err != PV_SUCCESS)
            return err;
    }
    return PV_SUCCESS;
}

static cudaError_t d2h(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream)
{
    for (size_t off = 0; off < n; off += PV_CHUNK) {
        size_t k = n - off < PV_CHUNK ? n - off : PV_CHUNK;
        size_t got = 0;
        cudaError_t err = pv_call_MEMCPY_DTOH(d, src + off, k, stream, (char *)dst + off, k, &got);
        if (err != PV_SUCCESS)
            return err;
        if (got != k) {
            pv_log("GPU%d (%s:%d) returned %zu of %zu bytes of a device-to-host copy", d->index, d->conn->host,
                   d->conn->port, got, k);
            return PV_cudaErrorUnknown;
        }
    }
    return PV_SUCCESS;
}

static cudaError_t d2d_same(struct pv_device *d, uint64_t dst, uint64_t src, size_t n, uint64_t stream)
{
    return pv_send_MEMCPY_DTOD(d, dst, src, n, stream);
}

/* n device bytes of d at src through a buffer here, chunk by chunk, handed to put(ctx, offset, bytes, k). */
static cudaError_t d2h_through(struct pv_device *d, uint64_t src, size_t n, uint64_t stream,
                               cudaError_t (*put)(void *ctx, size_t off, const char *buf, size_t k), void *ctx)
{
    size_t cap = n < PV_CHUNK ? n : PV_CHUNK;
    char *buf = malloc(cap);
    if (!buf)
        return PV_cudaErrorMemoryAllocation;
    cudaError_t err = PV_SUCCESS;
    for (size_t off = 0; off < n && err == PV_SUCCESS; off += cap) {
        size_t k = n - off < cap ? n - off : cap;
        err = d2h(d, buf, src + off, k, stream);
        if (err == PV_SUCCESS)
            err = put(ctx, off, buf, k);
    }
    free(buf);
    return err;
}

struct to_device { struct pv_device *d; uint64_t dst; };

static cudaError_t put_device(void *ctx, size_t off, const char *buf, size_t k)
{
    struct to_device *t = ctx;
    return h2d(t->d, t->dst + off, buf, k, 0);
}

static cudaError_t put_host(void *ctx, size_t off, const char *buf, size_t k)
{
    memcpy((char *)ctx + off, buf, k);
    return PV_SUCCESS;
}

static cudaError_t d2d_staged(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n)
{
    struct to_device t = { dd, dst };
    return d2h_through(sd, src, n, 0, put_device, &t);
}

/* Between GPUs of different daemons the bytes go daemon to daemon: the source snapshots a chunk behind a ticket, the
 * destination fetches it from the source. If the daemons cannot reach each other, the copy goes through this process
 * (said once). */
static cudaError_t d2d_daemons(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n)
{
    static atomic_int fallback_once;
    for (size_t off = 0; off < n; off += PV_MAX_PEER_CHUNK) {
        size_t k = n - off < PV_MAX_PEER_CHUNK ? n - off : PV_MAX_PEER_CHUNK;
        struct pv_reply rep;
        cudaError_t err = pv_call_PEER_EXPORT(sd, src + off, k, &rep);
        const msgpack_object *t = err == PV_SUCCESS ? pv_map_get(rep.result, PV_KEY_PEER_TICKET) : NULL;
        unsigned char ticket[64];
        size_t tlen = 0;
        if (err == PV_SUCCESS && (!t || t->type != MSGPACK_OBJECT_BIN || t->via.bin.size > sizeof ticket))
            err = PV_cudaErrorUnknown;
        if (err == PV_SUCCESS) {
            tlen = t->via.bin.size;
            memcpy(ticket, t->via.bin.ptr, tlen);
        }
        pv_reply_free(&rep);
        if (err == PV_SUCCESS)
            err = pv_call_PEER_PULL(dd, dst + off, k, sd->conn->host, (uint32_t)sd->conn->port, ticket, tlen);
        if (err == PV_cudaErrorDevicesUnavailable || err == PV_cudaErrorNotSupported) {
            if (pv_conn_alive(dd->conn) && pv_conn_alive(sd->conn)) {
                pv_log_once(&fallback_once, "GPU%d (%s:%d) cannot fetch from GPU%d (%s:%d) directly (%s); copies "
                            "between them go through this process", dd->index, dd->conn->host, dd->conn->port,
                            sd->index, sd->conn->host, sd->conn->port, pv_err_name(err));
                return d2d_staged(dd, dst + off, sd, src + off, n - off);
            }
        }
        if (err != PV_SUCCESS)
            return err;
    }
    return PV_SUCCESS;
}

static cudaError_t d2d(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n,
                       uint64_t stream)
{
    if (dd == sd)
        return d2d_same(dd, dst, src, n, stream);
    if (dd->conn != sd->conn)
        return d2d_daemons(dd, dst, sd, src, n);
    /* two GPUs of one daemon: it copies between them once the source's earlier work is done */
    cudaError_t err = pv_call_DEVICE_SYNC(sd);
    return err != PV_SUCCESS ? err : pv_call_MEMCPY_PEER(dd, dst, (uint32_t)sd->remote, src, n, stream);
}

/* Device owning [p, p+n): 0 and *d set when the range lies inside one known device allocation. */
static int is_device_ptr(const void *p)
{
    struct pv_alloc a;
    return pv_alloc_find((uint64_t)(uintptr_t)p, &a) == 0 && a.dev >= 0;
}

int pv_ptr_device(const void *p)
{
    struct pv_alloc a;
    return (pv_alloc_find((uint64_t)(uintptr_t)p, &a) == 0 && a.dev >= 0) ? a.dev : -1;
}

/* A copy or memset on a capturing stream becomes a node of its graph. */
static cudaError_t capture_copy(cudaStream_t s, const struct cudaMemcpy3DParms *p)
{
    return pv_capture_params(s, PV_cudaGraphNodeTypeMemcpy, p);
}

/* The daemon handle of stream s for work on device d (validated before by init_with_stream). A stream of another
 * GPU: the target device's default stream keeps the order we need. */
static uint64_t stream_for(cudaStream_t s, struct pv_device *d)
{
    uint64_t remote = 0;
    struct pv_device *sd = NULL;
    if (pv_stream_resolve(s, d, &remote, &sd) != PV_SUCCESS || sd != d)
        return 0;
    return remote;
}

/* The library is initialized and s is a default stream or a live stream handle. */
static cudaError_t init_with_stream(cudaStream_t s)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    return pv_stream_ok(s) ? PV_SUCCESS : PV_cudaErrorInvalidResourceHandle;
}

/* cudaMemcpyDefault resolved by where dst and src live; any other kind as given. */
static int copy_kind(int kind, const void *dst, const void *src)
{
    if (kind != cudaMemcpyDefault)
        return kind;
    int dd = is_device_ptr(dst), sd = is_device_ptr(src);
    return dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
              : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

/* Managed and mapped memory in a copy: it counts as host memory (its host copy), brought up to date before it is
 * read (its device synchronized, which pulls the device's writes); writes into it fault like the program's own and
 * go to the device with the next push. 1 when p lies in such a region. */
static int region_side(const void *p, size_t n, int reading, cudaError_t *err)
{
    struct pv_region_info info;
    if (!p || pv_region_find(p, &info) != 0)
        return 0;
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (a < info.host || a + n > info.host + info.size) {
        *err = PV_cudaErrorInvalidValue;                 /* a device-side address of registered memory, or overrun */
        return 1;
    }
    if (reading) {
        struct pv_device *d = pv_device(info.device);
        cudaError_t e = d ? pv_call_DEVICE_SYNC(d) : PV_cudaErrorInvalidDevice;
        if (e != PV_SUCCESS && *err == PV_SUCCESS)
            *err = e;
    }
    return 1;
}

/* Device bytes into a host copy: through a buffer, since the socket cannot write a read-only (clean) page. */
static cudaError_t d2h_region(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream)
{
    return d2h_through(d, src, n, stream, put_host, dst);
}

static cudaError_t region_copy(void *dst, const void *src, size_t n, int dreg, int sreg, cudaStream_t s)
{
    struct pv_device *d;
    if (dreg && sreg) {
        memmove(dst, src, n);
        return PV_SUCCESS;
    }
    if (dreg)                                            /* into the host copy, from the device or the host */
        return pv_dev_range(src, n, &d) == 0 ? d2h_region(d, dst, (uint64_t)(uintptr_t)src, n, stream_for(s, d))
                                             : (memmove(dst, src, n), PV_SUCCESS);
    return pv_dev_range(dst, n, &d) == 0 ? h2d(d, (uint64_t)(uintptr_t)dst, src, n, stream_for(s, d))
                                         : (memmove(dst, src, n), PV_SUCCESS);
}

/* What every copy checks once its sizes are known to be non-zero: both pointers set, the library initialized, the
 * stream valid; then cudaMemcpyDefault is resolved into *kind. */
static cudaError_t copy_begin(const void *dst, const void *src, int *kind, cudaStream_t s)
{
    if (!dst || !src)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = init_with_stream(s);
    if (err != PV_SUCCESS)
        return err;
    *kind = copy_kind(*kind, dst, src);
    return PV_SUCCESS;
}

cudaError_t pv_memcpy(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int async)
{
    (void)async;
    if (kind < 0 || kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    if (n == 0)
        return PV_SUCCESS;
    cudaError_t err = copy_begin(dst, src, &kind, s);
    if (err != PV_SUCCESS)
        return err;
    int sreg = region_side(src, n, 1, &err), dreg = region_side(dst, n, 0, &err);
    if (err != PV_SUCCESS)
        return err;
    if (sreg || dreg)
        return region_copy(dst, src, n, dreg, sreg, s);
    struct pv_device *ddev = NULL, *sdev = NULL;
    switch (kind) {
    case cudaMemcpyHostToHost:
        memmove(dst, src, n);
        return PV_SUCCESS;
    case cudaMemcpyHostToDevice:
        if (pv_dev_range(dst, n, &ddev) != 0)
            return PV_cudaErrorInvalidValue;
        return h2d(ddev, (uint64_t)(uintptr_t)dst, src, n, stream_for(s, ddev));
    case cudaMemcpyDeviceToHost:
        if (pv_dev_range(src, n, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        return d2h(sdev, dst, (uint64_t)(uintptr_t)src, n, stream_for(s, sdev));
    default:
        if (pv_dev_range(dst, n, &ddev) != 0 || pv_dev_range(src, n, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        return d2d(ddev, (uint64_t)(uintptr_t)dst, sdev, (uint64_t)(uintptr_t)src, n, stream_for(s, sdev));
    }
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
    err = pv_call_MALLOC(d, size, &p);
    if (err == PV_SUCCESS && p == 0) {
        pv_log("GPU%d (%s:%d) answered MALLOC with a NULL pointer", d->index, d->conn->host, d->conn->port);
        err = PV_cudaErrorUnknown;
    }
    if (err != PV_SUCCESS)
        return pv_ret(err);
    pv_alloc_add(p, size, d->index);
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

PV_API cudaError_t cudaFree(void *ptr)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    if (!ptr)
        return PV_SUCCESS;
    if (pv_region_release(ptr, 0, &err))
        return pv_ret(err);                             /* managed memory */
    if (pv_pool_owns(ptr))
        return pv_ret(pv_pool_free_now(ptr));           /* a pool block: it leaves its pool */
    struct pv_alloc a;
    if (pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) != 0 || a.dev < 0 || a.ptr != (uint64_t)(uintptr_t)ptr)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_device *d = pv_device(a.dev);
    err = pv_call_FREE(d, a.ptr);
    /* Forget the allocation whatever the answer: a SYNC op reports an earlier deferred error after doing its own
     * work, a sticky error leaves the memory unusable until a reset, and a lost host took its memory with it. */
    int dev;
    pv_alloc_remove(a.ptr, &dev);
    return pv_ret(err);
}

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
    if (!ptr || flags > 7)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (flags & 2u)                                     /* cudaHostAllocMapped: a coherent device copy */
        return pv_ret(pv_mapped_alloc(ptr, size, flags));
    void *p = NULL;
    if (posix_memalign(&p, PV_HOST_ALIGN, size ? size : 1) != 0)
        return pv_ret(PV_cudaErrorMemoryAllocation);
    pv_alloc_add((uint64_t)(uintptr_t)p, size ? size : 1, -1 - (int)(flags & 0xff));
    *ptr = p;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaMallocHost(void **ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }

PV_API cudaError_t cudaFreeHost(void *ptr)
{
    if (!ptr)
        return PV_SUCCESS;
    cudaError_t rerr;
    if (pv_region_release(ptr, 1, &rerr))
        return pv_ret(rerr);                            /* mapped memory */
    struct pv_region_info info;
    if (pv_region_find(ptr, &info) == 0 && info.kind == PV_REGION_REGISTERED) {
        /* cudaMallocHost memory that cudaHostGetDevicePointer gave a device copy: drop the copy first */
        if (info.host == (uint64_t)(uintptr_t)ptr)
            (void)pv_region_free(info.host);
    }
    struct pv_alloc a;
    int dev;
    if (pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) != 0 || a.dev >= 0 || a.ptr != (uint64_t)(uintptr_t)ptr ||
        pv_alloc_remove(a.ptr, &dev) != 0)
        return pv_ret(PV_cudaErrorInvalidValue);
    free(ptr);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaHostGetFlags(unsigned *flags, void *ptr)
{
    struct pv_alloc a;
    if (flags && pv_mapped_flags(ptr, flags))
        return PV_SUCCESS;
    if (!flags || pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) != 0 || a.dev >= 0)
        return pv_ret(PV_cudaErrorInvalidValue);
    *flags = (unsigned)(-1 - a.dev);
    return PV_SUCCESS;
}


PV_API cudaError_t cudaPointerGetAttributes(void *attrs, const void *ptr)
{
    if (!attrs)
        return pv_ret(PV_cudaErrorInvalidValue);
    char *p = attrs;
    memset(p, 0, PV_cudaPointerAttributes_SIZE);
    struct pv_alloc a;
    struct pv_region_info info;
    int type = cudaMemoryTypeUnregistered, dev = -2;
    void *dptr = NULL, *hptr = NULL;
    if (pv_region_find(ptr, &info) == 0) {
        uint64_t off = (uint64_t)(uintptr_t)ptr - ((uint64_t)(uintptr_t)ptr >= info.host &&
                                                   (uint64_t)(uintptr_t)ptr < info.host + info.size ? info.host
                                                                                                    : info.dev);
        type = info.kind == PV_REGION_MANAGED || info.kind == PV_REGION_VAR ? PV_cudaMemoryTypeManaged
                                                                             : cudaMemoryTypeHost;
        dev = info.device;
        dptr = (void *)(uintptr_t)(info.dev + off);
        hptr = (void *)(uintptr_t)(info.host + off);
    } else if (pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) == 0) {
        if (a.dev >= 0) {
            type = cudaMemoryTypeDevice;
            dev = a.dev;
            dptr = (void *)ptr;
        } else {
            type = cudaMemoryTypeHost;
            dev = pv_tls_device();
            hptr = (void *)ptr;
        }
    } else {
        hptr = (void *)ptr;
    }
    memcpy(p + PV_cudaPointerAttributes_type, &type, sizeof type);
    memcpy(p + PV_cudaPointerAttributes_device, &dev, sizeof dev);
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
    if (pv_capturing(s)) {
        struct cudaMemcpy3DParms p;
        pv_copy1d_params(&p, dst, src, n, kind);
        return pv_ret(kind < 0 || kind > cudaMemcpyDefault ? PV_cudaErrorInvalidMemcpyDirection
                                                           : capture_copy(s, &p));
    }
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
    return d2d(dd, (uint64_t)(uintptr_t)dst, sd, (uint64_t)(uintptr_t)src, n, 0);
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
static int dev_range_2d(const void *p, size_t pitch, size_t width, size_t height, struct pv_device **d)
{
    return pv_dev_range(p, pitch * (height - 1) + width, d);
}

static cudaError_t memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                            int kind, cudaStream_t s)
{
    if (kind < 0 || kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    if (width == 0 || height == 0)
        return PV_SUCCESS;
    if (width > dpitch || width > spitch)
        return PV_cudaErrorInvalidPitchValue;
    cudaError_t err = copy_begin(dst, src, &kind, s);
    if (err != PV_SUCCESS)
        return err;
    if (pv_region_find(dst, NULL) == 0 || pv_region_find(src, NULL) == 0) {
        /* managed or mapped memory on either side: row by row through the 1D path (which handles it) */
        for (size_t r = 0; r < height && err == PV_SUCCESS; r++)
            err = pv_memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind, s, 1);
        return err;
    }
    struct pv_device *ddev = NULL, *sdev = NULL;
    uint64_t du = (uint64_t)(uintptr_t)dst, su = (uint64_t)(uintptr_t)src;
    switch (kind) {
    case cudaMemcpyHostToHost:
        for (size_t r = 0; r < height; r++)
            memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
        return PV_SUCCESS;
    case cudaMemcpyHostToDevice:
        if (dev_range_2d(dst, dpitch, width, height, &ddev) != 0)
            return PV_cudaErrorInvalidValue;
        return pv_h2d_2d(ddev, du, dpitch, src, spitch, width, height, stream_for(s, ddev));
    case cudaMemcpyDeviceToHost:
        if (dev_range_2d(src, spitch, width, height, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        return pv_d2h_2d(sdev, dst, dpitch, su, spitch, width, height, stream_for(s, sdev));
    default:
        if (dev_range_2d(dst, dpitch, width, height, &ddev) != 0 ||
            dev_range_2d(src, spitch, width, height, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        if (ddev == sdev) {
            return pv_send_MEMCPY2D_DTOD(sdev, du, dpitch, su, spitch, width, height, stream_for(s, sdev));
        } else {
            char *tmp = malloc(width * height);
            if (!tmp)
                return PV_cudaErrorMemoryAllocation;
            err = pv_d2h_2d(sdev, tmp, width, su, spitch, width, height, 0);
            if (err == PV_SUCCESS)
                err = pv_h2d_2d(ddev, du, dpitch, tmp, width, width, height, 0);
            free(tmp);
            return err;
        }
    }
}

PV_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                size_t height, int kind)
{
    return pv_ret(memcpy2d(dst, dpitch, src, spitch, width, height, kind, NULL));
}

PV_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, int kind, cudaStream_t s)
{
    if (pv_capturing(s)) {
        if (width > dpitch || width > spitch)
            return pv_ret(PV_cudaErrorInvalidPitchValue);
        struct cudaMemcpy3DParms p = { 0 };
        p.srcPtr = (struct cudaPitchedPtr){ (void *)src, spitch, width, height };
        p.dstPtr = (struct cudaPitchedPtr){ dst, dpitch, width, height };
        p.extent = (struct cudaExtent){ width, height, 1 };
        p.kind = kind;
        return pv_ret(capture_copy(s, &p));
    }
    return pv_ret(memcpy2d(dst, dpitch, src, spitch, width, height, kind, s));
}

/* ------------------------------------------------------------------------------------------ 3D copies */
/* Linear memory only here; copies that involve a CUDA array are api_array.c's. */
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
                         1);
    if ((e->depth > 1 || p->srcPos.z || p->dstPos.z) && (!sp->ysize || !dp->ysize))
        return PV_cudaErrorInvalidValue;
    for (size_t z = 0; z < e->depth; z++) {
        const char *src = (const char *)sp->ptr + ((p->srcPos.z + z) * sp->ysize + p->srcPos.y) * sp->pitch +
                          p->srcPos.x;
        char *dst = (char *)dp->ptr + ((p->dstPos.z + z) * dp->ysize + p->dstPos.y) * dp->pitch + p->dstPos.x;
        cudaError_t err = memcpy2d(dst, dp->pitch, src, sp->pitch, e->width, e->height, p->kind, s);
        if (err != PV_SUCCESS)
            return err;
    }
    return PV_SUCCESS;
}

static cudaError_t memcpy3d(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    if (!p)
        return PV_cudaErrorInvalidValue;
    if (p->kind < 0 || p->kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    if ((p->srcArray && p->srcPtr.ptr) || (p->dstArray && p->dstPtr.ptr) || (!p->srcArray && !p->srcPtr.ptr) ||
        (!p->dstArray && !p->dstPtr.ptr))
        return PV_cudaErrorInvalidValue;
    if (pv_capturing(s))
        return capture_copy(s, p);
    cudaError_t err = init_with_stream(s);
    return err != PV_SUCCESS ? err : pv_memcpy3d_run(p, s);
}

PV_API cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) { return pv_ret(memcpy3d(p, NULL)); }
PV_API cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t s)
{
    return pv_ret(memcpy3d(p, s));
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
/* Rows of `width` elements of elementSize bytes (1: MEMSET/MEMSET2D, 2 or 4: MEMSET_ELEM), pitch ignored for one row.
 * The runner of memset nodes and of every cudaMemset* call. */
cudaError_t pv_memset_run(const struct cudaMemsetParams *p, cudaStream_t s)
{
    size_t es = p->elementSize, w = p->width, h = p->height;
    if (es != 1 && es != 2 && es != 4)
        return PV_cudaErrorInvalidValue;
    if (w == 0 || h == 0)
        return PV_SUCCESS;
    size_t pitch = h == 1 ? w * es : p->pitch;
    if (w * es > pitch)
        return PV_cudaErrorInvalidPitchValue;
    struct pv_device *d;
    if (dev_range_2d(p->dst, pitch, w * es, h, &d) != 0)
        return PV_cudaErrorInvalidValue;
    uint64_t ptr = (uint64_t)(uintptr_t)p->dst;
    if (es == 1 && h == 1)
        return pv_send_MEMSET(d, ptr, (int)(p->value & 0xff), w, stream_for(s, d));
    if (es == 1)
        return pv_send_MEMSET2D(d, ptr, pitch, (int)(p->value & 0xff), w, h, stream_for(s, d));
    return pv_send_MEMSET_ELEM(d, ptr, pitch, p->value, (uint32_t)es, w, h, stream_for(s, d));
}

static cudaError_t memset_any(const struct cudaMemsetParams *p, cudaStream_t s)
{
    cudaError_t err = init_with_stream(s);
    if (err != PV_SUCCESS)
        return err;
    if (p->width == 0 || p->height == 0)
        return PV_SUCCESS;
    if (pv_capturing(s))
        return pv_capture_params(s, PV_cudaGraphNodeTypeMemset, p);
    return pv_memset_run(p, s);
}

static cudaError_t memset_1d(void *ptr, int value, size_t n, cudaStream_t s)
{
    struct cudaMemsetParams p = { ptr, n, (unsigned)value & 0xffu, 1, n, 1 };
    return memset_any(&p, s);
}

static cudaError_t memset_2d(void *ptr, size_t pitch, int value, size_t width, size_t height, cudaStream_t s)
{
    if (width && height && width > pitch)
        return PV_cudaErrorInvalidPitchValue;
    struct cudaMemsetParams p = { ptr, pitch, (unsigned)value & 0xffu, 1, width, height };
    return memset_any(&p, s);
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
                               cudaStream_t s)
{
    struct pv_device *d, *od;
    uint64_t addr;
    cudaError_t err = symbol_span(symbol, n, offset, other, &d, &addr);
    if (err != PV_SUCCESS || n == 0)
        return err;
    int host_kind = to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    if (kind == cudaMemcpyDefault)
        kind = is_device_ptr(other) ? cudaMemcpyDeviceToDevice : host_kind;
    if (kind == host_kind)
        return to_symbol ? h2d(d, addr, other, n, stream_for(s, d)) : d2h(d, other, addr, n, stream_for(s, d));
    if (kind != cudaMemcpyDeviceToDevice)
        return PV_cudaErrorInvalidMemcpyDirection;
    if (pv_dev_range(other, n, &od) != 0)
        return PV_cudaErrorInvalidValue;
    uint64_t o = (uint64_t)(uintptr_t)other;
    return to_symbol ? d2d(d, addr, od, o, n, stream_for(s, od)) : d2d(od, o, d, addr, n, stream_for(s, d));
}

static cudaError_t to_symbol(const void *symbol, const void *src, size_t n, size_t offset, int kind, cudaStream_t s)
{
    return symbol_copy(1, symbol, (void *)src, n, offset, kind, s);
}

static cudaError_t from_symbol(void *dst, const void *symbol, size_t n, size_t offset, int kind, cudaStream_t s)
{
    return symbol_copy(0, symbol, dst, n, offset, kind, s);
}

PV_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset, int kind)
{
    return pv_ret(to_symbol(symbol, src, n, offset, kind, NULL));
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
    return pv_ret(to_symbol(symbol, src, n, offset, kind, s));
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
