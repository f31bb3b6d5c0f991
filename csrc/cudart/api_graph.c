/* CUDA graphs, the object model and the explicit API: graphs, nodes of every kind libvcudart can run (kernel,
 * memcpy, memset, host, child graph, empty, event record/wait), dependencies, queries, clones. Graphs are client
 * objects; nothing reaches a daemon before instantiation (graph_exec.c). Like CUDA's, a graph object is not
 * thread-safe: concurrent calls on one graph must be serialized by the program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* ------------------------------------------------------------------------------------------ objects */
struct pv_graph *pv_graph_of(cudaGraph_t g)
{
    return (g && pv_handle_valid(g) && g->magic == PV_GRAPH_MAGIC) ? g : NULL;
}

struct pv_gnode *pv_gnode_of(cudaGraphNode_t n)
{
    return (n && pv_handle_valid(n) && n->magic == PV_GNODE_MAGIC) ? n : NULL;
}

cudaError_t pv_graph_new(struct pv_graph **out)
{
    struct pv_graph *g = calloc(1, sizeof *g);
    if (!g)
        return PV_cudaErrorMemoryAllocation;
    g->magic = PV_GRAPH_MAGIC;
    pv_handle_add(g);
    *out = g;
    return PV_SUCCESS;
}

void pv_gnode_release(struct pv_gnode *n)
{
    if (n->type == PV_cudaGraphNodeTypeKernel)
        pv_launch_free(&n->p.kernel);
    else if (n->type == PV_cudaGraphNodeTypeGraph && n->p.child)
        pv_graph_free(n->p.child);
    free(n->kparams);
    n->kparams = NULL;
}

static void node_free(struct pv_gnode *n)
{
    pv_handle_remove(n);
    pv_gnode_release(n);
    free(n->deps);
    n->magic = 0;
    free(n);
}

void pv_graph_free(struct pv_graph *g)
{
    if (!g)
        return;
    pv_handle_remove(g);
    for (int i = 0; i < g->n; i++)
        node_free(g->nodes[i]);
    free(g->nodes);
    g->magic = 0;
    free(g);
}

int pv_graph_has_edge(const struct pv_gnode *from, const struct pv_gnode *to)
{
    for (int i = 0; i < to->ndeps; i++)
        if (to->deps[i] == from)
            return 1;
    return 0;
}

cudaError_t pv_gnode_add_dep(struct pv_gnode *to, struct pv_gnode *from)
{
    if (to->ndeps == to->capdeps) {
        int nc = to->capdeps ? to->capdeps * 2 : 4;
        struct pv_gnode **p = realloc(to->deps, (size_t)nc * sizeof *p);
        if (!p)
            return PV_cudaErrorMemoryAllocation;
        to->deps = p;
        to->capdeps = nc;
    }
    to->deps[to->ndeps++] = from;
    return PV_SUCCESS;
}

cudaError_t pv_gnode_add(struct pv_graph *g, int type, struct pv_gnode *const *deps, size_t ndeps,
                         struct pv_gnode **out)
{
    if (ndeps && !deps)
        return PV_cudaErrorInvalidValue;
    for (size_t i = 0; i < ndeps; i++) {
        if (!pv_gnode_of(deps[i]) || deps[i]->graph != g)
            return PV_cudaErrorInvalidValue;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i])
                return PV_cudaErrorInvalidValue;      /* CUDA refuses duplicate dependencies */
    }
    if (g->n == g->cap) {
        int nc = g->cap ? g->cap * 2 : 16;
        struct pv_gnode **p = realloc(g->nodes, (size_t)nc * sizeof *p);
        if (!p)
            return PV_cudaErrorMemoryAllocation;
        g->nodes = p;
        g->cap = nc;
    }
    struct pv_gnode *n = calloc(1, sizeof *n);
    if (!n)
        return PV_cudaErrorMemoryAllocation;
    n->magic = PV_GNODE_MAGIC;
    n->type = type;
    n->graph = g;
    n->index = g->next_index++;
    n->dev = -1;
    n->enabled = 1;
    for (size_t i = 0; i < ndeps; i++)
        if (pv_gnode_add_dep(n, deps[i]) != PV_SUCCESS) {
            free(n->deps);
            free(n);
            return PV_cudaErrorMemoryAllocation;
        }
    g->nodes[g->n++] = n;
    pv_handle_add(n);
    *out = n;
    return PV_SUCCESS;
}

/* Removes n from its graph: every edge into and out of it goes, then the node. */
static void node_destroy(struct pv_gnode *n)
{
    struct pv_graph *g = n->graph;
    for (int i = 0; i < g->n; i++) {
        struct pv_gnode *m = g->nodes[i];
        int k = 0;
        for (int j = 0; j < m->ndeps; j++)
            if (m->deps[j] != n)
                m->deps[k++] = m->deps[j];
        m->ndeps = k;
    }
    int k = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i] != n)
            g->nodes[k++] = g->nodes[i];
    g->n = k;
    node_free(n);
}

cudaError_t pv_gnode_copy_params(struct pv_gnode *dst, const struct pv_gnode *src)
{
    dst->type = src->type;
    dst->dev = src->dev;
    dst->enabled = src->enabled;
    dst->p = src->p;
    if (src->type == PV_cudaGraphNodeTypeKernel) {
        size_t n = src->p.kernel.param_bytes;
        dst->p.kernel.params = malloc(n ? n : 1);
        if (!dst->p.kernel.params)
            return PV_cudaErrorMemoryAllocation;
        memcpy(dst->p.kernel.params, src->p.kernel.params, n);
    } else if (src->type == PV_cudaGraphNodeTypeGraph) {
        dst->p.child = NULL;
        return pv_graph_clone(src->p.child, &dst->p.child, NULL);
    }
    return PV_SUCCESS;
}

static int node_pos(const struct pv_graph *g, const struct pv_gnode *n)
{
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i] == n)
            return i;
    return -1;
}

cudaError_t pv_graph_clone(const struct pv_graph *g, struct pv_graph **out, struct pv_gnode ***map)
{
    struct pv_graph *c;
    cudaError_t err = pv_graph_new(&c);
    if (err != PV_SUCCESS)
        return err;
    struct pv_gnode **m = calloc((size_t)(g->n ? g->n : 1), sizeof *m);
    if (!m) {
        pv_graph_free(c);
        return PV_cudaErrorMemoryAllocation;
    }
    for (int i = 0; i < g->n && err == PV_SUCCESS; i++) {
        const struct pv_gnode *src = g->nodes[i];
        err = pv_gnode_add(c, src->type, NULL, 0, &m[i]);
        if (err == PV_SUCCESS) {
            m[i]->orig = (struct pv_gnode *)src;
            m[i]->index = src->index;
            err = pv_gnode_copy_params(m[i], src);
            if (err != PV_SUCCESS)
                m[i]->type = PV_cudaGraphNodeTypeEmpty;   /* nothing owned to free */
        }
    }
    c->next_index = g->next_index;
    for (int i = 0; i < g->n && err == PV_SUCCESS; i++)
        for (int j = 0; j < g->nodes[i]->ndeps && err == PV_SUCCESS; j++)
            err = pv_gnode_add_dep(m[i], m[node_pos(g, g->nodes[i]->deps[j])]);
    if (err != PV_SUCCESS) {
        free(m);
        pv_graph_free(c);
        return err;
    }
    if (map)
        *map = m;
    else
        free(m);
    *out = c;
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ node params */
cudaError_t pv_gnode_set_kernel(struct pv_gnode *n, const struct cudaKernelNodeParams *p, int dev)
{
    if (!p)
        return PV_cudaErrorInvalidValue;
    struct pv_func *f = pv_func_of(p->func);
    if (!f)
        return PV_cudaErrorInvalidDeviceFunction;
    struct pv_device *d = pv_device(dev);
    if (!d)
        return PV_cudaErrorInvalidDevice;
    struct pv_kernel_launch k;
    cudaError_t err = pv_launch_prepare(f, d, p->gridDim, p->blockDim, p->kernelParams, p->extra,
                                        p->sharedMemBytes, &k);
    if (err != PV_SUCCESS)
        return err;
    if (n->type == PV_cudaGraphNodeTypeKernel)
        pv_launch_free(&n->p.kernel);
    free(n->kparams);
    n->kparams = NULL;
    n->p.kernel = k;
    n->dev = dev;
    return PV_SUCCESS;
}

cudaError_t pv_gnode_set_memset(struct pv_gnode *n, const struct cudaMemsetParams *p)
{
    if (!p || !p->dst || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) ||
        (p->height > 1 && p->width * p->elementSize > p->pitch))
        return PV_cudaErrorInvalidValue;
    int dev = pv_ptr_device(p->dst);
    if (dev < 0)
        return PV_cudaErrorInvalidValue;
    n->p.memset = *p;
    n->dev = dev;
    return PV_SUCCESS;
}

cudaError_t pv_gnode_set_copy(struct pv_gnode *n, const struct cudaMemcpy3DParms *p)
{
    if (!p || p->kind < 0 || p->kind > cudaMemcpyDefault)
        return p ? PV_cudaErrorInvalidMemcpyDirection : PV_cudaErrorInvalidValue;
    if ((!p->srcArray && !p->srcPtr.ptr) || (!p->dstArray && !p->dstPtr.ptr))
        return PV_cudaErrorInvalidValue;
    n->p.copy = *p;
    int dd = pv_ptr_device(p->dstPtr.ptr), sd = pv_ptr_device(p->srcPtr.ptr);
    n->dev = dd >= 0 ? dd : sd;
    return PV_SUCCESS;
}

cudaError_t pv_gnode_set(struct pv_gnode *n, const void *p)
{
    switch (n->type) {
    case PV_cudaGraphNodeTypeMemcpy:
        return pv_gnode_set_copy(n, p);
    case PV_cudaGraphNodeTypeMemset:
        return pv_gnode_set_memset(n, p);
    default:
        return PV_cudaErrorInvalidValue;
    }
}

void pv_copy1d_params(struct cudaMemcpy3DParms *p, void *dst, const void *src, size_t count, int kind)
{
    memset(p, 0, sizeof *p);
    p->srcPtr = (struct cudaPitchedPtr){ (void *)src, count, count, 1 };
    p->dstPtr = (struct cudaPitchedPtr){ dst, count, count, 1 };
    p->extent = (struct cudaExtent){ count, 1, 1 };
    p->kind = kind;
}

/* ------------------------------------------------------------------------------------------ graphs */
PV_API cudaError_t cudaGraphCreate(cudaGraph_t *pg, unsigned flags)
{
    if (!pg || flags)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_graph_new(pg));
}

PV_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g)
        return pv_ret(PV_cudaErrorInvalidValue);
    pv_graph_free(g);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphClone(cudaGraph_t *out, cudaGraph_t graph)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!out || !g)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_graph_clone(g, out, NULL));
}

PV_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *out, cudaGraphNode_t orig, cudaGraph_t clone)
{
    struct pv_graph *c = pv_graph_of(clone);
    struct pv_gnode *o = pv_gnode_of(orig);
    if (!out || !c || !o)
        return pv_ret(PV_cudaErrorInvalidValue);
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i]->orig == o) {
            *out = c->nodes[i];
            return PV_SUCCESS;
        }
    return pv_ret(PV_cudaErrorInvalidValue);
}

/* The graph and dependency list of an add-node call, checked. */
static cudaError_t add_node(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                            int type, struct pv_gnode **node)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!out || !g)
        return PV_cudaErrorInvalidValue;
    return pv_gnode_add(g, type, (struct pv_gnode *const *)deps, n, node);
}

/* Undo of add_node when the node's parameters are refused. */
static cudaError_t drop_node(struct pv_gnode *n, cudaError_t err)
{
    n->type = PV_cudaGraphNodeTypeEmpty;
    node_destroy(n);
    return err;
}

static cudaError_t current_device(int *dev)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err == PV_SUCCESS)
        *dev = d->index;
    return err;
}

PV_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t ndeps, const struct cudaKernelNodeParams *p)
{
    int dev;
    cudaError_t err = current_device(&dev);
    struct pv_gnode *n;
    if (err == PV_SUCCESS)
        err = add_node(out, graph, deps, ndeps, PV_cudaGraphNodeTypeKernel, &n);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    n->p.kernel.params = NULL;
    err = pv_gnode_set_kernel(n, p, dev);
    if (err != PV_SUCCESS)
        return pv_ret(drop_node(n, err));
    *out = n;
    return PV_SUCCESS;
}

static struct pv_gnode *typed(cudaGraphNode_t node, int type)
{
    struct pv_gnode *n = pv_gnode_of(node);
    return n && n->type == type ? n : NULL;
}

PV_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *p)
{
    struct pv_gnode *n = typed(node, PV_cudaGraphNodeTypeKernel);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_device *d = pv_device(n->dev);
    struct pv_kinfo *ki = d ? n->p.kernel.func->dev[d->index] : NULL;
    if (ki && !n->kparams) {
        n->kparams = calloc((size_t)(ki->nparams ? ki->nparams : 1), sizeof *n->kparams);
        if (!n->kparams)
            return pv_ret(PV_cudaErrorMemoryAllocation);
        for (int i = 0; i < ki->nparams; i++)
            n->kparams[i] = n->p.kernel.params + ki->params[i][0];
    }
    memset(p, 0, sizeof *p);
    p->func = (void *)n->p.kernel.func->host_fun;
    p->gridDim = n->p.kernel.grid;
    p->blockDim = n->p.kernel.block;
    p->sharedMemBytes = (unsigned)n->p.kernel.shmem;
    p->kernelParams = n->kparams;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *p)
{
    struct pv_gnode *n = typed(node, PV_cudaGraphNodeTypeKernel);
    if (!n)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_gnode_set_kernel(n, p, n->dev));
}

/* A memcpy or memset node with its parameters (pv_gnode_set), or nothing when they are refused. */
static cudaError_t add_with_params(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                   size_t ndeps, int type, const void *p)
{
    struct pv_gnode *n;
    cudaError_t err = add_node(out, graph, deps, ndeps, type, &n);
    if (err != PV_SUCCESS)
        return err;
    err = pv_gnode_set(n, p);
    if (err != PV_SUCCESS)
        return drop_node(n, err);
    *out = n;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t ndeps, const struct cudaMemcpy3DParms *p)
{
    return pv_ret(add_with_params(out, graph, deps, ndeps, PV_cudaGraphNodeTypeMemcpy, p));
}

PV_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                            size_t ndeps, void *dst, const void *src, size_t count, int kind)
{
    struct cudaMemcpy3DParms p;
    pv_copy1d_params(&p, dst, src, count, kind);
    return cudaGraphAddMemcpyNode(out, graph, deps, ndeps, &p);
}

/* The device address of symbol + offset on the current device, n bytes checked. */
static cudaError_t symbol_ptr(const void *symbol, size_t n, size_t offset, void **out)
{
    void *base;
    size_t size;
    cudaError_t err = cudaGetSymbolAddress(&base, symbol);
    if (err == PV_SUCCESS)
        err = cudaGetSymbolSize(&size, symbol);
    if (err != PV_SUCCESS)
        return err;
    if (offset > size || n > size - offset)
        return PV_cudaErrorInvalidValue;
    *out = (char *)base + offset;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t *out, cudaGraph_t graph,
                                                  const cudaGraphNode_t *deps, size_t ndeps, const void *symbol,
                                                  const void *src, size_t count, size_t offset, int kind)
{
    void *dst;
    cudaError_t err = symbol_ptr(symbol, count, offset, &dst);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    return cudaGraphAddMemcpyNode1D(out, graph, deps, ndeps, dst, src, count, kind);
}

PV_API cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t *out, cudaGraph_t graph,
                                                    const cudaGraphNode_t *deps, size_t ndeps, void *dst,
                                                    const void *symbol, size_t count, size_t offset, int kind)
{
    void *src;
    cudaError_t err = symbol_ptr(symbol, count, offset, &src);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    return cudaGraphAddMemcpyNode1D(out, graph, deps, ndeps, dst, src, count, kind);
}

PV_API cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *p)
{
    struct pv_gnode *n = typed(node, PV_cudaGraphNodeTypeMemcpy);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    *p = n->p.copy;
    return PV_SUCCESS;
}

/* The Set form of a memcpy or memset node. */
static cudaError_t set_params(cudaGraphNode_t node, int type, const void *p)
{
    struct pv_gnode *n = typed(node, type);
    return n ? pv_gnode_set(n, p) : PV_cudaErrorInvalidValue;
}

PV_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *p)
{
    return pv_ret(set_params(node, PV_cudaGraphNodeTypeMemcpy, p));
}

PV_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src, size_t count,
                                                  int kind)
{
    struct cudaMemcpy3DParms p;
    pv_copy1d_params(&p, dst, src, count, kind);
    return cudaGraphMemcpyNodeSetParams(node, &p);
}

PV_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t ndeps, const struct cudaMemsetParams *p)
{
    return pv_ret(add_with_params(out, graph, deps, ndeps, PV_cudaGraphNodeTypeMemset, p));
}

PV_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *p)
{
    struct pv_gnode *n = typed(node, PV_cudaGraphNodeTypeMemset);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    *p = n->p.memset;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *p)
{
    return pv_ret(set_params(node, PV_cudaGraphNodeTypeMemset, p));
}

PV_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                        size_t ndeps, const struct cudaHostNodeParams *p)
{
    if (!p || !p->fn)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_gnode *n;
    cudaError_t err = add_node(out, graph, deps, ndeps, PV_cudaGraphNodeTypeHost, &n);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    n->p.host = *p;
    *out = n;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *p)
{
    struct pv_gnode *n = typed(node, PV_cudaGraphNodeTypeHost);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    *p = n->p.host;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *p)
{
    struct pv_gnode *n = typed(node, PV_cudaGraphNodeTypeHost);
    if (!n || !p || !p->fn)
        return pv_ret(PV_cudaErrorInvalidValue);
    n->p.host = *p;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                              size_t ndeps, cudaGraph_t child)
{
    struct pv_graph *c = pv_graph_of(child);
    if (!c || child == graph)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_gnode *n;
    cudaError_t err = add_node(out, graph, deps, ndeps, PV_cudaGraphNodeTypeGraph, &n);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    n->p.child = NULL;
    err = pv_graph_clone(c, &n->p.child, NULL);       /* CUDA embeds a copy of the child */
    if (err != PV_SUCCESS)
        return pv_ret(drop_node(n, err));
    *out = n;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *out)
{
    struct pv_gnode *n = typed(node, PV_cudaGraphNodeTypeGraph);
    if (!n || !out)
        return pv_ret(PV_cudaErrorInvalidValue);
    *out = n->p.child;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                         size_t ndeps)
{
    struct pv_gnode *n;
    cudaError_t err = add_node(out, graph, deps, ndeps, PV_cudaGraphNodeTypeEmpty, &n);
    if (err == PV_SUCCESS)
        *out = n;
    return pv_ret(err);
}

static int event_ok(cudaEvent_t e) { return e && pv_handle_valid(e) && e->magic == PV_EVENT_MAGIC; }

static cudaError_t add_event_node(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t ndeps,
                                  cudaEvent_t e, int type)
{
    if (!event_ok(e))
        return PV_cudaErrorInvalidValue;
    struct pv_gnode *n;
    cudaError_t err = add_node(out, graph, deps, ndeps, type, &n);
    if (err != PV_SUCCESS)
        return err;
    n->p.event = e;
    n->dev = e->dev;
    *out = n;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                               size_t ndeps, cudaEvent_t e)
{
    return pv_ret(add_event_node(out, graph, deps, ndeps, e, PV_cudaGraphNodeTypeEventRecord));
}

PV_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                             size_t ndeps, cudaEvent_t e)
{
    return pv_ret(add_event_node(out, graph, deps, ndeps, e, PV_cudaGraphNodeTypeWaitEvent));
}

static cudaError_t event_get(cudaGraphNode_t node, int type, cudaEvent_t *out)
{
    struct pv_gnode *n = typed(node, type);
    if (!n || !out)
        return PV_cudaErrorInvalidValue;
    *out = n->p.event;
    return PV_SUCCESS;
}

static cudaError_t event_set(cudaGraphNode_t node, int type, cudaEvent_t e)
{
    struct pv_gnode *n = typed(node, type);
    if (!n || !event_ok(e))
        return PV_cudaErrorInvalidValue;
    n->p.event = e;
    n->dev = e->dev;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *out)
{
    return pv_ret(event_get(node, PV_cudaGraphNodeTypeEventRecord, out));
}
PV_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e)
{
    return pv_ret(event_set(node, PV_cudaGraphNodeTypeEventRecord, e));
}
PV_API cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *out)
{
    return pv_ret(event_get(node, PV_cudaGraphNodeTypeWaitEvent, out));
}
PV_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e)
{
    return pv_ret(event_set(node, PV_cudaGraphNodeTypeWaitEvent, e));
}

/* cudaGraphAddNode / cudaGraphNodeSetParams: the generic form of the add and set calls above. */
PV_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                    const cudaGraphEdgeData *edges, size_t ndeps, struct cudaGraphNodeParams *p)
{
    if (!p)
        return pv_ret(PV_cudaErrorInvalidValue);
    for (size_t i = 0; edges && i < ndeps; i++)
        if (edges[i].type || edges[i].from_port || edges[i].to_port)
            return pv_ret(PV_cudaErrorNotSupported);   /* programmatic edges need sm_90 */
    switch (p->type) {
    case PV_cudaGraphNodeTypeKernel:
        return cudaGraphAddKernelNode(out, graph, deps, ndeps, &p->u.kernel);
    case PV_cudaGraphNodeTypeMemcpy:
        return cudaGraphAddMemcpyNode(out, graph, deps, ndeps, &p->u.memcpy.copyParams);
    case PV_cudaGraphNodeTypeMemset:
        return cudaGraphAddMemsetNode(out, graph, deps, ndeps, &p->u.memset);
    case PV_cudaGraphNodeTypeHost:
        return cudaGraphAddHostNode(out, graph, deps, ndeps, &p->u.host);
    case PV_cudaGraphNodeTypeGraph:
        return cudaGraphAddChildGraphNode(out, graph, deps, ndeps, p->u.graph.graph);
    case PV_cudaGraphNodeTypeEmpty:
        return cudaGraphAddEmptyNode(out, graph, deps, ndeps);
    case PV_cudaGraphNodeTypeWaitEvent:
        return cudaGraphAddEventWaitNode(out, graph, deps, ndeps, p->u.eventWait.event);
    case PV_cudaGraphNodeTypeEventRecord:
        return cudaGraphAddEventRecordNode(out, graph, deps, ndeps, p->u.eventRecord.event);
    default:
        return pv_ret(PV_cudaErrorNotSupported);
    }
}

PV_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams *p)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n || !p || p->type != n->type)
        return pv_ret(PV_cudaErrorInvalidValue);
    switch (p->type) {
    case PV_cudaGraphNodeTypeKernel:
        return cudaGraphKernelNodeSetParams(node, &p->u.kernel);
    case PV_cudaGraphNodeTypeMemcpy:
        return cudaGraphMemcpyNodeSetParams(node, &p->u.memcpy.copyParams);
    case PV_cudaGraphNodeTypeMemset:
        return cudaGraphMemsetNodeSetParams(node, &p->u.memset);
    case PV_cudaGraphNodeTypeHost:
        return cudaGraphHostNodeSetParams(node, &p->u.host);
    case PV_cudaGraphNodeTypeWaitEvent:
        return cudaGraphEventWaitNodeSetEvent(node, p->u.eventWait.event);
    case PV_cudaGraphNodeTypeEventRecord:
        return cudaGraphEventRecordNodeSetEvent(node, p->u.eventRecord.event);
    default:
        return pv_ret(PV_cudaErrorNotSupported);
    }
}

/* ------------------------------------------------------------------------------------------ structure */
static cudaError_t edge_args(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                             const cudaGraphEdgeData *edges, size_t n)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || (n && (!from || !to)))
        return PV_cudaErrorInvalidValue;
    for (size_t i = 0; i < n; i++) {
        if (!pv_gnode_of(from[i]) || !pv_gnode_of(to[i]) || from[i]->graph != g || to[i]->graph != g ||
            from[i] == to[i])
            return PV_cudaErrorInvalidValue;
        if (edges && (edges[i].type || edges[i].from_port || edges[i].to_port))
            return PV_cudaErrorNotSupported;
    }
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                            const cudaGraphEdgeData *edges, size_t n)
{
    cudaError_t err = edge_args(graph, from, to, edges, n);
    for (size_t i = 0; i < n && err == PV_SUCCESS; i++)
        err = pv_graph_has_edge(from[i], to[i]) ? PV_cudaErrorInvalidValue : pv_gnode_add_dep(to[i], from[i]);
    return pv_ret(err);
}

PV_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                               const cudaGraphNode_t *to, const cudaGraphEdgeData *edges, size_t n)
{
    cudaError_t err = edge_args(graph, from, to, edges, n);
    for (size_t i = 0; i < n && err == PV_SUCCESS; i++) {
        struct pv_gnode *t = to[i];
        if (!pv_graph_has_edge(from[i], t)) {
            err = PV_cudaErrorInvalidValue;
            break;
        }
        int k = 0;
        for (int j = 0; j < t->ndeps; j++)
            if (t->deps[j] != from[i])
                t->deps[k++] = t->deps[j];
        t->ndeps = k;
    }
    return pv_ret(err);
}

PV_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n)
        return pv_ret(PV_cudaErrorInvalidValue);
    node_destroy(n);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, int *type)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n || !type)
        return pv_ret(PV_cudaErrorInvalidValue);
    *type = n->type;
    return PV_SUCCESS;
}

/* The CUDA "count or fill" convention: with out == NULL report the count, else fill up to *count entries and
 * report how many exist. */
static void fill_nodes(cudaGraphNode_t *out, size_t *count, struct pv_gnode *const *src, size_t have)
{
    if (out)
        for (size_t i = 0; i < have && i < *count; i++)
            out[i] = src[i];
    if (out && *count > have)
        for (size_t i = have; i < *count; i++)
            out[i] = NULL;
    *count = have;
}

PV_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || !count)
        return pv_ret(PV_cudaErrorInvalidValue);
    fill_nodes(nodes, count, g->nodes, (size_t)g->n);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || !count)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_gnode **roots = malloc(sizeof *roots * (size_t)(g->n ? g->n : 1));
    if (!roots)
        return pv_ret(PV_cudaErrorMemoryAllocation);
    size_t k = 0;
    for (int i = 0; i < g->n; i++)
        if (!g->nodes[i]->ndeps)
            roots[k++] = g->nodes[i];
    fill_nodes(nodes, count, roots, k);
    free(roots);
    return PV_SUCCESS;
}

static void zero_edges(cudaGraphEdgeData *e, size_t n)
{
    if (e)
        memset(e, 0, n * sizeof *e);
}

PV_API cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                     cudaGraphEdgeData *edges, size_t *count)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || !count || (!from != !to))
        return pv_ret(PV_cudaErrorInvalidValue);
    size_t k = 0;
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i]->ndeps; j++, k++)
            if (from && k < *count) {
                from[k] = g->nodes[i]->deps[j];
                to[k] = g->nodes[i];
                zero_edges(edges ? &edges[k] : NULL, 1);
            }
    for (size_t i = k; from && i < *count; i++) {
        from[i] = to[i] = NULL;
        zero_edges(edges ? &edges[i] : NULL, 1);
    }
    *count = k;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *deps, cudaGraphEdgeData *edges,
                                                size_t *count)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n || !count)
        return pv_ret(PV_cudaErrorInvalidValue);
    size_t want = *count;
    fill_nodes(deps, count, n->deps, (size_t)n->ndeps);
    zero_edges(deps ? edges : NULL, want);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *out,
                                                  cudaGraphEdgeData *edges, size_t *count)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n || !count)
        return pv_ret(PV_cudaErrorInvalidValue);
    struct pv_graph *g = n->graph;
    struct pv_gnode **dep = malloc(sizeof *dep * (size_t)(g->n ? g->n : 1));
    if (!dep)
        return pv_ret(PV_cudaErrorMemoryAllocation);
    size_t k = 0, want = *count;
    for (int i = 0; i < g->n; i++)
        if (pv_graph_has_edge(n, g->nodes[i]))
            dep[k++] = g->nodes[i];
    fill_nodes(out, count, dep, k);
    zero_edges(out ? edges : NULL, want);
    free(dep);
    return PV_SUCCESS;
}

static const char *type_name(int t)
{
    static const char *const names[] = { "kernel", "memcpy", "memset", "host", "graph", "empty", "wait_event",
                                         "event_record", "ext_sem_signal", "ext_sem_wait", "mem_alloc",
                                         "mem_free", "?", "conditional" };
    return t >= 0 && t < (int)(sizeof names / sizeof *names) ? names[t] : "?";
}

PV_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned flags)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || !path)
        return pv_ret(PV_cudaErrorInvalidValue);
    FILE *f = fopen(path, "w");
    if (!f)
        return pv_ret(PV_cudaErrorOperatingSystem);
    fprintf(f, "digraph graph_%p {\n", (void *)g);
    for (int i = 0; i < g->n; i++) {
        struct pv_gnode *n = g->nodes[i];
        fprintf(f, "  n%d [label=\"%d %s%s%s\"];\n", n->index, n->index, type_name(n->type),
                n->type == PV_cudaGraphNodeTypeKernel ? " " : "",
                n->type == PV_cudaGraphNodeTypeKernel ? n->p.kernel.func->name : "");
        for (int j = 0; j < n->ndeps; j++)
            fprintf(f, "  n%d -> n%d;\n", n->deps[j]->index, n->index);
    }
    fprintf(f, "}\n");
    return pv_ret(fclose(f) == 0 ? PV_SUCCESS : PV_cudaErrorOperatingSystem);
}
