/* The client's address lookup (csrc/core/registry.c: pv_alloc_find, pv_alloc_find_device) on a table like a
 * framework's: N allocations of mixed sizes (512 B to 20 MiB, a caching allocator's blocks and segments) packed in
 * a device window with small gaps, optionally one large entry below them (a memory pool or a big tensor: `big`
 * bytes, 0 for none), and pinned host buffers elsewhere. It times, in ns per call (median of `rounds`):
 *   hit       a pointer inside a random allocation (a kernel argument, a memset's or a copy's device side)
 *   hit_dev   the same through pv_alloc_find_device (copies' device ranges)
 *   gap       a pointer in a gap between two allocations (no entry: an error path, a foreign pointer)
 *   host      pageable host memory above the window, within `big` of the allocations (cudaMemcpy's check of
 *             its host side for pinned memory: every copy from malloc'd memory asks and misses)
 * Usage: alloc_lookup N BIG_BYTES ROUNDS; links against libpvcore.so (bench/alloc_lookup_bench.py builds it).
 * One line of JSON on stdout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct pv_alloc { uint64_t ptr; size_t size; int dev; const void *owner; };
void pv_alloc_add_owned(uint64_t ptr, size_t size, int dev, const void *owner);
int pv_alloc_find(uint64_t ptr, struct pv_alloc *out);
int pv_alloc_find_device(uint64_t ptr, struct pv_alloc *out);
int pv_alloc_remove(uint64_t ptr, int *dev);

#define WINDOW 0x7f0000000000ull   /* where a GPU host's driver placed device memory in GPU run 3 */
#define QUERIES 4096

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* ns per lookup of the queries, the median of `rounds` passes; *found counts the hits (so nothing is optimized out) */
static double time_lookups(const uint64_t *q, int dev_only, int rounds, long *found)
{
    double *per = malloc(sizeof *per * (size_t)rounds);
    struct pv_alloc a;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (int i = 0; i < QUERIES; i++)
            *found += dev_only ? pv_alloc_find_device(q[i], &a) == 0 : pv_alloc_find(q[i], &a) == 0;
        per[r] = (now_ns() - t0) / QUERIES;
    }
    qsort(per, (size_t)rounds, sizeof *per, cmp);
    double m = per[rounds / 2];
    free(per);
    return m;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s N BIG_BYTES ROUNDS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    uint64_t big = strtoull(argv[2], NULL, 0);
    int rounds = atoi(argv[3]);
    static const size_t sizes[] = { 512, 4096, 65536, 2 << 20, 20 << 20 };
    uint64_t *start = malloc(sizeof *start * (size_t)n), *len = malloc(sizeof *len * (size_t)n);
    uint64_t at = WINDOW;
    static const char owner;
    if (big) {
        pv_alloc_add_owned(at, big, 0, &owner);
        at += big + 4096;
    }
    for (long i = 0; i < n; i++) {
        len[i] = sizes[next() % 5];
        start[i] = at;
        pv_alloc_add_owned(at, len[i], 0, &owner);
        at += (len[i] + 511) / 512 * 512 + 512 * (1 + next() % 4);    /* a gap of 512 B to 2 KiB after each */
    }
    for (int i = 0; i < 64; i++)                                      /* pinned host buffers, below the window */
        pv_alloc_add_owned(0x5a0000000000ull + (uint64_t)i * (1 << 22), 1 << 20, -1, &owner);
    uint64_t hit[QUERIES], gap[QUERIES], host[QUERIES];
    for (int i = 0; i < QUERIES; i++) {
        long k = (long)(next() % (uint64_t)n);
        hit[i] = start[k] + next() % len[k];
        gap[i] = start[k] + (len[k] + 511) / 512 * 512 + next() % 512;
        host[i] = at + (1 << 20) + next() % (1 << 20);
    }
    long found = 0;
    double t_hit = time_lookups(hit, 0, rounds, &found);
    double t_dev = time_lookups(hit, 1, rounds, &found);
    double t_gap = time_lookups(gap, 0, rounds, &found);
    double t_host = time_lookups(host, 0, rounds, &found);
    long want = 2L * QUERIES * rounds;
    printf("{\"allocations\": %ld, \"big\": %llu, \"hit_ns\": %.1f, \"hit_dev_ns\": %.1f, \"gap_ns\": %.1f, "
           "\"host_ns\": %.1f, \"found\": %ld, \"found_expected\": %ld}\n", n, (unsigned long long)big, t_hit,
           t_dev, t_gap, t_host, found, want);
    for (long i = 0; i < n; i++) {
        int dev;
        if (pv_alloc_remove(start[i], &dev) != 0)
            return 1;
    }
    free(start);
    free(len);
    return found == want ? 0 : 1;
}
