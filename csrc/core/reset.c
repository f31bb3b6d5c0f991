/* A device reset (cudaDeviceReset, cuDevicePrimaryCtxReset, the last primary-context release): the daemon drops the
 * session's context of the device, and the client forgets everything it kept of it. */
#include "pv_features.h"

cudaError_t pv_device_reset(struct pv_device *d)
{
    cudaError_t err = pv_call_DEVICE_RESET(d);
    if (err != PV_SUCCESS)
        return err;
    pv_alloc_forget_device(d->index);
    pv_modules_forget_device(d->index);
    pv_pools_forget_device(d->index);
    pv_coherence_forget_device(d->index);
    pv_peers_forget_device(d->index);
    d->flags = 0;
    return PV_SUCCESS;
}
