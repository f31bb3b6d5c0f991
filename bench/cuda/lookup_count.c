/* LD_PRELOAD counter of the client's address lookups (pv_alloc_find, pv_alloc_find_device of libpvcore, which the
 * client libraries call through their PLT): each call counted, then forwarded to libpvcore's; the counts are written
 * to $PYVGPU_LOOKUP_COUNT at exit as "find N\nfind_device M\n". For bench/alloc_lookup_bench.py only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct pv_alloc;
typedef int (*find_fn)(uint64_t, struct pv_alloc *);
static atomic_long finds, dev_finds;

static find_fn next_of(const char *name)
{
    find_fn f = (find_fn)dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "lookup_count: %s not found after the preload\n", name);
        abort();
    }
    return f;
}

/* name(ptr, out): counted in `counter`, then libpvcore's */
#define COUNTED(name, counter)                                                                                      \
    int name(uint64_t ptr, struct pv_alloc *out)                                                                    \
    {                                                                                                               \
        static find_fn real;                                                                                        \
        if (!real)                                                                                                  \
            real = next_of(#name);                                                                                  \
        atomic_fetch_add(&counter, 1);                                                                              \
        return real(ptr, out);                                                                                      \
    }
COUNTED(pv_alloc_find, finds)
COUNTED(pv_alloc_find_device, dev_finds)

__attribute__((destructor)) static void report(void)
{
    const char *path = getenv("PYVGPU_LOOKUP_COUNT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f)
        return;
    fprintf(f, "find %ld\nfind_device %ld\n", atomic_load(&finds), atomic_load(&dev_finds));
    fclose(f);
}
