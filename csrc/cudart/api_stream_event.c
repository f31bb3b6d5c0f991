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
PV_API cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if ((uintptr_t)s > 2 && pv_stream_ok(s))
        pv_capture_stream_forget(s);
    return pv_ret(pv_stream_destroy(s));
}

PV_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return pv_ret(pv_sync_stream(s)); }

PV_API cudaError_t cudaStreamQuery(cudaStream_t s)
{
    cudaError_t err = pv_capture_forbid(s);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    err = pv_stream_query(s);
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
    cudaError_t err;
    if (!pv_event_ok(e) || !pv_stream_ok(s))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (pv_capture_wait_event(s, e, flags, &err))
        return pv_ret(err);
    return pv_ret(pv_stream_wait_run(s, e, flags));
}

/* ------------------------------------------------------------------------------------------ events */
PV_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned flags)
{
    return pv_ret(pe ? pv_event_create(flags, pe) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaEventCreate(cudaEvent_t *pe) { return cudaEventCreateWithFlags(pe, 0); }
PV_API cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (pv_event_ok(e))
        pv_capture_event_forget(e);
    return pv_ret(pv_event_destroy(e));
}

PV_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags)
{
    cudaError_t err;
    if (!pv_event_ok(e) || !pv_stream_ok(s))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (flags > 1)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (pv_capture_event_record(e, s, flags, &err))
        return pv_ret(err);
    return pv_ret(pv_event_record(e, s));
}

PV_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecordWithFlags(e, s, 0); }

PV_API cudaError_t cudaEventSynchronize(cudaEvent_t e) { return pv_ret(pv_sync_event(e)); }

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

/* Host functions run on the calling thread once the stream's earlier work has completed: later work of the
 * stream is submitted after they return, so stream order is kept. */
PV_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, void (*fn)(void *), void *user)
{
    if (!fn)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (pv_capturing(s))
        return pv_ret(pv_capture_host(s, fn, user));
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
    cudaError_t cerr = pv_capture_forbid(s);            /* callbacks cannot be captured; cudaLaunchHostFunc can */
    if (cerr != PV_SUCCESS)
        return pv_ret(cerr);
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

PV_API cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long *id)
{
    return pv_ret(id ? pv_stream_id(s, id) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long *id) { return cudaStreamGetId(s, id); }
