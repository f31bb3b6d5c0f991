/* Raw-TCP baseline of bench/remoting_bench.py: the same bytes as one cudaMemcpy, moved with one request and one
 * reply on a plain socket (TCP_NODELAY both sides, default socket buffers, recv(MSG_WAITALL) straight into the destination).
 *
 *   rawtcp server PORT                        listen on 127.0.0.1:PORT; one forked child per connection; prints
 *                                             "listening" once ready
 *   rawtcp client PORT h2d|d2h|ping|ff BYTES ITERS
 *       h2d:  send a 16-byte header + BYTES, server recvs them into its buffer and answers a 16-byte ack
 *       d2h:  send a 16-byte header, server answers a 16-byte header + BYTES, recv'd into the client's buffer
 *       ping: BYTES-byte request, BYTES-byte reply (BYTES >= 16)
 *       ff:   ITERS BYTES-byte frames that get no reply (fire-and-forget; one send() each, the server reads
 *             them in bulk: announced by one 16-byte header), then one 16-byte ping; prints
 *             "ff <ns to send all frames> <ns of the final ping>"
 *   prints one line "bw <ns per exchange> ..." (ITERS values, one warm-up exchange not printed), except ff.
 * Build: cc -O2 -o rawtcp rawtcp.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct hdr { uint32_t op, pad; uint64_t size; };
enum { OP_H2D = 1, OP_D2H = 2, OP_PING = 3, OP_SINK = 4 };

static int recv_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t k = recv(fd, p, n, MSG_WAITALL);   /* one wake-up per message, not per segment */
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

static int send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

static void nodelay(int fd) { int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }

static void serve(int fd)
{
    size_t cap = 0;
    char *buf = NULL;
    struct hdr h;
    while (recv_all(fd, &h, sizeof h) == 0) {
        if (h.size > cap) {
            free(buf);
            cap = h.size;
            buf = malloc(cap);
            if (!buf) return;
            memset(buf, 0x5a, cap);
        }
        if (h.op == OP_H2D) {
            if (recv_all(fd, buf, h.size)) return;
            struct hdr ack = { OP_H2D, 0, 0 };
            if (send_all(fd, &ack, sizeof ack)) return;
        } else if (h.op == OP_D2H) {
            struct hdr rep = { OP_D2H, 0, h.size };
            if (send_all(fd, &rep, sizeof rep) || send_all(fd, buf, h.size)) return;
        } else if (h.op == OP_PING) {
            size_t rest = h.size > sizeof h ? h.size - sizeof h : 0;
            if (recv_all(fd, buf, rest) || send_all(fd, buf, h.size < sizeof h ? sizeof h : h.size)) return;
        } else if (h.op == OP_SINK) {   /* size bytes of small frames follow, read in bulk, no reply */
            if (recv_all(fd, buf, h.size)) return;
        } else {
            return;
        }
    }
}

static int server(int port)
{
    signal(SIGCHLD, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 16)) { perror("bind/listen"); return 1; }
    printf("listening\n");
    fflush(stdout);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) continue;
        nodelay(fd);
        if (fork() == 0) { close(ls); serve(fd); _exit(0); }
        close(fd);
    }
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int client(int port, const char *mode, size_t n, int iters)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
    nodelay(fd);
    uint32_t op = !strcmp(mode, "h2d") ? OP_H2D : !strcmp(mode, "d2h") ? OP_D2H : !strcmp(mode, "ff") ? OP_SINK
                : OP_PING;
    if (op != OP_H2D && op != OP_D2H && n < sizeof(struct hdr)) n = sizeof(struct hdr);
    char *buf = malloc(n);
    memset(buf, 0x5a, n);   /* touch every page before timing */
    if (op == OP_SINK) {
        struct hdr h = { OP_SINK, 0, (uint64_t)n * (uint64_t)iters }, p = { OP_PING, 0, sizeof(struct hdr) };
        long long t0 = now_ns();
        if (send_all(fd, &h, sizeof h)) { fprintf(stderr, "connection lost\n"); return 1; }
        for (int i = 0; i < iters; i++)
            if (send_all(fd, buf, n)) { fprintf(stderr, "connection lost\n"); return 1; }
        long long t1 = now_ns();
        if (send_all(fd, &p, sizeof p) || recv_all(fd, &p, sizeof p)) { fprintf(stderr, "connection lost\n"); return 1; }
        printf("ff %lld %lld\n", t1 - t0, now_ns() - t1);
        return 0;
    }
    printf("bw");
    for (int i = -1; i < iters; i++) {
        long long t0 = now_ns();
        struct hdr h = { op, 0, n }, r;
        int bad;
        if (op == OP_H2D)
            bad = send_all(fd, &h, sizeof h) || send_all(fd, buf, n) || recv_all(fd, &r, sizeof r);
        else if (op == OP_D2H)
            bad = send_all(fd, &h, sizeof h) || recv_all(fd, &r, sizeof r) || recv_all(fd, buf, n);
        else {
            memcpy(buf, &h, sizeof h);
            bad = send_all(fd, buf, n) || recv_all(fd, buf, n);
        }
        if (bad) { fprintf(stderr, "connection lost\n"); return 1; }
        long long t = now_ns() - t0;
        if (i >= 0) printf(" %lld", t);
    }
    printf("\n");
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "server")) return server(atoi(argv[2]));
    if (argc == 6 && !strcmp(argv[1], "client"))
        return client(atoi(argv[2]), argv[3], strtoull(argv[4], NULL, 0), atoi(argv[5]));
    fprintf(stderr, "usage: rawtcp server PORT | rawtcp client PORT h2d|d2h|ping|ff BYTES ITERS\n");
    return 2;
}
