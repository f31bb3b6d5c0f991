/* One connection per host: connect and handshake, liveness, fork handling (connection.c); replies read by the thread
 * holding the read role and matched to requests by req_id (reader.c); requests built, sent, waited for, started and
 * collected later, detached (inflight.c). */
#ifndef PV_TRANSPORT_H
#define PV_TRANSPORT_H

#include <pthread.h>
#include <stdatomic.h>

#include "pv_io.h"

struct pv_device;

struct pv_pending;
struct pv_conn {
    char host[256];
    int port;
    struct pv_io io;
    int first_gpu;                 /* pointer window index of this host's device 0 (see pv_conn_open) */
    int ndev;
    atomic_int dead;
    atomic_uint_fast64_t next_id;
    pthread_mutex_t send_mu;       /* one frame at a time on the socket */
    pthread_mutex_t mu;            /* pending list, receiving, detached requests */
    struct pv_pending *pending;
    int receiving;                 /* the reader is reading the payload of a reply someone waits for */
    struct pv_pending *current;    /* ... that reply's request */
    pthread_cond_t detached_cv;    /* a detached request completed, the read role is free, or the connection died */
    int detached_n;                /* detached requests in flight (pv_req_detach) */
    size_t detached_bytes;         /* reply payload bytes they will bring, at most PV_DETACH_WINDOW_BYTES */
    int reading;                   /* a thread holds the read role: it alone reads frames (reader.c) */
    pthread_t reader;
    atomic_int reader_started;
    atomic_int sending;            /* threads inside a send */
    _Atomic int64_t busy_since_ms; /* when the connection last went from idle to waiting/sending */
    int64_t silence_ms;            /* PYVGPU_REPLY_TIMEOUT_MS: a waiting call gives up after this long unheard */
    int64_t ping_ms;               /* PYVGPU_PING_INTERVAL_MS: keepalive when nothing was sent for this long */
    _Atomic int64_t handshake_deadline_ms;   /* nonzero while connecting */
    int codecs;                    /* bit (1 << codec): compression the hello negotiated (compress.c) */
    _Atomic uint64_t peer_rx_rate; /* bytes/s the daemon receives bulk payloads at (its notices); 0: unknown */
    double rx_rate;                /* bytes/s bulk replies arrive at here (the thread holding the read role) */
    double rx_reported;            /* ... as last told to the daemon (LINK_RATE) */
    atomic_int reason_noted;       /* the daemon's reason for refusing a call was logged (once per connection) */
};

struct pv_reply {
    int err;
    msgpack_unpacked msg;          /* owns result */
    char *raw;                     /* header bytes the result may point into */
    const msgpack_object *result;
    int have_msg;
    size_t payload_len;            /* bytes written into the caller's out buffer */
};

/* A request being built. The generated senders (ops_gen.c) are its only users outside the transport. */
struct pv_req {
    struct pv_conn *conn;
    int op;
    struct pv_device *dev;         /* the device of a device op (set by pv_op_begin), else NULL */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t req_id;
    const void *payload;
    size_t payload_len;
    void *out;                     /* reply payload destination (PAYLOAD_OUT ops) */
    size_t out_cap;
};
/* Starts a request on connection c: header [op, req_id, payload_len] for nargs arguments the caller packs next. */
void pv_req_begin(struct pv_req *r, struct pv_conn *c, int op, int nargs, int want_reply, const void *payload,
                  size_t payload_len, void *out, size_t out_cap);
/* ... its payload compressed by codec (payload_len bytes on the wire, raw_len decoded); codec 0: pv_req_begin. */
void pv_req_begin_z(struct pv_req *r, struct pv_conn *c, int op, int nargs, int want_reply, const void *payload,
                    size_t payload_len, size_t raw_len, int codec, void *out, size_t out_cap);
/* Sends the request; for a reply request waits for it and fills rep (pv_reply_free after; rep may be NULL).
 * Returns the cudaError_t of the call (transport failures: PV_ERR_UNAVAILABLE). */
cudaError_t pv_req_finish(struct pv_req *r, struct pv_reply *rep);
/* pv_req_finish in two halves, so that one thread can keep several requests in flight (a pipelined copy, copy.c):
 * pv_req_start sends a reply request (*out: its handle; not PV_SUCCESS: nothing was sent or kept), and
 * pv_req_collect waits for its reply, fills rep as pv_req_finish does and frees the handle. Every started request
 * must be collected: its reply payload lands in the request's out buffer whenever it arrives. */
struct pv_inflight;
cudaError_t pv_req_start(struct pv_req *r, struct pv_inflight **out);
cudaError_t pv_req_collect(struct pv_inflight *f, struct pv_reply *rep);
void pv_reply_free(struct pv_reply *rep);
/* Sends a request (req_id != 0, out/out_cap its reply payload's destination) without waiting for the reply: the
 * reader thread puts the payload into out when it arrives, before any later reply of the connection is delivered
 * (the daemon answers in order), and frees the request. For ops flagged DETACHED, whose failure the daemon latches
 * for the next synchronizing call. Blocks only while the connection's detached bytes in flight would exceed
 * PV_DETACH_WINDOW_BYTES (or PV_DETACH_MAX requests); the wait is bounded like a reply's. */
#define PV_DETACH_MAX 1024
cudaError_t pv_req_detach(struct pv_req *r);
/* Until no detached request still writes into [p, p+n) (freeing or unregistering host memory). */
void pv_detached_drain(const void *p, size_t n);

/* Connects and performs the handshake; the caller owns *hello (pv_reply_free). NULL + *err on failure.
 * first_gpu: the index of the pointer window of the daemon's device 0 (va_base = (first_gpu + 1) * window). */
struct pv_conn *pv_conn_open(const char *host, int port, int first_gpu, struct pv_reply *hello, cudaError_t *err);
/* The pointer window of the connection's device 0 (the hello's va_base): (first_gpu + 1) windows, moved up by
 * PYVGPU_VA_BASE (the first host's va_base, a multiple of the window; for a client that must leave the first
 * windows free, e.g. a cuda backend daemon running on libvcuda: docs/architecture.md, "The chain"). */
uint64_t pv_conn_va_base(const struct pv_conn *c);
int pv_conn_alive(const struct pv_conn *c);

#endif
