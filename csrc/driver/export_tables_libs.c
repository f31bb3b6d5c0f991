/* cuGetExportTable: the private tables NVIDIA's CUDA libraries (not the runtime) ask the driver for. What each holds
 * and how that was found out is in docs/driver.md ("Export tables of the CUDA libraries"). A slot whose meaning
 * is not established logs once, naming table, slot, caller and its first arguments, and returns
 * CUDA_ERROR_NOT_SUPPORTED: a library that depends on it fails with an error, never a jump to nowhere. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

typedef void (*slot_fn)(void);
#define SIZE_OF(nslots) ((slot_fn)(uintptr_t)((nslots) * sizeof(void *)))

static CUresult unknown_slot(const char *table, int slot, atomic_int *once, const void *caller, uintptr_t a0,
                             uintptr_t a1, uintptr_t a2, uintptr_t a3)
{
    Dl_info info;
    const char *who = "?";
    uintptr_t off = 0;
    if (dladdr(caller, &info) && info.dli_fname) {
        who = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
        off = (uintptr_t)caller - (uintptr_t)info.dli_fbase;
    }
    pv_log_once(once, "%s+0x%lx called slot %d of export table %s (args %#lx %#lx %#lx %#lx), which libvcuda does "
                "not implement (CUDA_ERROR_NOT_SUPPORTED)", who, (unsigned long)off, slot, table,
                (unsigned long)a0, (unsigned long)a1, (unsigned long)a2, (unsigned long)a3);
    pv_census_missing("table-slot", "%s/%d by %s+0x%lx", table, slot, who, (unsigned long)off);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* An unknown slot takes whatever the caller passes (integer registers, ignored past the fourth). */
#define UNKNOWN(tag, uuid, n)                                                                                     \
    static CUresult tag##_##n(uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3)                            \
    {                                                                                                             \
        static atomic_int once;                                                                                   \
        return unknown_slot(uuid, n, &once, __builtin_return_address(0), a0, a1, a2, a3);                        \
    }
#define UNKNOWN1_9(tag, uuid)                                                                                     \
    UNKNOWN(tag, uuid, 1) UNKNOWN(tag, uuid, 2) UNKNOWN(tag, uuid, 3) UNKNOWN(tag, uuid, 4) UNKNOWN(tag, uuid, 5)  \
    UNKNOWN(tag, uuid, 6) UNKNOWN(tag, uuid, 7) UNKNOWN(tag, uuid, 8) UNKNOWN(tag, uuid, 9)
#define UNKNOWN10(tag, uuid, b)                                                                                   \
    UNKNOWN(tag, uuid, b##0) UNKNOWN(tag, uuid, b##1) UNKNOWN(tag, uuid, b##2) UNKNOWN(tag, uuid, b##3)           \
    UNKNOWN(tag, uuid, b##4) UNKNOWN(tag, uuid, b##5) UNKNOWN(tag, uuid, b##6) UNKNOWN(tag, uuid, b##7)           \
    UNKNOWN(tag, uuid, b##8) UNKNOWN(tag, uuid, b##9)
#define S(tag, n) (slot_fn) tag##_##n
#define SLOTS1_9(tag) S(tag, 1), S(tag, 2), S(tag, 3), S(tag, 4), S(tag, 5), S(tag, 6), S(tag, 7), S(tag, 8), \
                      S(tag, 9)
#define SLOTS10(tag, b) S(tag, b##0), S(tag, b##1), S(tag, b##2), S(tag, b##3), S(tag, b##4), S(tag, b##5), \
                        S(tag, b##6), S(tag, b##7), S(tag, b##8), S(tag, b##9)

/* ---------------------------------------------------------------- 21318c60: asked for by cuFFT, cuSOLVER, cuBLASLt */
/* Slot 4: CUresult (CUcontext ctx, unsigned long long *id), the context's unique id, as cuCtxGetId: called by
 * cuBLASLt 13.1's heuristic (libcublasLt.so.13+0x194091e) with tools-TLS slot 2's context; the heuristic then works
 * (docs/driver.md). Public notes name slot 3 a context's device; not seen called, so it and every other slot log
 * what calls them. */
#define CTXID_UUID "21318c60-9714-3248-8ca6-41ff7324c8f2"
extern CUresult cuCtxGetId(CUcontext c, unsigned long long *id);
static CUresult ctxid_4(CUcontext c, unsigned long long *id) { return cuCtxGetId(c, id); }
UNKNOWN(ctxid, CTXID_UUID, 1) UNKNOWN(ctxid, CTXID_UUID, 2) UNKNOWN(ctxid, CTXID_UUID, 3)
UNKNOWN(ctxid, CTXID_UUID, 5) UNKNOWN(ctxid, CTXID_UUID, 6) UNKNOWN(ctxid, CTXID_UUID, 7)
UNKNOWN(ctxid, CTXID_UUID, 8) UNKNOWN(ctxid, CTXID_UUID, 9)
UNKNOWN10(ctxid, CTXID_UUID, 1) UNKNOWN10(ctxid, CTXID_UUID, 2) UNKNOWN10(ctxid, CTXID_UUID, 3)
UNKNOWN10(ctxid, CTXID_UUID, 4)
static const slot_fn ctxid_table[] = {
    SIZE_OF(50), SLOTS1_9(ctxid), SLOTS10(ctxid, 1), SLOTS10(ctxid, 2), SLOTS10(ctxid, 3), SLOTS10(ctxid, 4),
};

/* ---------------------------------------------------------------- da9151d3: asked for by NVRTC */
#define NVRTC_UUID "da9151d3-3ae6-cc41-a5c0-4f26d533e328"
/* Slot 1: nvrtcCompileProgram (13.0, libnvrtc.so.13+0x9e4270) calls it once per compilation with a pointer, 1 or 2,
 * a buffer and a length that follows the program's size, and three more arguments on the stack; on any error it
 * carries on, and the PTX or cubin it returns is what CuPy then loads and runs correctly (tests/frameworks). So
 * the answer is a quiet CUDA_ERROR_NOT_SUPPORTED, as if the driver offered nothing there. */
static CUresult nvrtc_1(void) { return CUDA_ERROR_NOT_SUPPORTED; }
UNKNOWN(nvrtc, NVRTC_UUID, 2) UNKNOWN(nvrtc, NVRTC_UUID, 3) UNKNOWN(nvrtc, NVRTC_UUID, 4)
UNKNOWN(nvrtc, NVRTC_UUID, 5) UNKNOWN(nvrtc, NVRTC_UUID, 6) UNKNOWN(nvrtc, NVRTC_UUID, 7)
UNKNOWN(nvrtc, NVRTC_UUID, 8) UNKNOWN(nvrtc, NVRTC_UUID, 9) UNKNOWN10(nvrtc, NVRTC_UUID, 1)
static const slot_fn nvrtc_table[] = { SIZE_OF(20), SLOTS1_9(nvrtc), SLOTS10(nvrtc, 1) };

/* ---------------------------------------------------------------- 6e163fbe: asked for by cuFFT 12 */
/* Public notes name it a table of function queries (a kernel's name, parameter count and descriptors, its cache
 * configuration); cuFFT asks for it when a plan is made and fails its plan without it.
 * Slot 7: int (CUcontext ctx or NULL, CUmodule m, void (*cb)(void *ud, CUfunction f), void *ud): cb for each function
 * of m, and their count (0 for a library); what NVIDIA's driver did on an H100 (GPU run 3,
 * tools/gpu_probes/gpu_probe_cufft_table.py). cuFFT wants 1 for its one-kernel modules. Every other slot logs. */
#define FUNC_UUID "6e163fbe-b958-444d-835c-e182aff1991e"
static int func_7(CUcontext ctx, CUmodule m, void (*cb)(void *, CUfunction), void *ud)
{
    (void)ctx;                                   /* NULL and the module's context answered alike */
    return drv_module_each_function(m, cb, ud);
}
UNKNOWN(func, FUNC_UUID, 1) UNKNOWN(func, FUNC_UUID, 2) UNKNOWN(func, FUNC_UUID, 3) UNKNOWN(func, FUNC_UUID, 4)
UNKNOWN(func, FUNC_UUID, 5) UNKNOWN(func, FUNC_UUID, 6) UNKNOWN(func, FUNC_UUID, 8) UNKNOWN(func, FUNC_UUID, 9)
UNKNOWN10(func, FUNC_UUID, 1) UNKNOWN10(func, FUNC_UUID, 2)
UNKNOWN10(func, FUNC_UUID, 3) UNKNOWN10(func, FUNC_UUID, 4) UNKNOWN10(func, FUNC_UUID, 5)
static const slot_fn func_table[] = {
    SIZE_OF(60), SLOTS1_9(func), SLOTS10(func, 1), SLOTS10(func, 2), SLOTS10(func, 3), SLOTS10(func, 4),
    SLOTS10(func, 5),
};

const void *drv_library_table(const char *uuid)
{
    if (strcmp(uuid, FUNC_UUID) == 0)
        return func_table;
    if (strcmp(uuid, CTXID_UUID) == 0)
        return ctxid_table;
    if (strcmp(uuid, NVRTC_UUID) == 0)
        return nvrtc_table;
    return NULL;
}
