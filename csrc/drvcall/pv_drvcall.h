/* libpvdrvcall.so: the cuda backend's fast ops (launches, memsets, event records, stream waits, async copies from
 * and to daemon memory) called into the CUDA driver from C, one op or a run of ops per call from Python.
 *
 * The daemon hands the driver's entry points over once (pv_dc_driver_new, the addresses cuGetProcAddress gave in the
 * ABIs cuda-bindings calls: daemon/pyvgpu_daemon/backends/cuda_calls.py), so these calls reach exactly what the
 * loaded driver exports. No CUDA headers: handles are opaque pointers, device addresses 64-bit integers, results the
 * driver's CUresult as an int. Handles and host addresses are passed as uintptr_t (cheap to pass from Python; an
 * address of 0 for a launch's parameter buffer means none). Each call runs with the session's context current on the
 * calling thread (set for the call and put back where another one, or none, was current).
 *
 * The part between the cffi markers is what Python declares (cffi parses it from this file, installed beside the
 * library): plain declarations only, no preprocessor lines. */
#ifndef PV_DRVCALL_H
#define PV_DRVCALL_H
#include <stddef.h>
#include <stdint.h>

/* cffi:begin */
typedef struct pv_dc_driver pv_dc_driver;

/* Kinds of a run's op (pv_dc_op.kind). */
enum pv_dc_kind {
    PV_DC_LAUNCH = 1,          /* cuLaunchKernel with the packed parameter buffer: handle, grid, block, shmem, host/size */
    PV_DC_LAUNCH_COOP = 2,     /* cuLaunchCooperativeKernel: one pointer per parameter, host + offsets[nparams] */
    PV_DC_MEMSET_D8 = 3,       /* cuMemsetD8Async: dst, value, width bytes */
    PV_DC_MEMSET_D2D8 = 4,     /* cuMemsetD2D8Async: dst, pitch, value, width, height */
    PV_DC_MEMSET_D2D16 = 5,    /* cuMemsetD2D16Async */
    PV_DC_MEMSET_D2D32 = 6,    /* cuMemsetD2D32Async */
    PV_DC_EVENT_RECORD = 7,    /* cuEventRecord: handle (the event) */
    PV_DC_STREAM_WAIT = 8,     /* cuStreamWaitEvent: handle (the event), flags */
    PV_DC_HTOD = 9,            /* cuMemcpyHtoDAsync_v2: dst, host, size */
    PV_DC_DTOH = 10,           /* cuMemcpyDtoHAsync_v2: host (written), src, size */
    PV_DC_DTOD = 11            /* cuMemcpyDtoDAsync_v2: dst, src, size */
};

/* One op of a run: the fields its kind names, the others ignored. */
typedef struct pv_dc_op {
    uint32_t kind;
    uint32_t flags;            /* stream wait: its flags */
    uintptr_t stream;          /* CUstream (0: the legacy default stream) */
    uintptr_t handle;          /* CUfunction (launches), CUevent (record, wait) */
    uint64_t dst;
    uint64_t src;
    uint64_t value;            /* memsets: the element's value */
    uint64_t pitch;
    uint64_t width;            /* memsets: elements per row (D8: bytes) */
    uint64_t height;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shmem;
    uint32_t nparams;          /* cooperative launch: entries of offsets */
    const uint32_t *offsets;   /* cooperative launch: each parameter's offset in host */
    uintptr_t host;            /* copies: host memory; launches: the parameter buffer */
    uint64_t size;             /* copies: bytes; launch: the parameter buffer's bytes */
} pv_dc_op;

/* The entry points, in the order pv_dc_entry_name gives (cuGetProcAddress's base names). */
size_t pv_dc_entry_count(void);
const char *pv_dc_entry_name(size_t i);

/* A table of the driver's entry points (entries[i]: pv_dc_entry_name(i)'s address); NULL when n is not
 * pv_dc_entry_count(), an address is 0, or memory is short. Freed with pv_dc_driver_free. */
pv_dc_driver *pv_dc_driver_new(const uintptr_t *entries, size_t n);
void pv_dc_driver_free(pv_dc_driver *d);

/* Every call below runs with ctx (a CUcontext; 0: none asked) current on the calling thread: cuCtxGetCurrent each
 * call; where another context (or none) is current, cuCtxSetCurrent(ctx) before and the one found put back after (a
 * failure of either is the call's CUresult), so the thread is left as it was. */

/* One op each; → the driver's CUresult. pv_dc_memset's kind: one of the PV_DC_MEMSET_* (D8 sets width bytes). */
int pv_dc_launch(const pv_dc_driver *d, uintptr_t ctx, uintptr_t func, uint32_t gx, uint32_t gy, uint32_t gz,
                 uint32_t bx, uint32_t by, uint32_t bz, uint32_t shmem, uintptr_t stream, const void *params,
                 size_t size);
int pv_dc_launch_coop(const pv_dc_driver *d, uintptr_t ctx, uintptr_t func, uint32_t gx, uint32_t gy, uint32_t gz,
                      uint32_t bx, uint32_t by, uint32_t bz, uint32_t shmem, uintptr_t stream, const void *params,
                      const uint32_t *offsets, uint32_t nparams);
int pv_dc_memset(const pv_dc_driver *d, uintptr_t ctx, uint32_t kind, uint64_t dst, uint64_t pitch, uint64_t value,
                 uint64_t width, uint64_t height, uintptr_t stream);
int pv_dc_event_record(const pv_dc_driver *d, uintptr_t ctx, uintptr_t event, uintptr_t stream);
int pv_dc_stream_wait(const pv_dc_driver *d, uintptr_t ctx, uintptr_t stream, uintptr_t event, uint32_t flags);
int pv_dc_htod(const pv_dc_driver *d, uintptr_t ctx, uint64_t dst, const void *src, size_t size, uintptr_t stream);
int pv_dc_dtoh(const pv_dc_driver *d, uintptr_t ctx, uintptr_t dst, uint64_t src, size_t size, uintptr_t stream);
int pv_dc_dtod(const pv_dc_driver *d, uintptr_t ctx, uint64_t dst, uint64_t src, size_t size, uintptr_t stream);

/* ops[0..n) in order (ctx current once around them all), stopping at the first that fails: → 0 when all ran, else that
 * op's CUresult with its index in *failed (the ops before it ran; none after it did): 0 when making ctx current
 * failed, n when all ran and putting the thread's context back failed. An unknown kind is CUDA_ERROR_INVALID_VALUE (1). */
int pv_dc_run(const pv_dc_driver *d, uintptr_t ctx, const pv_dc_op *ops, size_t n, size_t *failed);
/* cffi:end */

#endif
