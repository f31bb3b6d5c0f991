/* Logging stand-in libcuda.so.1: a fake device in host memory (no kernel execution), just enough for NVIDIA's
 * runtime to initialise, register its fatbins and reach cuLaunchKernel. Every cuGetProcAddress request,
 * every cuGetExportTable UUID and every call into a slot of a handed-out table is logged (stderr, or the file
 * named by PROBE_LOG). Not part of the package: a research tool, see docs/driver.md. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "probe.h"

/* ------------------------------------------------------------------ logging */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_fp;

void plog(const char *fmt, ...)
{
    pthread_mutex_lock(&log_mu);
    if (!log_fp) {
        const char *p = getenv("PROBE_LOG");
        log_fp = p ? fopen(p, "a") : NULL;
        if (!log_fp)
            log_fp = stderr;
    }
    va_list ap;
    va_start(ap, fmt);
    fprintf(log_fp, "[probe] ");
    vfprintf(log_fp, fmt, ap);
    fputc('\n', log_fp);
    fflush(log_fp);
    va_end(ap);
    pthread_mutex_unlock(&log_mu);
}

/* "module+offset" for a code address, so a call site can be found in objdump output. */
const char *where(const void *addr, char *buf, size_t n)
{
    Dl_info di;
    if (addr && dladdr(addr, &di) && di.dli_fname) {
        const char *base = strrchr(di.dli_fname, '/');
        snprintf(buf, n, "%s+0x%lx", base ? base + 1 : di.dli_fname,
                 (unsigned long)((const char *)addr - (const char *)di.dli_fbase));
    } else {
        snprintf(buf, n, "%p", addr);
    }
    return buf;
}

static int default_result(void)
{
    const char *s = getenv("PROBE_DEFAULT");
    return s ? atoi(s) : CUDA_ERROR_NOT_SUPPORTED;
}

uint64_t probe_unimpl(const char *name, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f)
{
    char w[256];
    int r = default_result();
    plog("UNIMPL %s(0x%lx, 0x%lx, 0x%lx, 0x%lx, 0x%lx, 0x%lx) -> %d  from %s", name, a, b, c, d, e, f, r,
         where(__builtin_return_address(0), w, sizeof w));
    return (uint64_t)r;
}

#define LOG(...) plog(__VA_ARGS__)

/* ------------------------------------------------------------------ fake device */

enum { NDEV = 1 };
struct ctx {
    int magic;
    CUdevice dev;
    int primary;
};
static struct ctx primary_ctx = {0x43545831, 0, 1};
static int primary_refs;
static unsigned primary_flags;
static __thread CUcontext cur_ctx;

CUresult cuInit(unsigned int flags)
{
    LOG("cuInit(flags=%u)", flags);
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    LOG("cuDriverGetVersion -> 13000");
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
    *n = NDEV;
    LOG("cuDeviceGetCount -> %d", NDEV);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    LOG("cuDeviceGet(%d)", ordinal);
    if (ordinal < 0 || ordinal >= NDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    LOG("cuDeviceGetName(len=%d, dev=%d)", len, d);
    snprintf(name, (size_t)len, "probe fake GPU");
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    LOG("cuDeviceGetUuid_v2(dev=%d)", d);
    memset(u->bytes, 0x5a, 16);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice d)
{
    LOG("cuDeviceGetLuid(dev=%d)", d);
    (void)luid, (void)mask;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuDeviceTotalMem(size_t *b, CUdevice d)
{
    LOG("cuDeviceTotalMem_v2(dev=%d)", d);
    *b = (size_t)4 << 30;
    return CUDA_SUCCESS;
}

static int attr_value(CUdevice_attribute a)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1500000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 40;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 7;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 5;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 1024;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 16;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 4 << 20;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 256;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 5000000;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 1;
    default: return 0;
    }
}

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    *v = attr_value(a);
    LOG("cuDeviceGetAttribute(attr=%d, dev=%d) -> %d", (int)a, d, *v);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetProperties(CUdevprop *p, CUdevice d)
{
    LOG("cuDeviceGetProperties(dev=%d)", d);
    memset(p, 0, sizeof *p);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    primary_refs++;
    *c = (CUcontext)&primary_ctx;
    LOG("cuDevicePrimaryCtxRetain(dev=%d) -> %p refs=%d", d, (void *)*c, primary_refs);
    return CUDA_SUCCESS;
}

CUresult probe_primary_ctx(CUcontext *pctx, CUdevice d)
{
    *pctx = (CUcontext)&primary_ctx;
    LOG("  (primary context of dev %d: %p, refs=%d)", d, (void *)*pctx, primary_refs);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    primary_refs--;
    LOG("cuDevicePrimaryCtxRelease_v2(dev=%d) refs=%d", d, primary_refs);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
    *flags = primary_flags;
    *active = primary_refs > 0;
    LOG("cuDevicePrimaryCtxGetState(dev=%d) -> flags=%u active=%d", d, *flags, *active);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags)
{
    LOG("cuDevicePrimaryCtxSetFlags_v2(dev=%d, flags=%u)", d, flags);
    primary_flags = flags;
    return CUDA_SUCCESS;
}

void probe_ctx_gone(CUcontext ctx);

CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    LOG("cuDevicePrimaryCtxReset_v2(dev=%d)", d);
    probe_ctx_gone((CUcontext)&primary_ctx);
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v4(CUcontext *c, CUctxCreateParams *params, unsigned int flags, CUdevice d)
{
    struct ctx *x = calloc(1, sizeof *x);
    x->magic = 0x43545831, x->dev = d;
    *c = (CUcontext)x;
    cur_ctx = *c;
    LOG("cuCtxCreate_v4(params=%p, flags=%u, dev=%d) -> %p", (void *)params, flags, d, (void *)x);
    return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext c)
{
    LOG("cuCtxDestroy_v2(%p)", (void *)c);
    probe_ctx_gone(c);
    if (cur_ctx == c)
        cur_ctx = NULL;
    if (c != (CUcontext)&primary_ctx)
        free(c);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *c)
{
    *c = cur_ctx;
    LOG("cuCtxGetCurrent -> %p", (void *)*c);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c)
{
    LOG("cuCtxSetCurrent(%p)", (void *)c);
    cur_ctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext c)
{
    LOG("cuCtxPushCurrent_v2(%p)", (void *)c);
    cur_ctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *c)
{
    LOG("cuCtxPopCurrent_v2 -> %p", (void *)cur_ctx);
    if (c)
        *c = cur_ctx;
    cur_ctx = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *d)
{
    LOG("cuCtxGetDevice");
    *d = 0;
    return cur_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxGetDevice_v2(CUdevice *d, CUcontext c)
{
    LOG("cuCtxGetDevice_v2(ctx=%p)", (void *)c);
    if (!c)
        c = cur_ctx;
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = ((struct ctx *)c)->dev;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize_v2(CUcontext c)
{
    LOG("cuCtxSynchronize_v2(ctx=%p)", (void *)c);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext c, unsigned int *v)
{
    LOG("cuCtxGetApiVersion(%p)", (void *)c);
    *v = 13000;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetFlags(unsigned int *f)
{
    LOG("cuCtxGetFlags");
    *f = primary_flags;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    LOG("cuCtxSynchronize");
    return CUDA_SUCCESS;
}

CUresult cuCtxGetLimit(size_t *v, CUlimit l)
{
    LOG("cuCtxGetLimit(%d)", (int)l);
    *v = l == CU_LIMIT_STACK_SIZE ? 1024 : l == CU_LIMIT_PRINTF_FIFO_SIZE ? 1 << 20 : 0;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext c, unsigned long long *id)
{
    LOG("cuCtxGetId(%p)", (void *)c);
    *id = 1;
    return CUDA_SUCCESS;
}

/* memory: device pointers are host pointers */
CUresult cuMemAlloc(CUdeviceptr *p, size_t n)
{
    void *m = aligned_alloc(256, (n + 255) & ~(size_t)255);
    *p = (CUdeviceptr)m;
    LOG("cuMemAlloc_v2(%zu) -> 0x%llx", n, (unsigned long long)*p);
    return m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFree(CUdeviceptr p)
{
    LOG("cuMemFree_v2(0x%llx)", (unsigned long long)p);
    free((void *)p);
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo(size_t *f, size_t *t)
{
    LOG("cuMemGetInfo_v2");
    if (getenv("PROBE_MEMINFO_RC")) /* to learn the runtime's CUresult -> cudaError_t mapping */
        return (CUresult)atoi(getenv("PROBE_MEMINFO_RC"));
    *f = (size_t)3 << 30;
    *t = (size_t)4 << 30;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **p, size_t n)
{
    *p = aligned_alloc(256, (n + 255) & ~(size_t)255);
    LOG("cuMemAllocHost_v2(%zu) -> %p", n, *p);
    return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
    *p = aligned_alloc(256, (n + 255) & ~(size_t)255);
    LOG("cuMemHostAlloc(%zu, flags=%u) -> %p", n, flags, *p);
    return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void *p)
{
    LOG("cuMemFreeHost(%p)", p);
    free(p);
    return CUDA_SUCCESS;
}

#define COPY(fn, dst, src, n, stream)                                                                             \
    do {                                                                                                          \
        LOG("%s(dst=%p, src=%p, n=%zu, stream=%p)", fn, (void *)(dst), (const void *)(src), (size_t)(n),          \
            (void *)(stream));                                                                                    \
        memcpy((void *)(dst), (const void *)(src), n);                                                            \
        return CUDA_SUCCESS;                                                                                      \
    } while (0)

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { COPY("cuMemcpyHtoD_v2", d, s, n, 0); }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { COPY("cuMemcpyDtoH_v2", d, s, n, 0); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { COPY("cuMemcpyDtoD_v2", d, s, n, 0); }
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { COPY("cuMemcpyHtoD_v2_ptds", d, s, n, 0); }
CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { COPY("cuMemcpyDtoH_v2_ptds", d, s, n, 0); }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { COPY("cuMemcpy", d, s, n, 0); }
CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { COPY("cuMemcpy_ptds", d, s, n, 0); }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { COPY("cuMemcpyAsync", d, s, n, st); }
CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    COPY("cuMemcpyAsync_ptsz", d, s, n, st);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
    COPY("cuMemcpyHtoDAsync_v2", d, s, n, st);
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st)
{
    COPY("cuMemcpyDtoHAsync_v2", d, s, n, st);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    COPY("cuMemcpyDtoDAsync_v2", d, s, n, st);
}

CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
    LOG("cuMemsetD8_v2(0x%llx, %u, %zu)", (unsigned long long)d, v, n);
    memset((void *)d, v, n);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st)
{
    LOG("cuMemsetD8Async(0x%llx, %u, %zu, %p)", (unsigned long long)d, v, n, (void *)st);
    memset((void *)d, v, n);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n)
{
    LOG("cuMemsetD32_v2(0x%llx, %u, %zu)", (unsigned long long)d, v, n);
    for (size_t i = 0; i < n; i++)
        ((unsigned *)d)[i] = v;
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p)
{
    LOG("cuPointerGetAttribute(attr=%d, ptr=0x%llx)", (int)a, (unsigned long long)p);
    (void)data;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *a, void **data, CUdeviceptr p)
{
    LOG("cuPointerGetAttributes(n=%u, first=%d, ptr=0x%llx)", n, n ? (int)a[0] : -1, (unsigned long long)p);
    (void)data;
    return CUDA_ERROR_INVALID_VALUE;
}

/* streams and events: opaque tokens */
struct obj {
    int kind;
    unsigned flags;
};

CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
    struct obj *o = calloc(1, sizeof *o);
    o->kind = 1, o->flags = flags;
    *s = (CUstream)o;
    LOG("cuStreamCreate(flags=%u) -> %p", flags, (void *)o);
    return CUDA_SUCCESS;
}

CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int prio)
{
    LOG("cuStreamCreateWithPriority(flags=%u, prio=%d)", flags, prio);
    return cuStreamCreate(s, flags);
}

CUresult cuStreamDestroy(CUstream s)
{
    LOG("cuStreamDestroy_v2(%p)", (void *)s);
    free(s);
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s)
{
    LOG("cuStreamSynchronize(%p)", (void *)s);
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    LOG("cuStreamSynchronize_ptsz(%p)", (void *)s);
    return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream s)
{
    LOG("cuStreamQuery(%p)", (void *)s);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int *lo, int *hi)
{
    LOG("cuCtxGetStreamPriorityRange");
    if (lo)
        *lo = 0;
    if (hi)
        *hi = -5;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
    struct obj *o = calloc(1, sizeof *o);
    o->kind = 2, o->flags = flags;
    *e = (CUevent)o;
    LOG("cuEventCreate(flags=%u) -> %p", flags, (void *)o);
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent e)
{
    LOG("cuEventDestroy_v2(%p)", (void *)e);
    free(e);
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream s)
{
    LOG("cuEventRecord(%p, %p)", (void *)e, (void *)s);
    return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e)
{
    LOG("cuEventSynchronize(%p)", (void *)e);
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
    LOG("cuEventElapsedTime_v2(%p, %p)", (void *)a, (void *)b);
    *ms = 1.0f;
    return CUDA_SUCCESS;
}

/* modules: remember the image, hand out names */
struct module {
    int magic;
    const void *image;
};
struct function {
    int magic;
    char name[256];
};

static void dump_image(const char *fn, const void *image)
{
    const unsigned *w = image;
    LOG("%s image=%p words: %08x %08x %08x %08x %08x %08x", fn, image, w[0], w[1], w[2], w[3], w[4], w[5]);
}

static CUresult new_module(CUmodule *m, const void *image)
{
    struct module *mod = calloc(1, sizeof *mod);
    mod->magic = 0x4d4f4431, mod->image = image;
    *m = (CUmodule)mod;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule *m, const char *path)
{
    FILE *fp = fopen(path, "rb");
    LOG("cuModuleLoad(%s)", path);
    if (!fp)
        return CUDA_ERROR_FILE_NOT_FOUND;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = 0;
    fclose(fp);
    dump_image("  cuModuleLoad", buf);
    return new_module(m, buf);
}

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    dump_image("cuModuleLoadData", image);
    return new_module(m, image);
}

CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v)
{
    dump_image("cuModuleLoadDataEx", image);
    LOG("  numOptions=%u", n);
    (void)o, (void)v;
    return new_module(m, image);
}

CUresult cuModuleLoadFatBinary(CUmodule *m, const void *image)
{
    dump_image("cuModuleLoadFatBinary", image);
    return new_module(m, image);
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    const char *s = getenv("PROBE_LAZY");
    *mode = s && *s == '1' ? CU_MODULE_LAZY_LOADING : CU_MODULE_EAGER_LOADING;
    LOG("cuModuleGetLoadingMode -> %d", (int)*mode);
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m)
{
    LOG("cuModuleUnload(%p)", (void *)m);
    return CUDA_SUCCESS;
}

static struct function *new_function(const char *name)
{
    struct function *f = calloc(1, sizeof *f);
    f->magic = 0x46554e31;
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    *f = (CUfunction)new_function(name);
    LOG("cuModuleGetFunction(mod=%p, %s) -> %p", (void *)m, name, (void *)*f);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal(CUdeviceptr *p, size_t *n, CUmodule m, const char *name)
{
    LOG("cuModuleGetGlobal_v2(mod=%p, %s)", (void *)m, name);
    void *mem = calloc(1, 4096);
    if (p)
        *p = (CUdeviceptr)mem;
    if (n)
        *n = 4096;
    return CUDA_SUCCESS;
}

CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int nj,
                           CUlibraryOption *lo, void **lv, unsigned int nl)
{
    dump_image("cuLibraryLoadData", code);
    LOG("  jitOptions=%u libraryOptions=%u", nj, nl);
    for (unsigned i = 0; i < nl; i++)
        LOG("  libraryOption[%u]=%d value=%p", i, (int)lo[i], lv[i]);
    (void)jo, (void)jv;
    return new_module((CUmodule *)lib, code);
}

CUresult cuLibraryUnload(CUlibrary lib)
{
    LOG("cuLibraryUnload(%p)", (void *)lib);
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
    *k = (CUkernel)new_function(name);
    LOG("cuLibraryGetKernel(lib=%p, %s) -> %p", (void *)lib, name, (void *)*k);
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule *m, CUlibrary lib)
{
    LOG("cuLibraryGetModule(lib=%p)", (void *)lib);
    *m = (CUmodule)lib;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
    LOG("cuKernelGetFunction(%p=%s)", (void *)k, ((struct function *)k)->name);
    *f = (CUfunction)k;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *p, size_t *n, CUlibrary lib, const char *name)
{
    LOG("cuLibraryGetGlobal(lib=%p, %s)", (void *)lib, name);
    return cuModuleGetGlobal(p, n, (CUmodule)lib, name);
}

CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
    LOG("cuFuncGetAttribute(attr=%d, %p)", (int)a, (void *)f);
    return CUDA_SUCCESS;
}

CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice d)
{
    *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
    LOG("cuKernelGetAttribute(attr=%d, %p, dev=%d)", (int)a, (void *)k, d);
    return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction f, size_t idx, size_t *off, size_t *size)
{
    LOG("cuFuncGetParamInfo(%p, %zu)", (void *)f, idx);
    if (idx >= 1)
        return CUDA_ERROR_INVALID_VALUE;
    *off = 0;
    *size = 8;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetParamInfo(CUkernel k, size_t idx, size_t *off, size_t *size)
{
    LOG("cuKernelGetParamInfo(%p, %zu)", (void *)k, idx);
    return cuFuncGetParamInfo((CUfunction)k, idx, off, size);
}

static CUresult log_launch(const char *fn, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shm, CUstream s, void **params, void **extra)
{
    struct function *fu = (struct function *)f;
    LOG("%s(%p=%s, grid=%u,%u,%u, block=%u,%u,%u, shmem=%u, stream=%p, kernelParams=%p, extra=%p)", fn, (void *)f,
        fu && fu->magic == 0x46554e31 ? fu->name : "?", gx, gy, gz, bx, by, bz, shm, (void *)s, (void *)params,
        (void *)extra);
    /* The parameter count is in the kernel's metadata, not here: print entries while they point near the
     * array itself (the runtime builds both on its stack). */
    if (getenv("PROBE_LAUNCH_RC")) /* to learn how the runtime reports launch failures */
        return (CUresult)atoi(getenv("PROBE_LAUNCH_RC"));
    for (int i = 0; params && i < 16; i++) {
        long d = (long)((char *)params[i] - (char *)params);
        if (d < -65536 || d > 65536)
            break;
        LOG("  kernelParams[%d]=%p -> 0x%016llx", i, params[i], *(unsigned long long *)params[i]);
    }
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shm, CUstream s, void **params, void **extra)
{
    return log_launch("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shm, CUstream s, void **params, void **extra)
{
    return log_launch("cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

static CUresult launch_ex(const char *fn, const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    LOG("%s: numAttrs=%u", fn, c->numAttrs);
    for (unsigned i = 0; i < c->numAttrs; i++)
        LOG("  attr[%u].id=%d", i, (int)c->attrs[i].id);
    return log_launch(fn, f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                      c->sharedMemBytes, c->hStream, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex("cuLaunchKernelEx", c, f, params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return launch_ex("cuLaunchKernelEx_ptsz", c, f, params, extra);
}

CUresult cuGetErrorString(CUresult e, const char **s)
{
    LOG("cuGetErrorString(%d)", (int)e);
    *s = "probe error";
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult e, const char **s)
{
    LOG("cuGetErrorName(%d)", (int)e);
    *s = "CUDA_ERROR_PROBE";
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ cuGetProcAddress */

/* The driver's rule as documented in cuda.h and cudaTypedefs.h: the newest ABI of `name` whose version is
 * <= cudaVersion; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM its _ptds/_ptsz twin when one exists. */
static const struct probe_pfn *resolve(const char *name, int ver, unsigned long long flags, int *found_any)
{
    const struct probe_pfn *best = NULL;
    *found_any = 0;
    for (int i = 0; i < probe_npfns; i++) {
        const struct probe_pfn *p = &probe_pfns[i];
        if (strcmp(p->base, name) != 0 || p->pt)
            continue;
        *found_any = 1;
        if (p->version <= ver && (!best || p->version > best->version))
            best = p;
    }
    if (best && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
        size_t n = strlen(best->sym);
        for (int i = 0; i < probe_npfns; i++) {
            const struct probe_pfn *p = &probe_pfns[i];
            if (p->pt && p->version <= ver && strncmp(p->sym, best->sym, n) == 0 && strlen(p->sym) == n + 5)
                return p;
        }
    }
    return best;
}

static CUresult proc_address(const char *api, const char *name, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status, void *ret)
{
    int any;
    char w[256];
    const struct probe_pfn *p = resolve(name, ver, flags, &any);
    LOG("%s(\"%s\", ver=%d, flags=%llu) -> %s  from %s", api, name, ver, (unsigned long long)flags,
        p ? p->sym : any ? "VERSION_NOT_SUFFICIENT" : "NOT_FOUND", where(ret, w, sizeof w));
    if (status)
        *status = p ? CU_GET_PROC_ADDRESS_SUCCESS
                    : any ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    *pfn = p ? p->fn : NULL;
    return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *name, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    return proc_address("cuGetProcAddress_v2", name, pfn, ver, flags, status, __builtin_return_address(0));
}

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *name, void **pfn, int ver, cuuint64_t flags)
{
    return proc_address("cuGetProcAddress", name, pfn, ver, flags, NULL, __builtin_return_address(0));
}


/* ------------------------------------------------------------------ legacy ABIs the runtime asks for by version */

#undef cuDeviceGetUuid
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
#undef cuCtxGetDevice
#undef cuCtxSynchronize
#undef cuEventElapsedTime

CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    LOG("cuDeviceGetUuid(dev=%d)", d);
    memset(u->bytes, 0x5a, 16);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    LOG("cuDevicePrimaryCtxRelease (v1)");
    return cuDevicePrimaryCtxRelease_v2(d);
}

CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
    LOG("cuDevicePrimaryCtxReset (v1)");
    return cuDevicePrimaryCtxReset_v2(d);
}
