/* Launches with attributes (cudaLaunchKernelExC, cuLaunchKernelEx) and cooperative launches, for both APIs, on the
 * plain launch path (launch.c) and stream capture. Each attribute is, by what it does on a GPU:
 * - honoured where it changes results: cooperative (the cooperative path below), programmatic and launch-completion
 *   events (recorded on the stream after the kernel: both may fire later than the GPU would, as CUDA allows), a
 *   device-updatable kernel node (graphs only: refused outside a capture, as CUDA does; device-side updates are not
 *   offered);
 * - accepted where it is a hint the daemon's in-order execution already satisfies or may ignore: priority,
 *   programmatic stream serialization (the kernel waits for the previous one, which is always allowed), memory-sync
 *   domain and its map, access policy window, shared-memory carveout, cluster scheduling policy, NVLink-centric
 *   scheduling; thread-block clusters of one block (the same as no cluster);
 * - refused by name otherwise: clusters of more blocks (cudaErrorNotSupported: pyvgpu's GPUs report no cluster
 *   launch), attributes valid only for streams, unknown ids and values out of CUDA's ranges (cudaErrorInvalidValue). */
#include <stdatomic.h>

#include "pv_state.h"
#include "pv_hostmap.h"
#include "pv_registry.h"
#include "pv_launch.h"
#include "pv_streams.h"
#include "pv_features.h"
#include "pv_graph.h"

/* The events a launch records when done, one slot per attribute that names one (a later value replaces). */
enum { EV_PROGRAMMATIC, EV_COMPLETION, EV_SLOTS };

/* Logs once per attribute id why a launch with it was refused. */
static cudaError_t refuse(int id, const char *name, cudaError_t err, const char *why)
{
    static atomic_uchar logged[32];
    if (id < 0 || id >= 32 || atomic_exchange(&logged[id], 1) == 0)
        pv_log("launch attribute %s (%d) refused (%s): %s", name, id, pv_err_name(err), why);
    return err;
}

static int cluster_of_one(unsigned x, unsigned y, unsigned z) { return x == 1 && y == 1 && z == 1; }

/* An event a launch records when it is done: valid, without timing and without the external flag, as CUDA asks. */
static cudaError_t launch_event(const struct pv_launch_attr *a, const char *name, cudaEvent_t e, int flags,
                                cudaEvent_t *slot)
{
    if (!pv_event_ok(e))
        return refuse(a->id, name, PV_cudaErrorInvalidResourceHandle, "not an event");
    if (flags != 0 || !(e->flags & PV_EVENT_DISABLE_TIMING))
        return refuse(a->id, name, PV_cudaErrorInvalidValue, "the event must disable timing; no record flags");
    *slot = e;
    return PV_SUCCESS;
}

/* Checks one attribute; sets *cooperative and collects the events to record. */
static cudaError_t check_attr(const struct pv_launch_attr *a, int capturing, int *cooperative,
                              cudaEvent_t events[EV_SLOTS])
{
    switch (a->id) {
    case PV_cudaLaunchAttributeIgnore:
        return PV_SUCCESS;
    case PV_cudaLaunchAttributeAccessPolicyWindow: {
        float r = a->val.accessPolicyWindow.hitRatio;
        int hit = a->val.accessPolicyWindow.hitProp, miss = a->val.accessPolicyWindow.missProp;
        if (!(r >= 0.0f && r <= 1.0f) || hit < 0 || hit > PV_cudaAccessPropertyPersisting || miss < 0 ||
            miss > PV_cudaAccessPropertyStreaming)
            return refuse(a->id, "AccessPolicyWindow", PV_cudaErrorInvalidValue, "hit ratio or properties out of range");
        return PV_SUCCESS;                              /* an L2 residency hint */
    }
    case PV_cudaLaunchAttributeCooperative:
        *cooperative = a->val.cooperative != 0;
        return PV_SUCCESS;
    case PV_cudaLaunchAttributeSynchronizationPolicy:
        return refuse(a->id, "SynchronizationPolicy", PV_cudaErrorInvalidValue, "valid for streams only");
    case PV_cudaLaunchAttributeClusterDimension:
    case PV_cudaLaunchAttributePreferredClusterDimension: {
        const char *name = a->id == PV_cudaLaunchAttributeClusterDimension ? "ClusterDimension"
                                                                           : "PreferredClusterDimension";
        unsigned x = a->val.clusterDim.x, y = a->val.clusterDim.y, z = a->val.clusterDim.z;
        if (!x || !y || !z)
            return refuse(a->id, name, PV_cudaErrorInvalidValue, "a cluster dimension of 0");
        if (!cluster_of_one(x, y, z))
            return refuse(a->id, name, PV_cudaErrorNotSupported,
                          "thread-block clusters of more than one block need cluster launch (sm_90)");
        return PV_SUCCESS;
    }
    case PV_cudaLaunchAttributeClusterSchedulingPolicyPreference: {
        int p = a->val.clusterSchedulingPolicyPreference;
        if (p < PV_cudaClusterSchedulingPolicyDefault || p > PV_cudaClusterSchedulingPolicyLoadBalancing)
            return refuse(a->id, "ClusterSchedulingPolicyPreference", PV_cudaErrorInvalidValue, "unknown policy");
        return PV_SUCCESS;
    }
    case PV_cudaLaunchAttributeProgrammaticStreamSerialization:
    case PV_cudaLaunchAttributePriority:
    case PV_cudaLaunchAttributeMemSyncDomainMap:
    case PV_cudaLaunchAttributePreferredSharedMemoryCarveout:
        return PV_SUCCESS;                              /* hints */
    case PV_cudaLaunchAttributeMemSyncDomain:
        if (a->val.memSyncDomain != PV_cudaLaunchMemSyncDomainDefault &&
            a->val.memSyncDomain != PV_cudaLaunchMemSyncDomainRemote)
            return refuse(a->id, "MemSyncDomain", PV_cudaErrorInvalidValue, "unknown domain");
        return PV_SUCCESS;
    case PV_cudaLaunchAttributeNvlinkUtilCentricScheduling:
        if (a->val.nvlinkUtilCentricScheduling > 1)
            return refuse(a->id, "NvlinkUtilCentricScheduling", PV_cudaErrorInvalidValue, "neither 0 nor 1");
        return PV_SUCCESS;
    case PV_cudaLaunchAttributeProgrammaticEvent:
        return launch_event(a, "ProgrammaticEvent", a->val.programmaticEvent.event, a->val.programmaticEvent.flags,
                            &events[EV_PROGRAMMATIC]);
    case PV_cudaLaunchAttributeLaunchCompletionEvent:
        return launch_event(a, "LaunchCompletionEvent", a->val.launchCompletionEvent.event,
                            a->val.launchCompletionEvent.flags, &events[EV_COMPLETION]);
    case PV_cudaLaunchAttributeDeviceUpdatableKernelNode:
        if (!capturing)
            return refuse(a->id, "DeviceUpdatableKernelNode", PV_cudaErrorInvalidValue, "graphs only");
        if (a->val.deviceUpdatableKernelNode.deviceUpdatable)
            return refuse(a->id, "DeviceUpdatableKernelNode", PV_cudaErrorNotSupported,
                          "device-side graph updates are not offered");
        return PV_SUCCESS;
    default:
        return refuse(a->id, "unknown", PV_cudaErrorInvalidValue, "not a launch attribute of CUDA 13.0");
    }
}

static cudaError_t launch_on(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem,
                             cudaStream_t s, void **args, void **extra, int cooperative)
{
    uint64_t stream = 0;
    struct pv_device *sd = NULL;
    cudaError_t err = pv_stream_resolve(s, d, &stream, &sd);
    if (err != PV_SUCCESS)
        return err;
    if (sd != d)
        return PV_cudaErrorInvalidResourceHandle;
    if (args && extra)
        return PV_cudaErrorInvalidValue;
    if (pv_capturing(s))
        return pv_capture_launch(s, f, d, grid, block, shmem, args, extra, cooperative);
    const void *packed = NULL;
    size_t len = 0;
    if (extra && (err = pv_launch_extra(extra, &packed, &len)) != PV_SUCCESS)
        return err;
    return pv_launch(f, d, grid, block, shmem, stream, args, packed, len, cooperative);
}

cudaError_t pv_launch_on(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                         void **args, void **extra)
{
    return launch_on(f, d, grid, block, shmem, s, args, extra, 0);
}

/* Every block of the grid resident at once (LAUNCH_COOPERATIVE): the daemon runs it so that grid-wide
 * synchronization works; more blocks than that is cudaErrorCooperativeLaunchTooLarge, here, before sending. */
cudaError_t pv_launch_cooperative(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem,
                                  cudaStream_t s, void **args)
{
    return launch_on(f, d, grid, block, shmem, s, args, NULL, 1);
}

cudaError_t pv_launch_ex(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                         const struct pv_launch_attr *attrs, unsigned nattrs, void **args, void **extra)
{
    if (nattrs && !attrs)
        return PV_cudaErrorInvalidValue;
    int capturing = pv_capturing(s), cooperative = 0;
    cudaEvent_t events[EV_SLOTS] = { NULL, NULL };
    for (unsigned i = 0; i < nattrs; i++) {
        cudaError_t err = check_attr(&attrs[i], capturing, &cooperative, events);
        if (err != PV_SUCCESS)
            return err;
    }
    cudaError_t err = launch_on(f, d, grid, block, shmem, s, args, extra, cooperative);
    for (int i = 0; i < EV_SLOTS && err == PV_SUCCESS; i++)
        if (events[i] && (i == 0 || events[i] != events[0]) && !pv_capture_event_record(events[i], s, 0, &err))
            err = pv_event_record(events[i], s);
    return err;
}
