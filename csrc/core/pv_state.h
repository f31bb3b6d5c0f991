/* Logging, config-file paths and the per-thread state every API shares (state.c); error names (errors.c). */
#ifndef PV_STATE_H
#define PV_STATE_H

#include <stdatomic.h>

#include "pv_base.h"

void pv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Logs once per flag (the first caller wins); returns 1 when it logged. */
int pv_log_once(atomic_int *once, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pv_tls_device(void);                  /* current device of this thread (0 by default), shared by all APIs */
void pv_tls_set_device(int dev);
unsigned pv_tls_device_gen(void);         /* counts pv_tls_set_device calls of this thread */
/* The owner new allocations, streams and events of this thread are recorded under: the driver's current context
 * when it is a created one, NULL (its device's primary context) otherwise. */
const void *pv_tls_owner(void);
void pv_tls_set_owner(const void *owner);
#define PV_OWNER_DEVICE ((const void *)1) /* device-level memory no context owns (pools, module storage) */
/* Set by a runtime call on this thread (it binds the device's primary context when none is current); the driver
 * clears it when it changes the thread's contexts. */
int pv_tls_runtime_bound(void);
void pv_tls_set_runtime_bound(int bound);
const char *pv_err_name(cudaError_t err);  /* errors.c: "cudaErrorX" or "error N" */
const char *pv_err_text(cudaError_t err);  /* the description, or NULL for an unknown code */

/* config file paths: $XDG_CONFIG_HOME/pyvgpu/NAME (default ~/.config/pyvgpu/NAME); 0 ok (state.c) */
int pv_config_path(const char *name, char *out, size_t cap);

#endif
