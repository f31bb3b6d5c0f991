/* Start-up and errors: cuInit, cuDriverGetVersion (and the test knob that makes it an older driver), cuGetErrorName/
 * String, the answer of every function outside the supported set, and the mapping of the wire's cudaError_t numbers
 * onto CUresult (exports_gen.c's table). */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

static atomic_int inited;
static atomic_int runtime_present;

void drv_note_runtime(void) { atomic_store(&runtime_present, 1); }

CUresult pv_drv_unsupported(const char *name, atomic_int *once)
{
    pv_census_unsupported("libvcuda", name);
    pv_log_once(once, "%s is not supported by libvcuda (returns CUDA_ERROR_NOT_SUPPORTED)", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* NVIDIA's runtime turns a driver result into its cudaError_t by number (docs/driver.md): when it is our caller,
 * the daemon's cudaError_t goes through unchanged, so runtime programs see the runtime's own codes (e.g.
 * cudaErrorInvalidConfiguration, which has no CUresult). Driver-API programs get the closest CUresult. */
CUresult drv_result(cudaError_t err)
{
    if (err == PV_SUCCESS || atomic_load(&runtime_present))
        return err;
    for (int i = 0; i < pv_nerrmap; i++)
        if (pv_errmap[i].runtime == err)
            return pv_errmap[i].driver;
    return CUDA_ERROR_UNKNOWN;
}

/* cuInit ran, or another library of the process (libvcudart, which calls no cuInit of ours) initialised the core:
 * a program that starts with the runtime API may use the driver API without cuInit, as with NVIDIA's libraries. */
CUresult drv_ready(void)
{
    return atomic_load(&inited) || pv_initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

PV_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return drv_result(err);
    atomic_store(&inited, 1);
    return CUDA_SUCCESS;
}

/* PYVGPU_FAKE_DRIVER_VERSION=N (for tests: docs/driver.md): answer as the driver of CUDA version N would, whose
 * cuGetProcAddress knows no ABI introduced after N (the versions of exports_gen.c's table) and whose entry points of
 * those ABIs, called anyway, refuse (drv_hidden). Unset, empty or not below PV_CUDA_VERSION: this library's own. */
int drv_version(void)
{
    static atomic_int cached;
    int v = atomic_load(&cached);
    if (v)
        return v;
    const char *env = getenv("PYVGPU_FAKE_DRIVER_VERSION");
    char *end = NULL;
    long n = env && *env ? strtol(env, &end, 10) : 0;
    v = PV_CUDA_VERSION;
    if (env && *env && (*end || n < 2000 || n > PV_CUDA_VERSION))
        pv_log("PYVGPU_FAKE_DRIVER_VERSION=%s ignored (a CUDA version 2000..%d)", env, PV_CUDA_VERSION);
    else if (n)
        v = (int)n;
    atomic_store(&cached, v);
    return v;
}

CUresult drv_hidden(const char *symbol)
{
    int v = drv_version();
    if (v == PV_CUDA_VERSION)
        return CUDA_SUCCESS;
    for (int i = 0; i < pv_nprocs; i++)
        if (strcmp(pv_procs[i].symbol, symbol) == 0 && pv_procs[i].version > v) {
            static atomic_int once;
            pv_log_once(&once, "%s called although PYVGPU_FAKE_DRIVER_VERSION=%d hides it (CUDA %d.%d): "
                        "CUDA_ERROR_NOT_SUPPORTED", symbol, v, pv_procs[i].version / 1000,
                        pv_procs[i].version % 1000 / 10);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    return CUDA_SUCCESS;
}

PV_API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = drv_version();
    return CUDA_SUCCESS;
}

static const struct pv_curesult *curesult(CUresult e)
{
    for (int i = 0; i < pv_ncuresults; i++)
        if (pv_curesults[i].code == e)
            return &pv_curesults[i];
    return NULL;
}

/* cuGetErrorName / cuGetErrorString: an unknown code gives NULL and CUDA_ERROR_INVALID_VALUE. */
static CUresult describe(CUresult e, const char **out, int name)
{
    const struct pv_curesult *r = out ? curesult(e) : NULL;
    if (out)
        *out = r ? (name ? r->name : r->text) : NULL;
    return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuGetErrorName(CUresult e, const char **out) { return describe(e, out, 1); }
PV_API CUresult cuGetErrorString(CUresult e, const char **out) { return describe(e, out, 0); }

/* Profiler control has no meaning for a remote device: accepted, as with no profiler attached. */
PV_API CUresult cuProfilerStart(void) { return drv_ready(); }
PV_API CUresult cuProfilerStop(void) { return drv_ready(); }
