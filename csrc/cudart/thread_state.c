/* The runtime's own per-thread state: the last error (cudaGetLastError) and the `<<<>>>` configuration stack. */
#include "cudart.h"

#define PV_CONFIG_DEPTH 16

static _Thread_local cudaError_t tls_last_error;
static _Thread_local struct pv_call_config tls_configs[PV_CONFIG_DEPTH];
static _Thread_local int tls_config_depth;

cudaError_t pv_ret(cudaError_t err)
{
    if (err != PV_SUCCESS)
        tls_last_error = err;
    return err;
}

cudaError_t pv_last_error(int reset)
{
    cudaError_t e = tls_last_error;
    if (reset)
        tls_last_error = PV_SUCCESS;
    return e;
}

cudaError_t pv_unsupported(const char *name, atomic_int *once)
{
    pv_census_unsupported("libvcudart", name);
    pv_log_once(once, "%s is not supported by libvcudart (returns cudaErrorNotSupported)", name);
    return pv_ret(PV_cudaErrorNotSupported);
}

int pv_push_config(const struct pv_call_config *cfg)
{
    if (tls_config_depth >= PV_CONFIG_DEPTH)
        return -1;
    tls_configs[tls_config_depth++] = *cfg;
    return 0;
}

int pv_pop_config(struct pv_call_config *cfg)
{
    if (tls_config_depth <= 0)
        return -1;
    *cfg = tls_configs[--tls_config_depth];
    return 0;
}
