/* Page-locked host memory as the GPUs see it, for both APIs (the model: docs/architecture.md, "Page-locked host
 * memory"). Page-locking means nothing to a remote GPU, so page-locked memory is ordinary memory here until a GPU
 * needs to reach it; then it gets a coherent device copy (coherence.c's registered regions: pushed before device
 * work, pulled at synchronizations) on the GPU that asked:
 * - cudaHostAlloc / cudaMallocHost memory (mapped flag or not) is device-accessible under unified addressing: a
 *   kernel parameter word holding such an address (or one past an allocation's end) is the device copy's address
 *   when the kernel runs (pv_host_translate), and cudaHostGetDevicePointer answers the device copy's address; a
 *   memset given its address sets it here, in stream order (copy.c);
 * - registered memory (cudaHostRegister) is recorded, so copies treat it as page-locked, and gets its device copy
 *   when cudaHostGetDevicePointer is asked for it (cudaHostRegisterMapped; cudaDevAttrCanUseHostPointerForRegisteredMem
 *   is 0): a program that only copies through it pays nothing;
 * - a pointer stored in device memory instead of passed as a parameter is not seen: its kernel faults
 *   (cudaErrorIllegalAddress), never reads stale bytes. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_coherence.h"
#include "pv_registry.h"
#include "pv_hostmem.h"
#include "pv_features.h"

enum { cudaHostRegisterMapped = 2 };

struct reg { uint64_t ptr; size_t size; unsigned flags; struct reg *next; };
static struct reg *regs;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
/* Bounds of every pinned allocation made so far (only widened): most parameter words fall outside at once. */
static _Atomic uint64_t pinned_lo = UINT64_MAX, pinned_hi;

void pv_host_pinned_note(uint64_t p, size_t size)
{
    uint64_t lo = atomic_load(&pinned_lo), hi = atomic_load(&pinned_hi);
    while (p < lo && !atomic_compare_exchange_weak(&pinned_lo, &lo, p)) {}
    while (p + size > hi && !atomic_compare_exchange_weak(&pinned_hi, &hi, p + size)) {}
}

/* ------------------------------------------------------------------------------------------ registrations */
static struct reg *reg_find(uint64_t p, size_t n)
{
    for (struct reg *r = regs; r; r = r->next)
        if (p >= r->ptr && n <= r->size && p - r->ptr <= r->size - n)
            return r;
    return NULL;
}

int pv_host_registered(const void *p, size_t n, unsigned *flags)
{
    pthread_mutex_lock(&reg_mu);
    struct reg *r = reg_find((uint64_t)(uintptr_t)p, n ? n : 1);
    if (r && flags)
        *flags = r->flags;
    pthread_mutex_unlock(&reg_mu);
    return r != NULL;
}

cudaError_t pv_host_register(void *ptr, size_t size, unsigned flags)
{
    if (!ptr || !size || flags > 15)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    uint64_t p = (uint64_t)(uintptr_t)ptr;
    struct reg *r = malloc(sizeof *r);
    if (!r)
        return PV_cudaErrorMemoryAllocation;
    *r = (struct reg){ p, size, flags, NULL };
    pthread_mutex_lock(&reg_mu);
    for (struct reg *q = regs; q && err == PV_SUCCESS; q = q->next)
        if (p < q->ptr + q->size && q->ptr < p + size)
            err = PV_cudaErrorHostMemoryAlreadyRegistered;
    if (err == PV_SUCCESS) {
        r->next = regs;
        regs = r;
    }
    pthread_mutex_unlock(&reg_mu);
    if (err != PV_SUCCESS)
        free(r);
    return err;
}

cudaError_t pv_host_unregister(void *ptr)
{
    if (!ptr)
        return PV_cudaErrorInvalidValue;
    uint64_t p = (uint64_t)(uintptr_t)ptr;
    pthread_mutex_lock(&reg_mu);
    struct reg *r = NULL;
    for (struct reg **pp = &regs; *pp; pp = &(*pp)->next)
        if ((*pp)->ptr == p) {
            r = *pp;
            *pp = r->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    if (!r)
        return PV_cudaErrorHostMemoryNotRegistered;
    pv_detached_drain(ptr, r->size);                  /* copies into it still on their way land first */
    cudaError_t err = PV_SUCCESS;
    struct pv_region_info info;
    if (pv_region_find(ptr, &info) == 0 && info.kind == PV_REGION_REGISTERED && info.host == p) {
        /* the device's last writes land in the program's memory before it goes back to being plain memory */
        struct pv_device *d = pv_device(info.device);
        err = d ? pv_call_DEVICE_SYNC(d) : PV_cudaErrorInvalidDevice;
        cudaError_t ferr = pv_region_free(info.host);
        if (err == PV_SUCCESS)
            err = ferr;
    }
    free(r);
    return err;
}

/* ------------------------------------------------------------------------------------------ device copies */
/* The page-locked memory [*base, *base + *size) holding p (a pinned allocation, or a registration when
 * registered_too), or -1. */
static int locked_range(uint64_t p, int registered_too, uint64_t *base, size_t *size)
{
    struct pv_alloc a;
    if (pv_alloc_find(p, &a) == 0 && a.dev < 0) {
        *base = a.ptr;
        *size = a.size;
        return 0;
    }
    if (!registered_too)
        return -1;
    pthread_mutex_lock(&reg_mu);
    struct reg *r = reg_find(p, 1);
    int ok = r && (r->flags & cudaHostRegisterMapped);
    if (ok) {
        *base = r->ptr;
        *size = r->size;
    }
    pthread_mutex_unlock(&reg_mu);
    return ok ? 0 : -1;
}

/* The device copy of page-locked memory [base, base+size), made on d the first time (later: wherever it is). */
static cudaError_t device_copy(struct pv_device *d, uint64_t base, size_t size, struct pv_region_info *info)
{
    if (pv_region_find((void *)(uintptr_t)base, info) == 0 && info->kind == PV_REGION_REGISTERED)
        return PV_SUCCESS;
    return pv_region_register(d, (void *)(uintptr_t)base, size, info);
}

cudaError_t pv_host_device_pointer(void *host, void **pdev)
{
    if (!pdev || !host)
        return PV_cudaErrorInvalidValue;
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    uint64_t p = (uint64_t)(uintptr_t)host, base;
    size_t size;
    struct pv_region_info info;
    if (pv_region_find(host, &info) == 0 && info.kind != PV_REGION_MANAGED && info.kind != PV_REGION_VAR) {
        *pdev = (void *)(uintptr_t)(info.dev + (p - info.host));       /* mapped memory, or a copy made before */
        return PV_SUCCESS;
    }
    struct pv_device *d;
    if (locked_range(p, 1, &base, &size) != 0)
        return PV_cudaErrorInvalidValue;
    if ((err = pv_cur(&d)) != PV_SUCCESS || (err = device_copy(d, base, size, &info)) != PV_SUCCESS)
        return err;
    *pdev = (void *)(uintptr_t)(info.dev + (p - info.host));
    return PV_SUCCESS;
}

/* One parameter word: the device copy's address when it names pinned memory (or one past an allocation). */
static cudaError_t translate_word(struct pv_device *d, uint64_t *w)
{
    uint64_t base, v = *w;
    size_t size;
    if (locked_range(v, 0, &base, &size) != 0 && (locked_range(v - 1, 0, &base, &size) != 0 || v != base + size))
        return PV_SUCCESS;
    struct pv_region_info info;
    cudaError_t err = device_copy(d, base, size, &info);
    if (err != PV_SUCCESS)
        return err;
    if (info.device != d->index) {
        static atomic_int logged;
        if (atomic_exchange(&logged, 1) == 0)
            pv_log("page-locked memory at %#llx has its device copy on GPU%d; a kernel of GPU%d cannot use it",
                   (unsigned long long)v, info.device, d->index);
        return PV_SUCCESS;
    }
    *w = info.dev + (v - info.host);
    return PV_SUCCESS;
}

cudaError_t pv_host_translate(struct pv_device *d, const struct pv_kinfo *ki, char *buf, int dry, int *hits)
{
    *hits = 0;
    uint64_t lo = atomic_load(&pinned_lo), hi = atomic_load(&pinned_hi);
    if (lo >= hi)
        return PV_SUCCESS;                              /* no pinned memory in this process */
    for (int i = 0; i < ki->nparams; i++) {
        size_t off = (size_t)ki->params[i][0], end = off + (size_t)ki->params[i][1];
        for (size_t o = (off + 7) & ~(size_t)7; o + 8 <= end; o += 8) {
            uint64_t w;
            memcpy(&w, buf + o, 8);
            if (w < lo || w > hi)
                continue;
            uint64_t t = w;
            cudaError_t err = dry ? PV_SUCCESS : translate_word(d, &t);
            if (err != PV_SUCCESS)
                return err;
            if (dry) {
                uint64_t base;
                size_t size;
                *hits += locked_range(w, 0, &base, &size) == 0 || locked_range(w - 1, 0, &base, &size) == 0;
            } else if (t != w) {
                memcpy(buf + o, &t, 8);
                (*hits)++;
            }
        }
    }
    return PV_SUCCESS;
}
