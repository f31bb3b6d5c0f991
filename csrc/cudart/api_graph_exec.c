/* Executable graphs: cudaGraphInstantiate*, launch, upload, update and the per-exec parameter setters, on the core's
 * graph_exec.c. */
#include "cudart.h"

PV_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t graph, unsigned long long flags)
{
    int result;
    return pv_ret(pv_graph_instantiate(out, graph, flags, NULL, &result));
}

PV_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *out, cudaGraph_t graph, unsigned long long flags)
{
    return cudaGraphInstantiate(out, graph, flags);
}

PV_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *out, cudaGraph_t graph,
                                                  cudaGraphInstantiateParams *p)
{
    if (!p)
        return pv_ret(PV_cudaErrorInvalidValue);
    int result;
    cudaError_t err = pv_graph_instantiate(out, graph, p->flags, &p->errNode_out, &result);
    p->result_out = result;
    return pv_ret(err);
}

PV_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *out, cudaGraph_t graph,
                                                       cudaGraphInstantiateParams *p)
{
    return cudaGraphInstantiateWithParams(out, graph, p);
}

PV_API cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t exec, unsigned long long *flags)
{
    struct pv_gexec *x = pv_gexec_of(exec);
    if (!x || !flags)
        return pv_ret(PV_cudaErrorInvalidValue);
    *flags = pv_gexec_flags(x);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return pv_ret(pv_gexec_destroy(exec)); }
PV_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) { return pv_ret(pv_graph_launch(exec, s)); }
PV_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t s) { return cudaGraphLaunch(exec, s); }
PV_API cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t s) { return pv_ret(pv_graph_upload(exec, s)); }
PV_API cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t exec, cudaStream_t s) { return cudaGraphUpload(exec, s); }

/* ------------------------------------------------------------------------------------------ per-exec parameters */
PV_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaKernelNodeParams *p)
{
    if (!p)
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_gexec_set_kernel(exec, node, pv_func_of(p->func), p->gridDim, p->blockDim, p->sharedMemBytes,
                                      p->kernelParams, p->kernelParams ? NULL : p->extra));
}

PV_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaMemcpy3DParms *p)
{
    return pv_ret(pv_gexec_set(exec, node, PV_cudaGraphNodeTypeMemcpy, p));
}

PV_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                                      const void *src, size_t count, int kind)
{
    struct cudaMemcpy3DParms p;
    pv_copy1d_params(&p, dst, src, count, kind);
    return cudaGraphExecMemcpyNodeSetParams(exec, node, &p);
}

PV_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaMemsetParams *p)
{
    return pv_ret(pv_gexec_set(exec, node, PV_cudaGraphNodeTypeMemset, p));
}

PV_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                  const struct cudaHostNodeParams *p)
{
    return pv_ret(pv_gexec_set(exec, node, PV_cudaGraphNodeTypeHost, p));
}

PV_API cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t e)
{
    return pv_ret(pv_gexec_set_event(exec, node, PV_cudaGraphNodeTypeEventRecord, e));
}

PV_API cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t e)
{
    return pv_ret(pv_gexec_set_event(exec, node, PV_cudaGraphNodeTypeWaitEvent, e));
}

PV_API cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned on)
{
    return pv_ret(pv_gexec_enable(exec, node, on));
}

PV_API cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned *on)
{
    return pv_ret(pv_gexec_enabled(exec, node, on));
}

PV_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                              struct cudaGraphNodeParams *p)
{
    if (!p)
        return pv_ret(PV_cudaErrorInvalidValue);
    switch (p->type) {
    case PV_cudaGraphNodeTypeKernel:
        return cudaGraphExecKernelNodeSetParams(exec, node, &p->u.kernel);
    case PV_cudaGraphNodeTypeMemcpy:
        return cudaGraphExecMemcpyNodeSetParams(exec, node, &p->u.memcpy.copyParams);
    case PV_cudaGraphNodeTypeMemset:
        return cudaGraphExecMemsetNodeSetParams(exec, node, &p->u.memset);
    case PV_cudaGraphNodeTypeHost:
        return cudaGraphExecHostNodeSetParams(exec, node, &p->u.host);
    case PV_cudaGraphNodeTypeEventRecord:
        return cudaGraphExecEventRecordNodeSetEvent(exec, node, p->u.eventRecord.event);
    case PV_cudaGraphNodeTypeWaitEvent:
        return cudaGraphExecEventWaitNodeSetEvent(exec, node, p->u.eventWait.event);
    default:
        return pv_ret(PV_cudaErrorNotSupported);
    }
}

/* cudaGraphExecUpdate where the topology is unchanged (core graph_exec.c); otherwise info says why. */
PV_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo *info)
{
    if (!info)
        return pv_ret(PV_cudaErrorInvalidValue);
    int result;
    struct pv_gnode *bad;
    cudaError_t err = pv_gexec_update(exec, graph, &result, &bad);
    info->result = result;
    info->errorNode = bad;
    info->errorFromNode = NULL;
    return pv_ret(err);
}
