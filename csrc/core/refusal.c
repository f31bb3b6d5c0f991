/* Refused modules at synchronization. A kernel whose module the daemon refused (no PTX the emulated GPU can run,
 * an instruction it does not implement) fails where it is used: the launch, or, for NVIDIA's runtime that loads
 * fatbins lazily, the kernel lookups of the library's first use. Programs and libraries do ignore that error (CuPy
 * calls CUB without looking at its status) and then read an output no kernel wrote; and NVIDIA's runtime keeps the
 * failure to itself, so later launches of those kernels fail without reaching libvcuda at all. So a refusal met at
 * a use is kept on the device, sticky like a kernel fault on a GPU: every later synchronizing call there (a
 * blocking copy, a stream/event/device synchronize) answers with it instead of success, until the device is
 * reset. An explicit load (cuModuleLoadData & co.) returns its refusal to its caller and latches nothing. */
#include "pv_core.h"

void pv_refusal_latch(struct pv_device *d, cudaError_t err)
{
    int none = 0;
    if (atomic_compare_exchange_strong(&d->refused, &none, (int)err))   /* the first one is reported */
        pv_log("GPU%d (%s:%d): a kernel of a refused module was used (%s); every synchronization reports it from now on "
               "(until a device reset)",
               d->index, d->conn->host, d->conn->port, pv_err_name(err));
}

cudaError_t pv_sync_result(struct pv_device *d, cudaError_t err)
{
    int refused = atomic_load_explicit(&d->refused, memory_order_relaxed);
    return err == PV_SUCCESS && refused ? (cudaError_t)refused : err;
}
