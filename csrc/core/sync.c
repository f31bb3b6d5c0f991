/* The synchronizing calls of both APIs (stream, event, device): a capturing stream's capture is invalidated (CUDA
 * forbids synchronizing it), the work is waited for, and the device's pools give back the blocks they keep above
 * their release thresholds, as CUDA's pools do at synchronizations. */
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_streams.h"
#include "pv_graph.h"

cudaError_t pv_sync_stream(cudaStream_t s)
{
    cudaError_t err = pv_capture_forbid(s);
    if (err == PV_SUCCESS)
        err = pv_stream_sync(s);
    struct pv_device *d;
    uint64_t remote;
    if (err == PV_SUCCESS && pv_stream_target(s, &d, &remote) == PV_SUCCESS)
        pv_pools_synced(d->index);
    return err;
}

cudaError_t pv_sync_event(cudaEvent_t e)
{
    cudaError_t err = pv_event_sync(e);
    if (err == PV_SUCCESS)
        pv_pools_synced(e->dev);
    return err;
}

cudaError_t pv_sync_device(struct pv_device *d)
{
    cudaError_t err = pv_capture_forbid_all();
    if (err == PV_SUCCESS)
        err = pv_call_DEVICE_SYNC(d);
    if (err == PV_SUCCESS)
        pv_pools_synced(d->index);
    return err;
}
