/* CUDA graphs inside libvcudart: the node/graph object model (api_graph.c), stream capture (api_capture.c) and
 * instantiation/launch (graph_exec.c).
 *
 * A graph lives on the client. Instantiation orders its nodes topologically and cuts the order into segments:
 * runs of device-only work on one GPU (kernels, device-to-device copies, memsets, event records and waits), recorded
 * as the exact fire-and-forget frames the API would send (core record.c) and uploaded once per GPU
 * (GRAPH_CREATE), and client actions (host functions, copies that read or write host memory, work across GPUs),
 * which run when the graph is launched. A launch is one GRAPH_LAUNCH message per device segment. */
#ifndef PV_GRAPH_H
#define PV_GRAPH_H

#include "cudart.h"

/* Public entry points the feature files call (unsupported_gen.c declares every export without a prototype, so these
 * live here rather than in cudart.h). */
cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol);
cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol);
cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node);

#define PV_GRAPH_MAGIC 0x47524150u
#define PV_GNODE_MAGIC 0x474e4f44u
#define PV_GEXEC_MAGIC 0x47455845u

/* A kernel launch with its arguments packed at the parameter offsets of its kernel on `dev` (api_launch.c). */
struct pv_kernel_launch {
    struct pv_func *func;
    int dev;
    dim3 grid, block;
    size_t shmem;
    char *params;                  /* owned; param_bytes long */
    size_t param_bytes;
};
cudaError_t pv_launch_prepare(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, void **args,
                              void **extra, size_t shmem, struct pv_kernel_launch *out);
cudaError_t pv_launch_send(const struct pv_kernel_launch *k, uint64_t stream);
void pv_launch_free(struct pv_kernel_launch *k);
struct pv_func *pv_func_of(const void *func);

struct pv_graph;
struct pv_gnode {
    uint32_t magic;
    int type;                      /* cudaGraphNodeType */
    struct pv_graph *graph;
    int index;                     /* creation order within its graph */
    int dev;                       /* GPU the node's work runs on (-1: none, e.g. host nodes) */
    int enabled;                   /* cudaGraphNodeSetEnabled, in an exec's copy */
    struct pv_gnode **deps;        /* incoming edges */
    int ndeps, capdeps;
    struct pv_gnode *orig;         /* in a clone or an exec's copy: the node it was copied from */
    union {
        struct pv_kernel_launch kernel;
        struct cudaMemcpy3DParms copy;
        struct cudaMemsetParams memset;
        struct cudaHostNodeParams host;
        struct pv_graph *child;    /* owned clone */
        cudaEvent_t event;         /* event record / wait */
        struct { void *ptr; size_t size; } mem;   /* mem alloc / free */
    } p;
    void **kparams;                /* cudaGraphKernelNodeGetParams: pointers into p.kernel.params (lazily) */
};

struct pv_graph {
    uint32_t magic;
    struct pv_gnode **nodes;
    int n, cap;
    int next_index;
};

cudaError_t pv_graph_new(struct pv_graph **out);
void pv_graph_free(struct pv_graph *g);
struct pv_graph *pv_graph_of(cudaGraph_t g);          /* NULL unless a live graph */
struct pv_gnode *pv_gnode_of(cudaGraphNode_t n);      /* NULL unless a live node */
/* A new node of `type` in g after deps[0..ndeps) (validated: live nodes of g, no repeats); params unset. */
cudaError_t pv_gnode_add(struct pv_graph *g, int type, struct pv_gnode *const *deps, size_t ndeps,
                         struct pv_gnode **out);
void pv_gnode_release(struct pv_gnode *n);           /* frees what the node's params own */
cudaError_t pv_gnode_copy_params(struct pv_gnode *dst, const struct pv_gnode *src);
/* A deep copy of g (child graphs included); map[i] = copy of g->nodes[i] when map is given (caller frees). */
cudaError_t pv_graph_clone(const struct pv_graph *g, struct pv_graph **out, struct pv_gnode ***map);
int pv_graph_has_edge(const struct pv_gnode *from, const struct pv_gnode *to);
cudaError_t pv_gnode_add_dep(struct pv_gnode *to, struct pv_gnode *from);

/* Node parameters as the explicit API and capture both build them. */
cudaError_t pv_gnode_set_kernel(struct pv_gnode *n, const struct cudaKernelNodeParams *p, int dev);
cudaError_t pv_gnode_set_memset(struct pv_gnode *n, const struct cudaMemsetParams *p);
cudaError_t pv_gnode_set_copy(struct pv_gnode *n, const struct cudaMemcpy3DParms *p);
void pv_copy1d_params(struct cudaMemcpy3DParms *p, void *dst, const void *src, size_t count, int kind);
/* The parameters of a memcpy node (a cudaMemcpy3DParms) or a memset node (a cudaMemsetParams), by n->type. */
cudaError_t pv_gnode_set(struct pv_gnode *n, const void *p);

/* Runs one node's work on stream s now (client actions at launch, and device work while recording). */
cudaError_t pv_gnode_run(struct pv_gnode *n, cudaStream_t s);
/* Device-only work on one GPU: it can be recorded into an uploaded segment. */
int pv_gnode_device_only(const struct pv_gnode *n, int *dev);

/* ---- stream capture (api_capture.c), used by the API entry points of every capturable call ---- */
/* 1 when stream s is capturing (an active or invalidated capture): its work must become graph nodes. */
int pv_capturing(cudaStream_t s);
/* A node of `type` appended to s's capture after the stream's current dependencies (which become the node);
 * *out is the node so the caller fills its parameters; on error the capture is invalidated. */
cudaError_t pv_capture_node(cudaStream_t s, int type, struct pv_gnode **out);
/* The same for a memcpy or memset node with its parameters (pv_gnode_set); an empty node when they are refused. */
cudaError_t pv_capture_params(cudaStream_t s, int type, const void *p);
/* A call that is illegal while s captures (synchronization, queries): invalidates the capture and answers
 * cudaErrorStreamCaptureUnsupported; PV_SUCCESS when s is not capturing. */
cudaError_t pv_capture_forbid(cudaStream_t s);
/* cudaDeviceSynchronize and friends: invalidate every capture that is not relaxed. */
cudaError_t pv_capture_forbid_all(void);
/* Event plumbing of capture (fork/join): cudaEventRecord on a capturing stream and cudaStreamWaitEvent on an event
 * recorded in a capture. Return 1 when they handled the call (result in *err), 0 when it is ordinary. */
int pv_capture_event_record(cudaEvent_t e, cudaStream_t s, unsigned flags, cudaError_t *err);
int pv_capture_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags, cudaError_t *err);
void pv_capture_event_forget(cudaEvent_t e);          /* cudaEventDestroy */
void pv_capture_stream_forget(cudaStream_t s);        /* cudaStreamDestroy */

/* Internal executors shared by the API entry points and graph nodes (no capture checks inside). */
cudaError_t pv_memcpy3d_run(const struct cudaMemcpy3DParms *p, cudaStream_t s);
cudaError_t pv_array_copy3d(const struct cudaMemcpy3DParms *p, cudaStream_t s);   /* api_array.c */
struct pv_array *pv_array_of(const void *a);              /* NULL unless a live array */
int pv_array_info(const void *a, int *dev, uint64_t *remote, struct cudaChannelFormatDesc *desc,
                  struct cudaExtent *extent, unsigned *flags);
cudaError_t pv_memset_run(const struct cudaMemsetParams *p, cudaStream_t s);
cudaError_t pv_stream_wait_run(cudaStream_t s, cudaEvent_t e, unsigned flags);
/* Stream-ordered pools (api_pool.c). */
int pv_pool_owns(const void *ptr);
cudaError_t pv_pool_free_now(const void *ptr);            /* cudaFree of pool memory */
void pv_pools_synced(int dev);                            /* a synchronization of dev: release above thresholds */
void pv_pools_forget_device(int dev);                     /* cudaDeviceReset */
cudaError_t cudaFree(void *ptr);

/* Managed and mapped memory (api_managed.c). */
cudaError_t pv_mapped_alloc(void **ptr, size_t size, unsigned flags);
int pv_region_release(void *p, int host_api, cudaError_t *err);
int pv_mapped_flags(const void *p, unsigned *flags);

/* Device index owning a pointer (a device allocation, a module variable), -1 for host memory. */
int pv_ptr_device(const void *p);

#endif
