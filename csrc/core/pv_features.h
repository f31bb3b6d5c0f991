/* The runtime features both API libraries offer, in the core: libvcudart's cuda* and libvcuda's cu* entry points
 * are thin wrappers of these (argument forms translated, results mapped to each API's error type). Results are
 * cudaError_t; parameters use CUDA's runtime structs (pv_types.h), the core's own form of them.
 *   memory.c    frees of every kind of device memory, host allocations (pinned, mapped), pointer classification
 *   managed.c   managed and mapped memory on coherence.c: allocation, registration, __managed__ variables,
 *               prefetch, advice, range attributes
 *   launch_ex.c launches on a stream handle, with launch attributes, cooperative launches
 *   pools.c     stream-ordered memory pools (client-side)
 *   arrays.c    CUDA arrays and every copy to, from and between them (3D copies in bytes)
 *   textures.c  texture and surface objects
 *   peers.c     peer access between GPUs of one daemon
 *   reset.c     what a device reset forgets on the client */
#ifndef PV_FEATURES_H
#define PV_FEATURES_H

#include "pv_base.h"
#include "pv_hostmap.h"
#include "pv_registry.h"
#include "pv_types.h"

/* ---- memory (memory.c) ---- */
/* The device whose allocation holds p (device memory, module variables), -1 for anything else. */
int pv_ptr_device(const void *p);
/* cudaMalloc / cuMemAlloc and the library allocations: size bytes on d (MALLOC), entered in the allocation table as
 * owner's only where no live entry holds any of its addresses (another GPU host's driver may hand out the same):
 * a colliding range is kept, the host asked again, bounded, then cudaErrorMemoryAllocation with one log line that
 * names both owners. */
cudaError_t pv_malloc_unique(struct pv_device *d, size_t size, const void *owner, uint64_t *out);
/* "GPUk (host:port)" for a device's entry of the allocation table, else "host memory of this process". */
void pv_alloc_owner_name(int dev, char *out, size_t n);
/* cudaFree / cuMemFree: managed memory, a pool block (it leaves its pool) or a device allocation. */
cudaError_t pv_mem_free(void *ptr);
/* cudaHostAlloc / cuMemHostAlloc: pinned host memory; with flags & 2 (mapped) a coherent device copy too. */
cudaError_t pv_mem_host_alloc(void **ptr, size_t size, unsigned flags);
cudaError_t pv_mem_free_host(void *ptr);
cudaError_t pv_mem_host_flags(const void *ptr, unsigned *flags);
/* What the process knows about an address (cudaPointerGetAttributes, cuPointerGetAttribute). */
enum { PV_PTR_UNKNOWN = 0, PV_PTR_HOST = 1, PV_PTR_DEVICE = 2, PV_PTR_MANAGED = 3 };
struct pv_ptr_info {
    int type;                      /* PV_PTR_* */
    int device;                    /* the GPU holding it; for pinned host memory the thread's device; -2 unknown */
    int mapped;                    /* host memory with a device copy (mapped, registered) */
    uint64_t dev, host;            /* the address on each side (0 when it has none) */
    uint64_t base;                 /* the allocation holding it: start and size, as the side p names */
    size_t size;
};
void pv_ptr_classify(const void *p, struct pv_ptr_info *out);

/* ---- launches on a stream handle, with attributes, cooperative (launch_ex.c) ---- */
/* A launch of f on d in stream s (resolved and checked; a kernel node when s captures), parameters as args (one
 * pointer each) or extra (CU_LAUNCH_PARAM_BUFFER_*), not both. */
cudaError_t pv_launch_on(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                         void **args, void **extra);
/* cudaLaunchKernelExC / cuLaunchKernelEx: the same with launch attributes (launch_ex.c says which do what). */
cudaError_t pv_launch_ex(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                         const struct pv_launch_attr *attrs, unsigned nattrs, void **args, void **extra);
/* cudaLaunchCooperativeKernel / cuLaunchCooperativeKernel and the cooperative attribute: one path for all three. */
cudaError_t pv_launch_cooperative(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem,
                                  cudaStream_t s, void **args);

/* ---- managed and mapped memory (managed.c) ---- */
cudaError_t pv_managed_alloc(void **ptr, size_t size, unsigned flags);   /* on the thread's current device */
cudaError_t pv_mapped_alloc(void **ptr, size_t size, unsigned flags);
/* A free of a region's start by the device API (host_api 0) or the host API (1): 1 when p was one (*err set). */
int pv_region_release(void *p, int host_api, cudaError_t *err);
int pv_mapped_flags(const void *p, unsigned *flags);             /* 1 and the flags when p is mapped memory */
/* ---- page-locked host memory as the GPUs see it (hostmem.c) ---- */
cudaError_t pv_host_device_pointer(void *host, void **dev);      /* cudaHostGetDevicePointer */
cudaError_t pv_host_register(void *ptr, size_t size, unsigned flags);
cudaError_t pv_host_unregister(void *ptr);                        /* cudaErrorHostMemoryNotRegistered if not one */
/* A __managed__ variable's storage on d mirrored at its own address (once: later calls answer the same). */
cudaError_t pv_managed_var_bind(struct pv_var *v, struct pv_device *d, void **host);
cudaError_t pv_mem_prefetch(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags, cudaStream_t s);
cudaError_t pv_mem_advise(const void *p, size_t n, int advice, struct cudaMemLocation loc);
cudaError_t pv_mem_range_attr(void *data, size_t size, int attr, const void *p, size_t n);
cudaError_t pv_stream_attach_mem(cudaStream_t s, void *p, size_t n, unsigned flags);

/* ---- stream-ordered pools (pools.c) ---- */
int pv_pool_owns(const void *ptr);
cudaError_t pv_pool_free_now(const void *ptr);            /* cudaFree of pool memory */
void pv_pools_synced(int dev);                            /* a synchronization of dev: release above thresholds */
void pv_pools_forget_device(int dev);                     /* a device reset */
/* From pool (NULL: the current pool of s's device), ordered on s; size 0 gives NULL. */
cudaError_t pv_pool_malloc(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s);
cudaError_t pv_pool_free_async(void *ptr, cudaStream_t s); /* pool blocks are kept; other memory is freed */
cudaError_t pv_pool_get(cudaMemPool_t *pool, int device, int current);
cudaError_t pv_pool_set_current(int device, cudaMemPool_t pool);
/* The device of a pool location (device locations of pinned pools only). */
cudaError_t pv_pool_location(const struct cudaMemLocation *loc, int type, int *dev);
cudaError_t pv_pool_create(cudaMemPool_t *pool, const struct cudaMemPoolProps *props);
cudaError_t pv_pool_destroy(cudaMemPool_t pool);
cudaError_t pv_pool_trim(cudaMemPool_t pool, size_t keep);
cudaError_t pv_pool_attr(cudaMemPool_t pool, int attr, void *value, int set);
cudaError_t pv_pool_set_access(cudaMemPool_t pool, const struct cudaMemAccessDesc *descs, size_t n);
cudaError_t pv_pool_get_access(int *flags, cudaMemPool_t pool, const struct cudaMemLocation *loc);

/* ---- arrays and 3D copies (arrays.c) ---- */
struct pv_array *pv_array_of(const void *a);              /* NULL unless a live array */
int pv_array_info(const void *a, int *dev, uint64_t *remote, struct cudaChannelFormatDesc *desc,
                  struct cudaExtent *extent, unsigned *flags);
size_t pv_format_bytes(const struct cudaChannelFormatDesc *d);   /* bytes per element */
/* An array on the thread's current device: extent in elements (height 0: 1D, depth 0: 2D). */
cudaError_t pv_array_create(cudaArray_t *out, const struct cudaChannelFormatDesc *desc, size_t w, size_t h, size_t d,
                            unsigned flags);
cudaError_t pv_array_destroy(cudaArray_t a);
/* A 3D copy (cudaMemcpy3D's form: positions and extent in elements of the array involved), no capture check. */
cudaError_t pv_memcpy3d_run(const struct cudaMemcpy3DParms *p, cudaStream_t s);
/* cudaMemcpy3D(Async): its checks, a capture or the copy. */
cudaError_t pv_memcpy3d(const struct cudaMemcpy3DParms *p, cudaStream_t s);
cudaError_t pv_array_copy3d(const struct cudaMemcpy3DParms *p, cudaStream_t s);
/* Rows of `width` bytes between the array at (wo bytes, ho) and memory of row pitch mpitch, either way. */
cudaError_t pv_array_copy2d(int to_array, cudaArray_const_t array, size_t wo, size_t ho, void *mem, size_t mpitch,
                            size_t width, size_t height, int kind, cudaStream_t s);
cudaError_t pv_array_copy2d_a2a(cudaArray_t dst, size_t wod, size_t hod, cudaArray_const_t src, size_t wos,
                                size_t hos, size_t width, size_t height, int kind);
/* count bytes from (wo, ho) on, row after row (the deprecated 1D forms). */
cudaError_t pv_array_copy1d(int to_array, cudaArray_const_t array, size_t wo, size_t ho, void *mem, size_t count,
                            int kind, cudaStream_t s);
cudaError_t pv_array_copy1d_a2a(cudaArray_t dst, size_t wod, size_t hod, cudaArray_const_t src, size_t wos,
                                size_t hos, size_t count, int kind);
/* cudaMemsetParams' form of a memset (copy.c), no capture check. */
cudaError_t pv_memset_run(const struct cudaMemsetParams *p, cudaStream_t s);
cudaError_t pv_memcpy3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s);

/* ---- texture and surface objects (textures.c) ---- */
cudaError_t pv_texture_create(cudaTextureObject_t *out, const struct cudaResourceDesc *r,
                              const struct cudaTextureDesc *t, const struct cudaResourceViewDesc *v);
cudaError_t pv_surface_create(cudaSurfaceObject_t *out, const struct cudaResourceDesc *r);
cudaError_t pv_texobj_destroy(unsigned long long value, int surface);
/* The channel format of a resource (zeros for a resource that is not an array or linear memory). */
void pv_resource_format(const struct cudaResourceDesc *r, struct cudaChannelFormatDesc *fmt);
/* The descriptors an object was created with (any of the outputs may be NULL). */
cudaError_t pv_texobj_descs(unsigned long long value, int surface, struct cudaResourceDesc *res,
                            struct cudaTextureDesc *tex, struct cudaResourceViewDesc *view);

/* ---- peer access (peers.c) ---- */
int pv_peer_possible(const struct pv_device *d, const struct pv_device *p);   /* kernels on d may use p's memory */
/* Enables (on) or disables access of d's kernels to peer's memory. */
cudaError_t pv_peer_switch(struct pv_device *d, struct pv_device *peer, unsigned flags, int on);
int pv_peer_enabled(const struct pv_device *d, const struct pv_device *peer);
void pv_peers_forget_device(int dev);

/* ---- device reset (reset.c) ---- */
/* DEVICE_RESET of d, then everything the client kept of it goes: allocations, modules, pools, managed memory,
 * peer access, flags. */
cudaError_t pv_device_reset(struct pv_device *d);
/* The end of one context of device dev: the allocations (device, managed, mapped; pinned host memory too for a
 * created context), streams and events `owner` made there are freed and destroyed (see pv_tls_owner). */
void pv_owner_release(const void *owner, int dev);

#endif
