/* The cuBLAS entry points with logic of their own on the client: handle lifecycle and state (stream, pointer
 * mode, math, atomics and environment modes, workspace), versions and status strings, and the logger of the
 * unsupported-function stubs.
 * Everything else that is supported is generated (calls_gen.c). */
#include "vcublas.h"

#include <stddef.h>
#include <stdlib.h>

pvb_status pvb_unsupported(const char *name, atomic_int *once)
{
    pv_census_unsupported("libvcublas", name);
    pv_log_once(once, "%s is not supported by libvcublas (returns CUBLAS_STATUS_NOT_SUPPORTED)", name);
    return PVB_CUBLAS_STATUS_NOT_SUPPORTED;
}

/* The live handle behind `handle` for a call that reads or writes through `arg`: NOT_INITIALIZED for a handle that
 * is not a live one (as cuBLAS answers a NULL one), INVALID_VALUE for a NULL `arg`. */
static pvb_status live(struct pvb_handle *handle, const void *arg, struct pvb_handle **h)
{
    *h = pvb_handle_of(handle);
    if (!*h)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    return arg ? PVB_CUBLAS_STATUS_SUCCESS : PVB_CUBLAS_STATUS_INVALID_VALUE;
}

/* A two-valued setting of the handle (pointer, atomics, environment mode) at `field`: `a` or `b`, else
 * INVALID_VALUE. */
static pvb_status set_mode(struct pvb_handle *handle, int mode, int a, int b, size_t field)
{
    struct pvb_handle *h;
    pvb_status st = live(handle, handle, &h);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    if (mode != a && mode != b)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *(int *)((char *)h + field) = mode;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

static pvb_status get_mode(struct pvb_handle *handle, int *mode, size_t field)
{
    struct pvb_handle *h;
    pvb_status st = live(handle, mode, &h);
    if (st == PVB_CUBLAS_STATUS_SUCCESS)
        *mode = *(const int *)((const char *)h + field);
    return st;
}

PV_API pvb_status cublasCreate_v2(struct pvb_handle **out)
{
    if (!out)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    struct pv_device *d;
    if (pv_cur(&d) != PV_SUCCESS)
        return PVB_CUBLAS_STATUS_NOT_INITIALIZED;      /* no GPU reachable: what cuBLAS says without a GPU */
    return pvb_create_on(d, out);
}

pvb_status pvb_create_on(struct pv_device *d, struct pvb_handle **out)
{
    uint64_t remote;
    cudaError_t err = pv_call_BLAS_CREATE(d, &remote);
    if (err != PV_SUCCESS)
        return err == PV_cudaErrorMemoryAllocation ? PVB_CUBLAS_STATUS_ALLOC_FAILED
                                                   : PVB_CUBLAS_STATUS_NOT_INITIALIZED;
    struct pvb_handle *h = calloc(1, sizeof *h);
    if (!h) {
        (void)pv_send_BLAS_DESTROY(d, remote);
        return PVB_CUBLAS_STATUS_ALLOC_FAILED;
    }
    h->magic = PVB_HANDLE_MAGIC;
    h->dev = d;
    h->remote = remote;
    h->pmode = PVB_POINTER_MODE_HOST;
    pv_handle_add(h);
    *out = h;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasDestroy_v2(struct pvb_handle *handle)
{
    struct pvb_handle *h;
    pvb_status st = live(handle, handle, &h);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    pv_handle_remove(h);
    /* Ordered after the handle's calls on the daemon; the daemon also destroys it when the session ends. */
    (void)pv_send_BLAS_DESTROY(h->dev, h->remote);
    h->magic = 0;
    free(h);
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasSetStream_v2(struct pvb_handle *handle, cudaStream_t stream)
{
    struct pvb_handle *h;
    pvb_status st = live(handle, handle, &h);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    if (!pv_stream_ok(stream))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    h->stream = stream;
    /* cuBLAS documents that setting a stream returns the handle to the library's own workspace. */
    if (h->workspace) {
        h->workspace = NULL;
        h->workspace_size = 0;
        (void)pv_send_BLAS_SET_WORKSPACE(h->dev, h->remote, 0, 0);
    }
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasGetStream_v2(struct pvb_handle *handle, cudaStream_t *out)
{
    struct pvb_handle *h;
    pvb_status st = live(handle, out, &h);
    if (st == PVB_CUBLAS_STATUS_SUCCESS)
        *out = h->stream;
    return st;
}

PV_API pvb_status cublasSetPointerMode_v2(struct pvb_handle *handle, int mode)
{
    return set_mode(handle, mode, PVB_POINTER_MODE_HOST, PVB_POINTER_MODE_DEVICE, offsetof(struct pvb_handle, pmode));
}

PV_API pvb_status cublasGetPointerMode_v2(struct pvb_handle *handle, int *mode)
{
    return get_mode(handle, mode, offsetof(struct pvb_handle, pmode));
}

PV_API pvb_status cublasSetMathMode(struct pvb_handle *handle, int mode)
{
    struct pvb_handle *h;
    pvb_status st = live(handle, handle, &h);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    int base = mode & ~PVB_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    for (size_t i = 0; i < sizeof pvb_math_modes / sizeof pvb_math_modes[0]; i++)
        if (pvb_math_modes[i] == base) {
            h->math = mode;
            return PVB_CUBLAS_STATUS_SUCCESS;
        }
    return PVB_CUBLAS_STATUS_INVALID_VALUE;
}

PV_API pvb_status cublasGetMathMode(struct pvb_handle *handle, int *mode)
{
    return get_mode(handle, mode, offsetof(struct pvb_handle, math));
}

/* cublasSetEnvironmentMode/GetEnvironmentMode: exported by NVIDIA's libcublas.so.13, not in its headers.
 * cusolverDnCreate sets mode 1 on the cuBLAS handle it creates and fails without it. NVIDIA's accepts 0 or 1 on a
 * live handle (else INVALID_VALUE), keeps it on the handle (0 at creation) and hands it to cuBLASLt's kernel choice
 * around its matmuls; a result's meaning does not depend on it, so it stays client-side state and the daemon's
 * library runs with its own. */
PV_API pvb_status cublasSetEnvironmentMode(struct pvb_handle *handle, int mode)
{
    return set_mode(handle, mode, 0, 1, offsetof(struct pvb_handle, environment));
}

PV_API pvb_status cublasGetEnvironmentMode(struct pvb_handle *handle, int *mode)
{
    return get_mode(handle, mode, offsetof(struct pvb_handle, environment));
}

/* cublasSetAtomicsMode/GetAtomicsMode (cusolverDnCreate sets it on its handle): whether a routine may use atomics,
 * which only changes the order of a sum (results may then differ run to run). Kept on the client: the daemon's
 * routines run with the default (not allowed), the deterministic choice that is right under either mode. */
PV_API pvb_status cublasSetAtomicsMode(struct pvb_handle *handle, int mode)
{
    return set_mode(handle, mode, PVB_ATOMICS_NOT_ALLOWED, PVB_ATOMICS_ALLOWED, offsetof(struct pvb_handle, atomics));
}

PV_API pvb_status cublasGetAtomicsMode(struct pvb_handle *handle, int *mode)
{
    return get_mode(handle, mode, offsetof(struct pvb_handle, atomics));
}

PV_API pvb_status cublasSetWorkspace_v2(struct pvb_handle *handle, void *workspace, size_t size)
{
    struct pvb_handle *h;
    pvb_status st = live(handle, handle, &h);
    if (st != PVB_CUBLAS_STATUS_SUCCESS)
        return st;
    /* cuBLAS: a workspace must be 256-byte aligned, and a size without memory (or memory without size) is
     * not one. */
    if (((uintptr_t)workspace % 256) != 0 || (!workspace && size) || (workspace && !size))
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = workspace;
    h->workspace_size = size;
    return (pvb_status)pvb_status_of_cuda(
        pv_send_BLAS_SET_WORKSPACE(h->dev, h->remote, (uint64_t)(uintptr_t)workspace, size));
}

PV_API pvb_status cublasGetVersion_v2(struct pvb_handle *handle, int *version)
{
    (void)handle;                 /* NVIDIA's answers without a handle too */
    if (!version)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    *version = PVB_CUBLAS_VERSION;
    return PVB_CUBLAS_STATUS_SUCCESS;
}

PV_API pvb_status cublasGetProperty(int type, int *value)
{
    if (!value)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {               /* libraryPropertyType: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL */
    case 0:
        *value = PVB_VER_MAJOR;
        return PVB_CUBLAS_STATUS_SUCCESS;
    case 1:
        *value = PVB_VER_MINOR;
        return PVB_CUBLAS_STATUS_SUCCESS;
    case 2:
        *value = PVB_VER_PATCH;
        return PVB_CUBLAS_STATUS_SUCCESS;
    default:
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    }
}

PV_API size_t cublasGetCudartVersion(void)
{
    return PVB_CUDART_VERSION;
}

PV_API const char *cublasGetStatusName(int status) { return pvb_status_words(status, 0); }
PV_API const char *cublasGetStatusString(int status) { return pvb_status_words(status, 1); }
