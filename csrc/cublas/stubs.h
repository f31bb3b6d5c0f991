/* What the generated fallbacks (unsupported_gen.c) need: ABI-equivalent return types and the logger. */
#ifndef PVB_STUBS_H
#define PVB_STUBS_H

#include <stdatomic.h>
#include <stddef.h>

#define PVB_WEAK_API __attribute__((visibility("default"), weak))

typedef int pvb_status;                             /* cublasStatus_t: a C enum, int-sized */
struct pvb_complex { float x, y; };                 /* cuComplex (float2): returned in xmm0 */
struct pvb_double_complex { double x, y; };         /* cuDoubleComplex (double2): returned in xmm0:xmm1 */

/* Logs "NAME is not supported by libvcublas" the first time `once` is seen; returns CUBLAS_STATUS_NOT_SUPPORTED. */
pvb_status pvb_unsupported(const char *name, atomic_int *once);

#endif
