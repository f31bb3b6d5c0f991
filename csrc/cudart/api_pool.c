/* Stream-ordered memory pools: cudaMallocAsync/cudaFreeAsync and the cudaMemPool* calls on the core's pools.c. */
#include "cudart.h"

PV_API cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t s)
{
    return pv_ret(pv_pool_malloc(ptr, size, NULL, s));
}

PV_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
    return pv_ret(pool ? pv_pool_malloc(ptr, size, pool, s) : PV_cudaErrorInvalidValue);
}

PV_API cudaError_t cudaFreeAsync(void *ptr, cudaStream_t s) { return pv_ret(pv_pool_free_async(ptr, s)); }

PV_API cudaError_t cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s) { return cudaMallocAsync(p, n, s); }
PV_API cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return cudaFreeAsync(p, s); }
PV_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
    return cudaMallocFromPoolAsync(ptr, size, pool, s);
}

PV_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    return pv_ret(pv_pool_get(pool, device, 0));
}

PV_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int device) { return pv_ret(pv_pool_get(pool, device, 1)); }

PV_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool)
{
    return pv_ret(pv_pool_set_current(device, pool));
}

PV_API cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *pool, struct cudaMemLocation *loc, int type)
{
    int dev;
    cudaError_t err = pv_pool_location(loc, type, &dev);
    return err != PV_SUCCESS ? pv_ret(err) : cudaDeviceGetDefaultMemPool(pool, dev);
}

PV_API cudaError_t cudaMemGetMemPool(cudaMemPool_t *pool, struct cudaMemLocation *loc, int type)
{
    int dev;
    cudaError_t err = pv_pool_location(loc, type, &dev);
    return err != PV_SUCCESS ? pv_ret(err) : cudaDeviceGetMemPool(pool, dev);
}

PV_API cudaError_t cudaMemSetMemPool(struct cudaMemLocation *loc, int type, cudaMemPool_t pool)
{
    int dev;
    cudaError_t err = pv_pool_location(loc, type, &dev);
    return err != PV_SUCCESS ? pv_ret(err) : cudaDeviceSetMemPool(dev, pool);
}

PV_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props)
{
    return pv_ret(pv_pool_create(pool, props));
}

PV_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { return pv_ret(pv_pool_destroy(pool)); }
PV_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { return pv_ret(pv_pool_trim(pool, keep)); }

PV_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, int attr, void *value)
{
    return pv_ret(pv_pool_attr(pool, attr, value, 1));
}

PV_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, int attr, void *value)
{
    return pv_ret(pv_pool_attr(pool, attr, value, 0));
}

PV_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const struct cudaMemAccessDesc *descs, size_t n)
{
    return pv_ret(pv_pool_set_access(pool, descs, n));
}

PV_API cudaError_t cudaMemPoolGetAccess(int *flags, cudaMemPool_t pool, struct cudaMemLocation *loc)
{
    return pv_ret(pv_pool_get_access(flags, pool, loc));
}
