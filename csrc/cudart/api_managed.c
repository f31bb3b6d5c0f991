/* Managed memory (cudaMallocManaged, __managed__ variables, prefetch and advice, range attributes) and mapped host
 * memory (cudaHostRegister, cudaHostGetDevicePointer), on the core's managed.c and coherence.c. */
#include <stdlib.h>

#include "cudart.h"

/* 0 bytes: NULL and success, as NVIDIA's runtime answers without asking the driver (tools/driver_probe). */
PV_API cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned flags)
{
    if (ptr && size == 0 && (flags == 1 || flags == 2)) {
        *ptr = NULL;
        return PV_SUCCESS;
    }
    return pv_ret(pv_managed_alloc(ptr, size, flags));
}

PV_API cudaError_t cudaHostGetDevicePointer(void **pdev, void *host, unsigned flags)
{
    return pv_ret(flags ? PV_cudaErrorInvalidValue : pv_host_device_pointer(host, pdev));
}

PV_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned flags)
{
    return pv_ret(pv_host_register(ptr, size, flags));
}

PV_API cudaError_t cudaHostUnregister(void *ptr) { return pv_ret(pv_host_unregister(ptr)); }

/* ------------------------------------------------------------------------------------------ __managed__ */
struct managed_var { struct pv_var *var; void **host_ptr; struct managed_var *next; };
static struct managed_var *mvars;
static pthread_mutex_t mvars_mu = PTHREAD_MUTEX_INITIALIZER;

PV_API void __cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress, char *deviceAddress,
                                     const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)deviceAddress; (void)ext; (void)constant; (void)global;
    struct pv_var *v = pv_fatbin_add_var((struct pv_fatbin *)handle, hostVarPtrAddress, deviceName, size);
    struct managed_var *m = v ? calloc(1, sizeof *m) : NULL;
    if (!m)
        return;
    m->var = v;
    m->host_ptr = hostVarPtrAddress;
    pthread_mutex_lock(&mvars_mu);
    m->next = mvars;
    mvars = m;
    pthread_mutex_unlock(&mvars_mu);
}

/* Called by nvcc's code before the host first touches a __managed__ variable of this module: each variable's host
 * pointer points at its storage on the current device, mirrored on this side (core pv_managed_var_bind). */
PV_API char __cudaInitModule(void **handle)
{
    struct pv_fatbin *fb = (struct pv_fatbin *)handle;
    struct pv_device *d;
    if (pv_cur(&d) != PV_SUCCESS || pv_module_ensure(fb, d) != PV_SUCCESS)
        return 0;
    char ok = 1;
    pthread_mutex_lock(&mvars_mu);
    for (struct managed_var *m = mvars; m; m = m->next) {
        if (m->var->fb != fb)
            continue;
        if (pv_managed_var_bind(m->var, d, m->host_ptr) != PV_SUCCESS)
            ok = 0;
    }
    pthread_mutex_unlock(&mvars_mu);
    return ok;
}

/* ------------------------------------------------------------------------------------------ prefetch, advice */
PV_API cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags,
                                        cudaStream_t s)
{
    return pv_ret(pv_mem_prefetch(p, n, loc, flags, s));
}

PV_API cudaError_t cudaMemPrefetchAsync_ptsz(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags,
                                             cudaStream_t s)
{
    return cudaMemPrefetchAsync(p, n, loc, flags, s);
}

PV_API cudaError_t cudaMemAdvise(const void *p, size_t n, int advice, struct cudaMemLocation loc)
{
    return pv_ret(pv_mem_advise(p, n, advice, loc));
}

PV_API cudaError_t cudaMemRangeGetAttribute(void *data, size_t size, int attr, const void *p, size_t n)
{
    return pv_ret(pv_mem_range_attr(data, size, attr, p, n));
}

PV_API cudaError_t cudaMemRangeGetAttributes(void **data, size_t *sizes, int *attrs, size_t nattrs, const void *p,
                                             size_t n)
{
    if (!data || !sizes || !attrs || !nattrs)
        return pv_ret(PV_cudaErrorInvalidValue);
    for (size_t i = 0; i < nattrs; i++) {
        cudaError_t err = pv_mem_range_attr(data[i], sizes[i], attrs[i], p, n);
        if (err != PV_SUCCESS)
            return pv_ret(err);
    }
    return PV_SUCCESS;
}

PV_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t s, void *p, size_t n, unsigned flags)
{
    return pv_ret(pv_stream_attach_mem(s, p, n, flags));
}

PV_API cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t s, void *p, size_t n, unsigned flags)
{
    return cudaStreamAttachMemAsync(s, p, n, flags);
}
