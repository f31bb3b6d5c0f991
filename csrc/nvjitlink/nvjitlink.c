/* nvJitLink for emulated GPUs. numba-cuda (through cuda.core) links every kernel with nvJitLink when it is installed,
 * into a cubin for the device's architecture: SASS, which an emulated GPU cannot run. This library, preloaded by
 * `pyvgpu run` against emulated GPUs only, answers nvJitLink's API with PTX, handed out as the "cubin" (and as the
 * linked PTX); cuModuleLoadData and cuLibraryLoadData take PTX on every device.
 * - A link without -lto: as libvcuda's cuLink* (csrc/driver/api_link.c), one PTX input is the result.
 * - A link with -lto (numba compiles its kernels to LTO-IR whenever nvJitLink is installed): NVIDIA's own nvJitLink
 *   ($PYVGPU_NVJITLINK_LIB, which `pyvgpu run` sets to the wheel's libnvJitLink.so.13, loaded by path beside this
 *   one) links it with -ptx added, its documented way to emit PTX after link-time optimization.
 * Anything else (cubins, fatbins, objects, libraries, a second PTX input without -lto, LTO without NVIDIA's
 * library) needs a device linker for a real architecture: NVJITLINK_ERROR_INVALID_INPUT, the reason in the error
 * log and one line on stderr. The unversioned entry points (what cuda.bindings looks up) and the versioned ones
 * (nvJitLink.h's wrappers, NVIDIA's libraries) are the same functions. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pv_core.h"

enum { OK = 0, ERR_MISSING_ARCH = 2, ERR_INVALID_INPUT = 3, ERR_INTERNAL = 6, ERR_NULL_INPUT = 10 };
enum { IN_CUBIN = 1, IN_PTX = 2, IN_LTOIR = 3, IN_FATBIN = 4, IN_OBJECT = 5, IN_LIBRARY = 6, IN_INDEX = 7,
       IN_ANY = 10 };
#define LINK_MAGIC 0x4e4a4c4bu
#define MAX_LINK_INPUT ((size_t)1 << 30)
#define LOG_MAX 512
#define MAX_OPTIONS 64

/* NVIDIA's nvJitLink, for LTO links: the entry points this file forwards to. */
struct real_api {
    int (*create)(void **, uint32_t, const char **);
    int (*destroy)(void **);
    int (*add_data)(void *, int, const void *, size_t, const char *);
    int (*complete)(void *);
    int (*ptx_size)(void *, size_t *);
    int (*ptx)(void *, char *);
    int (*error_log_size)(void *, size_t *);
    int (*error_log)(void *, char *);
};
static struct real_api real;
static int real_ok;
static char real_why[LOG_MAX];
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void load_real(void)
{
    const char *path = getenv("PYVGPU_NVJITLINK_LIB");
    if (!path || !*path) {
        snprintf(real_why, sizeof real_why, "PYVGPU_NVJITLINK_LIB (NVIDIA's libnvJitLink.so.13) is not set");
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(real_why, sizeof real_why, "cannot load %s: %s", path, dlerror());
        return;
    }
    void **slots[] = { (void **)&real.create, (void **)&real.destroy, (void **)&real.add_data,
                       (void **)&real.complete, (void **)&real.ptx_size, (void **)&real.ptx,
                       (void **)&real.error_log_size, (void **)&real.error_log };
    const char *names[] = { "nvJitLinkCreate", "nvJitLinkDestroy", "nvJitLinkAddData", "nvJitLinkComplete",
                            "nvJitLinkGetLinkedPtxSize", "nvJitLinkGetLinkedPtx", "nvJitLinkGetErrorLogSize",
                            "nvJitLinkGetErrorLog" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(*slots[i] = dlsym(h, names[i]))) {
            snprintf(real_why, sizeof real_why, "%s lacks %s", path, names[i]);
            dlclose(h);
            return;
        }
    }
    real_ok = 1;
}

struct link {
    uint32_t magic;
    char *ptx;                 /* the one PTX input, NUL-terminated (owned) */
    size_t ptx_size;           /* with its NUL */
    int failed;                /* the first refusal: Complete fails with it too */
    int complete;
    void *lto;                 /* NVIDIA's link (-lto links), else NULL */
    int lto_unavailable;       /* -lto asked without NVIDIA's library: the error log says why */
    char error_log[2 * LOG_MAX];
};

static struct link *link_of(void *h)
{
    struct link *l = h;
    return l && l->magic == LINK_MAGIC ? l : NULL;
}

static const char *input_name(int type)
{
    switch (type) {
    case IN_CUBIN: return "a cubin";
    case IN_LTOIR: return "LTO-IR";
    case IN_FATBIN: return "a fatbin";
    case IN_OBJECT: return "a host object";
    case IN_LIBRARY: return "a host library";
    case IN_INDEX: return "an index file";
    default: return "an input that is not PTX";
    }
}

PV_API int nvJitLinkCreate(void **handle, uint32_t n, const char **options)
{
    if (!handle || (n && !options))
        return ERR_INVALID_INPUT;
    int arch = 0, lto = 0, ptx = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!options[i])
            return ERR_INVALID_INPUT;
        arch |= strncmp(options[i], "-arch=", 6) == 0;
        lto |= strcmp(options[i], "-lto") == 0;
        ptx |= strcmp(options[i], "-ptx") == 0;
    }
    if (!arch)
        return ERR_MISSING_ARCH;     /* as nvJitLink: a link needs -arch=sm_NN */
    struct link *l = calloc(1, sizeof *l);
    if (!l)
        return ERR_INTERNAL;
    l->magic = LINK_MAGIC;
    if (lto) {
        pthread_once(&real_once, load_real);
        if (!real_ok || n + 1 > MAX_OPTIONS) {
            snprintf(l->error_log, sizeof l->error_log, "pyvgpu's nvJitLink needs NVIDIA's for link-time "
                     "optimization (-lto): %s", real_ok ? "too many options" : real_why);
            l->failed = ERR_INVALID_INPUT;    /* reported by AddData and Complete, with the log */
            l->lto_unavailable = 1;
        } else {
            const char *opts[MAX_OPTIONS];
            memcpy(opts, options, n * sizeof *opts);
            if (!ptx)
                opts[n++] = "-ptx";
            int r = real.create(&l->lto, n, opts);
            if (r != OK) {
                free(l);
                return r;
            }
        }
    }
    *handle = l;
    return OK;
}

PV_API int nvJitLinkDestroy(void **handle)
{
    struct link *l = handle ? link_of(*handle) : NULL;
    if (!l)
        return ERR_INVALID_INPUT;
    l->magic = 0;
    if (l->lto)
        (void)real.destroy(&l->lto);
    free(l->ptx);
    free(l);
    *handle = NULL;
    return OK;
}

static int refuse(struct link *l, const char *what, const char *name)
{
    static atomic_int once;
    snprintf(l->error_log, sizeof l->error_log, "pyvgpu's nvJitLink links PTX only (the emulated GPU runs PTX): %s "
             "(%s) cannot be linked", what, name ? name : "unnamed");
    pv_log_once(&once, "nvJitLinkAddData/AddFile: %s (NVJITLINK_ERROR_INVALID_INPUT)", l->error_log);
    pv_census_missing("link", "nvJitLink: %s", what);
    if (!l->failed)
        l->failed = ERR_INVALID_INPUT;
    return ERR_INVALID_INPUT;
}

/* NVIDIA's answer on an LTO link; its error log copied (the caller asks ours). */
static int real_result(struct link *l, int r)
{
    size_t n = 0;
    if (r != OK && real.error_log_size(l->lto, &n) == OK && n > 0 && n <= sizeof l->error_log) {
        if (real.error_log(l->lto, l->error_log) != OK)
            l->error_log[0] = 0;
    }
    if (r != OK && !l->failed)
        l->failed = r;
    return r;
}

static int is_ptx_text(const char *data, size_t size)
{
    size_t len = strnlen(data, size);
    return len > 0 && (memmem(data, len, ".version", 8) != NULL) && memmem(data, len, ".target", 7) != NULL;
}

PV_API int nvJitLinkAddData(void *handle, int type, const void *data, size_t size, const char *name)
{
    struct link *l = link_of(handle);
    if (!l)
        return ERR_INVALID_INPUT;
    if (!data || !size)
        return ERR_NULL_INPUT;
    if (l->lto)
        return real_result(l, real.add_data(l->lto, type, data, size, name));
    if (l->lto_unavailable) {
        static atomic_int once;
        pv_log_once(&once, "nvJitLinkAddData: %s (NVJITLINK_ERROR_INVALID_INPUT)", l->error_log);
        pv_census_missing("link", "nvJitLink: -lto without NVIDIA's library");
        return l->failed;
    }
    if (type == IN_ANY && is_ptx_text(data, size))
        type = IN_PTX;
    if (type != IN_PTX)
        return refuse(l, input_name(type), name);
    if (l->ptx)
        return refuse(l, "a second PTX input", name);
    /* PTX is text: its length is up to the first NUL within size (size may count the NUL or not). */
    size_t len = strnlen(data, size < MAX_LINK_INPUT ? size : MAX_LINK_INPUT);
    if (!len || len >= MAX_LINK_INPUT)
        return ERR_INVALID_INPUT;
    if (!(l->ptx = malloc(len + 1)))
        return ERR_INTERNAL;
    memcpy(l->ptx, data, len);
    l->ptx[len] = 0;
    l->ptx_size = len + 1;
    return OK;
}

PV_API int nvJitLinkAddFile(void *handle, int type, const char *path)
{
    struct link *l = link_of(handle);
    if (!l)
        return ERR_INVALID_INPUT;
    if (!path)
        return ERR_NULL_INPUT;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(l->error_log, sizeof l->error_log, "cannot open %s", path);
        return ERR_INVALID_INPUT;
    }
    char *buf = NULL;
    long n = -1;
    int r = ERR_INVALID_INPUT;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && (size_t)n < MAX_LINK_INPUT && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        r = nvJitLinkAddData(handle, type, buf, (size_t)n + 1, path);
    }
    fclose(f);
    free(buf);
    return r;
}

PV_API int nvJitLinkComplete(void *handle)
{
    struct link *l = link_of(handle);
    if (!l)
        return ERR_INVALID_INPUT;
    if (l->failed)
        return l->failed;
    if (l->lto) {
        /* NVIDIA's PTX after link-time optimization becomes this link's result. */
        size_t n = 0;
        int r = real_result(l, real.complete(l->lto));
        if (r == OK)
            r = real_result(l, real.ptx_size(l->lto, &n));
        if (r != OK)
            return r;
        if (!n || n >= MAX_LINK_INPUT || !(l->ptx = malloc(n + 1)))
            return ERR_INTERNAL;
        if ((r = real_result(l, real.ptx(l->lto, l->ptx))) != OK)
            return r;
        l->ptx[n] = 0;
        l->ptx_size = strlen(l->ptx) + 1;
        l->complete = 1;
        return OK;
    }
    if (!l->ptx) {
        snprintf(l->error_log, sizeof l->error_log, "nothing to link: no PTX input");
        return ERR_INVALID_INPUT;
    }
    l->complete = 1;
    return OK;
}

/* The linked result, PTX text: as the cubin and as the linked PTX alike. */
static int result_size(void *handle, size_t *size)
{
    struct link *l = link_of(handle);
    if (!l || !size || !l->complete)
        return ERR_INVALID_INPUT;
    *size = l->ptx_size;
    return OK;
}

static int result(void *handle, void *out)
{
    struct link *l = link_of(handle);
    if (!l || !out || !l->complete)
        return ERR_INVALID_INPUT;
    memcpy(out, l->ptx, l->ptx_size);
    return OK;
}

PV_API int nvJitLinkGetLinkedCubinSize(void *handle, size_t *size) { return result_size(handle, size); }
PV_API int nvJitLinkGetLinkedCubin(void *handle, void *cubin) { return result(handle, cubin); }
PV_API int nvJitLinkGetLinkedPtxSize(void *handle, size_t *size) { return result_size(handle, size); }
PV_API int nvJitLinkGetLinkedPtx(void *handle, char *ptx) { return result(handle, ptx); }

/* No LTO here: there is never linked LTO-IR to hand out. */
PV_API int nvJitLinkGetLinkedLTOIRSize(void *handle, size_t *size) { return ERR_INVALID_INPUT; }
PV_API int nvJitLinkGetLinkedLTOIR(void *handle, void *ltoir) { return ERR_INVALID_INPUT; }

PV_API int nvJitLinkGetErrorLogSize(void *handle, size_t *size)
{
    struct link *l = link_of(handle);
    if (!l || !size)
        return ERR_INVALID_INPUT;
    *size = strlen(l->error_log) + 1;
    return OK;
}

PV_API int nvJitLinkGetErrorLog(void *handle, char *log)
{
    struct link *l = link_of(handle);
    if (!l || !log)
        return ERR_INVALID_INPUT;
    memcpy(log, l->error_log, strlen(l->error_log) + 1);
    return OK;
}

/* Nothing is compiled here, so there is nothing to report. */
PV_API int nvJitLinkGetInfoLogSize(void *handle, size_t *size)
{
    if (!link_of(handle) || !size)
        return ERR_INVALID_INPUT;
    *size = 1;
    return OK;
}

PV_API int nvJitLinkGetInfoLog(void *handle, char *log)
{
    if (!link_of(handle) || !log)
        return ERR_INVALID_INPUT;
    *log = 0;
    return OK;
}

/* The CUDA version pyvgpu's libraries stand in for (13.0): numba-cuda needs 12.3 or later. */
PV_API int nvJitLinkVersion(unsigned *major, unsigned *minor)
{
    if (!major || !minor)
        return ERR_INVALID_INPUT;
    *major = 13;
    *minor = 0;
    return OK;
}

/* The versioned names nvJitLink.h's inline wrappers call (13.0 to 13.5) and NVIDIA's libraries link to (cuSPARSE
 * 12: __nvJitLink*_13_0): the same functions. Without them a preloaded libnvJitLink.so.13 would leave libcusparse,
 * and so torch, unloadable. */
#define VERSIONED(fn)                                                                                             \
    PV_API __typeof__(fn) __##fn##_13_0 __attribute__((alias(#fn)));                                              \
    PV_API __typeof__(fn) __##fn##_13_1 __attribute__((alias(#fn)));                                              \
    PV_API __typeof__(fn) __##fn##_13_2 __attribute__((alias(#fn)));                                              \
    PV_API __typeof__(fn) __##fn##_13_3 __attribute__((alias(#fn)));                                              \
    PV_API __typeof__(fn) __##fn##_13_4 __attribute__((alias(#fn)));                                              \
    PV_API __typeof__(fn) __##fn##_13_5 __attribute__((alias(#fn)));
VERSIONED(nvJitLinkCreate)
VERSIONED(nvJitLinkDestroy)
VERSIONED(nvJitLinkAddData)
VERSIONED(nvJitLinkAddFile)
VERSIONED(nvJitLinkComplete)
VERSIONED(nvJitLinkGetLinkedCubinSize)
VERSIONED(nvJitLinkGetLinkedCubin)
VERSIONED(nvJitLinkGetLinkedPtxSize)
VERSIONED(nvJitLinkGetLinkedPtx)
VERSIONED(nvJitLinkGetLinkedLTOIRSize)
VERSIONED(nvJitLinkGetLinkedLTOIR)
VERSIONED(nvJitLinkGetErrorLogSize)
VERSIONED(nvJitLinkGetErrorLog)
VERSIONED(nvJitLinkGetInfoLogSize)
VERSIONED(nvJitLinkGetInfoLog)
