/* The call census of this process (PYVGPU_CENSUS, `pyvgpu run --census`): every entry point of pyvgpu's CUDA
 * libraries the program reached (and how often), every one that answered "not supported", the driver names and
 * export tables asked for that nothing answers, and which file served each CUDA library in the process. Printed at
 * exit, one fact per line, so that a person reads it and a test parses it:
 *
 *   pyvgpu census: pid P EXE
 *   census reached LIB NAME CALLS          an entry point of LIB that ran (libvcudart, libvcuda)
 *   census unsupported LIB NAME CALLS      an entry point that answered "not supported" (any pyvgpu library)
 *   census missing KIND WHAT               something asked for that pyvgpu does not offer (KIND: table, table-slot,
 *                                          link)
 *   census absent procaddr NAME@VERSION    a driver function looked up that CUDA 13.0's driver lacks too (bindings
 *                                          of newer CUDA versions probe every name they know): the same answer
 *   census library NAME PATH OWNER         a CUDA library in the process, the file that served it, OWNER pyvgpu or
 *                                          nvidia (a library pyvgpu does not forward runs as NVIDIA built it)
 *   census summary reached=N unsupported=M missing=K absent=A dropped=D
 *
 * "Reached" comes from the API libraries' function-entry hook (-finstrument-functions on their api_*.c, census_hook.c):
 * the hook records the function's address while the census is on and returns at once while it is off; names are
 * resolved only at exit, with dladdr, keeping the exported symbols. "Unsupported" comes from the generated stubs'
 * loggers. PYVGPU_CENSUS: "1" (or "stderr") prints to stderr, "libraries" prints only the library lines (what
 * `pyvgpu run --explain` shows), any other value except "0" is a file the census is appended to. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pv_stats.h"
#include "pv_census.h"

enum { KIND_REACHED = 1, KIND_UNSUPPORTED, KIND_MISSING, KIND_ABSENT };

/* Open addressing on a key that is an address (a function, or a stub's name string) or, for "missing" notes, a
 * hash of the text; bounded: past CENSUS_SLOTS distinct keys new ones are counted as dropped. */
#define CENSUS_SLOTS 8192
struct census_slot {
    _Atomic uintptr_t key;
    _Atomic uint64_t calls;
    _Atomic int kind;
    const char *lib;                /* unsupported: the library's name (static string) */
    char *text;                     /* missing: the note (malloc'd, owned) */
};

int pv_census_on;
static int libraries_only;
static struct census_slot slots[CENSUS_SLOTS];
static _Atomic uint64_t dropped;
static pid_t owner;
static char *target;                /* NULL: stderr */
static pthread_mutex_t text_lock = PTHREAD_MUTEX_INITIALIZER;

static struct census_slot *slot_for(uintptr_t key, int kind, int *fresh)
{
    uintptr_t h = (key >> 4) * 0x9E3779B97F4A7C15ull;
    for (unsigned i = 0; i < 64; i++) {
        struct census_slot *s = &slots[(h + i) % CENSUS_SLOTS];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key)
            return s;
        if (k == 0) {
            uintptr_t expected = 0;
            if (atomic_compare_exchange_strong(&s->key, &expected, key)) {
                atomic_store(&s->kind, kind);
                *fresh = 1;
                return s;
            }
            if (expected == key)
                return s;
        }
    }
    atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
    return NULL;
}

void pv_census_enter(void *fn)
{
    int fresh = 0;
    struct census_slot *s = slot_for((uintptr_t)fn, KIND_REACHED, &fresh);
    if (s)
        atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
}

void pv_census_unsupported(const char *lib, const char *name)
{
    if (!pv_census_on)
        return;
    int fresh = 0;
    struct census_slot *s = slot_for((uintptr_t)name, KIND_UNSUPPORTED, &fresh);
    if (!s)
        return;
    if (fresh)
        s->lib = lib;
    atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
}

static void note(int kind, const char *label, const char *fmt, va_list ap)
{
    char text[256];
    int n = snprintf(text, sizeof text, "%s ", label);
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    uintptr_t h = 1469598103934665603ull;          /* FNV-1a of the text: one line per distinct note */
    for (const char *c = text; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    h |= 1;                                         /* odd: never a function or string address of ours */
    int fresh = 0;
    struct census_slot *s = slot_for(h, kind, &fresh);
    if (!s)
        return;
    if (fresh) {
        pthread_mutex_lock(&text_lock);
        s->text = strdup(text);
        pthread_mutex_unlock(&text_lock);
    }
    atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
}

void pv_census_missing(const char *kind, const char *fmt, ...)
{
    if (!pv_census_on)
        return;
    va_list ap;
    va_start(ap, fmt);
    note(KIND_MISSING, kind, fmt, ap);
    va_end(ap);
}

void pv_census_absent(const char *kind, const char *fmt, ...)
{
    if (!pv_census_on)
        return;
    va_list ap;
    va_start(ap, fmt);
    note(KIND_ABSENT, kind, fmt, ap);
    va_end(ap);
}

/* The CUDA libraries a program may load: pyvgpu forwards some; the others run as NVIDIA built them. */
static const char *const cuda_libraries[] = {
    "libcuda.so", "libcudart.so", "libcublas.so", "libcublasLt.so", "libnvidia-ml.so", "libcufft.so",
    "libcufftw.so", "libcurand.so", "libcusolver.so", "libcusolverMg.so", "libcusparse.so", "libcusparseLt.so",
    "libcudnn", "libnccl.so", "libnvrtc.so", "libnvrtc-builtins.so", "libnvJitLink.so", "libcupti.so",
    "libnvToolsExt.so", "libnvshmem", "libcufile.so", "libnvperf", NULL,
};

static int is_cuda_library(const char *base)
{
    for (int i = 0; cuda_libraries[i]; i++)
        if (strncmp(base, cuda_libraries[i], strlen(cuda_libraries[i])) == 0)
            return 1;
    return 0;
}

struct lib_walk { FILE *f; char own_dir[PATH_MAX]; int count; };

/* An object's SONAME from its dynamic section (the loader has relocated DT_STRTAB to an address on x86-64; an
 * offset is taken as relative to the load address); NULL without one. */
static const char *soname_of(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        uintptr_t strtab = 0, soname = 0;
        int has_soname = 0;
        for (; dyn->d_tag != DT_NULL; dyn++) {
            if (dyn->d_tag == DT_STRTAB)
                strtab = dyn->d_un.d_ptr;
            else if (dyn->d_tag == DT_SONAME) {
                soname = dyn->d_un.d_val;
                has_soname = 1;
            }
        }
        if (!strtab || !has_soname)
            return NULL;
        if (strtab < info->dlpi_addr)
            strtab += info->dlpi_addr;
        return (const char *)strtab + soname;
    }
    return NULL;
}

static int print_library(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct lib_walk *w = arg;
    if (!info->dlpi_name || !*info->dlpi_name)
        return 0;
    const char *base = soname_of(info);
    if (!base) {
        base = strrchr(info->dlpi_name, '/');
        base = base ? base + 1 : info->dlpi_name;
    }
    char real[PATH_MAX];
    if (!realpath(info->dlpi_name, real))
        snprintf(real, sizeof real, "%s", info->dlpi_name);
    const char *rbase = strrchr(real, '/');
    rbase = rbase ? rbase + 1 : real;
    if (!is_cuda_library(base) && !is_cuda_library(rbase))
        return 0;
    size_t dl = strlen(w->own_dir);
    int ours = dl && strncmp(real, w->own_dir, dl) == 0 && real[dl] == '/' && !strchr(real + dl + 1, '/');
    fprintf(w->f, "census library %s %s %s\n", base, real, ours ? "pyvgpu" : "nvidia");
    w->count++;
    return 0;
}

static void print_libraries(FILE *f)
{
    struct lib_walk w = { .f = f };
    Dl_info self;
    char real[PATH_MAX];
    if (dladdr((void *)print_libraries, &self) && self.dli_fname && realpath(self.dli_fname, real)) {
        char *slash = strrchr(real, '/');
        if (slash)
            *slash = 0;
        snprintf(w.own_dir, sizeof w.own_dir, "%s", real);
    }
    dl_iterate_phdr(print_library, &w);
}

static const char *short_lib(const char *path)
{
    const char *base = path ? strrchr(path, '/') : NULL;
    return base ? base + 1 : path ? path : "?";
}

static void print_census(void)
{
    if (getpid() != owner)
        return;
    FILE *f = pv_exit_report_open(target, PV_KEY_ENV_CENSUS, "census");
    if (!f)
        return;
    fputc('\n', f);
    unsigned reached = 0, unsupported = 0, missing = 0, absent = 0;
    for (int pass = KIND_REACHED; !libraries_only && pass <= KIND_ABSENT; pass++) {
        for (int i = 0; i < CENSUS_SLOTS; i++) {
            struct census_slot *s = &slots[i];
            uintptr_t key = atomic_load(&s->key);
            if (!key || atomic_load(&s->kind) != pass)
                continue;
            unsigned long long calls = (unsigned long long)atomic_load(&s->calls);
            if (pass == KIND_REACHED) {
                Dl_info info;
                /* only exported entry points: a static helper resolves to a symbol that starts elsewhere */
                if (!dladdr((void *)key, &info) || !info.dli_sname || info.dli_saddr != (void *)key)
                    continue;
                fprintf(f, "census reached %s %s %llu\n", short_lib(info.dli_fname), info.dli_sname, calls);
                reached++;
            } else if (pass == KIND_UNSUPPORTED) {
                fprintf(f, "census unsupported %s %s %llu\n", s->lib ? s->lib : "?", (const char *)key, calls);
                unsupported++;
            } else if (s->text) {
                fprintf(f, "census %s %s\n", pass == KIND_MISSING ? "missing" : "absent", s->text);
                if (pass == KIND_MISSING)
                    missing++;
                else
                    absent++;
            }
        }
    }
    print_libraries(f);
    if (!libraries_only)
        fprintf(f, "census summary reached=%u unsupported=%u missing=%u absent=%u dropped=%llu\n", reached,
                unsupported, missing, absent, (unsigned long long)atomic_load(&dropped));
    pv_exit_report_close(f);
}

__attribute__((constructor)) static void census_init(void)
{
    const char *v = getenv(PV_KEY_ENV_CENSUS);
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    if (strcmp(v, "libraries") == 0)
        libraries_only = 1;
    else if (strcmp(v, "1") != 0 && strcmp(v, "stderr") != 0)
        target = strdup(v);
    owner = getpid();
    pv_census_on = !libraries_only;
    atexit(print_census);
}
