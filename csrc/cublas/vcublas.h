/* libvcublas's internal declarations: the cuBLAS handle and the call helpers the generated entry points
 * (calls_gen.c, from pyvgpu/cublas_spec.py) are built from, on top of the client core. No cuBLAS headers: every
 * prototype here and in calls_gen.c is ABI-equivalent to cublas_api.h's (enums are ints, element pointers are
 * void pointers; the tests check the generated prototypes against NVIDIA's). */
#ifndef PV_VCUBLAS_H
#define PV_VCUBLAS_H

#include "pv_core.h"
#include "cublas_gen.h"
#include "stubs.h"

#define PVB_HANDLE_MAGIC 0x43424c53u        /* "CBLS" */
#define PVB_ATOMICS_NOT_ALLOWED 0            /* cublasAtomicsMode_t */
#define PVB_ATOMICS_ALLOWED 1
#define PVB_SCALAR_MAX 16                    /* bytes of the widest scalar (cuDoubleComplex) */

/* A cublasHandle_t: bound to the device current at cublasCreate; the daemon holds its twin (BLAS_CREATE). */
struct pvb_handle {
    uint32_t magic;
    struct pv_device *dev;
    uint64_t remote;                 /* the daemon's handle */
    cudaStream_t stream;             /* cublasSetStream (NULL: the default stream) */
    int pmode;                       /* cublasPointerMode_t */
    int math;                        /* cublasMath_t */
    int atomics;                     /* cublasAtomicsMode_t */
    int environment;                 /* cublasSetEnvironmentMode (NVIDIA's private export): 0 or 1 */
    void *workspace;                 /* cublasSetWorkspace (NULL: the library's own) */
    size_t workspace_size;
};

/* What one call sends along with its arguments: the handle's state at the time of the call. */
struct pvb_call {
    struct pv_device *dev;
    uint64_t remote;
    uint64_t stream;                 /* the daemon's stream handle (0: default stream) */
    int pmode, math;
};

/* The handle's call state, or NOT_INITIALIZED for a handle that is not a live one (as cuBLAS answers a NULL one),
 * or INVALID_VALUE when its stream is gone or belongs to another device. */
pvb_status pvb_begin(struct pvb_handle *h, struct pvb_call *c);
/* A scalar's wire bytes: its value (host pointer mode: the element's size read from p) or its device address. */
size_t pvb_scalar(const struct pvb_call *c, const void *p, int64_t dtype, unsigned char out[PVB_SCALAR_MAX]);
/* Ends a call: refused on the client (its status), sent fire-and-forget, or waited for a host-mode result. */
pvb_status pvb_refused(const struct pvb_call *c, const char *fn, pvb_status st, const char *why);
pvb_status pvb_sent(const struct pvb_call *c, const char *fn, cudaError_t err);
pvb_status pvb_waited(const struct pvb_call *c, const char *fn, cudaError_t err, size_t got, size_t want);
/* A cuBLAS handle on device d (cublasCreate's, for the current device; cuBLASXt's, one per selected GPU). */
pvb_status pvb_create_on(struct pv_device *d, struct pvb_handle **out);
pvb_status cublasDestroy_v2(struct pvb_handle *handle);
/* A live handle (registered with the core's handle set and carrying the magic), else NULL. */
struct pvb_handle *pvb_handle_of(const void *h);

#endif
