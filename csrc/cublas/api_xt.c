/* cuBLASXt (cublasXt* of libcublas.so.13) over the forwarded cuBLAS: the handle and its configuration, and GEMM in
 * S/D/C/Z on matrices in host (or device) memory, tiled over the GPUs cublasXtDeviceSelect gave it.
 *
 * C is cut into blockDim x blockDim tiles, dealt round-robin to the selected GPUs; each GPU has a thread, a cuBLAS
 * handle (libvcublas's, on that GPU) and three tile buffers. For its tiles a GPU uploads the C tile (only when
 * beta != 0: C is not read otherwise), then for each blockDim slice of k the stored blocks of A and B and one GEMM
 * (beta for the first slice, 1 after), and downloads the tile: the uploads and GEMMs are fire-and-forget frames in
 * the GPU's order, the download waits for them. Copies go through the core's 2D copies by where the pointers live,
 * so A, B and C may also be device memory. A failure anywhere is the call's status (the first one); the buffers
 * are freed with a synchronizing call, which also reports what an earlier fire-and-forget frame was refused with.
 *
 * cublasXtSetCpuRoutine/SetCpuRatio are accepted and kept (all the work runs on the GPUs: the result is the same);
 * the pinning mode is kept (the client's copies need no pinned memory). Other cublasXt routines (syrk, symm, trsm,
 * ...) are the generated stubs: CUBLAS_STATUS_NOT_SUPPORTED, logged. */
#include "vcublas.h"
#include "pv_features.h"

#include <pthread.h>
#include <stdlib.h>

#define PVX_MAGIC 0x58544c42u              /* "BLTX" */
#define PVX_DEFAULT_BLOCK 1024

struct pvx_handle {
    uint32_t magic;
    int ndev;
    struct pv_device **devs;
    struct pvb_handle **blas;        /* one cuBLAS handle per selected GPU */
    int block;
    int pinning;
    float cpu_ratio[12][4];          /* cublasXtBlasOp_t x cublasXtOpType_t, kept */
    void *cpu_routine[12][4];
};

/* cuBLAS's generic GEMM of this library (generated, calls_gen.c): every tile is one. */
pvb_status cublasGemmEx_64(struct pvb_handle *handle, int transa, int transb, int64_t m, int64_t n, int64_t k,
                           const void *alpha, const void *A, int Atype, int64_t lda, const void *B, int Btype,
                           int64_t ldb, const void *beta, void *C, int Ctype, int64_t ldc, int computeType, int algo);

static struct pvx_handle *xt_of(void *h)
{
    struct pvx_handle *x = h;
    return h && pv_handle_valid(h) && x->magic == PVX_MAGIC ? x : NULL;
}

static void release_devices(struct pvx_handle *x)
{
    for (int i = 0; i < x->ndev; i++)
        if (x->blas[i])
            (void)cublasDestroy_v2(x->blas[i]);
    free(x->blas);
    free(x->devs);
    x->blas = NULL;
    x->devs = NULL;
    x->ndev = 0;
}

PV_API pvb_status cublasXtCreate(struct pvx_handle **out)
{
    if (!out)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    if (pv_init() != PV_SUCCESS)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    struct pvx_handle *x = calloc(1, sizeof *x);
    if (!x)
        return PVB_CUBLAS_STATUS_ALLOC_FAILED;
    x->magic = PVX_MAGIC;
    x->block = PVX_DEFAULT_BLOCK;
    pv_handle_add(x);
    *out = x;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasXtDestroy(struct pvx_handle *handle)
{
    struct pvx_handle *x = xt_of(handle);
    if (!x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    pv_handle_remove(x);
    release_devices(x);
    x->magic = 0;
    free(x);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

/* A device list: every id one of the process's GPUs, none twice. */
static int valid_devices(int n, const int *ids)
{
    if (n <= 0 || !ids)
        return 0;
    int count = pv_device_count();
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= count)
            return 0;
        for (int j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return 0;
    }
    return 1;
}

PV_API pvb_status cublasXtDeviceSelect(struct pvx_handle *handle, int n, int *ids)
{
    struct pvx_handle *x = xt_of(handle);
    if (!x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (!valid_devices(n, ids))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    release_devices(x);            /* a new selection replaces the old one */
    x->devs = calloc((size_t)n, sizeof *x->devs);
    x->blas = calloc((size_t)n, sizeof *x->blas);
    if (!x->devs || !x->blas) {
        release_devices(x);
        return PVB_CUBLAS_STATUS_ALLOC_FAILED;
    }
    x->ndev = n;
    for (int i = 0; i < n; i++) {
        x->devs[i] = pv_device(ids[i]);
        pvb_status st = pvb_create_on(x->devs[i], &x->blas[i]);
        if (st != PVB_CUBLAS_STATUS_SUCCESS) {
            release_devices(x);
            return st;
        }
    }
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasXtGetNumBoards(int n, int *ids, int *boards)
{
    if (!boards || pv_init() != PV_SUCCESS || !valid_devices(n, ids))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *boards = n;                   /* every remote GPU is a board of its own */
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasXtMaxBoards(int *boards)
{
    if (!boards)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    if (pv_init() != PV_SUCCESS)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    *boards = pv_device_count();
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasXtSetBlockDim(struct pvx_handle *handle, int block)
{
    struct pvx_handle *x = xt_of(handle);
    if (!x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (block <= 0)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    x->block = block;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasXtGetBlockDim(struct pvx_handle *handle, int *block)
{
    struct pvx_handle *x = xt_of(handle);
    if (!x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (!block)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *block = x->block;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasXtGetPinningMemMode(struct pvx_handle *handle, int *mode)
{
    struct pvx_handle *x = xt_of(handle);
    if (!x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *mode = x->pinning;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasXtSetPinningMemMode(struct pvx_handle *handle, int mode)
{
    struct pvx_handle *x = xt_of(handle);
    if (!x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != 0 && mode != 1)                /* CUBLASXT_PINNING_DISABLED / ENABLED */
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    x->pinning = mode;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

static pvb_status cpu_slot(struct pvx_handle *handle, int op, int type, struct pvx_handle **x)
{
    *x = xt_of(handle);
    if (!*x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    return op >= 0 && op < 12 && type >= 0 && type < 4 ? PVB_CUBLAS_STATUS_SUCCESS : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasXtSetCpuRoutine(struct pvx_handle *handle, int op, int type, void *routine)
{
    struct pvx_handle *x;
    pvb_status st = cpu_slot(handle, op, type, &x);
    if (st == PVB_CUBLAS_STATUS_SUCCESS)
        x->cpu_routine[op][type] = routine;
    return st;
}

PV_API pvb_status cublasXtSetCpuRatio(struct pvx_handle *handle, int op, int type, float ratio)
{
    struct pvx_handle *x;
    pvb_status st = cpu_slot(handle, op, type, &x);
    if (st == PVB_CUBLAS_STATUS_SUCCESS && (ratio < 0.0f || ratio > 1.0f))
        st = PVB_CUBLAS_STATUS_INVALID_VALUE;
    if (st == PVB_CUBLAS_STATUS_SUCCESS)
        x->cpu_ratio[op][type] = ratio;
    return st;
}

/* ------------------------------------------------------------------------------------------------ GEMM */
struct pvx_gemm {
    struct pvx_handle *x;
    int transa, transb, dtype, compute;
    size_t m, n, k, es;                       /* es: bytes per element */
    const void *alpha, *beta, *one;
    const char *A, *B;
    char *C;
    size_t lda, ldb, ldc;
    int beta_zero;
};

struct pvx_worker {
    const struct pvx_gemm *g;
    int index;                                /* which selected GPU */
    pthread_t thread;
    pvb_status status;
};

/* A rows x cols block of a column-major matrix at (r0, c0) with leading dimension ld, to or from a tile with
 * leading dimension rows. */
static cudaError_t block_copy(void *dst, size_t dld, const void *src, size_t sld, size_t rows, size_t cols,
                              size_t es)
{
    return pv_memcpy2d(dst, dld * es, src, sld * es, rows * es, cols, cudaMemcpyDefault, NULL);
}

static const char *at(const char *p, size_t r, size_t c, size_t ld, size_t es)
{
    return p + (r + c * ld) * es;
}

static cudaError_t device_alloc(struct pv_device *d, size_t size, void **out)
{
    uint64_t p = 0;
    cudaError_t err = pv_malloc_unique(d, size, pv_tls_owner(), &p);
    if (err == PV_SUCCESS)
        *out = (void *)(uintptr_t)p;
    return err;
}

static pvb_status of_cuda(cudaError_t err)
{
    return err == PV_SUCCESS ? PVB_CUBLAS_STATUS_SUCCESS : (pvb_status)pvb_status_of_cuda(err);
}

/* One C tile on this worker's GPU: C[i0.., j0..] (mb x nb) = alpha op(A) op(B) + beta C over k in slices. */
static pvb_status tile(const struct pvx_gemm *g, struct pvb_handle *h, char *dA, char *dB, char *dC, size_t i0,
                       size_t j0, size_t mb, size_t nb)
{
    size_t bd = (size_t)g->x->block, es = g->es;
    cudaError_t err = PV_SUCCESS;
    if (!g->beta_zero)
        err = block_copy(dC, mb, at(g->C, i0, j0, g->ldc, es), g->ldc, mb, nb, es);
    size_t l = 0;
    do {
        size_t kb = g->k - l < bd ? g->k - l : bd;
        /* the stored blocks: op(A)'s (i0.., l..) is A(i0.., l..) or A(l.., i0..); likewise B */
        size_t ar = g->transa == 0 ? mb : kb, ac = g->transa == 0 ? kb : mb;
        size_t br = g->transb == 0 ? kb : nb, bc = g->transb == 0 ? nb : kb;
        if (err == PV_SUCCESS && kb)
            err = block_copy(dA, ar, g->transa == 0 ? at(g->A, i0, l, g->lda, es) : at(g->A, l, i0, g->lda, es),
                             g->lda, ar, ac, es);
        if (err == PV_SUCCESS && kb)
            err = block_copy(dB, br, g->transb == 0 ? at(g->B, l, j0, g->ldb, es) : at(g->B, j0, l, g->ldb, es),
                             g->ldb, br, bc, es);
        if (err != PV_SUCCESS)
            return of_cuda(err);
        pvb_status st = cublasGemmEx_64(h, g->transa, g->transb, (int64_t)mb, (int64_t)nb, (int64_t)kb, g->alpha,
                                        dA, g->dtype, (int64_t)(ar ? ar : 1), dB, g->dtype, (int64_t)(br ? br : 1),
                                        l == 0 ? g->beta : g->one, dC, g->dtype, (int64_t)mb, g->compute, -1);
        if (st != PVB_CUBLAS_STATUS_SUCCESS)
            return st;
        l += kb;
    } while (l < g->k);
    return of_cuda(block_copy(g->C + (i0 + j0 * g->ldc) * es, g->ldc, dC, mb, mb, nb, es));
}

static void *worker(void *arg)
{
    struct pvx_worker *w = arg;
    const struct pvx_gemm *g = w->g;
    struct pvx_handle *x = g->x;
    struct pv_device *d = x->devs[w->index];
    size_t bd = (size_t)x->block, tiles_m = (g->m + bd - 1) / bd, tiles_n = (g->n + bd - 1) / bd;
    /* a tile is at most blockDim on a side, and no larger than the problem's largest dimension */
    size_t most = g->m > g->n ? g->m : g->n, side = bd;
    if (g->k > most)
        most = g->k;
    if (most < side)
        side = most;
    size_t tile_bytes = side * side * g->es;
    void *buf[3] = { NULL, NULL, NULL };
    w->status = PVB_CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 3 && w->status == PVB_CUBLAS_STATUS_SUCCESS; i++)
        if (device_alloc(d, tile_bytes, &buf[i]) != PV_SUCCESS)
            w->status = PVB_CUBLAS_STATUS_ALLOC_FAILED;
    for (size_t t = (size_t)w->index; w->status == PVB_CUBLAS_STATUS_SUCCESS && t < tiles_m * tiles_n;
         t += (size_t)x->ndev) {
        size_t i0 = (t % tiles_m) * bd, j0 = (t / tiles_m) * bd;
        size_t mb = g->m - i0 < bd ? g->m - i0 : bd, nb = g->n - j0 < bd ? g->n - j0 : bd;
        w->status = tile(g, x->blas[w->index], buf[0], buf[1], buf[2], i0, j0, mb, nb);
    }
    for (int i = 0; i < 3; i++) {          /* FREE synchronizes: a refused tile GEMM is reported here */
        cudaError_t err = buf[i] ? pv_mem_free(buf[i]) : PV_SUCCESS;
        if (err != PV_SUCCESS && w->status == PVB_CUBLAS_STATUS_SUCCESS)
            w->status = of_cuda(err);
    }
    return NULL;
}

static pvb_status xt_gemm(struct pvx_handle *handle, int dtype, int compute, size_t es, const void *one, int transa,
                          int transb, size_t m, size_t n, size_t k, const void *alpha, const void *A, size_t lda,
                          const void *B, size_t ldb, const void *beta, void *C, size_t ldc)
{
    struct pvx_handle *x = xt_of(handle);
    if (!x)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    if (x->ndev == 0)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;       /* cublasXtDeviceSelect was never called */
    size_t arows = transa == 0 ? m : k, brows = transb == 0 ? k : n;
    if (transa < 0 || transa > 2 || transb < 0 || transb > 2 || !alpha || !beta ||
        lda < (arows ? arows : 1) || ldb < (brows ? brows : 1) || ldc < (m ? m : 1))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return PVB_CUBLAS_STATUS_SUCCESS;
    static const char zero[16];
    struct pvx_gemm g = { x, transa, transb, dtype, compute, m, n, k, es, alpha, beta, one, A, B, C, lda, ldb, ldc,
                          memcmp(beta, zero, es) == 0 };
    int nw = x->ndev;
    struct pvx_worker *ws = calloc((size_t)nw, sizeof *ws);
    if (!ws)
        return PVB_CUBLAS_STATUS_ALLOC_FAILED;
    for (int i = 0; i < nw; i++) {
        ws[i].g = &g;
        ws[i].index = i;
        if (pthread_create(&ws[i].thread, NULL, worker, &ws[i]) != 0) {
            ws[i].status = PVB_CUBLAS_STATUS_ALLOC_FAILED;
            ws[i].thread = 0;
        }
    }
    pvb_status st = PVB_CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < nw; i++) {
        if (ws[i].thread)
            pthread_join(ws[i].thread, NULL);
        if (st == PVB_CUBLAS_STATUS_SUCCESS)
            st = ws[i].status;
    }
    free(ws);
    return st;
}

/* The scale types' 1: the later k slices accumulate into C. */
static const float one_s = 1.0f;
static const double one_d = 1.0;
static const float one_c[2] = { 1.0f, 0.0f };
static const double one_z[2] = { 1.0, 0.0 };

#define PVX_GEMM(name, dtype, compute, es, one)                                                                  \
    PV_API pvb_status name(struct pvx_handle *handle, int transa, int transb, size_t m, size_t n, size_t k,       \
                           const void *alpha, const void *A, size_t lda, const void *B, size_t ldb,              \
                           const void *beta, void *C, size_t ldc)                                                 \
    {                                                                                                            \
        return xt_gemm(handle, dtype, compute, es, one, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, \
                       ldc);                                                                                     \
    }

PVX_GEMM(cublasXtSgemm, PVB_CUDA_R_32F, PVB_CUBLAS_COMPUTE_32F, 4, &one_s)
PVX_GEMM(cublasXtDgemm, PVB_CUDA_R_64F, PVB_CUBLAS_COMPUTE_64F, 8, &one_d)
PVX_GEMM(cublasXtCgemm, PVB_CUDA_C_32F, PVB_CUBLAS_COMPUTE_32F, 8, one_c)
PVX_GEMM(cublasXtZgemm, PVB_CUDA_C_64F, PVB_CUBLAS_COMPUTE_64F, 16, one_z)
