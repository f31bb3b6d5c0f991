/* Requests to a device, as the generated senders (ops_gen.c) make them: the start of a request (connection check,
 * header, device ordinal) and the decoding of typed replies. A malformed result is the daemon's bug or a hostile
 * peer: it is logged and becomes cudaErrorUnknown, never a value the program would trust. */
#include "pv_state.h"
#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_coherence.h"

cudaError_t pv_op_begin(struct pv_req *r, struct pv_device *d, int op, int nargs, int want_reply,
                        const void *payload, size_t payload_len, void *out, size_t out_cap)
{
    return pv_op_begin_z(r, d, op, nargs, want_reply, payload, payload_len, 0, 0, out, out_cap);
}

cudaError_t pv_op_begin_z(struct pv_req *r, struct pv_device *d, int op, int nargs, int want_reply,
                          const void *payload, size_t payload_len, size_t raw_len, int codec, void *out,
                          size_t out_cap)
{
    if (!pv_conn_alive(d->conn))
        return PV_ERR_UNAVAILABLE;
    if (pv_coherence_pending() && op != PV_OP_MANAGED_PUSH && op != PV_OP_MANAGED_DIRTY) {
        /* pages the host wrote reach the device before any work that might read them */
        cudaError_t err = pv_coherence_flush(d);
        if (err != PV_SUCCESS)
            return err;
    }
    pv_req_begin_z(r, d->conn, op, nargs, want_reply, payload, payload_len, raw_len, codec, out, out_cap);
    atomic_fetch_add_explicit(&d->sent, 1, memory_order_acq_rel);
    r->dev = d;
    msgpack_pack_int(&r->pk, d->remote);
    return PV_SUCCESS;
}

/* STATUS, the daemon-wide query (no device, no arguments; as the tools send it): the whole map in *rep, which the
 * caller frees (it is zeroed first, so freeing is always safe). */
cudaError_t pv_conn_status(struct pv_conn *c, struct pv_reply *rep)
{
    struct pv_req r;
    memset(rep, 0, sizeof *rep);
    if (!pv_conn_alive(c))
        return PV_ERR_UNAVAILABLE;
    pv_req_begin(&r, c, PV_OP_STATUS, PV_OP_STATUS_NARGS, 1, NULL, 0, NULL, 0);
    return pv_req_finish(&r, rep);
}

static cudaError_t malformed(struct pv_device *d, int op, struct pv_reply *rep)
{
    pv_log("GPU%d (%s:%d) answered %s with a malformed result", d->index, d->conn->host, d->conn->port,
           op > 0 && op < PV_OP_TABLE_SIZE && pv_op_names[op] ? pv_op_names[op] : "?");
    pv_reply_free(rep);
    return PV_cudaErrorUnknown;
}

/* Decoders: 0 and *out set when the result has the shape, -1 otherwise (*out untouched). */
typedef int (*decode_fn)(const msgpack_object *o, void *out);

static int dec_u64(const msgpack_object *o, void *out) { return pv_obj_u64(o, out); }
static int dec_i64(const msgpack_object *o, void *out) { return pv_obj_i64(o, out); }
static int dec_f64(const msgpack_object *o, void *out) { return pv_obj_f64(o, out); }

static int dec_u64x2(const msgpack_object *o, void *out)
{
    uint64_t v[2];
    if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        pv_obj_u64(&o->via.array.ptr[0], &v[0]) != 0 || pv_obj_u64(&o->via.array.ptr[1], &v[1]) != 0)
        return -1;
    memcpy(out, v, sizeof v);
    return 0;
}

static cudaError_t reply_value(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, decode_fn decode,
                               void *out)
{
    if (err == PV_SUCCESS && decode(rep->result, out) != 0)
        return malformed(d, op, rep);
    pv_reply_free(rep);
    return err;
}

cudaError_t pv_reply_u64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t *out)
{
    return reply_value(d, op, err, rep, dec_u64, out);
}

cudaError_t pv_reply_i64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, int64_t *out)
{
    return reply_value(d, op, err, rep, dec_i64, out);
}

cudaError_t pv_reply_f64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, double *out)
{
    return reply_value(d, op, err, rep, dec_f64, out);
}

cudaError_t pv_reply_u64x2(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t out[2])
{
    return reply_value(d, op, err, rep, dec_u64x2, out);
}
