/* libvcublasLt's internal declarations: the handle, the descriptors (generated structs, cublaslt_gen.h) and the
 * helpers of the matmul, on top of the client core. No cuBLAS headers: every entry point is ABI-equivalent to
 * cublasLt.h's (enums are ints, descriptors are pointers to their generated structs; the tests call them through
 * NVIDIA's prototypes). */
#ifndef PV_VCUBLASLT_H
#define PV_VCUBLASLT_H

#include "pv_core.h"
#include "cublaslt_gen.h"
#include "stubs.h"

#define PVL_HANDLE_MAGIC 0x4c54484eu        /* "LTHN" */

/* A cublasLtHandle_t: bound to the device current at cublasLtCreate. The daemon needs no twin (a matmul carries
 * everything it needs), so creating one costs no round trip. A libvcublas handle serves as one too (it starts with
 * the same two fields: api_lt.c), so nothing else may live here. */
struct pvl_handle {
    uint32_t magic;
    struct pv_device *dev;
};

/* A live handle (registered with the core's handle set and carrying the magic), else NULL. */
struct pvl_handle *pvl_handle_of(const void *h);
/* A descriptor the caller passed: NULL unless it carries its kind's magic (a created or initialized one). */
struct pvl_layout *pvl_layout_of(const void *p);
struct pvl_desc *pvl_desc_of(const void *p);
struct pvl_pref *pvl_pref_of(const void *p);

/* Set/get of one attribute through a descriptor's generated attribute table, with NVIDIA's rules: an unknown
 * attribute, a NULL buffer or a size other than the attribute's is CUBLAS_STATUS_INVALID_VALUE; get with size 0
 * answers the size in *written. */
pvb_status pvl_attr_set(void *obj, const struct pvl_attr *table, int n, int attr, const void *buf, size_t size);
pvb_status pvl_attr_get(const void *obj, const struct pvl_attr *table, int n, int attr, void *buf, size_t size,
                        size_t *written);

/* Generated (lt_calls_gen.c): LT_MATMUL's arguments from a descriptor and the layouts of A, B, C, D, and the send. */
void pvl_matmul_args(struct pvl_matmul_args *a, const struct pvl_desc *d, const struct pvl_layout *const l[4],
                     const void *A, const void *B, const void *C, const void *D, const void *workspace,
                     size_t workspace_size);
cudaError_t pvl_send_matmul(struct pv_device *dev, uint64_t stream, const struct pvl_matmul_args *a,
                            const void *alpha, size_t alpha_n, const void *beta, size_t beta_n);
cudaError_t pvl_call_heuristic(struct pv_device *dev, const struct pvl_matmul_args *a, uint64_t max_ws,
                               const uint32_t align[4], uint64_t result[2]);

/* The checks a matmul and a heuristic query share: the descriptors' refused attributes, then the table's checks of
 * the arguments (pointers may be NULL placeholders for a heuristic query: it sees no data). */
pvb_status pvl_check(const struct pvl_desc *d, const struct pvl_layout *const l[4], struct pvl_matmul_args *a,
                     const char **why);

#endif
