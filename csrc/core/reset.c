/* A device reset (cudaDeviceReset, cuDevicePrimaryCtxReset, the last primary-context release): the daemon drops the
 * session's context of the device, and the client forgets everything it kept of it. The end of one context of a
 * device (cuCtxDestroy, a primary reset while created contexts live on): what that context made goes, one free or
 * destroy at a time, and the daemon's context stays for the others. */
#include <stdlib.h>

#include "pv_state.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_coherence.h"
#include "pv_registry.h"
#include "pv_streams.h"
#include "pv_graph.h"

cudaError_t pv_device_reset(struct pv_device *d)
{
    cudaError_t err = pv_call_DEVICE_RESET(d);
    if (err != PV_SUCCESS)
        return err;
    pv_alloc_forget_device(d->index);
    pv_modules_forget_device(d->index);
    pv_pools_forget_device(d->index);
    pv_gmem_forget_device(d->index);
    pv_coherence_forget_device(d->index);
    pv_peers_forget_device(d->index);
    atomic_store(&d->refused, 0);   /* a new context: its modules are loaded anew */
    d->flags = 0;
    atomic_fetch_add(&d->reset_gen, 1);
    return PV_SUCCESS;
}

void pv_owner_release(const void *owner, int dev)
{
    uint64_t *ptrs = NULL;
    /* pinned host memory carries no device: a created context's goes with it, a primary's stays */
    size_t n = pv_alloc_owned(owner, dev, owner != NULL, &ptrs);
    for (size_t i = 0; i < n; i++) {
        struct pv_ptr_info pi;
        void *p = (void *)(uintptr_t)ptrs[i];
        pv_ptr_classify(p, &pi);
        cudaError_t err = pi.type == PV_PTR_HOST ? pv_mem_free_host(p) : pv_mem_free(p);
        if (err != PV_SUCCESS && err != PV_ERR_UNAVAILABLE)
            pv_log("GPU%d: freeing %#llx at the end of its context failed: %s", dev, (unsigned long long)ptrs[i],
                   pv_err_name(err));
    }
    free(ptrs);
    pv_streams_release(owner, dev);
}
