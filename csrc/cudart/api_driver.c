/* The runtime calls that hand out or take the driver's objects: cudaGetDriverEntryPoint(ByVersion) (the driver's
 * functions by name, what PyTorch asks for at start-up) and the library API (cudaLibrary*, cudaKernelSetAttribute-
 * ForDevice), which are the driver's cuLibrary* under the runtime's names. Both go to libvcuda, pyvgpu's driver,
 * opened beside this library (never a libcuda.so.1 found elsewhere): it shares this process's client core, so a
 * cudaKernel_t is the core's kernel, which cudaLaunchKernel and every other runtime call take as they are.
 * CUresult and cudaError_t have the same numbers for every result these calls return (docs/driver.md). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cudart.h"

#define RUNTIME_VERSION 13000
enum { ENABLE_DEFAULT = 0, ENABLE_LEGACY_STREAM = 1, ENABLE_PER_THREAD_DEFAULT_STREAM = 2 };

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_proc_fn)(const char *, void **, int, unsigned long long, int *);

static void *driver;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void open_driver(void)
{
    Dl_info self;
    char path[PATH_MAX];
    if (!dladdr((void *)open_driver, &self) || !self.dli_fname)
        return;
    const char *slash = strrchr(self.dli_fname, '/');
    int dir = slash ? (int)(slash - self.dli_fname) : 0;
    snprintf(path, sizeof path, "%.*s%slibvcuda.so.1", dir, self.dli_fname, slash ? "/" : "");
    driver = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!driver)
        pv_log("cannot open pyvgpu's driver %s beside libvcudart: %s", path, dlerror());
}

/* libvcuda's function `name`, the driver initialised; NULL when libvcuda cannot be had. */
static void *drv(const char *name)
{
    pthread_once(&driver_once, open_driver);
    if (!driver)
        return NULL;
    cu_init_fn init = (cu_init_fn)dlsym(driver, "cuInit");
    if (!init || init(0) != 0)
        return NULL;
    return dlsym(driver, name);
}

static cudaError_t entry_point(const char *symbol, void **fn, int version, unsigned long long flags, int *status)
{
    if (!symbol || !fn || flags > ENABLE_PER_THREAD_DEFAULT_STREAM)
        return PV_cudaErrorInvalidValue;
    cu_proc_fn proc = (cu_proc_fn)drv("cuGetProcAddress_v2");
    if (!proc)
        return PV_cudaErrorInsufficientDriver;
    int st = 0;
    cudaError_t err = (cudaError_t)proc(symbol, fn, version, flags, &st);
    if (status)
        *status = st;
    return err;
}

PV_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags, int *status)
{
    return pv_ret(entry_point(symbol, fn, RUNTIME_VERSION, flags, status));
}

PV_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                                    unsigned long long flags, int *status)
{
    return pv_ret(entry_point(symbol, fn, (int)version, flags, status));
}

/* The per-thread-default-stream builds: "default" means per-thread there. */
PV_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags, int *status)
{
    return pv_ret(entry_point(symbol, fn, RUNTIME_VERSION,
                              flags == ENABLE_DEFAULT ? ENABLE_PER_THREAD_DEFAULT_STREAM : flags, status));
}

PV_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn, unsigned version,
                                                         unsigned long long flags, int *status)
{
    return pv_ret(entry_point(symbol, fn, (int)version,
                              flags == ENABLE_DEFAULT ? ENABLE_PER_THREAD_DEFAULT_STREAM : flags, status));
}

/* ---------------------------------------------------------------------------------------- the library API */
/* cudaLibrary_t is the driver's CUlibrary, the options are the driver's with the same numbers. */
typedef void *cudaLibrary_t;

#define DRV_CALL(name, proto, ...)                                                                           \
    do {                                                                                                     \
        typedef int(*fn_t) proto;                                                                            \
        fn_t f = (fn_t)drv(name);                                                                            \
        return pv_ret(f ? (cudaError_t)f(__VA_ARGS__) : PV_cudaErrorInsufficientDriver);                     \
    } while (0)

PV_API cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, int *jit_options, void **jit_values,
                                       unsigned njit, int *options, void **values, unsigned n)
{
    DRV_CALL("cuLibraryLoadData", (cudaLibrary_t *, const void *, int *, void **, unsigned, int *, void **, unsigned),
             lib, code, jit_options, jit_values, njit, options, values, n);
}

PV_API cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *lib, const char *path, int *jit_options,
                                           void **jit_values, unsigned njit, int *options, void **values, unsigned n)
{
    DRV_CALL("cuLibraryLoadFromFile",
             (cudaLibrary_t *, const char *, int *, void **, unsigned, int *, void **, unsigned), lib, path,
             jit_options, jit_values, njit, options, values, n);
}

PV_API cudaError_t cudaLibraryUnload(cudaLibrary_t lib) { DRV_CALL("cuLibraryUnload", (cudaLibrary_t), lib); }

PV_API cudaError_t cudaLibraryGetKernel(cudaKernel_t *kernel, cudaLibrary_t lib, const char *name)
{
    DRV_CALL("cuLibraryGetKernel", (cudaKernel_t *, cudaLibrary_t, const char *), kernel, lib, name);
}

PV_API cudaError_t cudaLibraryGetGlobal(void **dptr, size_t *bytes, cudaLibrary_t lib, const char *name)
{
    DRV_CALL("cuLibraryGetGlobal", (void **, size_t *, cudaLibrary_t, const char *), dptr, bytes, lib, name);
}

PV_API cudaError_t cudaLibraryGetManaged(void **dptr, size_t *bytes, cudaLibrary_t lib, const char *name)
{
    DRV_CALL("cuLibraryGetManaged", (void **, size_t *, cudaLibrary_t, const char *), dptr, bytes, lib, name);
}

PV_API cudaError_t cudaLibraryGetUnifiedFunction(void **fptr, cudaLibrary_t lib, const char *symbol)
{
    DRV_CALL("cuLibraryGetUnifiedFunction", (void **, cudaLibrary_t, const char *), fptr, lib, symbol);
}

PV_API cudaError_t cudaLibraryGetKernelCount(unsigned *count, cudaLibrary_t lib)
{
    DRV_CALL("cuLibraryGetKernelCount", (unsigned *, cudaLibrary_t), count, lib);
}

PV_API cudaError_t cudaLibraryEnumerateKernels(cudaKernel_t *kernels, unsigned n, cudaLibrary_t lib)
{
    DRV_CALL("cuLibraryEnumerateKernels", (cudaKernel_t *, unsigned, cudaLibrary_t), kernels, n, lib);
}

/* cudaFuncAttribute's settable attributes (8 on) have CUfunction_attribute's numbers. */
PV_API cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, int attr, int value, int device)
{
    DRV_CALL("cuKernelSetAttribute", (int, int, cudaKernel_t, int), attr, value, kernel, device);
}
