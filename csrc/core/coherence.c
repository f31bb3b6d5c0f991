/* Coherent host copies of device memory: managed memory (cudaMallocManaged, __managed__ variables) and mapped host
 * memory (cudaHostAllocMapped, cudaHostRegisterMapped). The coherence model (docs/architecture.md):
 *
 * - One pointer, both sides: a managed or mapped allocation lives in the session's device window on the daemon and the
 *   host copy is mapped at the very same address here (mmap MAP_FIXED_NOREPLACE), so the pointer a kernel uses is the
 *   pointer the host dereferences. Registered host memory keeps its address; its device copy gets another.
 * - Host writes are tracked per page: clean pages are read-only; the first write faults, the handler keeps a copy of
 *   the page as it was (the "shadow": the bytes as the host last saw them from the device) and makes it writable.
 *   Before any operation that sends work to a device, every dirty page's changed span is pushed (MANAGED_PUSH) with
 *   its shadow bytes, ahead of that work, and the pages become clean again; the daemon writes the bytes that differ.
 * - Device writes come back at synchronization: after a synchronizing call answers (stream/event/device synchronize,
 *   a blocking copy, a query that reports completion) the daemon is asked which bytes changed since this side last saw
 *   them (MANAGED_DIRTY: page digests on the daemon) and those are fetched into the host copy. A page the host wrote
 *   meanwhile keeps the host's bytes and takes the device's everywhere else (a merge against the shadow), so host and
 *   device may write different bytes of one page concurrently, as with cudaDevAttrConcurrentManagedAccess.
 * - Never a merged value: a byte both sides changed since they last agreed (the daemon sees it in a push: the device's
 *   byte is not the shadow's; this side sees it in a merge: both differ from the shadow) is a conflict, the sticky
 *   MANAGED_CONFLICT_ERROR on that device (MANAGED_CONFLICT), reported by the synchronization and every call after.
 * - Limits: writes by the kernel into managed memory (read(2) into it) fail with EFAULT on a clean page, as the page is
 *   read-only until the process itself touches it; a program that installs its own SIGSEGV handler after the first
 *   managed allocation must chain to the previous one. */
#define _GNU_SOURCE                      /* mremap */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_record.h"
#include "pv_coherence.h"
#include "pv_registry.h"
#include "pv_features.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

enum { PG_CLEAN = 0, PG_BUSY = 1, PG_DIRTY = 2 };
#define MAX_REGIONS 16384
#define PUSH_CHUNK ((size_t)16 << 20)


struct region {
    int live;
    struct pv_region_info info;
    uint64_t span;                   /* page-aligned start of the host pages covering the copy */
    size_t span_len;
    int own_mapping;                 /* 1: the host pages are our mmap (unmapped at free); 0: the program's memory */
    _Atomic unsigned char *state;    /* per page of the span */
    unsigned char *shadow;           /* span_len bytes (MAP_NORESERVE): pages as they were before the host wrote */
    atomic_int ndirty;
};

/* The table the fault handler searches: sorted by span, read under a sequence lock (the handler cannot take a
 * mutex); region structs are never freed, only reused, so a handler racing a free still reads valid memory. */
static struct region *table[MAX_REGIONS];
static int nregions;
static atomic_uint table_seq;
static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;     /* writers of the table */
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;      /* one push or pull at a time */
static struct region *spare[MAX_REGIONS];
static int nspare;
static atomic_int dirty_total;
static atomic_int regions_on[PV_MAX_DEVICES];
static size_t page_size;
static struct sigaction old_segv;
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static _Thread_local int tls_busy;   /* inside a push or pull: their own requests must not recurse */

/* ------------------------------------------------------------------------------------------ lookup */
static struct region *search(uint64_t a)
{
    int lo = 0, hi = nregions - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        struct region *r = table[mid];
        if (a < r->span)
            hi = mid - 1;
        else if (a >= r->span + r->span_len)
            lo = mid + 1;
        else
            return r;
    }
    return NULL;
}

static struct region *lookup(uint64_t a)
{
    for (;;) {
        unsigned s1 = atomic_load(&table_seq);
        if (s1 & 1) {
            sched_yield();
            continue;
        }
        struct region *r = search(a);
        if (atomic_load(&table_seq) == s1)
            return r;
    }
}

/* ------------------------------------------------------------------------------------------ faults */
static void chain(int sig, siginfo_t *si, void *uc)
{
    if (old_segv.sa_flags & SA_SIGINFO) {
        if (old_segv.sa_sigaction) {
            old_segv.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
        old_segv.sa_handler(sig);
        return;
    }
    /* default action: restore it; returning re-executes the access, which now kills the process as it should */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, NULL);
}

static void mark_dirty(struct region *r, size_t pg)
{
    char *addr = (char *)(uintptr_t)(r->span + pg * page_size);
    for (;;) {
        unsigned char st = PG_CLEAN;
        if (atomic_compare_exchange_strong(&r->state[pg], &st, PG_BUSY)) {
            memcpy(r->shadow + pg * page_size, addr, page_size);
            mprotect(addr, page_size, PROT_READ | PROT_WRITE);
            atomic_store(&r->state[pg], PG_DIRTY);
            atomic_fetch_add(&r->ndirty, 1);
            atomic_fetch_add(&dirty_total, 1);
            return;
        }
        if (st == PG_DIRTY) {
            mprotect(addr, page_size, PROT_READ | PROT_WRITE);
            return;
        }
        sched_yield();               /* another thread is copying, pushing or pulling this page */
    }
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
    struct region *r = si->si_code == SEGV_ACCERR ? lookup(a) : NULL;
    if (!r || !r->live) {
        chain(sig, si, uc);
        return;
    }
    mark_dirty(r, (a - r->span) / page_size);
}

static void install_handler(void)
{
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
}

size_t pv_page_size(void)
{
    pthread_once(&handler_once, install_handler);
    return page_size;
}

/* ------------------------------------------------------------------------------------------ table */
static struct region *region_alloc(void)
{
    pthread_mutex_lock(&table_mu);
    struct region *r = nspare ? spare[--nspare] : calloc(1, sizeof *r);
    pthread_mutex_unlock(&table_mu);
    if (r) {
        r->live = 0;
        r->state = NULL;
        r->shadow = NULL;
        atomic_store(&r->ndirty, 0);
    }
    return r;
}

static int table_insert(struct region *r)
{
    pthread_mutex_lock(&table_mu);
    if (nregions == MAX_REGIONS) {
        pthread_mutex_unlock(&table_mu);
        return -1;
    }
    atomic_fetch_add(&table_seq, 1);
    int i = nregions;
    while (i > 0 && table[i - 1]->span > r->span) {
        table[i] = table[i - 1];
        i--;
    }
    table[i] = r;
    nregions++;
    r->live = 1;
    atomic_fetch_add(&table_seq, 1);
    atomic_fetch_add(&regions_on[r->info.device], 1);
    pthread_mutex_unlock(&table_mu);
    return 0;
}

/* Out of the table; kept: the struct stays the caller's (re-tracked), else it goes to the spare list. */
static void table_remove(struct region *r, int kept)
{
    pthread_mutex_lock(&table_mu);
    atomic_fetch_add(&table_seq, 1);
    int k = 0;
    for (int i = 0; i < nregions; i++)
        if (table[i] != r)
            table[k++] = table[i];
    nregions = k;
    r->live = 0;
    atomic_fetch_add(&table_seq, 1);
    atomic_fetch_sub(&regions_on[r->info.device], 1);
    atomic_fetch_sub(&dirty_total, atomic_exchange(&r->ndirty, 0));
    if (!kept && nspare < MAX_REGIONS)
        spare[nspare++] = r;
    pthread_mutex_unlock(&table_mu);
}

/* The host-side bookkeeping of a region whose host pages [span, span+span_len) exist and are readable. */
static cudaError_t track(struct region *r)
{
    size_t npages = r->span_len / page_size;
    r->state = calloc(npages, 1);
    r->shadow = mmap(NULL, r->span_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!r->state || r->shadow == MAP_FAILED) {
        free((void *)r->state);
        if (r->shadow != MAP_FAILED)
            munmap(r->shadow, r->span_len);
        r->state = NULL;
        r->shadow = NULL;
        return PV_cudaErrorMemoryAllocation;
    }
    if (mprotect((void *)(uintptr_t)r->span, r->span_len, PROT_READ) != 0 || table_insert(r) != 0) {
        mprotect((void *)(uintptr_t)r->span, r->span_len, PROT_READ | PROT_WRITE);
        free((void *)r->state);
        munmap(r->shadow, r->span_len);
        return PV_cudaErrorMemoryAllocation;
    }
    return PV_SUCCESS;
}

static void untrack(struct region *r)
{
    table_remove(r, 0);
    if (r->own_mapping)
        munmap((void *)(uintptr_t)r->span, r->span_len);
    else
        mprotect((void *)(uintptr_t)r->span, r->span_len, PROT_READ | PROT_WRITE);
    munmap(r->shadow, r->span_len);
    free((void *)r->state);
    r->state = NULL;
    r->shadow = NULL;
}

/* ------------------------------------------------------------------------------------------ push */
struct runbuf { char *data; size_t len, cap; };

/* Room for `more` bytes. The buffer is mmap'd, never on the malloc heap, and grown before a page is taken for its
 * push: registered host memory shares pages with the heap, and a write (or a malloc) into a page that is read-only
 * for its own push would fault and wait for itself. */
static int runbuf_reserve(struct runbuf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t nc = b->cap ? b->cap : 1 << 16;
    while (nc < b->len + more)
        nc *= 2;
    void *p = b->data ? mremap(b->data, b->cap, nc, MREMAP_MAYMOVE)
                      : mmap(NULL, nc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    b->data = p;
    b->cap = nc;
    return 0;
}

static void runbuf_free(struct runbuf *b)
{
    if (b->data)
        munmap(b->data, b->cap);
}

/* The bytes of page pg from its first to its last that differ from its shadow, clipped to the region's host range:
 * one run, with the shadow's bytes after the page's (the daemon writes only the bytes that differ, so an unchanged
 * byte in between keeps what the device wrote meanwhile, and finds the bytes both sides changed). */
static int diff_page(struct region *r, size_t pg, struct runbuf *b)
{
    const unsigned char *cur = (const unsigned char *)(uintptr_t)(r->span + pg * page_size);
    const unsigned char *old = r->shadow + pg * page_size;
    uint64_t page_addr = r->span + pg * page_size;
    size_t lo = r->info.host > page_addr ? (size_t)(r->info.host - page_addr) : 0;
    uint64_t end = r->info.host + r->info.size;
    size_t hi = end < page_addr + page_size ? (size_t)(end - page_addr) : page_size;
    size_t first = lo, last = hi;
    while (first < last && cur[first] == old[first])
        first++;
    while (last > first && cur[last - 1] == old[last - 1])
        last--;
    if (first == last)
        return 0;
    /* whole words (the daemon finds conflicts per word; a page is word-aligned), inside the region */
    first &= ~(size_t)(PV_MANAGED_CONFLICT_WORD - 1);
    last = (last + PV_MANAGED_CONFLICT_WORD - 1) & ~(size_t)(PV_MANAGED_CONFLICT_WORD - 1);
    lo = first > lo ? first : lo;
    hi = last < hi ? last : hi;
    uint32_t n = (uint32_t)(hi - lo);
    uint64_t dev = r->info.dev + (page_addr + lo - r->info.host);
    if (runbuf_reserve(b, PV_MANAGED_RUN_HEADER_BYTES + 2 * (size_t)n) != 0)
        return -1;
    char *at = b->data + b->len;
    memcpy(at, &dev, 8);
    memcpy(at + 8, &n, 4);
    memcpy(at + PV_MANAGED_RUN_HEADER_BYTES, cur + lo, n);
    memcpy(at + PV_MANAGED_RUN_HEADER_BYTES + n, old + lo, n);
    b->len += PV_MANAGED_RUN_HEADER_BYTES + 2 * (size_t)n;
    return 0;
}

static cudaError_t send_runs(struct pv_device *d, struct runbuf *b, int wait)
{
    cudaError_t err = PV_SUCCESS;
    if (b->len)
        err = wait ? pv_call_MANAGED_PUSH(d, b->data, b->len) : pv_send_MANAGED_PUSH(d, b->data, b->len);
    b->len = 0;
    return err;
}

/* Pushes the dirty pages of r; the push is fire-and-forget when r lives on `target` (the device the next work goes
 * to, which orders it), else a call, so it has landed before work elsewhere (a peer) can read it. */
static cudaError_t push_region(struct region *r, struct pv_device *target, struct runbuf *b)
{
    struct pv_device *d = pv_device(r->info.device);
    if (!d)
        return PV_cudaErrorInvalidDevice;
    int wait = d != target;
    size_t npages = r->span_len / page_size;
    cudaError_t err = PV_SUCCESS;
    for (size_t pg = 0; pg < npages && err == PV_SUCCESS; pg++) {
        unsigned char st = PG_DIRTY;
        if (atomic_load(&r->state[pg]) != PG_DIRTY)
            continue;
        /* room for the page's run before it is taken (see runbuf_reserve) */
        if (runbuf_reserve(b, PV_MANAGED_RUN_HEADER_BYTES + 2 * page_size) != 0) {
            err = PV_cudaErrorMemoryAllocation;
            break;
        }
        if (!atomic_compare_exchange_strong(&r->state[pg], &st, PG_BUSY))
            continue;
        /* read-only first: a write from now on faults and starts a new dirty period from the bytes pushed now */
        mprotect((void *)(uintptr_t)(r->span + pg * page_size), page_size, PROT_READ);
        if (diff_page(r, pg, b) != 0)
            err = PV_cudaErrorMemoryAllocation;
        atomic_store(&r->state[pg], PG_CLEAN);
        atomic_fetch_sub(&r->ndirty, 1);
        atomic_fetch_sub(&dirty_total, 1);
        if (b->len >= PUSH_CHUNK && err == PV_SUCCESS)
            err = send_runs(d, b, wait);
    }
    if (err == PV_SUCCESS)
        err = send_runs(d, b, wait);
    b->len = 0;
    return err;
}

cudaError_t pv_coherence_flush(struct pv_device *target)
{
    if (atomic_load(&dirty_total) == 0 || tls_busy)
        return PV_SUCCESS;
    tls_busy = 1;
    struct pv_recorder *rec = pv_record_pause();         /* pushes are sent now, never recorded into a graph */
    pthread_mutex_lock(&sync_mu);
    struct runbuf b = { 0 };
    cudaError_t err = PV_SUCCESS;
    /* a snapshot of the dirty regions (regions are only removed under sync_mu, which we hold) */
    pthread_mutex_lock(&table_mu);
    int n = 0;
    struct region **dirty = malloc(sizeof *dirty * (size_t)(nregions ? nregions : 1));
    for (int i = 0; dirty && i < nregions; i++)
        if (atomic_load(&table[i]->ndirty) > 0)
            dirty[n++] = table[i];
    pthread_mutex_unlock(&table_mu);
    if (!dirty)
        err = PV_cudaErrorMemoryAllocation;
    for (int i = 0; i < n && err == PV_SUCCESS; i++)
        err = push_region(dirty[i], target, &b);
    free(dirty);
    runbuf_free(&b);
    pthread_mutex_unlock(&sync_mu);
    pv_record_resume(rec);
    tls_busy = 0;
    return err;
}

/* ------------------------------------------------------------------------------------------ pull */
/* The region of `device` overlapping device bytes [*dev, *dev + *n), the run clipped to it (a daemon range may be
 * page-rounded beyond the region, as for registered memory). */
static struct region *region_by_dev(uint64_t *dev, uint64_t *n, int device)
{
    pthread_mutex_lock(&table_mu);
    struct region *hit = NULL;
    for (int i = 0; i < nregions && !hit; i++) {
        struct region *r = table[i];
        uint64_t lo = *dev > r->info.dev ? *dev : r->info.dev;
        uint64_t hi = *dev + *n < r->info.dev + r->info.size ? *dev + *n : r->info.dev + r->info.size;
        if (r->info.device == device && lo < hi) {
            hit = r;
            *dev = lo;
            *n = hi - lo;
        }
    }
    pthread_mutex_unlock(&table_mu);
    return hit;
}

/* Bytes the host and the device both changed since they last agreed, in device addresses (the first and last). */
struct conflict { int any; uint64_t lo, hi; };

static void conflict_add(struct conflict *c, uint64_t dev)
{
    if (!c->any || dev < c->lo)
        c->lo = dev;
    if (!c->any || dev > c->hi)
        c->hi = dev;
    c->any = 1;
}

/* The device's bytes src into dst = the host copy at host (k bytes of one dirty page): the host's changes (against
 * the shadow) stay, the device's land elsewhere; an aligned word both changed is a conflict, as in the daemon's push
 * (a merge never makes a value neither side wrote). The shadow becomes the device's bytes. */
static void merge(struct region *r, uint64_t host, unsigned char *dst, const unsigned char *src, size_t k,
                  struct conflict *c)
{
    unsigned char *old = r->shadow + (host - r->span);
    const uint64_t mask = PV_MANAGED_CONFLICT_WORD - 1;
    for (size_t i = 0; i < k;) {
        size_t end = ((host + i) | mask) + 1 - host;       /* the end of this byte's word */
        if (end > k)
            end = k;
        int by_host = 0, by_device = 0;
        for (size_t j = i; j < end; j++) {
            by_host |= dst[j] != old[j];
            by_device |= src[j] != old[j];
        }
        if (by_host && by_device)
            conflict_add(c, r->info.dev + (host + i - r->info.host));
        for (size_t j = i; j < end; j++) {
            if (dst[j] == old[j])
                dst[j] = src[j];
            old[j] = src[j];
        }
        i = end;
    }
}

/* Writes device bytes `src` for host range [host, host+n) of r into the host copy, page by page. A page the host
 * wrote keeps the host's bytes and takes the device's elsewhere; a byte both changed is a conflict (*c). */
static void apply(struct region *r, uint64_t host, const unsigned char *src, size_t n, struct conflict *c)
{
    while (n > 0) {
        size_t pg = (host - r->span) / page_size;
        uint64_t page_addr = r->span + pg * page_size;
        size_t k = page_addr + page_size - host < n ? (size_t)(page_addr + page_size - host) : n;
        unsigned char *dst = (unsigned char *)(uintptr_t)host;
        for (;;) {
            unsigned char st = atomic_load(&r->state[pg]);
            if (st == PG_BUSY) {
                sched_yield();
                continue;
            }
            if (!atomic_compare_exchange_strong(&r->state[pg], &st, PG_BUSY))
                continue;
            if (st == PG_CLEAN) {
                mprotect((void *)(uintptr_t)page_addr, page_size, PROT_READ | PROT_WRITE);
                memcpy(dst, src, k);
                mprotect((void *)(uintptr_t)page_addr, page_size, PROT_READ);
            } else {
                merge(r, host, dst, src, k, c);
            }
            atomic_store(&r->state[pg], st);
            break;
        }
        host += k;
        src += k;
        n -= k;
    }
}

static cudaError_t pull_device(struct pv_device *d)
{
    struct pv_reply rep;
    cudaError_t err = pv_call_MANAGED_DIRTY(d, &rep);
    const msgpack_object *runs = err == PV_SUCCESS ? pv_map_get(rep.result, PV_KEY_MANAGED_RUNS) : NULL;
    if (err == PV_SUCCESS && (!runs || runs->type != MSGPACK_OBJECT_ARRAY))
        err = PV_cudaErrorUnknown;
    unsigned char *buf = NULL;
    size_t cap = 0;
    struct conflict c = { 0, 0, 0 };
    for (uint32_t i = 0; err == PV_SUCCESS && i < runs->via.array.size; i++) {
        const msgpack_object *e = &runs->via.array.ptr[i];
        uint64_t addr, len;
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 || pv_obj_u64(&e->via.array.ptr[0], &addr) ||
            pv_obj_u64(&e->via.array.ptr[1], &len)) {
            err = PV_cudaErrorUnknown;
            break;
        }
        struct region *r = region_by_dev(&addr, &len, d->index);
        if (!r)
            continue;                                    /* freed meanwhile */
        for (uint64_t off = 0; off < len && err == PV_SUCCESS; off += PUSH_CHUNK) {
            size_t k = len - off < PUSH_CHUNK ? (size_t)(len - off) : PUSH_CHUNK;
            if (k > cap) {
                unsigned char *nb = realloc(buf, k);
                if (!nb) {
                    err = PV_cudaErrorMemoryAllocation;
                    break;
                }
                buf = nb;
                cap = k;
            }
            size_t got = 0;
            err = pv_call_MEMCPY_DTOH(d, addr + off, k, 0, buf, k, &got);
            if (err == PV_SUCCESS && got != k)
                err = PV_cudaErrorUnknown;
            if (err == PV_SUCCESS)
                apply(r, r->info.host + (addr + off - r->info.dev), buf, k, &c);
        }
    }
    free(buf);
    pv_reply_free(&rep);
    if (err == PV_SUCCESS && c.any) {
        pv_log("GPU%d (%s:%d): the host and the device both changed managed memory [%#llx, %#llx] since the last "
               "synchronization: %s from now on", d->index, d->conn->host, d->conn->port, (unsigned long long)c.lo,
               (unsigned long long)c.hi, pv_err_name(PV_MANAGED_CONFLICT_ERROR));
        err = pv_call_MANAGED_CONFLICT(d, c.lo, c.hi - c.lo + 1);
        return err == PV_SUCCESS ? PV_MANAGED_CONFLICT_ERROR : err;
    }
    if (err != PV_SUCCESS && err != PV_ERR_UNAVAILABLE)
        pv_log("GPU%d (%s:%d): bringing managed memory up to date failed: %s", d->index, d->conn->host,
               d->conn->port, pv_err_name(err));
    return err;
}

cudaError_t pv_coherence_after_sync(struct pv_device *d, cudaError_t err)
{
    if (err != PV_SUCCESS || tls_busy)
        return err;
    int any = 0;
    for (int i = 0; i < pv_device_count() && !any; i++)
        any = atomic_load(&regions_on[i]) > 0 && pv_device(i)->conn == d->conn;
    if (!any)
        return err;
    tls_busy = 1;
    struct pv_recorder *rec = pv_record_pause();
    pthread_mutex_lock(&sync_mu);
    /* a kernel of d may have written the managed memory of another GPU of the same daemon (peer access) */
    for (int i = 0; i < pv_device_count(); i++) {
        struct pv_device *e = pv_device(i);
        if (e->conn == d->conn && atomic_load(&regions_on[i]) > 0) {
            cudaError_t perr = pull_device(e);
            if (perr == PV_MANAGED_CONFLICT_ERROR && err == PV_SUCCESS)
                err = perr;                              /* the synchronization reports it, as the next ones will */
        }
    }
    pthread_mutex_unlock(&sync_mu);
    pv_record_resume(rec);
    tls_busy = 0;
    return err;
}

/* ------------------------------------------------------------------------------------------ regions */
int pv_region_find(const void *p, struct pv_region_info *out)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    pthread_mutex_lock(&table_mu);
    int found = -1;
    for (int i = 0; i < nregions && found < 0; i++) {
        struct region *r = table[i];
        if ((a >= r->info.host && a < r->info.host + r->info.size) ||
            (a >= r->info.dev && a < r->info.dev + r->info.size)) {
            if (out)
                *out = r->info;
            found = 0;
        }
    }
    pthread_mutex_unlock(&table_mu);
    return found;
}

static struct region *region_at(uint64_t host)
{
    pthread_mutex_lock(&table_mu);
    struct region *hit = NULL;
    for (int i = 0; i < nregions && !hit; i++)
        if (table[i]->info.host == host)
            hit = table[i];
    pthread_mutex_unlock(&table_mu);
    return hit;
}

cudaError_t pv_region_alloc(struct pv_device *d, size_t size, int kind, struct pv_region_info *out)
{
    size_t pg = pv_page_size();
    if (pg > PV_MAX_MANAGED_ALIGN)
        return PV_cudaErrorNotSupported;
    size_t rounded = (size + pg - 1) / pg * pg;
    uint64_t ptr = 0;
    cudaError_t err = pv_call_MALLOC_MANAGED(d, rounded, (uint32_t)pg,
                                             kind == PV_REGION_MAPPED ? PV_MANAGED_FLAG_MAPPED : 0, &ptr);
    if (err != PV_SUCCESS)
        return err;
    /* Another GPU host's driver may have handed out these addresses (memory.c, pv_malloc_unique): one owner each */
    struct pv_alloc hit;
    if (pv_alloc_claim(ptr, rounded, d->index, pv_tls_owner(), &hit) != 0) {
        char mine[320], theirs[320];
        pv_alloc_owner_name(d->index, mine, sizeof mine);
        pv_alloc_owner_name(hit.dev, theirs, sizeof theirs);
        pv_log("%s handed out managed memory [%#llx, +%zu) over [%#llx, +%zu) of %s: allocation refused "
               "(cudaErrorMemoryAllocation)", mine, (unsigned long long)ptr, rounded, (unsigned long long)hit.ptr,
               hit.size, theirs);
        (void)pv_call_FREE(d, ptr);
        return PV_cudaErrorMemoryAllocation;
    }
    int ignored;
    void *m = mmap((void *)(uintptr_t)ptr, rounded, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE |
                   MAP_NORESERVE, -1, 0);
    if (m != (void *)(uintptr_t)ptr) {
        if (m != MAP_FAILED)
            munmap(m, rounded);
        pv_log("GPU%d: cannot map the host copy of managed memory at %#llx (%s)", d->index,
               (unsigned long long)ptr, m == MAP_FAILED ? strerror(errno) : "address taken");
        pv_alloc_remove(ptr, &ignored);
        (void)pv_call_FREE(d, ptr);
        return PV_cudaErrorMemoryAllocation;
    }
    struct region *r = region_alloc();
    if (!r) {
        munmap(m, rounded);
        pv_alloc_remove(ptr, &ignored);
        (void)pv_call_FREE(d, ptr);
        return PV_cudaErrorMemoryAllocation;
    }
    r->info = (struct pv_region_info){ ptr, ptr, rounded, d->index, kind };
    r->span = ptr;
    r->span_len = rounded;
    r->own_mapping = 1;
    err = track(r);
    if (err != PV_SUCCESS) {
        munmap(m, rounded);
        pv_alloc_remove(ptr, &ignored);
        (void)pv_call_FREE(d, ptr);
        pthread_mutex_lock(&table_mu);
        spare[nspare++] = r;
        pthread_mutex_unlock(&table_mu);
        return err;
    }
    *out = r->info;
    return PV_SUCCESS;
}

/* A copy on device d of the program's memory [host, host+size) (cudaHostRegister with cudaHostRegisterMapped): the
 * device copy starts as zeros, so every page counts as written once and its non-zero bytes go out with the next
 * push. The program's pages become read-only between pushes. */
cudaError_t pv_region_register(struct pv_device *d, void *host, size_t size, struct pv_region_info *out)
{
    size_t pg = pv_page_size();
    uint64_t h = (uint64_t)(uintptr_t)host;
    uint64_t span = h / pg * pg;
    size_t span_len = (h + size - span + pg - 1) / pg * pg;
    int overlap = 0;
    pthread_mutex_lock(&table_mu);
    for (int i = 0; i < nregions && !overlap; i++)
        overlap = span < table[i]->span + table[i]->span_len && table[i]->span < span + span_len;
    pthread_mutex_unlock(&table_mu);
    if (overlap)
        return PV_cudaErrorHostMemoryAlreadyRegistered;
    uint64_t ptr = 0;
    cudaError_t err = pv_call_MALLOC_MANAGED(d, span_len, (uint32_t)pg, PV_MANAGED_FLAG_MAPPED, &ptr);
    if (err != PV_SUCCESS)
        return err;
    struct region *r = region_alloc();
    if (!r) {
        (void)pv_call_FREE(d, ptr);
        return PV_cudaErrorMemoryAllocation;
    }
    r->info = (struct pv_region_info){ h, ptr + (h - span), size, d->index, PV_REGION_REGISTERED };
    r->span = span;
    r->span_len = span_len;
    r->own_mapping = 0;
    err = track(r);
    if (err != PV_SUCCESS) {
        (void)pv_call_FREE(d, ptr);
        pthread_mutex_lock(&table_mu);
        spare[nspare++] = r;
        pthread_mutex_unlock(&table_mu);
        return err;
    }
    /* every page as if the host had just written it over zeros */
    for (size_t i = 0; i < span_len / pg; i++) {
        memset(r->shadow + i * pg, 0, pg);
        mprotect((void *)(uintptr_t)(span + i * pg), pg, PROT_READ | PROT_WRITE);
        atomic_store(&r->state[i], PG_DIRTY);
        atomic_fetch_add(&r->ndirty, 1);
        atomic_fetch_add(&dirty_total, 1);
    }
    pv_alloc_add_owned(ptr, span_len, d->index, PV_OWNER_DEVICE);   /* ends with its registration */
    *out = r->info;
    return PV_SUCCESS;
}

/* The live __managed__-variable region of device `device` whose pages overlap [span, span+len), or NULL. */
static struct region *var_region_over(int device, uint64_t span, size_t len)
{
    pthread_mutex_lock(&table_mu);
    struct region *hit = NULL;
    for (int i = 0; i < nregions && !hit; i++) {
        struct region *r = table[i];
        if (span < r->span + r->span_len && r->span < span + len)
            hit = r;
    }
    pthread_mutex_unlock(&table_mu);
    return hit && hit->info.kind == PV_REGION_VAR && hit->info.device == device ? hit : NULL;
}

/* Maps the pages of [span, span+len) that [have, have+have_len) does not cover, read-only, at their addresses. */
static int map_missing(uint64_t span, size_t len, uint64_t have, size_t have_len)
{
    size_t pg = page_size;
    for (uint64_t a = span; a < span + len; a += pg) {
        if (a >= have && a < have + have_len)
            continue;
        void *m = mmap((void *)(uintptr_t)a, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE |
                       MAP_NORESERVE, -1, 0);
        if (m != (void *)(uintptr_t)a) {
            if (m != MAP_FAILED)
                munmap(m, pg);
            for (uint64_t b = span; b < a; b += pg)   /* undo this call's pages */
                if (b < have || b >= have + have_len)
                    munmap((void *)(uintptr_t)b, pg);
            return -1;
        }
    }
    return 0;
}

/* Variables of one module lie side by side, so two may share a host page: the later one joins the region of the
 * earlier (one region per run of pages, as the fault handler needs; the daemon keeps a range per variable). The
 * host's pending writes are pushed first, since the region's page states start over. Binding happens when the
 * program first uses a module's variables; a concurrent host write to the region in the moment it is re-tracked would
 * not be caught (documented in docs/architecture.md). */
static cudaError_t var_join(struct region *r, uint64_t dev, size_t size, uint64_t span, size_t span_len)
{
    cudaError_t err = pv_coherence_flush(NULL);
    if (err != PV_SUCCESS)
        return err;
    pthread_mutex_lock(&sync_mu);
    uint64_t lo = span < r->span ? span : r->span;
    uint64_t hi = span + span_len > r->span + r->span_len ? span + span_len : r->span + r->span_len;
    if (map_missing(lo, hi - lo, r->span, r->span_len) != 0) {
        pthread_mutex_unlock(&sync_mu);
        return PV_cudaErrorMemoryAllocation;
    }
    table_remove(r, 1);                                  /* the pages stay mapped, with the host's bytes */
    munmap(r->shadow, r->span_len);
    free((void *)r->state);
    uint64_t first = dev < r->info.dev ? dev : r->info.dev;
    uint64_t last = dev + size > r->info.dev + r->info.size ? dev + size : r->info.dev + r->info.size;
    r->info.dev = r->info.host = first;
    r->info.size = last - first;
    r->span = lo;
    r->span_len = hi - lo;
    err = track(r);
    pthread_mutex_unlock(&sync_mu);
    return err;
}

/* A __managed__ variable: the module's storage on device d at [dev, dev+size), mirrored at the same address. */
cudaError_t pv_region_attach(struct pv_device *d, uint64_t dev, size_t size, struct pv_region_info *out)
{
    size_t pg = pv_page_size();
    uint64_t span = dev / pg * pg;
    size_t span_len = (dev + size - span + pg - 1) / pg * pg;
    cudaError_t err = pv_call_MANAGED_ATTACH(d, dev, size);
    if (err != PV_SUCCESS)
        return err;
    struct region *shared = var_region_over(d->index, span, span_len);
    if (shared) {
        if ((err = var_join(shared, dev, size, span, span_len)) != PV_SUCCESS) {
            pv_log("GPU%d: cannot map the host copy of a __managed__ variable at %#llx", d->index,
                   (unsigned long long)dev);
            return err;
        }
        *out = (struct pv_region_info){ dev, dev, size, d->index, PV_REGION_VAR };
        (void)pv_coherence_after_sync(d, PV_SUCCESS);    /* fetch the variable's initial value */
        return PV_SUCCESS;
    }
    void *m = mmap((void *)(uintptr_t)span, span_len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE |
                   MAP_NORESERVE, -1, 0);
    struct region *r = m == (void *)(uintptr_t)span ? region_alloc() : NULL;
    if (!r) {
        if (m != MAP_FAILED)
            munmap(m, span_len);
        pv_log("GPU%d: cannot map the host copy of a __managed__ variable at %#llx", d->index,
               (unsigned long long)dev);
        return PV_cudaErrorMemoryAllocation;
    }
    r->info = (struct pv_region_info){ dev, dev, size, d->index, PV_REGION_VAR };
    r->span = span;
    r->span_len = span_len;
    r->own_mapping = 1;
    err = track(r);
    if (err != PV_SUCCESS) {
        munmap(m, span_len);
        pthread_mutex_lock(&table_mu);
        spare[nspare++] = r;
        pthread_mutex_unlock(&table_mu);
        return err;
    }
    *out = r->info;
    (void)pv_coherence_after_sync(d, PV_SUCCESS);        /* fetch the variable's initial value */
    return PV_SUCCESS;
}

cudaError_t pv_region_free(uint64_t host)
{
    struct region *r = region_at(host);
    if (!r)
        return PV_cudaErrorInvalidValue;
    struct pv_region_info info = r->info;
    pthread_mutex_lock(&sync_mu);                        /* not while a push or pull walks it */
    untrack(r);
    pthread_mutex_unlock(&sync_mu);
    if (info.kind == PV_REGION_VAR)
        return PV_SUCCESS;                               /* module storage: the module owns it */
    int dev;
    pv_alloc_remove(info.dev, &dev);
    struct pv_device *d = pv_device(info.device);
    return d ? pv_call_FREE(d, info.dev) : PV_cudaErrorInvalidDevice;
}

void pv_coherence_forget_device(int device)
{
    pthread_mutex_lock(&sync_mu);
    for (;;) {
        struct region *hit = NULL;
        pthread_mutex_lock(&table_mu);
        for (int i = 0; i < nregions && !hit; i++)
            if (table[i]->info.device == device)
                hit = table[i];
        pthread_mutex_unlock(&table_mu);
        if (!hit)
            break;
        untrack(hit);
    }
    pthread_mutex_unlock(&sync_mu);
}

int pv_coherence_pending(void) { return atomic_load(&dirty_total) > 0; }
