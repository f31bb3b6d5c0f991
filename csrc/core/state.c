/* Logging, config-file paths and the per-thread state every API library shares: the current device (cudaSetDevice
 * and the driver's current context agree on it). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "pv_core.h"

static _Thread_local int tls_device;

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
void pv_tls_set_device(int dev) { tls_device = dev; }

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
