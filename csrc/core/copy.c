/* Copies and memsets on the devices that own the memory, shared by every API library (libvcudart's cudaMemcpy*,
 * libvcuda's cuMemcpy*, libvcublas's cublasSet/GetMatrix/Vector): a copy goes to the host that owns the device
 * pointer; copies between GPUs are staged through this process. Host-to-device data and memsets are
 * fire-and-forget; device-to-host copies wait for the reply, whose payload is read straight into the caller's
 * buffer, except an asynchronous one into pinned memory: as on a GPU it returns at once, and its bytes land in the
 * buffer when the daemon has run the copy (a detached request, pv_req_detach), before the reply of any later call
 * to that daemon, so the synchronization that covers the copy finds them there. Large 1D copies travel in PV_CHUNK
 * frames, a synchronous device-to-host one in PV_D2H_FRAME frames, two requested ahead (pv_copy_d2h); 2D copies carry
 * their rows packed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_transport.h"
#include "pv_compress.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_record.h"
#include "pv_registry.h"
#include "pv_hostmem.h"
#include "pv_copy.h"
#include "pv_features.h"
#include "pv_graph.h"

#define PV_CHUNK ((size_t)16 << 20)   /* bytes per frame of a large copy; < 32 MiB: daemon buffers stay in malloc heap */
/* A synchronous device-to-host copy: frames of up to PV_D2H_FRAME (the daemon's reply bound, bounds.py; it sends
 * them straight from device memory), PV_D2H_DEPTH of them in flight (pv_copy_d2h). */
#define PV_D2H_FRAME ((size_t)64 << 20)
#define PV_D2H_DEPTH 2

/* ------------------------------------------------------------------------------------------ primitives */
/* Host-to-device bytes compressed by codec, one frame per PV_COMPRESS_BLOCK raw bytes (a frame is compressed, then
 * written: the socket buffer overlaps little of the two, which the choice in compress.c accounts for). A block that
 * does not shrink travels stored. */
static cudaError_t h2d_compressed(struct pv_device *d, int codec, uint64_t dst, const char *src, size_t n,
                                  uint64_t stream)
{
    size_t cap = pv_compress_bound(PV_COMPRESS_BLOCK);
    char *buf = malloc(cap);
    if (!buf)
        return PV_cudaErrorMemoryAllocation;
    cudaError_t err = PV_SUCCESS;
    for (size_t off = 0; off < n && err == PV_SUCCESS; off += PV_COMPRESS_BLOCK) {
        size_t k = n - off < PV_COMPRESS_BLOCK ? n - off : PV_COMPRESS_BLOCK;
        size_t z = pv_compress_encode(codec, src + off, k, buf, cap);
        err = z ? pv_sendz_MEMCPY_HTOD(d, dst + off, stream, buf, z, k, codec) : PV_cudaErrorUnknown;
    }
    free(buf);
    return err;
}

cudaError_t pv_copy_h2d(struct pv_device *d, uint64_t dst, const void *src, size_t n, uint64_t stream)
{
    int codec = pv_recording() ? 0 : pv_compress_choose(d->conn->codecs, atomic_load(&d->conn->peer_rx_rate), src,
                                                           n);
    if (codec)
        return h2d_compressed(d, codec, dst, src, n, stream);
    for (size_t off = 0; off < n; off += PV_CHUNK) {
        size_t k = n - off < PV_CHUNK ? n - off : PV_CHUNK;
        cudaError_t err = pv_send_MEMCPY_HTOD(d, dst + off, stream, (const char *)src + off, k);
        if (err != PV_SUCCESS)
            return err;
    }
    return PV_SUCCESS;
}

/* After the last frame of a synchronous host-to-device copy (cudaMemcpy, cuMemcpyHtoD, cudaMemcpyToSymbol, ...):
 * CUDA says such a copy has landed when it returns, so work on any stream after it reads the new bytes. A real GPU's
 * daemon copies from its own pageable buffer, which returns once staged, and waits for the copy's stream on this
 * fire-and-forget op (HTOD_LANDED): no round trip here. Not while recording a graph (its copies are nodes). 2D and
 * 3D copies need none: the daemon finishes them before it runs the next op (their rows are unpacked into a buffer
 * that goes away). */
cudaError_t pv_copy_landed(struct pv_device *d, uint64_t stream)
{
    return pv_recording() ? PV_SUCCESS : pv_send_HTOD_LANDED(d, stream);
}

cudaError_t pv_copy_h2d_landed(struct pv_device *d, uint64_t dst, const void *src, size_t n, uint64_t stream,
                               int landed)
{
    cudaError_t err = pv_copy_h2d(d, dst, src, n, stream);
    return err == PV_SUCCESS && landed ? pv_copy_landed(d, stream) : err;
}

/* One frame's reply: all k bytes, or the error of the call (a short payload is the daemon's bug). */
static cudaError_t d2h_got(struct pv_device *d, cudaError_t err, size_t got, size_t k)
{
    if (err != PV_SUCCESS || got == k)
        return err;
    pv_log("GPU%d (%s:%d) returned %zu of %zu bytes of a device-to-host copy", d->index, d->conn->host, d->conn->port,
           got, k);
    return PV_cudaErrorUnknown;
}

/* A synchronous device-to-host copy larger than a frame keeps PV_D2H_DEPTH frame requests in flight: the next
 * request is at the daemon while this thread still reads the current reply, so the connection does not drain
 * between frames as it does with one blocking round trip per frame (bench/README.md, P3). Replies land in dst as
 * they come.
 * After a failing frame no further frame is sent; those in flight are still collected (their replies are read and
 * matched, the connection stays in step) and the first failure is the copy's error. */
cudaError_t pv_copy_d2h(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream)
{
    if (n <= PV_D2H_FRAME) {
        size_t got = 0;
        uint64_t before = atomic_load(&d->sent);
        cudaError_t err = pv_call_MEMCPY_DTOH(d, src, n, stream, dst, n, &got);
        err = d2h_got(d, err, got, n);
        /* Answered with no other request begun meanwhile: `stream` has no work left (its work runs in order), so a
         * synchronization of it right after (what CuPy and PyTorch do after every read) needs no round trip. */
        if (err == PV_SUCCESS && atomic_load(&d->sent) == before + 1) {
            atomic_store(&d->quiet_stream, stream);
            atomic_store(&d->quiet_at, before + 1);
        }
        return err;
    }
    struct pv_inflight *fly[PV_D2H_DEPTH];
    size_t len[PV_D2H_DEPTH];
    size_t off = 0;
    int head = 0, count = 0;           /* ring of the requests in flight, oldest at head */
    cudaError_t first = PV_SUCCESS;
    for (;;) {
        while (first == PV_SUCCESS && off < n && count < PV_D2H_DEPTH) {
            size_t k = n - off < PV_D2H_FRAME ? n - off : PV_D2H_FRAME;
            int slot = (head + count) % PV_D2H_DEPTH;
            first = pv_start_MEMCPY_DTOH(d, src + off, k, stream, (char *)dst + off, k, &fly[slot]);
            if (first != PV_SUCCESS)
                break;
            len[slot] = k;
            count++;
            off += k;
        }
        if (count == 0)
            return first;
        size_t got = 0;
        cudaError_t err = pv_collect_MEMCPY_DTOH(d, fly[head], &got);
        err = d2h_got(d, err, got, len[head]);
        if (first == PV_SUCCESS)
            first = err;
        head = (head + 1) % PV_D2H_DEPTH;
        count--;
    }
}

/* cudaMemcpyAsync device-to-host into pinned memory: does not wait (see the top of this file). */
cudaError_t pv_copy_d2h_async(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream)
{
    for (size_t off = 0; off < n; off += PV_CHUNK) {
        size_t k = n - off < PV_CHUNK ? n - off : PV_CHUNK;
        cudaError_t err = pv_detach_MEMCPY_DTOH_ASYNC(d, src + off, k, stream, (char *)dst + off, k);
        if (err != PV_SUCCESS)
            return err;
    }
    return PV_SUCCESS;
}

/* [p, p+n) lies inside one allocation of pinned host memory (pv_host_alloc) or one registration (cudaHostRegister). */
static int pinned_range(const void *p, size_t n)
{
    struct pv_alloc a;
    uint64_t u = (uint64_t)(uintptr_t)p;
    return (pv_alloc_find(u, &a) == 0 && a.dev < 0 && n <= a.size && u - a.ptr <= a.size - n) ||
           pv_host_registered(p, n, NULL);
}

static cudaError_t d2d_same(struct pv_device *d, uint64_t dst, uint64_t src, size_t n, uint64_t stream)
{
    return pv_send_MEMCPY_DTOD(d, dst, src, n, stream);
}

cudaError_t pv_copy_d2d(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n,
                       uint64_t stream)
{
    if (dd == sd)
        return d2d_same(dd, dst, src, n, stream);
    return pv_copy_d2d_gpus(dd, dst, sd, src, n);
}

/* Device owning [p, p+n): 0 and *d set when the range lies inside one known device allocation. */
int pv_dev_range(const void *p, size_t n, struct pv_device **d)
{
    struct pv_alloc a;
    uint64_t u = (uint64_t)(uintptr_t)p;
    if (pv_alloc_find_device(u, &a) != 0)
        return -1;
    if (n > a.size || u - a.ptr > a.size - n)
        return -1;
    *d = pv_device(a.dev);
    return *d ? 0 : -1;
}

int pv_is_device_ptr(const void *p)
{
    struct pv_alloc a;
    return pv_alloc_find((uint64_t)(uintptr_t)p, &a) == 0 && a.dev >= 0;
}

/* The daemon handle of stream s for work on device d (validated before by init_with_stream). A stream of another
 * GPU: the target device's default stream keeps the order we need. */
uint64_t pv_stream_for(cudaStream_t s, struct pv_device *d)
{
    uint64_t remote = 0;
    struct pv_device *sd = NULL;
    if (pv_stream_resolve(s, d, &remote, &sd) != PV_SUCCESS || sd != d)
        return 0;
    return remote;
}

/* The library is initialized and s is a default stream or a live stream handle. */
cudaError_t pv_init_with_stream(cudaStream_t s)
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
    int dd = pv_is_device_ptr(dst), sd = pv_is_device_ptr(src);
    return dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
              : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

/* What every copy checks once its sizes are known to be non-zero: both pointers set, the library initialized, the
 * stream valid; then cudaMemcpyDefault is resolved into *kind. */
static cudaError_t copy_begin(const void *dst, const void *src, int *kind, cudaStream_t s)
{
    if (!dst || !src)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_init_with_stream(s);
    if (err != PV_SUCCESS)
        return err;
    *kind = copy_kind(*kind, dst, src);
    return PV_SUCCESS;
}

cudaError_t pv_memcpy(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int async)
{
    if (kind < 0 || kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    if (n == 0)
        return PV_SUCCESS;
    cudaError_t err = copy_begin(dst, src, &kind, s);
    if (err != PV_SUCCESS)
        return err;
    if (pv_copy_regions(dst, src, n, s, async, &err))
        return err;
    struct pv_device *ddev = NULL, *sdev = NULL;
    switch (kind) {
    case cudaMemcpyHostToHost:
        memmove(dst, src, n);
        return PV_SUCCESS;
    case cudaMemcpyHostToDevice:
        if (pv_dev_range(dst, n, &ddev) != 0)
            return PV_cudaErrorInvalidValue;
        return pv_copy_h2d_landed(ddev, (uint64_t)(uintptr_t)dst, src, n, pv_stream_for(s, ddev), !async);
    case cudaMemcpyDeviceToHost:
        if (pv_dev_range(src, n, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        if (async && pinned_range(dst, n))
            return pv_copy_d2h_async(sdev, dst, (uint64_t)(uintptr_t)src, n, pv_stream_for(s, sdev));
        return pv_copy_d2h(sdev, dst, (uint64_t)(uintptr_t)src, n, pv_stream_for(s, sdev));
    default:
        if (pv_dev_range(dst, n, &ddev) != 0 || pv_dev_range(src, n, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        return pv_copy_d2d(ddev, (uint64_t)(uintptr_t)dst, sdev, (uint64_t)(uintptr_t)src, n, pv_stream_for(s, sdev));
    }
}


/* ------------------------------------------------------------------------------------------ 2D copies */
static int dev_range_2d(const void *p, size_t pitch, size_t width, size_t height, struct pv_device **d)
{
    return pv_dev_range(p, pitch * (height - 1) + width, d);
}

cudaError_t pv_h2d_2d(struct pv_device *d, uint64_t dst, size_t dpitch, const char *src, size_t spitch,
                          size_t width, size_t height, uint64_t stream)
{
    size_t total = width * height;
    char *packed = NULL;
    const char *payload = src;
    if (spitch != width) {
        packed = malloc(total);
        if (!packed)
            return PV_cudaErrorMemoryAllocation;
        for (size_t r = 0; r < height; r++)
            memcpy(packed + r * width, src + r * spitch, width);
        payload = packed;
    }
    cudaError_t err = pv_send_MEMCPY2D_HTOD(d, dst, dpitch, width, height, stream, payload, total);
    free(packed);
    return err;
}

cudaError_t pv_d2h_2d(struct pv_device *d, char *dst, size_t dpitch, uint64_t src, size_t spitch, size_t width,
                          size_t height, uint64_t stream)
{
    size_t total = width * height;
    char *packed = dpitch == width ? dst : malloc(total);
    if (!packed)
        return PV_cudaErrorMemoryAllocation;
    size_t got = 0;
    cudaError_t err = pv_call_MEMCPY2D_DTOH(d, src, spitch, width, height, stream, packed, total, &got);
    if (err == PV_SUCCESS && got != total)
        err = PV_cudaErrorUnknown;
    if (err == PV_SUCCESS && packed != dst)
        for (size_t r = 0; r < height; r++)
            memcpy(dst + r * dpitch, packed + r * width, width);
    if (packed != dst)
        free(packed);
    return err;
}

cudaError_t pv_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
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
    if (pv_copy2d_regions(dst, dpitch, src, spitch, width, height, kind, s, &err))
        return err;
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
        return pv_h2d_2d(ddev, du, dpitch, src, spitch, width, height, pv_stream_for(s, ddev));
    case cudaMemcpyDeviceToHost:
        if (dev_range_2d(src, spitch, width, height, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        return pv_d2h_2d(sdev, dst, dpitch, su, spitch, width, height, pv_stream_for(s, sdev));
    default:
        if (dev_range_2d(dst, dpitch, width, height, &ddev) != 0 ||
            dev_range_2d(src, spitch, width, height, &sdev) != 0)
            return PV_cudaErrorInvalidValue;
        if (ddev == sdev) {
            return pv_send_MEMCPY2D_DTOD(sdev, du, dpitch, su, spitch, width, height, pv_stream_for(s, sdev));
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

/* ------------------------------------------------------------------------------------------ memset */
/* [p, p+n) inside one page-locked host allocation of this process (cudaHostAlloc, cuMemHostAlloc): under unified
 * addressing its pointer is the device's too, and a GPU's memsets write it. Not a registration (cudaHostRegister):
 * its device pointer is another (cudaDevAttrCanUseHostPointerForRegisteredMem is 0 here). */
static int host_allocated(const void *p, size_t n)
{
    struct pv_alloc a;
    uint64_t u = (uint64_t)(uintptr_t)p;
    return pv_alloc_find(u, &a) == 0 && a.dev < 0 && n <= a.size && u - a.ptr <= a.size - n;
}

/* A memset of page-locked host memory, in order on its stream: the stream's earlier work done (and its device writes
 * back here), then the rows set in this process's memory; a device copy of the memory (made when a kernel was given
 * it) takes the bytes before the next device work, as any host write (coherence.c). XLA's autotuner zeroes an 8-byte
 * result this way (GPU run 3, an H100: JAX's jnp.dot failed with CUDA_ERROR_INVALID_VALUE). */
static cudaError_t host_memset(char *p, size_t pitch, uint32_t value, int elem, size_t width, size_t height,
                               cudaStream_t s)
{
    cudaError_t err = pv_sync_stream(s);
    if (err != PV_SUCCESS)
        return err;
    for (size_t r = 0; r < height; r++) {
        char *row = p + r * pitch;
        if (elem == 1)
            memset(row, (int)(value & 0xff), width);
        else
            for (size_t i = 0; i < width; i++)
                memcpy(row + i * (size_t)elem, &value, (size_t)elem);     /* the value's low bytes, little-endian */
    }
    return PV_SUCCESS;
}

/* What the allocation table holds at p, for the refusal's log line: the entry containing it (host or device), else
 * the nearest device allocation below it. */
static void describe_at(const void *p, char *out, size_t n)
{
    struct pv_alloc a;
    uint64_t u = (uint64_t)(uintptr_t)p;
    if (pv_alloc_find(u, &a) == 0)
        snprintf(out, n, "it lies in %s [%#llx, +%zu)", a.dev < 0 ? "host memory" : "device memory",
                 (unsigned long long)a.ptr, a.size);
    else if (pv_alloc_find_device(u, &a) == 0)
        snprintf(out, n, "device memory [%#llx, +%zu) holds its start", (unsigned long long)a.ptr, a.size);
    else
        snprintf(out, n, "no allocation of this process holds it");
}

cudaError_t pv_memset(void *ptr, size_t pitch, uint32_t value, int elem, size_t width, size_t height, cudaStream_t s)
{
    cudaError_t err = pv_init_with_stream(s);
    if (err != PV_SUCCESS)
        return err;
    if (width == 0 || height == 0)
        return PV_SUCCESS;
    size_t row = width * (size_t)elem;
    if (row > pitch)
        return PV_cudaErrorInvalidPitchValue;
    struct pv_device *d;
    if (dev_range_2d(ptr, pitch, row, height, &d) != 0) {
        if (host_allocated(ptr, pitch * (height - 1) + row))
            return host_memset(ptr, pitch, value, elem, width, height, s);
        static atomic_int once;            /* what the caller asked, for the next look at a real GPU's run */
        char where[160];
        describe_at(ptr, where, sizeof where);
        pv_log_once(&once, "memset of %zu x %zu bytes (pitch %zu, %d-byte elements) at %p: not inside one device "
                    "allocation or page-locked host allocation of this process: %s (cudaErrorInvalidValue)", height,
                    row, pitch, elem, ptr, where);
        return PV_cudaErrorInvalidValue;
    }
    uint64_t p = (uint64_t)(uintptr_t)ptr, stream = pv_stream_for(s, d);
    if (elem == 1 && height == 1)
        return pv_send_MEMSET(d, p, (int32_t)(value & 0xff), row, stream);
    if (elem == 1)
        return pv_send_MEMSET2D(d, p, pitch, (int32_t)(value & 0xff), width, height, stream);
    return pv_send_MEMSET_ELEMS(d, p, pitch, value, (uint32_t)elem, width, height, stream);
}

/* cudaMemsetParams' form (memset nodes, every cudaMemset* call); pitch unused for one row. */
cudaError_t pv_memset_run(const struct cudaMemsetParams *p, cudaStream_t s)
{
    size_t es = p->elementSize;
    if (es != 1 && es != 2 && es != 4)
        return PV_cudaErrorInvalidValue;
    uint32_t value = es == 4 ? p->value : p->value & ((1u << (8 * es)) - 1);
    return pv_memset(p->dst, p->height == 1 ? p->width * es : p->pitch, value, (int)es, p->width, p->height, s);
}
