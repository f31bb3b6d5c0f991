/* Requests on a connection: building one (pv_req_begin), sending it whole under the send mutex, waiting for its
 * reply (pv_req_finish), keeping several in flight (pv_req_start / pv_req_collect), and detached requests whose reply
 * nobody waits for (pv_req_detach, bounded by a window of bytes in flight; pv_detached_drain). The replies come
 * through reader.c. */
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_stats.h"
#include "pv_hostmap.h"
#include "transport_internal.h"

void pv_reply_free(struct pv_reply *rep)
{
    if (rep && rep->have_msg) {
        msgpack_unpacked_destroy(&rep->msg);
        free(rep->raw);
        rep->have_msg = 0;
        rep->raw = NULL;
        rep->result = NULL;
    }
}

void pv_req_begin(struct pv_req *r, struct pv_conn *c, int op, int nargs, int want_reply,
                  const void *payload, size_t payload_len, void *out, size_t out_cap)
{
    pv_req_begin_z(r, c, op, nargs, want_reply, payload, payload_len, 0, 0, out, out_cap);
}

void pv_req_begin_z(struct pv_req *r, struct pv_conn *c, int op, int nargs, int want_reply, const void *payload,
                    size_t payload_len, size_t raw_len, int codec, void *out, size_t out_cap)
{
    r->conn = c;
    r->op = op;
    r->dev = NULL;
    r->payload = payload;
    r->payload_len = payload_len;
    r->out = out;
    r->out_cap = out_cap;
    r->req_id = want_reply ? atomic_fetch_add(&c->next_id, 1) : 0;
    msgpack_sbuffer_init(&r->sb);
    msgpack_sbuffer_write(&r->sb, "\0\0\0\0", 4);   /* length prefix, patched in pv_req_finish */
    msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
    msgpack_pack_array(&r->pk, (size_t)(3 + nargs));
    msgpack_pack_int(&r->pk, op);
    msgpack_pack_uint64(&r->pk, r->req_id);
    if (codec) {
        msgpack_pack_array(&r->pk, 3);             /* a compressed payload: [wire_len, raw_len, codec] */
        msgpack_pack_uint64(&r->pk, payload_len);
        msgpack_pack_uint64(&r->pk, raw_len);
        msgpack_pack_int(&r->pk, codec);
    } else {
        msgpack_pack_uint64(&r->pk, payload_len);
    }
}

static cudaError_t send_frame(struct pv_req *r)
{
    struct pv_conn *c = r->conn;
    pv_seal_frame(&r->sb);
    pthread_mutex_lock(&c->send_mu);
    pthread_mutex_lock(&c->mu);
    mark_busy(c, c->pending == NULL);
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add(&c->sending, 1);
    int rc = atomic_load(&c->dead) ? -1 : pv_io_write(&c->io, r->sb.data, r->sb.size, r->payload, r->payload_len);
    atomic_fetch_sub(&c->sending, 1);
    pthread_mutex_unlock(&c->send_mu);
    if (rc != 0) {
        conn_fail(c, "send failed");
        return PV_ERR_UNAVAILABLE;
    }
    return PV_SUCCESS;
}

static int dev_index(const struct pv_req *r) { return r->dev ? r->dev->index : -1; }

static int pending_done(struct pv_conn *c, void *arg) { return ((struct pv_pending *)arg)->done; }

/* A request with a reply, sent and not yet collected: pv_req_finish keeps it on its stack, pv_req_start on the heap
 * so that one thread can keep several in flight (pipelined copies, copy.c). */
struct pv_inflight {
    struct pv_pending p;
    struct pv_conn *conn;
    int op, dev;
    size_t payload_len;
    int64_t t0;
};

/* Registers the request's pending reply and sends it. Not PV_SUCCESS: nothing is registered (r is released). */
static cudaError_t inflight_send(struct pv_req *r, struct pv_inflight *f)
{
    struct pv_conn *c = r->conn;
    memset(f, 0, sizeof *f);
    f->conn = c;
    f->op = r->op;
    f->dev = dev_index(r);
    f->payload_len = r->payload_len;
    f->p.id = r->req_id;
    f->p.out = r->out;
    f->p.out_cap = r->out_cap;
    f->p.dev = r->dev;
    pthread_cond_init(&f->p.cv, NULL);
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->dead)) {
        pthread_mutex_unlock(&c->mu);
        pthread_cond_destroy(&f->p.cv);
        msgpack_sbuffer_destroy(&r->sb);
        return PV_ERR_UNAVAILABLE;
    }
    mark_busy(c, c->pending == NULL && atomic_load(&c->sending) == 0);
    f->p.next = c->pending;
    c->pending = &f->p;
    pthread_mutex_unlock(&c->mu);
    f->t0 = pv_now_ns();
    (void)send_frame(r);   /* a send failure fails every pending request, this one included */
    msgpack_sbuffer_destroy(&r->sb);
    return PV_SUCCESS;
}

/* Waits (bounded: wait_until) for the reply of f and hands it over as pv_req_finish does. The statistics count the
 * call as blocked for the time since `since`; a collected request (late: !sent_now) only if its reply had not
 * arrived yet. */
static cudaError_t inflight_wait(struct pv_inflight *f, struct pv_reply *rep, int sent_now, int64_t since)
{
    struct pv_conn *c = f->conn;
    pthread_mutex_lock(&c->mu);
    int blocked = sent_now || !f->p.done;
    wait_until(c, &f->p.cv, pending_done, &f->p);
    pthread_mutex_unlock(&c->mu);
    pv_stats_note(f->op, f->dev, 1, f->payload_len + f->p.wire_len, blocked, blocked ? pv_now_ns() - since : 0);
    pthread_cond_destroy(&f->p.cv);
    cudaError_t err = f->p.err;
    if (rep) {
        *rep = f->p.rep;
        rep->err = err;
    } else {
        pv_reply_free(&f->p.rep);
    }
    return err;
}

cudaError_t pv_req_finish(struct pv_req *r, struct pv_reply *rep)
{
    if (rep)
        memset(rep, 0, sizeof *rep);
    if (r->req_id == 0) {
        cudaError_t err = send_frame(r);
        msgpack_sbuffer_destroy(&r->sb);
        pv_stats_note(r->op, dev_index(r), 1, r->payload_len, 0, 0);
        return err;
    }
    struct pv_inflight f;
    cudaError_t err = inflight_send(r, &f);
    return err != PV_SUCCESS ? err : inflight_wait(&f, rep, 1, f.t0);
}

cudaError_t pv_req_start(struct pv_req *r, struct pv_inflight **out)
{
    *out = NULL;
    struct pv_inflight *f = malloc(sizeof *f);
    if (!f) {
        msgpack_sbuffer_destroy(&r->sb);
        return PV_cudaErrorMemoryAllocation;
    }
    cudaError_t err = inflight_send(r, f);
    if (err != PV_SUCCESS)
        free(f);
    else
        *out = f;
    return err;
}

cudaError_t pv_req_collect(struct pv_inflight *f, struct pv_reply *rep)
{
    if (rep)
        memset(rep, 0, sizeof *rep);
    cudaError_t err = inflight_wait(f, rep, 0, pv_now_ns());   /* its time in flight before: not waited for */
    free(f);
    return err;
}

struct window_need {
    size_t bytes;
};

/* Room in the window of detached requests for need->bytes more (or the connection is dead). With c->mu held. */
static int window_room(struct pv_conn *c, void *arg)
{
    size_t n = ((struct window_need *)arg)->bytes;
    return atomic_load(&c->dead) || c->detached_n == 0 ||
           (c->detached_bytes + n <= PV_DETACH_WINDOW_BYTES && c->detached_n < PV_DETACH_MAX);
}

/* A request whose reply nobody waits for (its payload lands in r->out when it comes; see pv_transport.h). Waits only
 * for room in the connection's window of bytes in flight. */
cudaError_t pv_req_detach(struct pv_req *r)
{
    struct pv_conn *c = r->conn;
    struct pv_pending *p = calloc(1, sizeof *p);
    if (!p) {
        msgpack_sbuffer_destroy(&r->sb);
        return PV_cudaErrorMemoryAllocation;
    }
    p->id = r->req_id;
    p->out = r->out;
    p->out_cap = r->out_cap;
    p->dev = r->dev;
    p->op = r->op;
    p->detached = 1;
    int64_t t0 = pv_now_ns();
    int waited = 0;
    pthread_mutex_lock(&c->mu);
    struct window_need need = { r->out_cap };
    waited = !window_room(c, &need);     /* the window is full: wait for the oldest bytes in flight */
    wait_until(c, &c->detached_cv, window_room, &need);
    if (atomic_load(&c->dead)) {
        pthread_mutex_unlock(&c->mu);
        free(p);
        msgpack_sbuffer_destroy(&r->sb);
        return PV_ERR_UNAVAILABLE;
    }
    mark_busy(c, c->pending == NULL && atomic_load(&c->sending) == 0);
    p->next = c->pending;
    c->pending = p;
    c->detached_n++;
    c->detached_bytes += r->out_cap;
    pthread_mutex_unlock(&c->mu);
    cudaError_t err = send_frame(r);   /* a failure ends the connection, which frees p */
    msgpack_sbuffer_destroy(&r->sb);
    if (waited)                   /* the call itself is counted when its reply completes it */
        pv_stats_note(r->op, dev_index(r), 0, 0, 1, pv_now_ns() - t0);
    return err;
}

static int overlaps(const struct pv_pending *p, uintptr_t lo, uintptr_t hi)
{
    uintptr_t a = (uintptr_t)p->out;
    return p->detached && a < hi && lo < a + p->out_cap;
}

static int detached_into(struct pv_conn *c, uintptr_t lo, uintptr_t hi)
{
    if (c->current && overlaps(c->current, lo, hi))
        return 1;
    for (struct pv_pending *p = c->pending; p; p = p->next)
        if (overlaps(p, lo, hi))
            return 1;
    return 0;
}

/* No detached request of c brings bytes into range [0], [1] (or c is dead). With c->mu held. */
static int drained(struct pv_conn *c, void *arg)
{
    const uintptr_t *range = arg;
    return atomic_load(&c->dead) || !detached_into(c, range[0], range[1]);
}

void pv_detached_drain(const void *lo, size_t n)
{
    uintptr_t range[2] = { (uintptr_t)lo, (uintptr_t)lo + n };
    struct pv_conn *conns[PV_MAX_CONNS];
    int count = conns_snapshot(conns);
    for (int i = 0; i < count; i++) {
        struct pv_conn *c = conns[i];
        pthread_mutex_lock(&c->mu);
        wait_until(c, &c->detached_cv, drained, range);
        pthread_mutex_unlock(&c->mu);
    }
}
