/* CUDA graphs, the explicit API: cudaGraph* entry points on the core's graph objects (core graph.c). */
#include <stdlib.h>
#include <string.h>

#include "cudart.h"

/* api_memory.c's (unsupported_gen.c declares every export without a prototype, so not in cudart.h) */
cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol);
cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol);

#define NODES(deps) ((struct pv_gnode *const *)(deps))

static cudaError_t current_device(int *dev)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err == PV_SUCCESS)
        *dev = d->index;
    return err;
}

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
    if (pv_gmem_restricted(g))
        return pv_ret(PV_cudaErrorNotSupported);        /* graphs with memory nodes cannot be cloned */
    return pv_ret(pv_graph_clone(g, out, NULL));
}

PV_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *out, cudaGraphNode_t orig, cudaGraph_t clone)
{
    struct pv_graph *c = pv_graph_of(clone);
    struct pv_gnode *o = pv_gnode_of(orig);
    if (!out || !c || !o || !(*out = pv_graph_find_clone(c, o)))
        return pv_ret(PV_cudaErrorInvalidValue);
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ nodes */
PV_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t ndeps, const struct cudaKernelNodeParams *p)
{
    int dev;
    cudaError_t err = current_device(&dev);
    if (err == PV_SUCCESS && !p)
        err = PV_cudaErrorInvalidValue;
    if (err == PV_SUCCESS)
        err = pv_graph_add_kernel(graph, NODES(deps), ndeps, pv_func_of(p->func), dev, p->gridDim, p->blockDim,
                                  p->sharedMemBytes, p->kernelParams, p->kernelParams ? NULL : p->extra, out);
    return pv_ret(err);
}

PV_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *p)
{
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeKernel);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    void **args;
    cudaError_t err = pv_gnode_kernel_args(n, &args);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    memset(p, 0, sizeof *p);
    p->func = (void *)n->p.kernel.func->host_fun;
    p->gridDim = n->p.kernel.grid;
    p->blockDim = n->p.kernel.block;
    p->sharedMemBytes = (unsigned)n->p.kernel.shmem;
    p->kernelParams = args;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *p)
{
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeKernel);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_gnode_set_kernel(n, pv_func_of(p->func), n->dev, p->gridDim, p->blockDim, p->sharedMemBytes,
                                      p->kernelParams, p->kernelParams ? NULL : p->extra));
}

static cudaError_t add(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t ndeps, int type,
                       const void *p)
{
    return pv_ret(pv_graph_add(graph, NODES(deps), ndeps, type, p, out));
}

PV_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t ndeps, const struct cudaMemcpy3DParms *p)
{
    return add(out, graph, deps, ndeps, PV_cudaGraphNodeTypeMemcpy, p);
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
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeMemcpy);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    *p = n->p.copy;
    return PV_SUCCESS;
}

/* The Set form of a memcpy, memset or host node. */
static cudaError_t set_params(cudaGraphNode_t node, int type, const void *p)
{
    struct pv_gnode *n = pv_gnode_typed(node, type);
    return pv_ret(n ? pv_gnode_set(n, p) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *p)
{
    return set_params(node, PV_cudaGraphNodeTypeMemcpy, p);
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
    return add(out, graph, deps, ndeps, PV_cudaGraphNodeTypeMemset, p);
}

PV_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *p)
{
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeMemset);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    *p = n->p.memset;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *p)
{
    return set_params(node, PV_cudaGraphNodeTypeMemset, p);
}

PV_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                        size_t ndeps, const struct cudaHostNodeParams *p)
{
    return add(out, graph, deps, ndeps, PV_cudaGraphNodeTypeHost, p);
}

PV_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *p)
{
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeHost);
    if (!n || !p)
        return pv_ret(PV_cudaErrorInvalidValue);
    *p = n->p.host;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *p)
{
    return set_params(node, PV_cudaGraphNodeTypeHost, p);
}

PV_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                              size_t ndeps, cudaGraph_t child)
{
    return pv_ret(pv_graph_add_child(graph, NODES(deps), ndeps, child, out));
}

PV_API cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *out)
{
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeGraph);
    if (!n || !out)
        return pv_ret(PV_cudaErrorInvalidValue);
    *out = n->p.child;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                         size_t ndeps)
{
    return add(out, graph, deps, ndeps, PV_cudaGraphNodeTypeEmpty, NULL);
}

PV_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                               size_t ndeps, cudaEvent_t e)
{
    return pv_ret(pv_graph_add_event(graph, NODES(deps), ndeps, e, PV_cudaGraphNodeTypeEventRecord, out));
}

PV_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                             size_t ndeps, cudaEvent_t e)
{
    return pv_ret(pv_graph_add_event(graph, NODES(deps), ndeps, e, PV_cudaGraphNodeTypeWaitEvent, out));
}

static cudaError_t event_get(cudaGraphNode_t node, int type, cudaEvent_t *out)
{
    struct pv_gnode *n = pv_gnode_typed(node, type);
    if (!n || !out)
        return pv_ret(PV_cudaErrorInvalidValue);
    *out = n->p.event;
    return PV_SUCCESS;
}

static cudaError_t event_set(cudaGraphNode_t node, int type, cudaEvent_t e)
{
    struct pv_gnode *n = pv_gnode_typed(node, type);
    return pv_ret(n ? pv_gnode_set_event(n, e) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *out)
{
    return event_get(node, PV_cudaGraphNodeTypeEventRecord, out);
}
PV_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e)
{
    return event_set(node, PV_cudaGraphNodeTypeEventRecord, e);
}
PV_API cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *out)
{
    return event_get(node, PV_cudaGraphNodeTypeWaitEvent, out);
}
PV_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e)
{
    return event_set(node, PV_cudaGraphNodeTypeWaitEvent, e);
}

/* Memory nodes (core graph_mem.c): the allocation's address is fixed when the node is made. */
PV_API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                            size_t ndeps, struct cudaMemAllocNodeParams *p)
{
    return pv_ret(pv_graph_add_mem_alloc(pv_graph_of(graph), NODES(deps), ndeps, p, out));
}

PV_API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                           size_t ndeps, void *dptr)
{
    return pv_ret(pv_graph_add_mem_free(pv_graph_of(graph), NODES(deps), ndeps, dptr, out));
}

PV_API cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, struct cudaMemAllocNodeParams *out)
{
    return pv_ret(pv_gmem_alloc_params(pv_gnode_of(node), out));
}

PV_API cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void *dptr_out)
{
    return pv_ret(pv_gmem_free_params(pv_gnode_of(node), dptr_out));
}

PV_API cudaError_t cudaDeviceGraphMemTrim(int device) { return pv_ret(pv_graph_mem_trim(device)); }

PV_API cudaError_t cudaDeviceGetGraphMemAttribute(int device, int attr, void *value)
{
    return pv_ret(pv_graph_mem_attr(device, attr, value, 0));
}

PV_API cudaError_t cudaDeviceSetGraphMemAttribute(int device, int attr, void *value)
{
    return pv_ret(pv_graph_mem_attr(device, attr, value, 1));
}

/* cudaGraphAddNode / cudaGraphNodeSetParams: the generic form of the add and set calls above. */
PV_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                    const cudaGraphEdgeData *edges, size_t ndeps, struct cudaGraphNodeParams *p)
{
    if (!p)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_edges_plain(edges, ndeps);
    if (err != PV_SUCCESS)
        return pv_ret(err);
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
    case PV_cudaGraphNodeTypeMemAlloc:
        return cudaGraphAddMemAllocNode(out, graph, deps, ndeps, &p->u.alloc);
    case PV_cudaGraphNodeTypeMemFree:
        return cudaGraphAddMemFreeNode(out, graph, deps, ndeps, p->u.free.dptr);
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
PV_API cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                            const cudaGraphEdgeData *edges, size_t n)
{
    return pv_ret(pv_graph_edges_change(graph, NODES(from), NODES(to), edges, n, 1));
}

PV_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                               const cudaGraphNode_t *to, const cudaGraphEdgeData *edges, size_t n)
{
    return pv_ret(pv_graph_edges_change(graph, NODES(from), NODES(to), edges, n, 0));
}

PV_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n)
        return pv_ret(PV_cudaErrorInvalidValue);
    if (pv_gmem_restricted(n->graph))
        return pv_ret(PV_cudaErrorNotSupported);        /* nodes of a graph with memory nodes stay */
    pv_gnode_destroy(n);
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

static cudaError_t nodes(cudaGraph_t graph, cudaGraphNode_t *out, size_t *count, int roots)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || !count)
        return pv_ret(PV_cudaErrorInvalidValue);
    pv_graph_nodes(g, roots, out, count);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *out, size_t *count)
{
    return nodes(graph, out, count, 0);
}

PV_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *out, size_t *count)
{
    return nodes(graph, out, count, 1);
}

PV_API cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                     cudaGraphEdgeData *edges, size_t *count)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || !count || (!from != !to))
        return pv_ret(PV_cudaErrorInvalidValue);
    pv_graph_edges(g, from, to, edges, count);
    return PV_SUCCESS;
}

static cudaError_t neighbours(cudaGraphNode_t node, cudaGraphNode_t *out, cudaGraphEdgeData *edges, size_t *count,
                              int dependents)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n || !count)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_gnode_neighbours(n, dependents, out, edges, count));
}

PV_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *deps, cudaGraphEdgeData *edges,
                                                size_t *count)
{
    return neighbours(node, deps, edges, count, 0);
}

PV_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *out,
                                                  cudaGraphEdgeData *edges, size_t *count)
{
    return neighbours(node, out, edges, count, 1);
}

PV_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned flags)
{
    struct pv_graph *g = pv_graph_of(graph);
    if (!g || !path)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_graph_dot_print(g, path));
}
