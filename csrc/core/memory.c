/* Memory of every kind, for both APIs: the one free of device memory (managed, pool or plain), host allocations
 * (pinned, or mapped with a coherent device copy), and what the process knows about an address (the pointer
 * attribute queries of both APIs answer from it). */
#include "pv_state.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_coherence.h"
#include "pv_registry.h"
#include "pv_hostmem.h"
#include "pv_graph.h"

int pv_ptr_device(const void *p)
{
    struct pv_alloc a;
    return (pv_alloc_find((uint64_t)(uintptr_t)p, &a) == 0 && a.dev >= 0) ? a.dev : -1;
}

cudaError_t pv_mem_free(void *ptr)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS || !ptr)
        return err;
    if (pv_region_release(ptr, 0, &err))
        return err;                                     /* managed memory */
    if (pv_gmem_free_outside(ptr, &err))
        return err;                                     /* a graph allocation (graph_mem.c) */
    if (pv_pool_owns(ptr))
        return pv_pool_free_now(ptr);                   /* a pool block: it leaves its pool */
    struct pv_alloc a;
    if (pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) != 0 || a.dev < 0 || a.ptr != (uint64_t)(uintptr_t)ptr ||
        a.owner == PV_OWNER_VMM)
        return PV_cudaErrorInvalidValue;
    struct pv_device *d = pv_device(a.dev);
    err = pv_call_FREE(d, a.ptr);
    /* Forget the allocation whatever the answer: a SYNC op reports an earlier deferred error after doing its own
     * work, a sticky error leaves the memory unusable until a reset, and a lost host took its memory with it. */
    int dev;
    pv_alloc_remove(a.ptr, &dev);
    return err;
}

cudaError_t pv_mem_host_alloc(void **ptr, size_t size, unsigned flags)
{
    if (!ptr || flags > 7)
        return PV_cudaErrorInvalidValue;
    if (flags & 2u)                                     /* mapped: a coherent device copy */
        return pv_mapped_alloc(ptr, size, flags);
    return pv_host_alloc(size, flags, ptr);
}

cudaError_t pv_mem_free_host(void *ptr)
{
    if (!ptr)
        return PV_SUCCESS;
    cudaError_t rerr;
    if (pv_region_release(ptr, 1, &rerr))
        return rerr;                                    /* mapped memory */
    struct pv_region_info info;
    if (pv_region_find(ptr, &info) == 0 && info.kind == PV_REGION_REGISTERED) {
        /* pinned memory that was given a device copy (its device pointer was asked for): drop the copy first */
        if (info.host == (uint64_t)(uintptr_t)ptr)
            (void)pv_region_free(info.host);
    }
    return pv_host_free(ptr);
}

cudaError_t pv_mem_host_flags(const void *ptr, unsigned *flags)
{
    if (!flags)
        return PV_cudaErrorInvalidValue;
    if (pv_mapped_flags(ptr, flags))
        return PV_SUCCESS;
    return pv_host_flags(ptr, flags);
}

void pv_ptr_classify(const void *ptr, struct pv_ptr_info *out)
{
    uint64_t p = (uint64_t)(uintptr_t)ptr;
    struct pv_alloc a;
    struct pv_region_info info;
    *out = (struct pv_ptr_info){ PV_PTR_UNKNOWN, -2, 0, 0, p, 0, 0 };
    if (pv_region_find(ptr, &info) == 0) {
        int on_host = p >= info.host && p < info.host + info.size;
        uint64_t off = p - (on_host ? info.host : info.dev);
        int managed = info.kind == PV_REGION_MANAGED || info.kind == PV_REGION_VAR;
        *out = (struct pv_ptr_info){ managed ? PV_PTR_MANAGED : PV_PTR_HOST, info.device, !managed, info.dev + off,
                                     info.host + off, on_host ? info.host : info.dev, info.size };
    } else if (pv_alloc_find(p, &a) == 0) {
        if (a.dev >= 0)
            *out = (struct pv_ptr_info){ PV_PTR_DEVICE, a.dev, 0, p, 0, a.ptr, a.size };
        else            /* pinned: kernels reach it by its own address (hostmem.c), as with unified addressing */
            *out = (struct pv_ptr_info){ PV_PTR_HOST, pv_tls_device(), 0, p, p, a.ptr, a.size };
    } else if (pv_host_registered(ptr, 1, NULL)) {
        *out = (struct pv_ptr_info){ PV_PTR_HOST, pv_tls_device(), 0, 0, p, p, 0 };   /* no device copy yet */
    }
}
