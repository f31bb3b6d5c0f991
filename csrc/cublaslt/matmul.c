/* cublasLtMatmul and what chooses how to run it: the heuristic query, the algorithm functions and their
 * capabilities. pyvgpu offers one algorithm (id 0): the daemon runs the matmul as its backend chooses (NumPy on the
 * emulated GPU; NVIDIA's cuBLASLt, with its own heuristic, on a real GPU). A heuristic query is checked here first
 * with the matmul's own checks (an invalid problem gets its status, one the table does not offer no algorithm:
 * CUBLAS_STATUS_SUCCESS with zero results, so a caller such as PyTorch falls back to cuBLAS), then asked of the
 * daemon once per problem (LT_HEURISTIC: a real GPU answers with NVIDIA's heuristic, with the preference's workspace
 * and alignments; the emulated one has an algorithm for every checked problem) and the answer kept (per device):
 * a program asks for the same few problems over and over, and only the first costs a round trip. */
#include "vcublaslt.h"

#include <pthread.h>
#include <stdlib.h>

/* cublasLtMatmulHeuristicResult_t (cublasLt.h), ABI-equivalent. */
struct pvl_heuristic_result {
    union {
        struct pvl_algo algo;
        uint64_t raw[8];                 /* cublasLtMatmulAlgo_t */
    };
    size_t workspace_size;
    int state;
    float waves;
    int reserved[4];
};
_Static_assert(sizeof(struct pvl_heuristic_result) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

static int trace_on(void)
{
    static int trace = -1;
    if (trace < 0)
        trace = getenv("PYVGPU_CUBLAS_TRACE") != NULL;
    return trace;
}

/* cuBLASLt reports an argument it refuses by the status alone; PYVGPU_CUBLAS_TRACE=1 also says which one. */
static pvb_status refused(const char *fn, pvb_status st, const char *why)
{
    if (trace_on())
        pv_log("%s refused: %s (status %d)", fn, why, st);
    return st;
}

pvb_status pvl_check(const struct pvl_desc *d, const struct pvl_layout *const l[4], struct pvl_matmul_args *a,
                     const char **why)
{
    pvb_status st = pvl_desc_refused(d, why);
    for (int i = 0; i < 4 && st == PVB_CUBLAS_STATUS_SUCCESS; i++)
        st = pvl_layout_refused(l[i], why);
    if (st == PVB_CUBLAS_STATUS_SUCCESS)
        st = pvl_check_matmul(a, why);
    return st;
}

/* The descriptors of a call: INVALID_VALUE unless each is a live one of its kind. */
static pvb_status descriptors(const void *desc, const void *const raw[4], const struct pvl_desc **d,
                              const struct pvl_layout *l[4])
{
    *d = pvl_desc_of(desc);
    if (!*d)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < 4; i++) {
        l[i] = pvl_layout_of(raw[i]);
        if (!l[i])
            return PVB_CUBLAS_STATUS_INVALID_VALUE;
    }
    return PVB_CUBLAS_STATUS_SUCCESS;
}

static void algo_init(struct pvl_algo *a, int64_t compute, int64_t atype)
{
    memset(a, 0, 64);                     /* the whole cublasLtMatmulAlgo_t, not only our part of it */
    pvl_algo_defaults(a);
    a->magic = PVL_ALGO_MAGIC;
    a->compute = (int32_t)compute;
    a->atype = (int32_t)atype;
}

static int algo_ours(const void *algo)
{
    return algo && ((const struct pvl_algo *)algo)->magic == PVL_ALGO_MAGIC;
}

/* ------------------------------------------------------------------------------------------------ heuristics */
#define PVL_HEURISTIC_CACHE 256           /* problems whose answer the library remembers (all devices) */

/* What a heuristic query asks a device's daemon (the problem without data pointers, the preference's workspace and
 * alignments) and what it answered. */
struct pvl_heuristic_key {
    const struct pv_device *dev;
    struct pvl_matmul_args a;
    uint64_t max_ws;
    uint32_t align[4];
};
struct pvl_heuristic_answer {
    struct pvl_heuristic_key key;
    int valid, count;
    uint64_t workspace;
};

/* The answers, for every handle of the process (a libvcublas handle used as a cuBLASLt one has room for none). */
static struct pvl_heuristic_answer answers[PVL_HEURISTIC_CACHE];
static int next_answer;                   /* the entry the next new answer replaces */
static pthread_mutex_t answers_lock = PTHREAD_MUTEX_INITIALIZER;

/* The daemon's answer for a problem: remembered, else asked (LT_HEURISTIC) and kept. Only definite answers are
 * kept: an algorithm or none; a failure to ask is the call's status. */
static pvb_status ask_daemon(struct pvl_handle *h, const struct pvl_matmul_args *a, const struct pvl_pref *p,
                             struct pvl_heuristic_answer *out)
{
    struct pvl_heuristic_key key;
    memset(&key, 0, sizeof key);            /* padding too: keys are compared as bytes */
    key.dev = h->dev;
    key.a = *a;
    key.max_ws = p ? p->max_workspace : 0;
    uint32_t defaults[4] = { 256, 256, 256, 256 };      /* the preference's defaults */
    key.align[0] = p ? p->align_a : defaults[0];
    key.align[1] = p ? p->align_b : defaults[1];
    key.align[2] = p ? p->align_c : defaults[2];
    key.align[3] = p ? p->align_d : defaults[3];
    pthread_mutex_lock(&answers_lock);
    for (int i = 0; i < PVL_HEURISTIC_CACHE; i++)
        if (answers[i].valid && memcmp(&answers[i].key, &key, sizeof key) == 0) {
            *out = answers[i];
            pthread_mutex_unlock(&answers_lock);
            return PVB_CUBLAS_STATUS_SUCCESS;
        }
    pthread_mutex_unlock(&answers_lock);
    uint64_t result[2] = { 0, 0 };
    cudaError_t err = pvl_call_heuristic(h->dev, &key.a, key.max_ws, key.align, result);
    pvb_status st = (pvb_status)pvb_status_of_cuda(err);
    if (err != PV_SUCCESS && st != PVB_CUBLAS_STATUS_NOT_SUPPORTED)
        return st;
    memset(out, 0, sizeof *out);
    out->key = key;
    out->valid = 1;
    out->count = err == PV_SUCCESS && result[0] > 0;
    out->workspace = err == PV_SUCCESS ? result[1] : 0;
    pthread_mutex_lock(&answers_lock);
    answers[next_answer] = *out;
    next_answer = (next_answer + 1) % PVL_HEURISTIC_CACHE;
    pthread_mutex_unlock(&answers_lock);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

static pvb_status heuristic(const char *fn, void *handle, const void *desc, const void *A, const void *B,
                            const void *C, const void *D, const void *pref, int requested,
                            struct pvl_heuristic_result *results, int *returned, cudaStream_t stream)
{
    if (!pvl_handle_of(handle))
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (!returned || !results || requested <= 0 || !pv_stream_ok(stream))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    const struct pvl_desc *d;
    const struct pvl_layout *l[4];
    const void *const raw[4] = { A, B, C, D };
    pvb_status st = descriptors(desc, raw, &d, l);
    const struct pvl_pref *p = pref ? pvl_pref_of(pref) : NULL;
    if (st != PVB_CUBLAS_STATUS_SUCCESS || (pref && !p))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    struct pvl_matmul_args a;
    pvl_matmul_args(&a, d, l, NULL, NULL, NULL, NULL, NULL, 0);
    const char *why = "";
    st = pvl_check(d, l, &a, &why);
    if (st == PVB_CUBLAS_STATUS_NOT_SUPPORTED) {
        refused(fn, st, why);
        return PVB_CUBLAS_STATUS_SUCCESS;     /* no algorithm for it */
    }
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return refused(fn, st, why);
    uint64_t flags = pvl_impl_flags(d->compute, a.Atype);
    if (p && (flags & ~p->impl_mask) != 0) {
        refused(fn, PVB_CUBLAS_STATUS_NOT_SUPPORTED, "IMPL_MASK excludes pyvgpu's algorithm");
        return PVB_CUBLAS_STATUS_SUCCESS;
    }
    struct pvl_heuristic_answer ans;
    st = ask_daemon(pvl_handle_of(handle), &a, p, &ans);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return refused(fn, st, "the daemon refused the problem");
    if (ans.count == 0) {
        refused(fn, PVB_CUBLAS_STATUS_NOT_SUPPORTED, "the daemon's backend has no algorithm for it");
        return PVB_CUBLAS_STATUS_SUCCESS;
    }
    memset(&results[0], 0, sizeof results[0]);
    algo_init(&results[0].algo, d->compute, a.Atype);
    results[0].workspace_size = ans.workspace;
    results[0].state = PVB_CUBLAS_STATUS_SUCCESS;
    results[0].waves = 1.0f;
    *returned = PVL_MAX_HEURISTIC_RESULTS;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtMatmulAlgoGetHeuristic(void *handle, const void *desc, const void *A, const void *B,
                                                 const void *C, const void *D, const void *pref, int requested,
                                                 struct pvl_heuristic_result *results, int *returned)
{
    return heuristic(__func__, handle, desc, A, B, C, D, pref, requested, results, returned, NULL);
}

PV_API pvb_status cublasLtMatmulAlgoGetHeuristicForStream(void *handle, const void *desc, const void *A,
                                                          const void *B, const void *C, const void *D,
                                                          const void *pref, int requested,
                                                          struct pvl_heuristic_result *results, int *returned,
                                                          cudaStream_t stream)
{
    return heuristic(__func__, handle, desc, A, B, C, D, pref, requested, results, returned, stream);
}

/* ------------------------------------------------------------------------------------------------ algorithms */
/* Whether pyvgpu's algorithm takes these types: the table's type check with layouts that pass the others. */
static pvb_status types_supported(int64_t compute, int64_t scale, int64_t at, int64_t bt, int64_t ct, int64_t dt)
{
    int64_t want = pvb_gemm_scale_type(at, bt, ct, compute);
    return want >= 0 && want == scale && dt == ct ? PVB_CUBLAS_STATUS_SUCCESS : PVB_CUBLAS_STATUS_NOT_SUPPORTED;
}

PV_API pvb_status cublasLtMatmulAlgoGetIds(void *handle, int compute, int scale, int at, int bt, int ct, int dt,
                                           int requested, int *ids, int *returned)
{
    if (!pvl_handle_of(handle))
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !ids || !returned)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    if (types_supported(compute, scale, at, bt, ct, dt) == PVB_CUBLAS_STATUS_SUCCESS) {
        ids[0] = 0;
        *returned = 1;
    }
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtMatmulAlgoInit(void *handle, int compute, int scale, int at, int bt, int ct, int dt,
                                         int id, struct pvl_algo *algo)
{
    if (!pvl_handle_of(handle))
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (!algo || id != 0)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;       /* "algoId is outside of recognized range" */
    pvb_status st = types_supported(compute, scale, at, bt, ct, dt);
    if (st == PVB_CUBLAS_STATUS_SUCCESS)
        algo_init(algo, compute, at);
    return st;
}

static pvb_status algo_check(const char *fn, void *handle, const void *desc, const void *A, const void *B,
                             const void *C, const void *D, const void *algo, struct pvl_heuristic_result *result,
                             cudaStream_t stream)
{
    if (!pvl_handle_of(handle))
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (!result || !algo_ours(algo) || !pv_stream_ok(stream))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    const struct pvl_desc *d;
    const struct pvl_layout *l[4];
    const void *const raw[4] = { A, B, C, D };
    if (descriptors(desc, raw, &d, l) != PVB_CUBLAS_STATUS_SUCCESS)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    struct pvl_matmul_args a;
    pvl_matmul_args(&a, d, l, NULL, NULL, NULL, NULL, NULL, 0);
    const char *why = "";
    pvb_status st = pvl_check(d, l, &a, &why);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return refused(fn, st, why);
    result->workspace_size = 0;          /* "algo field is never updated" */
    result->state = PVB_CUBLAS_STATUS_SUCCESS;
    result->waves = 1.0f;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtMatmulAlgoCheck(void *handle, const void *desc, const void *A, const void *B, const void *C,
                                          const void *D, const void *algo, struct pvl_heuristic_result *result)
{
    return algo_check(__func__, handle, desc, A, B, C, D, algo, result, NULL);
}

PV_API pvb_status cublasLtMatmulAlgoCheckForStream(void *handle, const void *desc, const void *A, const void *B,
                                                   const void *C, const void *D, const void *algo,
                                                   struct pvl_heuristic_result *result, cudaStream_t stream)
{
    return algo_check(__func__, handle, desc, A, B, C, D, algo, result, stream);
}

PV_API pvb_status cublasLtMatmulAlgoCapGetAttribute(const void *algo, int attr, void *buf, size_t size,
                                                    size_t *written)
{
    if (!algo_ours(algo))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    const struct pvl_cap *cap = NULL;
    for (int i = 0; i < PVL_NCAPS; i++)
        if (pvl_caps[i].attr == attr)
            cap = &pvl_caps[i];
    if (!cap || (size == 0 && !written))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    size_t need = (size_t)cap->size * (size_t)cap->count;
    if (written)
        *written = need;
    if (size == 0)
        return PVB_CUBLAS_STATUS_SUCCESS;
    /* an array (tile ids, stages ids) fits any buffer large enough; a value needs its exact size */
    int array = attr == 6 || attr == 13;
    if (!buf || (array ? size < need : size != need))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    const struct pvl_algo *a = algo;
    for (int i = 0; i < cap->count; i++) {
        uint64_t v = attr == PVL_CAP_NUMERICAL_IMPL_FLAGS ? pvl_impl_flags(a->compute, a->atype) : cap->values[i];
        memcpy((char *)buf + (size_t)i * (size_t)cap->size, &v, (size_t)cap->size);   /* little endian */
    }
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasLtMatmulAlgoConfigSetAttribute(struct pvl_algo *algo, int attr, const void *buf, size_t size)
{
    return pvl_attr_set(algo, pvl_algo_attrs, PVL_ALGO_NATTRS, attr, buf, size);
}

PV_API pvb_status cublasLtMatmulAlgoConfigGetAttribute(const struct pvl_algo *algo, int attr, void *buf, size_t size,
                                                       size_t *written)
{
    return pvl_attr_get(algo, pvl_algo_attrs, PVL_ALGO_NATTRS, attr, buf, size, written);
}

/* ------------------------------------------------------------------------------------------------ the matmul */
/* alpha/beta's wire bytes: the value (host pointer mode: the scale type's element read from p) or its address. */
static size_t scalar_bytes(const struct pvl_desc *d, const void *p, unsigned char out[16])
{
    if (d->pmode == PVL_POINTER_MODE_DEVICE) {
        uint64_t addr = (uint64_t)(uintptr_t)p;
        for (int i = 0; i < 8; i++)
            out[i] = (unsigned char)(addr >> (8 * i));
        return 8;
    }
    size_t n = (size_t)pvb_dtype_size(d->scale);     /* the checks made sure the scale type is a supported one */
    if (n > 16)
        n = 16;
    memcpy(out, p, n);
    return n;
}

PV_API pvb_status cublasLtMatmul(void *handle, const void *desc, const void *alpha, const void *A, const void *Adesc,
                                 const void *B, const void *Bdesc, const void *beta, const void *C, const void *Cdesc,
                                 void *D, const void *Ddesc, const void *algo, void *workspace, size_t workspace_size,
                                 cudaStream_t stream)
{
    struct pvl_handle *h = pvl_handle_of(handle);
    if (!h)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    const struct pvl_desc *d;
    const struct pvl_layout *l[4];
    const void *const raw[4] = { Adesc, Bdesc, Cdesc, Ddesc };
    if (descriptors(desc, raw, &d, l) != PVB_CUBLAS_STATUS_SUCCESS || !alpha || !beta)
        return refused(__func__, PVB_CUBLAS_STATUS_INVALID_VALUE, "a NULL or dead descriptor or scalar");
    if (algo && !algo_ours(algo))
        return refused(__func__, PVB_CUBLAS_STATUS_INVALID_VALUE, "an algorithm pyvgpu did not make");
    uint64_t remote_stream;
    struct pv_device *sdev = NULL;
    if (pv_stream_resolve(stream, h->dev, &remote_stream, &sdev) != PV_SUCCESS || sdev != h->dev)
        return refused(__func__, PVB_CUBLAS_STATUS_INVALID_VALUE, "a stream of another device or none");
    struct pvl_matmul_args a;
    pvl_matmul_args(&a, d, l, A, B, C, D, workspace, workspace_size);
    const char *why = "";
    pvb_status st = pvl_check(d, l, &a, &why);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return refused(__func__, st, why);
    unsigned char av[16], bv[16];
    size_t an = scalar_bytes(d, alpha, av), bn = scalar_bytes(d, beta, bv);
    cudaError_t err = pvl_send_matmul(h->dev, remote_stream, &a, av, an, bv, bn);
    if (err != PV_SUCCESS)
        pv_log("cublasLtMatmul on GPU%d: %s", h->dev->index, pv_err_name(err));
    return (pvb_status)pvb_status_of_cuda(err);
}
