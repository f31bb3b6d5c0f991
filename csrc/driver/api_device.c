/* Devices: everything is answered from the device snapshots the daemons sent at connection time (NVIDIA's runtime
 * reads 112 attributes one by one at start-up: a round trip each would cost seconds on a slow link). */
#include <stdio.h>
#include <strings.h>

#include "driver.h"

static CUresult device_of(CUdevice dev, struct pv_device **out)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    *out = pv_device(dev);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

PV_API CUresult cuDeviceGetCount(int *count)
{
    CUresult r = count ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *count = pv_device_count();
    return r;
}

PV_API CUresult cuDeviceGet(CUdevice *out, int ordinal)
{
    struct pv_device *d;
    CUresult r = out ? device_of(ordinal, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *out = ordinal;
    return r;
}

PV_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    struct pv_device *d;
    CUresult r = name && len > 0 ? device_of(dev, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        snprintf(name, (size_t)len, "%s", d->name);
    return r;
}

PV_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    struct pv_device *d;
    CUresult r = uuid ? device_of(dev, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        memcpy(uuid->bytes, d->uuid, 16);
    return r;
}

PV_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

PV_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    struct pv_device *d;
    CUresult r = bytes ? device_of(dev, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *bytes = (size_t)d->total_mem;
    return r;
}

/* Driver attributes no cudaDeviceAttr has the number of: virtual memory management and the shareable handles,
 * compression and GPUDirect RDMA it could offer (none of those here). */
enum { CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102 };
static int vmm_attr(int attr)
{
    return attr == 103 || attr == 104 || attr == 105 || attr == 107 || attr == 110;
}

PV_API CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev)
{
    struct pv_device *d;
    CUresult r = value ? device_of(dev, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED || vmm_attr(attr))) {
        *value = attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED && d->vmm_granularity != 0;
        return CUDA_SUCCESS;
    }
    /* quiet about attributes the snapshot lacks: NVIDIA's runtime reads all of them at start-up */
    return r == CUDA_SUCCESS ? drv_result(pv_device_attribute(d, attr, value, 0)) : r;
}

PV_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    struct pv_device *d;
    CUresult r = major && minor ? device_of(dev, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        *major = d->major;
        *minor = d->minor;
    }
    return r;
}

PV_API CUresult cuDeviceGetPCIBusId(char *out, int len, CUdevice dev)
{
    struct pv_device *d;
    CUresult r = out && len > 0 ? device_of(dev, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        snprintf(out, (size_t)len, "%s", d->pci_id);
    return r;
}

PV_API CUresult cuDeviceGetByPCIBusId(CUdevice *out, const char *pci)
{
    CUresult r = out && pci ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    for (int i = 0; i < pv_device_count(); i++)
        if (strcasecmp(pv_device(i)->pci_id, pci) == 0) {
            *out = i;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* Peer access (core peers.c): kernels of one GPU may use another's memory between GPUs of one daemon whose
 * snapshot says so; copies between any two GPUs work whatever this says. */
PV_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    struct pv_device *d, *p;
    CUresult r = can ? device_of(dev, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = device_of(peer, &p);
    if (r == CUDA_SUCCESS)
        *can = pv_peer_possible(d, p);
    return r;
}

enum { P2P_PERFORMANCE_RANK = 1, P2P_ACCESS_SUPPORTED = 2, P2P_NATIVE_ATOMIC_SUPPORTED = 3,
       P2P_CUDA_ARRAY_ACCESS_SUPPORTED = 4, P2P_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED = 5 };

PV_API CUresult cuDeviceGetP2PAttribute(int *value, int attr, CUdevice a, CUdevice b)
{
    struct pv_device *d, *p;
    CUresult r = value ? device_of(a, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = device_of(b, &p);
    if (r != CUDA_SUCCESS)
        return r;
    if (attr < P2P_PERFORMANCE_RANK || attr > P2P_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED || d == p)
        return CUDA_ERROR_INVALID_VALUE;
    /* a rank of 0 and no native peer atomics are promised; access as cuDeviceCanAccessPeer answers */
    *value = attr == P2P_PERFORMANCE_RANK ? 0 : attr == P2P_ACCESS_SUPPORTED ? pv_peer_possible(d, p) : 0;
    return CUDA_SUCCESS;
}
