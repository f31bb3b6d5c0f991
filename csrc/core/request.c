/* Requests to a device, as the generated senders (ops_gen.c) make them: the start of a request (connection check,
 * header, device ordinal) and the decoding of typed replies. A malformed result is the daemon's bug or a hostile
 * peer: it is logged and becomes cudaErrorUnknown, never a value the program would trust. */
#include "pv_core.h"

cudaError_t pv_op_begin(struct pv_req *r, struct pv_device *d, int op, int nargs, int want_reply,
                        const void *payload, size_t payload_len, void *out, size_t out_cap)
{
    if (!pv_conn_alive(d->conn))
        return PV_ERR_UNAVAILABLE;
    if (pv_coherence_pending() && op != PV_OP_MANAGED_PUSH && op != PV_OP_MANAGED_DIRTY) {
        /* pages the host wrote reach the device before any work that might read them */
        cudaError_t err = pv_coherence_flush(d);
        if (err != PV_SUCCESS)
            return err;
    }
    pv_req_begin(r, d->conn, op, nargs, want_reply, payload, payload_len, out, out_cap);
    r->dev = d;
    msgpack_pack_int(&r->pk, d->remote);
    return PV_SUCCESS;
}

static cudaError_t malformed(struct pv_device *d, int op, struct pv_reply *rep)
{
    pv_log("GPU%d (%s:%d) answered %s with a malformed result", d->index, d->conn->host, d->conn->port,
           op > 0 && op < PV_OP_TABLE_SIZE && pv_op_names[op] ? pv_op_names[op] : "?");
    pv_reply_free(rep);
    return PV_cudaErrorUnknown;
}

cudaError_t pv_reply_u64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t *out)
{
    uint64_t v;
    if (err == PV_SUCCESS && pv_obj_u64(rep->result, &v) != 0)
        return malformed(d, op, rep);
    if (err == PV_SUCCESS)
        *out = v;
    pv_reply_free(rep);
    return err;
}

cudaError_t pv_reply_i64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, int64_t *out)
{
    int64_t v;
    if (err == PV_SUCCESS && pv_obj_i64(rep->result, &v) != 0)
        return malformed(d, op, rep);
    if (err == PV_SUCCESS)
        *out = v;
    pv_reply_free(rep);
    return err;
}

cudaError_t pv_reply_f64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, double *out)
{
    double v;
    if (err == PV_SUCCESS && pv_obj_f64(rep->result, &v) != 0)
        return malformed(d, op, rep);
    if (err == PV_SUCCESS)
        *out = v;
    pv_reply_free(rep);
    return err;
}

cudaError_t pv_reply_u64x2(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t out[2])
{
    uint64_t a, b;
    if (err == PV_SUCCESS) {
        const msgpack_object *r = rep->result;
        if (!r || r->type != MSGPACK_OBJECT_ARRAY || r->via.array.size != 2 ||
            pv_obj_u64(&r->via.array.ptr[0], &a) != 0 || pv_obj_u64(&r->via.array.ptr[1], &b) != 0)
            return malformed(d, op, rep);
        out[0] = a;
        out[1] = b;
    }
    pv_reply_free(rep);
    return err;
}
