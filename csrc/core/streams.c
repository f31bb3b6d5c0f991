/* Streams and events, shared by every API library: client handles wrap daemon handles and carry their device;
 * garbage or destroyed handles are refused (cudaErrorInvalidResourceHandle) before anything is dereferenced or
 * sent. New streams and events belong to the calling thread's current device (the driver's current context sets
 * it too) and to the thread's owner (the driver's context: a created context's go with it). Errors are returned,
 * never recorded: recording is each API's business. */
#include <stdlib.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_record.h"
#include "pv_refusal.h"
#include "pv_registry.h"
#include "pv_streams.h"

/* Every live stream and event, for the end of the context that made them. */
static void **live;
static size_t nlive, caplive;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static void live_add(void *obj)
{
    pthread_mutex_lock(&live_mu);
    if (nlive == caplive) {
        size_t nc = caplive ? caplive * 2 : 64;
        void **p = realloc(live, nc * sizeof *p);
        if (p) {
            live = p;
            caplive = nc;
        }
    }
    if (nlive < caplive)
        live[nlive++] = obj;            /* untracked when out of memory: it then lives until the session ends */
    pthread_mutex_unlock(&live_mu);
}

static void live_remove(void *obj)
{
    pthread_mutex_lock(&live_mu);
    for (size_t i = 0; i < nlive; i++)
        if (live[i] == obj) {
            live[i] = live[--nlive];
            break;
        }
    pthread_mutex_unlock(&live_mu);
}

static struct pv_stream *stream_of(cudaStream_t s)
{
    return ((uintptr_t)s > 2 && pv_handle_valid(s) && s->magic == PV_STREAM_MAGIC) ? s : NULL;
}

static struct pv_event *event_of(cudaEvent_t e)
{
    return (e && pv_handle_valid(e) && e->magic == PV_EVENT_MAGIC) ? e : NULL;
}

int pv_event_ok(cudaEvent_t e) { return event_of(e) != NULL; }

cudaError_t pv_stream_target(cudaStream_t s, struct pv_device **d, uint64_t *remote)
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

static cudaError_t stream_simple(cudaStream_t s, handle_call call)
{
    struct pv_device *d;
    uint64_t remote;
    cudaError_t err = pv_stream_target(s, &d, &remote);
    return err == PV_SUCCESS ? call(d, remote) : err;
}

static cudaError_t event_simple(cudaEvent_t e, handle_call call)
{
    struct pv_event *ev = event_of(e);
    struct pv_device *d = ev ? pv_device(ev->dev) : NULL;
    return d ? call(d, ev->remote) : PV_cudaErrorInvalidResourceHandle;
}

/* cudaStreamSynchronize: answered here when the stream's last request was a blocking copy that finished and
 * nothing was sent to its device since (copy.c); the refusal rule of every synchronizing call still applies. */
cudaError_t pv_stream_sync(cudaStream_t s)
{
    struct pv_device *d;
    uint64_t remote;
    cudaError_t err = pv_stream_target(s, &d, &remote);
    if (err != PV_SUCCESS)
        return err;
    uint64_t at = atomic_load(&d->quiet_at);
    if (at && atomic_load(&d->quiet_stream) == remote && atomic_load(&d->sent) == at)
        return pv_sync_result(d, PV_SUCCESS);
    return pv_call_STREAM_SYNC(d, remote);
}
cudaError_t pv_stream_query(cudaStream_t s) { return stream_simple(s, pv_call_STREAM_QUERY); }
cudaError_t pv_event_sync(cudaEvent_t e) { return event_simple(e, pv_call_EVENT_SYNC); }
cudaError_t pv_event_query(cudaEvent_t e) { return event_simple(e, pv_call_EVENT_QUERY); }

/* The stream a handle names: *st NULL for a default-stream sentinel; cudaErrorInvalidResourceHandle for garbage. */
static cudaError_t stream_handle(cudaStream_t s, struct pv_stream **st)
{
    *st = (uintptr_t)s <= 2 ? NULL : stream_of(s);
    return (uintptr_t)s <= 2 || *st ? PV_SUCCESS : PV_cudaErrorInvalidResourceHandle;
}

cudaError_t pv_stream_props(cudaStream_t s, unsigned *flags, int *priority)
{
    struct pv_stream *st;
    cudaError_t err = stream_handle(s, &st);
    if (err == PV_SUCCESS) {
        *flags = st ? st->flags : 0;
        *priority = st ? st->priority : 0;
    }
    return err;
}

cudaError_t pv_stream_create(unsigned flags, int priority, cudaStream_t *out)
{
    struct pv_device *d;
    if (flags > 1)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return err;
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    uint64_t h = 0;
    err = pv_call_STREAM_CREATE(d, flags, priority, &h);
    if (err != PV_SUCCESS)
        return err;
    struct pv_stream *st = calloc(1, sizeof *st);
    if (!st)
        return PV_cudaErrorMemoryAllocation;
    st->magic = PV_STREAM_MAGIC;
    st->dev = d->index;
    st->remote = h;
    st->flags = flags;
    st->priority = priority;
    st->owner = pv_tls_owner();
    pv_handle_add(st);
    live_add(st);
    *out = st;
    return PV_SUCCESS;
}

/* The end of a stream or event (obj, validated by the caller): out of the handle set, its daemon handle destroyed
 * fire-and-forget, freed. */
static cudaError_t handle_destroy(void *obj, uint32_t *magic, int dev, uint64_t remote, handle_call destroy)
{
    if (pv_handle_remove(obj) != 0)
        return PV_cudaErrorInvalidResourceHandle;
    live_remove(obj);
    struct pv_device *d = pv_device(dev);
    cudaError_t err = d ? destroy(d, remote) : PV_cudaErrorInvalidResourceHandle;
    *magic = 0;
    free(obj);
    return err;
}

cudaError_t pv_stream_destroy(cudaStream_t s)
{
    struct pv_stream *st = stream_of(s);
    return st ? handle_destroy(st, &st->magic, st->dev, st->remote, pv_send_STREAM_DESTROY)
              : PV_cudaErrorInvalidResourceHandle;
}

cudaError_t pv_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    struct pv_device *d;
    uint64_t remote;
    cudaError_t err = pv_stream_target(s, &d, &remote);
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
    return pv_send_STREAM_WAIT_EVENT(d, remote, ev->remote, flags);
}

/* Stream ids: 0 for the legacy default stream, 1 for the per-thread one, the daemon handle + 2 otherwise (daemon
 * handles are unique per session, and a session is one host). */
cudaError_t pv_stream_id(cudaStream_t s, unsigned long long *id)
{
    struct pv_stream *st;
    cudaError_t err = stream_handle(s, &st);
    if (err == PV_SUCCESS)
        *id = st ? ((unsigned long long)st->dev << 48) + st->remote + 2 : (uintptr_t)s == 2 ? 1 : 0;
    return err;
}

/* ---------------------------------------------------------------------------------------------- event times
 * Replies carry the times of completed event records (protocol v3). They are kept on the pv_event; the reader finds
 * it by (device, daemon handle) in this table, which holds exactly the live events, so a reply can only update
 * events the program owns. Open addressing, linear probing, tombstones; grown at half load. */
#define EVT_TOMB ((struct pv_event *)1)
static pthread_mutex_t evt_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pv_event **evt_slots;
static size_t evt_cap, evt_used;     /* slots, slots not empty (live + tombstones) */

static size_t evt_hash(int dev, uint64_t remote)
{
    uint64_t h = remote * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 29));
}

static struct pv_event **evt_find(int dev, uint64_t remote)
{
    if (!evt_cap)
        return NULL;
    for (size_t i = evt_hash(dev, remote) & (evt_cap - 1);; i = (i + 1) & (evt_cap - 1)) {
        struct pv_event *e = evt_slots[i];
        if (!e)
            return NULL;
        if (e != EVT_TOMB && e->dev == dev && e->remote == remote)
            return &evt_slots[i];
    }
}

static int evt_insert_slot(struct pv_event **slots, size_t cap, struct pv_event *ev)
{
    for (size_t i = evt_hash(ev->dev, ev->remote) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!slots[i] || slots[i] == EVT_TOMB) {
            int fresh = !slots[i];
            slots[i] = ev;
            return fresh;
        }
}

/* 0 ok; -1 out of memory (the event then has no reported times: its elapsed times are asked for) */
static int evt_add(struct pv_event *ev)
{
    pthread_mutex_lock(&evt_mu);
    if ((evt_used + 1) * 2 > evt_cap) {
        size_t cap = evt_cap ? evt_cap * 2 : 64;
        struct pv_event **slots = calloc(cap, sizeof *slots);
        if (!slots) {
            pthread_mutex_unlock(&evt_mu);
            return -1;
        }
        evt_used = 0;
        for (size_t i = 0; i < evt_cap; i++)
            if (evt_slots[i] && evt_slots[i] != EVT_TOMB)
                evt_used += evt_insert_slot(slots, cap, evt_slots[i]);
        free(evt_slots);
        evt_slots = slots;
        evt_cap = cap;
    }
    evt_used += evt_insert_slot(evt_slots, evt_cap, ev);
    pthread_mutex_unlock(&evt_mu);
    return 0;
}

static void evt_remove(struct pv_event *ev)
{
    pthread_mutex_lock(&evt_mu);
    struct pv_event **slot = evt_find(ev->dev, ev->remote);
    if (slot && *slot == ev)
        *slot = EVT_TOMB;
    pthread_mutex_unlock(&evt_mu);
}

void pv_event_times_apply(struct pv_device *d, const msgpack_object *times)
{
    if (times->type != MSGPACK_OBJECT_ARRAY || times->via.array.size % 3 != 0)
        return;                    /* malformed: ignored (elapsed times are then asked for) */
    pthread_mutex_lock(&evt_mu);
    for (uint32_t i = 0; i + 3 <= times->via.array.size; i += 3) {
        uint64_t remote, records;
        double ms;
        const msgpack_object *t = &times->via.array.ptr[i];
        if (pv_obj_u64(&t[0], &remote) != 0 || pv_obj_u64(&t[1], &records) != 0 || pv_obj_f64(&t[2], &ms) != 0)
            continue;
        struct pv_event **slot = evt_find(d->index, remote);
        if (slot) {
            (*slot)->known = records;
            (*slot)->t_ms = ms;
        }
    }
    pthread_mutex_unlock(&evt_mu);
}

/* 1 and *ms when both events' latest records have reported times (so both completed). */
static int elapsed_known(struct pv_event *a, struct pv_event *b, float *ms)
{
    pthread_mutex_lock(&evt_mu);
    int ok = a->sent && a->known == a->sent && b->sent && b->known == b->sent;
    if (ok)
        *ms = (float)(b->t_ms - a->t_ms);
    pthread_mutex_unlock(&evt_mu);
    return ok;
}

cudaError_t pv_event_create(unsigned flags, cudaEvent_t *out)
{
    struct pv_device *d;
    if (flags > 0xf)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return err;
    uint64_t h = 0;
    err = pv_call_EVENT_CREATE(d, flags, &h);
    if (err != PV_SUCCESS)
        return err;
    struct pv_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return PV_cudaErrorMemoryAllocation;
    ev->magic = PV_EVENT_MAGIC;
    ev->dev = d->index;
    ev->remote = h;
    ev->flags = flags;
    if (!(flags & PV_EVENT_DISABLE_TIMING))
        (void)evt_add(ev);         /* without it, elapsed times are asked for */
    ev->owner = pv_tls_owner();
    pv_handle_add(ev);
    live_add(ev);
    *out = ev;
    return PV_SUCCESS;
}

cudaError_t pv_event_destroy(cudaEvent_t e)
{
    struct pv_event *ev = event_of(e);
    if (!ev)
        return PV_cudaErrorInvalidResourceHandle;
    evt_remove(ev);
    return handle_destroy(ev, &ev->magic, ev->dev, ev->remote, pv_send_EVENT_DESTROY);
}

cudaError_t pv_event_record(cudaEvent_t e, cudaStream_t s)
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
        err = pv_stream_target(s, &d, &remote);
    }
    if (err != PV_SUCCESS)
        return err;
    if (d->index != ev->dev)
        return PV_cudaErrorInvalidResourceHandle;
    if (!pv_recording()) {
        pthread_mutex_lock(&evt_mu);
        ev->sent++;                /* before the send: a reply can only report this record after it */
        pthread_mutex_unlock(&evt_mu);
    }
    return pv_send_EVENT_RECORD(d, ev->remote, remote);
}

cudaError_t pv_event_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    struct pv_event *a = event_of(start), *b = event_of(end);
    if (!a || !b || a->dev != b->dev)
        return PV_cudaErrorInvalidResourceHandle;
    struct pv_device *d = pv_device(a->dev);
    if (!d)
        return PV_cudaErrorInvalidResourceHandle;
    if (elapsed_known(a, b, ms))
        return PV_SUCCESS;         /* both completed, their times came with a reply: no round trip */
    double v = 0;
    cudaError_t err = pv_call_EVENT_ELAPSED(d, a->remote, b->remote, &v);
    if (err == PV_SUCCESS)
        *ms = (float)v;
    return err;
}

int pv_owner_holds(const void *owner, int dev)
{
    uint64_t *ptrs = NULL;
    size_t n = pv_alloc_owned(owner, dev, 0, &ptrs);
    free(ptrs);
    pthread_mutex_lock(&live_mu);
    for (size_t i = 0; !n && i < nlive; i++) {
        struct pv_stream *st = stream_of(live[i]);
        struct pv_event *ev = st ? NULL : event_of(live[i]);
        n = (st && st->owner == owner && st->dev == dev) || (ev && ev->owner == owner && ev->dev == dev);
    }
    pthread_mutex_unlock(&live_mu);
    return n != 0;
}

void pv_streams_release(const void *owner, int dev)
{
    pthread_mutex_lock(&live_mu);
    void **mine = malloc(sizeof *mine * (nlive ? nlive : 1));
    size_t n = 0;
    for (size_t i = 0; mine && i < nlive; i++) {
        struct pv_stream *st = stream_of(live[i]);
        struct pv_event *ev = st ? NULL : event_of(live[i]);
        if ((st && st->owner == owner && st->dev == dev) || (ev && ev->owner == owner && ev->dev == dev))
            mine[n++] = live[i];
    }
    pthread_mutex_unlock(&live_mu);
    for (size_t i = 0; i < n; i++)   /* destroy checks each handle again: another thread may have destroyed it */
        if (stream_of(mine[i]))
            (void)pv_stream_destroy(mine[i]);
        else
            (void)pv_event_destroy(mine[i]);
    free(mine);
}
