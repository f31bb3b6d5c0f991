/* Graph memory nodes, for both APIs: allocation and free nodes from the explicit API (cudaGraphAddMemAllocNode /
 * MemFreeNode, cuGraphAddMemAllocNode / MemFreeNode, cudaGraphAddNode) and from stream capture (cudaMallocAsync /
 * cudaFreeAsync on a capturing stream), with CUDA's semantics:
 * - the allocation's address is fixed when the node is made, for the life of the node (its memory is reserved on the
 *   daemon then, as device memory, and stays reserved while the graph or an executable graph of it may run again);
 * - a launch makes the allocation live (GPU-ordered in CUDA; here nothing moves, so the bookkeeping happens when the
 *   launch is issued); a free node of the same graph or of another graph, cudaFree or cudaFreeAsync ends it;
 *   launching again while it is live is cudaErrorInvalidValue unless the exec was instantiated with
 *   cudaGraphInstantiateFlagAutoFreeOnLaunch; an allocation freed inside its own graph cannot be freed outside it;
 * - graphs with memory nodes cannot be cloned, used as child graphs or have nodes or edges deleted, and only one
 *   executable graph of them may exist at a time (cudaErrorNotSupported);
 * - destroying the graph does not free a live allocation; the memory goes back once nothing can use it again;
 * - cudaDeviceGetGraphMemAttribute answers the used (live) and reserved bytes and their high watermarks;
 *   cudaDeviceGraphMemTrim has nothing to give back: reserved memory is exactly what live graphs may still use. */
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_features.h"
#include "pv_registry.h"
#include "pv_graph.h"

struct gmem {
    uint64_t ptr;
    size_t size;
    int dev;
    struct pv_graph *owner;          /* the graph whose allocation node made it; NULL once that graph is destroyed */
    struct pv_graph *freer;          /* the graph with a free node for it, if any */
    int live;                        /* a launch allocated it and nothing freed it since */
    int alloc_execs, free_execs;     /* executable graphs holding its allocation / free node */
    struct cudaMemAllocNodeParams params;   /* as the node reports them (accessDescs: descs) */
    struct cudaMemAccessDesc *descs;
    struct gmem *next;
};

struct mem_stats { uint64_t used, used_high, reserved, reserved_high; };

static struct gmem *gmems;
static struct mem_stats stats[PV_MAX_DEVICES];
static pthread_mutex_t gmem_mu = PTHREAD_MUTEX_INITIALIZER;

static struct gmem *find(uint64_t ptr)
{
    for (struct gmem *m = gmems; m; m = m->next)
        if (m->ptr == ptr)
            return m;
    return NULL;
}

static void set_live(struct gmem *m, int live)
{
    struct mem_stats *s = &stats[m->dev];
    if (live == m->live)
        return;
    m->live = live;
    if (live) {
        s->used += m->size;
        if (s->used > s->used_high)
            s->used_high = s->used;
    } else {
        s->used -= m->size;
    }
}

/* Out of the table when nothing can use it again (the caller frees it, without the lock). */
static struct gmem *unlink_if_done(struct gmem *m)
{
    if (m->owner || m->live || m->alloc_execs)
        return NULL;
    for (struct gmem **pp = &gmems; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            stats[m->dev].reserved -= m->size;
            return m;
        }
    return NULL;
}

static void release(struct gmem *m)
{
    if (!m)
        return;
    struct pv_device *d = pv_device(m->dev);
    int dev;
    pv_alloc_remove(m->ptr, &dev);
    cudaError_t err = d ? pv_call_FREE(d, m->ptr) : PV_cudaErrorInvalidDevice;
    if (err != PV_SUCCESS && err != PV_ERR_UNAVAILABLE)
        pv_log("GPU%d: freeing graph memory %#llx failed: %s", m->dev, (unsigned long long)m->ptr, pv_err_name(err));
    free(m->descs);
    free(m);
}

int pv_gmem_restricted(const struct pv_graph *g)
{
    pthread_mutex_lock(&gmem_mu);
    int hit = 0;
    for (struct gmem *m = gmems; m && !hit; m = m->next)
        hit = m->owner == g || m->freer == g;
    pthread_mutex_unlock(&gmem_mu);
    return hit;
}

/* ------------------------------------------------------------------------------------------ nodes */
/* CUDA's checks of an allocation node's parameters: pinned device memory of a GPU, no shareable handles; access
 * for that GPU and peers of its daemon. */
static cudaError_t check_params(const struct cudaMemAllocNodeParams *p, struct pv_device **d)
{
    if (!p || p->bytesize == 0 || p->poolProps.allocType != PV_cudaMemAllocationTypePinned ||
        p->poolProps.location.type != PV_cudaMemLocationTypeDevice || (p->accessDescCount && !p->accessDescs))
        return PV_cudaErrorInvalidValue;
    if (!(*d = pv_device(p->poolProps.location.id)))
        return PV_cudaErrorInvalidDevice;
    if (p->poolProps.handleTypes != PV_cudaMemHandleTypeNone)
        return PV_cudaErrorNotSupported;                 /* shareable handles are not offered (as for pools) */
    for (size_t i = 0; i < p->accessDescCount; i++) {
        const struct cudaMemAccessDesc *a = &p->accessDescs[i];
        struct pv_device *e = a->location.type == PV_cudaMemLocationTypeDevice ? pv_device(a->location.id) : NULL;
        if (!e || (a->flags != PV_cudaMemAccessFlagsProtNone && a->flags != PV_cudaMemAccessFlagsProtReadWrite) ||
            (e != *d && e->conn != (*d)->conn))
            return PV_cudaErrorInvalidValue;
    }
    return PV_SUCCESS;
}

/* The allocation behind node n: reserved on d now, recorded with its parameters; n's graph owns it. */
static cudaError_t make_allocation(struct pv_gnode *n, struct pv_device *d, const struct cudaMemAllocNodeParams *p,
                                   uint64_t *out)
{
    struct gmem *m = calloc(1, sizeof *m);
    struct cudaMemAccessDesc *descs = p->accessDescCount ? calloc(p->accessDescCount, sizeof *descs) : NULL;
    if (!m || (p->accessDescCount && !descs)) {
        free(m);
        free(descs);
        return PV_cudaErrorMemoryAllocation;
    }
    uint64_t ptr = 0;
    cudaError_t err = pv_malloc_unique(d, p->bytesize, PV_OWNER_DEVICE, &ptr);   /* the graph's, not a context's */
    if (err != PV_SUCCESS) {
        free(m);
        free(descs);
        return err;
    }
    if (descs)
        memcpy(descs, p->accessDescs, p->accessDescCount * sizeof *descs);
    *m = (struct gmem){ ptr, p->bytesize, d->index, n->graph, NULL, 0, 0, 0, *p, descs, NULL };
    m->params.accessDescs = descs;
    m->params.dptr = (void *)(uintptr_t)ptr;
    n->p.mem.ptr = (void *)(uintptr_t)ptr;
    n->p.mem.size = p->bytesize;
    n->dev = d->index;
    pthread_mutex_lock(&gmem_mu);
    m->next = gmems;
    gmems = m;
    struct mem_stats *s = &stats[d->index];
    s->reserved += m->size;
    if (s->reserved > s->reserved_high)
        s->reserved_high = s->reserved;
    pthread_mutex_unlock(&gmem_mu);
    *out = ptr;
    return PV_SUCCESS;
}

cudaError_t pv_graph_add_mem_alloc(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps,
                                   struct cudaMemAllocNodeParams *p, struct pv_gnode **out)
{
    struct pv_device *d;
    if (!out || !pv_graph_of(g))
        return PV_cudaErrorInvalidValue;
    cudaError_t err = check_params(p, &d);
    struct pv_gnode *n;
    if (err == PV_SUCCESS)
        err = pv_gnode_add(g, PV_cudaGraphNodeTypeMemAlloc, deps, ndeps, &n);
    if (err != PV_SUCCESS)
        return err;
    uint64_t ptr;
    if ((err = make_allocation(n, d, p, &ptr)) != PV_SUCCESS) {
        n->type = PV_cudaGraphNodeTypeEmpty;
        pv_gnode_destroy(n);
        return err;
    }
    p->dptr = (void *)(uintptr_t)ptr;
    *out = n;
    return PV_SUCCESS;
}

/* A free node of g for the allocation at ptr: only an allocation node's address, freed by one graph only. */
static cudaError_t claim_free(struct pv_graph *g, uint64_t ptr, size_t *size)
{
    pthread_mutex_lock(&gmem_mu);
    struct gmem *m = find(ptr);
    cudaError_t err = PV_SUCCESS;
    if (!m || m->freer)
        err = PV_cudaErrorInvalidValue;                  /* not a graph allocation, or freed by a graph already */
    else {
        m->freer = g;
        *size = m->size;
    }
    pthread_mutex_unlock(&gmem_mu);
    return err;
}

cudaError_t pv_graph_add_mem_free(struct pv_graph *g, struct pv_gnode *const *deps, size_t ndeps, void *dptr,
                                  struct pv_gnode **out)
{
    if (!out || !pv_graph_of(g) || !dptr)
        return PV_cudaErrorInvalidValue;
    struct pv_gnode *n;
    cudaError_t err = pv_gnode_add(g, PV_cudaGraphNodeTypeMemFree, deps, ndeps, &n);
    if (err != PV_SUCCESS)
        return err;
    size_t size = 0;
    if ((err = claim_free(g, (uint64_t)(uintptr_t)dptr, &size)) != PV_SUCCESS) {
        n->type = PV_cudaGraphNodeTypeEmpty;
        pv_gnode_destroy(n);
        return err;
    }
    n->p.mem.ptr = dptr;
    n->p.mem.size = size;
    *out = n;
    return PV_SUCCESS;
}

cudaError_t pv_gmem_alloc_params(const struct pv_gnode *n, struct cudaMemAllocNodeParams *out)
{
    if (!n || n->type != PV_cudaGraphNodeTypeMemAlloc || !out)
        return PV_cudaErrorInvalidValue;
    pthread_mutex_lock(&gmem_mu);
    struct gmem *m = find((uint64_t)(uintptr_t)n->p.mem.ptr);
    if (m)
        *out = m->params;
    pthread_mutex_unlock(&gmem_mu);
    return m ? PV_SUCCESS : PV_cudaErrorInvalidValue;
}

cudaError_t pv_gmem_free_params(const struct pv_gnode *n, void **dptr)
{
    if (!n || n->type != PV_cudaGraphNodeTypeMemFree || !dptr)
        return PV_cudaErrorInvalidValue;
    *dptr = n->p.mem.ptr;
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ capture */
cudaError_t pv_capture_mem_alloc(cudaStream_t s, struct pv_device *d, size_t size, void **ptr)
{
    struct cudaMemAllocNodeParams p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = PV_cudaMemAllocationTypePinned;
    p.poolProps.location = (struct cudaMemLocation){ PV_cudaMemLocationTypeDevice, d->index };
    p.bytesize = size;
    struct pv_gnode *n;
    cudaError_t err = pv_capture_node(s, PV_cudaGraphNodeTypeMemAlloc, &n);
    if (err != PV_SUCCESS)
        return err;
    uint64_t addr;
    if ((err = make_allocation(n, d, &p, &addr)) != PV_SUCCESS) {
        n->type = PV_cudaGraphNodeTypeEmpty;
        return err;
    }
    *ptr = (void *)(uintptr_t)addr;
    return PV_SUCCESS;
}

int pv_capture_mem_free(cudaStream_t s, void *ptr, cudaError_t *err)
{
    pthread_mutex_lock(&gmem_mu);
    int ours = find((uint64_t)(uintptr_t)ptr) != NULL;
    pthread_mutex_unlock(&gmem_mu);
    if (!ours)
        return 0;
    struct pv_gnode *n;
    *err = pv_capture_node(s, PV_cudaGraphNodeTypeMemFree, &n);
    if (*err != PV_SUCCESS)
        return 1;
    size_t size = 0;
    if ((*err = claim_free(n->graph, (uint64_t)(uintptr_t)ptr, &size)) != PV_SUCCESS) {
        n->type = PV_cudaGraphNodeTypeEmpty;
        return 1;
    }
    n->p.mem.ptr = ptr;
    n->p.mem.size = size;
    return 1;
}

/* ------------------------------------------------------------------------------------------ instantiate, launch */
cudaError_t pv_gmem_instantiate(const struct pv_graph *g)
{
    pthread_mutex_lock(&gmem_mu);
    cudaError_t err = PV_SUCCESS;
    for (struct gmem *m = gmems; m && err == PV_SUCCESS; m = m->next)
        if ((m->owner == g && m->alloc_execs) || (m->freer == g && m->free_execs))
            err = PV_cudaErrorNotSupported;              /* one executable graph at a time */
    pthread_mutex_unlock(&gmem_mu);
    return err;
}

static void release_all(struct gmem *list)
{
    while (list) {
        struct gmem *next = list->next;
        release(list);
        list = next;
    }
}

/* An exec's memory nodes: taken (+1) at instantiation, given back (-1) when it is destroyed. */
void pv_gmem_exec_hold(struct pv_gnode *const *nodes, int n, int delta)
{
    struct gmem *done = NULL;
    pthread_mutex_lock(&gmem_mu);
    for (int i = 0; i < n; i++) {
        int alloc = nodes[i]->type == PV_cudaGraphNodeTypeMemAlloc;
        if (!alloc && nodes[i]->type != PV_cudaGraphNodeTypeMemFree)
            continue;
        struct gmem *m = find((uint64_t)(uintptr_t)nodes[i]->p.mem.ptr);
        if (!m)
            continue;
        if (alloc)
            m->alloc_execs += delta;
        else
            m->free_execs += delta;
        struct gmem *gone = delta < 0 ? unlink_if_done(m) : NULL;
        if (gone) {
            gone->next = done;
            done = gone;
        }
    }
    pthread_mutex_unlock(&gmem_mu);
    release_all(done);
}

cudaError_t pv_gmem_launch(struct pv_gnode *const *order, int n, int auto_free)
{
    pthread_mutex_lock(&gmem_mu);
    cudaError_t err = PV_SUCCESS;
    for (int i = 0; i < n && err == PV_SUCCESS; i++)
        if (order[i]->type == PV_cudaGraphNodeTypeMemAlloc) {
            struct gmem *m = find((uint64_t)(uintptr_t)order[i]->p.mem.ptr);
            if (!m || (m->live && !auto_free))
                err = PV_cudaErrorInvalidValue;          /* an allocation of an earlier launch is still live */
        }
    for (int i = 0; i < n && err == PV_SUCCESS; i++) {
        int type = order[i]->type;
        if (type == PV_cudaGraphNodeTypeMemAlloc || type == PV_cudaGraphNodeTypeMemFree) {
            struct gmem *m = find((uint64_t)(uintptr_t)order[i]->p.mem.ptr);
            if (m)
                set_live(m, type == PV_cudaGraphNodeTypeMemAlloc);
        }
    }
    pthread_mutex_unlock(&gmem_mu);
    return err;
}

/* ------------------------------------------------------------------------------------------ outside graphs */
int pv_gmem_free_outside(void *ptr, cudaError_t *err)
{
    pthread_mutex_lock(&gmem_mu);
    struct gmem *m = find((uint64_t)(uintptr_t)ptr), *gone = NULL;
    if (m) {
        if (!m->live || (m->freer && m->freer == m->owner))
            *err = PV_cudaErrorInvalidValue;             /* not allocated now, or its own graph frees it */
        else {
            set_live(m, 0);
            gone = unlink_if_done(m);
            *err = PV_SUCCESS;
        }
    }
    pthread_mutex_unlock(&gmem_mu);
    release(gone);
    return m != NULL;
}

void pv_gmem_graph_gone(const struct pv_graph *g)
{
    struct gmem *done = NULL;
    pthread_mutex_lock(&gmem_mu);
    for (struct gmem *m = gmems, *next; m; m = next) {
        next = m->next;
        if (m->freer == g)
            m->freer = NULL;
        if (m->owner == g) {
            m->owner = NULL;
            struct gmem *gone = unlink_if_done(m);
            if (gone) {
                gone->next = done;
                done = gone;
            }
        }
    }
    pthread_mutex_unlock(&gmem_mu);
    release_all(done);
}

void pv_gmem_forget_device(int dev)
{
    pthread_mutex_lock(&gmem_mu);
    for (struct gmem **pp = &gmems; *pp;) {
        struct gmem *m = *pp;
        if (m->dev == dev) {                             /* the device's memory went with its context */
            *pp = m->next;
            free(m->descs);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    stats[dev] = (struct mem_stats){ 0, 0, 0, 0 };
    pthread_mutex_unlock(&gmem_mu);
}

/* ------------------------------------------------------------------------------------------ device attributes */
cudaError_t pv_graph_mem_attr(int device, int attr, void *value, int set)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    if (!pv_device(device))
        return PV_cudaErrorInvalidDevice;
    if (!value)
        return PV_cudaErrorInvalidValue;
    pthread_mutex_lock(&gmem_mu);
    struct mem_stats *s = &stats[device];
    uint64_t *field = attr == PV_cudaGraphMemAttrUsedMemCurrent ? &s->used
                      : attr == PV_cudaGraphMemAttrUsedMemHigh ? &s->used_high
                      : attr == PV_cudaGraphMemAttrReservedMemCurrent ? &s->reserved
                      : attr == PV_cudaGraphMemAttrReservedMemHigh ? &s->reserved_high : NULL;
    if (!field)
        err = PV_cudaErrorInvalidValue;
    else if (!set)
        memcpy(value, field, sizeof *field);
    else if ((attr != PV_cudaGraphMemAttrUsedMemHigh && attr != PV_cudaGraphMemAttrReservedMemHigh) ||
             *(const uint64_t *)value != 0)
        err = PV_cudaErrorInvalidValue;                  /* only the watermarks, and only back to zero */
    else
        *field = attr == PV_cudaGraphMemAttrUsedMemHigh ? s->used : s->reserved;
    pthread_mutex_unlock(&gmem_mu);
    return err;
}

cudaError_t pv_graph_mem_trim(int device)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    return pv_device(device) ? PV_SUCCESS : PV_cudaErrorInvalidDevice;
}
