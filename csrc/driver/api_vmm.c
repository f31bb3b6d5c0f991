/* Virtual memory management (cuMemAddressReserve/Free, cuMemCreate/Release, cuMemMap/Unmap, cuMemSetAccess/GetAccess,
 * cuMemGetAllocationGranularity, cuMemGetAllocationPropertiesFromHandle, cuMemRetainAllocationHandle): the daemon
 * holds the reservations, physical allocations and mappings of one device and checks CUDA's rules
 * (daemon/pyvgpu_daemon/vmm.py, ops VMM_*); this file keeps what the client must know to route later calls and
 * pointers: which device a reservation, handle and mapping belong to, handle reference counts, access flags and the
 * allocation properties to answer queries locally. Mapped ranges join the core's allocation table as the device's
 * memory (owner PV_OWNER_VMM: no context owns them, cuMemFree refuses them), so copies, launches and pointer
 * attributes treat them as device memory: one entry per run of accessible mappings (adjacent mappings are one range
 * of device memory, as on a GPU).
 *
 * One device per object: a reservation is made on the device whose pointer window its hint lies in, else the
 * current context's (device 0 without one); mapping another device's allocation into it, or granting another
 * device access, is CUDA_ERROR_NOT_SUPPORTED (GPUs of different hosts share no address space here). A device reset
 * forgets what it held (reset generations). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1, CU_MEM_LOCATION_TYPE_DEVICE = 1, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 };
#define VMM_HANDLE_MAGIC 0x564d4d48u

struct vmm_handle {
    uint32_t magic;
    int dev;                        /* global ordinal */
    unsigned gen;                   /* the device's reset generation when it was made */
    uint64_t remote;                /* the daemon's handle */
    size_t size;
    CUmemAllocationProp prop;
    int refs;                       /* cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease */
    int maps;
};
struct vmm_res {
    uint64_t addr, size;
    int dev;
    unsigned gen;
    uint64_t *runs;                 /* starts of its accessible runs in the core's allocation table */
    size_t nruns;
    int in_hole;                    /* placed in PYVGPU_FAKE_VA_HINTS's hole (its bytes come back when freed) */
};
struct vmm_map { uint64_t addr, size; struct vmm_handle *h; unsigned long long access; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t hole_left;       /* bytes left in PYVGPU_FAKE_VA_HINTS's hole ("hole:N"), under mu */
static struct vmm_res *res;
static size_t nres, capres;
static struct vmm_map *maps;
static size_t nmaps, capmaps;

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

static int stale(int dev, unsigned gen)
{
    struct pv_device *d = pv_device(dev);
    return !d || atomic_load(&d->reset_gen) != gen;
}

/* Drops what a device reset took (with mu held; the reset emptied the core's allocation table of the device). */
static void purge(void)
{
    size_t j = 0;
    for (size_t i = 0; i < nres; i++)
        if (!stale(res[i].dev, res[i].gen))
            res[j++] = res[i];
        else {
            hole_left += res[i].in_hole ? res[i].size : 0;
            free(res[i].runs);
        }
    nres = j;
    j = 0;
    for (size_t i = 0; i < nmaps; i++)
        if (!stale(maps[i].h->dev, maps[i].h->gen))
            maps[j++] = maps[i];
        else if (--maps[i].h->maps == 0 && maps[i].h->refs <= 0) {
            maps[i].h->magic = 0;
            pv_handle_remove(maps[i].h);
            free(maps[i].h);
        }
    nmaps = j;
}

static struct vmm_res *reservation_of(uint64_t addr, uint64_t size)
{
    for (size_t i = 0; i < nres; i++)
        if (addr >= res[i].addr && addr + size <= res[i].addr + res[i].size)
            return &res[i];
    return NULL;
}

static int overlaps_reservation(uint64_t addr, uint64_t size)
{
    for (size_t i = 0; i < nres; i++)
        if (addr < res[i].addr + res[i].size && res[i].addr < addr + size)
            return 1;
    return 0;
}

static int by_addr(const void *a, const void *b)
{
    uint64_t x = (*(const struct vmm_map *const *)a)->addr, y = (*(const struct vmm_map *const *)b)->addr;
    return x < y ? -1 : x > y;
}

/* The core's allocation table gets r's accessible mappings anew, adjacent ones as one run (with mu held). */
static void rerun(struct vmm_res *r)
{
    int ignored;
    for (size_t i = 0; i < r->nruns; i++)
        pv_alloc_remove(r->runs[i], &ignored);
    r->nruns = 0;
    struct vmm_map **in = malloc(sizeof *in * (nmaps ? nmaps : 1));
    uint64_t *runs = realloc(r->runs, sizeof *runs * (nmaps ? nmaps : 1));
    if (!in || !runs) {
        free(in);
        r->runs = runs;
        pv_log("out of memory tracking mapped memory");
        return;
    }
    r->runs = runs;
    size_t n = 0;
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].access && maps[i].addr >= r->addr && maps[i].addr < r->addr + r->size)
            in[n++] = &maps[i];
    qsort(in, n, sizeof *in, by_addr);
    for (size_t i = 0; i < n;) {
        uint64_t start = in[i]->addr, end = start + in[i]->size;
        for (i++; i < n && in[i]->addr == end; i++)
            end += in[i]->size;
        pv_alloc_add_owned(start, end - start, r->dev, PV_OWNER_VMM);
        r->runs[r->nruns++] = start;
    }
    free(in);
}

static struct vmm_map *mapping_at(uint64_t addr)
{
    for (size_t i = 0; i < nmaps; i++)
        if (addr >= maps[i].addr && addr < maps[i].addr + maps[i].size)
            return &maps[i];
    return NULL;
}

/* The mappings covering [addr, addr+size) back to back, as indexes into maps (malloc'd), or NULL. */
static size_t *covering(uint64_t addr, uint64_t size, size_t *n)
{
    size_t *out = malloc(sizeof *out * (nmaps ? nmaps : 1));
    uint64_t pos = addr;
    *n = 0;
    while (out && pos < addr + size) {
        struct vmm_map *m = mapping_at(pos);
        if (!m || m->addr != pos)
            break;
        out[(*n)++] = (size_t)(m - maps);
        pos += m->size;
    }
    if (out && (pos != addr + size || !size)) {
        free(out);
        out = NULL;
    }
    return out;
}

static struct vmm_handle *handle_of(CUmemGenericAllocationHandle h)
{
    struct vmm_handle *v = (struct vmm_handle *)(uintptr_t)h;
    return v && pv_handle_valid(v) && v->magic == VMM_HANDLE_MAGIC && v->refs > 0 && !stale(v->dev, v->gen) ? v
                                                                                                          : NULL;
}

/* cuInit ran (else its error); then mu is held and what device resets took is gone: the caller unlocks. */
static CUresult enter(void)
{
    CUresult r = drv_ready();
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&mu);
        purge();
    }
    return r;
}

/* The device of the mappings covering [ptr, ptr+size) back to back, or -1 (with mu held). */
static int covered_device(uint64_t ptr, uint64_t size)
{
    size_t n, *idx = covering(ptr, size, &n);
    int dev = idx ? maps[idx[0]].h->dev : -1;
    free(idx);
    return dev;
}

/* The device whose pointer window holds addr, or -1. */
static int window_device(uint64_t addr)
{
    for (int i = 0; i < pv_device_count(); i++) {
        struct pv_device *d = pv_device(i);
        uint64_t base = pv_conn_va_base(d->conn) + (uint64_t)d->remote * PV_VA_WINDOW_BYTES;
        if (addr >= base && addr - base < PV_VA_WINDOW_BYTES)
            return i;
    }
    return -1;
}

/* A device from an allocation property (CUDA_ERROR_INVALID_VALUE / INVALID_DEVICE / NOT_SUPPORTED). */
static CUresult prop_device(const CUmemAllocationProp *p, struct pv_device **out)
{
    if (!p || p->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return p && p->type == 2 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;   /* managed type */
    if (p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return p->location.type >= 2 && p->location.type <= 4 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (!(*out = pv_device(p->location.id)))
        return CUDA_ERROR_INVALID_DEVICE;
    return (*out)->vmm_granularity ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

PV_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option)
{
    struct pv_device *d;
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!granularity || option < 0 || option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = prop_device(prop, &d)) == CUDA_SUCCESS)
        *granularity = (size_t)d->vmm_granularity;
    return r;
}

/* PYVGPU_FAKE_VA_HINTS (tests, docs/driver.md): comma-separated clauses. "ignore" makes cuMemAddressReserve ignore
 * every address hint, "ignore:LO-HI" the hints in [LO, HI), as NVIDIA's driver 580 ignored hints at 1 TiB on an H100
 * (GPU runs 2, 3); "below:N" the hints of ranges smaller than N bytes, as the same driver gave the daemon's 2 MiB
 * ranges none of their hints while it gave 64 MiB ones theirs (GPU run 4); "hole:N" a hole of N bytes among the
 * driver's own ranges, where a hinted range that fits goes instead of to its hint until the hole is full (held
 * ranges fill it, freed ones empty it again), as the same driver on an H200 placed 64 MiB ranges at one address
 * 0x7f... whatever their hint during a JAX session (GPU run 5). The daemon then chooses (in this
 * client's own window), so two cuda daemons chained over emulated ones with the same PYVGPU_VA_BASE hand out the
 * same addresses: the collisions the client core must catch (pv_malloc_unique). */
static uint64_t ignored_lo, ignored_hi;       /* hints in [lo, hi) are ignored */
static uint64_t ignored_below;                /* hints of ranges smaller than this are ignored */
static pthread_once_t ignored_once = PTHREAD_ONCE_INIT;

/* A number of a clause at `text` as C reads it (0x... allowed), *end past it; → whether it was one. strtoull alone
 * would take blanks and a sign ("below:-1" read as 2^64 - 1: every hint ignored) and clamp an overflow. */
static int clause_number(const char *text, char **end, uint64_t *out)
{
    if (!isdigit((unsigned char)*text))
        return 0;
    errno = 0;
    unsigned long long n = strtoull(text, end, 0);
    if (errno == ERANGE)
        return 0;
    *out = n;
    return 1;
}

/* A clause's byte count ("below:N", "hole:N"): a whole positive number; → whether it was one. */
static int byte_count(const char *text, uint64_t *out)
{
    char *end;
    uint64_t n;
    if (!clause_number(text, &end, &n) || *end || !n)
        return 0;
    *out = n;
    return 1;
}

/* One clause of PYVGPU_FAKE_VA_HINTS, [s, s + n); → whether it was understood. */
static int read_clause(const char *s, size_t n)
{
    char buf[96], *end = NULL;
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!strcmp(buf, "ignore")) {
        ignored_lo = 0;
        ignored_hi = UINT64_MAX;
        return 1;
    }
    if (!strncmp(buf, "ignore:", 7)) {
        uint64_t lo, hi;
        if (!clause_number(buf + 7, &end, &lo) || *end != '-' || !clause_number(end + 1, &end, &hi) || *end ||
            lo >= hi)
            return 0;
        ignored_lo = lo;
        ignored_hi = hi;
        return 1;
    }
    if (!strncmp(buf, "below:", 6))
        return byte_count(buf + 6, &ignored_below);
    if (!strncmp(buf, "hole:", 5))
        return byte_count(buf + 5, &hole_left);
    return 0;
}

static void read_ignored(void)
{
    const char *env = getenv("PYVGPU_FAKE_VA_HINTS");
    if (!env || !*env)
        return;
    for (const char *s = env; *s;) {
        size_t n = strcspn(s, ",");
        if (!read_clause(s, n)) {
            pv_log("PYVGPU_FAKE_VA_HINTS=%s ignored (clauses \"ignore\", \"ignore:LO-HI\", \"below:N\", \"hole:N\")",
                   env);
            ignored_lo = ignored_hi = ignored_below = hole_left = 0;
            return;
        }
        s += n + (s[n] == ',');
    }
    pv_log("PYVGPU_FAKE_VA_HINTS=%s: cuMemAddressReserve ignores hints in [%#llx, %#llx), of ranges under %llu "
           "bytes and of ranges that fit a hole of %llu bytes (a test knob)", env, (unsigned long long)ignored_lo,
           (unsigned long long)ignored_hi, (unsigned long long)ignored_below, (unsigned long long)hole_left);
}

static int hint_ignored(uint64_t addr, size_t size)
{
    pthread_once(&ignored_once, read_ignored);
    return (addr >= ignored_lo && addr < ignored_hi) || size < ignored_below;
}

PV_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || !size || flags || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (addr && hint_ignored(addr, size))
        addr = 0;
    int in_hole = 0;
    pthread_mutex_lock(&mu);
    if (addr && size <= hole_left) {   /* read_ignored ran in hint_ignored */
        hole_left -= size;
        in_hole = 1;
        addr = 0;
    }
    pthread_mutex_unlock(&mu);
    int dev = addr ? window_device(addr) : -1;
    struct pv_ctx *c = dev < 0 ? drv_ctx_top() : NULL;
    if (dev < 0)
        dev = c ? c->dev : 0;
    struct pv_device *d = pv_device(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!d->vmm_granularity)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&mu);
    purge();
    if (addr && overlaps_reservation(addr, size))
        addr = 0;                   /* a hint over another reservation of this process: the daemon chooses */
    pthread_mutex_unlock(&mu);
    uint64_t got = 0;
    r = drv_result(pv_call_VMM_RESERVE(d, size, alignment, addr, &got));
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&mu);
        if (overlaps_reservation(got, size) || grow((void **)&res, &capres, nres, sizeof *res) != 0) {
            pthread_mutex_unlock(&mu);
            pv_call_VMM_FREE(d, got, size);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (r != CUDA_SUCCESS) {
        if (in_hole) {
            pthread_mutex_lock(&mu);
            hole_left += size;
            pthread_mutex_unlock(&mu);
        }
        return r;
    }
    res[nres++] = (struct vmm_res){ got, size, dev, atomic_load(&d->reset_gen), NULL, 0, in_hole };
    pthread_mutex_unlock(&mu);
    *ptr = got;
    return CUDA_SUCCESS;
}

PV_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct vmm_res *v = reservation_of(ptr, size);
    struct vmm_res found = v ? *v : (struct vmm_res){ 0 };
    pthread_mutex_unlock(&mu);
    if (!v || found.addr != ptr || found.size != size)
        return CUDA_ERROR_INVALID_VALUE;
    r = drv_result(pv_call_VMM_FREE(pv_device(found.dev), ptr, size));
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nres; i++)
        if (res[i].addr == ptr) {
            if (res[i].in_hole)
                hole_left += res[i].size;
            free(res[i].runs);
            res[i] = res[--nres];
            break;
        }
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

PV_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    struct pv_device *d;
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || !size || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = prop_device(prop, &d)) != CUDA_SUCCESS)
        return r;
    if (prop->requestedHandleTypes || prop->win32HandleMetaData)
        return CUDA_ERROR_NOT_SUPPORTED;            /* shareable handles are not offered */
    struct vmm_handle *v = calloc(1, sizeof *v);
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned gen = atomic_load(&d->reset_gen);
    uint64_t remote = 0;
    r = drv_result(pv_call_VMM_CREATE(d, size, &remote));
    if (r != CUDA_SUCCESS) {
        free(v);
        return r;
    }
    *v = (struct vmm_handle){ VMM_HANDLE_MAGIC, d->index, gen, remote, size, *prop, 1, 0 };
    pv_handle_add(v);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

/* The handle's last reference and last mapping are gone (with mu held): the daemon frees it. */
static void drop_if_unused(struct vmm_handle *v)
{
    if (v->refs > 0 || v->maps > 0)
        return;
    v->magic = 0;
    pv_handle_remove(v);
    if (!stale(v->dev, v->gen))
        pv_call_VMM_RELEASE(pv_device(v->dev), v->remote);
    free(v);
}

PV_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct vmm_handle *v = handle_of(handle);
    if (v) {
        v->refs--;
        drop_if_unused(v);
    }
    pthread_mutex_unlock(&mu);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct vmm_map *m = mapping_at((uint64_t)(uintptr_t)addr);
    if (m) {
        m->h->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
    }
    pthread_mutex_unlock(&mu);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct vmm_handle *v = handle_of(handle);
    if (v)
        *prop = v->prop;
    pthread_mutex_unlock(&mu);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PV_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    if (flags || !size)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct vmm_handle *v = handle_of(handle);
    struct vmm_res *where = reservation_of(ptr, size);
    int dev = where ? where->dev : -1;
    uint64_t remote = v ? v->remote : 0;
    pthread_mutex_unlock(&mu);
    if (!v || !where)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != v->dev) {
        static atomic_int once;
        pv_log_once(&once, "cuMemMap: an allocation of GPU%d into a reservation of GPU%d is not supported (GPUs of "
                           "different hosts share no address space here)", v->dev, dev);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    r = drv_result(pv_call_VMM_MAP(pv_device(dev), ptr, size, offset, remote));
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&mu);
    if (grow((void **)&maps, &capmaps, nmaps, sizeof *maps) != 0) {
        pthread_mutex_unlock(&mu);
        pv_call_VMM_UNMAP(pv_device(dev), ptr, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    maps[nmaps++] = (struct vmm_map){ ptr, size, v, 0 };
    v->maps++;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

PV_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev = covered_device(ptr, size);
    pthread_mutex_unlock(&mu);
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    r = drv_result(pv_call_VMM_UNMAP(pv_device(dev), ptr, size));
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nmaps;) {
        if (maps[i].addr >= ptr && maps[i].addr < ptr + size) {
            struct vmm_handle *v = maps[i].h;
            maps[i] = maps[--nmaps];
            v->maps--;
            drop_if_unused(v);
        } else {
            i++;
        }
    }
    struct vmm_res *where = reservation_of(ptr, size);
    if (where)
        rerun(where);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

PV_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (!desc || !count || !size)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev = covered_device(ptr, size);
    pthread_mutex_unlock(&mu);
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    int mine = -1;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return desc[i].location.type >= 2 && desc[i].location.type <= 4 ? CUDA_ERROR_NOT_SUPPORTED
                                                                              : CUDA_ERROR_INVALID_VALUE;
        if (!pv_device(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != PV_VMM_ACCESS_NONE && desc[i].flags != PV_VMM_ACCESS_READ &&
            desc[i].flags != PV_VMM_ACCESS_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.id == dev)
            mine = (int)i;
        else if (desc[i].flags != PV_VMM_ACCESS_NONE) {
            static atomic_int once;
            pv_log_once(&once, "cuMemSetAccess: GPU%d's memory cannot be made accessible to GPU%d (only its own "
                               "device's kernels reach memory mapped here)", dev, desc[i].location.id);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    if (mine < 0)
        return CUDA_SUCCESS;
    unsigned flags = (unsigned)desc[mine].flags;
    r = drv_result(pv_call_VMM_SET_ACCESS(pv_device(dev), ptr, size, flags));
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].addr >= ptr && maps[i].addr < ptr + size)
            maps[i].access = flags;
    struct vmm_res *where = reservation_of(ptr, size);
    if (where)
        rerun(where);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

PV_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!pv_device(location->id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    purge();
    struct vmm_map *m = mapping_at(ptr);
    if (m)
        *flags = m->h->dev == location->id ? m->access : PV_VMM_ACCESS_NONE;
    pthread_mutex_unlock(&mu);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
