/* One connection per host (TCP, or TLS when configured), shared by all threads of the process: connect (bounded),
 * socket tuning, the handshake, the connection's failure (every pending and later call on that host fails with
 * cudaErrorDevicesUnavailable), its liveness and fork handling. Replies are read by reader.c; requests are built,
 * sent and waited for by inflight.c.
 *
 * Every wait is bounded. While a call waits for its reply (or a send cannot progress) the daemon must be heard from
 * at least every PYVGPU_REPLY_TIMEOUT_MS: it sends heartbeats while it works, so a long kernel keeps the connection
 * alive and a stopped or wedged daemon fails the call instead of hanging it. When the process has sent nothing for
 * PYVGPU_PING_INTERVAL_MS, the reader sends a PING so the daemon's idle timeout spares live clients. */
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
#include <unistd.h>

#include "pv_state.h"
#include "pv_io.h"
#include "pv_wire.h"
#include "pv_hello.h"
#include "pv_compress.h"
#include "pv_auth.h"
#include "transport_internal.h"

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

int conns_snapshot(struct pv_conn *out[PV_MAX_CONNS])
{
    pthread_mutex_lock(&conns_mu);
    int count = nconns;
    memcpy(out, all_conns, sizeof all_conns);
    pthread_mutex_unlock(&conns_mu);
    return count;
}

int pv_conn_alive(const struct pv_conn *c)
{
    return c && !atomic_load(&c->dead);
}

void conn_fail(struct pv_conn *c, const char *why)
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

/* ---------------------------------------------------------------------------------------------- liveness */
static int64_t env_ms(const char *name, int64_t dflt)
{
    return env_int(name, (int)dflt);
}

/* A call is waiting or a send is stuck: has the daemon been silent too long? */
int conn_silent(struct pv_conn *c, int64_t now)
{
    pthread_mutex_lock(&c->mu);
    int waiting = c->pending != NULL || c->receiving;
    pthread_mutex_unlock(&c->mu);
    if (!waiting && atomic_load(&c->sending) == 0)
        return 0;
    int64_t heard = atomic_load(&c->io.last_rx_ms), since = atomic_load(&c->busy_since_ms);
    return now - (heard > since ? heard : since) > c->silence_ms;
}

void fail_silent(struct pv_conn *c)
{
    char why[160];
    snprintf(why, sizeof why, "no reply or heartbeat for %lld ms: daemon stopped or unreachable "
             "(PYVGPU_REPLY_TIMEOUT_MS)", (long long)c->silence_ms);
    conn_fail(c, why);
}

void mark_busy(struct pv_conn *c, int was_idle)
{
    if (was_idle)
        atomic_store(&c->busy_since_ms, pv_now_ms());
}

/* Keepalive from the reader thread: only when no other frame is being sent and the socket has room. */
void send_ping(struct pv_conn *c)
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
