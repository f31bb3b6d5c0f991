/* What connection.c, reader.c and inflight.c (the transport: one connection per host) share; not part of the
 * core's interface (pv_transport.h is). */
#ifndef PV_TRANSPORT_INTERNAL_H
#define PV_TRANSPORT_INTERNAL_H

#include <pthread.h>

#include "pv_transport.h"

struct pv_pending {
    uint64_t id;
    int done;
    int err;
    struct pv_reply rep;
    void *out;
    size_t out_cap;
    struct pv_device *dev;         /* the device the request went to (event times in its reply are that device's) */
    int op;                        /* its op (statistics of detached requests) */
    size_t wire_len;               /* reply payload bytes on the wire (compressed or not) */
    int detached;                  /* nobody waits: heap-allocated, freed by whoever completes it (pv_req_detach) */
    pthread_cond_t cv;
    struct pv_pending *next;
};

/* connection.c */
/* The connection failed (why: logged once): every request waiting on it completes with PV_ERR_UNAVAILABLE. */
void conn_fail(struct pv_conn *c, const char *why);
int conn_silent(struct pv_conn *c, int64_t now);   /* a call waits (or a send is stuck) on a daemon silent too long */
void fail_silent(struct pv_conn *c);               /* conn_fail saying so */
void mark_busy(struct pv_conn *c, int was_idle);   /* the connection went from idle to waiting: silence counts now */
void send_ping(struct pv_conn *c);                 /* keepalive, unless a frame is on its way */
/* The open connections (at most PV_MAX_CONNS) copied into out; their count. */
#define PV_MAX_CONNS 64
int conns_snapshot(struct pv_conn *out[PV_MAX_CONNS]);

/* reader.c */
void *reader_main(void *arg);      /* the background thread ("sweeper") of connection arg */
/* Until ready(c, arg), reading replies itself when nobody holds the read role; bounded; c->mu held. */
void wait_until(struct pv_conn *c, pthread_cond_t *cv, int (*ready)(struct pv_conn *c, void *arg), void *arg);

#endif
