/* Device management: count, current device (per thread), properties and attributes (from the HELLO snapshot,
 * answered locally), synchronize, reset, flags, peer queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cudart.h"


PV_API cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    *count = err == PV_SUCCESS ? pv_device_count() : 0;
    return pv_ret(err);
}

PV_API cudaError_t cudaSetDevice(int device)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    if (!pv_device(device))
        return pv_ret(PV_cudaErrorInvalidDevice);
    pv_tls_set_device(device);                  /* the driver's current context becomes this device's primary */
    pv_tls_set_runtime_bound(1);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaInitDevice(int device, unsigned deviceFlags, unsigned flags)
{
    (void)deviceFlags; (void)flags;
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    return pv_device(device) ? PV_SUCCESS : pv_ret(PV_cudaErrorInvalidDevice);
}

PV_API cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return pv_ret(PV_cudaErrorInvalidValue);
    *device = pv_tls_device();
    return PV_SUCCESS;
}

/* The current device once a call's arguments are checked: cudaErrorInvalidValue when args_ok is 0. */
static cudaError_t checked_cur(int args_ok, struct pv_device **d)
{
    return args_ok ? pv_cur(d) : PV_cudaErrorInvalidValue;
}

/* A core call on the current device, returned in *d (pv_sync_device, pv_device_reset). */
static cudaError_t cur_call(cudaError_t (*call)(struct pv_device *), struct pv_device **d)
{
    cudaError_t err = pv_cur(d);
    if (err != PV_SUCCESS)
        return err;
    return call(*d);
}

PV_API cudaError_t cudaSetDeviceFlags(unsigned flags)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    d->flags = (int)flags;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGetDeviceFlags(unsigned *flags)
{
    struct pv_device *d;
    cudaError_t err = checked_cur(flags != NULL, &d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *flags = (unsigned)d->flags | 0x10u;   /* cudaDeviceMapHost is always reported, as cudart does */
    return PV_SUCCESS;
}

PV_API cudaError_t cudaGetDeviceProperties(void *prop, int device)
{
    if (!prop)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    struct pv_device *d = pv_device(device);
    if (!d)
        return pv_ret(PV_cudaErrorInvalidDevice);
    memset(prop, 0, PV_cudaDeviceProp_SIZE);
    char *p = prop;
    memcpy(p + PV_cudaDeviceProp_name, d->name, strlen(d->name) < 255 ? strlen(d->name) : 255);
    memcpy(p + PV_cudaDeviceProp_uuid, d->uuid, 16);
    pv_put_size(p, PV_cudaDeviceProp_totalGlobalMem, d->total_mem);
    pv_put_size(p, PV_cudaDeviceProp_sharedMemPerBlock, d->smem_per_block);
    pv_put_int(p, PV_cudaDeviceProp_regsPerBlock, d->regs_per_block);
    pv_put_int(p, PV_cudaDeviceProp_warpSize, d->warp);
    pv_put_size(p, PV_cudaDeviceProp_memPitch, 2147483647);
    pv_put_int(p, PV_cudaDeviceProp_maxThreadsPerBlock, d->max_tpb);
    for (int i = 0; i < 3; i++) {
        pv_put_int(p, PV_cudaDeviceProp_maxThreadsDim + 4 * i, d->max_block[i]);
        pv_put_int(p, PV_cudaDeviceProp_maxGridSize + 4 * i, d->max_grid[i]);
    }
    pv_put_size(p, PV_cudaDeviceProp_totalConstMem, d->const_mem);
    pv_put_int(p, PV_cudaDeviceProp_major, d->major);
    pv_put_int(p, PV_cudaDeviceProp_minor, d->minor);
    pv_put_size(p, PV_cudaDeviceProp_textureAlignment, 512);
    pv_put_size(p, PV_cudaDeviceProp_texturePitchAlignment, 32);
    pv_put_int(p, PV_cudaDeviceProp_multiProcessorCount, d->sms);
    pv_put_int(p, PV_cudaDeviceProp_concurrentKernels, 1);
    pv_put_int(p, PV_cudaDeviceProp_pciBusID, d->pci_bus);
    pv_put_int(p, PV_cudaDeviceProp_asyncEngineCount, 1);
    pv_put_int(p, PV_cudaDeviceProp_unifiedAddressing, 1);
    pv_put_int(p, PV_cudaDeviceProp_memoryBusWidth, d->bus_width);
    pv_put_int(p, PV_cudaDeviceProp_l2CacheSize, d->l2);
    pv_put_int(p, PV_cudaDeviceProp_maxThreadsPerMultiProcessor, d->max_tpm);
    pv_put_int(p, PV_cudaDeviceProp_streamPrioritiesSupported, 1);
    pv_put_size(p, PV_cudaDeviceProp_sharedMemPerMultiprocessor, d->smem_per_sm);
    pv_put_int(p, PV_cudaDeviceProp_regsPerMultiprocessor, d->regs_per_sm);
    pv_put_int(p, PV_cudaDeviceProp_maxBlocksPerMultiProcessor, d->max_blocks_per_sm);
    int v;
    /* int fields (and int arrays) that mirror a device attribute of the snapshot */
    static const struct { size_t off; int attr; } from_attrs[] = {
        { PV_cudaDeviceProp_canMapHostMemory, PV_cudaDevAttrCanMapHostMemory },
        { PV_cudaDeviceProp_managedMemory, PV_cudaDevAttrManagedMemory },
        { PV_cudaDeviceProp_concurrentManagedAccess, PV_cudaDevAttrConcurrentManagedAccess },
        { PV_cudaDeviceProp_pageableMemoryAccess, PV_cudaDevAttrPageableMemoryAccess },
        { PV_cudaDeviceProp_directManagedMemAccessFromHost, PV_cudaDevAttrDirectManagedMemAccessFromHost },
        { PV_cudaDeviceProp_hostNativeAtomicSupported, PV_cudaDevAttrHostNativeAtomicSupported },
        { PV_cudaDeviceProp_memoryPoolsSupported, PV_cudaDevAttrMemoryPoolsSupported },
        { PV_cudaDeviceProp_hostRegisterSupported, PV_cudaDevAttrHostRegisterSupported },
        { PV_cudaDeviceProp_computePreemptionSupported, PV_cudaDevAttrComputePreemptionSupported },
        { PV_cudaDeviceProp_cooperativeLaunch, PV_cudaDevAttrCooperativeLaunch },
        { PV_cudaDeviceProp_maxTexture1D, PV_cudaDevAttrMaxTexture1DWidth },
        { PV_cudaDeviceProp_maxTexture2D, PV_cudaDevAttrMaxTexture2DWidth },
        { PV_cudaDeviceProp_maxTexture2D + 4, PV_cudaDevAttrMaxTexture2DHeight },
        { PV_cudaDeviceProp_maxTexture3D, PV_cudaDevAttrMaxTexture3DWidth },
        { PV_cudaDeviceProp_maxTexture3D + 4, PV_cudaDevAttrMaxTexture3DHeight },
        { PV_cudaDeviceProp_maxTexture3D + 8, PV_cudaDevAttrMaxTexture3DDepth },
        { PV_cudaDeviceProp_maxTexture1DLayered, PV_cudaDevAttrMaxTexture1DLayeredWidth },
        { PV_cudaDeviceProp_maxTexture1DLayered + 4, PV_cudaDevAttrMaxTexture1DLayeredLayers },
        { PV_cudaDeviceProp_maxTexture2DLayered, PV_cudaDevAttrMaxTexture2DLayeredWidth },
        { PV_cudaDeviceProp_maxTexture2DLayered + 4, PV_cudaDevAttrMaxTexture2DLayeredHeight },
        { PV_cudaDeviceProp_maxTexture2DLayered + 8, PV_cudaDevAttrMaxTexture2DLayeredLayers },
        { PV_cudaDeviceProp_maxTexture2DLinear, PV_cudaDevAttrMaxTexture2DLinearWidth },
        { PV_cudaDeviceProp_maxTexture2DLinear + 4, PV_cudaDevAttrMaxTexture2DLinearHeight },
        { PV_cudaDeviceProp_maxTexture2DLinear + 8, PV_cudaDevAttrMaxTexture2DLinearPitch },
        { PV_cudaDeviceProp_maxSurface1D, PV_cudaDevAttrMaxSurface1DWidth },
        { PV_cudaDeviceProp_maxSurface2D, PV_cudaDevAttrMaxSurface2DWidth },
        { PV_cudaDeviceProp_maxSurface2D + 4, PV_cudaDevAttrMaxSurface2DHeight },
        { PV_cudaDeviceProp_maxSurface3D, PV_cudaDevAttrMaxSurface3DWidth },
        { PV_cudaDeviceProp_maxSurface3D + 4, PV_cudaDevAttrMaxSurface3DHeight },
        { PV_cudaDeviceProp_maxSurface3D + 8, PV_cudaDevAttrMaxSurface3DDepth },
    };
    for (size_t i = 0; i < sizeof from_attrs / sizeof *from_attrs; i++)
        if (pv_dev_attr(d, from_attrs[i].attr, &v) == 0)
            pv_put_int(p, from_attrs[i].off, v);
    if (pv_dev_attr(d, PV_cudaDevAttrSurfaceAlignment, &v) == 0)
        pv_put_size(p, PV_cudaDeviceProp_surfaceAlignment, (size_t)v);
    pv_put_size(p, PV_cudaDeviceProp_sharedMemPerBlockOptin,
             pv_dev_attr(d, PV_cudaDevAttrMaxSharedMemoryPerBlockOptin, &v) == 0 ? (size_t)v : d->smem_per_block);
    if (pv_dev_attr(d, PV_cudaDevAttrReservedSharedMemoryPerBlock, &v) == 0)
        pv_put_size(p, PV_cudaDeviceProp_reservedSharedMemPerBlock, (size_t)v);
    return PV_SUCCESS;
}

PV_API cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device)
{
    if (!value)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    struct pv_device *d = pv_device(device);
    if (!d)
        return pv_ret(PV_cudaErrorInvalidDevice);
    return pv_ret(pv_device_attribute(d, attr, value, 1));
}

PV_API cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaDeviceSynchronize(void)
{
    struct pv_device *d;
    return pv_ret(cur_call(pv_sync_device, &d));
}

PV_API cudaError_t cudaDeviceReset(void)
{
    struct pv_device *d;
    return pv_ret(cur_call(pv_device_reset, &d));
}

/* Peer access (core peers.c): between GPUs of one daemon whose snapshot says so. */
PV_API cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    if (!can)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    struct pv_device *d = pv_device(device), *p = pv_device(peer);
    if (!d || !p)
        return pv_ret(PV_cudaErrorInvalidDevice);
    *can = pv_peer_possible(d, p);
    return PV_SUCCESS;
}

static cudaError_t peer_switch(int peer, unsigned flags, int on)
{
    struct pv_device *d, *p;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return err;
    if (!(p = pv_device(peer)))
        return PV_cudaErrorInvalidDevice;
    return pv_peer_switch(d, p, flags, on);
}

PV_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) { return pv_ret(peer_switch(peer, flags, 1)); }
PV_API cudaError_t cudaDeviceDisablePeerAccess(int peer) { return pv_ret(peer_switch(peer, 0, 0)); }

PV_API cudaError_t cudaDeviceGetPCIBusId(char *out, int len, int device)
{
    if (!out || len <= 0)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    struct pv_device *d = pv_device(device);
    if (!d)
        return pv_ret(PV_cudaErrorInvalidDevice);
    snprintf(out, (size_t)len, "%s", d->pci_id);
    return PV_SUCCESS;
}

/* The cache configuration is a hint (cudaFuncCachePreferNone..PreferEqual), kept per device. */
PV_API cudaError_t cudaDeviceSetCacheConfig(int config)
{
    struct pv_device *d;
    cudaError_t err = checked_cur(config >= 0 && config <= 3, &d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    d->cache_config = config;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaDeviceGetCacheConfig(int *config)
{
    struct pv_device *d;
    cudaError_t err = checked_cur(config != NULL, &d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    *config = d->cache_config;
    return PV_SUCCESS;
}

/* Limits live in the daemon's context for this device (DEVICE_SET_LIMIT / DEVICE_GET_LIMIT): the backend knows
 * what its device supports, rounds or clamps as the driver does, and answers cudaErrorUnsupportedLimit (a limit the device lacks) or
 * cudaErrorInvalidValue (not a cudaLimit). */
PV_API cudaError_t cudaDeviceSetLimit(int limit, size_t value)
{
    struct pv_device *d;
    cudaError_t err = pv_cur(&d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    return pv_ret(pv_call_DEVICE_SET_LIMIT(d, limit, (int64_t)value));
}

PV_API cudaError_t cudaDeviceGetLimit(size_t *value, int limit)
{
    struct pv_device *d;
    cudaError_t err = checked_cur(value != NULL, &d);
    if (err != PV_SUCCESS)
        return pv_ret(err);
    uint64_t v = 0;
    err = pv_call_DEVICE_GET_LIMIT(d, limit, &v);
    if (err == PV_SUCCESS)
        *value = (size_t)v;
    return pv_ret(err);
}

/* The device whose compute capability is closest to prop's (the first such device). */
PV_API cudaError_t cudaChooseDevice(int *device, const void *prop)
{
    if (!device || !prop)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    int major, minor, best = 0, best_dist = 1 << 30;
    memcpy(&major, (const char *)prop + PV_cudaDeviceProp_major, sizeof major);
    memcpy(&minor, (const char *)prop + PV_cudaDeviceProp_minor, sizeof minor);
    for (int i = 0; i < pv_device_count(); i++) {
        struct pv_device *d = pv_device(i);
        int dist = abs((d->major * 10 + d->minor) - (major * 10 + minor));
        if (dist < best_dist) {
            best_dist = dist;
            best = i;
        }
    }
    *device = best;
    return PV_SUCCESS;
}

PV_API cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pci)
{
    if (!device || !pci)
        return pv_ret(PV_cudaErrorInvalidValue);
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return pv_ret(err);
    for (int i = 0; i < pv_device_count(); i++)
        if (strcasecmp(pv_device(i)->pci_id, pci) == 0) {
            *device = i;
            return PV_SUCCESS;
        }
    return pv_ret(PV_cudaErrorInvalidDevice);
}
