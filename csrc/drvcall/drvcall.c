/* libpvdrvcall.so: the cuda backend's fast ops called into the driver from C (pv_drvcall.h). */
#include "pv_drvcall.h"

#include <stdlib.h>

#define PV_DC_API __attribute__((visibility("default")))

enum { CU_ERROR_INVALID_VALUE = 1, CU_ERROR_OUT_OF_MEMORY = 2 };
/* cuLaunchKernel's `extra` keys (cuda.h: CU_LAUNCH_PARAM_END, _BUFFER_POINTER, _BUFFER_SIZE) */
#define LAUNCH_PARAM_END ((void *)0x00)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define COOP_STACK_PARAMS 64          /* cooperative launches with more parameters take their pointer array from malloc */

typedef unsigned long long dptr_t;    /* CUdeviceptr of the _v2 ABIs */
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                         void **, void **);
typedef int (*launch_coop_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                              void **);
typedef int (*memset_d8_fn)(dptr_t, unsigned char, size_t, void *);
typedef int (*memset_d2d8_fn)(dptr_t, size_t, unsigned char, size_t, size_t, void *);
typedef int (*memset_d2d16_fn)(dptr_t, size_t, unsigned short, size_t, size_t, void *);
typedef int (*memset_d2d32_fn)(dptr_t, size_t, unsigned int, size_t, size_t, void *);
typedef int (*event_record_fn)(void *, void *);
typedef int (*stream_wait_fn)(void *, void *, unsigned);
typedef int (*htod_fn)(dptr_t, const void *, size_t, void *);
typedef int (*dtoh_fn)(void *, dptr_t, size_t, void *);
typedef int (*dtod_fn)(dptr_t, dptr_t, size_t, void *);
typedef int (*ctx_get_fn)(void **);
typedef int (*ctx_set_fn)(void *);

/* The order of pv_dc_entry_name, which is the order of the fields below. */
static const char *const ENTRY_NAMES[] = {
    "cuLaunchKernel", "cuLaunchCooperativeKernel", "cuMemsetD8Async", "cuMemsetD2D8Async", "cuMemsetD2D16Async",
    "cuMemsetD2D32Async", "cuEventRecord", "cuStreamWaitEvent", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync", "cuCtxGetCurrent", "cuCtxSetCurrent",
};
#define ENTRY_COUNT (sizeof ENTRY_NAMES / sizeof ENTRY_NAMES[0])

struct pv_dc_driver {
    launch_fn launch;
    launch_coop_fn launch_coop;
    memset_d8_fn memset_d8;
    memset_d2d8_fn memset_d2d8;
    memset_d2d16_fn memset_d2d16;
    memset_d2d32_fn memset_d2d32;
    event_record_fn event_record;
    stream_wait_fn stream_wait;
    htod_fn htod;
    dtoh_fn dtoh;
    dtod_fn dtod;
    ctx_get_fn ctx_get;
    ctx_set_fn ctx_set;
};

PV_DC_API size_t pv_dc_entry_count(void) { return ENTRY_COUNT; }

PV_DC_API const char *pv_dc_entry_name(size_t i) { return i < ENTRY_COUNT ? ENTRY_NAMES[i] : NULL; }

PV_DC_API pv_dc_driver *pv_dc_driver_new(const uintptr_t *e, size_t n) {
    if (n != ENTRY_COUNT || e == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (e[i] == 0)
            return NULL;
    pv_dc_driver *d = malloc(sizeof *d);
    if (d == NULL)
        return NULL;
    /* function pointers from addresses (POSIX guarantees the round trip through an integer) */
    d->launch = (launch_fn)e[0];
    d->launch_coop = (launch_coop_fn)e[1];
    d->memset_d8 = (memset_d8_fn)e[2];
    d->memset_d2d8 = (memset_d2d8_fn)e[3];
    d->memset_d2d16 = (memset_d2d16_fn)e[4];
    d->memset_d2d32 = (memset_d2d32_fn)e[5];
    d->event_record = (event_record_fn)e[6];
    d->stream_wait = (stream_wait_fn)e[7];
    d->htod = (htod_fn)e[8];
    d->dtoh = (dtoh_fn)e[9];
    d->dtod = (dtod_fn)e[10];
    d->ctx_get = (ctx_get_fn)e[11];
    d->ctx_set = (ctx_set_fn)e[12];
    return d;
}

PV_DC_API void pv_dc_driver_free(pv_dc_driver *d) { free(d); }

#define PTR(x) ((void *)(x))

/* The calling thread's context while one call runs: ctx made current where another (or none) is, and the one found
 * put back after the call, so the thread is left as it was (its other users, cuda-python's calls or another
 * session's worker, see no change). The driver is asked each time: a note kept here would go stale when cuda-python
 * sets a context on the same thread. ctx 0: nothing asked. */
struct scope {
    void *prev;
    int switched;
};

static int enter(const pv_dc_driver *d, uintptr_t ctx, struct scope *s)
{
    s->prev = NULL;
    s->switched = 0;
    if (ctx == 0)
        return 0;
    int err = d->ctx_get(&s->prev);
    if (err != 0 || s->prev == PTR(ctx))
        return err;
    err = d->ctx_set(PTR(ctx));
    s->switched = err == 0;
    return err;
}

static int leave(const pv_dc_driver *d, const struct scope *s, int err)
{
    if (s->switched) {
        int back = d->ctx_set(s->prev);
        if (err == 0)
            err = back;
    }
    return err;
}

/* ------------------------------------------------------------------ the calls, the context already current */
static int launch(const pv_dc_driver *d, uintptr_t func, const uint32_t *grid, const uint32_t *block, uint32_t shmem,
                  uintptr_t stream, const void *params, size_t size)
{
    /* The packed buffer as the client laid it out; a kernel without parameters still gets a valid pointer. */
    static unsigned char none;
    size_t bytes = size;
    void *extra[] = {LAUNCH_PARAM_BUFFER_POINTER, params ? (void *)params : &none, LAUNCH_PARAM_BUFFER_SIZE, &bytes,
                     LAUNCH_PARAM_END};
    return d->launch(PTR(func), grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, PTR(stream), NULL,
                     extra);
}

static int launch_coop(const pv_dc_driver *d, uintptr_t func, const uint32_t *grid, const uint32_t *block,
                       uint32_t shmem, uintptr_t stream, const void *params, const uint32_t *offsets,
                       uint32_t nparams)
{
    /* cuLaunchCooperativeKernel takes no packed buffer: one pointer per parameter, into the client's buffer */
    void *local[COOP_STACK_PARAMS];
    void **ptrs = nparams <= COOP_STACK_PARAMS ? local : malloc(nparams * sizeof *ptrs);
    if (ptrs == NULL)
        return CU_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < nparams; i++)
        ptrs[i] = (unsigned char *)params + offsets[i];    /* the driver only reads them */
    int err = d->launch_coop(PTR(func), grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, PTR(stream),
                             ptrs);
    if (ptrs != local)
        free(ptrs);
    return err;
}

static int memset_any(const pv_dc_driver *d, uint32_t kind, uint64_t dst, uint64_t pitch, uint64_t value,
                      uint64_t width, uint64_t height, uintptr_t stream)
{
    switch (kind) {
    case PV_DC_MEMSET_D8:
        return d->memset_d8(dst, (unsigned char)value, width, PTR(stream));
    case PV_DC_MEMSET_D2D8:
        return d->memset_d2d8(dst, pitch, (unsigned char)value, width, height, PTR(stream));
    case PV_DC_MEMSET_D2D16:
        return d->memset_d2d16(dst, pitch, (unsigned short)value, width, height, PTR(stream));
    case PV_DC_MEMSET_D2D32:
        return d->memset_d2d32(dst, pitch, (unsigned int)value, width, height, PTR(stream));
    default:
        return CU_ERROR_INVALID_VALUE;
    }
}

static int run_one(const pv_dc_driver *d, const pv_dc_op *op)
{
    switch (op->kind) {
    case PV_DC_LAUNCH:
        return launch(d, op->handle, op->grid, op->block, op->shmem, op->stream, (const void *)op->host, op->size);
    case PV_DC_LAUNCH_COOP:
        return launch_coop(d, op->handle, op->grid, op->block, op->shmem, op->stream, (const void *)op->host,
                           op->offsets, op->nparams);
    case PV_DC_MEMSET_D8:
    case PV_DC_MEMSET_D2D8:
    case PV_DC_MEMSET_D2D16:
    case PV_DC_MEMSET_D2D32:
        return memset_any(d, op->kind, op->dst, op->pitch, op->value, op->width, op->height, op->stream);
    case PV_DC_EVENT_RECORD:
        return d->event_record(PTR(op->handle), PTR(op->stream));
    case PV_DC_STREAM_WAIT:
        return d->stream_wait(PTR(op->stream), PTR(op->handle), op->flags);
    case PV_DC_HTOD:
        return d->htod(op->dst, (const void *)op->host, op->size, PTR(op->stream));
    case PV_DC_DTOH:
        return d->dtoh(PTR(op->host), op->src, op->size, PTR(op->stream));
    case PV_DC_DTOD:
        return d->dtod(op->dst, op->src, op->size, PTR(op->stream));
    default:
        return CU_ERROR_INVALID_VALUE;
    }
}

/* ------------------------------------------------------------------ the entry points: ctx current while they call */
PV_DC_API int pv_dc_launch(const pv_dc_driver *d, uintptr_t ctx, uintptr_t func, uint32_t gx, uint32_t gy,
                           uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t shmem, uintptr_t stream,
                           const void *params, size_t size)
{
    const uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, launch(d, func, grid, block, shmem, stream, params, size));
}

PV_DC_API int pv_dc_launch_coop(const pv_dc_driver *d, uintptr_t ctx, uintptr_t func, uint32_t gx, uint32_t gy,
                                uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t shmem, uintptr_t stream,
                                const void *params, const uint32_t *offsets, uint32_t nparams)
{
    const uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, launch_coop(d, func, grid, block, shmem, stream, params, offsets, nparams));
}

PV_DC_API int pv_dc_memset(const pv_dc_driver *d, uintptr_t ctx, uint32_t kind, uint64_t dst, uint64_t pitch,
                           uint64_t value, uint64_t width, uint64_t height, uintptr_t stream)
{
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, memset_any(d, kind, dst, pitch, value, width, height, stream));
}

PV_DC_API int pv_dc_event_record(const pv_dc_driver *d, uintptr_t ctx, uintptr_t event, uintptr_t stream)
{
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, d->event_record(PTR(event), PTR(stream)));
}

PV_DC_API int pv_dc_stream_wait(const pv_dc_driver *d, uintptr_t ctx, uintptr_t stream, uintptr_t event,
                                uint32_t flags)
{
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, d->stream_wait(PTR(stream), PTR(event), flags));
}

PV_DC_API int pv_dc_htod(const pv_dc_driver *d, uintptr_t ctx, uint64_t dst, const void *src, size_t size,
                         uintptr_t stream)
{
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, d->htod(dst, src, size, PTR(stream)));
}

PV_DC_API int pv_dc_dtoh(const pv_dc_driver *d, uintptr_t ctx, uintptr_t dst, uint64_t src, size_t size,
                         uintptr_t stream)
{
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, d->dtoh(PTR(dst), src, size, PTR(stream)));
}

PV_DC_API int pv_dc_dtod(const pv_dc_driver *d, uintptr_t ctx, uint64_t dst, uint64_t src, size_t size,
                         uintptr_t stream)
{
    struct scope sc;
    int err = enter(d, ctx, &sc);
    return err ? err : leave(d, &sc, d->dtod(dst, src, size, PTR(stream)));
}

PV_DC_API int pv_dc_run(const pv_dc_driver *d, uintptr_t ctx, const pv_dc_op *ops, size_t n, size_t *failed)
{
    struct scope sc;
    int err = enter(d, ctx, &sc);
    *failed = 0;
    if (err != 0)
        return err;
    size_t i = 0;
    while (i < n && (err = run_one(d, &ops[i])) == 0)
        i++;
    *failed = i;
    return leave(d, &sc, err);
}
