/* One connection per host (TCP, or TLS when configured), shared by all threads of the process: a send mutex keeps
 * frames whole; replies are read by whichever thread holds the read role and handed to the thread waiting for their
 * req_id. When the connection dies, every pending and later call on that host fails with
 * cudaErrorDevicesUnavailable.
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
 * Every wait is bounded. While a call waits for its reply (or a send cannot progress) the daemon must be heard from
 * at least every PYVGPU_REPLY_TIMEOUT_MS: it sends heartbeats while it works, so a long kernel keeps the connection
 * alive and a stopped or wedged daemon fails the call instead of hanging it. When the process has sent nothing for
 * PYVGPU_PING_INTERVAL_MS, the reader sends a PING so the daemon's idle timeout spares live clients. The daemon
 * may end a session with a notice (req_id 0, err != 0) saying why; printf output follows a reply's payload and is
 * relayed to fd 1 in pieces, whatever its size. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pv_core.h"

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

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return (*end || x <= 0 || x > 1000000) ? dflt : (int)x;
}

/* fork(): the child shares the parent's sockets but not its reader threads. Its calls fail cleanly (as CUDA's do
 * in a child of an initialized process) and the parent's sessions are never touched: the child only closes its
 * copies of the descriptors. */
#define PV_MAX_CONNS 64
static struct pv_conn *all_conns[PV_MAX_CONNS];
static int nconns;
static pthread_mutex_t conns_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_child(void)
{
    pthread_mutex_init(&conns_mu, NULL);
    for (int i = 0; i < nconns; i++) {
        struct pv_conn *c = all_conns[i];
        atomic_store(&c->dead, 1);
        pthread_mutex_init(&c->send_mu, NULL);
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->detached_cv, NULL);
        pthread_mutex_init(&c->io.ssl_mu, NULL);
        c->pending = NULL;         /* the parent's detached requests stay the parent's: leaked here, never freed */
        c->current = NULL;
        c->detached_n = 0;
        c->detached_bytes = 0;
        c->io.ssl = NULL;          /* the parent's TLS state: never used (or freed) here */
        close(c->io.fd);
        c->io.fd = -1;
    }
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

static void remember_conn(struct pv_conn *c)
{
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&conns_mu);
    if (nconns < PV_MAX_CONNS)
        all_conns[nconns++] = c;
    pthread_mutex_unlock(&conns_mu);
}

int pv_conn_alive(const struct pv_conn *c)
{
    return c && !atomic_load(&c->dead);
}

static void conn_fail(struct pv_conn *c, const char *why)
{
    pthread_mutex_lock(&c->mu);
    /* said before the connection counts as dead (callers hold mu, so once): a program that fails on it and exits
     * at once still leaves the reason behind */
    int was_dead = atomic_load(&c->dead);
    if (!was_dead)
        pv_log("connection to daemon %s:%d lost (%s); its GPUs now fail with cudaErrorDevicesUnavailable",
               c->host, c->port, why);
    atomic_store(&c->dead, 1);
    for (struct pv_pending *p = c->pending, *next; p; p = next) {
        next = p->next;
        if (p->detached) {
            free(p);               /* its bytes never come; the program's next synchronization fails instead */
            continue;
        }
        p->err = PV_ERR_UNAVAILABLE;
        p->done = 1;
        pthread_cond_signal(&p->cv);
    }
    c->pending = NULL;
    c->detached_n = 0;
    c->detached_bytes = 0;
    pthread_cond_broadcast(&c->detached_cv);
    pthread_mutex_unlock(&c->mu);
    if (!was_dead)
        shutdown(c->io.fd, SHUT_RDWR);   /* wakes the reader; the fd itself is closed at exit only */
}

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

/* ---------------------------------------------------------------------------------------------- liveness */
static int64_t env_ms(const char *name, int64_t dflt)
{
    return env_int(name, (int)dflt);
}

/* A call is waiting or a send is stuck: has the daemon been silent too long? */
static int conn_silent(struct pv_conn *c, int64_t now)
{
    pthread_mutex_lock(&c->mu);
    int waiting = c->pending != NULL || c->receiving;
    pthread_mutex_unlock(&c->mu);
    if (!waiting && atomic_load(&c->sending) == 0)
        return 0;
    int64_t heard = atomic_load(&c->io.last_rx_ms), since = atomic_load(&c->busy_since_ms);
    return now - (heard > since ? heard : since) > c->silence_ms;
}

static void fail_silent(struct pv_conn *c)
{
    char why[160];
    snprintf(why, sizeof why, "no reply or heartbeat for %lld ms: daemon stopped or unreachable "
             "(PYVGPU_REPLY_TIMEOUT_MS)", (long long)c->silence_ms);
    conn_fail(c, why);
}

static void mark_busy(struct pv_conn *c, int was_idle)
{
    if (was_idle)
        atomic_store(&c->busy_since_ms, pv_now_ms());
}

/* Keepalive from the reader thread: only when no other frame is being sent and the socket has room. */
static void send_ping(struct pv_conn *c)
{
    if (pthread_mutex_trylock(&c->send_mu) != 0)
        return;                     /* a frame is on its way: that is activity enough */
    if (!atomic_load(&c->dead) && pv_io_writable(&c->io)) {
        struct pv_req r;
        pv_req_begin(&r, c, PV_OP_PING, PV_OP_PING_NARGS, 0, NULL, 0, NULL, 0);
        pv_seal_frame(&r.sb);
        (void)pv_io_write(&c->io, r.sb.data, r.sb.size, NULL, 0);
        msgpack_sbuffer_destroy(&r.sb);
    }
    pthread_mutex_unlock(&c->send_mu);
}

/* Called by the stream at least every PV_IO_TICK_MS while a read or write waits; nonzero aborts the wait. */
static int conn_tick(void *arg)
{
    struct pv_conn *c = arg;
    if (atomic_load(&c->dead))
        return 1;
    int64_t now = pv_now_ms();
    int64_t deadline = atomic_load(&c->handshake_deadline_ms);
    if (deadline)
        return now > deadline;
    if (conn_silent(c, now)) {
        fail_silent(c);
        return 1;
    }
    if (atomic_load(&c->reader_started) && pthread_equal(pthread_self(), c->reader) &&
        now - atomic_load(&c->io.last_tx_ms) > c->ping_ms)
        send_ping(c);
    return 0;
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
static void *reader_main(void *arg)
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

/* Waits until ready(c, arg) (evaluated with c->mu held). When nobody reads, this thread does, until it is ready or
 * the connection fails: a lone call is one send and one receive on the calling thread (top of this file). Otherwise it
 * sleeps on cv, woken by the reader that delivered what it waits for or that gave the read role up; the sweeper's
 * tick normally notices a silent daemon, the check here covers a reader blocked elsewhere. Called and returns with
 * c->mu held. ready must become true once the connection is dead (conn_fail completes every request). */
static void wait_until(struct pv_conn *c, pthread_cond_t *cv, int (*ready)(struct pv_conn *c, void *arg), void *arg)
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

/* A request whose reply nobody waits for (its payload lands in r->out when it comes; see pv_core.h). Waits only
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
    pthread_mutex_lock(&conns_mu);
    int count = nconns;
    struct pv_conn *conns[PV_MAX_CONNS];
    memcpy(conns, all_conns, sizeof conns);
    pthread_mutex_unlock(&conns_mu);
    for (int i = 0; i < count; i++) {
        struct pv_conn *c = conns[i];
        pthread_mutex_lock(&c->mu);
        wait_until(c, &c->detached_cv, drained, range);
        pthread_mutex_unlock(&c->mu);
    }
}

/* ---------------------------------------------------------------------------------------------- connect */
static int connect_timeout(const char *host, int port, int timeout_ms)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        pv_log("cannot resolve host %s: %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pfd = { fd, POLLOUT, 0 };
            rc = poll(&pfd, 1, timeout_ms);
            if (rc == 1) {
                int soerr = 0;
                socklen_t len = sizeof soerr;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
                rc = soerr ? -1 : 0;
                errno = soerr;
            } else {
                errno = rc == 0 ? ETIMEDOUT : errno;
                rc = -1;
            }
        }
        if (rc == 0)
            break;                   /* the stream stays non-blocking: io.c bounds every wait */
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        pv_log("cannot connect to daemon %s:%d: %s", host, port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

static void tune_socket(int fd)
{
    int one = 1, idle = 10, intvl = 5, cnt = 3;
    unsigned user_timeout = (unsigned)env_int("PYVGPU_TCP_USER_TIMEOUT_MS", 30000);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

static cudaError_t handshake(struct pv_conn *c, struct pv_reply *hello)
{
    msgpack_unpacked g;
    char *graw;
    if (pv_read_header(&c->io, &g, &graw, PV_MAX_HEADER_BYTES) != 0) {
        pv_log("daemon %s:%d sent no greeting (not a pyvgpu daemon, or it timed out)", c->host, c->port);
        return PV_ERR_UNAVAILABLE;
    }
    const msgpack_object *a = g.data.via.array.ptr;
    char magic[32] = "";
    int64_t version = -1;
    if (g.data.via.array.size != 4 || pv_obj_str(&a[0], magic, sizeof magic) != 0 ||
        strcmp(magic, PV_HELLO_SERVER_MAGIC) != 0 || pv_obj_i64(&a[1], &version) != 0 ||
        a[2].type != MSGPACK_OBJECT_BIN || a[3].type != MSGPACK_OBJECT_BOOLEAN) {
        pv_log("%s:%d is not a pyvgpu daemon (bad greeting)", c->host, c->port);
        msgpack_unpacked_destroy(&g);
        free(graw);
        return PV_ERR_UNAVAILABLE;
    }
    int auth_required = a[3].via.boolean;
    char proof[65] = "";
    const char *token = pv_token();
    int have_proof = 0;
    if (token && pv_hmac_hex(token, a[2].via.bin.ptr, a[2].via.bin.size, proof) == 0)
        have_proof = 1;
    msgpack_unpacked_destroy(&g);
    free(graw);
    if (auth_required && !have_proof) {
        pv_log("daemon %s:%d requires a token and none was found (set PYVGPU_TOKEN or the token file)", c->host,
               c->port);
        return PV_ERR_AUTH;
    }

    char client[512];
    char exe[256] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        exe[n] = 0;
    char hn[128] = "?";
    gethostname(hn, sizeof hn - 1);
    snprintf(client, sizeof client, "%d@%s %s", (int)getpid(), hn, exe);

    struct pv_hello_extra extra;
    pv_hello_extra_read(&extra);
    struct pv_req r;
    pv_req_begin(&r, c, PV_OP_HELLO, PV_OP_HELLO_NARGS, 1, NULL, 0, NULL, 0);
    int offer = pv_compress_offer_to(c->io.fd);
    msgpack_pack_map(&r.pk, 4 + pv_hello_extra_count(&extra) + pv_compress_hello_count(offer));
    pv_pack_str(&r.pk, PV_KEY_HELLO_VERSION);
    msgpack_pack_int(&r.pk, PV_PROTOCOL_VERSION);
    pv_pack_str(&r.pk, PV_KEY_HELLO_PROOF);
    if (have_proof)
        pv_pack_str(&r.pk, proof);
    else
        msgpack_pack_nil(&r.pk);
    pv_pack_str(&r.pk, PV_KEY_HELLO_CLIENT);
    pv_pack_str(&r.pk, client);
    pv_pack_str(&r.pk, PV_KEY_HELLO_VA_BASE);
    msgpack_pack_uint64(&r.pk, pv_conn_va_base(c));
    pv_hello_extra_pack(&r.pk, &extra);
    pv_compress_hello_pack(&r.pk, offer);
    /* the reader thread is not running yet: send and read the reply inline */
    pv_seal_frame(&r.sb);
    int wrc = pv_io_write(&c->io, r.sb.data, r.sb.size, NULL, 0);
    msgpack_sbuffer_destroy(&r.sb);
    if (wrc != 0) {
        pv_log("daemon %s:%d closed the connection during the handshake", c->host, c->port);
        return PV_ERR_UNAVAILABLE;
    }
    memset(hello, 0, sizeof *hello);
    if (pv_read_header(&c->io, &hello->msg, &hello->raw, PV_MAX_REPLY_HEADER_BYTES) != 0) {
        pv_log("daemon %s:%d closed the connection during the handshake%s", c->host, c->port,
               version != PV_PROTOCOL_VERSION ? " (protocol version mismatch)" : "");
        return version != PV_PROTOCOL_VERSION ? PV_ERR_PROTOCOL_MISMATCH : PV_ERR_UNAVAILABLE;
    }
    hello->have_msg = 1;
    const msgpack_object *h = &hello->msg.data;
    int64_t err = -1;
    uint64_t plen = 0;
    uint64_t olen = 0;
    if ((h->via.array.size != 5 && h->via.array.size != 6) || pv_obj_i64(&h->via.array.ptr[1], &err) != 0 ||
        pv_obj_u64(&h->via.array.ptr[2], &plen) != 0 || plen != 0 ||
        pv_obj_u64(&h->via.array.ptr[4], &olen) != 0 || olen != 0) {
        pv_log("daemon %s:%d sent a malformed hello reply", c->host, c->port);
        pv_reply_free(hello);
        return PV_ERR_UNAVAILABLE;
    }
    hello->err = (int)err;
    hello->result = &h->via.array.ptr[3];
    if (version != PV_PROTOCOL_VERSION || err == PV_ERR_PROTOCOL_MISMATCH) {
        pv_log("protocol version mismatch: daemon %s:%d speaks version %lld, this libvcudart speaks %d", c->host,
               c->port, (long long)version, PV_PROTOCOL_VERSION);
        pv_reply_free(hello);
        return PV_ERR_PROTOCOL_MISMATCH;
    }
    if (err == PV_ERR_AUTH) {
        pv_log("daemon %s:%d rejected the token proof (check PYVGPU_TOKEN / the token file)", c->host, c->port);
        pv_reply_free(hello);
        return PV_ERR_AUTH;
    }
    if (err != 0 || hello->result->type != MSGPACK_OBJECT_MAP) {
        pv_log("daemon %s:%d refused the session: %s", c->host, c->port, pv_err_name((cudaError_t)err));
        pv_reply_free(hello);
        return err ? (cudaError_t)err : PV_ERR_UNAVAILABLE;
    }
    c->codecs = pv_compress_accepted(hello->result);
    return PV_SUCCESS;
}

static void conn_free(struct pv_conn *c)
{
    close(c->io.fd);
    pv_io_destroy(&c->io);
    pthread_mutex_destroy(&c->send_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->detached_cv);
    free(c);
}

uint64_t pv_conn_va_base(const struct pv_conn *c)
{
    static _Atomic uint64_t first;              /* the first host's va_base, read once */
    uint64_t base = atomic_load(&first);
    if (!base) {
        const char *env = getenv("PYVGPU_VA_BASE");
        char *end = NULL;
        unsigned long long v = env && *env ? strtoull(env, &end, 0) : 0;
        base = PV_VA_WINDOW_BYTES;
        if (env && *env && (*end || !v || v % PV_VA_WINDOW_BYTES || v > (1ull << 62)))
            pv_log("PYVGPU_VA_BASE=%s ignored (a multiple of %llu bytes)", env, (unsigned long long)PV_VA_WINDOW_BYTES);
        else if (v)
            base = v;
        atomic_store(&first, base);
    }
    return base + (uint64_t)c->first_gpu * PV_VA_WINDOW_BYTES;
}

struct pv_conn *pv_conn_open(const char *host, int port, int first_gpu, struct pv_reply *hello, cudaError_t *err)
{
    int fd = connect_timeout(host, port, env_int("PYVGPU_CONNECT_TIMEOUT_MS", 5000));
    if (fd < 0) {
        *err = PV_ERR_UNAVAILABLE;
        return NULL;
    }
    tune_socket(fd);
    struct pv_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        *err = PV_cudaErrorMemoryAllocation;
        return NULL;
    }
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    c->first_gpu = first_gpu;
    c->silence_ms = env_ms("PYVGPU_REPLY_TIMEOUT_MS", PV_CLIENT_SILENCE_TIMEOUT_MS);
    c->ping_ms = env_ms("PYVGPU_PING_INTERVAL_MS", PV_CLIENT_PING_INTERVAL_MS);
    atomic_init(&c->next_id, 1);
    atomic_init(&c->dead, 0);
    atomic_init(&c->sending, 0);
    atomic_init(&c->reader_started, 0);
    atomic_init(&c->busy_since_ms, pv_now_ms());
    atomic_init(&c->peer_rx_rate, 0);
    atomic_init(&c->handshake_deadline_ms, pv_now_ms() + env_int("PYVGPU_HANDSHAKE_TIMEOUT_MS", 10000));
    pthread_mutex_init(&c->send_mu, NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->detached_cv, NULL);
    pv_io_init(&c->io, fd);
    c->io.tick = conn_tick;
    c->io.tick_arg = c;
    *err = pv_ssl_enabled() ? pv_ssl_connect(&c->io, host, port) : PV_SUCCESS;
    if (*err == PV_SUCCESS)
        *err = handshake(c, hello);
    if (*err != PV_SUCCESS) {
        conn_free(c);
        return NULL;
    }
    atomic_store(&c->handshake_deadline_ms, 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&c->reader, &attr, reader_main, c) != 0) {
        pthread_attr_destroy(&attr);
        pv_log("cannot start the reader thread for %s:%d", host, port);
        pv_reply_free(hello);
        conn_free(c);
        *err = PV_ERR_UNAVAILABLE;
        return NULL;
    }
    pthread_attr_destroy(&attr);
    atomic_store(&c->reader_started, 1);
    remember_conn(c);
    return c;
}
