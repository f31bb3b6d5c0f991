/* Managed memory (allocation, __managed__ variables, prefetch and advice, range attributes) and mapped host memory
 * (mapped allocations; registrations and device pointers of page-locked memory are hostmem.c's), for both APIs. The host copies and
 * their coherence with the device copies are coherence.c's; this file is the API's semantics on top. */
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_hostmap.h"
#include "pv_coherence.h"
#include "pv_registry.h"
#include "pv_graph.h"

enum { cudaMemAttachGlobal = 1, cudaMemAttachHost = 2, cudaMemAttachSingle = 4 };
enum { cudaHostAllocPortable = 1, cudaHostAllocMapped = 2, cudaHostAllocWriteCombined = 4 };
enum { cudaCpuDeviceId = -1, cudaInvalidDeviceId = -2 };

/* Advice and prefetch state per managed allocation (cudaMemRangeGetAttribute answers from it). */
struct advice {
    uint64_t base;
    int read_mostly;
    struct cudaMemLocation preferred;     /* type Invalid when unset */
    struct cudaMemLocation last_prefetch;
    unsigned char accessed_by[PV_MAX_DEVICES + 1];   /* [PV_MAX_DEVICES] is the host */
    unsigned host_flags;                  /* cudaHostAlloc flags of a mapped allocation */
    struct advice *next;
};
static struct advice *advices;
static pthread_mutex_t advice_mu = PTHREAD_MUTEX_INITIALIZER;

static struct advice *advice_of(uint64_t base, int create)
{
    struct advice *a;
    for (a = advices; a; a = a->next)
        if (a->base == base)
            return a;
    if (!create || !(a = calloc(1, sizeof *a)))
        return NULL;
    a->base = base;
    a->preferred.type = PV_cudaMemLocationTypeInvalid;
    a->last_prefetch.type = PV_cudaMemLocationTypeInvalid;
    a->next = advices;
    advices = a;
    return a;
}

static void advice_drop(uint64_t base)
{
    pthread_mutex_lock(&advice_mu);
    for (struct advice **pp = &advices; *pp; pp = &(*pp)->next)
        if ((*pp)->base == base) {
            struct advice *a = *pp;
            *pp = a->next;
            free(a);
            break;
        }
    pthread_mutex_unlock(&advice_mu);
}

/* ------------------------------------------------------------------------------------------ allocation */
cudaError_t pv_managed_alloc(void **ptr, size_t size, unsigned flags)
{
    if (!ptr || size == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return PV_cudaErrorInvalidValue;     /* cuMemAllocManaged's answer to 0 bytes; cudaMallocManaged's is its own */
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return err;
    struct pv_region_info info;
    err = pv_region_alloc(d, size, PV_REGION_MANAGED, &info);
    if (err != PV_SUCCESS)
        return err;
    *ptr = (void *)(uintptr_t)info.host;
    return PV_SUCCESS;
}

/* cudaHostAlloc with cudaHostAllocMapped: zero-copy memory the device reads and writes where it is (here: a device
 * copy at the same address, kept coherent like managed memory). */
cudaError_t pv_mapped_alloc(void **ptr, size_t size, unsigned flags)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return err;
    struct pv_region_info info;
    err = pv_region_alloc(d, size ? size : 1, PV_REGION_MAPPED, &info);
    if (err != PV_SUCCESS)
        return err;
    pthread_mutex_lock(&advice_mu);
    struct advice *a = advice_of(info.host, 1);
    if (a)
        a->host_flags = flags;
    pthread_mutex_unlock(&advice_mu);
    *ptr = (void *)(uintptr_t)info.host;
    return PV_SUCCESS;
}

/* cudaFree / cudaFreeHost of a region's start: 1 when p was one (the result in *err). */
int pv_region_release(void *p, int host_api, cudaError_t *err)
{
    struct pv_region_info info;
    if (!p || pv_region_find(p, &info) != 0 || info.host != (uint64_t)(uintptr_t)p ||
        info.kind == PV_REGION_REGISTERED)
        return 0;                                        /* registered memory is the program's; not ours to free */
    if ((info.kind == PV_REGION_MANAGED) == host_api || info.kind == PV_REGION_VAR) {
        *err = PV_cudaErrorInvalidValue;                 /* cudaFreeHost of managed memory and the like */
        return 1;
    }
    advice_drop(info.host);
    *err = pv_region_free(info.host);
    return 1;
}

/* The flags a mapped allocation was made with (cudaHostGetFlags); 0 when p is not one. */
int pv_mapped_flags(const void *p, unsigned *flags)
{
    struct pv_region_info info;
    if (pv_region_find(p, &info) != 0 || (info.kind != PV_REGION_MAPPED && info.kind != PV_REGION_REGISTERED))
        return 0;
    pthread_mutex_lock(&advice_mu);
    struct advice *a = advice_of(info.host, 0);
    *flags = (a ? a->host_flags : 0) | cudaHostAllocMapped;
    pthread_mutex_unlock(&advice_mu);
    return 1;
}

/* ------------------------------------------------------------------------------------------ __managed__ */
static pthread_mutex_t bind_mu = PTHREAD_MUTEX_INITIALIZER;

/* A variable is bound to the first device that binds it (kernels of other GPUs see their own copy). */
cudaError_t pv_managed_var_bind(struct pv_var *v, struct pv_device *d, void **host)
{
    cudaError_t err = PV_SUCCESS;
    pthread_mutex_lock(&bind_mu);
    if (!v->managed_host) {
        struct pv_region_info info;
        err = pv_module_ensure(v->fb, d);
        if (err == PV_SUCCESS && !v->have[d->index])
            err = PV_cudaErrorInvalidSymbol;
        if (err == PV_SUCCESS)
            err = pv_region_attach(d, v->addr[d->index], v->size, &info);
        if (err == PV_SUCCESS)
            v->managed_host = info.host;
        else
            pv_log("__managed__ variable %s could not be mapped on the host", v->name);
    }
    if (err == PV_SUCCESS)
        *host = (void *)(uintptr_t)v->managed_host;
    pthread_mutex_unlock(&bind_mu);
    return err;
}

/* ------------------------------------------------------------------------------------------ prefetch, advice */
/* The managed allocation holding [p, p+n), for prefetch/advice/range queries. */
static cudaError_t managed_range(const void *p, size_t n, struct pv_region_info *info)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    if (!p || pv_region_find(p, info) != 0 || info->kind == PV_REGION_REGISTERED)
        return PV_cudaErrorInvalidValue;
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (n > info->size || a - info->host > info->size - n)
        return PV_cudaErrorInvalidValue;
    return PV_SUCCESS;
}

static cudaError_t location_ok(const struct cudaMemLocation *loc)
{
    switch (loc->type) {
    case PV_cudaMemLocationTypeDevice:
        return pv_device(loc->id) ? PV_SUCCESS : PV_cudaErrorInvalidDevice;
    case PV_cudaMemLocationTypeHost:
    case PV_cudaMemLocationTypeHostNuma:
    case PV_cudaMemLocationTypeHostNumaCurrent:
        return PV_SUCCESS;
    default:
        return PV_cudaErrorInvalidValue;
    }
}

/* Migration is what the coherence protocol does anyway: prefetching to a device sends the host's changes now (ahead
 * of the stream's work); prefetching to the host is satisfied at the next synchronization. */
cudaError_t pv_mem_prefetch(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags, cudaStream_t s)
{
    struct pv_region_info info;
    cudaError_t err = managed_range(p, n, &info);
    if (err == PV_SUCCESS)
        err = flags ? PV_cudaErrorInvalidValue : location_ok(&loc);
    if (err == PV_SUCCESS && !pv_stream_ok(s))
        err = PV_cudaErrorInvalidResourceHandle;
    if (err != PV_SUCCESS)
        return err;
    pthread_mutex_lock(&advice_mu);
    struct advice *a = advice_of(info.host, 1);
    if (a)
        a->last_prefetch = loc;
    pthread_mutex_unlock(&advice_mu);
    if (pv_capturing(s)) {
        struct pv_gnode *node;
        return pv_capture_node(s, PV_cudaGraphNodeTypeEmpty, &node);
    }
    if (loc.type == PV_cudaMemLocationTypeDevice)
        err = pv_coherence_flush(pv_device(loc.id));
    return err;
}

cudaError_t pv_mem_advise(const void *p, size_t n, int advice, struct cudaMemLocation loc)
{
    struct pv_region_info info;
    cudaError_t err = managed_range(p, n, &info);
    if (err != PV_SUCCESS)
        return err;
    if (advice < PV_cudaMemAdviseSetReadMostly || advice > PV_cudaMemAdviseUnsetAccessedBy)
        return PV_cudaErrorInvalidValue;
    int needs_loc = advice == PV_cudaMemAdviseSetPreferredLocation || advice == PV_cudaMemAdviseSetAccessedBy ||
                    advice == PV_cudaMemAdviseUnsetAccessedBy;
    if (needs_loc && (err = location_ok(&loc)) != PV_SUCCESS)
        return err;
    pthread_mutex_lock(&advice_mu);
    struct advice *a = advice_of(info.host, 1);
    if (!a) {
        pthread_mutex_unlock(&advice_mu);
        return PV_cudaErrorMemoryAllocation;
    }
    int slot = loc.type == PV_cudaMemLocationTypeDevice ? loc.id : PV_MAX_DEVICES;
    switch (advice) {
    case PV_cudaMemAdviseSetReadMostly:
    case PV_cudaMemAdviseUnsetReadMostly:
        a->read_mostly = advice == PV_cudaMemAdviseSetReadMostly;
        break;
    case PV_cudaMemAdviseSetPreferredLocation:
        a->preferred = loc;
        break;
    case PV_cudaMemAdviseUnsetPreferredLocation:
        a->preferred.type = PV_cudaMemLocationTypeInvalid;
        break;
    default:
        a->accessed_by[slot] = advice == PV_cudaMemAdviseSetAccessedBy;
    }
    pthread_mutex_unlock(&advice_mu);
    return PV_SUCCESS;
}

/* A location as the legacy int form of the range attributes (device id, cudaCpuDeviceId, cudaInvalidDeviceId). */
static int legacy_id(const struct cudaMemLocation *l)
{
    if (l->type == PV_cudaMemLocationTypeDevice)
        return l->id;
    return l->type == PV_cudaMemLocationTypeInvalid ? cudaInvalidDeviceId : cudaCpuDeviceId;
}

static cudaError_t range_attr(void *data, size_t size, int attr, const struct advice *a)
{
    int ints[1];
    switch (attr) {
    case PV_cudaMemRangeAttributeReadMostly:
        ints[0] = a ? a->read_mostly : 0;
        break;
    case PV_cudaMemRangeAttributePreferredLocation:
        ints[0] = a ? legacy_id(&a->preferred) : cudaInvalidDeviceId;
        break;
    case PV_cudaMemRangeAttributeLastPrefetchLocation:
        ints[0] = a ? legacy_id(&a->last_prefetch) : cudaInvalidDeviceId;
        break;
    case PV_cudaMemRangeAttributePreferredLocationType:
        ints[0] = a ? a->preferred.type : PV_cudaMemLocationTypeInvalid;
        break;
    case PV_cudaMemRangeAttributePreferredLocationId:
        ints[0] = a ? a->preferred.id : 0;
        break;
    case PV_cudaMemRangeAttributeLastPrefetchLocationType:
        ints[0] = a ? a->last_prefetch.type : PV_cudaMemLocationTypeInvalid;
        break;
    case PV_cudaMemRangeAttributeLastPrefetchLocationId:
        ints[0] = a ? a->last_prefetch.id : 0;
        break;
    case PV_cudaMemRangeAttributeAccessedBy: {
        if (size % 4)
            return PV_cudaErrorInvalidValue;
        int *out = data;
        size_t k = 0, cap = size / 4;
        for (int i = 0; a && i <= PV_MAX_DEVICES && k < cap; i++)
            if (a->accessed_by[i])
                out[k++] = i == PV_MAX_DEVICES ? cudaCpuDeviceId : i;
        for (; k < cap; k++)
            out[k] = cudaInvalidDeviceId;
        return PV_SUCCESS;
    }
    default:
        return PV_cudaErrorInvalidValue;
    }
    if (size != 4)
        return PV_cudaErrorInvalidValue;
    memcpy(data, ints, 4);
    return PV_SUCCESS;
}

cudaError_t pv_mem_range_attr(void *data, size_t size, int attr, const void *p, size_t n)
{
    struct pv_region_info info;
    cudaError_t err = data ? managed_range(p, n, &info) : PV_cudaErrorInvalidValue;
    if (err != PV_SUCCESS)
        return err;
    pthread_mutex_lock(&advice_mu);
    err = range_attr(data, size, attr, advice_of(info.host, 0));
    pthread_mutex_unlock(&advice_mu);
    return err;
}

/* Stream association of managed memory: with concurrent managed access the host may touch managed memory at any
 * time, so attaching it to a stream changes nothing here; the arguments are checked as CUDA checks them. */
cudaError_t pv_stream_attach_mem(cudaStream_t s, void *p, size_t n, unsigned flags)
{
    struct pv_region_info info;
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    if (!pv_stream_ok(s))
        return PV_cudaErrorInvalidResourceHandle;
    if ((flags != cudaMemAttachGlobal && flags != cudaMemAttachHost && flags != cudaMemAttachSingle) ||
        pv_region_find(p, &info) != 0 || info.kind == PV_REGION_REGISTERED ||
        (n && (uint64_t)(uintptr_t)p + n > info.host + info.size))
        return PV_cudaErrorInvalidValue;
    return PV_SUCCESS;
}
