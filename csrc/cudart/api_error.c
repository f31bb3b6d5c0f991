/* Errors and versions, answered locally: last error per thread, names and strings from the generated table. */
#include <stdio.h>

#include "cudart.h"

PV_API cudaError_t cudaGetLastError(void) { return pv_last_error(1); }
PV_API cudaError_t cudaPeekAtLastError(void) { return pv_last_error(0); }

PV_API const char *cudaGetErrorName(cudaError_t e)
{
    return pv_err_text(e) ? pv_err_name(e) : "unrecognized error code";
}

PV_API const char *cudaGetErrorString(cudaError_t e)
{
    const char *text = pv_err_text(e);
    return text ? text : "unrecognized error code";
}

PV_API cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return pv_ret(PV_cudaErrorInvalidValue);
    *v = 13000;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return pv_ret(PV_cudaErrorInvalidValue);
    *v = 13000;
    return PV_SUCCESS;
}

/* cudaCreateChannelDesc is a pure constructor: answered locally. */
struct pv_channel_desc { int x, y, z, w; int f; };
PV_API struct pv_channel_desc cudaCreateChannelDesc(int x, int y, int z, int w, int f)
{
    struct pv_channel_desc d = { x, y, z, w, f };
    return d;
}

/* Profiler control: no profiler can attach to a remote GPU through this library; as with cudart when no profiler
 * is attached, the calls succeed (logged once so the user knows nothing is being profiled). */
static atomic_int profiler_once;
static cudaError_t profiler(const char *name)
{
    if (atomic_exchange(&profiler_once, 1) == 0)
        pv_log("%s: no profiler is attached to pyvgpu's remote GPUs; profiler control has no effect", name);
    return PV_SUCCESS;
}
PV_API cudaError_t cudaProfilerStart(void) { return profiler(__func__); }
PV_API cudaError_t cudaProfilerStop(void) { return profiler(__func__); }
