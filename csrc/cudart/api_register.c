/* The nvcc 13 registration ABI: every translation unit registers its fatbin, kernels and variables at start-up.
 * They become core modules (loaded on a device at first use there), keyed by their host-side addresses. */
#include "cudart.h"

PV_API void **__cudaRegisterFatBinary(void *fatCubin) { return (void **)pv_fatbin_register(fatCubin); }

PV_API void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

PV_API void __cudaUnregisterFatBinary(void **handle)
{
    /* Runs at process exit; the daemon frees the session's modules when the connection closes. Tables stay
     * valid so late calls from other threads or destructors never touch freed memory. */
    (void)handle;
}

PV_API void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                   int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize)
{
    (void)deviceFun; (void)thread_limit; (void)tid; (void)bid; (void)bDim; (void)gDim; (void)wSize;
    (void)pv_fatbin_add_func((struct pv_fatbin *)handle, hostFun, deviceName);
}

PV_API void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                              size_t size, int constant, int global)
{
    (void)deviceAddress; (void)ext; (void)constant; (void)global;
    (void)pv_fatbin_add_var((struct pv_fatbin *)handle, hostVar, deviceName, size);
}
