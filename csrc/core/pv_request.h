/* Requests to a device (request.c): what the generated senders (ops_gen.h, included here) are built from; the
 * fire-and-forget send that a recorder may capture (record.c). */
#ifndef PV_REQUEST_H
#define PV_REQUEST_H

#include "pv_transport.h"
#include "pv_hostmap.h"

/* Starts a request of op to device d: nargs counts every wire argument (the device ordinal included; the caller
 * packs the rest). PV_ERR_UNAVAILABLE when d's connection is gone. */
cudaError_t pv_op_begin(struct pv_req *r, struct pv_device *d, int op, int nargs, int want_reply,
                        const void *payload, size_t payload_len, void *out, size_t out_cap);
/* ... with a payload compressed by codec (payload_len bytes on the wire, raw_len once decoded); codec 0: plain. */
cudaError_t pv_op_begin_z(struct pv_req *r, struct pv_device *d, int op, int nargs, int want_reply,
                          const void *payload, size_t payload_len, size_t raw_len, int codec, void *out,
                          size_t out_cap);
cudaError_t pv_conn_status(struct pv_conn *c, struct pv_reply *rep);  /* STATUS (request.c); caller frees rep */
/* Decode a reply's result into *out when err is PV_SUCCESS; free rep; a malformed result is logged and becomes
 * cudaErrorUnknown. They return the call's error. */
cudaError_t pv_reply_u64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t *out);
cudaError_t pv_reply_i64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, int64_t *out);
cudaError_t pv_reply_f64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, double *out);
cudaError_t pv_reply_u64x2(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t out[2]);
/* Sends a fire-and-forget request, or appends it to this thread's recorder when one is active (record.c). */
cudaError_t pv_req_send(struct pv_req *r);
#include "ops_gen.h"

#endif
