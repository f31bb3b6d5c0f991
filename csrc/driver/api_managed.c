/* Managed memory on the core's managed.c and coherence.c: cuMemAllocManaged (host and device see one pointer and
 * the same bytes), prefetch and advice (both ABIs: a device ordinal, or a CUmemLocation), range attributes, stream
 * attachment. Mapped host memory is api_memory.c's; __managed__ variables are api_module.c's (cuLibraryGetManaged). */
#include "driver.h"

#define PTR(p) ((void *)(uintptr_t)(p))
enum { CU_DEVICE_CPU = -1 };

PV_API CUresult cuMemAllocManaged(CUdeviceptr *out, size_t size, unsigned flags)
{
    struct pv_device *d;
    void *p;
    CUresult r = out ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (r = drv_result(pv_managed_alloc(&p, size, flags))) == CUDA_SUCCESS)
        *out = (CUdeviceptr)(uintptr_t)p;
    return r;
}

/* The legacy ABIs name a device ordinal, CU_DEVICE_CPU for the host. */
static CUmemLocation location_of(CUdevice dev)
{
    return dev == CU_DEVICE_CPU ? (CUmemLocation){ PV_cudaMemLocationTypeHost, 0 }
                                : (CUmemLocation){ PV_cudaMemLocationTypeDevice, dev };
}

static CUresult prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    DRV_RETURN(pv_mem_prefetch(PTR(p), n, loc, flags, s));
}

PV_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    return prefetch(p, n, loc, flags, s);
}
PV_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    return prefetch(p, n, loc, flags, s);
}
PV_API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream s)
{
    return prefetch(p, n, location_of(dev), 0, s);
}
PV_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dev, CUstream s)
{
    return prefetch(p, n, location_of(dev), 0, s);
}

PV_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc)
{
    DRV_RETURN(pv_mem_advise(PTR(p), n, advice, loc));
}

PV_API CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice dev)
{
    return cuMemAdvise_v2(p, n, advice, location_of(dev));
}

PV_API CUresult cuMemRangeGetAttribute(void *data, size_t size, int attr, CUdeviceptr p, size_t n)
{
    DRV_RETURN(pv_mem_range_attr(data, size, attr, PTR(p), n));
}

PV_API CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, int *attrs, size_t nattrs, CUdeviceptr p,
                                        size_t n)
{
    CUresult r = data && sizes && attrs && nattrs ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < nattrs; i++)
        r = drv_result(pv_mem_range_attr(data[i], sizes[i], attrs[i], PTR(p), n));
    return r;
}

PV_API CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned flags)
{
    DRV_RETURN(pv_stream_attach_mem(s, PTR(p), n, flags));
}

PV_API CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned flags)
{
    return cuStreamAttachMemAsync(s, p, n, flags);
}
