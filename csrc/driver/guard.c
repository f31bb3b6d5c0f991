/* A program that cannot be remoted says so in one line instead of failing with a bare CUDA error: another
 * libcuda.so (a private copy, or NVIDIA's driver loaded by its path) in this process takes the calls made through
 * it, and they never reach pyvgpu's GPUs. libvcuda looks when it is loaded (a copy the program's dependencies
 * brought) and when the process exits (one it dlopen'ed by path meanwhile); `pyvgpu run` also warns before starting
 * a program that names a libcuda by path. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <libgen.h>
#include <link.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

struct search {
    char own_dir[PATH_MAX];         /* where this library lives: copies of it there are not another driver */
    char found[PATH_MAX];
};

/* The real directory of a file path (empty when it cannot be resolved). */
static void real_dir(const char *path, char out[PATH_MAX])
{
    char buf[PATH_MAX];
    out[0] = 0;
    if (realpath(path, buf))
        snprintf(out, PATH_MAX, "%s", dirname(buf));
}

/* The DT_SONAME of a loaded object, or NULL. */
static const char *soname_of(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        const char *strtab = NULL;
        ElfW(Xword) off = (ElfW(Xword))-1;
        for (; dyn->d_tag != DT_NULL; dyn++) {
            if (dyn->d_tag == DT_STRTAB)
                strtab = (const char *)dyn->d_un.d_ptr;
            else if (dyn->d_tag == DT_SONAME)
                off = dyn->d_un.d_val;
        }
        if (strtab && (uintptr_t)strtab < info->dlpi_addr)
            strtab += info->dlpi_addr;                   /* not relocated (the vDSO's): an offset */
        return strtab && off != (ElfW(Xword))-1 ? strtab + off : NULL;
    }
    return NULL;
}

static int visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct search *s = arg;
    const char *name = info->dlpi_name;
    if (!name || !*name)
        return 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *so = soname_of(info);
    if (strncmp(base, "libcuda.so", 10) != 0 && !(so && strcmp(so, "libcuda.so.1") == 0))
        return 0;
    char dir[PATH_MAX];
    real_dir(name, dir);
    if (s->own_dir[0] && strcmp(dir, s->own_dir) == 0)
        return 0;                                        /* this library, under its own or the loader's name */
    snprintf(s->found, sizeof s->found, "%s", name);
    return 1;
}

/* The path of another libcuda in this process, or 0 when there is none. */
static int other_driver(char *out, size_t cap)
{
    static struct search s;             /* PATH_MAX twice: not on a constructor's stack */
    Dl_info me;
    s.own_dir[0] = s.found[0] = 0;
    if (dladdr((void *)other_driver, &me) && me.dli_fname)
        real_dir(me.dli_fname, s.own_dir);
    if (!dl_iterate_phdr(visit, &s))
        return 0;
    snprintf(out, cap, "%s", s.found);
    return 1;
}

static atomic_int said;

static void report(void)
{
    char path[PATH_MAX];
    if (other_driver(path, sizeof path) && !atomic_exchange(&said, 1))
        pv_log("this program loaded another CUDA driver, %s: CUDA calls made through it do not reach pyvgpu's "
               "GPUs (a program cannot be remoted while it loads libcuda by path; load libcuda.so.1 by name)", path);
}

__attribute__((constructor)) static void check_at_load(void) { report(); }
__attribute__((destructor)) static void check_at_exit(void) { report(); }
