/* Contexts. Every context of device d (its primary context and any created with cuCtxCreate) maps onto the one
 * context the daemon keeps for (this session, d): a CUcontext is a client object naming a device, its flags and,
 * for NVIDIA's runtime, its context-local storage. Each thread has a stack of current contexts; making a context
 * current also makes its device the thread's current device of the core, so libvcudart in the same process agrees,
 * and the context the owner of what the thread allocates and creates (core pv_tls_owner): destroying a created
 * context frees its allocations, streams, events and modules and leaves the others' alone. libvcudart's
 * cudaSetDevice makes that device's primary context current, and a runtime call on a thread without a context binds
 * its device's primary context, as NVIDIA's runtime does. Primary contexts are never freed (their handles stay
 * valid across resets, as the runtime expects). */
#include <stdlib.h>

#include "driver.h"

#define CTX_DEPTH 64

static struct pv_ctx *primaries[PV_MAX_DEVICES];
static pthread_mutex_t primaries_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t next_ctx_id = 1;
static _Thread_local struct pv_ctx *stack[CTX_DEPTH];
static _Thread_local int depth;
static _Thread_local unsigned seen_gen;          /* the core's device generation when this file last set it */
static atomic_int created_on[PV_MAX_DEVICES];    /* live created contexts per device */
/* Creating a context and ending a device's last one (which resets the daemon's context) exclude each other. */
static pthread_mutex_t life_mu = PTHREAD_MUTEX_INITIALIZER;

struct pv_cls {                      /* one value of context-local storage */
    void *key, *value;
    void (*dtor)(struct pv_ctx *, void *, void *);
    struct pv_cls *next;
};

static struct pv_ctx *ctx_new(int dev, int primary, unsigned flags)
{
    struct pv_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->magic = PV_CTX_MAGIC;
    c->dev = dev;
    c->primary = primary;
    c->flags = flags;
    c->id = atomic_fetch_add(&next_ctx_id, 1);
    pthread_mutex_init(&c->mu, NULL);
    pv_handle_add(c);
    return c;
}

int drv_ctx_valid(const struct pv_ctx *c)
{
    return c && pv_handle_valid(c) && c->magic == PV_CTX_MAGIC;
}

static CUresult drv_valid_or(const struct pv_ctx *c, CUresult err) { return drv_ctx_valid(c) ? CUDA_SUCCESS : err; }

struct pv_ctx *drv_primary(int dev)
{
    if (dev < 0 || dev >= pv_device_count())
        return NULL;
    pthread_mutex_lock(&primaries_mu);
    if (!primaries[dev])
        primaries[dev] = ctx_new(dev, 1, 0);
    struct pv_ctx *c = primaries[dev];
    pthread_mutex_unlock(&primaries_mu);
    return c;
}

/* The thread's context changed here: the core's device and owner follow it (no context: the runtime binds again). */
static void made_current(struct pv_ctx *c)
{
    if (c && c->primary)
        atomic_store(&c->used, 1);
    if (c) {
        pv_tls_set_device(c->dev);
        pv_tls_set_owner(c->primary ? NULL : c);
    } else {
        pv_tls_set_owner(NULL);
    }
    pv_tls_set_runtime_bound(0);
    seen_gen = pv_tls_device_gen();
}

/* What libvcudart did to this thread since: cudaSetDevice makes that device's primary context current (replacing the
 * top of the stack), and a runtime call on a thread without a context binds its device's primary context. */
static void follow_runtime(void)
{
    struct pv_ctx *p = NULL;
    if (pv_tls_device_gen() != seen_gen || (!depth && pv_tls_runtime_bound()))
        p = drv_primary(pv_tls_device());
    if (!p)
        return;
    if (!depth)
        depth = 1;
    stack[depth - 1] = p;
    atomic_store(&p->used, 1);
    pv_tls_set_owner(NULL);
    seen_gen = pv_tls_device_gen();
}

static struct pv_ctx *top(void) { return depth ? stack[depth - 1] : NULL; }

struct pv_ctx *drv_ctx_top(void)
{
    follow_runtime();
    return top();
}

CUresult drv_ctx_device(struct pv_ctx *c, struct pv_device **out)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!c)
        c = drv_ctx_top();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!drv_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = pv_device(c->dev);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult drv_cur_device(struct pv_device **out) { return drv_ctx_device(NULL, out); }

/* ------------------------------------------------------------------------------------- context-local storage */
CUresult drv_cls_set(struct pv_ctx *c, void *key, void *value, void (*dtor)(struct pv_ctx *, void *, void *))
{
    if (!c)
        c = drv_ctx_top();
    if (!drv_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->mu);
    struct pv_cls *e;
    for (e = c->cls; e && e->key != key; e = e->next)
        ;
    if (!e && (e = calloc(1, sizeof *e))) {
        e->key = key;
        e->next = c->cls;
        c->cls = e;
    }
    if (e) {
        e->value = value;
        e->dtor = dtor;
    }
    pthread_mutex_unlock(&c->mu);
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult drv_cls_get(struct pv_ctx *c, void *key, void **value)
{
    if (!c)
        c = drv_ctx_top();
    if (!drv_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->mu);
    struct pv_cls *e;
    for (e = c->cls; e && e->key != key; e = e->next)
        ;
    if (e)
        *value = e->value;
    pthread_mutex_unlock(&c->mu);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;   /* nothing stored: the runtime builds its state */
}

CUresult drv_cls_remove(struct pv_ctx *c, void *key)
{
    if (!c)
        c = drv_ctx_top();
    if (!drv_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->mu);
    struct pv_cls **pp = &c->cls, *e = NULL;
    while (*pp && (*pp)->key != key)
        pp = &(*pp)->next;
    if ((e = *pp))
        *pp = e->next;
    pthread_mutex_unlock(&c->mu);
    free(e);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The context goes away (destroyed or reset): every stored value goes to its destructor, then is forgotten; the
 * runtime rebuilds its state on its next call. Destructors run without the lock (they call back into us). */
static void cls_drop(struct pv_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    struct pv_cls *e = c->cls;
    c->cls = NULL;
    pthread_mutex_unlock(&c->mu);
    while (e) {
        struct pv_cls *next = e->next;
        if (e->dtor)
            e->dtor(c, e->key, e->value);
        free(e);
        e = next;
    }
}

/* ------------------------------------------------------------------------------------- the context stack */
PV_API CUresult cuCtxGetCurrent(CUcontext *out)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = drv_ctx_top();
    return CUDA_SUCCESS;
}

PV_API CUresult cuCtxSetCurrent(CUcontext c)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    follow_runtime();
    if (!c) {
        if (depth)
            depth--;
        made_current(top());
        return CUDA_SUCCESS;
    }
    if (!drv_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!depth)
        depth = 1;
    stack[depth - 1] = c;
    made_current(c);
    return CUDA_SUCCESS;
}

PV_API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    follow_runtime();
    if (depth == CTX_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stack[depth++] = c;
    made_current(c);
    return CUDA_SUCCESS;
}

PV_API CUresult cuCtxPopCurrent_v2(CUcontext *out)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    follow_runtime();
    if (!depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct pv_ctx *c = stack[--depth];
    if (out)
        *out = c;
    made_current(top());
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------- created contexts */
/* A real driver refuses a new context of a process whose context on the device took a sticky fault (cuCtxCreate
 * answers the fault: seen on an H200, driver 580; NVIDIA documents such errors as lasting until the process ends).
 * Here every context of a device shares the daemon's one context of (session, device), which keeps the fault until
 * a device reset; while another context of the device lives, a new one is refused with it as well. (With none left,
 * the daemon's context was reset when the last one went, so this driver, unlike NVIDIA's, recovers.) */
static CUresult device_fault(CUdevice dev)
{
    struct pv_ctx *p = drv_primary(dev);
    if (atomic_load(&created_on[dev]) == 0 && !(p && atomic_load(&p->used)))
        return CUDA_SUCCESS;
    uint64_t ft[2];
    cudaError_t err = pv_call_MEM_GET_INFO(pv_device(dev), ft);   /* answers the context's sticky error, if any */
    return err == PV_SUCCESS || err == PV_ERR_UNAVAILABLE ? CUDA_SUCCESS : drv_result(err);
}

static CUresult ctx_create(CUcontext *out, unsigned flags, CUdevice dev)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!pv_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    follow_runtime();
    if (depth == CTX_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = device_fault(dev);
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_ctx *c = ctx_new(dev, 0, flags);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&life_mu);
    atomic_fetch_add(&created_on[dev], 1);
    pthread_mutex_unlock(&life_mu);
    stack[depth++] = c;
    made_current(c);
    *out = c;
    return CUDA_SUCCESS;
}

PV_API CUresult cuCtxCreate_v2(CUcontext *out, unsigned flags, CUdevice dev) { return ctx_create(out, flags, dev); }

PV_API CUresult cuCtxCreate_v3(CUcontext *out, void *affinity, int n, unsigned flags, CUdevice dev)
{
    if (n > 0 && affinity)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    return ctx_create(out, flags, dev);
}

/* CUctxCreateParams: CUDA 13 code passes a zero-initialised one for an ordinary context (as NULL). Execution
 * affinity cannot be honoured remotely (as cuCtxCreate_v3 answers); CIG (CUDA in graphics) mode is not supported by
 * this driver, which the documentation answers with CUDA_ERROR_NOT_SUPPORTED; both at once are invalid. */
PV_API CUresult cuCtxCreate_v4(CUcontext *out, const CUctxCreateParams *params, unsigned flags, CUdevice dev)
{
    DRV_HIDDEN_GUARD("cuCtxCreate_v4");
    if (params && params->execAffinityParams && params->cigParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (params && params->cigParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (params && params->execAffinityParams && params->numExecAffinityParams > 0)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    return ctx_create(out, flags, dev);
}

/* Everything the context made goes: its allocations, streams and events (core pv_owner_release) and its modules;
 * the daemon's context of the device stays for the device's other contexts. */
PV_API CUresult cuCtxDestroy_v2(CUcontext c)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_ctx_valid(c) || c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    follow_runtime();
    for (int i = 0; i < depth; i++)
        if (stack[i] == c) {
            for (int j = i; j + 1 < depth; j++)
                stack[j] = stack[j + 1];
            depth--;
            i--;
        }
    cls_drop(c);
    pv_handle_remove(c);                         /* its handle is no longer valid while its resources go */
    drv_modules_release(c);
    pv_owner_release(c, c->dev);
    int dev = c->dev;
    made_current(top());
    c->magic = 0;
    free(c);
    /* The device's last context, in a process that never used its primary context: what the daemon's context kept
     * for all of them (limits, function attributes, a sticky error) goes too, as with a GPU's last context. */
    struct pv_ctx *p = drv_primary(dev);
    cudaError_t err = PV_SUCCESS;
    pthread_mutex_lock(&life_mu);
    if (atomic_fetch_sub(&created_on[dev], 1) == 1 && p && !atomic_load(&p->used) && !pv_owner_holds(NULL, dev))
        err = pv_device_reset(pv_device(dev));
    pthread_mutex_unlock(&life_mu);
    return drv_result(err);
}

/* ------------------------------------------------------------------------------------- primary contexts */
static CUresult primary_of(CUdevice dev, struct pv_ctx **out)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    *out = drv_primary(dev);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Everything of the primary context of d goes, the runtime's context state through its destructors; the handle
 * stays valid. Alone on its device, the daemon's context of (session, d) is reset (limits, function attributes and
 * a sticky error go too); with created contexts of d alive, only what the primary context made is freed, one
 * resource at a time, and what the daemon's one context holds for all of them stays (docs/driver.md). */
static CUresult primary_reset(struct pv_ctx *c)
{
    cls_drop(c);
    cudaError_t err = PV_SUCCESS;
    if (atomic_load(&created_on[c->dev]) == 0) {
        err = pv_device_reset(pv_device(c->dev));
    } else {
        drv_modules_release(c);
        pv_owner_release(NULL, c->dev);
    }
    c->flags = 0;
    return drv_result(err);
}

PV_API CUresult cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice dev)
{
    struct pv_ctx *c;
    CUresult r = out ? primary_of(dev, &c) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    atomic_fetch_add(&c->refs, 1);
    atomic_store(&c->used, 1);
    *out = c;
    return CUDA_SUCCESS;
}

/* The last release destroys the primary context's state, as in CUDA. */
PV_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    struct pv_ctx *c;
    CUresult r = primary_of(dev, &c);
    if (r != CUDA_SUCCESS)
        return r;
    int old = atomic_load(&c->refs);
    do {
        if (old <= 0)
            return CUDA_ERROR_INVALID_CONTEXT;
    } while (!atomic_compare_exchange_weak(&c->refs, &old, old - 1));
    return old == 1 ? primary_reset(c) : CUDA_SUCCESS;
}

PV_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

PV_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    struct pv_ctx *c;
    CUresult r = primary_of(dev, &c);
    return r == CUDA_SUCCESS ? primary_reset(c) : r;
}

PV_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

PV_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned *flags, int *active)
{
    struct pv_ctx *c;
    CUresult r = (flags && active) ? primary_of(dev, &c) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    *flags = c->flags;
    *active = atomic_load(&c->refs) > 0;
    return CUDA_SUCCESS;
}

PV_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned flags)
{
    struct pv_ctx *c;
    CUresult r = primary_of(dev, &c);
    if (r != CUDA_SUCCESS)
        return r;
    c->flags = flags;
    return CUDA_SUCCESS;
}

PV_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* ------------------------------------------------------------------------------------- queries on contexts */
PV_API CUresult cuCtxGetDevice(CUdevice *out)
{
    struct pv_device *d;
    CUresult r = out ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *out = d->index;
    return r;
}

PV_API CUresult cuCtxGetDevice_v2(CUdevice *out, CUcontext c)
{
    struct pv_device *d;
    CUresult r = out ? drv_ctx_device(c, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *out = d->index;
    return r;
}

/* Invalidates captures that are not relaxed (as cudaDeviceSynchronize); kept pool blocks above their thresholds go. */
PV_API CUresult cuCtxSynchronize_v2(CUcontext c)
{
    struct pv_device *d;
    CUresult r = drv_ctx_device(c, &d);
    return r == CUDA_SUCCESS ? drv_result(pv_sync_device(d)) : r;
}

PV_API CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(NULL); }

PV_API CUresult cuCtxGetFlags(unsigned *flags)
{
    struct pv_device *d;
    CUresult r = flags ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *flags = drv_ctx_top()->flags;
    return r;
}

PV_API CUresult cuCtxSetFlags(unsigned flags)
{
    struct pv_device *d;
    CUresult r = drv_cur_device(&d);
    if (r == CUDA_SUCCESS)
        drv_ctx_top()->flags = flags;
    return r;
}

PV_API CUresult cuCtxGetApiVersion(CUcontext c, unsigned *version)
{
    struct pv_device *d;
    CUresult r = version ? drv_ctx_device(c, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *version = PV_CUDA_VERSION;
    return r;
}

PV_API CUresult cuCtxGetId(CUcontext c, unsigned long long *id)
{
    struct pv_device *d;
    CUresult r = id ? drv_ctx_device(c, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *id = (c ? c : drv_ctx_top())->id;
    return r;
}

PV_API CUresult cuCtxGetLimit(size_t *value, int limit)
{
    struct pv_device *d;
    CUresult r = value ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (limit == CU_LIMIT_CIG_ENABLED) {   /* no context of this driver is a CIG (CUDA in graphics) context */
        *value = 0;
        return CUDA_SUCCESS;
    }
    uint64_t v = 0;
    r = drv_result(pv_call_DEVICE_GET_LIMIT(d, limit, &v));
    if (r == CUDA_SUCCESS)
        *value = (size_t)v;
    return r;
}

PV_API CUresult cuCtxSetLimit(int limit, size_t value)
{
    struct pv_device *d;
    CUresult r = drv_cur_device(&d);
    return r == CUDA_SUCCESS ? drv_result(pv_call_DEVICE_SET_LIMIT(d, limit, (int64_t)value)) : r;
}

/* Cache and shared-memory configurations are hints: accepted and reported back, as on GPUs that ignore them. */
PV_API CUresult cuCtxGetCacheConfig(int *config)
{
    struct pv_device *d;
    CUresult r = config ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *config = d->cache_config;
    return r;
}

PV_API CUresult cuCtxSetCacheConfig(int config)
{
    struct pv_device *d;
    CUresult r = config >= 0 && config <= 3 ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        d->cache_config = config;
    return r;
}

PV_API CUresult cuCtxGetSharedMemConfig(int *config)
{
    struct pv_device *d;
    CUresult r = config ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *config = 0;   /* CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE */
    return r;
}

PV_API CUresult cuCtxSetSharedMemConfig(int config)
{
    struct pv_device *d;
    return config >= 0 && config <= 2 ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    struct pv_device *d;
    CUresult r = drv_cur_device(&d);
    if (r != CUDA_SUCCESS)
        return r;
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

PV_API CUresult cuCtxResetPersistingL2Cache(void)
{
    struct pv_device *d;
    return drv_cur_device(&d);
}

/* ------------------------------------------------------------------------------------------ peer access */
/* Kernels of the current context's device reach the peer context's device memory (GPUs of one daemon). */
static CUresult peer_switch(CUcontext peer, unsigned flags, int on)
{
    struct pv_device *d, *p;
    CUresult r = drv_cur_device(&d);
    if (r == CUDA_SUCCESS)
        r = drv_valid_or(peer, CUDA_ERROR_INVALID_CONTEXT);
    if (r != CUDA_SUCCESS)
        return r;
    p = pv_device(peer->dev);
    return drv_result(pv_peer_switch(d, p, flags, on));
}

PV_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) { return peer_switch(peer, flags, 1); }
PV_API CUresult cuCtxDisablePeerAccess(CUcontext peer) { return peer_switch(peer, 0, 0); }
