/* Peer access: kernels of one GPU using another GPU's memory, possible between GPUs of one daemon whose snapshot
 * says so (emulated GPUs of a daemon: all of them; cuda: cuDeviceCanAccessPeer). Copies between any two GPUs work
 * whatever this says (copy_features.c). The switch is per (device, peer), as a context's peer access is. */
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_features.h"

static atomic_uchar peer_on[PV_MAX_DEVICES][PV_MAX_DEVICES];   /* [device][peer] */

int pv_peer_possible(const struct pv_device *d, const struct pv_device *p)
{
    return d != p && d->conn == p->conn && p->remote < 64 && (d->peers >> p->remote) & 1;
}

int pv_peer_enabled(const struct pv_device *d, const struct pv_device *peer)
{
    return atomic_load(&peer_on[d->index][peer->index]);
}

cudaError_t pv_peer_switch(struct pv_device *d, struct pv_device *p, unsigned flags, int on)
{
    if (flags)
        return PV_cudaErrorInvalidValue;
    if (!pv_peer_possible(d, p))
        return PV_cudaErrorPeerAccessUnsupported;
    if (atomic_load(&peer_on[d->index][p->index]) == on)
        return on ? PV_cudaErrorPeerAccessAlreadyEnabled : PV_cudaErrorPeerAccessNotEnabled;
    uint64_t ft[2];
    cudaError_t err = pv_call_MEM_GET_INFO(p, ft);       /* the peer's context must exist on the daemon */
    if (err == PV_SUCCESS)
        err = on ? pv_call_PEER_ENABLE(d, (uint32_t)p->remote) : pv_call_PEER_DISABLE(d, (uint32_t)p->remote);
    if (err == PV_SUCCESS)
        atomic_store(&peer_on[d->index][p->index], (unsigned char)on);
    return err;
}

/* A new context has no peer access. */
void pv_peers_forget_device(int dev)
{
    for (int i = 0; i < PV_MAX_DEVICES; i++)
        atomic_store(&peer_on[dev][i], 0);
}
