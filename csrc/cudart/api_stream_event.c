/* Streams and events: the runtime's entry points on the core's streams.c (handles, validation, the ops); errors
 * are recorded as the thread's last error here, except cudaErrorNotReady from queries. */
#include "cudart.h"

PV_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *ps, unsigned flags, int priority)
{
    return pv_ret(ps ? pv_stream_create(flags, priority, ps) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ps, unsigned flags)
{
    return cudaStreamCreateWithPriority(ps, flags, 0);
}

PV_API cudaError_t cudaStreamCreate(cudaStream_t *ps) { return cudaStreamCreateWithPriority(ps, 0, 0); }
PV_API cudaError_t cudaStreamDestroy(cudaStream_t s) { return pv_ret(pv_stream_destroy(s)); }
PV_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return pv_ret(pv_stream_sync(s)); }

PV_API cudaError_t cudaStreamQuery(cudaStream_t s)
{
    cudaError_t err = pv_stream_query(s);
    return err == PV_cudaErrorNotReady ? err : pv_ret(err);
}

PV_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned *flags)
{
    int priority;
    return pv_ret(flags ? pv_stream_props(s, flags, &priority) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority)
{
    unsigned flags;
    return pv_ret(priority ? pv_stream_props(s, &flags, priority) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int *device)
{
    struct pv_device *d;
    uint64_t remote;
    if (!device)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_stream_target(s, &d, &remote);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *device = d->index;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    return pv_ret(pv_stream_wait_event(s, e, flags));
}

/* ------------------------------------------------------------------------------------------ events */
PV_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned flags)
{
    return pv_ret(pe ? pv_event_create(flags, pe) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaEventCreate(cudaEvent_t *pe) { return cudaEventCreateWithFlags(pe, 0); }
PV_API cudaError_t cudaEventDestroy(cudaEvent_t e) { return pv_ret(pv_event_destroy(e)); }
PV_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return pv_ret(pv_event_record(e, s)); }

PV_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags)
{
    (void)flags;
    return cudaEventRecord(e, s);
}

PV_API cudaError_t cudaEventSynchronize(cudaEvent_t e) { return pv_ret(pv_event_sync(e)); }

PV_API cudaError_t cudaEventQuery(cudaEvent_t e)
{
    cudaError_t err = pv_event_query(e);
    return err == PV_cudaErrorNotReady ? err : pv_ret(err);
}

PV_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_event_elapsed(ms, start, end);
    return err == PV_cudaErrorNotReady ? err : pv_ret(err);
}

/* Stream capture (CUDA graphs) is not supported, so no stream is ever capturing. */
PV_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, int *status)
{
    struct pv_device *d;
    uint64_t remote;
    if (!status)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_stream_target(s, &d, &remote);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *status = 0;   /* cudaStreamCaptureStatusNone */
    return PV_SUCCESS;
}

/* Host functions run on the calling thread once the stream's earlier work has completed: later work of the
 * stream is submitted after they return, so stream order is kept. */
PV_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, void (*fn)(void *), void *user)
{
    if (!fn)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = cudaStreamSynchronize(s);
    if (err != PV_SUCCESS)
        return err;
    fn(user);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaStreamAddCallback(cudaStream_t s, void (*cb)(cudaStream_t, cudaError_t, void *), void *user,
                                         unsigned flags)
{
    if (!cb || flags != 0)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_device *d;
    uint64_t remote;
    cudaError_t err = pv_stream_target(s, &d, &remote);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    cudaError_t status = pv_call_STREAM_SYNC(d, remote);
    if (status == PV_ERR_UNAVAILABLE)
        return pv_ret(status);
    cb(s, status, user);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, int *status, unsigned long long *id, void **graph,
                                            const void **deps, const void **edge_data, size_t *ndeps)
{
    int st;
    cudaError_t err = cudaStreamIsCapturing(s, &st);
    if (err != PV_SUCCESS)
        return err;
    if (!status)
        return pv_ret(PV_cudaErrorInvalidValue);
    *status = st;
    if (id)
        *id = 0;
    if (graph)
        *graph = NULL;
    if (deps)
        *deps = NULL;
    if (edge_data)
        *edge_data = NULL;
    if (ndeps)
        *ndeps = 0;
    return PV_SUCCESS;
}

/* The capture mode is a per-thread setting; with capture unsupported it only needs to round-trip. */
static _Thread_local int tls_capture_mode;
PV_API cudaError_t cudaThreadExchangeStreamCaptureMode(int *mode)
{
    if (!mode || *mode < 0 || *mode > 2)
        return pv_ret(PV_cudaErrorInvalidValue);
    int old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long *id)
{
    return pv_ret(id ? pv_stream_id(s, id) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long *id) { return cudaStreamGetId(s, id); }
