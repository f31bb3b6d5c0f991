/* Client-side tables: registered fatbins, functions and variables (by host stub pointer), per-device module load
 * state and kernel parameter layouts, device allocations (pointer → device), and the set of live handles
 * (streams, events, functions) so garbage handles are refused without being dereferenced. Each table has its own
 * short lock; no lock is held across network calls except a fatbin's load lock (first use on a device). */
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_refusal.h"
#include "pv_registry.h"
#include "pv_hostmem.h"

#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_CONTAINER_MAGIC 0xBA55ED50u

struct pv_fatbin {
    uint32_t magic;
    const void *image;
    size_t size;
    const void *origin;                 /* where the program had the image (its library: for messages) */
    uint64_t module_id;
    pthread_mutex_t mu;                 /* serializes module loads of this fatbin */
    int loaded[PV_MAX_DEVICES];         /* 0 not yet, 1 loaded, <0 failed (negated error) */
    struct pv_func **funcs;
    int nfuncs, capfuncs;
    struct pv_var **vars;
    int nvars, capvars;
    struct pv_fatbin *next;
};
static struct pv_fatbin *fatbins;
static pthread_mutex_t fatbins_mu = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------------------------ handle set */
#define HSET_BUCKETS 1024
struct hnode { const void *h; struct hnode *next; };
static struct hnode *hset[HSET_BUCKETS];
static pthread_mutex_t hset_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t hash_ptr(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 40) % HSET_BUCKETS;
}

void pv_handle_add(const void *h)
{
    struct hnode *n = malloc(sizeof *n);
    if (!n)
        return;
    n->h = h;
    size_t b = hash_ptr(h);
    pthread_mutex_lock(&hset_mu);
    n->next = hset[b];
    hset[b] = n;
    pthread_mutex_unlock(&hset_mu);
}

int pv_handle_remove(const void *h)
{
    size_t b = hash_ptr(h);
    pthread_mutex_lock(&hset_mu);
    for (struct hnode **pp = &hset[b]; *pp; pp = &(*pp)->next) {
        if ((*pp)->h == h) {
            struct hnode *n = *pp;
            *pp = n->next;
            pthread_mutex_unlock(&hset_mu);
            free(n);
            return 0;
        }
    }
    pthread_mutex_unlock(&hset_mu);
    return -1;
}

int pv_handle_valid(const void *h)
{
    if (!h)
        return 0;
    size_t b = hash_ptr(h);
    pthread_mutex_lock(&hset_mu);
    int found = 0;
    for (struct hnode *n = hset[b]; n; n = n->next)
        if (n->h == h) {
            found = 1;
            break;
        }
    pthread_mutex_unlock(&hset_mu);
    return found;
}

cudaError_t pv_stream_resolve(cudaStream_t s, struct pv_device *d, uint64_t *remote, struct pv_device **sdev)
{
    if ((uintptr_t)s <= 2) {
        *remote = 0;
        if (sdev)
            *sdev = d;
        return PV_SUCCESS;
    }
    if (!pv_handle_valid(s) || s->magic != PV_STREAM_MAGIC)
        return PV_cudaErrorInvalidResourceHandle;
    *remote = s->remote;
    if (sdev)
        *sdev = pv_device(s->dev);
    return PV_SUCCESS;
}

int pv_stream_ok(cudaStream_t s)
{
    uint64_t remote;
    return pv_stream_resolve(s, NULL, &remote, NULL) == PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------ functions, vars */
#define FTAB_BUCKETS 512
struct fnode { const void *key; void *val; struct fnode *next; };
static struct fnode *ftab[FTAB_BUCKETS], *vtab[FTAB_BUCKETS];
static pthread_mutex_t ftab_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t next_module_id = 1;

static void tab_put(struct fnode **tab, const void *key, void *val)
{
    struct fnode *n = malloc(sizeof *n);
    if (!n)
        return;
    n->key = key;
    n->val = val;
    size_t b = hash_ptr(key) % FTAB_BUCKETS;
    pthread_mutex_lock(&ftab_mu);
    n->next = tab[b];
    tab[b] = n;
    pthread_mutex_unlock(&ftab_mu);
}

static void *tab_get(struct fnode **tab, const void *key)
{
    size_t b = hash_ptr(key) % FTAB_BUCKETS;
    void *val = NULL;
    pthread_mutex_lock(&ftab_mu);
    for (struct fnode *n = tab[b]; n; n = n->next)
        if (n->key == key) {
            val = n->val;
            break;
        }
    pthread_mutex_unlock(&ftab_mu);
    return val;
}

struct pv_func *pv_func_by_host(const void *host_fun) { return tab_get(ftab, host_fun); }
struct pv_var *pv_var_by_host(const void *host_var) { return tab_get(vtab, host_var); }

int pv_func_valid(const struct pv_func *f)
{
    return f && pv_handle_valid(f) && f->magic == PV_FUNC_MAGIC;
}

/* One handle per (kernel, device), kept in the kernel (they die with its module's unload). */
#define PV_FUNC_HANDLE_MAGIC 0x44465543u
static pthread_mutex_t fhandle_mu = PTHREAD_MUTEX_INITIALIZER;

struct pv_func_handle *pv_func_handle(struct pv_func *f, int dev)
{
    pthread_mutex_lock(&fhandle_mu);
    struct pv_func_handle *h = f->api_handle[dev];
    if (!h && (h = calloc(1, sizeof *h))) {
        *h = (struct pv_func_handle){ PV_FUNC_HANDLE_MAGIC, f, dev };
        pv_handle_add(h);
        f->api_handle[dev] = h;
    }
    pthread_mutex_unlock(&fhandle_mu);
    return h;
}

struct pv_func_handle *pv_func_handle_of(const void *p)
{
    const struct pv_func_handle *h = p;
    return h && pv_handle_valid(h) && h->magic == PV_FUNC_HANDLE_MAGIC && pv_func_valid(h->f)
               ? (struct pv_func_handle *)h : NULL;
}

static int grow(void *arr, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return 0;
    int nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*(void **)arr, (size_t)nc * elem);
    if (!p)
        return -1;
    *(void **)arr = p;
    *cap = nc;
    return 0;
}

/* Bytes of a module image: a fatbin wrapper (its container's), a fatbin container (header + payload), an ELF
 * cubin (up to the end of its section/program header tables), or NUL-terminated PTX text. 0: not recognised. */
size_t pv_image_size(const void *image)
{
    const unsigned char *p = image;
    uint32_t magic;
    if (!p)
        return 0;
    memcpy(&magic, p, 4);
    if (magic == FATBIN_WRAPPER_MAGIC) {
        const unsigned char *data;
        memcpy(&data, p + 8, sizeof data);
        uint32_t inner = 0;
        if (data)
            memcpy(&inner, data, 4);
        return inner == FATBIN_CONTAINER_MAGIC ? pv_image_size(data) : 0;
    }
    if (magic == FATBIN_CONTAINER_MAGIC) {
        uint16_t hsize;
        uint64_t psize;
        memcpy(&hsize, p + 6, 2);
        memcpy(&psize, p + 8, 8);
        return (size_t)hsize + (size_t)psize;
    }
    if (memcmp(p, "\177ELF", 4) == 0 && p[4] == 2) {   /* ELFCLASS64 */
        uint64_t shoff, phoff;
        uint16_t phentsize, phnum, shentsize, shnum;
        memcpy(&phoff, p + 0x20, 8);
        memcpy(&shoff, p + 0x28, 8);
        memcpy(&phentsize, p + 0x36, 2);
        memcpy(&phnum, p + 0x38, 2);
        memcpy(&shentsize, p + 0x3A, 2);
        memcpy(&shnum, p + 0x3C, 2);
        uint64_t a = shoff + (uint64_t)shentsize * shnum, b = phoff + (uint64_t)phentsize * phnum;
        return (size_t)(a > b ? a : b);
    }
    return strlen((const char *)p) + 1;    /* PTX: text up to its NUL, which the daemon expects too */
}

static struct pv_fatbin *fatbin_new(const void *image, size_t size)
{
    struct pv_fatbin *fb = calloc(1, sizeof *fb);
    if (!fb) {
        pv_log("out of memory registering a module");
        return NULL;
    }
    fb->magic = 0xFA7B1111u;
    pthread_mutex_init(&fb->mu, NULL);
    fb->module_id = atomic_fetch_add(&next_module_id, 1);
    fb->image = image;
    fb->size = size;
    pthread_mutex_lock(&fatbins_mu);
    fb->next = fatbins;
    fatbins = fb;
    pthread_mutex_unlock(&fatbins_mu);
    return fb;
}

struct pv_fatbin *pv_fatbin_register(const void *fatCubin)
{
    const uint32_t *w = fatCubin;
    const void *image = NULL;
    size_t size = 0;
    if (w && w[0] == FATBIN_WRAPPER_MAGIC) {
        image = *(const void *const *)((const char *)fatCubin + 8);
        if (!(size = pv_image_size(fatCubin))) {
            image = NULL;
            pv_log("fatbin wrapper at %p does not point at a fatbin container", fatCubin);
        }
    } else if (w) {
        pv_log("unrecognised fatbin wrapper at %p (magic 0x%08x)", fatCubin, w[0]);
    }
    return fatbin_new(image, size);
}

struct pv_fatbin *pv_fatbin_from_image(const void *image, int copy)
{
    size_t size = pv_image_size(image);
    if (!size)
        return NULL;
    const void *img = image;
    if (*(const uint32_t *)image == FATBIN_WRAPPER_MAGIC)
        img = *(const void *const *)((const char *)image + 8);
    if (copy) {
        void *c = malloc(size);
        if (!c)
            return NULL;
        memcpy(c, img, size);
        img = c;
    }
    struct pv_fatbin *fb = fatbin_new(img, size);
    if (fb)
        fb->origin = image;
    return fb;
}

void pv_modules_forget_device(int di)
{
    pthread_mutex_lock(&fatbins_mu);
    for (struct pv_fatbin *fb = fatbins; fb; fb = fb->next) {
        pthread_mutex_lock(&fb->mu);
        fb->loaded[di] = 0;
        for (int i = 0; i < fb->nfuncs; i++)
            fb->funcs[i]->dev[di] = NULL;   /* leaked on purpose: a concurrent launch may still read it */
        for (int i = 0; i < fb->nvars; i++)
            fb->vars[i]->have[di] = 0;
        pthread_mutex_unlock(&fb->mu);
    }
    pthread_mutex_unlock(&fatbins_mu);
}

/* A kernel of fb named name; the caller holds fb->mu. */
static struct pv_func *add_func_locked(struct pv_fatbin *fb, const void *host_fun, const char *name)
{
    struct pv_func *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name)) || grow(&fb->funcs, &fb->capfuncs, fb->nfuncs, sizeof *fb->funcs) != 0) {
        if (f)
            free(f->name);
        free(f);
        pv_log("out of memory registering kernel %s", name);
        return NULL;
    }
    f->magic = PV_FUNC_MAGIC;
    f->fb = fb;
    f->host_fun = host_fun;
    fb->funcs[fb->nfuncs++] = f;
    pv_handle_add(f);
    if (host_fun)
        tab_put(ftab, host_fun, f);
    return f;
}

struct pv_func *pv_fatbin_add_func(struct pv_fatbin *fb, const void *host_fun, const char *name)
{
    if (!fb || !name)
        return NULL;
    pthread_mutex_lock(&fb->mu);
    struct pv_func *f = add_func_locked(fb, host_fun, name);
    pthread_mutex_unlock(&fb->mu);
    return f;
}

/* A variable of fb named name; the caller holds fb->mu. */
static struct pv_var *add_var_locked(struct pv_fatbin *fb, const void *host_var, const char *name, size_t size)
{
    struct pv_var *v = calloc(1, sizeof *v);
    if (!v || !(v->name = strdup(name)) || grow(&fb->vars, &fb->capvars, fb->nvars, sizeof *fb->vars) != 0) {
        if (v)
            free(v->name);
        free(v);
        pv_log("out of memory registering variable %s", name);
        return NULL;
    }
    v->fb = fb;
    v->host_var = host_var;
    v->size = size;
    fb->vars[fb->nvars++] = v;
    if (host_var)
        tab_put(vtab, host_var, v);
    return v;
}

struct pv_var *pv_fatbin_add_var(struct pv_fatbin *fb, const void *host_var, const char *name, size_t size)
{
    if (!fb || !name)
        return NULL;
    pthread_mutex_lock(&fb->mu);
    struct pv_var *v = add_var_locked(fb, host_var, name, size);
    pthread_mutex_unlock(&fb->mu);
    return v;
}

struct pv_func *pv_fatbin_func(struct pv_fatbin *fb, const char *name)
{
    struct pv_func *f = NULL;
    pthread_mutex_lock(&fb->mu);
    for (int i = 0; i < fb->nfuncs && !f; i++)
        if (strcmp(fb->funcs[i]->name, name) == 0)
            f = fb->funcs[i];
    pthread_mutex_unlock(&fb->mu);
    return f;
}

struct pv_func *pv_fatbin_func_at(struct pv_fatbin *fb, int i)
{
    pthread_mutex_lock(&fb->mu);
    struct pv_func *f = i >= 0 && i < fb->nfuncs ? fb->funcs[i] : NULL;
    pthread_mutex_unlock(&fb->mu);
    return f;
}

struct pv_var *pv_fatbin_var(struct pv_fatbin *fb, const char *name)
{
    struct pv_var *v = NULL;
    pthread_mutex_lock(&fb->mu);
    for (int i = 0; i < fb->nvars && !v; i++)
        if (strcmp(fb->vars[i]->name, name) == 0)
            v = fb->vars[i];
    pthread_mutex_unlock(&fb->mu);
    return v;
}

void pv_fatbin_unload(struct pv_fatbin *fb)
{
    pthread_mutex_lock(&fb->mu);
    for (int di = 0; di < PV_MAX_DEVICES; di++) {
        struct pv_device *d = fb->loaded[di] == 1 ? pv_device(di) : NULL;
        if (d && pv_send_MODULE_UNLOAD(d, fb->module_id) != PV_SUCCESS)
            pv_log("unloading module %llu on GPU%d failed", (unsigned long long)fb->module_id, di);
        for (int i = 0; d && i < fb->nvars; i++) {
            int dev;
            if (fb->vars[i]->have[di])
                pv_alloc_remove(fb->vars[i]->addr[di], &dev);
        }
        fb->loaded[di] = 0;
    }
    /* Functions and variables stay allocated (a racing caller may hold one) but are no longer valid handles. */
    for (int i = 0; i < fb->nfuncs; i++)
        pv_handle_remove(fb->funcs[i]);
    fb->image = NULL;
    pthread_mutex_unlock(&fb->mu);
}

/* ------------------------------------------------------------------------------------------ module load */
static struct pv_kinfo *parse_kernel(const msgpack_object *k)
{
    struct pv_kinfo *ki = calloc(1, sizeof *ki);
    if (!ki)
        return NULL;
    if (pv_obj_u64(pv_map_get(k, PV_KEY_KERNEL_ID), &ki->func_id) != 0) {
        free(ki);
        return NULL;
    }
    const msgpack_object *ps = pv_map_get(k, PV_KEY_KERNEL_PARAMS);
    if (ps && ps->type == MSGPACK_OBJECT_ARRAY && ps->via.array.size) {
        ki->params = calloc(ps->via.array.size, sizeof *ki->params);
        if (!ki->params) {
            free(ki);
            return NULL;
        }
        for (uint32_t i = 0; i < ps->via.array.size; i++) {
            const msgpack_object *p = &ps->via.array.ptr[i];
            uint64_t off, sz;
            if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 2 ||
                pv_obj_u64(&p->via.array.ptr[0], &off) != 0 || pv_obj_u64(&p->via.array.ptr[1], &sz) != 0 ||
                off > 65536 || sz > 65536) {
                free(ki->params);
                free(ki);
                return NULL;
            }
            ki->params[i][0] = (uint32_t)off;
            ki->params[i][1] = (uint32_t)sz;
            if (off + sz > ki->param_bytes)
                ki->param_bytes = (size_t)(off + sz);
        }
        ki->nparams = (int)ps->via.array.size;
    }
    const msgpack_object *a = pv_map_get(k, PV_KEY_KERNEL_ATTRS);
    int64_t v;
    ki->max_threads = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_MAX_THREADS_PER_BLOCK), &v) == 0 ? v : 1024;
    ki->shared = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_SHARED_SIZE_BYTES), &v) == 0 ? v : 0;
    ki->constant = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_CONST_SIZE_BYTES), &v) == 0 ? v : 0;
    ki->local = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_LOCAL_SIZE_BYTES), &v) == 0 ? v : 0;
    ki->regs = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_NUM_REGS), &v) == 0 ? v : 32;
    ki->ptx = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_PTX_VERSION), &v) == 0 ? v : 0;
    ki->binary = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_BINARY_VERSION), &v) == 0 ? v : 0;
    ki->max_dyn_shared = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES), &v) == 0 ? v : 49152;
    ki->carveout = pv_obj_i64(pv_map_get(a, PV_KEY_KATTR_PREFERRED_SHMEM_CARVEOUT), &v) == 0 ? v : -1;
    return ki;
}

/* Kernels and variables the module has but nobody registered (a module loaded through the driver API) become
 * functions and variables of fb, so they can be found by name. The caller holds fb->mu. */
static void adopt_names(struct pv_fatbin *fb, const msgpack_object *kernels, const msgpack_object *vars)
{
    char name[1024];
    const msgpack_object *maps[2] = { kernels, vars };
    for (int m = 0; m < 2; m++) {
        if (!maps[m] || maps[m]->type != MSGPACK_OBJECT_MAP)
            continue;
        for (uint32_t i = 0; i < maps[m]->via.map.size; i++) {
            if (pv_obj_str(&maps[m]->via.map.ptr[i].key, name, sizeof name) != 0)
                continue;
            int known = 0;
            for (int j = 0; m == 0 && j < fb->nfuncs && !known; j++)
                known = strcmp(fb->funcs[j]->name, name) == 0;
            for (int j = 0; m == 1 && j < fb->nvars && !known; j++)
                known = strcmp(fb->vars[j]->name, name) == 0;
            if (!known && m == 0)
                add_func_locked(fb, NULL, name);
            else if (!known)
                add_var_locked(fb, NULL, name, 0);
        }
    }
}

cudaError_t pv_module_load_now(struct pv_fatbin *fb, struct pv_device *d)
{
    int di = d->index;
    pthread_mutex_lock(&fb->mu);
    if (fb->loaded[di] != 0) {
        int st = fb->loaded[di];
        pthread_mutex_unlock(&fb->mu);
        return st > 0 ? PV_SUCCESS : -st;
    }
    if (!fb->image) {
        pthread_mutex_unlock(&fb->mu);
        return PV_cudaErrorInvalidKernelImage;
    }
    struct pv_reply rep = { 0 };
    cudaError_t err = pv_call_MODULE_LOAD(d, fb->module_id, fb->image, fb->size, &rep);
    if (err == PV_ERR_UNAVAILABLE) {   /* transient for this call; do not latch */
        pthread_mutex_unlock(&fb->mu);
        return err;
    }
    if (err == PV_SUCCESS) {
        const msgpack_object *kernels = pv_map_get(rep.result, PV_KEY_MODULE_KERNELS);
        const msgpack_object *vars = pv_map_get(rep.result, PV_KEY_MODULE_VARS);
        adopt_names(fb, kernels, vars);
        for (int i = 0; i < fb->nfuncs; i++) {
            struct pv_func *f = fb->funcs[i];
            const msgpack_object *k = pv_map_get(kernels, f->name);
            if (k && !f->dev[di])
                f->dev[di] = parse_kernel(k);
        }
        for (int i = 0; i < fb->nvars; i++) {
            struct pv_var *v = fb->vars[i];
            const msgpack_object *e = pv_map_get(vars, v->name);
            uint64_t addr, size;
            if (e && e->type == MSGPACK_OBJECT_ARRAY && e->via.array.size == 2 &&
                pv_obj_u64(&e->via.array.ptr[0], &addr) == 0 && pv_obj_u64(&e->via.array.ptr[1], &size) == 0) {
                v->addr[di] = addr;
                v->have[di] = 1;
                if (size && size != v->size)
                    v->size = (size_t)size;
                /* symbol addresses are device pointers for copies; the module owns the storage */
                pv_alloc_add_owned(addr, v->size, di, PV_OWNER_DEVICE);
            }
        }
        fb->loaded[di] = 1;
    } else {
        pv_explain_refusal(fb->image, fb->size, fb->origin ? fb->origin : fb->image, d, err);
        fb->loaded[di] = -err;
    }
    pv_reply_free(&rep);
    pthread_mutex_unlock(&fb->mu);
    return err;
}

cudaError_t pv_module_ensure(struct pv_fatbin *fb, struct pv_device *d)
{
    cudaError_t err = pv_module_load_now(fb, d);
    if (err != PV_SUCCESS && err != PV_ERR_UNAVAILABLE)
        pv_refusal_latch(d, err);
    return err;
}

/* ------------------------------------------------------------------------------------------ allocations */
static struct pv_alloc *allocs;
/* reach[i]: the highest end of allocs[0..i]. A lookup walks back from the last entry starting at or below its
 * address only while an entry at or before that index reaches past it: O(log n) for a pointer in no entry, where a
 * bound by the largest entry's size walked over every entry within it (bench/alloc_lookup_bench.py: 26 us per miss
 * with 10,000 allocations above a 60 GiB pool). Kept with the entries: rebuilt from an insertion or removal on. */
static uint64_t *reach;
static size_t nallocs, capallocs;
static pthread_rwlock_t alloc_mu = PTHREAD_RWLOCK_INITIALIZER;

static uint64_t end_of(const struct pv_alloc *a)   /* one past the entry's last byte (saturating) */
{
    uint64_t n = a->size ? a->size : 1;
    return a->ptr > UINT64_MAX - n ? UINT64_MAX : a->ptr + n;
}

static void reach_from(size_t i)   /* reach[i..] after the entries from i on changed (alloc_mu held for writing) */
{
    for (; i < nallocs; i++) {
        uint64_t e = end_of(&allocs[i]);
        reach[i] = i > 0 && reach[i - 1] > e ? reach[i - 1] : e;
    }
}

static size_t lower_bound(uint64_t ptr)   /* first index with allocs[i].ptr > ptr */
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid].ptr <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The entry containing ptr (of device memory only when want_dev): the one starting last at or below it, else an
 * earlier one. Entries overlap when a GPU host's driver placed device memory at addresses where this process has
 * host memory of its own (outside the daemon's window: GPU run 3, an H100, where JAX's memsets on its pool then
 * failed); the innermost entry wins, and device memory stays device memory past the host memory inside it. The walk
 * ends where no earlier entry reaches ptr (reach). */
static const struct pv_alloc *containing(uint64_t ptr, int want_dev)
{
    for (size_t i = lower_bound(ptr); i > 0 && reach[i - 1] > ptr; i--) {
        const struct pv_alloc *a = &allocs[i - 1];
        if (ptr < end_of(a) && (!want_dev || a->dev >= 0))
            return a;
    }
    return NULL;
}

/* Says once when device memory and this process's host memory share addresses (with alloc_mu held). */
static void note_overlap(uint64_t ptr, size_t size, int dev, size_t at)
{
    static atomic_int once;
    const struct pv_alloc *o = containing(ptr, 0);
    if (!o && at < nallocs && allocs[at].ptr < ptr + size)
        o = &allocs[at];
    if (!o || (o->dev < 0) == (dev < 0))
        return;
    const struct pv_alloc *d = dev >= 0 ? &(struct pv_alloc){ ptr, size, dev, NULL } : o;
    const struct pv_alloc *h = dev >= 0 ? o : &(struct pv_alloc){ ptr, size, dev, NULL };
    pv_log_once(&once, "device memory [%#llx, +%zu) of GPU%d and host memory [%#llx, +%zu) of this process share "
                "addresses (the GPU host's driver placed it outside pyvgpu's window): a pointer into the host memory "
                "is taken as host memory there", (unsigned long long)d->ptr, d->size, d->dev,
                (unsigned long long)h->ptr, h->size);
}

void pv_alloc_add(uint64_t ptr, size_t size, int dev) { pv_alloc_add_owned(ptr, size, dev, pv_tls_owner()); }

const char pv_owner_vmm;

/* Inserts an entry, with alloc_mu held for writing. */
static void add_locked(uint64_t ptr, size_t size, int dev, const void *owner)
{
    if (nallocs == capallocs) {
        size_t nc = capallocs ? capallocs * 2 : 256;
        struct pv_alloc *p = realloc(allocs, nc * sizeof *p);
        if (p)
            allocs = p;
        uint64_t *r = p ? realloc(reach, nc * sizeof *r) : NULL;
        if (!r) {
            pv_log("out of memory tracking an allocation");
            return;
        }
        reach = r;
        capallocs = nc;
    }
    size_t i = lower_bound(ptr);
    note_overlap(ptr, size, dev, i);
    memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    allocs[i] = (struct pv_alloc){ ptr, size, dev, owner };
    nallocs++;
    reach_from(i);
}

void pv_alloc_add_owned(uint64_t ptr, size_t size, int dev, const void *owner)
{
    pthread_rwlock_wrlock(&alloc_mu);
    add_locked(ptr, size, dev, owner);
    pthread_rwlock_unlock(&alloc_mu);
}

/* The live entry [ptr, ptr+size) overlaps, or NULL: only the last one starting below its end can (entries do not
 * overlap one another). With alloc_mu held. */
static const struct pv_alloc *overlapping(uint64_t ptr, size_t size)
{
    size_t i = lower_bound(ptr + (size ? size : 1) - 1);
    if (i > 0) {
        const struct pv_alloc *a = &allocs[i - 1];
        if (end_of(a) > ptr)
            return a;
    }
    return NULL;
}

int pv_alloc_claim(uint64_t ptr, size_t size, int dev, const void *owner, struct pv_alloc *hit)
{
    pthread_rwlock_wrlock(&alloc_mu);
    const struct pv_alloc *a = overlapping(ptr, size);
    if (a) {
        *hit = *a;
        pthread_rwlock_unlock(&alloc_mu);
        return -1;
    }
    add_locked(ptr, size, dev, owner);
    pthread_rwlock_unlock(&alloc_mu);
    return 0;
}

int pv_alloc_remove(uint64_t ptr, int *dev)
{
    pthread_rwlock_wrlock(&alloc_mu);
    size_t i = lower_bound(ptr);
    if (i == 0 || allocs[i - 1].ptr != ptr) {
        pthread_rwlock_unlock(&alloc_mu);
        return -1;
    }
    *dev = allocs[i - 1].dev;
    memmove(&allocs[i - 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    nallocs--;
    reach_from(i - 1);
    pthread_rwlock_unlock(&alloc_mu);
    return 0;
}

static int find(uint64_t ptr, int want_dev, struct pv_alloc *out)
{
    pthread_rwlock_rdlock(&alloc_mu);
    const struct pv_alloc *a = containing(ptr, want_dev);
    if (a)
        *out = *a;
    pthread_rwlock_unlock(&alloc_mu);
    return a ? 0 : -1;
}

int pv_alloc_find(uint64_t ptr, struct pv_alloc *out) { return find(ptr, 0, out); }
int pv_alloc_find_device(uint64_t ptr, struct pv_alloc *out) { return find(ptr, 1, out); }

size_t pv_alloc_owned(const void *owner, int dev, int with_host, uint64_t **out)
{
    pthread_rwlock_rdlock(&alloc_mu);
    size_t n = 0;
    *out = malloc(sizeof **out * (nallocs ? nallocs : 1));
    for (size_t i = 0; *out && i < nallocs; i++)
        if (allocs[i].owner == owner && (allocs[i].dev == dev || (with_host && allocs[i].dev < 0)))
            (*out)[n++] = allocs[i].ptr;
    pthread_rwlock_unlock(&alloc_mu);
    return n;
}

void pv_alloc_forget_device(int dev)
{
    pthread_rwlock_wrlock(&alloc_mu);
    size_t j = 0;
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].dev != dev)
            allocs[j++] = allocs[i];
    nallocs = j;
    reach_from(0);
    pthread_rwlock_unlock(&alloc_mu);
}

/* ------------------------------------------------------------------------------------------ host memory */
/* Pinned host memory of a client whose GPUs are remote is ordinary page-aligned memory; it is recorded in the
 * allocation table with a negative device (-1 - flags) so pointer queries and cudaMemcpyDefault know it. */
cudaError_t pv_host_alloc(size_t size, unsigned flags, void **out)
{
    void *p = NULL;
    /* whole pages: the memory may get a coherent device copy (cudaHostGetDevicePointer), whose page tracking must
     * not take in the malloc heap's own data */
    size_t rounded = ((size ? size : 1) + PV_HOST_ALIGN - 1) / PV_HOST_ALIGN * PV_HOST_ALIGN;
    if (posix_memalign(&p, PV_HOST_ALIGN, rounded) != 0)
        return PV_cudaErrorMemoryAllocation;
    pv_alloc_add((uint64_t)(uintptr_t)p, size ? size : 1, -1 - (int)(flags & 0xff));
    pv_host_pinned_note((uint64_t)(uintptr_t)p, size ? size : 1);
    *out = p;
    return PV_SUCCESS;
}

cudaError_t pv_host_free(void *ptr)
{
    struct pv_alloc a;
    int dev;
    if (pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) != 0 || a.dev >= 0 || a.ptr != (uint64_t)(uintptr_t)ptr ||
        pv_alloc_remove(a.ptr, &dev) != 0)
        return PV_cudaErrorInvalidValue;
    pv_detached_drain(ptr, a.size);   /* copies into it still on their way land first (cudaFreeHost synchronizes) */
    free(ptr);
    return PV_SUCCESS;
}

cudaError_t pv_host_flags(const void *ptr, unsigned *flags)
{
    struct pv_alloc a;
    if (pv_alloc_find((uint64_t)(uintptr_t)ptr, &a) != 0 || a.dev >= 0)
        return PV_cudaErrorInvalidValue;
    *flags = (unsigned)(-1 - a.dev);
    return PV_SUCCESS;
}
