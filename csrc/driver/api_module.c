/* Modules, libraries, kernels and functions, on the core's module registry (the same one libvcudart's fatbin
 * registration fills). A module belongs to the context current at its load and is loaded on that context's device
 * at once (MODULE_LOAD, so load errors surface here, as in CUDA); it is unloaded with its context. A library is only
 * recorded, and loaded on a device when one of its kernels is first used there: NVIDIA's runtime loads every fatbin
 * with cuLibraryLoadData, possibly before any context exists. A CUkernel is the registry's kernel, usable on any
 * device; a CUfunction is that kernel bound to one device (its module's, or the context's of cuKernelGetFunction),
 * and used on another device it is CUDA_ERROR_INVALID_HANDLE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define MAX_MODULE_FILE ((long)1 << 30)
enum { JIT_OPTION_LIBRARY_BINARY_IS_PRESERVED = 1 };   /* CU_LIBRARY_BINARY_IS_PRESERVED */
enum { CU_MODULE_EAGER_LOADING = 1 };

/* Every live module and library, for the end of the context that loaded it. */
static struct pv_dmod *dmods;
static pthread_mutex_t dmods_mu = PTHREAD_MUTEX_INITIALIZER;

static int dmod_valid(const struct pv_dmod *m)
{
    return m && pv_handle_valid(m) && m->magic == PV_DMOD_MAGIC;
}

/* A module of context ctx on device dev, or a library (ctx NULL, dev -1). */
static CUresult dmod_new(struct pv_fatbin *fb, struct pv_ctx *ctx, int dev, struct pv_dmod **out)
{
    struct pv_dmod *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = PV_DMOD_MAGIC;
    m->fb = fb;
    m->library = dev < 0;
    m->ctx = ctx;
    m->dev = dev;
    pthread_mutex_lock(&dmods_mu);
    m->next = dmods;
    dmods = m;
    pthread_mutex_unlock(&dmods_mu);
    pv_handle_add(m);
    *out = m;
    return CUDA_SUCCESS;
}

static int dmod_forget(struct pv_dmod *m)       /* out of the list; 0 when it was there */
{
    pthread_mutex_lock(&dmods_mu);
    struct pv_dmod **pp = &dmods;
    while (*pp && *pp != m)
        pp = &(*pp)->next;
    int found = *pp != NULL;
    if (found)
        *pp = m->next;
    pthread_mutex_unlock(&dmods_mu);
    return found ? 0 : -1;
}

/* A file's bytes, NUL-terminated (PTX is text), owned by the caller (also the linker's, api_link.c). */
CUresult drv_read_file(const char *path, void **out)
{
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= MAX_MODULE_FILE && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        fclose(f);
        *out = buf;
        return CUDA_SUCCESS;
    }
    fclose(f);
    free(buf);
    return n > MAX_MODULE_FILE ? CUDA_ERROR_INVALID_IMAGE : CUDA_ERROR_FILE_NOT_FOUND;
}

/* ------------------------------------------------------------------------------------------ modules */
static CUresult module_load(CUmodule *out, const void *image, int copy)
{
    struct pv_device *d;
    CUresult r = out && image ? drv_cur_device(&d) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_fatbin *fb = pv_fatbin_from_image(image, copy);
    if (!fb)
        return CUDA_ERROR_INVALID_IMAGE;
    r = drv_result(pv_module_load_now(fb, d));
    if (r == CUDA_SUCCESS)
        r = dmod_new(fb, drv_ctx_top(), d->index, out);
    if (r != CUDA_SUCCESS)
        pv_fatbin_unload(fb);
    return r;
}

PV_API CUresult cuModuleLoadData(CUmodule *out, const void *image) { return module_load(out, image, 1); }
PV_API CUresult cuModuleLoadFatBinary(CUmodule *out, const void *image) { return module_load(out, image, 1); }

/* JIT options steer a compiler the daemon's backend owns: accepted and left alone. */
PV_API CUresult cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned n, void *options, void **values)
{
    (void)n, (void)options, (void)values;
    return module_load(out, image, 1);
}

PV_API CUresult cuModuleLoad(CUmodule *out, const char *path)
{
    void *buf;
    CUresult r = out ? drv_read_file(path, &buf) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    r = module_load(out, buf, 1);
    free(buf);
    return r;
}

static CUresult dmod_unload(struct pv_dmod *m)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dmod_valid(m) || pv_handle_remove(m) != 0 || dmod_forget(m) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    pv_fatbin_unload(m->fb);
    m->magic = 0;
    free(m);
    return CUDA_SUCCESS;
}

void drv_modules_release(struct pv_ctx *c)
{
    for (;;) {
        pthread_mutex_lock(&dmods_mu);
        struct pv_dmod *m = dmods;
        while (m && (m->library || m->ctx != c))
            m = m->next;
        pthread_mutex_unlock(&dmods_mu);
        if (!m || dmod_unload(m) != CUDA_SUCCESS)
            return;
    }
}

PV_API CUresult cuModuleUnload(CUmodule m) { return dmod_unload(m); }

PV_API CUresult cuModuleGetLoadingMode(int *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_EAGER_LOADING;   /* recording a library costs nothing: it is shipped at first use anyway */
    return CUDA_SUCCESS;
}

/* m on its device: a module's own; a library is loaded on the current context's device. */
static CUresult loaded_here(struct pv_dmod *m, struct pv_device **d)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dmod_valid(m))
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->library && (r = drv_cur_device(d)) != CUDA_SUCCESS)
        return r;
    if (!m->library && !(*d = pv_device(m->dev)))
        return CUDA_ERROR_INVALID_HANDLE;
    return drv_result(pv_module_ensure(m->fb, *d));
}

PV_API CUresult cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name)
{
    struct pv_device *d;
    CUresult r = out && name ? loaded_here(m, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_func *f = pv_fatbin_func(m->fb, name);
    if (!f || !f->dev[d->index])
        return CUDA_ERROR_NOT_FOUND;
    *out = drv_func_handle(f, d->index);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult get_global(CUdeviceptr *dptr, size_t *bytes, struct pv_dmod *m, const char *name)
{
    struct pv_device *d;
    CUresult r = name ? loaded_here(m, &d) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_var *v = pv_fatbin_var(m->fb, name);
    if (!v || !v->have[d->index])
        return CUDA_ERROR_NOT_FOUND;
    if (dptr)
        *dptr = v->addr[d->index];
    if (bytes)
        *bytes = v->size;
    return CUDA_SUCCESS;
}

PV_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name)
{
    return get_global(dptr, bytes, m, name);
}

/* Kernels of m present on the current context's device: their count, and up to n of them into out. */
static CUresult kernels_here(struct pv_dmod *m, unsigned *count, void **out, unsigned n, int out_funcs)
{
    struct pv_device *d;
    CUresult r = loaded_here(m, &d);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned k = 0;
    for (int i = 0;; i++) {
        struct pv_func *f = pv_fatbin_func_at(m->fb, i);
        if (!f)
            break;
        if (!f->dev[d->index])
            continue;
        if (out && k < n && !(out[k] = out_funcs ? drv_func_handle(f, d->index) : f))
            return CUDA_ERROR_OUT_OF_MEMORY;
        k++;
    }
    *count = k;
    return CUDA_SUCCESS;
}

PV_API CUresult cuModuleGetFunctionCount(unsigned *count, CUmodule m)
{
    DRV_HIDDEN_GUARD("cuModuleGetFunctionCount");
    return count ? kernels_here(m, count, NULL, 0, 1) : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuModuleEnumerateFunctions(CUfunction *out, unsigned n, CUmodule m)
{
    DRV_HIDDEN_GUARD("cuModuleEnumerateFunctions");
    unsigned count;
    return out ? kernels_here(m, &count, (void **)out, n, 1) : CUDA_ERROR_INVALID_VALUE;
}

/* Export table 6e163fbe, slot 7 (export_tables_libs.c): cb(ud, f) for each function of module m, in the module's
 * order, each f the handle cuModuleGetFunction gives; the count. A library, or what is not a module, has none:
 * NVIDIA's driver answers 0 for a library (GPU run 3, docs/driver.md). */
int drv_module_each_function(CUmodule m, void (*cb)(void *ud, CUfunction f), void *ud)
{
    unsigned count = 0, got;
    if (!cb || !dmod_valid(m) || m->library || kernels_here(m, &count, NULL, 0, 1) != CUDA_SUCCESS || !count)
        return 0;
    CUfunction *fs = calloc(count, sizeof *fs);
    if (!fs)
        return 0;
    if (kernels_here(m, &got, (void **)fs, count, 1) != CUDA_SUCCESS)
        got = 0;
    got = got < count ? got : count;
    for (unsigned i = 0; i < got; i++)
        cb(ud, fs[i]);
    free(fs);
    return (int)got;
}

/* ------------------------------------------------------------------------------------------ libraries */
static int preserved(const int *options, void **values, unsigned n)
{
    for (unsigned i = 0; options && values && i < n; i++)
        if (options[i] == JIT_OPTION_LIBRARY_BINARY_IS_PRESERVED && values[i])
            return 1;
    return 0;
}

PV_API CUresult cuLibraryLoadData(CUlibrary *out, const void *code, void *jit_options, void **jit_values,
                                  unsigned njit, int *options, void **values, unsigned n)
{
    (void)jit_options, (void)jit_values, (void)njit;
    CUresult r = out && code ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    /* NVIDIA's runtime promises its fatbins stay (BINARY_IS_PRESERVED): those are not copied. */
    struct pv_fatbin *fb = pv_fatbin_from_image(code, !preserved(options, values, n));
    if (!fb)
        return CUDA_ERROR_INVALID_IMAGE;
    return dmod_new(fb, NULL, -1, out);
}

PV_API CUresult cuLibraryLoadFromFile(CUlibrary *out, const char *path, void *jit_options, void **jit_values,
                                      unsigned njit, int *options, void **values, unsigned n)
{
    void *buf;
    CUresult r = out ? drv_read_file(path, &buf) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    r = cuLibraryLoadData(out, buf, jit_options, jit_values, njit, NULL, NULL, 0);
    free(buf);
    return r;
}

PV_API CUresult cuLibraryUnload(CUlibrary lib) { return dmod_unload(lib); }

/* A kernel by name. With a current context the library is loaded there and the name checked; without one (the
 * runtime may ask before any context exists) the name is recorded and checked when the kernel is first used. */
PV_API CUresult cuLibraryGetKernel(CUkernel *out, CUlibrary lib, const char *name)
{
    CUresult r = out && name ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (!dmod_valid(lib))
        return CUDA_ERROR_INVALID_HANDLE;
    struct pv_func *f = pv_fatbin_func(lib->fb, name);
    struct pv_device *d;
    if (!f && drv_cur_device(&d) == CUDA_SUCCESS) {
        r = drv_result(pv_module_ensure(lib->fb, d));
        if (r != CUDA_SUCCESS)
            return r;
        if (!(f = pv_fatbin_func(lib->fb, name)))
            return CUDA_ERROR_NOT_FOUND;
    }
    if (!f && !(f = pv_fatbin_add_func(lib->fb, NULL, name)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = f;
    return CUDA_SUCCESS;
}

PV_API CUresult cuLibraryGetModule(CUmodule *out, CUlibrary lib)
{
    CUresult r = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (!dmod_valid(lib))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = lib;   /* one object: its module in the current context is the library loaded there */
    return CUDA_SUCCESS;
}

PV_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name)
{
    return get_global(dptr, bytes, lib, name);
}

PV_API CUresult cuLibraryGetKernelCount(unsigned *count, CUlibrary lib)
{
    return count ? kernels_here(lib, count, NULL, 0, 0) : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuLibraryEnumerateKernels(CUkernel *out, unsigned n, CUlibrary lib)
{
    unsigned count;
    return out ? kernels_here(lib, &count, (void **)out, n, 0) : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------------------------ kernels, functions */
static struct pv_func_handle *dfunc_of(const void *h) { return pv_func_handle_of(h); }

/* The core's handle (the one libvcudart's cudaGetFuncBySymbol gives too, so either library accepts the other's). */
CUfunction drv_func_handle(struct pv_func *f, int dev) { return (CUfunction)pv_func_handle(f, dev); }

struct pv_func *drv_func_of(const void *h, const struct pv_device *d)
{
    if (pv_func_valid(h))
        return (struct pv_func *)h;            /* a CUkernel: any device */
    struct pv_func_handle *df = dfunc_of(h);
    return df && (!d || df->dev == d->index) ? df->f : NULL;
}

CUresult drv_func_error(const void *h)
{
    return dfunc_of(h) ? CUDA_ERROR_INVALID_HANDLE    /* a function of another device's context */
                       : drv_result(PV_cudaErrorInvalidDeviceFunction);
}

/* The kernel info of handle h (a CUfunction: its device; a CUkernel: device dev, or -1 for the current context's),
 * loading its module there. */
static CUresult kinfo(const void *h, int dev, struct pv_device **d, struct pv_kinfo **ki)
{
    struct pv_func_handle *df = dfunc_of(h);
    CUresult r = df || dev >= 0 ? drv_ready() : drv_cur_device(d);
    if (r != CUDA_SUCCESS)
        return r;
    if (df)
        dev = df->dev;
    if (dev >= 0 && !(*d = pv_device(dev)))
        return CUDA_ERROR_INVALID_DEVICE;
    struct pv_func *f = df ? df->f : pv_func_valid(h) ? (struct pv_func *)h : NULL;
    if (!f)
        return drv_result(PV_cudaErrorInvalidDeviceFunction);
    return drv_result(pv_kinfo_get(f, *d, ki));
}

/* The kernel in the current context: a function of that context's device. */
PV_API CUresult cuKernelGetFunction(CUfunction *out, CUkernel k)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    CUresult r = out ? kinfo(k, -1, &d, &ki) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !(*out = drv_func_handle(drv_func_of(k, NULL), d->index)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    return r;
}

enum { FA_MAX_THREADS = 0, FA_SHARED = 1, FA_CONST = 2, FA_LOCAL = 3, FA_REGS = 4, FA_PTX = 5, FA_BINARY = 6,
       FA_CACHE_MODE_CA = 7, FA_MAX_DYN_SHARED = 8, FA_CARVEOUT = 9, FA_LAST = 15 };

static CUresult get_attr(int *v, int attr, const void *f, int dev)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    CUresult r = v ? kinfo(f, dev, &d, &ki) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    switch (attr) {
    case FA_MAX_THREADS: *v = (int)(ki->max_threads > 0 ? ki->max_threads : d->max_tpb); break;
    case FA_SHARED: *v = (int)ki->shared; break;
    case FA_CONST: *v = (int)ki->constant; break;
    case FA_LOCAL: *v = (int)ki->local; break;
    case FA_REGS: *v = (int)ki->regs; break;
    case FA_PTX: *v = (int)ki->ptx; break;
    case FA_BINARY: *v = (int)ki->binary; break;
    case FA_MAX_DYN_SHARED: *v = (int)ki->max_dyn_shared; break;
    case FA_CARVEOUT: *v = (int)ki->carveout; break;
    default:
        if (pv_func_cluster_attr(attr)) {
            *v = (int)ki->cluster[attr - PV_FUNC_ATTR_CLUSTER_FIRST];    /* as set; 0 until then */
            break;
        }
        if (attr < FA_CACHE_MODE_CA || attr > FA_LAST)
            return CUDA_ERROR_INVALID_VALUE;
        *v = 0;   /* cache mode, and the cluster attributes of a device without clusters */
    }
    return CUDA_SUCCESS;
}

PV_API CUresult cuFuncGetAttribute(int *v, int attr, CUfunction f) { return get_attr(v, attr, f, -1); }
PV_API CUresult cuKernelGetAttribute(int *v, int attr, CUkernel k, CUdevice dev)
{
    return get_attr(v, attr, k, dev);
}

/* dev < 0: cuFuncSetAttribute (the CUfunction's context only); else cuKernelSetAttribute, device-wide: kept for the
 * device's later contexts (after a reset), as the driver keeps a CUkernel's attributes. */
static CUresult set_attr(const void *f, int dev, int attr, int value)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    CUresult r = kinfo(f, dev, &d, &ki);
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_func_handle *df = dfunc_of(f);
    struct pv_func *wide = dev < 0 ? NULL : df ? df->f : (struct pv_func *)f;
    return drv_result(pv_func_set_attr(d, ki, attr, value, wide));
}

PV_API CUresult cuFuncSetAttribute(CUfunction f, int attr, int value) { return set_attr(f, -1, attr, value); }
PV_API CUresult cuKernelSetAttribute(int attr, int value, CUkernel k, CUdevice dev)
{
    return set_attr(k, dev, attr, value);
}

/* Cache preferences are hints: accepted, as on GPUs where they have no effect. */
PV_API CUresult cuFuncSetCacheConfig(CUfunction f, int config)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_func_of(f, NULL))
        return drv_result(PV_cudaErrorInvalidDeviceFunction);
    return config < 0 || config > 3 ? CUDA_ERROR_INVALID_VALUE : r;
}

PV_API CUresult cuKernelSetCacheConfig(CUkernel k, int config, CUdevice dev)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return pv_device(dev) ? cuFuncSetCacheConfig(k, config) : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult param_info(const void *f, size_t index, size_t *offset, size_t *size)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    CUresult r = offset || size ? kinfo(f, -1, &d, &ki) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (index >= (size_t)ki->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (offset)
        *offset = ki->params[index][0];
    if (size)
        *size = ki->params[index][1];
    return CUDA_SUCCESS;
}

PV_API CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size)
{
    DRV_HIDDEN_GUARD("cuFuncGetParamInfo");
    return param_info(f, i, off, size);
}
PV_API CUresult cuKernelGetParamInfo(CUkernel k, size_t i, size_t *off, size_t *size)
{
    DRV_HIDDEN_GUARD("cuKernelGetParamInfo");
    return param_info(k, i, off, size);
}

static CUresult param_count(const void *f, size_t *count)
{
    struct pv_device *d;
    struct pv_kinfo *ki;
    CUresult r = count ? kinfo(f, -1, &d, &ki) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *count = (size_t)ki->nparams;
    return r;
}

PV_API CUresult cuFuncGetParamCount(CUfunction f, size_t *count)
{
    DRV_HIDDEN_GUARD("cuFuncGetParamCount");
    return param_count(f, count);
}
PV_API CUresult cuKernelGetParamCount(CUkernel k, size_t *count)
{
    DRV_HIDDEN_GUARD("cuKernelGetParamCount");
    return param_count(k, count);
}

/* Lazy loading: a function is on its device once its module is (the module of a CUfunction is loaded when the
 * function is looked up; a CUkernel's library where it is first used). cuFuncLoad loads it there now. */
enum { CU_FUNCTION_LOADING_STATE_UNLOADED = 0, CU_FUNCTION_LOADING_STATE_LOADED = 1 };

PV_API CUresult cuFuncLoad(CUfunction f)
{
    DRV_HIDDEN_GUARD("cuFuncLoad");
    struct pv_device *d;
    struct pv_kinfo *ki;
    return f ? kinfo(f, -1, &d, &ki) : CUDA_ERROR_INVALID_HANDLE;
}

PV_API CUresult cuFuncIsLoaded(int *state, CUfunction f)
{
    DRV_HIDDEN_GUARD("cuFuncIsLoaded");
    CUresult r = state ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_func_handle *df = dfunc_of(f);
    struct pv_device *d = NULL;
    if (!df && pv_func_valid((const struct pv_func *)f) && (r = drv_cur_device(&d)) != CUDA_SUCCESS)
        return r;
    struct pv_func *fn = df ? df->f : pv_func_valid((const struct pv_func *)f) ? (struct pv_func *)f : NULL;
    if (!fn)
        return CUDA_ERROR_INVALID_HANDLE;
    int dev = df ? df->dev : d->index;
    *state = fn->dev[dev] ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
    return CUDA_SUCCESS;
}

static CUresult get_name(const char **out, const void *h)
{
    CUresult r = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    struct pv_func *f = drv_func_of(h, NULL);
    if (!f)
        return drv_result(PV_cudaErrorInvalidDeviceFunction);
    *out = f->name;
    return CUDA_SUCCESS;
}

PV_API CUresult cuFuncGetName(const char **out, CUfunction f)
{
    DRV_HIDDEN_GUARD("cuFuncGetName");
    return get_name(out, f);
}
PV_API CUresult cuKernelGetName(const char **out, CUkernel k) { return get_name(out, k); }

/* A __managed__ variable of a library: its storage on the current context's device (device 0 before any context:
 * NVIDIA's runtime asks when it loads its fatbins), mirrored on the host at the same address (core managed.c). The
 * first device that binds a variable keeps it. */
PV_API CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name)
{
    CUresult r = name ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (!dmod_valid(lib))
        return CUDA_ERROR_INVALID_HANDLE;
    struct pv_ctx *c = drv_ctx_top();
    struct pv_device *d = pv_device(c ? c->dev : pv_tls_device());
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((r = drv_result(pv_module_ensure(lib->fb, d))) != CUDA_SUCCESS)
        return r;
    struct pv_var *v = pv_fatbin_var(lib->fb, name);
    void *host;
    if (!v)
        return CUDA_ERROR_NOT_FOUND;
    if ((r = drv_result(pv_managed_var_bind(v, d, &host))) != CUDA_SUCCESS)
        return r;
    if (dptr)
        *dptr = (CUdeviceptr)(uintptr_t)host;
    if (bytes)
        *bytes = v->size;
    return CUDA_SUCCESS;
}
