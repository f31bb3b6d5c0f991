/* cuGetProcAddress(_v2): NVIDIA's runtime takes almost every driver entry point this way, asking for a base name
 * with the CUDA version whose ABI it was compiled against. The answer is the newest ABI of the name whose version
 * is <= cudaVersion; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM its _ptds/_ptsz twin when that exists
 * (docs/driver.md, "cuGetProcAddress"). pv_procs (exports_gen.c) is sorted by name, per-thread flag, version. */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

enum { PROC_SUCCESS = 0, PROC_SYMBOL_NOT_FOUND = 1, PROC_VERSION_NOT_SUFFICIENT = 2 };
#define PROC_PER_THREAD 2ull        /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */

/* First entry named name, or pv_nprocs. */
static int first_of(const char *name)
{
    int lo = 0, hi = pv_nprocs;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(pv_procs[mid].base, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < pv_nprocs && strcmp(pv_procs[lo].base, name) == 0 ? lo : pv_nprocs;
}

/* The entry for (name, version, flags); *found_name tells a too-old version from an unknown name. ABIs newer than
 * the driver version answered (drv_version: PYVGPU_FAKE_DRIVER_VERSION in tests) do not exist. */
static const struct pv_proc *resolve(const char *name, int version, unsigned long long flags, int *found_name)
{
    int i = first_of(name), newest = drv_version();
    *found_name = 0;
    const struct pv_proc *best = NULL;
    for (int j = i; j < pv_nprocs && strcmp(pv_procs[j].base, name) == 0; j++) {
        if (pv_procs[j].version > newest)
            continue;
        *found_name = 1;
        if (!pv_procs[j].per_thread && pv_procs[j].version <= version)
            best = &pv_procs[j];   /* ascending versions: the last one that fits */
    }
    if (!best || !(flags & PROC_PER_THREAD))
        return best;
    size_t n = strlen(best->symbol);
    for (int j = i; j < pv_nprocs && strcmp(pv_procs[j].base, name) == 0; j++) {
        const struct pv_proc *p = &pv_procs[j];
        if (p->per_thread && p->version <= version && p->version <= newest && strncmp(p->symbol, best->symbol, n) == 0 &&
            strlen(p->symbol) == n + 5)   /* best->symbol + "_ptds" / "_ptsz" */
            return p;
    }
    return best;
}

static CUresult proc_address(const char *symbol, void **pfn, int version, unsigned long long flags, int *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    int found;
    const struct pv_proc *p = resolve(symbol, version, flags, &found);
    *pfn = p ? (void *)p->fn : NULL;
    if (status)
        *status = p ? PROC_SUCCESS : found ? PROC_VERSION_NOT_SUFFICIENT : PROC_SYMBOL_NOT_FOUND;
    if (!p && *symbol)      /* "" is NVIDIA's runtime probing the function itself */
        pv_census_absent("procaddr", "%s@%d%s", symbol, version, found ? " (version not sufficient)" : "");
    return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

PV_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                                    int *status)
{
    return proc_address(symbol, pfn, version, flags, status);
}

PV_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags)
{
    return proc_address(symbol, pfn, version, flags, NULL);
}
