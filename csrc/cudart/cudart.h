/* libvcudart's internal declarations: the runtime's types and per-thread state on top of the client core (its
 * runtime features, graphs included, are the core's: pv_graph.h). */
#ifndef PV_CUDART_H
#define PV_CUDART_H

#include "pv_core.h"
#include "pv_graph.h"

/* Store a field of a CUDA struct filled in by offset (layouts_gen.h), alignment-safe. */
static inline void pv_put_int(void *base, size_t off, int v) { memcpy((char *)base + off, &v, sizeof v); }
static inline void pv_put_size(void *base, size_t off, size_t v) { memcpy((char *)base + off, &v, sizeof v); }

typedef struct pv_func *cudaKernel_t;

enum { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };

/* ---- per-thread runtime state (thread_state.c) ---- */
struct pv_call_config { dim3 grid, block; size_t shmem; cudaStream_t stream; };
cudaError_t pv_ret(cudaError_t err);      /* records a failure as the thread's last error; returns err */
cudaError_t pv_last_error(int reset);
cudaError_t pv_unsupported(const char *name, atomic_int *once);
int pv_push_config(const struct pv_call_config *cfg);
int pv_pop_config(struct pv_call_config *cfg);

/* The kernel a host-side function (stub) address names, or a cudaKernel_t passed as the function; NULL if neither
 * (api_launch.c). */
struct pv_func *pv_func_of(const void *func);

#endif
