/* Streams and events on the core's streams.c: new ones belong to the current context's device (the context made
 * that device the thread's current one). Host functions and callbacks run on the calling thread once the stream's
 * earlier work has completed, so later work of the stream is ordered after them. Stream capture is the core's
 * (capture.c): on a capturing stream, work becomes graph nodes and events carry fork/join dependencies. */
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
    if (r == CUDA_SUCCESS && (uintptr_t)s > 2 && pv_stream_ok(s))
        pv_capture_stream_forget(s);
    return r == CUDA_SUCCESS ? drv_result(pv_stream_destroy(s)) : r;
}

/* Streams named by NULL / the legacy / the per-thread sentinels need a current context; handles do not. */
static CUresult stream_ready(CUstream s)
{
    return (uintptr_t)s <= 2 ? need_ctx() : drv_ready();
}

/* A synchronization of a capturing stream invalidates its capture; kept pool blocks above their thresholds go. */
PV_API CUresult cuStreamSynchronize(CUstream s)
{
    CUresult r = stream_ready(s);
    return r == CUDA_SUCCESS ? drv_result(pv_sync_stream(s)) : r;
}

PV_API CUresult cuStreamQuery(CUstream s)
{
    CUresult r = stream_ready(s);
    if (r != CUDA_SUCCESS)
        return r;
    cudaError_t err = pv_capture_forbid(s);
    return drv_result(err == PV_SUCCESS ? pv_stream_query(s) : err);
}

PV_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    CUresult r = stream_ready(s);
    if (r != CUDA_SUCCESS)
        return r;
    cudaError_t err;
    if (!pv_event_ok(e) || !pv_stream_ok(s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (pv_capture_wait_event(s, e, flags, &err))
        return drv_result(err);
    return drv_result(pv_stream_wait_run(s, e, flags));
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

/* The context that made the stream (its owner), or the current one for the default streams. */
PV_API CUresult cuStreamGetCtx(CUstream s, CUcontext *ctx)
{
    CUdevice dev;
    CUresult r = ctx ? cuStreamGetDevice(s, &dev) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *ctx = (uintptr_t)s <= 2 ? drv_ctx_top() : s->owner ? (CUcontext)s->owner : drv_primary(dev);
    return r;
}

/* No green contexts here: a stream's green context is always NULL. */
PV_API CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *ctx, void **green)
{
    CUresult r = cuStreamGetCtx(s, ctx);
    if (r == CUDA_SUCCESS && green)
        *green = NULL;
    return r;
}

PV_API CUresult cuLaunchHostFunc(CUstream s, void (*fn)(void *), void *user)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (pv_capturing(s))
        return drv_result(pv_capture_host(s, fn, user));
    CUresult r = cuStreamSynchronize(s);
    if (r == CUDA_SUCCESS)
        fn(user);
    return r;
}

PV_API CUresult cuStreamAddCallback(CUstream s, void (*cb)(CUstream, CUresult, void *), void *user, unsigned flags)
{
    CUresult r = cb && flags == 0 ? stream_ready(s) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = drv_result(pv_capture_forbid(s));             /* callbacks cannot be captured; host functions can */
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
    if (r == CUDA_SUCCESS && pv_event_ok(e))
        pv_capture_event_forget(e);
    return r == CUDA_SUCCESS ? drv_result(pv_event_destroy(e)) : r;
}

/* CU_EVENT_RECORD_EXTERNAL (1) only matters to a capture (an event record node). */
PV_API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pv_event_ok(e) || !pv_stream_ok(s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags > 1)
        return CUDA_ERROR_INVALID_VALUE;
    cudaError_t err;
    if (pv_capture_event_record(e, s, flags, &err))
        return drv_result(err);
    return drv_result(pv_event_record(e, s));
}

PV_API CUresult cuEventRecord(CUevent e, CUstream s) { return cuEventRecordWithFlags(e, s, 0); }

PV_API CUresult cuEventSynchronize(CUevent e) { DRV_RETURN(pv_sync_event(e)); }

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
PV_API CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *c, void **g) { return cuStreamGetCtx_v2(s, c, g); }
PV_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }
PV_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned f) { return cuEventRecordWithFlags(e, s, f); }
PV_API CUresult cuLaunchHostFunc_ptsz(CUstream s, void (*fn)(void *), void *u) { return cuLaunchHostFunc(s, fn, u); }
PV_API CUresult cuStreamAddCallback_ptsz(CUstream s, void (*cb)(CUstream, CUresult, void *), void *u, unsigned f)
{
    return cuStreamAddCallback(s, cb, u, f);
}

/* ------------------------------------------------------------------------------------------ capture */
#define NODES(deps) ((struct pv_gnode *const *)(deps))
enum { CU_STREAM_CAPTURE_MODE_GLOBAL = 0 };

static CUresult begin(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, int mode)
{
    DRV_RETURN(pv_capture_begin(s, g, NODES(deps), n, edges, mode));
}

PV_API CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { return begin(s, NULL, NULL, NULL, 0, mode); }
PV_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) { return begin(s, NULL, NULL, NULL, 0, mode); }
PV_API CUresult cuStreamBeginCapture(CUstream s) { return begin(s, NULL, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL); }
PV_API CUresult cuStreamBeginCapture_ptsz(CUstream s) { return cuStreamBeginCapture(s); }

PV_API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                            const CUgraphEdgeData *edges, size_t n, int mode)
{
    return pv_graph_of(g) ? begin(s, g, deps, edges, n, mode) : CUDA_ERROR_INVALID_VALUE;
}
PV_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                 const CUgraphEdgeData *edges, size_t n, int mode)
{
    return cuStreamBeginCaptureToGraph(s, g, deps, edges, n, mode);
}

PV_API CUresult cuStreamEndCapture(CUstream s, CUgraph *out) { DRV_RETURN(pv_capture_end(s, out)); }
PV_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *out) { DRV_RETURN(pv_capture_end(s, out)); }
PV_API CUresult cuStreamIsCapturing(CUstream s, int *status) { DRV_RETURN(pv_capture_status(s, status)); }
PV_API CUresult cuStreamIsCapturing_ptsz(CUstream s, int *status) { DRV_RETURN(pv_capture_status(s, status)); }

/* v1: status and id; v2: and the graph and dependencies; v3: and their edge data (always the default kind). */
static CUresult capture_info(CUstream s, int *status, unsigned long long *id, CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *n)
{
    if (edges)
        *edges = NULL;
    DRV_RETURN(pv_capture_info(s, status, id, graph, (struct pv_gnode *const **)deps, n));
}

PV_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, int *status, unsigned long long *id, CUgraph *graph,
                                          const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n)
{
    return capture_info(s, status, id, graph, deps, edges, n);
}
PV_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, int *status, unsigned long long *id, CUgraph *graph,
                                               const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n)
{
    return capture_info(s, status, id, graph, deps, edges, n);
}
PV_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, int *status, unsigned long long *id, CUgraph *graph,
                                          const CUgraphNode **deps, size_t *n)
{
    return capture_info(s, status, id, graph, deps, NULL, n);
}
PV_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, int *status, unsigned long long *id, CUgraph *graph,
                                               const CUgraphNode **deps, size_t *n)
{
    return capture_info(s, status, id, graph, deps, NULL, n);
}
PV_API CUresult cuStreamGetCaptureInfo(CUstream s, int *status, unsigned long long *id)
{
    return capture_info(s, status, id, NULL, NULL, NULL, NULL);
}
PV_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, int *status, unsigned long long *id)
{
    return capture_info(s, status, id, NULL, NULL, NULL, NULL);
}

static CUresult update_deps(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, unsigned flags)
{
    DRV_RETURN(pv_capture_update_deps(s, NODES(deps), edges, n, flags));
}

PV_API CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges,
                                                     size_t n, unsigned flags)
{
    return update_deps(s, deps, edges, n, flags);
}
PV_API CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges,
                                                          size_t n, unsigned flags)
{
    return update_deps(s, deps, edges, n, flags);
}
PV_API CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps, size_t n, unsigned flags)
{
    return update_deps(s, deps, NULL, n, flags);
}
PV_API CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode *deps, size_t n, unsigned flags)
{
    return update_deps(s, deps, NULL, n, flags);
}

/* The capture mode is a per-thread setting shared with libvcudart (core capture.c). */
PV_API CUresult cuThreadExchangeStreamCaptureMode(int *mode) { DRV_RETURN(pv_capture_exchange_mode(mode)); }
