/* The cuBLASLt entry points that need no daemon: the handle, versions and status strings, the descriptors (plain
 * data in their generated structs: create, initialize in the caller's storage, destroy, set and get attributes),
 * the logger and heuristics-cache settings, and the logger of the unsupported-function stubs. The matmul, the
 * heuristic query and the algorithm functions are in matmul.c. */
#include "vcublaslt.h"

#include <stdlib.h>

/* A descriptor's magic carries one more bit: set when it lives in the caller's storage (cublasLt*Init_internal),
 * so destroying it never frees memory the library did not allocate. */
#define PVL_IN_CALLER_STORAGE 1u

pvb_status pvb_unsupported(const char *name, atomic_int *once)
{
    pv_log_once(once, "%s is not supported by libvcublasLt (returns CUBLAS_STATUS_NOT_SUPPORTED)", name);
    return PVB_CUBLAS_STATUS_NOT_SUPPORTED;
}

/* A cuBLAS handle works as a cuBLASLt handle, as with NVIDIA's libraries: PyTorch passes its cublasHandle_t to
 * cublasLt* (it never calls cublasLtCreate). libvcublas's handle starts like this one (magic, device), and only
 * those two fields are read through it. */
#define PVB_HANDLE_MAGIC_AS_LT 0x43424c53u  /* libvcublas's PVB_HANDLE_MAGIC ("CBLS", csrc/cublas/vcublas.h) */
struct pvl_handle *pvl_handle_of(const void *h)
{
    struct pvl_handle *p = (struct pvl_handle *)h;
    return h && pv_handle_valid(h) && (p->magic == PVL_HANDLE_MAGIC || p->magic == PVB_HANDLE_MAGIC_AS_LT) ? p : NULL;
}

static int magic_is(const void *p, uint32_t magic)
{
    return p && (*(const uint32_t *)p & ~PVL_IN_CALLER_STORAGE) == magic;
}

struct pvl_layout *pvl_layout_of(const void *p) { return magic_is(p, PVL_LAYOUT_MAGIC) ? (void *)p : NULL; }
struct pvl_desc *pvl_desc_of(const void *p) { return magic_is(p, PVL_DESC_MAGIC) ? (void *)p : NULL; }
struct pvl_pref *pvl_pref_of(const void *p) { return magic_is(p, PVL_PREF_MAGIC) ? (void *)p : NULL; }

/* ------------------------------------------------------------------------------------------------ the handle */
PV_API pvb_status cublasLtCreate(struct pvl_handle **out)
{
    if (!out)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    struct pv_device *d;
    if (pv_cur(&d) != PV_SUCCESS)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;      /* no GPU reachable: what cuBLASLt says without a GPU */
    struct pvl_handle *h = calloc(1, sizeof *h);
    if (!h)
        return PVB_CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = PVL_HANDLE_MAGIC;
    h->dev = d;
    pv_handle_add(h);
    *out = h;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtDestroy(struct pvl_handle *handle)
{
    struct pvl_handle *h = pvl_handle_of(handle);
    if (!h || h->magic != PVL_HANDLE_MAGIC)      /* a cuBLAS handle is cublasDestroy's to end */
        return handle ? PVB_CUBLAS_STATUS_NOT_INITIALIZED : PVB_CUBLAS_STATUS_INVALID_VALUE;
    pv_handle_remove(h);
    h->magic = 0;
    free(h);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------------------------------ versions */
PV_API size_t cublasLtGetVersion(void) { return PVL_LT_VERSION; }
PV_API size_t cublasLtGetCudartVersion(void) { return PVL_CUDART_VERSION; }

PV_API pvb_status cublasLtGetProperty(int type, int *value)
{
    static const int parts[] = { PVB_VER_MAJOR, PVB_VER_MINOR, PVB_VER_PATCH };  /* libraryPropertyType 0..2 */
    if (!value || type < 0 || type > 2)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *value = parts[type];
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API const char *cublasLtGetStatusName(int status) { return pvb_status_words(status, 0); }
PV_API const char *cublasLtGetStatusString(int status) { return pvb_status_words(status, 1); }

/* -------------------------------------------------------------------------------- logger and heuristics cache */
/* pyvgpu has no heuristics cache and logs through its own logger, so these settings are kept and answered with
 * NVIDIA's rules (log levels 0..6; a capacity rounded up to a multiple of 32 entries) and change nothing else. */
static atomic_size_t cache_capacity = 8192;
static atomic_int log_level, log_mask;

PV_API pvb_status cublasLtHeuristicsCacheGetCapacity(size_t *capacity)
{
    if (!capacity)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *capacity = atomic_load(&cache_capacity);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtHeuristicsCacheSetCapacity(size_t capacity)
{
    atomic_store(&cache_capacity, (capacity + 31) / 32 * 32);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtLoggerSetLevel(int level)
{
    if (level < 0 || level > 6)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    atomic_store(&log_level, level);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtLoggerSetMask(int mask)
{
    atomic_store(&log_mask, mask);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtLoggerForceDisable(void)
{
    atomic_store(&log_level, 0);
    atomic_store(&log_mask, 0);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtLoggerSetCallback(void *callback) { (void)callback; return PVB_CUBLAS_STATUS_SUCCESS; }
PV_API pvb_status cublasLtLoggerSetFile(void *file) { (void)file; return PVB_CUBLAS_STATUS_SUCCESS; }
PV_API pvb_status cublasLtLoggerOpenFile(const char *path) { (void)path; return PVB_CUBLAS_STATUS_SUCCESS; }

/* ------------------------------------------------------------------------------------------------ attributes */
static const struct pvl_attr *find_attr(const struct pvl_attr *table, int n, int attr)
{
    for (int i = 0; i < n; i++)
        if (table[i].value == attr)
            return &table[i];
    return NULL;
}

pvb_status pvl_attr_set(void *obj, const struct pvl_attr *table, int n, int attr, const void *buf, size_t size)
{
    const struct pvl_attr *a = find_attr(table, n, attr);
    if (!obj || !a || !buf || size != a->size || a->readonly)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    memcpy((char *)obj + a->offset, buf, size);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

pvb_status pvl_attr_get(const void *obj, const struct pvl_attr *table, int n, int attr, void *buf, size_t size,
                        size_t *written)
{
    const struct pvl_attr *a = find_attr(table, n, attr);
    if (!obj || !a)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    if (size == 0 && !written)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    if (written)
        *written = a->size;           /* NVIDIA's library answers the size even when it refuses the buffer */
    if (size == 0)
        return PVB_CUBLAS_STATUS_SUCCESS;
    if (!buf || size != a->size)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, (const char *)obj + a->offset, size);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

/* Where a descriptor goes: heap memory of Create (freed by Destroy) or the caller's storage of Init_internal
 * (size checked against the generated struct: CUBLAS_STATUS_ALLOC_FAILED when it does not fit, as NVIDIA's). */
static pvb_status place(void **out, size_t need, void *storage, size_t size, uint32_t *flag)
{
    if (storage) {
        if (size < need)
            return PVB_CUBLAS_STATUS_ALLOC_FAILED;
        *out = storage;
        *flag = PVL_IN_CALLER_STORAGE;
        return PVB_CUBLAS_STATUS_SUCCESS;
    }
    *out = malloc(need);
    *flag = 0;
    return *out ? PVB_CUBLAS_STATUS_SUCCESS : PVB_CUBLAS_STATUS_ALLOC_FAILED;
}

static pvb_status destroy(void *p, int live)
{
    if (!p)
        return PVB_CUBLAS_STATUS_SUCCESS;          /* as NVIDIA's: destroying NULL is nothing */
    if (!live)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    uint32_t *magic = p;
    int in_caller_storage = (*magic & PVL_IN_CALLER_STORAGE) != 0;
    *magic = 0;
    if (!in_caller_storage)
        free(p);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------------------------------ layouts */
static pvb_status layout_make(struct pvl_layout **out, void *storage, size_t size, int type, uint64_t rows,
                              uint64_t cols, int64_t ld)
{
    uint32_t flag;
    void *p;
    pvb_status st = place(&p, sizeof(struct pvl_layout), storage, size, &flag);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    struct pvl_layout *l = p;
    pvl_layout_defaults(l, type, (int64_t)rows, (int64_t)cols, ld);
    l->magic = PVL_LAYOUT_MAGIC | flag;
    *out = l;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtMatrixLayoutCreate(struct pvl_layout **out, int type, uint64_t rows, uint64_t cols,
                                             int64_t ld)
{
    return out ? layout_make(out, NULL, 0, type, rows, cols, ld) : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasLtMatrixLayoutInit_internal(void *storage, size_t size, int type, uint64_t rows,
                                                    uint64_t cols, int64_t ld)
{
    struct pvl_layout *l;
    return storage ? layout_make(&l, storage, size, type, rows, cols, ld) : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasLtMatrixLayoutDestroy(void *layout) { return destroy(layout, pvl_layout_of(layout) != NULL); }

PV_API pvb_status cublasLtMatrixLayoutSetAttribute(void *layout, int attr, const void *buf, size_t size)
{
    return pvl_attr_set(pvl_layout_of(layout), pvl_layout_attrs, PVL_LAYOUT_NATTRS, attr, buf, size);
}

PV_API pvb_status cublasLtMatrixLayoutGetAttribute(const void *layout, int attr, void *buf, size_t size,
                                                   size_t *written)
{
    return pvl_attr_get(pvl_layout_of(layout), pvl_layout_attrs, PVL_LAYOUT_NATTRS, attr, buf, size, written);
}

/* ------------------------------------------------------------------------------------------------ matmul descriptors */
static pvb_status desc_make(struct pvl_desc **out, void *storage, size_t size, int compute, int scale)
{
    uint32_t flag;
    void *p;
    pvb_status st = place(&p, sizeof(struct pvl_desc), storage, size, &flag);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    struct pvl_desc *d = p;
    pvl_desc_defaults(d, compute, scale);
    d->magic = PVL_DESC_MAGIC | flag;
    *out = d;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtMatmulDescCreate(struct pvl_desc **out, int compute, int scale)
{
    return out ? desc_make(out, NULL, 0, compute, scale) : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasLtMatmulDescInit_internal(void *storage, size_t size, int compute, int scale)
{
    struct pvl_desc *d;
    return storage ? desc_make(&d, storage, size, compute, scale) : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasLtMatmulDescDestroy(void *desc) { return destroy(desc, pvl_desc_of(desc) != NULL); }

PV_API pvb_status cublasLtMatmulDescSetAttribute(void *desc, int attr, const void *buf, size_t size)
{
    return pvl_attr_set(pvl_desc_of(desc), pvl_desc_attrs, PVL_DESC_NATTRS, attr, buf, size);
}

PV_API pvb_status cublasLtMatmulDescGetAttribute(const void *desc, int attr, void *buf, size_t size, size_t *written)
{
    return pvl_attr_get(pvl_desc_of(desc), pvl_desc_attrs, PVL_DESC_NATTRS, attr, buf, size, written);
}

/* ------------------------------------------------------------------------------------------------ preferences */
static pvb_status pref_make(struct pvl_pref **out, void *storage, size_t size)
{
    uint32_t flag;
    void *p;
    pvb_status st = place(&p, sizeof(struct pvl_pref), storage, size, &flag);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    struct pvl_pref *pr = p;
    pvl_pref_defaults(pr);
    pr->magic = PVL_PREF_MAGIC | flag;
    *out = pr;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtMatmulPreferenceCreate(struct pvl_pref **out)
{
    return out ? pref_make(out, NULL, 0) : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasLtMatmulPreferenceInit_internal(void *storage, size_t size)
{
    struct pvl_pref *p;
    return storage ? pref_make(&p, storage, size) : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasLtMatmulPreferenceDestroy(void *pref) { return destroy(pref, pvl_pref_of(pref) != NULL); }

PV_API pvb_status cublasLtMatmulPreferenceSetAttribute(void *pref, int attr, const void *buf, size_t size)
{
    return pvl_attr_set(pvl_pref_of(pref), pvl_pref_attrs, PVL_PREF_NATTRS, attr, buf, size);
}

PV_API pvb_status cublasLtMatmulPreferenceGetAttribute(const void *pref, int attr, void *buf, size_t size,
                                                       size_t *written)
{
    return pvl_attr_get(pvl_pref_of(pref), pvl_pref_attrs, PVL_PREF_NATTRS, attr, buf, size, written);
}
