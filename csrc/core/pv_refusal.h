/* Modules the daemon refused (refusal.c): why, once per library; the refusal latched on the device. */
#ifndef PV_REFUSAL_H
#define PV_REFUSAL_H

#include "pv_base.h"

struct pv_device;

/* refusal.c: one line on why d refused a module image (SASS only on the emulated GPU: once per library, named by
 * origin, an address inside the library that held the image). */
void pv_explain_refusal(const void *image, size_t size, const void *origin, struct pv_device *d, cudaError_t err);
/* refusal.c: a kernel of a module the daemon refused was used on d; every later synchronizing call on d answers
 * with err instead of success (sticky until a device reset), so no program reads, as a result, memory that no
 * kernel wrote. A real GPU's cudaErrorNoKernelImageForDevice is not latched: CUDA answers it only where used. */
void pv_refusal_latch(struct pv_device *d, cudaError_t err);
cudaError_t pv_sync_result(struct pv_device *d, cudaError_t err);   /* after a SYNC_POINTS op answered err */

#endif
