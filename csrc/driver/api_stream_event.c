/* Streams and events on the core's streams.c: new ones belong to the current context's device (the context made
 * that device the thread's current one). Host functions and callbacks run on the calling thread once the stream's
 * earlier work has completed, so later work of the stream is ordered after them. */
#include "driver.h"

/* Checks shared by every entry point: initialized, and a current context when one is needed. */
static CUresult need_ctx(void)
{
    struct pv_device *d;
    return drv_cur_device(&d);
}

PV_API CUresult cuStreamCreateWithPriority(CUstream *out, unsigned flags, int priority)
{
    CUresult r = out ? need_ctx() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_stream_create(flags, priority, out)) : r;
}

PV_API CUresult cuStreamCreate(CUstream *out, unsigned flags) { return cuStreamCreateWithPriority(out, flags, 0); }

PV_API CUresult cuStreamDestroy_v2(CUstream s)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_stream_destroy(s)) : r;
}

/* Streams named by NULL / the legacy / the per-thread sentinels need a current context; handles do not. */
static CUresult stream_ready(CUstream s)
{
    return (uintptr_t)s <= 2 ? need_ctx() : drv_ready();
}

PV_API CUresult cuStreamSynchronize(CUstream s)
{
    CUresult r = stream_ready(s);
    return r == CUDA_SUCCESS ? drv_result(pv_stream_sync(s)) : r;
}

PV_API CUresult cuStreamQuery(CUstream s)
{
    CUresult r = stream_ready(s);
    return r == CUDA_SUCCESS ? drv_result(pv_stream_query(s)) : r;
}

PV_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    CUresult r = stream_ready(s);
    return r == CUDA_SUCCESS ? drv_result(pv_stream_wait_event(s, e, flags)) : r;
}

PV_API CUresult cuStreamGetFlags(CUstream s, unsigned *flags)
{
    int priority;
    CUresult r = flags ? stream_ready(s) : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_stream_props(s, flags, &priority)) : r;
}

PV_API CUresult cuStreamGetPriority(CUstream s, int *priority)
{
    unsigned flags;
    CUresult r = priority ? stream_ready(s) : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_stream_props(s, &flags, priority)) : r;
}

PV_API CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
    CUresult r = id ? stream_ready(s) : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_stream_id(s, id)) : r;
}

PV_API CUresult cuStreamGetDevice(CUstream s, CUdevice *dev)
{
    struct pv_device *d;
    uint64_t remote;
    CUresult r = dev ? stream_ready(s) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = drv_result(pv_stream_target(s, &d, &remote))) == CUDA_SUCCESS)
        *dev = d->index;
    return r;
}

PV_API CUresult cuStreamGetCtx(CUstream s, CUcontext *ctx)
{
    CUdevice dev;
    CUresult r = ctx ? cuStreamGetDevice(s, &dev) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *ctx = (uintptr_t)s <= 2 ? drv_ctx_top() : drv_primary(dev);
    return r;
}

PV_API CUresult cuLaunchHostFunc(CUstream s, void (*fn)(void *), void *user)
{
    CUresult r = fn ? cuStreamSynchronize(s) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        fn(user);
    return r;
}

PV_API CUresult cuStreamAddCallback(CUstream s, void (*cb)(CUstream, CUresult, void *), void *user, unsigned flags)
{
    CUresult r = cb && flags == 0 ? stream_ready(s) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    cudaError_t status = pv_stream_sync(s);
    if (status == PV_ERR_UNAVAILABLE || status == PV_cudaErrorInvalidResourceHandle)
        return drv_result(status);
    cb(s, drv_result(status), user);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ events */
PV_API CUresult cuEventCreate(CUevent *out, unsigned flags)
{
    CUresult r = out ? need_ctx() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_event_create(flags, out)) : r;
}

PV_API CUresult cuEventDestroy_v2(CUevent e)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_event_destroy(e)) : r;
}

PV_API CUresult cuEventRecord(CUevent e, CUstream s)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_event_record(e, s)) : r;
}

PV_API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags)
{
    (void)flags;
    return cuEventRecord(e, s);
}

PV_API CUresult cuEventSynchronize(CUevent e)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_event_sync(e)) : r;
}

PV_API CUresult cuEventQuery(CUevent e)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_event_query(e)) : r;
}

PV_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
    CUresult r = ms ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_event_elapsed(ms, a, b)) : r;
}

PV_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return cuEventElapsedTime_v2(ms, a, b); }

/* The _ptsz/_ptds twins: one ordered queue per device makes the per-thread default stream the legacy one. */
PV_API CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }
PV_API CUresult cuStreamQuery_ptsz(CUstream s) { return cuStreamQuery(s); }
PV_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned f) { return cuStreamWaitEvent(s, e, f); }
PV_API CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned *f) { return cuStreamGetFlags(s, f); }
PV_API CUresult cuStreamGetPriority_ptsz(CUstream s, int *p) { return cuStreamGetPriority(s, p); }
PV_API CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id) { return cuStreamGetId(s, id); }
PV_API CUresult cuStreamGetDevice_ptsz(CUstream s, CUdevice *d) { return cuStreamGetDevice(s, d); }
PV_API CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext *c) { return cuStreamGetCtx(s, c); }
PV_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }
PV_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned f) { return cuEventRecordWithFlags(e, s, f); }
PV_API CUresult cuLaunchHostFunc_ptsz(CUstream s, void (*fn)(void *), void *u) { return cuLaunchHostFunc(s, fn, u); }
PV_API CUresult cuStreamAddCallback_ptsz(CUstream s, void (*cb)(CUstream, CUresult, void *), void *u, unsigned f)
{
    return cuStreamAddCallback(s, cb, u, f);
}

/* ------------------------------------------------------------------------------------------ capture */
/* Stream capture (CUDA graphs) is not supported, so no stream is ever capturing. */
PV_API CUresult cuStreamIsCapturing(CUstream s, int *status)
{
    unsigned flags;
    int priority;
    CUresult r = status ? stream_ready(s) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = drv_result(pv_stream_props(s, &flags, &priority))) == CUDA_SUCCESS)
        *status = 0;   /* CU_STREAM_CAPTURE_STATUS_NONE */
    return r;
}

PV_API CUresult cuStreamIsCapturing_ptsz(CUstream s, int *status) { return cuStreamIsCapturing(s, status); }

PV_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, int *status, unsigned long long *id, void **graph,
                                          const void **deps, const void **edges, size_t *ndeps)
{
    CUresult r = cuStreamIsCapturing(s, status);
    if (r != CUDA_SUCCESS)
        return r;
    if (id)
        *id = 0;
    if (graph)
        *graph = NULL;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}

PV_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, int *status, unsigned long long *id, void **graph,
                                               const void **deps, const void **edges, size_t *ndeps)
{
    return cuStreamGetCaptureInfo_v3(s, status, id, graph, deps, edges, ndeps);
}

/* The capture mode is a per-thread setting; with capture unsupported it only needs to round-trip. */
static _Thread_local int capture_mode;
PV_API CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
    CUresult r = mode && *mode >= 0 && *mode <= 2 ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        int old = capture_mode;
        capture_mode = *mode;
        *mode = old;
    }
    return r;
}
