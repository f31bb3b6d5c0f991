/* Launches (launch.c): kernel info, configuration checks, parameter packing, occupancy, attributes. */
#ifndef PV_LAUNCH_H
#define PV_LAUNCH_H

#include "pv_base.h"

struct pv_device;
struct pv_func;
struct pv_kinfo;

/* Kernel info of f on device d, loading its module there on first use. */
cudaError_t pv_kinfo_get(struct pv_func *f, struct pv_device *d, struct pv_kinfo **out);
/* Launches f on d after CUDA's configuration checks: args holds one pointer per parameter, or packed (when not
 * NULL) is the parameter buffer already laid out (at least the layout's size). Fire-and-forget. cooperative: every
 * block resident at once (LAUNCH_COOPERATIVE), checked against the occupancy first (pv_cooperative_check). */
cudaError_t pv_launch(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, uint64_t stream,
                      void **args, const void *packed, size_t packed_len, int cooperative);
/* CUDA's rule for a cooperative launch: at most the occupancy's blocks per multiprocessor on every multiprocessor
 * of d (cudaErrorCooperativeLaunchTooLarge). */
cudaError_t pv_cooperative_check(const struct pv_device *d, const struct pv_kinfo *ki, dim3 grid, dim3 block,
                                 size_t shmem);
/* pv_launch's checks, then the parameter buffer it would send (malloc'd, *len bytes) instead of sending it. */
cudaError_t pv_launch_pack(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, void **args,
                           const void *packed, size_t packed_len, char **buf, size_t *len);
/* The packed parameter buffer cuLaunchKernel's `extra` names (CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE, both
 * needed; anything else is cudaErrorInvalidValue). */
cudaError_t pv_launch_extra(void **extra, const void **buf, size_t *len);
int64_t pv_smem_optin(const struct pv_device *d);   /* largest static + dynamic shared memory of a block */
int pv_occupancy(const struct pv_device *d, const struct pv_kinfo *ki, int block, size_t dyn);
/* The most dynamic shared memory a block may have so that nblocks blocks of `block` threads fit on an SM
 * (cudaOccupancyAvailableDynamicSMemPerBlock's rules); cudaErrorInvalidValue when nblocks cannot fit at all. */
cudaError_t pv_occupancy_dyn_smem(const struct pv_device *d, const struct pv_kinfo *ki, int nblocks, int block,
                                  size_t *out);
/* Sets a function attribute of ki on d (validated, recorded, sent fire-and-forget as FUNC_SET_ATTR); device_wide:
 * the kernel, to keep it for d's later contexts too (cudaFuncSetAttribute, cuKernelSetAttribute), else NULL. */
cudaError_t pv_func_set_attr(struct pv_device *d, struct pv_kinfo *ki, int attr, int value,
                             struct pv_func *device_wide);
int pv_func_cluster_attr(int attr);   /* a thread block cluster attribute (settable on sm_90 and later) */

#endif
