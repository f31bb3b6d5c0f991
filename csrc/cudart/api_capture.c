/* Stream capture: cudaStreamBeginCapture/EndCapture and the capture queries, on the core's capture.c (the
 * capturable calls of the other api_*.c files build their nodes there too). */
#include "cudart.h"

#define NODES(deps) ((struct pv_gnode *const *)(deps))

PV_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode)
{
    return pv_ret(pv_capture_begin(s, NULL, NULL, 0, NULL, mode));
}

PV_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                                 const cudaGraphEdgeData *edges, size_t ndeps, int mode)
{
    if (!pv_graph_of(graph))
        return pv_ret(PV_cudaErrorInvalidValue);
    return pv_ret(pv_capture_begin(s, graph, NODES(deps), ndeps, edges, mode));
}

PV_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *out) { return pv_ret(pv_capture_end(s, out)); }

PV_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, int *status) { return pv_ret(pv_capture_status(s, status)); }

PV_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, int *status, unsigned long long *id, cudaGraph_t *graph,
                                            const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                            size_t *ndeps)
{
    if (edges)
        *edges = NULL;
    return pv_ret(pv_capture_info(s, status, id, graph, (struct pv_gnode *const **)deps, ndeps));
}

PV_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *deps,
                                                       const cudaGraphEdgeData *edges, size_t n, unsigned flags)
{
    return pv_ret(pv_capture_update_deps(s, NODES(deps), edges, n, flags));
}

PV_API cudaError_t cudaThreadExchangeStreamCaptureMode(int *mode) { return pv_ret(pv_capture_exchange_mode(mode)); }

PV_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, int mode) { return cudaStreamBeginCapture(s, mode); }
PV_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,
                                                      const cudaGraphEdgeData *edges, size_t n, int mode)
{
    return cudaStreamBeginCaptureToGraph(s, g, deps, edges, n, mode);
}
PV_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g) { return cudaStreamEndCapture(s, g); }
PV_API cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t s, cudaGraphNode_t *deps,
                                                            const cudaGraphEdgeData *edges, size_t n, unsigned flags)
{
    return cudaStreamUpdateCaptureDependencies(s, deps, edges, n, flags);
}
