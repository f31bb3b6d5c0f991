/* Stream-ordered allocation and memory pools on the core's pools.c (client-side pools over plain device
 * allocations): cuMemAllocAsync / cuMemAllocFromPoolAsync / cuMemFreeAsync, default / current / created pools,
 * attributes, trimming, access. Shareable pool handles (export/import) are not offered. */
#include "driver.h"

#define PTR(p) ((void *)(uintptr_t)(p))

static CUresult alloc_async(CUdeviceptr *out, size_t size, CUmemoryPool pool, CUstream s)
{
    struct pv_device *d;
    void *p = NULL;
    CUresult r = out && size ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = drv_result(pv_pool_malloc(&p, size, pool, s))) == CUDA_SUCCESS)
        *out = (CUdeviceptr)(uintptr_t)p;
    return r;
}

PV_API CUresult cuMemAllocAsync(CUdeviceptr *out, size_t size, CUstream s) { return alloc_async(out, size, NULL, s); }
PV_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *out, size_t size, CUstream s)
{
    return alloc_async(out, size, NULL, s);
}

PV_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *out, size_t size, CUmemoryPool pool, CUstream s)
{
    return pool ? alloc_async(out, size, pool, s) : CUDA_ERROR_INVALID_VALUE;
}
PV_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *out, size_t size, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(out, size, pool, s);
}

PV_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    DRV_RETURN(pv_pool_free_async(PTR(p), s));
}
PV_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

/* ------------------------------------------------------------------------------------------ pools */
static CUresult get_pool(CUmemoryPool *out, CUdevice dev, int current)
{
    DRV_RETURN(pv_pool_get(out, dev, current));
}

PV_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev) { return get_pool(out, dev, 0); }
PV_API CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice dev) { return get_pool(out, dev, 1); }

PV_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    DRV_RETURN(pv_pool_set_current(dev, pool));
}

/* The location-based forms (CUDA 12.5+): device locations of pinned pools. */
static CUresult location(CUmemLocation *loc, int type, int *dev)
{
    DRV_RETURN(pv_pool_location(loc, type, dev));
}

PV_API CUresult cuMemGetDefaultMemPool(CUmemoryPool *out, CUmemLocation *loc, int type)
{
    int dev;
    CUresult r = location(loc, type, &dev);
    return r == CUDA_SUCCESS ? get_pool(out, dev, 0) : r;
}

PV_API CUresult cuMemGetMemPool(CUmemoryPool *out, CUmemLocation *loc, int type)
{
    int dev;
    CUresult r = location(loc, type, &dev);
    return r == CUDA_SUCCESS ? get_pool(out, dev, 1) : r;
}

PV_API CUresult cuMemSetMemPool(CUmemLocation *loc, int type, CUmemoryPool pool)
{
    int dev;
    CUresult r = location(loc, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceSetMemPool(dev, pool) : r;
}

PV_API CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    DRV_RETURN(pv_pool_create(out, props));
}

PV_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    DRV_RETURN(pv_pool_destroy(pool));
}

PV_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    DRV_RETURN(pv_pool_trim(pool, keep));
}

PV_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value)
{
    DRV_RETURN(pv_pool_attr(pool, attr, value, 1));
}

PV_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value)
{
    DRV_RETURN(pv_pool_attr(pool, attr, value, 0));
}

PV_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *descs, size_t n)
{
    DRV_RETURN(pv_pool_set_access(pool, descs, n));
}

PV_API CUresult cuMemPoolGetAccess(int *flags, CUmemoryPool pool, CUmemLocation *loc)
{
    DRV_RETURN(pv_pool_get_access(flags, pool, loc));
}
