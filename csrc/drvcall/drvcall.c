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

/* The order of pv_dc_entry_name, which is the order of the fields below. */
static const char *const ENTRY_NAMES[] = {
    "cuLaunchKernel", "cuLaunchCooperativeKernel", "cuMemsetD8Async", "cuMemsetD2D8Async", "cuMemsetD2D16Async",
    "cuMemsetD2D32Async", "cuEventRecord", "cuStreamWaitEvent", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync",
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
    return d;
}

PV_DC_API void pv_dc_driver_free(pv_dc_driver *d) { free(d); }

#define PTR(x) ((void *)(x))

PV_DC_API int pv_dc_launch(const pv_dc_driver *d, uintptr_t func, uint32_t gx, uint32_t gy, uint32_t gz,
                           uint32_t bx, uint32_t by, uint32_t bz, uint32_t shmem, uintptr_t stream,
                           const void *params, size_t size) {
    /* The packed buffer as the client laid it out; a kernel without parameters still gets a valid pointer. */
    static unsigned char none;
    size_t bytes = size;
    void *extra[] = {LAUNCH_PARAM_BUFFER_POINTER, params ? (void *)params : &none, LAUNCH_PARAM_BUFFER_SIZE, &bytes,
                     LAUNCH_PARAM_END};
    return d->launch(PTR(func), gx, gy, gz, bx, by, bz, shmem, PTR(stream), NULL, extra);
}

PV_DC_API int pv_dc_launch_coop(const pv_dc_driver *d, uintptr_t func, uint32_t gx, uint32_t gy, uint32_t gz,
                                uint32_t bx, uint32_t by, uint32_t bz, uint32_t shmem, uintptr_t stream,
                                const void *params, const uint32_t *offsets, uint32_t nparams) {
    /* cuLaunchCooperativeKernel takes no packed buffer: one pointer per parameter, into the client's buffer */
    void *local[COOP_STACK_PARAMS];
    void **ptrs = nparams <= COOP_STACK_PARAMS ? local : malloc(nparams * sizeof *ptrs);
    if (ptrs == NULL)
        return CU_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < nparams; i++)
        ptrs[i] = (unsigned char *)params + offsets[i];    /* the driver only reads them */
    int err = d->launch_coop(PTR(func), gx, gy, gz, bx, by, bz, shmem, PTR(stream), ptrs);
    if (ptrs != local)
        free(ptrs);
    return err;
}

PV_DC_API int pv_dc_memset(const pv_dc_driver *d, uint32_t kind, uint64_t dst, uint64_t pitch, uint64_t value,
                           uint64_t width, uint64_t height, uintptr_t stream) {
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

PV_DC_API int pv_dc_event_record(const pv_dc_driver *d, uintptr_t event, uintptr_t stream) {
    return d->event_record(PTR(event), PTR(stream));
}

PV_DC_API int pv_dc_stream_wait(const pv_dc_driver *d, uintptr_t stream, uintptr_t event, uint32_t flags) {
    return d->stream_wait(PTR(stream), PTR(event), flags);
}

PV_DC_API int pv_dc_htod(const pv_dc_driver *d, uint64_t dst, const void *src, size_t size, uintptr_t stream) {
    return d->htod(dst, src, size, PTR(stream));
}

PV_DC_API int pv_dc_dtoh(const pv_dc_driver *d, uintptr_t dst, uint64_t src, size_t size, uintptr_t stream) {
    return d->dtoh(PTR(dst), src, size, PTR(stream));
}

PV_DC_API int pv_dc_dtod(const pv_dc_driver *d, uint64_t dst, uint64_t src, size_t size, uintptr_t stream) {
    return d->dtod(dst, src, size, PTR(stream));
}

static int run_one(const pv_dc_driver *d, const pv_dc_op *op) {
    switch (op->kind) {
    case PV_DC_LAUNCH:
        return pv_dc_launch(d, op->handle, op->grid[0], op->grid[1], op->grid[2], op->block[0], op->block[1],
                            op->block[2], op->shmem, op->stream, (const void *)op->host, op->size);
    case PV_DC_LAUNCH_COOP:
        return pv_dc_launch_coop(d, op->handle, op->grid[0], op->grid[1], op->grid[2], op->block[0], op->block[1],
                                 op->block[2], op->shmem, op->stream, (const void *)op->host, op->offsets,
                                 op->nparams);
    case PV_DC_MEMSET_D8:
    case PV_DC_MEMSET_D2D8:
    case PV_DC_MEMSET_D2D16:
    case PV_DC_MEMSET_D2D32:
        return pv_dc_memset(d, op->kind, op->dst, op->pitch, op->value, op->width, op->height, op->stream);
    case PV_DC_EVENT_RECORD:
        return pv_dc_event_record(d, op->handle, op->stream);
    case PV_DC_STREAM_WAIT:
        return pv_dc_stream_wait(d, op->stream, op->handle, op->flags);
    case PV_DC_HTOD:
        return pv_dc_htod(d, op->dst, (const void *)op->host, op->size, op->stream);
    case PV_DC_DTOH:
        return pv_dc_dtoh(d, op->host, op->src, op->size, op->stream);
    case PV_DC_DTOD:
        return pv_dc_dtod(d, op->dst, op->src, op->size, op->stream);
    default:
        return CU_ERROR_INVALID_VALUE;
    }
}

PV_DC_API int pv_dc_run(const pv_dc_driver *d, const pv_dc_op *ops, size_t n, size_t *failed) {
    for (size_t i = 0; i < n; i++) {
        int err = run_one(d, &ops[i]);
        if (err != 0) {
            *failed = i;
            return err;
        }
    }
    *failed = n;
    return 0;
}
