/* Stream capture: while a stream captures, its work becomes nodes of a graph instead of being sent.
 *
 * Each capturing stream keeps its current dependency set (the nodes the next captured work must follow). An event
 * recorded on a capturing stream remembers that set, and a stream that waits on such an event joins the capture
 * with it (CUDA's fork/join). cudaStreamEndCapture on the stream that began the capture returns the graph once
 * every joined stream has been joined back (its last work is an ancestor of the origin's), as CUDA requires.
 * Synchronizing or querying a capturing stream invalidates the capture (cudaErrorStreamCaptureUnsupported), and the
 * end of an invalidated capture is cudaErrorStreamCaptureInvalidated. The per-thread default stream can capture;
 * the legacy default stream cannot. The capturable calls of both APIs build their nodes here (pv_capture_*). */
#include <stdlib.h>
#include <string.h>

#include "pv_hostmap.h"
#include "pv_registry.h"
#include "pv_copy.h"
#include "pv_launch.h"
#include "pv_streams.h"
#include "pv_graph.h"

struct capture {
    struct pv_graph *graph;
    int status;                    /* cudaStreamCaptureStatusActive / Invalidated */
    int mode;
    unsigned long long id;
    cudaStream_t origin;
    int refs;                      /* streams in this capture */
};

struct cap_stream {                /* one capturing stream */
    cudaStream_t s;                /* a stream handle, or the per-thread default stream's sentinel */
    pthread_t thread;              /* owner, for the per-thread default stream */
    struct capture *cap;
    struct pv_gnode **deps;
    int ndeps, capdeps;
};

struct cap_event {                 /* an event recorded inside a capture */
    cudaEvent_t e;
    struct capture *cap;
    struct pv_gnode **deps;
    int ndeps;
};

#define MAX_CAPTURING 256
static struct cap_stream *streams[MAX_CAPTURING];
static struct cap_event *events[MAX_CAPTURING];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int ncapturing;      /* fast path: no capture anywhere */
static atomic_ullong next_id = 1;

#define PER_THREAD ((cudaStream_t)(uintptr_t)2)

/* ------------------------------------------------------------------------------------------ tables (mu held) */
static struct cap_stream *find_stream(cudaStream_t s)
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (streams[i] && streams[i]->s == s && (s != PER_THREAD || pthread_equal(streams[i]->thread, pthread_self())))
            return streams[i];
    return NULL;
}

static struct cap_event *find_event(cudaEvent_t e)
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (events[i] && events[i]->e == e)
            return events[i];
    return NULL;
}

static void drop_event(struct cap_event *ce)
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (events[i] == ce)
            events[i] = NULL;
    free(ce->deps);
    free(ce);
}

static int set_deps(struct pv_gnode ***deps, int *n, int *cap, struct pv_gnode *const *src, int k)
{
    if (k > *cap) {
        struct pv_gnode **p = realloc(*deps, (size_t)k * sizeof *p);
        if (!p)
            return -1;
        *deps = p;
        *cap = k;
    }
    if (k)
        memcpy(*deps, src, (size_t)k * sizeof *src);
    *n = k;
    return 0;
}

static void capture_unref(struct capture *c)
{
    if (--c->refs > 0)
        return;
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (events[i] && events[i]->cap == c)
            drop_event(events[i]);
    free(c);
}

static void drop_stream(struct cap_stream *cs)
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (streams[i] == cs)
            streams[i] = NULL;
    free(cs->deps);
    capture_unref(cs->cap);
    free(cs);
    atomic_fetch_sub(&ncapturing, 1);
}

static struct cap_stream *add_stream(cudaStream_t s, struct capture *c)
{
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (!streams[i]) {
            struct cap_stream *cs = calloc(1, sizeof *cs);
            if (!cs)
                return NULL;
            cs->s = s;
            cs->thread = pthread_self();
            cs->cap = c;
            c->refs++;
            streams[i] = cs;
            atomic_fetch_add(&ncapturing, 1);
            return cs;
        }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ hooks */
int pv_capturing(cudaStream_t s)
{
    if (atomic_load(&ncapturing) == 0 || (uintptr_t)s == 0 || (uintptr_t)s == 1)
        return 0;
    pthread_mutex_lock(&mu);
    int yes = find_stream(s) != NULL;
    pthread_mutex_unlock(&mu);
    return yes;
}

cudaError_t pv_capture_node(cudaStream_t s, int type, struct pv_gnode **out)
{
    *out = NULL;
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = find_stream(s);
    cudaError_t err = PV_cudaErrorStreamCaptureInvalidated;
    if (cs && cs->cap->status == PV_cudaStreamCaptureStatusActive) {
        struct pv_gnode *n;
        err = pv_gnode_add(cs->cap->graph, type, cs->deps, (size_t)cs->ndeps, &n);
        if (err == PV_SUCCESS && set_deps(&cs->deps, &cs->ndeps, &cs->capdeps, &n, 1) != 0)
            err = PV_cudaErrorMemoryAllocation;
        if (err == PV_SUCCESS)
            *out = n;
        else
            cs->cap->status = PV_cudaStreamCaptureStatusInvalidated;
    }
    pthread_mutex_unlock(&mu);
    return err;
}

cudaError_t pv_capture_params(cudaStream_t s, int type, const void *p)
{
    struct pv_gnode *n;
    cudaError_t err = pv_capture_node(s, type, &n);
    if (err == PV_SUCCESS)
        err = pv_gnode_set(n, p);
    if (err != PV_SUCCESS && n)
        n->type = PV_cudaGraphNodeTypeEmpty;             /* keeps the dependency chain; owns nothing */
    return err;
}

/* An event record or wait node for an external event (cudaEventRecordExternal / cudaEventWaitExternal). */
static cudaError_t event_node(cudaStream_t s, int type, cudaEvent_t e)
{
    struct pv_gnode *n;
    cudaError_t err = pv_capture_node(s, type, &n);
    if (err == PV_SUCCESS) {
        n->p.event = e;
        n->dev = e->dev;
    }
    return err;
}

cudaError_t pv_capture_forbid(cudaStream_t s)
{
    if (atomic_load(&ncapturing) == 0)
        return PV_SUCCESS;
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = (uintptr_t)s > 1 ? find_stream(s) : NULL;
    if (cs)
        cs->cap->status = PV_cudaStreamCaptureStatusInvalidated;
    pthread_mutex_unlock(&mu);
    return cs ? PV_cudaErrorStreamCaptureUnsupported : PV_SUCCESS;
}

cudaError_t pv_capture_forbid_all(void)
{
    if (atomic_load(&ncapturing) == 0)
        return PV_SUCCESS;
    int hit = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_CAPTURING; i++) {
        struct cap_stream *cs = streams[i];
        if (cs && cs->cap->mode != PV_cudaStreamCaptureModeRelaxed &&
            (cs->cap->mode == PV_cudaStreamCaptureModeGlobal || pthread_equal(cs->thread, pthread_self()))) {
            cs->cap->status = PV_cudaStreamCaptureStatusInvalidated;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&mu);
    return hit ? PV_cudaErrorStreamCaptureUnsupported : PV_SUCCESS;
}

int pv_capture_event_record(cudaEvent_t e, cudaStream_t s, unsigned flags, cudaError_t *err)
{
    if (atomic_load(&ncapturing) == 0)
        return 0;
    pthread_mutex_lock(&mu);
    struct cap_event *old = find_event(e);
    if (old)
        drop_event(old);                                /* a new record replaces what the event stood for */
    struct cap_stream *cs = (uintptr_t)s > 1 ? find_stream(s) : NULL;
    if (!cs) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    *err = PV_SUCCESS;
    if (cs->cap->status != PV_cudaStreamCaptureStatusActive) {
        *err = PV_cudaErrorStreamCaptureInvalidated;
    } else if (flags & 1u) {                            /* cudaEventRecordExternal: an event record node */
        pthread_mutex_unlock(&mu);
        *err = event_node(s, PV_cudaGraphNodeTypeEventRecord, e);
        return 1;
    } else {
        struct cap_event *ce = calloc(1, sizeof *ce);
        int slot = -1;
        for (int i = 0; i < MAX_CAPTURING && slot < 0; i++)
            if (!events[i])
                slot = i;
        int cap = 0;
        if (!ce || slot < 0 || set_deps(&ce->deps, &ce->ndeps, &cap, cs->deps, cs->ndeps) != 0) {
            if (ce)
                free(ce->deps);
            free(ce);
            *err = PV_cudaErrorMemoryAllocation;
            cs->cap->status = PV_cudaStreamCaptureStatusInvalidated;
        } else {
            ce->e = e;
            ce->cap = cs->cap;
            events[slot] = ce;
        }
    }
    pthread_mutex_unlock(&mu);
    return 1;
}

/* Whether `anc` is `n` or an ancestor of it. */
static int reaches(const struct pv_gnode *anc, const struct pv_gnode *n, int depth)
{
    if (anc == n)
        return 1;
    if (depth > 100000)
        return 0;
    for (int i = 0; i < n->ndeps; i++)
        if (reaches(anc, n->deps[i], depth + 1))
            return 1;
    return 0;
}

/* deps ∪= extra, keeping only the frontier: a node that is an ancestor of another member adds nothing (its
 * dependents already follow it), so waits on joined branches give the graph CUDA's capture gives. */
static int merge_deps(struct cap_stream *cs, struct pv_gnode *const *extra, int n)
{
    for (int i = 0; i < n; i++) {
        int have = 0;
        for (int j = 0; j < cs->ndeps && !have; j++)
            have = cs->deps[j] == extra[i];
        if (have)
            continue;
        if (cs->ndeps == cs->capdeps) {
            int nc = cs->capdeps ? cs->capdeps * 2 : 4;
            struct pv_gnode **p = realloc(cs->deps, (size_t)nc * sizeof *p);
            if (!p)
                return -1;
            cs->deps = p;
            cs->capdeps = nc;
        }
        cs->deps[cs->ndeps++] = extra[i];
    }
    int k = 0;
    for (int i = 0; i < cs->ndeps; i++) {
        int redundant = 0;
        for (int j = 0; j < cs->ndeps && !redundant; j++)
            redundant = j != i && cs->deps[j] != cs->deps[i] && reaches(cs->deps[i], cs->deps[j], 0);
        if (!redundant)
            cs->deps[k++] = cs->deps[i];
    }
    cs->ndeps = k;
    return 0;
}

int pv_capture_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags, cudaError_t *err)
{
    if (atomic_load(&ncapturing) == 0)
        return 0;
    pthread_mutex_lock(&mu);
    struct cap_event *ce = find_event(e);
    struct cap_stream *cs = (uintptr_t)s > 1 ? find_stream(s) : NULL;
    if (!ce && !cs) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    *err = PV_SUCCESS;
    if (ce && cs && cs->cap != ce->cap) {
        *err = PV_cudaErrorStreamCaptureIsolation;      /* two captures may not be merged */
        cs->cap->status = PV_cudaStreamCaptureStatusInvalidated;
    } else if (ce && !cs) {
        if ((uintptr_t)s <= 1) {
            *err = PV_cudaErrorStreamCaptureImplicit;   /* the legacy stream cannot join a capture */
        } else {
            struct cap_stream *joined = add_stream(s, ce->cap);
            if (!joined || merge_deps(joined, ce->deps, ce->ndeps) != 0) {
                *err = PV_cudaErrorMemoryAllocation;
                ce->cap->status = PV_cudaStreamCaptureStatusInvalidated;
            }
        }
    } else if (ce) {
        if (merge_deps(cs, ce->deps, ce->ndeps) != 0) {
            *err = PV_cudaErrorMemoryAllocation;
            cs->cap->status = PV_cudaStreamCaptureStatusInvalidated;
        }
    } else if (flags & 1u) {                            /* cudaEventWaitExternal: an event wait node */
        pthread_mutex_unlock(&mu);
        *err = event_node(s, PV_cudaGraphNodeTypeWaitEvent, e);
        return 1;
    }
    /* else: a capturing stream waits on an event recorded outside any capture: already ordered, nothing to add */
    pthread_mutex_unlock(&mu);
    return 1;
}

void pv_capture_event_forget(cudaEvent_t e)
{
    if (atomic_load(&ncapturing) == 0)
        return;
    pthread_mutex_lock(&mu);
    struct cap_event *ce = find_event(e);
    if (ce)
        drop_event(ce);
    pthread_mutex_unlock(&mu);
}

void pv_capture_stream_forget(cudaStream_t s)
{
    if (atomic_load(&ncapturing) == 0)
        return;
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = find_stream(s);
    if (cs) {
        cs->cap->status = PV_cudaStreamCaptureStatusInvalidated;
        if (cs->cap->origin == s)
            cs->cap->origin = NULL;
        drop_stream(cs);
    }
    pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------------------------------------ capturable calls */
cudaError_t pv_capture_copy1d(cudaStream_t s, void *dst, const void *src, size_t n, int kind)
{
    if (kind < 0 || kind > cudaMemcpyDefault)
        return PV_cudaErrorInvalidMemcpyDirection;
    struct cudaMemcpy3DParms p;
    pv_copy1d_params(&p, dst, src, n, kind);
    return pv_capture_params(s, PV_cudaGraphNodeTypeMemcpy, &p);
}

cudaError_t pv_capture_copy2d(cudaStream_t s, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, int kind)
{
    if (width > dpitch || width > spitch)
        return PV_cudaErrorInvalidPitchValue;
    struct cudaMemcpy3DParms p = { 0 };
    p.srcPtr = (struct cudaPitchedPtr){ (void *)src, spitch, width, height };
    p.dstPtr = (struct cudaPitchedPtr){ dst, dpitch, width, height };
    p.extent = (struct cudaExtent){ width, height, 1 };
    p.kind = kind;
    return pv_capture_params(s, PV_cudaGraphNodeTypeMemcpy, &p);
}

cudaError_t pv_capture_launch(cudaStream_t s, struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block,
                              size_t shmem, void **args, void **extra, int cooperative)
{
    struct pv_kernel_launch k;
    cudaError_t err = pv_launch_prepare(f, d, grid, block, args, extra, shmem, &k);
    if (err != PV_SUCCESS)
        return err;
    k.cooperative = cooperative;
    struct pv_kinfo *ki;
    if (cooperative && ((err = pv_kinfo_get(f, d, &ki)) != PV_SUCCESS ||
                        (err = pv_cooperative_check(d, ki, grid, block, shmem)) != PV_SUCCESS)) {
        pv_launch_free(&k);
        return err;
    }
    struct pv_gnode *n;
    err = pv_capture_node(s, PV_cudaGraphNodeTypeKernel, &n);
    if (err == PV_SUCCESS) {
        n->p.kernel = k;                  /* the node owns the packed arguments now */
        n->dev = d->index;
        return PV_SUCCESS;
    }
    pv_launch_free(&k);
    return err;
}

cudaError_t pv_capture_host(cudaStream_t s, void (*fn)(void *), void *user)
{
    struct pv_gnode *n;
    cudaError_t err = pv_capture_node(s, PV_cudaGraphNodeTypeHost, &n);
    if (err == PV_SUCCESS)
        n->p.host = (struct cudaHostNodeParams){ fn, user };
    return err;
}

/* cudaEventWaitExternal (1) only matters to a capture. */
cudaError_t pv_stream_wait_run(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    return pv_stream_wait_event(s, e, flags & ~1u);
}

cudaError_t pv_memset_any(const struct cudaMemsetParams *p, cudaStream_t s)
{
    cudaError_t err = pv_init_with_stream(s);
    if (err != PV_SUCCESS)
        return err;
    if (p->width == 0 || p->height == 0)
        return PV_SUCCESS;
    if (pv_capturing(s))
        return pv_capture_params(s, PV_cudaGraphNodeTypeMemset, p);
    return pv_memset_run(p, s);
}

/* ------------------------------------------------------------------------------------------ begin, end, queries */
static cudaError_t capture_stream_ok(cudaStream_t s)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    if ((uintptr_t)s <= 1)
        return PV_cudaErrorStreamCaptureUnsupported;     /* the legacy default stream cannot capture */
    return pv_stream_ok(s) ? PV_SUCCESS : PV_cudaErrorInvalidResourceHandle;
}

cudaError_t pv_capture_begin(cudaStream_t s, struct pv_graph *into, struct pv_gnode *const *deps, size_t ndeps,
                             const cudaGraphEdgeData *edges, int mode)
{
    if (into && (!pv_graph_of(into) || (ndeps && !deps)))
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_edges_plain(edges, ndeps);
    if (err == PV_SUCCESS)
        err = capture_stream_ok(s);
    if (err != PV_SUCCESS)
        return err;
    if (mode < PV_cudaStreamCaptureModeGlobal || mode > PV_cudaStreamCaptureModeRelaxed)
        return PV_cudaErrorInvalidValue;
    for (size_t i = 0; i < ndeps; i++)
        if (!pv_gnode_of(deps[i]) || deps[i]->graph != into)
            return PV_cudaErrorInvalidValue;
    struct capture *c = calloc(1, sizeof *c);
    if (!c)
        return PV_cudaErrorMemoryAllocation;
    c->status = PV_cudaStreamCaptureStatusActive;
    c->mode = mode;
    c->id = atomic_fetch_add(&next_id, 1);
    c->origin = s;
    c->graph = into;
    if (!into && (err = pv_graph_new(&c->graph)) != PV_SUCCESS) {
        free(c);
        return err;
    }
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = NULL;
    if (find_stream(s))
        err = PV_cudaErrorIllegalState;                  /* already capturing */
    else if (!(cs = add_stream(s, c)) || merge_deps(cs, deps, (int)ndeps) != 0)
        err = PV_cudaErrorMemoryAllocation;
    if (err != PV_SUCCESS) {
        struct pv_graph *g = c->graph;
        if (cs)
            drop_stream(cs);                             /* frees c with its last stream */
        else
            free(c);
        if (!into)
            pv_graph_free(g);
    }
    pthread_mutex_unlock(&mu);
    return err;
}

/* Every other stream of the capture has been joined back into the origin. */
static int all_joined(const struct cap_stream *origin)
{
    for (int i = 0; i < MAX_CAPTURING; i++) {
        const struct cap_stream *cs = streams[i];
        if (!cs || cs == origin || cs->cap != origin->cap)
            continue;
        for (int j = 0; j < cs->ndeps; j++) {
            int ok = 0;
            for (int k = 0; k < origin->ndeps && !ok; k++)
                ok = reaches(cs->deps[j], origin->deps[k], 0);
            if (!ok)
                return 0;
        }
    }
    return 1;
}

cudaError_t pv_capture_end(cudaStream_t s, struct pv_graph **out)
{
    if (!out)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = capture_stream_ok(s);
    if (err != PV_SUCCESS)
        return err == PV_cudaErrorStreamCaptureUnsupported ? PV_cudaErrorIllegalState : err;
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = find_stream(s);
    if (!cs) {
        pthread_mutex_unlock(&mu);
        return PV_cudaErrorIllegalState;
    }
    struct capture *c = cs->cap;
    if (c->origin != s) {
        c->status = PV_cudaStreamCaptureStatusInvalidated;
        pthread_mutex_unlock(&mu);
        return PV_cudaErrorStreamCaptureUnmatched;
    }
    int joined = all_joined(cs);
    int ok = c->status == PV_cudaStreamCaptureStatusActive && joined;
    struct pv_graph *g = c->graph;
    c->refs++;                                           /* keep c while its streams go */
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (streams[i] && streams[i]->cap == c)
            drop_stream(streams[i]);
    capture_unref(c);
    pthread_mutex_unlock(&mu);
    *out = ok ? g : NULL;
    if (!ok) {
        pv_graph_free(g);
        return joined ? PV_cudaErrorStreamCaptureInvalidated : PV_cudaErrorStreamCaptureUnjoined;
    }
    return PV_SUCCESS;
}

cudaError_t pv_capture_status(cudaStream_t s, int *status)
{
    if (!status)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    if (!pv_stream_ok(s))
        return PV_cudaErrorInvalidResourceHandle;
    *status = PV_cudaStreamCaptureStatusNone;
    if ((uintptr_t)s <= 1 || atomic_load(&ncapturing) == 0)
        return PV_SUCCESS;
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = find_stream(s);
    if (cs)
        *status = cs->cap->status;
    pthread_mutex_unlock(&mu);
    return PV_SUCCESS;
}

cudaError_t pv_capture_info(cudaStream_t s, int *status, unsigned long long *id, struct pv_graph **graph,
                            struct pv_gnode *const **deps, size_t *ndeps)
{
    cudaError_t err = pv_capture_status(s, status);
    if (err != PV_SUCCESS)
        return err;
    if (id)
        *id = 0;
    if (graph)
        *graph = NULL;
    if (deps)
        *deps = NULL;
    if (ndeps)
        *ndeps = 0;
    if (*status == PV_cudaStreamCaptureStatusNone)
        return PV_SUCCESS;
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = find_stream(s);
    if (cs) {
        if (id)
            *id = cs->cap->id;
        if (graph)
            *graph = cs->cap->graph;
        if (deps)
            *deps = cs->deps;                        /* valid until the stream's next capture call */
        if (ndeps)
            *ndeps = (size_t)cs->ndeps;
    }
    pthread_mutex_unlock(&mu);
    return PV_SUCCESS;
}

cudaError_t pv_capture_update_deps(cudaStream_t s, struct pv_gnode *const *deps, const cudaGraphEdgeData *edges,
                                   size_t n, unsigned flags)
{
    if ((n && !deps) || flags > 1)
        return PV_cudaErrorInvalidValue;
    cudaError_t eerr = pv_edges_plain(edges, n);
    if (eerr != PV_SUCCESS)
        return eerr;
    pthread_mutex_lock(&mu);
    struct cap_stream *cs = (uintptr_t)s > 1 ? find_stream(s) : NULL;
    cudaError_t err = cs ? PV_SUCCESS : PV_cudaErrorIllegalState;
    for (size_t i = 0; cs && i < n; i++)
        if (!pv_gnode_of(deps[i]) || deps[i]->graph != cs->cap->graph)
            err = PV_cudaErrorInvalidValue;
    if (err == PV_SUCCESS) {
        if (flags == 0)                                  /* cudaStreamAddCaptureDependencies */
            err = merge_deps(cs, deps, (int)n) == 0 ? PV_SUCCESS : PV_cudaErrorMemoryAllocation;
        else                                             /* cudaStreamSetCaptureDependencies */
            err = set_deps(&cs->deps, &cs->ndeps, &cs->capdeps, deps, (int)n) == 0 ? PV_SUCCESS
                                                                                    : PV_cudaErrorMemoryAllocation;
    }
    pthread_mutex_unlock(&mu);
    return err;
}

/* The capture mode is a per-thread setting, one for both APIs. */
static _Thread_local int tls_capture_mode;
cudaError_t pv_capture_exchange_mode(int *mode)
{
    if (!mode || *mode < 0 || *mode > 2)
        return PV_cudaErrorInvalidValue;
    int old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return PV_SUCCESS;
}
