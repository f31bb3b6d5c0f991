/* Executable graphs: instantiation (a private copy of the graph with child graphs inlined, a topological order,
 * segments), launch, upload, update and the per-exec parameter setters.
 *
 * Segments: consecutive device-only nodes of one GPU are recorded into one frame list (core record.c) and uploaded
 * once as a daemon graph (GRAPH_CREATE); launching such a segment is one GRAPH_LAUNCH frame. Every other node (host
 * functions, copies from or to host memory, copies between GPUs) is a client action run at launch by the same code
 * that runs the API call. When consecutive segments use different GPUs the earlier GPU is synchronized first, so
 * the graph's dependencies hold across devices; the daemon serializes each device's work, so within a GPU the
 * order of the segment is enough. */
#include <stdlib.h>
#include <string.h>

#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_record.h"
#include "pv_registry.h"
#include "pv_copy.h"
#include "pv_streams.h"
#include "pv_graph.h"

enum { SEG_DEVICE, SEG_NODE };

struct pv_segment {
    int kind;
    int dev;                       /* SEG_DEVICE: the GPU; SEG_NODE: the node's GPU or -1 */
    uint64_t handle;               /* SEG_DEVICE: daemon graph */
    struct pv_gnode *node;         /* SEG_NODE */
};

struct pv_gexec {
    uint32_t magic;
    struct pv_graph *graph;        /* private, flattened copy */
    struct pv_gnode **order;       /* topological order of graph's nodes */
    int n;
    struct pv_segment *segs;
    int nsegs;
    int stale;                     /* parameters changed since the segments were uploaded */
    int mem_held;                  /* its memory nodes are counted (graph_mem.c) */
    unsigned long long flags;
    pthread_mutex_t mu;            /* one launch or update of this exec at a time */
};

struct pv_gexec *pv_gexec_of(const void *e)
{
    const struct pv_gexec *x = e;
    return (x && pv_handle_valid(x) && x->magic == PV_GEXEC_MAGIC) ? (struct pv_gexec *)x : NULL;
}

/* ------------------------------------------------------------------------------------------ running nodes */
int pv_gnode_device_only(const struct pv_gnode *n, int *dev)
{
    switch (n->type) {
    case PV_cudaGraphNodeTypeKernel:
    case PV_cudaGraphNodeTypeMemset:
    case PV_cudaGraphNodeTypeEventRecord:
    case PV_cudaGraphNodeTypeWaitEvent:
        *dev = n->dev;
        return n->dev >= 0;
    case PV_cudaGraphNodeTypeMemcpy: {
        const struct cudaMemcpy3DParms *p = &n->p.copy;
        if (p->srcArray || p->dstArray)
            return 0;                                   /* array copies run as client actions */
        int sd = pv_ptr_device(p->srcPtr.ptr), dd = pv_ptr_device(p->dstPtr.ptr);
        int kind_ok = p->kind == cudaMemcpyDeviceToDevice || p->kind == cudaMemcpyDefault;
        *dev = dd;
        return kind_ok && sd >= 0 && sd == dd;
    }
    default:
        return 0;
    }
}

cudaError_t pv_gnode_run(struct pv_gnode *n, cudaStream_t s)
{
    if (!n->enabled)
        return PV_SUCCESS;
    switch (n->type) {
    case PV_cudaGraphNodeTypeKernel: {
        struct pv_device *d = pv_device(n->dev);
        uint64_t remote = 0;
        struct pv_device *sd = NULL;
        if (!d)
            return PV_cudaErrorInvalidDevice;
        if (pv_stream_resolve(s, d, &remote, &sd) != PV_SUCCESS || sd != d)
            remote = 0;                                 /* another GPU's stream: this GPU's default stream */
        return pv_launch_send(&n->p.kernel, remote);
    }
    case PV_cudaGraphNodeTypeMemcpy:
        return pv_memcpy3d_run(&n->p.copy, s);
    case PV_cudaGraphNodeTypeMemset:
        return pv_memset_run(&n->p.memset, s);
    case PV_cudaGraphNodeTypeHost: {
        cudaError_t err = pv_stream_sync(s);      /* the host function follows the work before it */
        if (err == PV_SUCCESS)
            n->p.host.fn(n->p.host.userData);
        return err;
    }
    case PV_cudaGraphNodeTypeEventRecord:
        return pv_event_record(n->p.event, s);
    case PV_cudaGraphNodeTypeWaitEvent:
        return pv_stream_wait_run(s, n->p.event, 0);
    case PV_cudaGraphNodeTypeEmpty:
    case PV_cudaGraphNodeTypeMemAlloc:                 /* memory nodes: the launch's bookkeeping (graph_mem.c) */
    case PV_cudaGraphNodeTypeMemFree:
        return PV_SUCCESS;
    default:
        return PV_cudaErrorNotSupported;
    }
}

/* Nodes that do no work of their own at launch: they only order the others. */
static int no_work(const struct pv_gnode *n)
{
    return !n->enabled || n->type == PV_cudaGraphNodeTypeEmpty || n->type == PV_cudaGraphNodeTypeMemAlloc ||
           n->type == PV_cudaGraphNodeTypeMemFree;
}

static int has_mem_nodes(const struct pv_graph *g)
{
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->type == PV_cudaGraphNodeTypeMemAlloc || g->nodes[i]->type == PV_cudaGraphNodeTypeMemFree)
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ instantiate */
/* Replaces every child-graph node of g by the child's nodes: the child's roots take the node's dependencies and the
 * node's dependents depend on the child's leaves. Repeats until no child graph is left (nested children). */
static cudaError_t flatten(struct pv_graph *g)
{
    for (int i = 0; i < g->n; i++) {
        struct pv_gnode *cn = g->nodes[i];
        if (cn->type != PV_cudaGraphNodeTypeGraph)
            continue;
        struct pv_graph *child = cn->p.child;
        struct pv_gnode **map;
        struct pv_graph *copy;
        cudaError_t err = pv_graph_clone(child, &copy, &map);
        if (err != PV_SUCCESS)
            return err;
        /* move copy's nodes into g */
        int base = g->n;
        for (int j = 0; j < copy->n && err == PV_SUCCESS; j++) {
            struct pv_gnode *m;
            err = pv_gnode_add(g, copy->nodes[j]->type, NULL, 0, &m);
            if (err == PV_SUCCESS) {
                err = pv_gnode_copy_params(m, copy->nodes[j]);
                m->orig = NULL;                         /* not addressable through the parent's exec */
                if (err != PV_SUCCESS)
                    m->type = PV_cudaGraphNodeTypeEmpty;
            }
        }
        for (int j = 0; j < copy->n && err == PV_SUCCESS; j++) {
            struct pv_gnode *src = child->nodes[j], *m = g->nodes[base + j];
            for (int k = 0; k < src->ndeps && err == PV_SUCCESS; k++)
                for (int q = 0; q < child->n; q++)
                    if (child->nodes[q] == src->deps[k])
                        err = pv_gnode_add_dep(m, g->nodes[base + q]);
            if (!src->ndeps)                            /* a root of the child: after the node's dependencies */
                for (int k = 0; k < cn->ndeps && err == PV_SUCCESS; k++)
                    err = pv_gnode_add_dep(m, cn->deps[k]);
        }
        free(map);
        pv_graph_free(copy);
        if (err != PV_SUCCESS)
            return err;
        /* dependents of the child node now depend on every node of the child (its leaves suffice; all is exact) */
        for (int j = 0; j < base && err == PV_SUCCESS; j++) {
            struct pv_gnode *m = g->nodes[j];
            if (!pv_graph_has_edge(cn, m))
                continue;
            for (int q = base; q < g->n && err == PV_SUCCESS; q++)
                err = pv_gnode_add_dep(m, g->nodes[q]);
        }
        if (err != PV_SUCCESS)
            return err;
        pv_gnode_destroy(cn);
        i = -1;                                          /* start over: the node array changed */
    }
    return PV_SUCCESS;
}

/* Kahn's algorithm, ties broken by creation order so a captured stream replays in its own order. */
static cudaError_t topo_order(struct pv_graph *g, struct pv_gnode ***out)
{
    int n = g->n;
    struct pv_gnode **order = malloc(sizeof *order * (size_t)(n ? n : 1));
    int *indeg = calloc((size_t)(n ? n : 1), sizeof *indeg);
    char *done = calloc((size_t)(n ? n : 1), 1);
    if (!order || !indeg || !done) {
        free(order); free(indeg); free(done);
        return PV_cudaErrorMemoryAllocation;
    }
    for (int i = 0; i < n; i++)
        indeg[i] = g->nodes[i]->ndeps;
    for (int k = 0; k < n; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!done[i] && indeg[i] == 0 && (best < 0 || g->nodes[i]->index < g->nodes[best]->index))
                best = i;
        if (best < 0) {                                  /* a cycle */
            free(order); free(indeg); free(done);
            return PV_cudaErrorInvalidValue;
        }
        done[best] = 1;
        order[k] = g->nodes[best];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i]->ndeps; j++)
                if (g->nodes[i]->deps[j] == g->nodes[best])
                    indeg[i]--;
    }
    free(indeg);
    free(done);
    *out = order;
    return PV_SUCCESS;
}

static void drop_segments(struct pv_gexec *x)
{
    for (int i = 0; i < x->nsegs; i++)
        if (x->segs[i].kind == SEG_DEVICE && x->segs[i].handle) {
            struct pv_device *d = pv_device(x->segs[i].dev);
            if (d)
                (void)pv_send_GRAPH_DESTROY(d, x->segs[i].handle);
        }
    free(x->segs);
    x->segs = NULL;
    x->nsegs = 0;
}

static cudaError_t push_segment(struct pv_gexec *x, struct pv_segment s, int *cap)
{
    if (x->nsegs == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        struct pv_segment *p = realloc(x->segs, (size_t)nc * sizeof *p);
        if (!p)
            return PV_cudaErrorMemoryAllocation;
        x->segs = p;
        *cap = nc;
    }
    x->segs[x->nsegs++] = s;
    return PV_SUCCESS;
}

/* Records nodes order[from..to) (device-only, all on GPU dev) and uploads them as one daemon graph. */
static cudaError_t upload(struct pv_gexec *x, int from, int to, int dev, uint64_t *handle)
{
    struct pv_device *d = pv_device(dev);
    if (!d)
        return PV_cudaErrorInvalidDevice;
    /* modules must be loaded before recording: a module load is a call with a reply, never recorded */
    for (int i = from; i < to; i++)
        if (x->order[i]->type == PV_cudaGraphNodeTypeKernel) {
            cudaError_t err = pv_module_ensure(x->order[i]->p.kernel.func->fb, d);
            if (err != PV_SUCCESS)
                return err;
        }
    struct pv_recorder rec = { 0 };
    cudaError_t err = PV_SUCCESS;
    pv_record_begin(&rec);
    for (int i = from; i < to && err == PV_SUCCESS; i++)
        err = pv_gnode_run(x->order[i], NULL);
    pv_record_end();
    if (err == PV_SUCCESS)
        err = rec.err;
    if (err == PV_SUCCESS && (rec.ndev > 1 || (rec.ndev == 1 && rec.per_dev[0].dev != d)))
        err = PV_cudaErrorUnknown;                      /* a device-only node reached another GPU: a bug */
    if (err == PV_SUCCESS && rec.ndev && rec.per_dev[0].count > PV_MAX_GRAPH_OPS)
        err = PV_cudaErrorNotSupported;
    *handle = 0;
    if (err == PV_SUCCESS && rec.ndev)
        err = pv_call_GRAPH_CREATE(d, rec.per_dev[0].data, rec.per_dev[0].len, handle);
    pv_recorder_free(&rec);
    return err;
}

static cudaError_t build_segments(struct pv_gexec *x)
{
    int cap = 0;
    cudaError_t err = PV_SUCCESS;
    for (int i = 0; i < x->n && err == PV_SUCCESS;) {
        int dev;
        struct pv_gnode *n = x->order[i];
        if (no_work(n)) {
            i++;
            continue;
        }
        if (!pv_gnode_device_only(n, &dev)) {
            err = push_segment(x, (struct pv_segment){ SEG_NODE, n->dev, 0, n }, &cap);
            i++;
            continue;
        }
        int j = i + 1, d2;
        while (j < x->n && (no_work(x->order[j]) || (pv_gnode_device_only(x->order[j], &d2) && d2 == dev)))
            j++;
        uint64_t h;
        err = upload(x, i, j, dev, &h);
        if (err == PV_SUCCESS && h)
            err = push_segment(x, (struct pv_segment){ SEG_DEVICE, dev, h, NULL }, &cap);
        i = j;
    }
    if (err != PV_SUCCESS)
        drop_segments(x);
    else
        x->stale = 0;
    return err;
}

static void exec_free(struct pv_gexec *x)
{
    if (x->mem_held)
        pv_gmem_exec_hold(x->graph->nodes, x->graph->n, -1);
    drop_segments(x);
    free(x->order);
    pv_graph_free(x->graph);
    pthread_mutex_destroy(&x->mu);
    x->magic = 0;
    free(x);
}

cudaError_t pv_graph_instantiate(struct pv_gexec **out, struct pv_graph *g, unsigned long long flags,
                                 struct pv_gnode **err_node, int *result)
{
    *result = PV_cudaGraphInstantiateError;
    if (err_node)
        *err_node = NULL;
    if (!out || !pv_graph_of(g))
        return PV_cudaErrorInvalidValue;
    if (flags & ~(unsigned long long)(PV_cudaGraphInstantiateFlagAutoFreeOnLaunch | PV_cudaGraphInstantiateFlagUpload |
                                      PV_cudaGraphInstantiateFlagUseNodePriority))
        return PV_cudaErrorInvalidValue;                /* device launch needs the device runtime */
    struct pv_gexec *x = calloc(1, sizeof *x);
    if (!x)
        return PV_cudaErrorMemoryAllocation;
    x->magic = PV_GEXEC_MAGIC;
    x->flags = flags;
    pthread_mutex_init(&x->mu, NULL);
    cudaError_t err = pv_gmem_instantiate(g);
    if (err == PV_SUCCESS)
        err = pv_graph_clone(g, &x->graph, NULL);
    if (err == PV_SUCCESS)
        err = flatten(x->graph);
    for (int i = 0; err == PV_SUCCESS && i < x->graph->n; i++)
        if (x->graph->nodes[i]->type > PV_cudaGraphNodeTypeEventRecord &&
            x->graph->nodes[i]->type != PV_cudaGraphNodeTypeMemAlloc &&
            x->graph->nodes[i]->type != PV_cudaGraphNodeTypeMemFree) {
            if (err_node)
                *err_node = x->graph->nodes[i]->orig;
            *result = PV_cudaGraphInstantiateNodeOperationNotSupported;
            err = PV_cudaErrorNotSupported;
        }
    if (err == PV_SUCCESS) {
        x->n = x->graph->n;
        err = topo_order(x->graph, &x->order);
        if (err == PV_cudaErrorInvalidValue)
            *result = PV_cudaGraphInstantiateInvalidStructure;
    }
    if (err == PV_SUCCESS)
        err = build_segments(x);
    if (err == PV_SUCCESS) {
        pv_gmem_exec_hold(x->graph->nodes, x->graph->n, 1);
        x->mem_held = 1;
    }
    if (err != PV_SUCCESS) {
        exec_free(x);
        return err;
    }
    pv_handle_add(x);
    *result = PV_cudaGraphInstantiateSuccess;
    *out = x;
    return PV_SUCCESS;
}

unsigned long long pv_gexec_flags(const struct pv_gexec *x) { return x->flags; }

cudaError_t pv_gexec_destroy(struct pv_gexec *x)
{
    if (!pv_gexec_of(x) || pv_handle_remove(x) != 0)
        return PV_cudaErrorInvalidValue;
    exec_free(x);
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ launch */
static cudaError_t launch_locked(struct pv_gexec *x, cudaStream_t s)
{
    cudaError_t err = pv_gmem_launch(x->order, x->n, (x->flags & PV_cudaGraphInstantiateFlagAutoFreeOnLaunch) != 0);
    if (err == PV_SUCCESS && x->stale) {
        drop_segments(x);
        err = build_segments(x);
    }
    int prev = -1;
    for (int i = 0; i < x->nsegs && err == PV_SUCCESS; i++) {
        struct pv_segment *g = &x->segs[i];
        struct pv_device *pd = prev >= 0 ? pv_device(prev) : NULL;
        if (pd && g->dev != prev)                       /* work on another GPU waits for this one's */
            err = pv_call_DEVICE_SYNC(pd);
        if (err != PV_SUCCESS)
            break;
        if (g->kind == SEG_DEVICE) {
            struct pv_device *d = pv_device(g->dev), *sd = NULL;
            uint64_t remote = 0;
            if (pv_stream_resolve(s, d, &remote, &sd) != PV_SUCCESS || sd != d)
                remote = 0;
            err = pv_send_GRAPH_LAUNCH(d, g->handle, remote);
        } else {
            err = pv_gnode_run(g->node, s);
        }
        if (g->dev >= 0)
            prev = g->dev;
    }
    return err;
}

/* The exec and stream arguments of a launch or upload, checked. */
static cudaError_t exec_on_stream(struct pv_gexec *x, cudaStream_t s)
{
    if (!pv_gexec_of(x))
        return PV_cudaErrorInvalidValue;
    return pv_stream_ok(s) ? PV_SUCCESS : PV_cudaErrorInvalidResourceHandle;
}

cudaError_t pv_graph_launch(struct pv_gexec *x, cudaStream_t s)
{
    cudaError_t err = exec_on_stream(x, s);
    if (err != PV_SUCCESS)
        return err;
    if (pv_capturing(s)) {                               /* launching into a capture embeds the graph */
        struct pv_gnode *n = NULL;
        if (has_mem_nodes(x->graph))
            return PV_cudaErrorNotSupported;            /* its allocations cannot belong to two graphs */
        err = pv_capture_node(s, PV_cudaGraphNodeTypeGraph, &n);
        if (err == PV_SUCCESS)
            err = pv_graph_clone(x->graph, &n->p.child, NULL);
        if (err != PV_SUCCESS && n)
            n->type = PV_cudaGraphNodeTypeEmpty;
        return err;
    }
    pthread_mutex_lock(&x->mu);
    err = launch_locked(x, s);
    pthread_mutex_unlock(&x->mu);
    return err;
}

/* Segments are uploaded at instantiation; an upload call only refreshes them after parameter changes. */
cudaError_t pv_graph_upload(struct pv_gexec *x, cudaStream_t s)
{
    cudaError_t err = exec_on_stream(x, s);
    if (err != PV_SUCCESS)
        return err;
    pthread_mutex_lock(&x->mu);
    if (x->stale) {
        drop_segments(x);
        err = build_segments(x);
    }
    pthread_mutex_unlock(&x->mu);
    return err;
}

/* ------------------------------------------------------------------------------------------ updates */
/* The exec's copy of node `orig` (a node of the graph it was instantiated from). */
static struct pv_gnode *exec_node(struct pv_gexec *x, const struct pv_gnode *orig)
{
    for (int i = 0; i < x->n; i++)
        if (x->order[i]->orig == orig)
            return x->order[i];
    return NULL;
}

/* One per-exec change: set(copy of orig, arg) under the exec's lock; the segments are rebuilt lazily. */
struct exec_change {
    int type;                      /* the node type it applies to; -1: any */
    cudaError_t (*set)(struct pv_gnode *n, const void *arg);
    const void *arg;
};

static cudaError_t exec_apply(struct pv_gexec *x, struct pv_gnode *orig, const struct exec_change *c)
{
    if (!pv_gexec_of(x) || !pv_gnode_of(orig))
        return PV_cudaErrorInvalidValue;
    pthread_mutex_lock(&x->mu);
    struct pv_gnode *n = exec_node(x, orig);
    cudaError_t err = n && (c->type < 0 || n->type == c->type) ? c->set(n, c->arg) : PV_cudaErrorInvalidValue;
    if (err == PV_SUCCESS)
        x->stale = 1;
    pthread_mutex_unlock(&x->mu);
    return err;
}

struct kernel_args { struct pv_func *f; dim3 grid, block; size_t shmem; void **args, **extra; };

static cudaError_t set_kernel(struct pv_gnode *n, const void *arg)
{
    const struct kernel_args *k = arg;
    return pv_gnode_set_kernel(n, k->f, n->dev, k->grid, k->block, k->shmem, k->args, k->extra);
}

cudaError_t pv_gexec_set_kernel(struct pv_gexec *x, struct pv_gnode *orig, struct pv_func *f, dim3 grid, dim3 block,
                                size_t shmem, void **args, void **extra)
{
    struct kernel_args k = { f, grid, block, shmem, args, extra };
    return exec_apply(x, orig, &(struct exec_change){ PV_cudaGraphNodeTypeKernel, set_kernel, &k });
}

cudaError_t pv_gexec_set(struct pv_gexec *x, struct pv_gnode *orig, int type, const void *p)
{
    if (type != PV_cudaGraphNodeTypeMemcpy && type != PV_cudaGraphNodeTypeMemset && type != PV_cudaGraphNodeTypeHost)
        return PV_cudaErrorInvalidValue;
    return exec_apply(x, orig, &(struct exec_change){ type, pv_gnode_set, p });
}

static cudaError_t set_event(struct pv_gnode *n, const void *arg)
{
    cudaEvent_t e = (cudaEvent_t)arg;
    if (!pv_event_ok(e) || e->dev != n->dev)
        return PV_cudaErrorInvalidValue;
    n->p.event = e;
    return PV_SUCCESS;
}

cudaError_t pv_gexec_set_event(struct pv_gexec *x, struct pv_gnode *orig, int type, cudaEvent_t e)
{
    return exec_apply(x, orig, &(struct exec_change){ type, set_event, e });
}

static cudaError_t set_enabled(struct pv_gnode *n, const void *arg)
{
    if (n->type != PV_cudaGraphNodeTypeKernel && n->type != PV_cudaGraphNodeTypeMemcpy &&
        n->type != PV_cudaGraphNodeTypeMemset)
        return PV_cudaErrorInvalidValue;
    n->enabled = arg != NULL;
    return PV_SUCCESS;
}

cudaError_t pv_gexec_enable(struct pv_gexec *x, struct pv_gnode *orig, unsigned on)
{
    return exec_apply(x, orig, &(struct exec_change){ -1, set_enabled, on ? x : NULL });
}

cudaError_t pv_gexec_enabled(struct pv_gexec *x, struct pv_gnode *orig, unsigned *on)
{
    struct pv_gnode *n = NULL;
    if (pv_gexec_of(x) && pv_gnode_of(orig) && on) {
        pthread_mutex_lock(&x->mu);
        n = exec_node(x, orig);
        if (n)
            *on = (unsigned)n->enabled;
        pthread_mutex_unlock(&x->mu);
    }
    return n ? PV_SUCCESS : PV_cudaErrorInvalidValue;
}

/* cudaGraphExecUpdate where the topology is unchanged: the same node count, types and edges in creation order
 * (what capturing the same code again produces). The exec takes the new graph's parameters; anything else is
 * refused with the reason CUDA gives, and the exec is left as it was. */
static int pos_in(const struct pv_graph *g, const struct pv_gnode *n)
{
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i] == n)
            return i;
    return -1;
}

static int same_topology(const struct pv_graph *a, const struct pv_graph *b, int *why, int *bad)
{
    *why = PV_cudaGraphExecUpdateErrorTopologyChanged;
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++) {
        const struct pv_gnode *x = a->nodes[i], *y = b->nodes[i];
        *bad = i;
        if (x->type != y->type) {
            *why = PV_cudaGraphExecUpdateErrorNodeTypeChanged;
            return 0;
        }
        if (x->ndeps != y->ndeps)
            return 0;
        for (int j = 0; j < x->ndeps; j++) {
            int found = 0;
            for (int k = 0; k < y->ndeps && !found; k++)
                found = pos_in(a, x->deps[j]) == pos_in(b, y->deps[k]);
            if (!found)
                return 0;
        }
        if (x->dev != y->dev) {                          /* work moved to another GPU */
            *why = PV_cudaGraphExecUpdateErrorUnsupportedFunctionChange;
            return 0;
        }
    }
    return 1;
}

cudaError_t pv_gexec_update(struct pv_gexec *x, struct pv_graph *g, int *result, struct pv_gnode **err_node)
{
    *result = PV_cudaGraphExecUpdateError;
    *err_node = NULL;
    if (!pv_gexec_of(x) || !pv_graph_of(g))
        return PV_cudaErrorInvalidValue;
    if (has_mem_nodes(x->graph) || pv_gmem_restricted(g)) {
        *result = PV_cudaGraphExecUpdateErrorNotSupported;
        return PV_cudaErrorGraphExecUpdateFailure;       /* graphs with memory nodes cannot be updated */
    }
    pthread_mutex_lock(&x->mu);
    struct pv_graph *fresh = NULL;
    cudaError_t err = pv_graph_clone(g, &fresh, NULL);
    if (err == PV_SUCCESS)
        err = flatten(fresh);
    int why = PV_cudaGraphExecUpdateError, bad = -1;
    if (err == PV_SUCCESS && !same_topology(x->graph, fresh, &why, &bad)) {
        *result = why;
        *err_node = bad >= 0 && bad < g->n ? g->nodes[bad] : NULL;
        err = PV_cudaErrorGraphExecUpdateFailure;
    }
    if (err == PV_SUCCESS) {
        /* take the new parameters node by node; the exec keeps its own node identities (orig links) */
        for (int i = 0; i < fresh->n && err == PV_SUCCESS; i++) {
            struct pv_gnode *mine = x->graph->nodes[i];
            pv_gnode_release(mine);
            err = pv_gnode_copy_params(mine, fresh->nodes[i]);
            if (err != PV_SUCCESS)
                mine->type = PV_cudaGraphNodeTypeEmpty;
        }
        x->stale = 1;
        *result = err == PV_SUCCESS ? PV_cudaGraphExecUpdateSuccess : PV_cudaGraphExecUpdateError;
    }
    pv_graph_free(fresh);
    pthread_mutex_unlock(&x->mu);
    return err;
}
