/* The byte stream of one connection: plain TCP or TLS over a non-blocking socket, where every wait is bounded.
 *
 * A read or write that cannot progress polls the socket in slices of PV_IO_TICK_MS and calls the stream's tick
 * between slices; a nonzero tick ends the wait with an error (the transport decides when a silent daemon is dead,
 * and the handshake enforces its deadline that way). Under TLS one OpenSSL object is shared by the reader thread and
 * the senders: it is only ever called non-blocking, under ssl_mu, and waits happen with the mutex released, so a
 * reader waiting for a reply never holds up a sender. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "pv_io.h"

int64_t pv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void pv_io_init(struct pv_io *io, int fd)
{
    memset(io, 0, sizeof *io);
    io->fd = fd;
    pthread_mutex_init(&io->ssl_mu, NULL);
    atomic_init(&io->last_rx_ms, pv_now_ms());
    atomic_init(&io->last_tx_ms, pv_now_ms());
}

void pv_io_destroy(struct pv_io *io)
{
    if (io->ssl)
        SSL_free(io->ssl);
    io->ssl = NULL;
    pthread_mutex_destroy(&io->ssl_mu);
}

/* Wait until fd is ready for `events`, ticking once per slice; 0 ready, -1 aborted by the tick or a socket error. */
int pv_io_wait(struct pv_io *io, short events)
{
    for (;;) {
        struct pollfd pfd = { io->fd, events, 0 };
        int rc = poll(&pfd, 1, PV_IO_TICK_MS);
        if (rc > 0)
            return 0;          /* ready, or an error/hangup the next call reports */
        if (rc < 0 && errno != EINTR)
            return -1;
        if (io->tick && io->tick(io->tick_arg) != 0)
            return -1;
    }
}

/* Bytes already read from the socket and not yet consumed: in the read buffer, or (TLS) in OpenSSL's, decrypted or
 * not. */
static int io_buffered(struct pv_io *io)
{
    if (io->rhi > io->rlo)
        return 1;
    if (!io->ssl)
        return 0;
    pthread_mutex_lock(&io->ssl_mu);
    int pending = SSL_has_pending(io->ssl);     /* decrypted bytes, or records read ahead (ssl.c) */
    pthread_mutex_unlock(&io->ssl_mu);
    return pending;
}

/* One non-blocking TLS call's outcome: >0 bytes, 0 retry after waiting for *events, -1 failed. */
static int ssl_result(struct pv_io *io, int k, short *events)
{
    if (k > 0)
        return k;
    int e = SSL_get_error(io->ssl, k);
    if (e == SSL_ERROR_WANT_READ) {
        *events = POLLIN;
        return 0;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        *events = POLLOUT;
        return 0;
    }
    ERR_clear_error();
    return -1;
}

/* One non-blocking transfer of up to n bytes: >0 bytes moved, 0 would block (wait for *events), -1 failed or EOF. */
static ssize_t io_step(struct pv_io *io, void *buf, size_t n, int writing, short *events)
{
    *events = writing ? POLLOUT : POLLIN;
    if (io->ssl) {
        int len = n > (1u << 30) ? (int)(1u << 30) : (int)n;
        pthread_mutex_lock(&io->ssl_mu);
        int r = writing ? SSL_write(io->ssl, buf, len) : SSL_read(io->ssl, buf, len);
        ssize_t k = ssl_result(io, r, events);
        pthread_mutex_unlock(&io->ssl_mu);
        return k;
    }
    for (;;) {
        ssize_t k = writing ? send(io->fd, buf, n, MSG_NOSIGNAL) : recv(io->fd, buf, n, 0);
        if (k > 0)
            return k;
        if (k == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
            return -1;
        if (errno != EINTR)
            return 0;
    }
}

#define PV_LOWAT_MIN ((size_t)64 << 10)   /* reads at least this large wait for many bytes per wake-up */
#define PV_LOWAT_MAX ((size_t)1 << 20)

/* A plain TCP read of `left` more bytes waits until min(left, PV_LOWAT_MAX) are readable (SO_RCVLOWAT), instead of
 * waking per segment batch as a non-blocking socket otherwise does: as recv(MSG_WAITALL) does for a blocking one.
 * *lowat is the value set (1: the default); the kernel caps it to what the receive buffer can hold. */
static void set_lowat(struct pv_io *io, size_t left, int *lowat)
{
    int want = left >= PV_LOWAT_MIN ? (int)(left < PV_LOWAT_MAX ? left : PV_LOWAT_MAX) : 1;
    if (io->ssl || !((size_t)*lowat > left || (*lowat == 1 && want > 1)))
        return;                    /* raise it once; lower it only when fewer bytes than it are still to come */
    if (setsockopt(io->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0)
        *lowat = want;
}

/* Reads at least `need` and at most `cap` bytes into p (waiting as needed, bounded by the tick). → bytes read, or
 * -1 on an error, EOF or a wait aborted by the tick. */
static ssize_t io_read_some(struct pv_io *io, char *p, size_t need, size_t cap)
{
    size_t got = 0;
    int lowat = 1;
    ssize_t rc = 0;
    while (got < need) {
        short events;
        ssize_t k = io_step(io, p + got, cap - got, 0, &events);
        if (k < 0) {
            rc = -1;
            break;
        }
        if (k > 0) {
            atomic_store(&io->last_rx_ms, pv_now_ms());
            got += (size_t)k;
        } else {
            if (need - got >= PV_LOWAT_MIN || lowat > 1)
                set_lowat(io, need - got, &lowat);
            if (pv_io_wait(io, events) != 0) {
                rc = -1;
                break;
            }
        }
    }
    if (lowat > 1)
        set_lowat(io, 0, &lowat);
    return rc < 0 ? -1 : (ssize_t)got;
}

/* Moves all n bytes (waiting as needed, bounded by the tick): 0 ok, -1 error/EOF/aborted. */
static int io_transfer(struct pv_io *io, char *p, size_t n, int writing)
{
    if (!writing)
        return io_read_some(io, p, n, n) < 0 ? -1 : 0;
    while (n > 0) {
        short events;
        ssize_t k = io_step(io, p, n, 1, &events);
        if (k < 0)
            return -1;
        if (k > 0) {
            atomic_store(&io->last_tx_ms, pv_now_ms());
            p += k;
            n -= (size_t)k;
        } else if (pv_io_wait(io, events) != 0) {
            return -1;
        }
    }
    return 0;
}

int pv_io_read(struct pv_io *io, void *buf, size_t n)
{
    char *p = buf;
    size_t have = io->rhi - io->rlo;
    if (have) {
        size_t k = have < n ? have : n;
        memcpy(p, io->rbuf + io->rlo, k);
        io->rlo += k;
        if (io->rlo == io->rhi)
            io->rlo = io->rhi = 0;
        p += k;
        n -= k;
    }
    if (n == 0)
        return 0;
    if (n >= PV_IO_RBUF)
        return io_transfer(io, p, n, 0);       /* bulk: straight into the destination */
    ssize_t got = io_read_some(io, (char *)io->rbuf, n, PV_IO_RBUF);   /* the buffer is empty here */
    if (got < 0)
        return -1;
    memcpy(p, io->rbuf, n);
    io->rlo = n;
    io->rhi = (size_t)got;
    if (io->rlo == io->rhi)
        io->rlo = io->rhi = 0;
    return 0;
}

size_t pv_io_arrived(struct pv_io *io)
{
    int n = 0;
    if (ioctl(io->fd, FIONREAD, &n) != 0 || n < 0)
        n = 0;
    return io->rhi - io->rlo + (size_t)n;
}

int pv_io_await(struct pv_io *io)
{
    return io_buffered(io) ? 0 : pv_io_wait(io, POLLIN);
}

static int io_write_all(struct pv_io *io, const char *p, size_t n)
{
    return io_transfer(io, (char *)p, n, 1);
}

int pv_io_write(struct pv_io *io, const void *a, size_t an, const void *b, size_t bn)
{
    if (!io->ssl && bn) {
        /* plain TCP: header and payload in one sendmsg when the socket takes it (one segment for small frames) */
        struct iovec iov[2] = { { (void *)a, an }, { (void *)b, bn } };
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
        ssize_t k = sendmsg(io->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        size_t done = k > 0 ? (size_t)k : 0;
        if (done)
            atomic_store(&io->last_tx_ms, pv_now_ms());
        if (done >= an) {
            done -= an;
            return io_write_all(io, (const char *)b + done, bn - done);
        }
        if (io_write_all(io, (const char *)a + done, an - done) != 0)
            return -1;
        return io_write_all(io, b, bn);
    }
    if (io_write_all(io, a, an) != 0)
        return -1;
    return bn ? io_write_all(io, b, bn) : 0;
}

/* Bytes (or EOF, or an error) are waiting to be read: the next read returns without blocking. Under TLS also
 * what OpenSSL has read from the socket already. */
int pv_io_readable(struct pv_io *io)
{
    if (io_buffered(io))
        return 1;
    struct pollfd pfd = { io->fd, POLLIN, 0 };
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLIN | POLLHUP | POLLERR));
}

int pv_io_writable(struct pv_io *io)
{
    struct pollfd pfd = { io->fd, POLLOUT, 0 };
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLOUT);
}
