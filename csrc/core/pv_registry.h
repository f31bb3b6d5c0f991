/* The registry (registry.c): modules and their functions and variables, allocations, pinned host memory, live
 * handles (streams, events), the one stream resolver. */
#ifndef PV_REGISTRY_H
#define PV_REGISTRY_H

#include <stdatomic.h>

#include "pv_base.h"

struct pv_device;

struct pv_kinfo {
    uint64_t func_id;
    int nparams;
    uint32_t (*params)[2];         /* [offset, size] */
    size_t param_bytes;
    int64_t max_threads, shared, constant, local, regs, ptx, binary;
    /* cudaFuncSetAttribute state of this kernel on this device (start: the module-load attributes; a device
     * reset drops the kinfo, and the values set device-wide (pv_func.kept) are applied again on the next use). */
    _Atomic int64_t max_dyn_shared;   /* cudaFuncAttributeMaxDynamicSharedMemorySize */
    _Atomic int64_t carveout;         /* cudaFuncAttributePreferredSharedMemoryCarveout, -1 = default */
    _Atomic int64_t cluster[5];       /* the cluster attributes 11..15 as set (0: CUDA's default) */
};
struct pv_fatbin;
/* Attributes set device-wide on a kernel (cudaFuncSetAttribute, cuKernelSetAttribute): NVIDIA's runtime sets them on
 * the CUkernel, which outlives a device reset, so they hold in the next context too (real-GPU run 3: an H100's
 * cudaFuncGetAttributes after cudaDeviceReset did not report the default 48 KiB). Bit 0 of set[dev]: max_dyn_shared,
 * bit 1: carveout. */
struct pv_func_kept {
    _Atomic unsigned set[PV_MAX_DEVICES];
    _Atomic int64_t max_dyn_shared[PV_MAX_DEVICES], carveout[PV_MAX_DEVICES];
};
struct pv_func {
    uint32_t magic;
    struct pv_fatbin *fb;
    const void *host_fun;
    char *name;
    struct pv_kinfo *dev[PV_MAX_DEVICES];
    void *api_handle[PV_MAX_DEVICES];   /* an API library's handle for the kernel on a device (libvcuda's CUfunction) */
    _Atomic(struct pv_func_kept *) kept; /* NULL until an attribute is set device-wide (most kernels never) */
};
struct pv_var {
    struct pv_fatbin *fb;
    const void *host_var;
    char *name;
    size_t size;
    uint64_t addr[PV_MAX_DEVICES];
    int have[PV_MAX_DEVICES];
    uint64_t managed_host;         /* a __managed__ variable: its host mirror once bound (managed.c), else 0 */
};
/* A module image (fatbin container or PTX) loaded lazily on each device at first use. */
struct pv_fatbin *pv_fatbin_register(const void *wrapper);       /* from a fatbin wrapper; NULL when out of memory */
size_t pv_image_size(const void *image);   /* wrapper, fatbin container, ELF cubin or PTX; 0: not recognised */
/* A module from an image (any pv_image_size form); copy: keep a private copy (the caller may free its own).
 * NULL when the image is not recognised or memory runs out. */
struct pv_fatbin *pv_fatbin_from_image(const void *image, int copy);
/* fb's kernel / variable by name (after a load: every kernel and variable of the module), or NULL. */
struct pv_func *pv_fatbin_func(struct pv_fatbin *fb, const char *name);
struct pv_var *pv_fatbin_var(struct pv_fatbin *fb, const char *name);
struct pv_func *pv_fatbin_func_at(struct pv_fatbin *fb, int i);   /* the i-th kernel, NULL past the end */
/* Unloads fb from every device (MODULE_UNLOAD); its functions stop being valid handles. */
void pv_fatbin_unload(struct pv_fatbin *fb);
struct pv_func *pv_fatbin_add_func(struct pv_fatbin *fb, const void *host_fun, const char *name);
struct pv_var *pv_fatbin_add_var(struct pv_fatbin *fb, const void *host_var, const char *name, size_t size);
struct pv_func *pv_func_by_host(const void *host_fun);
int pv_func_valid(const struct pv_func *f);
/* Kernel f bound to device dev: libvcuda's CUfunction and libvcudart's cudaFunction_t (cudaGetFuncBySymbol), one
 * object per (kernel, device) so that either library accepts the other's. */
struct pv_func_handle { uint32_t magic; struct pv_func *f; int dev; };
struct pv_func_handle *pv_func_handle(struct pv_func *f, int dev);   /* made at first use; NULL: out of memory */
struct pv_func_handle *pv_func_handle_of(const void *h);             /* h as a live handle, or NULL */
struct pv_var *pv_var_by_host(const void *host_var);
/* fb loaded on d (MODULE_LOAD at first use). A refusal is latched in fb and returned again at every use; used by
 * pv_module_ensure, it is also latched on d (pv_refusal_latch), since the call that meets it (a launch, a lazily
 * loaded library's kernel lookup) may be one whose error the program ignores. pv_module_load_now is the explicit
 * load (cuModuleLoadData & co.), whose caller gets the refusal directly. */
cudaError_t pv_module_ensure(struct pv_fatbin *fb, struct pv_device *d);
cudaError_t pv_module_load_now(struct pv_fatbin *fb, struct pv_device *d);

void pv_modules_forget_device(int dev);   /* after a device reset */

struct pv_alloc { uint64_t ptr; size_t size; int dev; const void *owner; };
/* The owner of mappings made by virtual memory management (libvcuda's cuMemMap): no context owns them, and
 * cudaFree/cuMemFree refuse them (they are unmapped, not freed). */
#define PV_OWNER_VMM ((const void *)&pv_owner_vmm)
extern const char pv_owner_vmm;
void pv_alloc_add(uint64_t ptr, size_t size, int dev);                 /* owned by pv_tls_owner() */
void pv_alloc_add_owned(uint64_t ptr, size_t size, int dev, const void *owner);
/* Adds [ptr, ptr+size) unless it overlaps a live entry (another host's device memory, host memory): 0, else -1 and
 * the entry it overlaps in *hit (two GPU hosts' drivers may hand out the same addresses: pv_malloc_unique). */
int pv_alloc_claim(uint64_t ptr, size_t size, int dev, const void *owner, struct pv_alloc *hit);
/* The starts of the allocations of `owner` on device dev (host memory too when with_host), malloc'd into *out. */
size_t pv_alloc_owned(const void *owner, int dev, int with_host, uint64_t **out);
int pv_alloc_remove(uint64_t ptr, int *dev);                 /* 0 ok, -1 not an allocation start */
int pv_alloc_find(uint64_t ptr, struct pv_alloc *out);       /* containing allocation; 0 ok */
int pv_alloc_find_device(uint64_t ptr, struct pv_alloc *out); /* containing device allocation (dev >= 0); 0 ok */
void pv_alloc_forget_device(int dev);
struct pv_stream { uint32_t magic; int dev; uint64_t remote; unsigned flags; int priority; const void *owner; };
#define PV_EVENT_DISABLE_TIMING 2u   /* cudaEventDisableTiming: no times kept or reported */
struct pv_event {
    uint32_t magic; int dev; uint64_t remote; unsigned flags; const void *owner;
    /* Times the daemon reported (streams.c; under its lock): the event's time on the device's clock after its
     * `known`-th record; valid for cudaEventElapsedTime while no later record was sent (known == sent). */
    uint64_t sent, known;
    double t_ms;
};
void pv_handle_add(const void *h);
int pv_handle_remove(const void *h);
int pv_handle_valid(const void *h);
/* The one stream resolver. A stream argument is NULL or a default-stream sentinel (cudaStreamLegacy = 1,
 * cudaStreamPerThread = 2: the daemon serializes a device's work, so all mean its default stream) or a live stream
 * handle; anything else is cudaErrorInvalidResourceHandle. On success *remote is the daemon handle (0 for the
 * default stream) and *sdev the stream's device (d for the default stream; d may be NULL when the caller only
 * validates). */
cudaError_t pv_stream_resolve(cudaStream_t s, struct pv_device *d, uint64_t *remote, struct pv_device **sdev);
/* 1 when s is a default-stream sentinel or a live stream handle. */
int pv_stream_ok(cudaStream_t s);

#define PV_STREAM_MAGIC 0x5354524du
#define PV_EVENT_MAGIC 0x45564e54u
#define PV_FUNC_MAGIC 0x46554e43u

#endif
