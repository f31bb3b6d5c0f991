/* What a client tells a shared daemon in its hello besides the handshake itself: who it is (pid and host name, for
 * `pyvgpu daemon status`, `pyvgpu top` and the metrics labels) and, from the environment `pyvgpu run` sets, the
 * device memory it asks for (PYVGPU_MEMORY), its share weight (PYVGPU_WEIGHT) and the GPU leases it holds
 * (PYVGPU_LEASES, set by `pyvgpu run -n` and in Slurm jobs; the daemon takes the ids that are its own and checks
 * them: daemon/pyvgpu_daemon/leases.py). The daemon caps memory and weight by its own limits
 * (daemon/pyvgpu_daemon/sharing.py). A malformed value is reported once and not sent. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_hello.h"

static atomic_int bad_memory_noted, bad_weight_noted;

/* "1073741824", "512M", "2G", "1.5GiB" (binary units) → bytes; 0 when malformed or not positive. */
static uint64_t parse_size(const char *text)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || !(v > 0))
        return 0;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mult > 1 && (end[0] == 'i' || end[0] == 'I'))
        end++;
    if (end[0] == 'B' || end[0] == 'b')
        end++;
    double bytes = v * mult;
    return (*end || bytes >= 18446744073709551615.0 || bytes < 1) ? 0 : (uint64_t)bytes;
}

void pv_hello_extra_read(struct pv_hello_extra *x)
{
    memset(x, 0, sizeof *x);
    x->pid = (uint64_t)getpid();
    if (gethostname(x->hostname, sizeof x->hostname - 1) != 0)
        snprintf(x->hostname, sizeof x->hostname, "?");
    const char *mem = getenv(PV_KEY_ENV_MEMORY);
    if (mem && *mem) {
        x->memory = parse_size(mem);
        if (!x->memory)
            pv_log_once(&bad_memory_noted, "ignoring %s='%s': expected a size such as 1G or 512M",
                        PV_KEY_ENV_MEMORY, mem);
    }
    const char *w = getenv(PV_KEY_ENV_WEIGHT);
    if (w && *w) {
        char *end;
        double v = strtod(w, &end);
        if (end != w && !*end && v > 0 && isfinite(v))
            x->weight = v;
        else
            pv_log_once(&bad_weight_noted, "ignoring %s='%s': expected a positive number", PV_KEY_ENV_WEIGHT, w);
    }
    const char *leases = getenv(PV_KEY_ENV_LEASES);
    if (leases && *leases)
        x->leases = leases;
}

int pv_hello_extra_count(const struct pv_hello_extra *x)
{
    return 2 + (x->memory != 0) + (x->weight > 0) + (x->leases != NULL);
}

void pv_hello_extra_pack(msgpack_packer *pk, const struct pv_hello_extra *x)
{
    pv_pack_str(pk, PV_KEY_HELLO_PID);
    msgpack_pack_uint64(pk, x->pid);
    pv_pack_str(pk, PV_KEY_HELLO_HOSTNAME);
    pv_pack_str(pk, x->hostname);
    if (x->memory) {
        pv_pack_str(pk, PV_KEY_HELLO_MEMORY);
        msgpack_pack_uint64(pk, x->memory);
    }
    if (x->weight > 0) {
        pv_pack_str(pk, PV_KEY_HELLO_WEIGHT);
        msgpack_pack_double(pk, x->weight);
    }
    if (x->leases) {
        pv_pack_str(pk, PV_KEY_HELLO_LEASES);
        pv_pack_str(pk, x->leases);
    }
}
