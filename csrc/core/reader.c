/* Reading one connection's replies (connection.c has the connection itself): a send mutex keeps frames whole;
 * replies are read by whichever thread holds the read role and handed to the thread waiting for their req_id.
 *
 * Who reads: a thread waiting for a reply takes the read role itself when nobody holds it (leader/follower), so a
 * lone synchronous call is one send and one receive on the calling thread, as a plain socket round trip: a reader
 * thread that received the reply and then woke the caller cost one more cross-thread wake-up per call, which on a
 * virtualised host is the largest part of a small call (bench/README.md, "where the time goes"). The leader reads
 * until its own reply arrives, handing other threads' replies to them; leaving, it wakes one waiter to lead. The
 * background thread ("sweeper") never sleeps on the socket, so it is not woken by replies: every PV_IO_TICK_MS it
 * reads what arrived while no call waited (heartbeats, the daemon's notice that it ends the session), checks that a
 * waited-for daemon is still heard from, and pings an idle daemon.
 *
 * The daemon may end a session with a notice (req_id 0, err != 0) saying why; printf output follows a reply's
 * payload and is relayed to fd 1 in pieces, whatever its size. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pv_state.h"
#include "pv_io.h"
#include "pv_wire.h"
#include "pv_stats.h"
#include "pv_compress.h"
#include "pv_hostmap.h"
#include "pv_streams.h"
#include "transport_internal.h"

/* Reads n bytes of the stream and hands each piece to sink (NULL: discard). -1 when the stream fails. */
static int relay(struct pv_conn *c, uint64_t n, void (*sink)(const char *, size_t))
{
    char buf[65536];
    while (n > 0) {
        size_t k = n > sizeof buf ? sizeof buf : (size_t)n;
        if (pv_io_read(&c->io, buf, k) != 0)
            return -1;
        if (sink)
            sink(buf, k);
        n -= k;
    }
    return 0;
}

/* Device printf output, in the order the daemon sent it, after whatever the program already printed. */
static void to_stdout(const char *p, size_t n)
{
    fflush(stdout);
    while (n > 0) {
        ssize_t k = write(1, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        p += k;
        n -= (size_t)k;
    }
}

/* A notice (req_id 0): a heartbeat, or the daemon ending the session. 0: carry on; -1: the session is over. */
static int notice(struct pv_conn *c, int64_t err, const msgpack_object *result)
{
    if (err == 0) {
        uint64_t rate;
        const msgpack_object *r = pv_map_get(result, PV_KEY_NOTICE_RATE);
        if (r && pv_obj_u64(r, &rate) == 0)
            atomic_store(&c->peer_rx_rate, rate);   /* the daemon's receive rate: compression decides by it */
        return 0;
    }
    char reason[256] = "no reason given", why[320];
    (void)pv_obj_str(result, reason, sizeof reason);
    snprintf(why, sizeof why, "the daemon ended the session: %s", reason);
    conn_fail(c, why);
    return -1;
}

/* A header's payload length: an integer, or [wire_len, raw_len, codec] for a compressed payload (protocol.py). 0 ok. */
static int payload_field(const struct pv_conn *c, const msgpack_object *o, uint64_t *wire, uint64_t *raw, int *codec)
{
    *codec = 0;
    if (pv_obj_u64(o, wire) == 0) {
        *raw = *wire;
        return 0;
    }
    uint64_t cd;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 || pv_obj_u64(&o->via.array.ptr[0], wire) != 0 ||
        pv_obj_u64(&o->via.array.ptr[1], raw) != 0 || pv_obj_u64(&o->via.array.ptr[2], &cd) != 0 || cd > 30 ||
        !(c->codecs & (1 << cd)) || *raw == 0 ||
        *wire > *raw + 8 * ((*raw + PV_COMPRESS_BLOCK - 1) / PV_COMPRESS_BLOCK))
        return -1;
    *codec = (int)cd;
    return 0;
}

/* Reads a compressed payload (wire bytes of blocks) into out, raw bytes; -1 when the stream fails, -2 malformed. */
static int read_compressed(struct pv_conn *c, int codec, uint64_t wire, char *out, uint64_t raw)
{
    char *block = malloc(PV_COMPRESS_BLOCK);
    if (!block)
        return -1;
    uint64_t off = 0, got = 0;
    int rc = 0;
    while (rc == 0 && off < raw) {
        unsigned char hdr[8];
        size_t clen, rlen;
        if (got + 8 > wire || pv_io_read(&c->io, hdr, 8) != 0) {
            rc = got + 8 > wire ? -2 : -1;
            break;
        }
        got += 8;
        if (pv_compress_block_header(hdr, (size_t)(raw - off), &clen, &rlen) != 0 || got + clen > wire) {
            rc = -2;
            break;
        }
        if (pv_io_read(&c->io, block, clen) != 0) {
            rc = -1;
            break;
        }
        got += clen;
        if (pv_decompress_block(codec, block, clen, out + off, rlen) != 0)
            rc = -2;
        off += rlen;
    }
    if (rc == 0 && got != wire)
        rc = -2;
    free(block);
    return rc;
}

/* A bulk reply arrived at nbytes / ns: the daemon compresses its replies by this rate (LINK_RATE, sent from the
 * reader thread when the send lock is free and the rate moved by more than PV_RATE_REPORT_CHANGE). */
static void rate_sample(struct pv_conn *c, uint64_t nbytes, int64_t ns)
{
    if (!c->codecs || ns <= 0 || nbytes < PV_RATE_SAMPLE_MIN_BYTES)
        return;
    double rate = (double)nbytes * 1e9 / (double)ns;
    c->rx_rate = c->rx_rate > 0 ? 0.5 * c->rx_rate + 0.5 * rate : rate;
    double last = c->rx_reported;
    if (last > 0 && c->rx_rate < last * (1 + PV_RATE_REPORT_CHANGE) && c->rx_rate > last * (1 - PV_RATE_REPORT_CHANGE))
        return;
    if (pthread_mutex_trylock(&c->send_mu) != 0)
        return;                    /* a frame is on its way: report with a later sample */
    if (!atomic_load(&c->dead) && pv_io_writable(&c->io)) {
        struct pv_req r;
        pv_req_begin(&r, c, PV_OP_LINK_RATE, PV_OP_LINK_RATE_NARGS, 0, NULL, 0, NULL, 0);
        msgpack_pack_uint64(&r.pk, (uint64_t)c->rx_rate);
        pv_seal_frame(&r.sb);
        if (pv_io_write(&c->io, r.sb.data, r.sb.size, NULL, 0) == 0)
            c->rx_reported = c->rx_rate;
        msgpack_sbuffer_destroy(&r.sb);
    }
    pthread_mutex_unlock(&c->send_mu);
}

/* A reply's sixth field (protocol v3): times of events of the request's device (pv_event_times_apply). */
static const msgpack_object *reply_events(const msgpack_object *h)
{
    return h->via.array.size == 6 && h->via.array.ptr[5].type != MSGPACK_OBJECT_NIL ? &h->via.array.ptr[5] : NULL;
}

/* The reader has the whole reply of p (payload in p->out, printf relayed): wake its caller, or finish a detached
 * request (its bytes are where the program wants them; nobody waits). */
static void complete(struct pv_conn *c, struct pv_pending *p, msgpack_unpacked msg, char *raw, int err)
{
    const msgpack_object *events = reply_events(&msg.data);
    if (events && p->dev && err != PV_ERR_UNAVAILABLE)
        pv_event_times_apply(p->dev, events);     /* before the caller wakes: it may ask for elapsed times next */
    pthread_mutex_lock(&c->mu);
    c->receiving = 0;
    c->current = NULL;
    if (p->detached) {
        pv_stats_note(p->op, p->dev ? p->dev->index : -1, 1, p->wire_len, 0, 0);
        c->detached_n--;
        c->detached_bytes -= p->out_cap;
        pthread_cond_broadcast(&c->detached_cv);
        pthread_mutex_unlock(&c->mu);
        msgpack_unpacked_destroy(&msg);
        free(raw);
        free(p);                   /* a failure was latched by the daemon for the next synchronizing call */
        return;
    }
    p->rep.msg = msg;
    p->rep.raw = raw;
    p->rep.have_msg = 1;
    p->rep.result = &msg.data.via.array.ptr[3];
    p->err = err;
    p->done = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Gives the read role up; a thread still waiting for its reply takes it over (it is woken for that), as does one
 * waiting for room in the window of detached requests or for their bytes (detached_cv). */
static void release_read_role(struct pv_conn *c)
{
    pthread_mutex_lock(&c->mu);
    c->reading = 0;
    for (struct pv_pending *p = c->pending; p; p = p->next)
        if (!p->detached) {
            pthread_cond_signal(&p->cv);
            break;
        }
    pthread_cond_broadcast(&c->detached_cv);
    pthread_mutex_unlock(&c->mu);
}

/* An error reply whose result is a text says why the daemon refused the call (a GPU leased to another holder): the
 * program sees the CUDA error, its user the reason, once per connection. */
static void note_reason(struct pv_conn *c, const msgpack_object *result)
{
    char reason[512];
    if (pv_obj_str(result, reason, sizeof reason) != 0 || atomic_exchange(&c->reason_noted, 1) != 0)
        return;
    for (char *q = reason; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';              /* one line, whatever the daemon sent */
    pv_log("daemon %s:%d refused a call: %s", c->host, c->port, reason);
}

/* Reads one frame and delivers it (the caller holds the read role). 0: carry on; -1: the connection failed (every
 * waiter has been woken with an error). */
static int read_frame(struct pv_conn *c)
{
    msgpack_unpacked msg;
    char *raw;
    int rc = pv_read_header(&c->io, &msg, &raw, PV_MAX_REPLY_HEADER_BYTES);
    if (rc != 0) {
        conn_fail(c, rc == -2 ? "malformed reply frame" : "connection closed");
        return -1;
    }
    const msgpack_object *h = &msg.data;
    uint64_t id, plen, rawlen, olen;
    int64_t err;
    int codec = 0;
    const msgpack_object *ev = (h->via.array.size == 5 || h->via.array.size == 6) ? reply_events(h) : NULL;
    if ((h->via.array.size != 5 && h->via.array.size != 6) || pv_obj_u64(&h->via.array.ptr[0], &id) != 0 ||
        pv_obj_i64(&h->via.array.ptr[1], &err) != 0 ||
        payload_field(c, &h->via.array.ptr[2], &plen, &rawlen, &codec) != 0 ||
        pv_obj_u64(&h->via.array.ptr[4], &olen) != 0 || olen > PV_MAX_STDOUT_BYTES ||
        (ev && ev->type != MSGPACK_OBJECT_ARRAY)) {
        msgpack_unpacked_destroy(&msg);
        free(raw);
        conn_fail(c, "malformed reply header");
        return -1;
    }
    if (id == 0) {
        int over = notice(c, err, &h->via.array.ptr[3]);
        msgpack_unpacked_destroy(&msg);
        free(raw);
        if (over || relay(c, plen, NULL) != 0 || relay(c, olen, to_stdout) != 0) {
            conn_fail(c, "connection closed");
            return -1;
        }
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    struct pv_pending **pp = &c->pending, *p = NULL;
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    if (*pp) {
        p = *pp;
        *pp = p->next;
        c->receiving = 1;          /* still waited for while its payload arrives */
        c->current = p;
    }
    pthread_mutex_unlock(&c->mu);
    int io = 0;
    int64_t t0 = pv_now_ns();
    uint64_t early = plen >= PV_RATE_SAMPLE_MIN_BYTES && c->codecs ? pv_io_arrived(&c->io) : 0;
    if (plen) {
        if (p && p->out && rawlen <= p->out_cap) {
            io = codec ? read_compressed(c, codec, plen, p->out, rawlen) : pv_io_read(&c->io, p->out, (size_t)plen);
            if (io == 0)
                p->rep.payload_len = (size_t)rawlen;
            p->wire_len = (size_t)plen;
        } else {
            io = relay(c, plen, NULL);
        }
        if (io == 0 && plen > early)
            rate_sample(c, plen - early, pv_now_ns() - t0);   /* bytes that were there already do not count */
    }
    if (io == 0 && olen)
        io = relay(c, olen, to_stdout);    /* before the caller wakes: its output shows at the sync */
    if (!p) {
        msgpack_unpacked_destroy(&msg);
        free(raw);
        pv_log("daemon %s:%d answered unknown request %llu", c->host, c->port, (unsigned long long)id);
    } else {
        if (err != 0 && h->via.array.ptr[3].type == MSGPACK_OBJECT_STR)
            note_reason(c, &h->via.array.ptr[3]);
        complete(c, p, msg, raw, io ? PV_ERR_UNAVAILABLE : (int)err);
    }
    if (io) {
        conn_fail(c, io == -2 ? "malformed compressed reply payload" : "connection closed inside a reply payload");
        return -1;
    }
    return 0;
}

/* The background thread: every tick, reads what arrived while no call held the read role, fails a silent daemon a
 * call waits for, and pings an idle one (see the top of this file). */
void *reader_main(void *arg)
{
    struct pv_conn *c = arg;
    for (;;) {
        struct timespec ts = { PV_IO_TICK_MS / 1000, (long)(PV_IO_TICK_MS % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        if (atomic_load(&c->dead))
            return NULL;
        int64_t now = pv_now_ms();
        if (conn_silent(c, now)) {
            fail_silent(c);
            return NULL;
        }
        if (now - atomic_load(&c->io.last_tx_ms) > c->ping_ms)
            send_ping(c);
        pthread_mutex_lock(&c->mu);
        int mine = !c->reading;
        if (mine)
            c->reading = 1;
        pthread_mutex_unlock(&c->mu);
        if (!mine)
            continue;
        int rc = 0;
        while (rc == 0 && pv_io_readable(&c->io))
            rc = read_frame(c);
        release_read_role(c);
        if (rc != 0)
            return NULL;
    }
}

/* Waits until ready(c, arg) (evaluated with c->mu held). When nobody reads, this thread does, until it is ready or
 * the connection fails: a lone call is one send and one receive on the calling thread (top of this file). Otherwise it
 * sleeps on cv, woken by the reader that delivered what it waits for or that gave the read role up; the sweeper's
 * tick normally notices a silent daemon, the check here covers a reader blocked elsewhere. Called and returns with
 * c->mu held. ready must become true once the connection is dead (conn_fail completes every request). */
void wait_until(struct pv_conn *c, pthread_cond_t *cv, int (*ready)(struct pv_conn *c, void *arg), void *arg)
{
    while (!ready(c, arg)) {
        if (!c->reading && !atomic_load(&c->dead)) {
            c->reading = 1;
            int go = 1;
            while (go) {
                pthread_mutex_unlock(&c->mu);
                /* the reply is rarely there yet: wait for it first rather than try a read that finds nothing */
                go = pv_io_await(&c->io) == 0 && read_frame(c) == 0;
                pthread_mutex_lock(&c->mu);
                go = go && !ready(c, arg);
            }
            pthread_mutex_unlock(&c->mu);
            release_read_role(c);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(cv, &c->mu, &ts);
        if (!ready(c, arg)) {
            pthread_mutex_unlock(&c->mu);
            if (conn_silent(c, pv_now_ms()))
                fail_silent(c);
            pthread_mutex_lock(&c->mu);
        }
    }
}
