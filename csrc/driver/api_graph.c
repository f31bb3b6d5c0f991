/* CUDA graphs, the explicit API: cuGraph* on the core's graph objects (core graph.c), which libvcudart's cudaGraph*
 * share. Node parameters arrive in the driver's structs and are kept in the runtime's (convert.c); both ABIs of the
 * calls CUDA 12 changed (kernel node params v1/v2, edges data v1/v2, cuGraphAddNode v1/v2) are here. */
#include "driver.h"

#define PTR(p) ((void *)(uintptr_t)(p))
#define NODES(deps) ((struct pv_gnode *const *)(deps))

PV_API CUresult cuGraphCreate(CUgraph *out, unsigned flags)
{
    CUresult r = out && !flags ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_graph_new(out)) : r;
}

PV_API CUresult cuGraphDestroy(CUgraph g)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pv_graph_of(g))
        return CUDA_ERROR_INVALID_VALUE;
    pv_graph_free(g);
    return CUDA_SUCCESS;
}

PV_API CUresult cuGraphClone(CUgraph *out, CUgraph g)
{
    CUresult r = out && pv_graph_of(g) ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && pv_gmem_restricted(g))
        r = CUDA_ERROR_NOT_SUPPORTED;                  /* graphs with memory nodes cannot be cloned */
    return r == CUDA_SUCCESS ? drv_result(pv_graph_clone(g, out, NULL)) : r;
}

PV_API CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode orig, CUgraph clone)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !pv_graph_of(clone) || !pv_gnode_of(orig) || !(*out = pv_graph_find_clone(clone, orig)))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

PV_API CUresult cuGraphDebugDotPrint(CUgraph g, const char *path, unsigned flags)
{
    (void)flags;
    CUresult r = pv_graph_of(g) && path ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_graph_dot_print(g, path)) : r;
}

/* ------------------------------------------------------------------------------------------ kernel nodes */
/* The kernel and device of kernel node params: func (a CUfunction) or, in v2, kern (a CUkernel); v2's ctx, else the
 * current context, says where it runs. */
static CUresult kernel_of(const CUDA_KERNEL_NODE_PARAMS *p, int v2, struct pv_func **f, int *dev)
{
    struct pv_device *d;
    CUresult r = p ? drv_ctx_device(v2 ? p->ctx : NULL, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    *f = drv_func_of(v2 && p->kern ? (void *)p->kern : (void *)p->func, d);
    *dev = d->index;
    return *f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static dim3 grid_of(const CUDA_KERNEL_NODE_PARAMS *p) { return (dim3){ p->gridDimX, p->gridDimY, p->gridDimZ }; }
static dim3 block_of(const CUDA_KERNEL_NODE_PARAMS *p) { return (dim3){ p->blockDimX, p->blockDimY, p->blockDimZ }; }

static CUresult add_kernel(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                           const CUDA_KERNEL_NODE_PARAMS *p, int v2)
{
    struct pv_func *f;
    int dev;
    CUresult r = kernel_of(p, v2, &f, &dev);
    if (r != CUDA_SUCCESS)
        return r;
    return drv_result(pv_graph_add_kernel(g, NODES(deps), n, f, dev, grid_of(p), block_of(p), p->sharedMemBytes,
                                          p->kernelParams, p->kernelParams ? NULL : p->extra, out));
}

PV_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                        const CUDA_KERNEL_NODE_PARAMS *p)
{
    return add_kernel(out, g, deps, n, p, 1);
}

PV_API CUresult cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                     const CUDA_KERNEL_NODE_PARAMS *p)
{
    return add_kernel(out, g, deps, n, p, 0);
}

static CUresult kernel_get(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p, int v2)
{
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeKernel);
    void **args;
    CUresult r = n && p ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS || (r = drv_result(pv_gnode_kernel_args(n, &args))) != CUDA_SUCCESS)
        return r;
    const struct pv_kernel_launch *k = &n->p.kernel;
    /* kern: NVIDIA's runtime finds its kernel by the CUkernel (every kernel of the registry is one) */
    CUDA_KERNEL_NODE_PARAMS q = { drv_func_handle(k->func, n->dev), k->grid.x, k->grid.y, k->grid.z, k->block.x,
                                  k->block.y, k->block.z, (unsigned)k->shmem, args, NULL, k->func,
                                  drv_primary(n->dev) };
    memcpy(p, &q, v2 ? sizeof q : offsetof(CUDA_KERNEL_NODE_PARAMS, kern));   /* v1 ends before kern */
    return CUDA_SUCCESS;
}

PV_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p)
{
    return kernel_get(node, p, 1);
}
PV_API CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p)
{
    return kernel_get(node, p, 0);
}

static CUresult kernel_set(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p, int v2)
{
    struct pv_gnode *n = pv_gnode_typed(node, PV_cudaGraphNodeTypeKernel);
    struct pv_func *f;
    int dev;
    CUresult r = n ? kernel_of(p, v2, &f, &dev) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    return drv_result(pv_gnode_set_kernel(n, f, n->dev, grid_of(p), block_of(p), p->sharedMemBytes, p->kernelParams,
                                          p->kernelParams ? NULL : p->extra));
}

PV_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    return kernel_set(node, p, 1);
}
PV_API CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    return kernel_set(node, p, 0);
}

/* ------------------------------------------------------------------------------------------ memcpy, memset, host */
/* A node with runtime-form parameters (or none: an empty node), after the context argument is checked. */
static CUresult add(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, int type, const void *p,
                    CUcontext ctx)
{
    struct pv_device *d;
    CUresult r = ctx ? drv_ctx_device(ctx, &d) : drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_graph_add(g, NODES(deps), n, type, p, out)) : r;
}

PV_API CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                     const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    struct cudaMemcpy3DParms p;
    CUresult r = c ? drv_copy3d_in(c, &p) : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? add(out, g, deps, n, PV_cudaGraphNodeTypeMemcpy, &p, ctx) : r;
}

PV_API CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                     const CUDA_MEMSET_NODE_PARAMS *m, CUcontext ctx)
{
    struct cudaMemsetParams p;
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    drv_memset_in(m, &p);
    return add(out, g, deps, n, PV_cudaGraphNodeTypeMemset, &p, ctx);
}

PV_API CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                   const CUDA_HOST_NODE_PARAMS *p)
{
    return add(out, g, deps, n, PV_cudaGraphNodeTypeHost, p, NULL);
}

PV_API CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n)
{
    return add(out, g, deps, n, PV_cudaGraphNodeTypeEmpty, NULL, NULL);
}

/* A node of that type, for the Get/Set calls. */
static CUresult typed(CUgraphNode node, int type, const void *arg, struct pv_gnode **n)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    *n = pv_gnode_typed(node, type);
    return *n && arg ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D *c)
{
    struct pv_gnode *n;
    CUresult r = typed(node, PV_cudaGraphNodeTypeMemcpy, c, &n);
    if (r == CUDA_SUCCESS)
        drv_copy3d_out(&n->p.copy, c);
    return r;
}

PV_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D *c)
{
    struct pv_gnode *n;
    struct cudaMemcpy3DParms p;
    CUresult r = typed(node, PV_cudaGraphNodeTypeMemcpy, c, &n);
    if (r == CUDA_SUCCESS)
        r = drv_copy3d_in(c, &p);
    return r == CUDA_SUCCESS ? drv_result(pv_gnode_set(n, &p)) : r;
}

PV_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *m)
{
    struct pv_gnode *n;
    CUresult r = typed(node, PV_cudaGraphNodeTypeMemset, m, &n);
    if (r == CUDA_SUCCESS) {
        const struct cudaMemsetParams *p = &n->p.memset;
        m->dst = (CUdeviceptr)(uintptr_t)p->dst;     /* the v1 fields only: the caller's struct has no ctx */
        m->pitch = p->pitch;
        m->value = p->value;
        m->elementSize = p->elementSize;
        m->width = p->width;
        m->height = p->height;
    }
    return r;
}

PV_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *m)
{
    struct pv_gnode *n;
    struct cudaMemsetParams p;
    CUresult r = typed(node, PV_cudaGraphNodeTypeMemset, m, &n);
    if (r != CUDA_SUCCESS)
        return r;
    drv_memset_in(m, &p);
    return drv_result(pv_gnode_set(n, &p));
}

PV_API CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS *p)
{
    struct pv_gnode *n;
    CUresult r = typed(node, PV_cudaGraphNodeTypeHost, p, &n);
    if (r == CUDA_SUCCESS)
        *p = n->p.host;
    return r;
}

PV_API CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS *p)
{
    struct pv_gnode *n;
    CUresult r = typed(node, PV_cudaGraphNodeTypeHost, p, &n);
    return r == CUDA_SUCCESS ? drv_result(pv_gnode_set(n, p)) : r;
}

/* ------------------------------------------------------------------------------------------ child graphs, events */
PV_API CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUgraph child)
{
    DRV_RETURN(pv_graph_add_child(g, NODES(deps), n, child, out));
}

PV_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *out)
{
    struct pv_gnode *n;
    CUresult r = typed(node, PV_cudaGraphNodeTypeGraph, out, &n);
    if (r == CUDA_SUCCESS)
        *out = n->p.child;
    return r;
}

PV_API CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e)
{
    DRV_RETURN(pv_graph_add_event(g, NODES(deps), n, e, PV_cudaGraphNodeTypeEventRecord, out));
}

PV_API CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e)
{
    DRV_RETURN(pv_graph_add_event(g, NODES(deps), n, e, PV_cudaGraphNodeTypeWaitEvent, out));
}

static CUresult event_get(CUgraphNode node, int type, CUevent *out)
{
    struct pv_gnode *n;
    CUresult r = typed(node, type, out, &n);
    if (r == CUDA_SUCCESS)
        *out = n->p.event;
    return r;
}

static CUresult event_set(CUgraphNode node, int type, CUevent e)
{
    struct pv_gnode *n;
    CUresult r = typed(node, type, e, &n);
    return r == CUDA_SUCCESS ? drv_result(pv_gnode_set_event(n, e)) : r;
}

PV_API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode n, CUevent *out)
{
    return event_get(n, PV_cudaGraphNodeTypeEventRecord, out);
}
PV_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode n, CUevent e)
{
    return event_set(n, PV_cudaGraphNodeTypeEventRecord, e);
}
PV_API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode n, CUevent *out)
{
    return event_get(n, PV_cudaGraphNodeTypeWaitEvent, out);
}
PV_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode n, CUevent e)
{
    return event_set(n, PV_cudaGraphNodeTypeWaitEvent, e);
}

/* ------------------------------------------------------------------------------------------ memory nodes */
/* The core's graph_mem.c, with libvcudart's: CUDA_MEM_ALLOC_NODE_PARAMS has the runtime's layout. */
PV_API CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_graph_add_mem_alloc(pv_graph_of(g), NODES(deps), n, p, out)) : r;
}

PV_API CUresult cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUdeviceptr p)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_graph_add_mem_free(pv_graph_of(g), NODES(deps), n, PTR(p), out)) : r;
}

PV_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *out)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_gmem_alloc_params(pv_gnode_of(node), out)) : r;
}

PV_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr *out)
{
    CUresult r = drv_ready();
    return r == CUDA_SUCCESS ? drv_result(pv_gmem_free_params(pv_gnode_of(node), (void **)out)) : r;
}

PV_API CUresult cuDeviceGraphMemTrim(CUdevice dev) { DRV_RETURN(pv_graph_mem_trim(dev)); }

PV_API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, void *value)
{
    DRV_RETURN(pv_graph_mem_attr(dev, attr, value, 0));
}

PV_API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, int attr, void *value)
{
    DRV_RETURN(pv_graph_mem_attr(dev, attr, value, 1));
}

/* ------------------------------------------------------------------------------------------ the generic forms */
static CUresult add_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                         size_t n, CUgraphNodeParams *p)
{
    CUresult r = p ? drv_result(pv_edges_plain(edges, n)) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    switch (p->type) {
    case PV_cudaGraphNodeTypeKernel:
        return add_kernel(out, g, deps, n, &p->u.kernel, 1);
    case PV_cudaGraphNodeTypeMemcpy:
        return cuGraphAddMemcpyNode(out, g, deps, n, &p->u.memcpy.copyParams, p->u.memcpy.copyCtx);
    case PV_cudaGraphNodeTypeMemset:
        return cuGraphAddMemsetNode(out, g, deps, n, &p->u.memset, p->u.memset.ctx);
    case PV_cudaGraphNodeTypeHost:
        return cuGraphAddHostNode(out, g, deps, n, &p->u.host);
    case PV_cudaGraphNodeTypeGraph:
        return cuGraphAddChildGraphNode(out, g, deps, n, p->u.graph.graph);
    case PV_cudaGraphNodeTypeEmpty:
        return cuGraphAddEmptyNode(out, g, deps, n);
    case PV_cudaGraphNodeTypeWaitEvent:
        return cuGraphAddEventWaitNode(out, g, deps, n, p->u.eventWait.event);
    case PV_cudaGraphNodeTypeEventRecord:
        return cuGraphAddEventRecordNode(out, g, deps, n, p->u.eventRecord.event);
    case PV_cudaGraphNodeTypeMemAlloc:
        return cuGraphAddMemAllocNode(out, g, deps, n, &p->u.alloc);
    case PV_cudaGraphNodeTypeMemFree:
        return cuGraphAddMemFreeNode(out, g, deps, n, p->u.free.dptr);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;         /* semaphore, memory-operation, conditional nodes */
    }
}

PV_API CUresult cuGraphAddNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                  size_t n, CUgraphNodeParams *p)
{
    return add_node(out, g, deps, edges, n, p);
}

PV_API CUresult cuGraphAddNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return add_node(out, g, deps, NULL, n, p);
}

PV_API CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams *p)
{
    struct pv_gnode *n = pv_gnode_of(node);
    if (!n || !p || p->type != n->type)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case PV_cudaGraphNodeTypeKernel:
        return kernel_set(node, &p->u.kernel, 1);
    case PV_cudaGraphNodeTypeMemcpy:
        return cuGraphMemcpyNodeSetParams(node, &p->u.memcpy.copyParams);
    case PV_cudaGraphNodeTypeMemset:
        return cuGraphMemsetNodeSetParams(node, &p->u.memset);
    case PV_cudaGraphNodeTypeHost:
        return cuGraphHostNodeSetParams(node, &p->u.host);
    case PV_cudaGraphNodeTypeWaitEvent:
        return cuGraphEventWaitNodeSetEvent(node, p->u.eventWait.event);
    case PV_cudaGraphNodeTypeEventRecord:
        return cuGraphEventRecordNodeSetEvent(node, p->u.eventRecord.event);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* ------------------------------------------------------------------------------------------ structure */
static CUresult edges_change(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *e,
                             size_t n, int add)
{
    DRV_RETURN(pv_graph_edges_change(g, NODES(from), NODES(to), e, n, add));
}

PV_API CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                          const CUgraphEdgeData *e, size_t n)
{
    return edges_change(g, from, to, e, n, 1);
}
PV_API CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    return edges_change(g, from, to, NULL, n, 1);
}
PV_API CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                             const CUgraphEdgeData *e, size_t n)
{
    return edges_change(g, from, to, e, n, 0);
}
PV_API CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    return edges_change(g, from, to, NULL, n, 0);
}

PV_API CUresult cuGraphDestroyNode(CUgraphNode node)
{
    CUresult r = drv_ready();
    struct pv_gnode *n = pv_gnode_of(node);
    if (r == CUDA_SUCCESS && !n)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && pv_gmem_restricted(n->graph))
        r = CUDA_ERROR_NOT_SUPPORTED;                  /* nodes of a graph with memory nodes stay */
    if (r == CUDA_SUCCESS)
        pv_gnode_destroy(n);
    return r;
}

PV_API CUresult cuGraphNodeGetType(CUgraphNode node, int *type)
{
    struct pv_gnode *n = pv_gnode_of(node);
    CUresult r = n && type ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *type = n->type;
    return r;
}

static CUresult nodes(CUgraph g, CUgraphNode *out, size_t *count, int roots)
{
    CUresult r = pv_graph_of(g) && count ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        pv_graph_nodes(g, roots, out, count);
    return r;
}

PV_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *out, size_t *count) { return nodes(g, out, count, 0); }
PV_API CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode *out, size_t *count) { return nodes(g, out, count, 1); }

static CUresult edges(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *e, size_t *count)
{
    CUresult r = pv_graph_of(g) && count && !from == !to ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        pv_graph_edges(g, from, to, e, count);
    return r;
}

PV_API CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *e, size_t *count)
{
    return edges(g, from, to, e, count);
}
PV_API CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *count)
{
    return edges(g, from, to, NULL, count);
}

static CUresult neighbours(CUgraphNode node, CUgraphNode *out, CUgraphEdgeData *e, size_t *count, int dependents)
{
    struct pv_gnode *n = pv_gnode_of(node);
    CUresult r = n && count ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    return r == CUDA_SUCCESS ? drv_result(pv_gnode_neighbours(n, dependents, out, e, count)) : r;
}

PV_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode n, CUgraphNode *out, CUgraphEdgeData *e, size_t *count)
{
    return neighbours(n, out, e, count, 0);
}
PV_API CUresult cuGraphNodeGetDependencies(CUgraphNode n, CUgraphNode *out, size_t *count)
{
    return neighbours(n, out, NULL, count, 0);
}
PV_API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode n, CUgraphNode *out, CUgraphEdgeData *e, size_t *count)
{
    return neighbours(n, out, e, count, 1);
}
PV_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode n, CUgraphNode *out, size_t *count)
{
    return neighbours(n, out, NULL, count, 1);
}
