/* Executable graphs: instantiation (every ABI), launch, upload, update and the per-exec parameter setters, on the
 * core's graph_exec.c (a graph's device work uploaded once per GPU, a launch one message per device segment). */
#include <stdio.h>

#include "driver.h"

static CUresult instantiate(CUgraphExec *out, CUgraph g, unsigned long long flags, CUgraphNode *err_node)
{
    int result;
    struct pv_gnode *bad = NULL;
    CUresult r = drv_ready();
    if (r == CUDA_SUCCESS)
        r = drv_result(pv_graph_instantiate(out, g, flags, &bad, &result));
    if (err_node)
        *err_node = bad;
    return r;
}

PV_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags)
{
    return instantiate(out, g, flags, NULL);
}

/* The CUDA 10/11 ABI: an error node and a log buffer (left as an empty string; the reason is the result). */
PV_API CUresult cuGraphInstantiate_v2(CUgraphExec *out, CUgraph g, CUgraphNode *err_node, char *log, size_t size)
{
    if (log && size)
        log[0] = 0;
    return instantiate(out, g, 0, err_node);
}

PV_API CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph g, CUgraphNode *err_node, char *log, size_t size)
{
    return cuGraphInstantiate_v2(out, g, err_node, log, size);
}

PV_API CUresult cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    p->hErrNode_out = NULL;
    CUresult r = drv_ready();
    if (r == CUDA_SUCCESS)
        r = drv_result(pv_graph_instantiate(out, g, p->flags, &p->hErrNode_out, &p->result_out));
    return r;
}

PV_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return cuGraphInstantiateWithParams(out, g, p);
}

PV_API CUresult cuGraphExecGetFlags(CUgraphExec x, uint64_t *flags)
{
    CUresult r = pv_gexec_of(x) && flags ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *flags = pv_gexec_flags(x);
    return r;
}

PV_API CUresult cuGraphExecDestroy(CUgraphExec x) { DRV_RETURN(pv_gexec_destroy(x)); }
PV_API CUresult cuGraphLaunch(CUgraphExec x, CUstream s) { DRV_RETURN(pv_graph_launch(x, s)); }
PV_API CUresult cuGraphLaunch_ptsz(CUgraphExec x, CUstream s) { DRV_RETURN(pv_graph_launch(x, s)); }
PV_API CUresult cuGraphUpload(CUgraphExec x, CUstream s) { DRV_RETURN(pv_graph_upload(x, s)); }
PV_API CUresult cuGraphUpload_ptsz(CUgraphExec x, CUstream s) { DRV_RETURN(pv_graph_upload(x, s)); }

/* ------------------------------------------------------------------------------------------ per-exec parameters */
static CUresult exec_kernel(CUgraphExec x, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p, int v2)
{
    struct pv_device *d;
    CUresult r = p ? drv_ctx_device(v2 ? p->ctx : NULL, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_func *f = drv_func_of(v2 && p->kern ? (void *)p->kern : (void *)p->func, d);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    return drv_result(pv_gexec_set_kernel(x, node, f, (dim3){ p->gridDimX, p->gridDimY, p->gridDimZ },
                                          (dim3){ p->blockDimX, p->blockDimY, p->blockDimZ }, p->sharedMemBytes,
                                          p->kernelParams, p->kernelParams ? NULL : p->extra));
}

PV_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    return exec_kernel(x, n, p, 1);
}
PV_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    return exec_kernel(x, n, p, 0);
}

PV_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec x, CUgraphNode n, const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    struct cudaMemcpy3DParms p;
    struct pv_device *d;
    CUresult r = c ? (ctx ? drv_ctx_device(ctx, &d) : drv_ready()) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = drv_copy3d_in(c, &p);
    return r == CUDA_SUCCESS ? drv_result(pv_gexec_set(x, n, PV_cudaGraphNodeTypeMemcpy, &p)) : r;
}

PV_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec x, CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *m,
                                               CUcontext ctx)
{
    struct cudaMemsetParams p;
    struct pv_device *d;
    CUresult r = m ? (ctx ? drv_ctx_device(ctx, &d) : drv_ready()) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    drv_memset_in(m, &p);
    return drv_result(pv_gexec_set(x, n, PV_cudaGraphNodeTypeMemset, &p));
}

PV_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec x, CUgraphNode n, const CUDA_HOST_NODE_PARAMS *p)
{
    DRV_RETURN(pv_gexec_set(x, n, PV_cudaGraphNodeTypeHost, p));
}

PV_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec x, CUgraphNode n, CUevent e)
{
    DRV_RETURN(pv_gexec_set_event(x, n, PV_cudaGraphNodeTypeEventRecord, e));
}

PV_API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec x, CUgraphNode n, CUevent e)
{
    DRV_RETURN(pv_gexec_set_event(x, n, PV_cudaGraphNodeTypeWaitEvent, e));
}

PV_API CUresult cuGraphNodeSetEnabled(CUgraphExec x, CUgraphNode n, unsigned on) { DRV_RETURN(pv_gexec_enable(x, n, on)); }
PV_API CUresult cuGraphNodeGetEnabled(CUgraphExec x, CUgraphNode n, unsigned *on)
{
    DRV_RETURN(pv_gexec_enabled(x, n, on));
}

PV_API CUresult cuGraphExecNodeSetParams(CUgraphExec x, CUgraphNode n, CUgraphNodeParams *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case PV_cudaGraphNodeTypeKernel:
        return exec_kernel(x, n, &p->u.kernel, 1);
    case PV_cudaGraphNodeTypeMemcpy:
        return cuGraphExecMemcpyNodeSetParams(x, n, &p->u.memcpy.copyParams, p->u.memcpy.copyCtx);
    case PV_cudaGraphNodeTypeMemset:
        return cuGraphExecMemsetNodeSetParams(x, n, &p->u.memset, p->u.memset.ctx);
    case PV_cudaGraphNodeTypeHost:
        return cuGraphExecHostNodeSetParams(x, n, &p->u.host);
    case PV_cudaGraphNodeTypeEventRecord:
        return cuGraphExecEventRecordNodeSetEvent(x, n, p->u.eventRecord.event);
    case PV_cudaGraphNodeTypeWaitEvent:
        return cuGraphExecEventWaitNodeSetEvent(x, n, p->u.eventWait.event);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* New parameters when the topology is the same (core graph_exec.c); otherwise the result says why. */
PV_API CUresult cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    if (!info)
        return CUDA_ERROR_INVALID_VALUE;
    int result;
    struct pv_gnode *bad;
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    r = drv_result(pv_gexec_update(x, g, &result, &bad));
    *info = (CUgraphExecUpdateResultInfo){ result, bad, NULL };
    return r;
}

PV_API CUresult cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode *err_node, int *result)
{
    CUgraphExecUpdateResultInfo info;
    if (!err_node || !result)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuGraphExecUpdate_v2(x, g, &info);
    *err_node = info.errorNode;
    *result = info.result;
    return r;
}
