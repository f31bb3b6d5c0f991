/* The helpers every generated cuBLAS entry point (calls_gen.c) is built from: the handle's state at the time of
 * the call, a scalar's wire bytes by pointer mode, and how a call ends (refused, sent, or waited for). */
#include "vcublas.h"

#include <stdlib.h>

struct pvb_handle *pvb_handle_of(const void *h)
{
    struct pvb_handle *p = (struct pvb_handle *)h;
    return h && pv_handle_valid(h) && p->magic == PVB_HANDLE_MAGIC ? p : NULL;
}

pvb_status pvb_begin(struct pvb_handle *h, struct pvb_call *c)
{
    h = pvb_handle_of(h);
    if (!h)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    struct pv_device *sdev = NULL;
    if (pv_stream_resolve(h->stream, h->dev, &c->stream, &sdev) != PV_SUCCESS || sdev != h->dev)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    c->dev = h->dev;
    c->remote = h->remote;
    c->pmode = h->pmode;
    c->math = h->math;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

size_t pvb_scalar(const struct pvb_call *c, const void *p, int64_t dtype, unsigned char out[PVB_SCALAR_MAX])
{
    if (c->pmode == PVB_POINTER_MODE_DEVICE) {
        uint64_t addr = (uint64_t)(uintptr_t)p;
        for (int i = 0; i < 8; i++)          /* little endian on the wire whatever the host is */
            out[i] = (unsigned char)(addr >> (8 * i));
        return 8;
    }
    size_t n = (size_t)pvb_dtype_size(dtype);   /* the checks made sure dtype is a supported type */
    if (n > PVB_SCALAR_MAX)
        n = PVB_SCALAR_MAX;
    memcpy(out, p, n);
    return n;
}

pvb_status pvb_refused(const struct pvb_call *c, const char *fn, pvb_status st, const char *why)
{
    /* cuBLAS reports an argument it refuses by the status alone; PYVGPU_CUBLAS_TRACE=1 also says which one. */
    static int trace = -1;
    if (trace < 0)
        trace = getenv("PYVGPU_CUBLAS_TRACE") != NULL;
    if (trace)
        pv_log("%s on GPU%d refused: %s (status %d)", fn, c->dev->index, why, st);
    return st;
}

pvb_status pvb_sent(const struct pvb_call *c, const char *fn, cudaError_t err)
{
    if (err != PV_SUCCESS)
        pv_log("%s on GPU%d: %s", fn, c->dev->index, pv_err_name(err));
    return (pvb_status)pvb_status_of_cuda(err);
}

pvb_status pvb_waited(const struct pvb_call *c, const char *fn, cudaError_t err, size_t got, size_t want)
{
    if (err == PV_SUCCESS && got != want) {
        pv_log("%s on GPU%d: a %zu-byte result, expected %zu", fn, c->dev->index, got, want);
        return PVB_CUBLAS_STATUS_INTERNAL_ERROR;
    }
    return pvb_sent(c, fn, err);
}
