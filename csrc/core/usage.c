/* A device's figures from its daemon (STATUS, the `device_usage` entry of the device's daemon-local ordinal):
 * memory in use by every session, total and free memory, the share of the last second it ran work. NVML's answers
 * (libvnvml) come from here. */
#include "pv_state.h"
#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_usage.h"
#include "pv_request.h"

static int field_u64(const msgpack_object *m, const char *key, uint64_t *out)
{
    double f;
    if (pv_obj_u64(pv_map_get(m, key), out) == 0)
        return 0;
    if (pv_obj_f64(pv_map_get(m, key), &f) == 0 && f >= 0) {
        *out = (uint64_t)f;
        return 0;
    }
    return -1;
}

cudaError_t pv_device_usage(struct pv_device *d, struct pv_usage *out)
{
    struct pv_reply rep;
    cudaError_t err = pv_conn_status(d->conn, &rep);
    if (err != PV_SUCCESS) {
        pv_reply_free(&rep);
        return err;
    }
    const msgpack_object *list = pv_map_get(rep.result, PV_KEY_STATUS_DEVICE_USAGE);
    err = PV_cudaErrorUnknown;                           /* until the device's entry is found and well formed */
    for (uint32_t i = 0; list && list->type == MSGPACK_OBJECT_ARRAY && i < list->via.array.size; i++) {
        const msgpack_object *u = &list->via.array.ptr[i];
        uint64_t dev;
        double busy = 0;
        if (pv_obj_u64(pv_map_get(u, PV_KEY_USAGE_DEVICE), &dev) != 0 || dev != (uint64_t)d->remote)
            continue;
        if (field_u64(u, PV_KEY_USAGE_MEMORY_USED, &out->used) == 0 &&
            field_u64(u, PV_KEY_USAGE_MEMORY_TOTAL, &out->total) == 0 &&
            field_u64(u, PV_KEY_USAGE_MEMORY_FREE, &out->free) == 0) {
            pv_obj_f64(pv_map_get(u, PV_KEY_USAGE_BUSY_RATIO_1S), &busy);
            out->busy = busy < 0 ? 0 : busy > 1 ? 1 : busy;
            err = PV_SUCCESS;
        }
        break;
    }
    if (err != PV_SUCCESS)
        pv_log("GPU%d (%s:%d): the daemon's status has no usable figures for its device %d", d->index,
               d->conn->host, d->conn->port, d->remote);
    pv_reply_free(&rep);
    return err;
}
