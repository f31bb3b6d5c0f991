/* Logging, config-file paths and the per-thread state every API library shares: the current device (cudaSetDevice
 * and the driver's current context agree on it), the owner new resources are recorded under (the driver's current
 * context), and what the runtime did to the thread's context since the driver last looked. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "pv_state.h"

static _Thread_local int tls_device;
static _Thread_local const void *tls_owner;
static _Thread_local unsigned tls_device_gen;
static _Thread_local int tls_runtime_bound;

static void vlog(const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    fprintf(stderr, "pyvgpu: %s\n", buf);
}

void pv_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

int pv_log_once(atomic_int *once, const char *fmt, ...)
{
    if (atomic_exchange(once, 1) != 0)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
    return 1;
}

int pv_tls_device(void) { return tls_device; }
void pv_tls_set_device(int dev)
{
    tls_device = dev;
    tls_device_gen++;
}
unsigned pv_tls_device_gen(void) { return tls_device_gen; }
const void *pv_tls_owner(void) { return tls_owner; }
void pv_tls_set_owner(const void *owner) { tls_owner = owner; }
int pv_tls_runtime_bound(void) { return tls_runtime_bound; }
void pv_tls_set_runtime_bound(int bound) { tls_runtime_bound = bound; }

int pv_config_path(const char *name, char *out, size_t cap)
{
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(out, cap, "%s/pyvgpu/%s", xdg, name);
    else if (home && *home)
        n = snprintf(out, cap, "%s/.config/pyvgpu/%s", home, name);
    else
        return -1;
    return n > 0 && (size_t)n < cap ? 0 : -1;
}
