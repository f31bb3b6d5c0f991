/* Stream-ordered memory pools: cudaMallocAsync/cudaFreeAsync from a device's current pool or a pool the program
 * created, pool attributes, trimming, per-device default and current pools.
 *
 * A pool lives here, on the client: it hands out device allocations it made with plain MALLOC and keeps the blocks a
 * program frees (cudaFreeAsync) for reuse instead of returning them. Reuse is stream-ordered for free: the daemon
 * runs all work of a device in arrival order, so a block freed on one stream and reallocated on another is only
 * touched by the new owner's work after everything the old owner queued before the free. Kept blocks above the pool's
 * release threshold go back to the device at the next synchronization (cudaStreamSynchronize, cudaEventSynchronize,
 * cudaDeviceSynchronize), as CUDA's pools release them, or when the program trims the pool. Everything the daemon
 * sees is ordinary device memory, so pools work the same on every backend. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_registry.h"
#include "pv_graph.h"
#include "pv_features.h"

#define PV_POOL_MAGIC 0x504f4f4cu

struct pool_block { uint64_t ptr; size_t size; };

struct pv_pool {
    uint32_t magic;
    int dev;
    int is_default;
    pthread_mutex_t mu;
    struct pool_block *kept;       /* freed blocks kept for reuse (still allocated on the device) */
    int nkept, capkept;
    size_t reserved, reserved_high, used, used_high;
    uint64_t release_threshold;
    int follow_events, opportunistic, internal_deps;
    size_t max_size;               /* 0: no limit */
    int access[PV_MAX_DEVICES];    /* cudaMemAccessFlags other devices have (peer access) */
    int destroyed;                 /* destroyed with blocks outstanding: freed with the last of them */
};

/* Live blocks handed out by any pool: pointer -> (pool, size). */
struct live { uint64_t ptr; size_t size; struct pv_pool *pool; };
static struct live *lives;
static size_t nlive, caplive;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static struct pv_pool *defaults[PV_MAX_DEVICES], *current[PV_MAX_DEVICES];
static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------------------------ pools */
static struct pv_pool *pool_new(int dev, int is_default)
{
    struct pv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->magic = PV_POOL_MAGIC;
    p->dev = dev;
    p->is_default = is_default;
    p->follow_events = p->opportunistic = p->internal_deps = 1;
    p->access[dev] = PV_cudaMemAccessFlagsProtReadWrite;
    pthread_mutex_init(&p->mu, NULL);
    pv_handle_add(p);
    return p;
}

static struct pv_pool *pool_of(const void *h)
{
    const struct pv_pool *p = h;
    return (p && pv_handle_valid(p) && p->magic == PV_POOL_MAGIC && !p->destroyed) ? (struct pv_pool *)p : NULL;
}

static struct pv_pool *default_pool(int dev)
{
    pthread_mutex_lock(&pools_mu);
    if (!defaults[dev]) {
        defaults[dev] = pool_new(dev, 1);
        current[dev] = defaults[dev];
    }
    struct pv_pool *p = defaults[dev];
    pthread_mutex_unlock(&pools_mu);
    return p;
}

static struct pv_pool *current_pool(int dev)
{
    struct pv_pool *d = default_pool(dev);
    pthread_mutex_lock(&pools_mu);
    struct pv_pool *p = current[dev] ? current[dev] : d;
    pthread_mutex_unlock(&pools_mu);
    return p;
}

/* Frees kept blocks (largest first) until the pool reserves at most `keep` bytes. Pool lock held. */
static void release_kept(struct pv_pool *p, size_t keep)
{
    struct pv_device *d = pv_device(p->dev);
    while (p->nkept && p->reserved > keep) {
        int big = 0;
        for (int i = 1; i < p->nkept; i++)
            if (p->kept[i].size > p->kept[big].size)
                big = i;
        struct pool_block b = p->kept[big];
        p->kept[big] = p->kept[--p->nkept];
        int dev;
        pv_alloc_remove(b.ptr, &dev);                     /* first: the address is nobody's once freed */
        if (d)
            (void)pv_call_FREE(d, b.ptr);
        p->reserved -= b.size;
    }
}

/* ------------------------------------------------------------------------------------------ live table */
static int live_add(uint64_t ptr, size_t size, struct pv_pool *pool)
{
    pthread_mutex_lock(&live_mu);
    if (nlive == caplive) {
        size_t nc = caplive ? caplive * 2 : 64;
        struct live *l = realloc(lives, nc * sizeof *l);
        if (!l) {
            pthread_mutex_unlock(&live_mu);
            return -1;
        }
        lives = l;
        caplive = nc;
    }
    lives[nlive++] = (struct live){ ptr, size, pool };
    pthread_mutex_unlock(&live_mu);
    return 0;
}

static int live_take(uint64_t ptr, struct live *out)
{
    pthread_mutex_lock(&live_mu);
    for (size_t i = 0; i < nlive; i++)
        if (lives[i].ptr == ptr) {
            *out = lives[i];
            lives[i] = lives[--nlive];
            pthread_mutex_unlock(&live_mu);
            return 0;
        }
    pthread_mutex_unlock(&live_mu);
    return -1;
}

int pv_pool_owns(const void *ptr)
{
    uint64_t u = (uint64_t)(uintptr_t)ptr;
    pthread_mutex_lock(&live_mu);
    int yes = 0;
    for (size_t i = 0; i < nlive && !yes; i++)
        yes = lives[i].ptr == u;
    pthread_mutex_unlock(&live_mu);
    return yes;
}

/* ------------------------------------------------------------------------------------------ alloc / free */
static cudaError_t pool_alloc(struct pv_pool *p, size_t size, void **out)
{
    struct pv_device *d = pv_device(p->dev);
    if (!d)
        return PV_cudaErrorInvalidDevice;
    size_t need = (size + 255) & ~(size_t)255;
    pthread_mutex_lock(&p->mu);
    int best = -1;
    for (int i = 0; i < p->nkept; i++)     /* best fit among kept blocks no more than twice the size */
        if (p->kept[i].size >= need && p->kept[i].size <= 2 * need + 4096 &&
            (best < 0 || p->kept[i].size < p->kept[best].size))
            best = i;
    uint64_t ptr = 0;
    size_t got = 0;
    cudaError_t err = PV_SUCCESS;
    if (best >= 0) {
        ptr = p->kept[best].ptr;
        got = p->kept[best].size;
        p->kept[best] = p->kept[--p->nkept];
    } else {
        if (p->max_size && p->reserved + need > p->max_size)
            release_kept(p, p->max_size > need ? p->max_size - need : 0);
        if (p->max_size && p->reserved + need > p->max_size) {
            err = PV_cudaErrorMemoryAllocation;
        } else {
            /* a pool's, whoever asked */
            err = pv_malloc_unique(d, need, PV_OWNER_DEVICE, &ptr);
            if (err == PV_cudaErrorMemoryAllocation && p->nkept) {   /* the device is full: give back what we keep */
                release_kept(p, 0);
                err = pv_malloc_unique(d, need, PV_OWNER_DEVICE, &ptr);
            }
        }
        if (err == PV_SUCCESS) {
            got = need;
            p->reserved += got;
            if (p->reserved > p->reserved_high)
                p->reserved_high = p->reserved;
        }
    }
    if (err == PV_SUCCESS) {
        p->used += got;
        if (p->used > p->used_high)
            p->used_high = p->used;
    }
    pthread_mutex_unlock(&p->mu);
    if (err != PV_SUCCESS)
        return err;
    if (live_add(ptr, got, p) != 0)
        return PV_cudaErrorMemoryAllocation;
    *out = (void *)(uintptr_t)ptr;
    return PV_SUCCESS;
}

/* A destroyed pool whose last block came back: gives everything back and frees it. Called with p->mu held. */
static void pool_dispose(struct pv_pool *p)
{
    release_kept(p, 0);
    pthread_mutex_unlock(&p->mu);
    free(p->kept);
    p->magic = 0;
    free(p);
}

/* Returns a block to its pool (kept for reuse). 0 when ptr came from a pool. */
static int pool_free(const void *ptr)
{
    struct live l;
    if (live_take((uint64_t)(uintptr_t)ptr, &l) != 0)
        return -1;
    struct pv_pool *p = l.pool;
    pthread_mutex_lock(&p->mu);
    p->used -= l.size;
    if (p->nkept == p->capkept) {
        int nc = p->capkept ? p->capkept * 2 : 16;
        struct pool_block *k = realloc(p->kept, (size_t)nc * sizeof *k);
        if (k) {
            p->kept = k;
            p->capkept = nc;
        }
    }
    if (p->nkept < p->capkept) {
        p->kept[p->nkept++] = (struct pool_block){ l.ptr, l.size };
    } else {                                              /* no room to keep it: give it back */
        struct pv_device *d = pv_device(p->dev);
        int dev;
        pv_alloc_remove(l.ptr, &dev);
        if (d)
            (void)pv_call_FREE(d, l.ptr);
        p->reserved -= l.size;
    }
    if (p->destroyed && !p->used) {
        pool_dispose(p);                          /* unlocks and frees */
        return 0;
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* cudaFree of pool memory: the block leaves its pool and goes back to the device now. */
cudaError_t pv_pool_free_now(const void *ptr)
{
    struct live l;
    if (live_take((uint64_t)(uintptr_t)ptr, &l) != 0)
        return PV_cudaErrorInvalidValue;
    struct pv_pool *p = l.pool;
    pthread_mutex_lock(&p->mu);
    p->used -= l.size;
    p->reserved -= l.size;
    struct pv_device *d = pv_device(p->dev);
    int dev;
    pv_alloc_remove(l.ptr, &dev);
    cudaError_t err = d ? pv_call_FREE(d, l.ptr) : PV_cudaErrorInvalidDevice;
    if (p->destroyed && !p->used) {
        pool_dispose(p);
        return err;
    }
    pthread_mutex_unlock(&p->mu);
    return err;
}

/* At a synchronization of device dev: every pool of dev keeps no more than its release threshold. */
void pv_pools_synced(int dev)
{
    pthread_mutex_lock(&pools_mu);
    struct pv_pool *list[2] = { defaults[dev], current[dev] != defaults[dev] ? current[dev] : NULL };
    pthread_mutex_unlock(&pools_mu);
    for (int i = 0; i < 2; i++)
        if (list[i]) {
            pthread_mutex_lock(&list[i]->mu);
            if (list[i]->reserved > list[i]->release_threshold)
                release_kept(list[i], list[i]->release_threshold);
            pthread_mutex_unlock(&list[i]->mu);
        }
}

/* cudaDeviceReset: the device's memory is gone; its pools start empty. */
void pv_pools_forget_device(int dev)
{
    pthread_mutex_lock(&live_mu);
    size_t k = 0;
    for (size_t i = 0; i < nlive; i++)
        if (lives[i].pool->dev != dev)
            lives[k++] = lives[i];
    nlive = k;
    pthread_mutex_unlock(&live_mu);
    pthread_mutex_lock(&pools_mu);
    struct pv_pool *p = defaults[dev];
    current[dev] = p;
    pthread_mutex_unlock(&pools_mu);
    if (p) {
        pthread_mutex_lock(&p->mu);
        p->nkept = 0;
        p->reserved = p->used = 0;
        pthread_mutex_unlock(&p->mu);
    }
}

/* ------------------------------------------------------------------------------------------ the API's calls */
/* The device of stream s (the current device for the default streams). */
static cudaError_t stream_device(cudaStream_t s, struct pv_device **d)
{
    struct pv_device *cur;
    cudaError_t err = pv_cur(&cur);
    if (err != PV_SUCCESS)
        return err;
    uint64_t remote;
    return pv_stream_resolve(s, cur, &remote, d);
}

static cudaError_t malloc_from(void **ptr, size_t size, struct pv_pool *p, cudaStream_t s)
{
    if (!ptr)
        return PV_cudaErrorInvalidValue;
    if (size == 0) {
        *ptr = NULL;
        return PV_SUCCESS;
    }
    if (pv_capturing(s)) {
        /* a graph allocation: an allocation node of the capture (graph_mem.c), its address fixed from now on */
        struct pv_device *d;
        cudaError_t err = stream_device(s, &d);
        return err == PV_SUCCESS ? pv_capture_mem_alloc(s, d, size, ptr) : err;
    }
    return pool_alloc(p, size, ptr);
}

cudaError_t pv_pool_malloc(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
    struct pv_device *d;
    cudaError_t err = stream_device(s, &d);
    if (err != PV_SUCCESS)
        return err;
    struct pv_pool *p = pool ? pool_of(pool) : current_pool(d->index);
    if (!p)
        return pool ? PV_cudaErrorInvalidValue : PV_cudaErrorMemoryAllocation;
    return malloc_from(ptr, size, p, s);
}

cudaError_t pv_pool_free_async(void *ptr, cudaStream_t s)
{
    if (!pv_stream_ok(s))
        return PV_cudaErrorInvalidResourceHandle;
    if (!ptr)
        return PV_SUCCESS;
    cudaError_t err;
    if (pv_capturing(s)) {
        if (pv_capture_mem_free(s, ptr, &err))           /* a graph allocation: a free node of the capture */
            return err;
        struct pv_gnode *n;                              /* other memory stays; the node only orders */
        return pv_capture_node(s, PV_cudaGraphNodeTypeEmpty, &n);
    }
    if (pv_gmem_free_outside(ptr, &err))                 /* a graph's allocation, freed after its launch */
        return err;
    if (pool_free(ptr) == 0)
        return PV_SUCCESS;
    /* memory from cudaMalloc may be freed stream-ordered too: the device runs the free after the stream's work */
    struct pv_alloc a;
    if (pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) != 0 || a.dev < 0 || a.ptr != (uint64_t)(uintptr_t)ptr)
        return PV_cudaErrorInvalidValue;
    return pv_mem_free(ptr);
}

static cudaError_t device_arg(int device)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    return pv_device(device) ? PV_SUCCESS : PV_cudaErrorInvalidDevice;
}

/* A device's default pool, or its current one. */
cudaError_t pv_pool_get(cudaMemPool_t *pool, int device, int current)
{
    if (!pool)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = device_arg(device);
    if (err != PV_SUCCESS)
        return err;
    *pool = current ? current_pool(device) : default_pool(device);
    return *pool ? PV_SUCCESS : PV_cudaErrorMemoryAllocation;
}

cudaError_t pv_pool_set_current(int device, cudaMemPool_t pool)
{
    cudaError_t err = device_arg(device);
    if (err != PV_SUCCESS)
        return err;
    struct pv_pool *p = pool_of(pool);
    if (!p || p->dev != device)
        return PV_cudaErrorInvalidValue;
    (void)default_pool(device);
    pthread_mutex_lock(&pools_mu);
    current[device] = p;
    pthread_mutex_unlock(&pools_mu);
    return PV_SUCCESS;
}

/* The CUDA 13 location-based forms: device locations only (host pools are not offered). */
cudaError_t pv_pool_location(const struct cudaMemLocation *loc, int type, int *dev)
{
    if (!loc || type != PV_cudaMemAllocationTypePinned)
        return PV_cudaErrorInvalidValue;
    if (loc->type != PV_cudaMemLocationTypeDevice)
        return PV_cudaErrorNotSupported;
    *dev = loc->id;
    return device_arg(loc->id);
}

cudaError_t pv_pool_create(cudaMemPool_t *pool, const struct cudaMemPoolProps *props)
{
    if (!pool || !props || props->allocType != PV_cudaMemAllocationTypePinned)
        return PV_cudaErrorInvalidValue;
    if (props->location.type != PV_cudaMemLocationTypeDevice)
        return props->location.type == PV_cudaMemLocationTypeInvalid ? PV_cudaErrorInvalidValue
                                                                     : PV_cudaErrorNotSupported;
    if (props->handleTypes != PV_cudaMemHandleTypeNone)
        return PV_cudaErrorNotSupported;               /* no shareable handles between processes */
    cudaError_t err = device_arg(props->location.id);
    if (err != PV_SUCCESS)
        return err;
    struct pv_pool *p = pool_new(props->location.id, 0);
    if (!p)
        return PV_cudaErrorMemoryAllocation;
    p->max_size = props->maxSize;
    *pool = p;
    return PV_SUCCESS;
}

cudaError_t pv_pool_destroy(cudaMemPool_t pool)
{
    struct pv_pool *p = pool_of(pool);
    if (!p || p->is_default)
        return PV_cudaErrorInvalidValue;
    pthread_mutex_lock(&pools_mu);
    if (current[p->dev] == p)
        current[p->dev] = defaults[p->dev];                /* the device goes back to its default pool */
    pthread_mutex_unlock(&pools_mu);
    pv_handle_remove(p);
    pthread_mutex_lock(&p->mu);
    p->destroyed = 1;
    if (!p->used) {
        pool_dispose(p);                           /* unlocks and frees */
        return PV_SUCCESS;
    }
    release_kept(p, 0);                                    /* outstanding blocks free the pool with the last one */
    pthread_mutex_unlock(&p->mu);
    return PV_SUCCESS;
}

cudaError_t pv_pool_trim(cudaMemPool_t pool, size_t keep)
{
    struct pv_pool *p = pool_of(pool);
    if (!p)
        return PV_cudaErrorInvalidValue;
    pthread_mutex_lock(&p->mu);
    release_kept(p, keep);
    pthread_mutex_unlock(&p->mu);
    return PV_SUCCESS;
}

/* The attributes: where each lives in struct pv_pool, its width (int flags, 64-bit sizes), whether it can be set. */
static const struct { int attr; size_t off; int wide; int settable; } pool_attrs[] = {
    { PV_cudaMemPoolReuseFollowEventDependencies, offsetof(struct pv_pool, follow_events), 0, 1 },
    { PV_cudaMemPoolReuseAllowOpportunistic, offsetof(struct pv_pool, opportunistic), 0, 1 },
    { PV_cudaMemPoolReuseAllowInternalDependencies, offsetof(struct pv_pool, internal_deps), 0, 1 },
    { PV_cudaMemPoolAttrReleaseThreshold, offsetof(struct pv_pool, release_threshold), 1, 1 },
    { PV_cudaMemPoolAttrReservedMemCurrent, offsetof(struct pv_pool, reserved), 1, 0 },
    { PV_cudaMemPoolAttrReservedMemHigh, offsetof(struct pv_pool, reserved_high), 1, 1 },
    { PV_cudaMemPoolAttrUsedMemCurrent, offsetof(struct pv_pool, used), 1, 0 },
    { PV_cudaMemPoolAttrUsedMemHigh, offsetof(struct pv_pool, used_high), 1, 1 },
};

cudaError_t pv_pool_attr(cudaMemPool_t pool, int attr, void *value, int set)
{
    struct pv_pool *p = pool_of(pool);
    if (!p || !value)
        return PV_cudaErrorInvalidValue;
    size_t i = 0, n = sizeof pool_attrs / sizeof *pool_attrs;
    while (i < n && pool_attrs[i].attr != attr)
        i++;
    if (i == n || (set && !pool_attrs[i].settable))
        return PV_cudaErrorInvalidValue;                   /* unknown, or read-only */
    char *field = (char *)p + pool_attrs[i].off;
    int high = attr == PV_cudaMemPoolAttrReservedMemHigh || attr == PV_cudaMemPoolAttrUsedMemHigh;
    cudaError_t err = PV_SUCCESS;
    pthread_mutex_lock(&p->mu);
    if (!set) {
        if (pool_attrs[i].wide)
            *(uint64_t *)value = *(size_t *)field;
        else
            *(int *)value = *(int *)field;
    } else if (high) {                                     /* a watermark can only be reset (to 0) */
        if (*(uint64_t *)value != 0)
            err = PV_cudaErrorInvalidValue;
        else
            *(size_t *)field = attr == PV_cudaMemPoolAttrReservedMemHigh ? p->reserved : p->used;
    } else if (pool_attrs[i].wide) {
        *(uint64_t *)field = *(uint64_t *)value;
    } else {
        *(int *)field = *(int *)value != 0;
    }
    pthread_mutex_unlock(&p->mu);
    return err;
}

/* Peer access to a pool: its own device always has read/write; another device of the same daemon may be given
 * access (kernels there reach the memory through peer access); a device elsewhere cannot. */
cudaError_t pv_pool_set_access(cudaMemPool_t pool, const struct cudaMemAccessDesc *descs, size_t n)
{
    struct pv_pool *p = pool_of(pool);
    if (!p || (n && !descs))
        return PV_cudaErrorInvalidValue;
    for (size_t i = 0; i < n; i++) {
        const struct cudaMemAccessDesc *a = &descs[i];
        struct pv_device *d = a->location.type == PV_cudaMemLocationTypeDevice ? pv_device(a->location.id) : NULL;
        if (!d || (a->flags != PV_cudaMemAccessFlagsProtNone && a->flags != PV_cudaMemAccessFlagsProtRead &&
                   a->flags != PV_cudaMemAccessFlagsProtReadWrite))
            return PV_cudaErrorInvalidValue;
        if (d->index == p->dev && a->flags != PV_cudaMemAccessFlagsProtReadWrite)
            return PV_cudaErrorInvalidValue;             /* the owner keeps full access */
        if (d->index != p->dev && a->flags != PV_cudaMemAccessFlagsProtNone && d->conn != pv_device(p->dev)->conn)
            return PV_cudaErrorInvalidDevice;            /* no peer access between daemons */
    }
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < n; i++)
        p->access[descs[i].location.id] = descs[i].flags;
    pthread_mutex_unlock(&p->mu);
    return PV_SUCCESS;
}

cudaError_t pv_pool_get_access(int *flags, cudaMemPool_t pool, const struct cudaMemLocation *loc)
{
    struct pv_pool *p = pool_of(pool);
    if (!p || !flags || !loc || loc->type != PV_cudaMemLocationTypeDevice || !pv_device(loc->id))
        return PV_cudaErrorInvalidValue;
    pthread_mutex_lock(&p->mu);
    *flags = p->access[loc->id];
    pthread_mutex_unlock(&p->mu);
    return PV_SUCCESS;
}
