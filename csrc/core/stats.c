/* Request statistics of this process (PYVGPU_STATS, `pyvgpu run --stats`): per op the requests sent, the bulk bytes
 * they moved on the wire (request payload + reply payload, compressed where they were), how many of them blocked the
 * calling thread on a reply (a blocking round trip; for a detached request, a wait for room in its window) and for
 * how long. On a network it is the blocked calls that decide a program's speed: each costs at
 * least one round-trip time, whatever the link's bandwidth.
 *
 * Always compiled in: a few relaxed atomic adds per request, next to a syscall. The table is printed at exit when
 * PYVGPU_STATS is set: "1" (or "stderr") prints to stderr, any other value except "0" is a file the table is
 * appended to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pv_state.h"
#include "pv_stats.h"

struct op_stats {
    _Atomic uint64_t calls, bytes, blocked, blocked_ns;
};

static struct op_stats op_stats[PV_OP_TABLE_SIZE];
static struct op_stats dev_stats[PV_MAX_DEVICES];
static int64_t start_ns;
static pid_t owner;                 /* a forked child does not print the parent's figures */
static char *target;                /* NULL: stderr */

int64_t pv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void pv_stats_note(int op, int dev, int calls, uint64_t bytes, int blocked, int64_t ns)
{
    struct op_stats *s[2] = { op > 0 && op < PV_OP_TABLE_SIZE ? &op_stats[op] : NULL,
                              dev >= 0 && dev < PV_MAX_DEVICES ? &dev_stats[dev] : NULL };
    for (int i = 0; i < 2; i++) {
        if (!s[i])
            continue;
        atomic_fetch_add_explicit(&s[i]->calls, (uint64_t)calls, memory_order_relaxed);
        atomic_fetch_add_explicit(&s[i]->bytes, bytes, memory_order_relaxed);
        if (blocked) {
            atomic_fetch_add_explicit(&s[i]->blocked, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&s[i]->blocked_ns, (uint64_t)(ns > 0 ? ns : 0), memory_order_relaxed);
        }
    }
}

static uint64_t ld(_Atomic uint64_t *v) { return atomic_load_explicit(v, memory_order_relaxed); }

static void row(FILE *f, const char *name, struct op_stats *s)
{
    uint64_t blocked = ld(&s->blocked);
    double ms = (double)ld(&s->blocked_ns) / 1e6;
    fprintf(f, "%-22s %10llu %14llu %10llu %12.3f %10.3f\n", name, (unsigned long long)ld(&s->calls),
            (unsigned long long)ld(&s->bytes), (unsigned long long)blocked, ms, blocked ? ms / (double)blocked : 0.0);
}

FILE *pv_exit_report_open(const char *target, const char *env, const char *title)
{
    fflush(stdout);                 /* the program's own output first */
    FILE *f = target ? fopen(target, "a") : stderr;
    if (!f) {
        pv_log("%s: cannot open %s", env, target);
        return NULL;
    }
    char exe[256] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        exe[n] = 0;
    fprintf(f, "pyvgpu %s: pid %d %s", title, (int)getpid(), exe);
    return f;
}

void pv_exit_report_close(FILE *f)
{
    if (f != stderr)
        fclose(f);
    else
        fflush(f);
}

static void print_stats(void)
{
    if (getpid() != owner)
        return;
    FILE *f = pv_exit_report_open(target, PV_KEY_ENV_STATS, "stats");
    if (!f)
        return;
    fprintf(f, ", %.3f s; blocked = calls that waited for their reply (blocking round trips)\n",
            (double)(pv_now_ns() - start_ns) / 1e9);
    fprintf(f, "%-22s %10s %14s %10s %12s %10s\n", "op", "calls", "bytes", "blocked", "blocked_ms", "ms/blocked");
    struct op_stats total = { 0 };
    for (int op = 0; op < PV_OP_TABLE_SIZE; op++) {
        struct op_stats *s = &op_stats[op];
        if (!ld(&s->calls))
            continue;
        row(f, pv_op_names[op] ? pv_op_names[op] : "?", s);
        atomic_fetch_add(&total.calls, ld(&s->calls));
        atomic_fetch_add(&total.bytes, ld(&s->bytes));
        atomic_fetch_add(&total.blocked, ld(&s->blocked));
        atomic_fetch_add(&total.blocked_ns, ld(&s->blocked_ns));
    }
    row(f, "all", &total);
    for (int d = 0; d < PV_MAX_DEVICES; d++) {
        if (!ld(&dev_stats[d].calls))
            continue;
        char name[32];
        snprintf(name, sizeof name, "GPU%d", d);
        row(f, name, &dev_stats[d]);
    }
    pv_exit_report_close(f);
}

__attribute__((constructor)) static void stats_init(void)
{
    start_ns = pv_now_ns();
    const char *v = getenv(PV_KEY_ENV_STATS);
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    if (strcmp(v, "1") != 0 && strcmp(v, "stderr") != 0)
        target = strdup(v);
    owner = getpid();
    atexit(print_stats);
}
