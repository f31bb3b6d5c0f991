/* One connection's byte stream, plain TCP or TLS over a non-blocking socket (io.c, ssl.c). */
#ifndef PV_IO_H
#define PV_IO_H

#include <pthread.h>
#include <stdatomic.h>

#include "pv_base.h"

#define PV_IO_TICK_MS 200          /* a blocked read or write calls its stream's tick at least this often */
#define PV_IO_RBUF 4096            /* small reads come through a buffer: a reply's prefix and header in one recv */
struct ssl_st;
struct pv_io {
    int fd;
    unsigned char rbuf[PV_IO_RBUF];   /* received, not yet read (touched by the thread holding the read role) */
    size_t rlo, rhi;
    struct ssl_st *ssl;            /* TLS session (ssl.c), NULL for plain TCP */
    pthread_mutex_t ssl_mu;        /* one OpenSSL call at a time; never held while waiting */
    int (*tick)(void *arg);        /* nonzero ends the wait with an error (the connection is considered dead) */
    void *tick_arg;
    _Atomic int64_t last_rx_ms;    /* pv_now_ms() of the last bytes received / sent */
    _Atomic int64_t last_tx_ms;
};
int64_t pv_now_ms(void);                                          /* CLOCK_MONOTONIC in ms */
void pv_io_init(struct pv_io *io, int fd);
void pv_io_destroy(struct pv_io *io);
int pv_io_read(struct pv_io *io, void *buf, size_t n);            /* 0 ok, -1 error/EOF/aborted by the tick */
int pv_io_write(struct pv_io *io, const void *a, size_t an, const void *b, size_t bn);
int pv_io_wait(struct pv_io *io, short events);                   /* poll with ticks: 0 ready, -1 aborted */
int pv_io_readable(struct pv_io *io);
int pv_io_await(struct pv_io *io);                                /* until readable (ticks): 0, or -1 aborted */
size_t pv_io_arrived(struct pv_io *io);   /* bytes received, not read yet (buffer + socket; TLS: its raw bytes) */
int pv_io_writable(struct pv_io *io);                             /* 1 when a small write would not block */
/* TLS (ssl.c): whether connections use it (PYVGPU_TLS*, the config dir), and the handshake + verification. */
int pv_ssl_enabled(void);
cudaError_t pv_ssl_connect(struct pv_io *io, const char *host, int port);

#endif
