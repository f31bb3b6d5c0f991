/* Host copies of managed and mapped memory (coherence.c; its model at the top of coherence.c). */
#ifndef PV_COHERENCE_H
#define PV_COHERENCE_H

#include "pv_base.h"

struct pv_device;

enum { PV_REGION_MANAGED = 1, PV_REGION_MAPPED = 2, PV_REGION_VAR = 3, PV_REGION_REGISTERED = 4 };
struct pv_region_info {
    uint64_t host;                 /* where the host copy is (== dev except for registered host memory) */
    uint64_t dev;                  /* the device address */
    size_t size;
    int device;                    /* global index of the device holding it */
    int kind;                      /* PV_REGION_* */
};
size_t pv_page_size(void);
/* A managed or mapped allocation of `size` bytes (rounded up to pages) on d, its host copy mapped at its address. */
cudaError_t pv_region_alloc(struct pv_device *d, size_t size, int kind, struct pv_region_info *out);
/* A device copy on d of the program's memory [host, host+size), kept coherent (cudaHostRegisterMapped). */
cudaError_t pv_region_register(struct pv_device *d, void *host, size_t size, struct pv_region_info *out);
/* A __managed__ variable's storage on d, mirrored at its own address. */
cudaError_t pv_region_attach(struct pv_device *d, uint64_t dev, size_t size, struct pv_region_info *out);
cudaError_t pv_region_free(uint64_t host);          /* by host address; frees the device copy it owns */
int pv_region_find(const void *p, struct pv_region_info *out);   /* host or device address inside a region; 0 ok */
int pv_coherence_pending(void);                     /* the host has written pages not pushed yet */
cudaError_t pv_coherence_flush(struct pv_device *target);        /* push them (before work goes to target) */
/* After a synchronizing op on d answered err: brings the host copies up to date; → err, or the sticky conflict error
 * when the host and the device changed the same bytes (docs/architecture.md, the coherence model). */
cudaError_t pv_coherence_after_sync(struct pv_device *d, cudaError_t err);
void pv_coherence_forget_device(int device);        /* cudaDeviceReset: its regions are gone */

#endif
