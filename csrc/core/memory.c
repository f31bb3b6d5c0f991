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

void pv_alloc_owner_name(int dev, char *out, size_t n)
{
    struct pv_device *d = dev >= 0 ? pv_device(dev) : NULL;
    if (d)
        snprintf(out, n, "GPU%d (%s:%d)", dev, d->conn->host, d->conn->port);
    else
        snprintf(out, n, "host memory of this process");
}

/* Two GPU hosts' drivers number their address spaces on their own: where a driver ignores the pointer window its
 * daemon asks for (backends/cuda_vmm.py), it can hand out a range another host's memory (or this process's host
 * memory) already has. Such a range is kept while the host is asked again, so that it cannot come back, then freed.
 * The host sub-allocates small blocks from one mapping, whose next blocks would collide too: the next request asks
 * for a range of its own (a VMM granule), then twice as much each time, so it lands past the other host's ranges
 * (the allocation is then larger than asked for; the table holds the size asked for). After UNIQUE_TRIES collisions
 * the allocation fails: never two owners for one address. */
enum { UNIQUE_TRIES = 8 };

cudaError_t pv_malloc_unique(struct pv_device *d, size_t size, const void *owner, uint64_t *out)
{
    static _Atomic int told;
    uint64_t kept[UNIQUE_TRIES];
    int nkept = 0;
    cudaError_t err;
    struct pv_alloc hit;
    char mine[320], theirs[320];
    size_t ask = size;
    for (;;) {
        uint64_t p = 0;
        err = pv_call_MALLOC(d, ask, &p);
        if (err == PV_SUCCESS && p == 0) {
            pv_log("GPU%d (%s:%d) answered MALLOC with a NULL pointer", d->index, d->conn->host, d->conn->port);
            err = PV_cudaErrorUnknown;
        }
        if (err != PV_SUCCESS)
            break;
        if (pv_alloc_claim(p, size, d->index, owner, &hit) == 0) {
            *out = p;
            break;
        }
        kept[nkept++] = p;
        pv_alloc_owner_name(d->index, mine, sizeof mine);
        pv_alloc_owner_name(hit.dev, theirs, sizeof theirs);
        if (nkept == UNIQUE_TRIES) {
            pv_log("%s handed out [%#llx, +%zu) over [%#llx, +%zu) of %s %d times: allocation refused "
                   "(cudaErrorMemoryAllocation)", mine, (unsigned long long)p, size, (unsigned long long)hit.ptr,
                   hit.size, theirs, UNIQUE_TRIES);
            err = PV_cudaErrorMemoryAllocation;
            break;
        }
        if (!atomic_exchange(&told, 1))
            pv_log("%s handed out [%#llx, +%zu) over [%#llx, +%zu) of %s: allocating again (said once)", mine,
                   (unsigned long long)p, size, (unsigned long long)hit.ptr, hit.size, theirs);
        size_t gran = d->vmm_granularity ? (size_t)d->vmm_granularity : (size_t)2 << 20;
        ask = ask < gran ? gran : ask <= SIZE_MAX / 2 ? ask * 2 : ask;
    }
    for (int i = 0; i < nkept; i++)
        (void)pv_call_FREE(d, kept[i]);
    return err;
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
    /* Forgotten before the daemon frees it, so that the address is nobody's when the daemon hands it out again (to
     * another thread, whose entry would otherwise sit beside this stale one: the stale one's context end would free
     * the other thread's memory). Forgotten whatever the answer: a SYNC op reports an earlier deferred error after
     * doing its own work, a sticky error leaves the memory unusable until a reset, and a lost host took its memory
     * with it. */
    int dev;
    if (pv_alloc_remove(a.ptr, &dev) != 0)
        return PV_cudaErrorInvalidValue;            /* another thread freed it meanwhile */
    return pv_call_FREE(d, a.ptr);
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
