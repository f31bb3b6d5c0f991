/* The copies the runtime features add to the core's copy.c: between GPUs of one daemon (it copies, MEMCPY_PEER),
 * between GPUs of different daemons (daemon to daemon: PEER_EXPORT/PEER_PULL, through this process only when the
 * daemons cannot reach each other), and copies that touch the host copies of managed and mapped memory
 * (coherence.c), which count as host memory. */
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_coherence.h"
#include "pv_copy.h"

#define PV_CHUNK ((size_t)16 << 20)   /* as copy.c */

/* n device bytes of d at src through a buffer here, chunk by chunk, handed to put(ctx, offset, bytes, k). */
static cudaError_t d2h_through(struct pv_device *d, uint64_t src, size_t n, uint64_t stream,
                               cudaError_t (*put)(void *ctx, size_t off, const char *buf, size_t k), void *ctx)
{
    size_t cap = n < PV_CHUNK ? n : PV_CHUNK;
    char *buf = malloc(cap ? cap : 1);
    if (!buf)
        return PV_cudaErrorMemoryAllocation;
    cudaError_t err = PV_SUCCESS;
    for (size_t off = 0; off < n && err == PV_SUCCESS; off += cap) {
        size_t k = n - off < cap ? n - off : cap;
        err = pv_copy_d2h(d, buf, src + off, k, stream);
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
    return pv_copy_h2d(t->d, t->dst + off, buf, k, 0);
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

cudaError_t pv_copy_d2d_gpus(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n)
{
    if (dd->conn != sd->conn)
        return d2d_daemons(dd, dst, sd, src, n);
    /* two GPUs of one daemon: it copies between them once the source's earlier work is done */
    cudaError_t err = pv_call_DEVICE_SYNC(sd);
    return err != PV_SUCCESS ? err : pv_call_MEMCPY_PEER(dd, dst, (uint32_t)sd->remote, src, n, 0);
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

int pv_copy_regions(void *dst, const void *src, size_t n, cudaStream_t s, int async, cudaError_t *err)
{
    *err = PV_SUCCESS;
    int sreg = region_side(src, n, 1, err), dreg = region_side(dst, n, 0, err);
    if (!sreg && !dreg)
        return 0;
    if (*err != PV_SUCCESS)
        return 1;
    struct pv_device *d;
    if (dreg && !sreg && pv_dev_range(src, n, &d) == 0)
        /* device bytes into a host copy: through a buffer, since the socket cannot write a read-only (clean) page */
        *err = d2h_through(d, (uint64_t)(uintptr_t)src, n, pv_stream_for(s, d), put_host, dst);
    else if (sreg && !dreg && pv_dev_range(dst, n, &d) == 0)
        *err = pv_copy_h2d_landed(d, (uint64_t)(uintptr_t)dst, src, n, pv_stream_for(s, d), !async);
    else
        memmove(dst, src, n);
    return 1;
}

int pv_copy2d_regions(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                      int kind, cudaStream_t s, cudaError_t *err)
{
    if (pv_region_find(dst, NULL) != 0 && pv_region_find(src, NULL) != 0)
        return 0;
    /* managed or mapped memory on either side: row by row through the 1D path (which handles it) */
    *err = PV_SUCCESS;
    for (size_t r = 0; r < height && *err == PV_SUCCESS; r++)
        *err = pv_memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind, s, s != NULL);
    return 1;
}
