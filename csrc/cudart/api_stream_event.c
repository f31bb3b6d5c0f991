/* Streams and events: client handles wrap daemon handles and carry their device; garbage or destroyed handles
 * are refused (cudaErrorInvalidResourceHandle) before anything is dereferenced or sent. */
#include <stdlib.h>

#include "graph.h"

static struct pv_stream *stream_of(cudaStream_t s)
{
    return ((uintptr_t)s > 2 && pv_handle_valid(s) && s->magic == PV_STREAM_MAGIC) ? s : NULL;
}

static struct pv_event *event_of(cudaEvent_t e)
{
    return (e && pv_handle_valid(e) && e->magic == PV_EVENT_MAGIC) ? e : NULL;
}

/* Device and daemon handle a stream argument refers to (the default streams: the current device's). */
static cudaError_t resolve_stream(cudaStream_t s, struct pv_device **d, uint64_t *remote)
{
    struct pv_device *cur = NULL;
    if ((uintptr_t)s <= 2) {
        cudaError_t err = pv_cur(&cur);
        if (err != PV_SUCCESS)
            return err;
    }
    cudaError_t err = pv_stream_resolve(s, cur, remote, d);
    if (err != PV_SUCCESS)
        return err;
    return *d ? PV_SUCCESS : PV_cudaErrorInvalidResourceHandle;
}

/* A generated sender that takes one stream or event handle and waits for the reply (sync, query). */
typedef cudaError_t (*handle_call)(struct pv_device *d, uint64_t handle);

/* call about the stream s; errors are returned, not recorded. */
static cudaError_t stream_simple(cudaStream_t s, handle_call call)
{
    struct pv_device *d;
    uint64_t remote;
    cudaError_t err = resolve_stream(s, &d, &remote);
    if (err != PV_SUCCESS)
        return err;
    return call(d, remote);
}

/* The same about the event e, on the event's device. */
static cudaError_t event_simple(cudaEvent_t e, handle_call call)
{
    struct pv_event *ev = event_of(e);
    struct pv_device *d = ev ? pv_device(ev->dev) : NULL;
    if (!d)
        return PV_cudaErrorInvalidResourceHandle;
    return call(d, ev->remote);
}

/* Creation flags and priority of the stream s (0 and 0 for the default streams); outputs untouched on error. */
static cudaError_t stream_props(cudaStream_t s, unsigned *flags, int *priority)
{
    if ((uintptr_t)s <= 2) {
        *flags = 0;
        *priority = 0;
        return PV_SUCCESS;
    }
    struct pv_stream *st = stream_of(s);
    if (!st)
        return PV_cudaErrorInvalidResourceHandle;
    *flags = st->flags;
    *priority = st->priority;
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ streams */
PV_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *ps, unsigned flags, int priority)
{
    struct pv_device *d;
    if (!ps)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (flags > 1)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    uint64_t h = 0;
    err = pv_call_STREAM_CREATE(d, flags, priority, &h);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    struct pv_stream *st = calloc(1, sizeof *st);
    if (!st)
        return pv_ret(PV_cudaErrorMemoryAllocation);
    st->magic = PV_STREAM_MAGIC;
    st->dev = d->index;
    st->remote = h;
    st->flags = flags;
    st->priority = priority;
    pv_handle_add(st);
    *ps = st;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ps, unsigned flags)
{
    return cudaStreamCreateWithPriority(ps, flags, 0);
}

PV_API cudaError_t cudaStreamCreate(cudaStream_t *ps) { return cudaStreamCreateWithPriority(ps, 0, 0); }

PV_API cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    struct pv_stream *st = stream_of(s);
    if (!st || pv_handle_remove(st) != 0)
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    pv_capture_stream_forget(st);
    struct pv_device *d = pv_device(st->dev);
    cudaError_t err = d ? pv_send_STREAM_DESTROY(d, st->remote) : PV_cudaErrorInvalidResourceHandle;
    st->magic = 0;
    free(st);
    return pv_ret(err);
}

cudaError_t pv_stream_sync_run(cudaStream_t s) { return stream_simple(s, pv_call_STREAM_SYNC); }

PV_API cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    cudaError_t err = pv_capture_forbid(s);
    if (err == PV_SUCCESS)
        err = pv_stream_sync_run(s);
    struct pv_device *d;
    uint64_t remote;
    if (err == PV_SUCCESS && resolve_stream(s, &d, &remote) == PV_SUCCESS)
        pv_pools_synced(d->index);
    return pv_ret(err);
}

PV_API cudaError_t cudaStreamQuery(cudaStream_t s)
{
    cudaError_t err = pv_capture_forbid(s);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    err = stream_simple(s, pv_call_STREAM_QUERY);
    return err == PV_cudaErrorNotReady ? err : pv_ret(err);
}

PV_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned *flags)
{
    int priority;
    if (!flags)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(stream_props(s, flags, &priority));
}

PV_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority)
{
    unsigned flags;
    if (!priority)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(stream_props(s, &flags, priority));
}

PV_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int *device)
{
    struct pv_device *d;
    uint64_t remote;
    if (!device)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = resolve_stream(s, &d, &remote);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *device = d->index;
    return PV_SUCCESS;
}

cudaError_t pv_stream_wait_run(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    struct pv_device *d;
    uint64_t remote;
    cudaError_t err = resolve_stream(s, &d, &remote);
    if (err != PV_SUCCESS)
        return err;
    struct pv_event *ev = event_of(e);
    if (!ev)
        return PV_cudaErrorInvalidResourceHandle;
    if (ev->dev != d->index) {
        /* a dependency across GPUs: wait for the event here, then the stream's later work is ordered after it */
        struct pv_device *ed = pv_device(ev->dev);
        return ed ? pv_call_EVENT_SYNC(ed, ev->remote) : PV_cudaErrorInvalidResourceHandle;
    }
    return pv_send_STREAM_WAIT_EVENT(d, remote, ev->remote, flags & ~1u);
}

PV_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    cudaError_t err;
    if (!event_of(e) || !pv_stream_ok(s))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (pv_capture_wait_event(s, e, flags, &err))
        return pv_ret(err);
    return pv_ret(pv_stream_wait_run(s, e, flags));
}

/* ------------------------------------------------------------------------------------------ events */
PV_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned flags)
{
    struct pv_device *d;
    if (!pe || flags > 0xf)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    uint64_t h = 0;
    err = pv_call_EVENT_CREATE(d, flags, &h);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    struct pv_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return pv_ret(PV_cudaErrorMemoryAllocation);
    ev->magic = PV_EVENT_MAGIC;
    ev->dev = d->index;
    ev->remote = h;
    ev->flags = flags;
    pv_handle_add(ev);
    *pe = ev;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaEventCreate(cudaEvent_t *pe) { return cudaEventCreateWithFlags(pe, 0); }

PV_API cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    struct pv_event *ev = event_of(e);
    if (!ev || pv_handle_remove(ev) != 0)
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    pv_capture_event_forget(ev);
    struct pv_device *d = pv_device(ev->dev);
    cudaError_t err = d ? pv_send_EVENT_DESTROY(d, ev->remote) : PV_cudaErrorInvalidResourceHandle;
    ev->magic = 0;
    free(ev);
    return pv_ret(err);
}

cudaError_t pv_event_record_run(cudaEvent_t e, cudaStream_t s)
{
    struct pv_event *ev = event_of(e);
    if (!ev)
        return PV_cudaErrorInvalidResourceHandle;
    struct pv_device *d;
    uint64_t remote;
    cudaError_t err;
    if ((uintptr_t)s <= 2) {
        d = pv_device(ev->dev);   /* the default stream of the event's device */
        remote = 0;
        err = d ? PV_SUCCESS : PV_cudaErrorInvalidResourceHandle;
    } else {
        err = resolve_stream(s, &d, &remote);
    }
    if (err != PV_SUCCESS)
        return err;
    if (d->index != ev->dev)
        return PV_cudaErrorInvalidResourceHandle;
    return pv_send_EVENT_RECORD(d, ev->remote, remote);
}

PV_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags)
{
    cudaError_t err;
    if (!event_of(e) || !pv_stream_ok(s))
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (flags > 1)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (pv_capture_event_record(e, s, flags, &err))
        return pv_ret(err);
    return pv_ret(pv_event_record_run(e, s));
}

PV_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecordWithFlags(e, s, 0); }

PV_API cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    cudaError_t err = event_simple(e, pv_call_EVENT_SYNC);
    if (err == PV_SUCCESS)
        pv_pools_synced(e->dev);
    return pv_ret(err);
}

PV_API cudaError_t cudaEventQuery(cudaEvent_t e)
{
    cudaError_t err = event_simple(e, pv_call_EVENT_QUERY);
    return err == PV_cudaErrorNotReady ? err : pv_ret(err);
}

PV_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_event *a = event_of(start), *b = event_of(end);
    if (!a || !b)
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    if (a->dev != b->dev)
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    struct pv_device *d = pv_device(a->dev);
    if (!d)
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    double v = 0;
    cudaError_t err = pv_call_EVENT_ELAPSED(d, a->remote, b->remote, &v);
    if (err != PV_SUCCESS)
        return err == PV_cudaErrorNotReady ? err : pv_ret(err);
    *ms = (float)v;
    return PV_SUCCESS;
}

/* Host functions run on the calling thread once the stream's earlier work has completed: later work of the
 * stream is submitted after they return, so stream order is kept. */
PV_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, void (*fn)(void *), void *user)
{
    if (!fn)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (pv_capturing(s)) {
        struct pv_gnode *n;
        cudaError_t err = pv_capture_node(s, PV_cudaGraphNodeTypeHost, &n);
        if (err == PV_SUCCESS)
            n->p.host = (struct cudaHostNodeParams){ fn, user };
        return pv_ret(err);
    }
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
    cudaError_t err = resolve_stream(s, &d, &remote);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    cudaError_t status = pv_call_STREAM_SYNC(d, remote);
    if (status == PV_ERR_UNAVAILABLE)
        return pv_ret(status);
    cb(s, status, user);
    return PV_SUCCESS;
}

/* Stream ids: 0 for the legacy default stream, 1 for the per-thread one, the daemon handle + 2 otherwise (daemon
 * handles are unique per session, and a session is one host). */
PV_API cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long *id)
{
    if (!id)
        return pv_ret(PV_cudaErrorInvalidValue);
    if ((uintptr_t)s <= 2) {
        *id = (uintptr_t)s == 2 ? 1 : 0;
        return PV_SUCCESS;
    }
    struct pv_stream *st = stream_of(s);
    if (!st)
        return pv_ret(PV_cudaErrorInvalidResourceHandle);
    *id = ((unsigned long long)st->dev << 48) + st->remote + 2;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long *id) { return cudaStreamGetId(s, id); }
