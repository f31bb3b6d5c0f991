/* CUDA graphs in the core, for both API libraries: the node/graph object model (graph.c), stream capture
 * (capture.c) and instantiation/launch/update (graph_exec.c). libvcudart's cudaGraph* and libvcuda's cuGraph* are
 * thin wrappers (the driver translates its node parameter structs into the runtime's, pv_types.h).
 *
 * A graph lives on the client. Instantiation orders its nodes topologically and cuts the order into segments:
 * runs of device-only work on one GPU (kernels, device-to-device copies, memsets, event records and waits), recorded
 * as the exact fire-and-forget frames the API would send (record.c) and uploaded once per GPU (GRAPH_CREATE), and
 * client actions (host functions, copies that read or write host memory, work across GPUs), which run when the
 * graph is launched. A launch is one GRAPH_LAUNCH message per device segment. */
#ifndef PV_GRAPH_H
#define PV_GRAPH_H

#include "pv_features.h"

#define PV_GRAPH_MAGIC 0x47524150u
#define PV_GNODE_MAGIC 0x474e4f44u
#define PV_GEXEC_MAGIC 0x47455845u

/* A kernel launch with its arguments packed at the parameter offsets of its kernel on `dev` (launch.c). */
struct pv_kernel_launch {
    struct pv_func *func;
    int dev;
    dim3 grid, block;
    size_t shmem;
    char *params;                  /* owned; param_bytes long */
    size_t param_bytes;
    int cooperative;               /* sent as LAUNCH_COOPERATIVE (a captured cooperative launch) */
};
/* A launch checked and packed now, sent later: args (one pointer per parameter) or extra (CU_LAUNCH_PARAM_*). */
cudaError_t pv_launch_prepare(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, void **args,
                              void **extra, size_t shmem, struct pv_kernel_launch *out);
cudaError_t pv_launch_send(const struct pv_kernel_launch *k, uint64_t stream);
void pv_launch_free(struct pv_kernel_launch *k);

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
    void **kparams;                /* kernel parameter pointers into p.kernel.params (made on first query) */
};

struct pv_graph {
    uint32_t magic;
    struct pv_gnode **nodes;
    int n, cap;
    int next_index;
};

/* ---- objects (graph.c) ---- */
cudaError_t pv_graph_new(struct pv_graph **out);
void pv_graph_free(struct pv_graph *g);
struct pv_graph *pv_graph_of(const void *g);          /* NULL unless a live graph */
struct pv_gnode *pv_gnode_of(const void *n);          /* NULL unless a live node */
struct pv_gnode *pv_gnode_typed(const void *n, int type);   /* a live node of that type, else NULL */
/* A new node of `type` in g after deps[0..ndeps) (validated: live nodes of g, no repeats); params unset. */
cudaError_t pv_gnode_add(struct pv_graph *g, int type, struct pv_gnode *const *deps, size_t ndeps,
                         struct pv_gnode **out);
void pv_gnode_destroy(struct pv_gnode *n);           /* out of its graph, with every edge into and out of it */
void pv_gnode_release(struct pv_gnode *n);           /* frees what the node's params own */
cudaError_t pv_gnode_copy_params(struct pv_gnode *dst, const struct pv_gnode *src);
/* A deep copy of g (child graphs included); map[i] = copy of g->nodes[i] when map is given (caller frees). */
cudaError_t pv_graph_clone(const struct pv_graph *g, struct pv_graph **out, struct pv_gnode ***map);
int pv_graph_has_edge(const struct pv_gnode *from, const struct pv_gnode *to);
cudaError_t pv_gnode_add_dep(struct pv_gnode *to, struct pv_gnode *from);

/* Node parameters as the explicit API and capture both build them. */
cudaError_t pv_gnode_set_kernel(struct pv_gnode *n, struct pv_func *f, int dev, dim3 grid, dim3 block, size_t shmem,
                                void **args, void **extra);
cudaError_t pv_gnode_set_memset(struct pv_gnode *n, const struct cudaMemsetParams *p);
cudaError_t pv_gnode_set_copy(struct pv_gnode *n, const struct cudaMemcpy3DParms *p);
void pv_copy1d_params(struct cudaMemcpy3DParms *p, void *dst, const void *src, size_t count, int kind);
/* The parameters of a memcpy node (a cudaMemcpy3DParms) or a memset node (a cudaMemsetParams), by n->type. */
cudaError_t pv_gnode_set(struct pv_gnode *n, const void *p);
cudaError_t pv_gnode_set_host(struct pv_gnode *n, const struct cudaHostNodeParams *p);
cudaError_t pv_gnode_set_event(struct pv_gnode *n, cudaEvent_t e);
/* The kernel parameter pointers of a kernel node (into its packed arguments), made on first use. */
cudaError_t pv_gnode_kernel_args(struct pv_gnode *n, void ***args);

/* The explicit API's add calls: the node, or nothing when the graph, dependencies or parameters are refused. */
cudaError_t pv_graph_add(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, int type, const void *p,
                         struct pv_gnode **out);   /* memcpy, memset, host (cudaHostNodeParams), empty (p unused) */
cudaError_t pv_graph_add_kernel(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, struct pv_func *f,
                                int dev, dim3 grid, dim3 block, size_t shmem, void **args, void **extra,
                                struct pv_gnode **out);
cudaError_t pv_graph_add_child(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps,
                               struct pv_graph *child, struct pv_gnode **out);   /* embeds a copy of child */
cudaError_t pv_graph_add_event(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, cudaEvent_t e,
                               int type, struct pv_gnode **out);                 /* record / wait */
/* Edge data (cudaGraphEdgeData / CUgraphEdgeData, same layout): only the default edge type is offered. */
cudaError_t pv_edges_plain(const cudaGraphEdgeData *edges, size_t n);
cudaError_t pv_graph_edges_change(struct pv_graph *g, struct pv_gnode *const *from, struct pv_gnode *const *to,
                                  const cudaGraphEdgeData *edges, size_t n, int add);
/* The CUDA "count or fill" queries: with out == NULL report the count, else fill up to *count entries (the rest
 * NULL) and report how many exist. Edge data, when asked for, reads as the default type. */
void pv_graph_nodes(const struct pv_graph *g, int roots_only, struct pv_gnode **out, size_t *count);
void pv_graph_edges(const struct pv_graph *g, struct pv_gnode **from, struct pv_gnode **to, cudaGraphEdgeData *edges,
                    size_t *count);
cudaError_t pv_gnode_neighbours(const struct pv_gnode *n, int dependents, struct pv_gnode **out,
                                cudaGraphEdgeData *edges, size_t *count);
struct pv_gnode *pv_graph_find_clone(const struct pv_graph *clone, const struct pv_gnode *orig);
cudaError_t pv_graph_dot_print(const struct pv_graph *g, const char *path);

/* ---- graph memory nodes (graph_mem.c) ---- */
/* An allocation node: the allocation is made now, its address written to p->dptr (fixed for the node's life). */
cudaError_t pv_graph_add_mem_alloc(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps,
                                   struct cudaMemAllocNodeParams *p, struct pv_gnode **out);
cudaError_t pv_graph_add_mem_free(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, void *dptr,
                                  struct pv_gnode **out);
cudaError_t pv_gmem_alloc_params(const struct pv_gnode *n, struct cudaMemAllocNodeParams *out);
cudaError_t pv_gmem_free_params(const struct pv_gnode *n, void **dptr);
/* 1 when g has memory nodes (or frees another graph's allocation): no clone, child use, node or edge removal. */
int pv_gmem_restricted(const struct pv_graph *g);
/* cudaMallocAsync / cudaFreeAsync on a capturing stream (free: 1 when ptr is a graph allocation, *err set). */
cudaError_t pv_capture_mem_alloc(cudaStream_t s, struct pv_device *d, size_t size, void **ptr);
int pv_capture_mem_free(cudaStream_t s, void *ptr, cudaError_t *err);
/* Instantiation of g (cudaErrorNotSupported while another exec of it exists), an exec's memory nodes held (+1) or
 * given back (-1), a launch's allocations and frees (cudaErrorInvalidValue: one is still live, unless auto_free). */
cudaError_t pv_gmem_instantiate(const struct pv_graph *g);
void pv_gmem_exec_hold(struct pv_gnode *const *nodes, int n, int delta);
cudaError_t pv_gmem_launch(struct pv_gnode *const *order, int n, int auto_free);
/* cudaFree / cudaFreeAsync of a graph allocation: 1 when ptr is one (*err set). */
int pv_gmem_free_outside(void *ptr, cudaError_t *err);
void pv_gmem_graph_gone(const struct pv_graph *g);    /* g destroyed: what only it could use goes back */
void pv_gmem_forget_device(int dev);                  /* a device reset */
/* cudaDeviceGet/SetGraphMemAttribute (cudaGraphMemAttributeType; u64 values), cudaDeviceGraphMemTrim. */
cudaError_t pv_graph_mem_attr(int device, int attr, void *value, int set);
cudaError_t pv_graph_mem_trim(int device);

/* ---- running nodes (graph_exec.c) ---- */
/* Runs one node's work on stream s now (client actions at launch, and device work while recording). */
cudaError_t pv_gnode_run(struct pv_gnode *n, cudaStream_t s);
/* Device-only work on one GPU: it can be recorded into an uploaded segment. */
int pv_gnode_device_only(const struct pv_gnode *n, int *dev);

/* ---- executable graphs (graph_exec.c) ---- */
struct pv_gexec;
struct pv_gexec *pv_gexec_of(const void *x);          /* NULL unless a live exec */
/* err_node (may be NULL) names a node that cannot be instantiated; *result is a cudaGraphInstantiateResult. */
cudaError_t pv_graph_instantiate(struct pv_gexec **out, struct pv_graph *g, unsigned long long flags,
                                 struct pv_gnode **err_node, int *result);
cudaError_t pv_gexec_destroy(struct pv_gexec *x);
unsigned long long pv_gexec_flags(const struct pv_gexec *x);
cudaError_t pv_graph_launch(struct pv_gexec *x, cudaStream_t s);      /* into a capture: embeds the graph */
cudaError_t pv_graph_upload(struct pv_gexec *x, cudaStream_t s);
/* Per-exec parameters of node `orig` (a node of the graph x was instantiated from). */
cudaError_t pv_gexec_set_kernel(struct pv_gexec *x, struct pv_gnode *orig, struct pv_func *f, dim3 grid, dim3 block,
                                size_t shmem, void **args, void **extra);
cudaError_t pv_gexec_set(struct pv_gexec *x, struct pv_gnode *orig, int type, const void *p);  /* memcpy/memset/host */
cudaError_t pv_gexec_set_event(struct pv_gexec *x, struct pv_gnode *orig, int type, cudaEvent_t e);
cudaError_t pv_gexec_enable(struct pv_gexec *x, struct pv_gnode *orig, unsigned on);
cudaError_t pv_gexec_enabled(struct pv_gexec *x, struct pv_gnode *orig, unsigned *on);
/* New parameters from g when the topology is the same; else *result says why (cudaGraphExecUpdateResult) and
 * *err_node which node (a node of g, or NULL). */
cudaError_t pv_gexec_update(struct pv_gexec *x, struct pv_graph *g, int *result, struct pv_gnode **err_node);

/* ---- stream capture (capture.c), used by the API entry points of every capturable call ---- */
/* 1 when stream s is capturing (an active or invalidated capture): its work must become graph nodes. */
int pv_capturing(cudaStream_t s);
/* A node of `type` appended to s's capture after the stream's current dependencies (which become the node);
 * *out is the node so the caller fills its parameters; on error the capture is invalidated. */
cudaError_t pv_capture_node(cudaStream_t s, int type, struct pv_gnode **out);
/* The same for a memcpy or memset node with its parameters (pv_gnode_set); an empty node when they are refused. */
cudaError_t pv_capture_params(cudaStream_t s, int type, const void *p);
/* The capturable calls of both APIs, as nodes of s's capture. */
cudaError_t pv_capture_copy1d(cudaStream_t s, void *dst, const void *src, size_t n, int kind);
cudaError_t pv_capture_copy2d(cudaStream_t s, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, int kind);
cudaError_t pv_capture_launch(cudaStream_t s, struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block,
                              size_t shmem, void **args, void **extra, int cooperative);
cudaError_t pv_capture_host(cudaStream_t s, void (*fn)(void *), void *user);
/* A call that is illegal while s captures (synchronization, queries): invalidates the capture and answers
 * cudaErrorStreamCaptureUnsupported; PV_SUCCESS when s is not capturing. */
cudaError_t pv_capture_forbid(cudaStream_t s);
/* cudaDeviceSynchronize and friends: invalidate every capture that is not relaxed. */
cudaError_t pv_capture_forbid_all(void);
/* Event plumbing of capture (fork/join): an event recorded on a capturing stream, a wait on an event recorded in a
 * capture. Return 1 when they handled the call (result in *err), 0 when it is ordinary. */
int pv_capture_event_record(cudaEvent_t e, cudaStream_t s, unsigned flags, cudaError_t *err);
int pv_capture_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags, cudaError_t *err);
void pv_capture_event_forget(cudaEvent_t e);          /* event destroyed */
void pv_capture_stream_forget(cudaStream_t s);        /* stream destroyed */
/* Begin/end (into: capture into an existing graph after deps), status and info, dependency updates. */
cudaError_t pv_capture_begin(cudaStream_t s, struct pv_graph *into, struct pv_gnode *const *deps, size_t ndeps,
                             const cudaGraphEdgeData *edges, int mode);
cudaError_t pv_capture_end(cudaStream_t s, struct pv_graph **out);
cudaError_t pv_capture_status(cudaStream_t s, int *status);
/* Any output may be NULL; *deps stays valid until the stream's next capture call. */
cudaError_t pv_capture_info(cudaStream_t s, int *status, unsigned long long *id, struct pv_graph **graph,
                            struct pv_gnode *const **deps, size_t *ndeps);
cudaError_t pv_capture_update_deps(cudaStream_t s, struct pv_gnode *const *deps, const cudaGraphEdgeData *edges,
                                   size_t n, unsigned flags);
cudaError_t pv_capture_exchange_mode(int *mode);      /* the per-thread capture mode */

/* The synchronizing calls of both APIs (sync.c): capture invalidation, the wait, pool releases. */
cudaError_t pv_sync_stream(cudaStream_t s);
cudaError_t pv_sync_event(cudaEvent_t e);
cudaError_t pv_sync_device(struct pv_device *d);

/* cudaStreamWaitEvent without its capture part (cudaEventWaitExternal only matters to a capture). */
cudaError_t pv_stream_wait_run(cudaStream_t s, cudaEvent_t e, unsigned flags);
/* cudaMemset* with its capture check. */
cudaError_t pv_memset_any(const struct cudaMemsetParams *p, cudaStream_t s);

#endif
