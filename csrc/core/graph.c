/* CUDA graphs, the object model: graphs, nodes of every kind the client can run (kernel, memcpy, memset, host,
 * child graph, empty, event record/wait; memory nodes are graph_mem.c's), dependencies, queries, clones, and the explicit API's add calls. Graphs
 * are client objects; nothing reaches a daemon before instantiation (graph_exec.c). Like CUDA's, a graph object is
 * not thread-safe: concurrent calls on one graph must be serialized by the program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pv_hostmap.h"
#include "pv_registry.h"
#include "pv_copy.h"
#include "pv_streams.h"
#include "pv_graph.h"
#include "pv_graph.h"

/* ------------------------------------------------------------------------------------------ objects */
struct pv_graph *pv_graph_of(const void *g)
{
    const struct pv_graph *p = g;
    return (p && pv_handle_valid(p) && p->magic == PV_GRAPH_MAGIC) ? (struct pv_graph *)p : NULL;
}

struct pv_gnode *pv_gnode_of(const void *n)
{
    const struct pv_gnode *p = n;
    return (p && pv_handle_valid(p) && p->magic == PV_GNODE_MAGIC) ? (struct pv_gnode *)p : NULL;
}

struct pv_gnode *pv_gnode_typed(const void *node, int type)
{
    struct pv_gnode *n = pv_gnode_of(node);
    return n && n->type == type ? n : NULL;
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
    pv_gmem_graph_gone(g);
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

void pv_gnode_destroy(struct pv_gnode *n)
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
cudaError_t pv_gnode_set_kernel(struct pv_gnode *n, struct pv_func *f, int dev, dim3 grid, dim3 block, size_t shmem,
                                void **args, void **extra)
{
    if (!f || !pv_func_valid(f))
        return PV_cudaErrorInvalidDeviceFunction;
    struct pv_device *d = pv_device(dev);
    if (!d)
        return PV_cudaErrorInvalidDevice;
    struct pv_kernel_launch k;
    cudaError_t err = pv_launch_prepare(f, d, grid, block, args, extra, shmem, &k);
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

cudaError_t pv_gnode_kernel_args(struct pv_gnode *n, void ***args)
{
    struct pv_device *d = pv_device(n->dev);
    struct pv_kinfo *ki = d ? n->p.kernel.func->dev[d->index] : NULL;
    if (ki && !n->kparams) {
        n->kparams = calloc((size_t)(ki->nparams ? ki->nparams : 1), sizeof *n->kparams);
        if (!n->kparams)
            return PV_cudaErrorMemoryAllocation;
        for (int i = 0; i < ki->nparams; i++)
            n->kparams[i] = n->p.kernel.params + ki->params[i][0];
    }
    *args = n->kparams;
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

cudaError_t pv_gnode_set_host(struct pv_gnode *n, const struct cudaHostNodeParams *p)
{
    if (!p || !p->fn)
        return PV_cudaErrorInvalidValue;
    n->p.host = *p;
    return PV_SUCCESS;
}

cudaError_t pv_gnode_set_event(struct pv_gnode *n, cudaEvent_t e)
{
    if (!pv_event_ok(e))
        return PV_cudaErrorInvalidValue;
    n->p.event = e;
    n->dev = e->dev;
    return PV_SUCCESS;
}

cudaError_t pv_gnode_set(struct pv_gnode *n, const void *p)
{
    switch (n->type) {
    case PV_cudaGraphNodeTypeMemcpy:
        return pv_gnode_set_copy(n, p);
    case PV_cudaGraphNodeTypeMemset:
        return pv_gnode_set_memset(n, p);
    case PV_cudaGraphNodeTypeHost:
        return pv_gnode_set_host(n, p);
    case PV_cudaGraphNodeTypeEmpty:
        return PV_SUCCESS;
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

/* ------------------------------------------------------------------------------------------ the add calls */
/* A node whose parameters were refused goes again. */
static cudaError_t drop_node(struct pv_gnode *n, cudaError_t err)
{
    n->type = PV_cudaGraphNodeTypeEmpty;
    pv_gnode_destroy(n);
    return err;
}

cudaError_t pv_graph_add(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, int type, const void *p,
                         struct pv_gnode **out)
{
    struct pv_gnode *n;
    if (!out || !pv_graph_of(g))
        return PV_cudaErrorInvalidValue;
    if (type == PV_cudaGraphNodeTypeHost && (!p || !((const struct cudaHostNodeParams *)p)->fn))
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_gnode_add(g, type, deps, ndeps, &n);
    if (err != PV_SUCCESS)
        return err;
    if ((err = pv_gnode_set(n, p)) != PV_SUCCESS)
        return drop_node(n, err);
    *out = n;
    return PV_SUCCESS;
}

cudaError_t pv_graph_add_kernel(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, struct pv_func *f,
                                int dev, dim3 grid, dim3 block, size_t shmem, void **args, void **extra,
                                struct pv_gnode **out)
{
    struct pv_gnode *n;
    if (!out || !pv_graph_of(g))
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_gnode_add(g, PV_cudaGraphNodeTypeKernel, deps, ndeps, &n);
    if (err != PV_SUCCESS)
        return err;
    n->p.kernel.params = NULL;
    if ((err = pv_gnode_set_kernel(n, f, dev, grid, block, shmem, args, extra)) != PV_SUCCESS)
        return drop_node(n, err);
    *out = n;
    return PV_SUCCESS;
}

cudaError_t pv_graph_add_child(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps,
                               struct pv_graph *child, struct pv_gnode **out)
{
    struct pv_gnode *n;
    if (!out || !pv_graph_of(g) || !pv_graph_of(child) || child == g)
        return PV_cudaErrorInvalidValue;
    if (pv_gmem_restricted(child))
        return PV_cudaErrorNotSupported;                 /* a graph with memory nodes is no child (no ownership move) */
    cudaError_t err = pv_gnode_add(g, PV_cudaGraphNodeTypeGraph, deps, ndeps, &n);
    if (err != PV_SUCCESS)
        return err;
    n->p.child = NULL;
    if ((err = pv_graph_clone(child, &n->p.child, NULL)) != PV_SUCCESS)   /* CUDA embeds a copy of the child */
        return drop_node(n, err);
    *out = n;
    return PV_SUCCESS;
}

cudaError_t pv_graph_add_event(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, cudaEvent_t e,
                               int type, struct pv_gnode **out)
{
    struct pv_gnode *n;
    if (!out || !pv_graph_of(g) || !pv_event_ok(e))
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_gnode_add(g, type, deps, ndeps, &n);
    if (err != PV_SUCCESS)
        return err;
    pv_gnode_set_event(n, e);
    *out = n;
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ structure */
cudaError_t pv_edges_plain(const cudaGraphEdgeData *edges, size_t n)
{
    for (size_t i = 0; edges && i < n; i++)
        if (edges[i].type || edges[i].from_port || edges[i].to_port)
            return PV_cudaErrorNotSupported;          /* programmatic edges need sm_90 */
    return PV_SUCCESS;
}

cudaError_t pv_graph_edges_change(struct pv_graph *g, struct pv_gnode *const *from, struct pv_gnode *const *to,
                                  const cudaGraphEdgeData *edges, size_t n, int add)
{
    if (!pv_graph_of(g) || (n && (!from || !to)))
        return PV_cudaErrorInvalidValue;
    for (size_t i = 0; i < n; i++)
        if (!pv_gnode_of(from[i]) || !pv_gnode_of(to[i]) || from[i]->graph != g || to[i]->graph != g ||
            from[i] == to[i])
            return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_edges_plain(edges, n);
    if (err == PV_SUCCESS && !add && pv_gmem_restricted(g))
        err = PV_cudaErrorNotSupported;                  /* edges of a graph with memory nodes stay */
    for (size_t i = 0; i < n && err == PV_SUCCESS; i++) {
        struct pv_gnode *t = to[i];
        if (pv_graph_has_edge(from[i], t) == add) {
            err = PV_cudaErrorInvalidValue;          /* a duplicate edge, or one that is not there */
        } else if (add) {
            err = pv_gnode_add_dep(t, from[i]);
        } else {
            int k = 0;
            for (int j = 0; j < t->ndeps; j++)
                if (t->deps[j] != from[i])
                    t->deps[k++] = t->deps[j];
            t->ndeps = k;
        }
    }
    return err;
}

static void fill_nodes(struct pv_gnode **out, size_t *count, struct pv_gnode *const *src, size_t have)
{
    if (out)
        for (size_t i = 0; i < *count; i++)
            out[i] = i < have ? src[i] : NULL;
    *count = have;
}

static void zero_edges(cudaGraphEdgeData *e, size_t n)
{
    if (e)
        memset(e, 0, n * sizeof *e);
}

void pv_graph_nodes(const struct pv_graph *g, int roots_only, struct pv_gnode **out, size_t *count)
{
    size_t k = 0;
    for (int i = 0; i < g->n; i++)
        if (!roots_only || !g->nodes[i]->ndeps) {
            if (out && k < *count)
                out[k] = g->nodes[i];
            k++;
        }
    for (size_t i = k; out && i < *count; i++)
        out[i] = NULL;
    *count = k;
}

void pv_graph_edges(const struct pv_graph *g, struct pv_gnode **from, struct pv_gnode **to, cudaGraphEdgeData *edges,
                    size_t *count)
{
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
}

cudaError_t pv_gnode_neighbours(const struct pv_gnode *n, int dependents, struct pv_gnode **out,
                                cudaGraphEdgeData *edges, size_t *count)
{
    size_t want = *count;
    if (!dependents) {
        fill_nodes(out, count, n->deps, (size_t)n->ndeps);
        zero_edges(out ? edges : NULL, want);
        return PV_SUCCESS;
    }
    const struct pv_graph *g = n->graph;
    struct pv_gnode **dep = malloc(sizeof *dep * (size_t)(g->n ? g->n : 1));
    if (!dep)
        return PV_cudaErrorMemoryAllocation;
    size_t k = 0;
    for (int i = 0; i < g->n; i++)
        if (pv_graph_has_edge(n, g->nodes[i]))
            dep[k++] = g->nodes[i];
    fill_nodes(out, count, dep, k);
    zero_edges(out ? edges : NULL, want);
    free(dep);
    return PV_SUCCESS;
}

struct pv_gnode *pv_graph_find_clone(const struct pv_graph *clone, const struct pv_gnode *orig)
{
    for (int i = 0; i < clone->n; i++)
        if (clone->nodes[i]->orig == orig)
            return clone->nodes[i];
    return NULL;
}

static const char *type_name(int t)
{
    static const char *const names[] = { "kernel", "memcpy", "memset", "host", "graph", "empty", "wait_event",
                                         "event_record", "ext_sem_signal", "ext_sem_wait", "mem_alloc",
                                         "mem_free", "?", "conditional" };
    return t >= 0 && t < (int)(sizeof names / sizeof *names) ? names[t] : "?";
}

cudaError_t pv_graph_dot_print(const struct pv_graph *g, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return PV_cudaErrorOperatingSystem;
    fprintf(f, "digraph graph_%p {\n", (const void *)g);
    for (int i = 0; i < g->n; i++) {
        struct pv_gnode *n = g->nodes[i];
        fprintf(f, "  n%d [label=\"%d %s%s%s\"];\n", n->index, n->index, type_name(n->type),
                n->type == PV_cudaGraphNodeTypeKernel ? " " : "",
                n->type == PV_cudaGraphNodeTypeKernel ? n->p.kernel.func->name : "");
        for (int j = 0; j < n->ndeps; j++)
            fprintf(f, "  n%d -> n%d;\n", n->deps[j]->index, n->index);
    }
    fprintf(f, "}\n");
    return fclose(f) == 0 ? PV_SUCCESS : PV_cudaErrorOperatingSystem;
}
