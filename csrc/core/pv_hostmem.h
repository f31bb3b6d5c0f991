/* Page-locked host memory as the GPUs see it (hostmem.c); pinned allocations (registry.c). */
#ifndef PV_HOSTMEM_H
#define PV_HOSTMEM_H

#include "pv_base.h"

struct pv_device;
struct pv_kinfo;

/* Pinned host memory (PV_HOST_ALIGN-aligned, recorded in the allocation table as host memory). */
#define PV_HOST_ALIGN 4096
cudaError_t pv_host_alloc(size_t size, unsigned flags, void **out);
/* hostmem.c: [p, p+size) is pinned memory (launches look for it in parameters); whether [p, p+n) is registered
 * memory (cudaHostRegister; *flags its flags, when asked); a launch's parameter words naming pinned memory become
 * its device copy's addresses (dry: only count them in *hits). */
void pv_host_pinned_note(uint64_t p, size_t size);
int pv_host_registered(const void *p, size_t n, unsigned *flags);
cudaError_t pv_host_translate(struct pv_device *d, const struct pv_kinfo *ki, char *buf, int dry, int *hits);
cudaError_t pv_host_free(void *ptr);                      /* cudaErrorInvalidValue unless from pv_host_alloc */
cudaError_t pv_host_flags(const void *ptr, unsigned *flags);

#endif
