/* Logging stand-in libcuda.so.1 used to learn what NVIDIA's runtime asks of the driver (see docs/driver.md). */
#ifndef PROBE_H
#define PROBE_H
#include <stddef.h>
#include <stdint.h>

#define PROBE_NTABLES 16
#define PROBE_NSLOTS 64

struct probe_pfn {
    const char *base; /* name passed to cuGetProcAddress */
    int version;      /* CUDA version that introduced this ABI of it */
    int pt;           /* 1 for the _ptds/_ptsz (per-thread default stream) variant */
    const char *sym;  /* exported symbol with that ABI */
    void *fn;
};
extern const struct probe_pfn probe_pfns[];
extern const int probe_npfns;
extern void *const probe_slot_fns[PROBE_NTABLES][PROBE_NSLOTS];

const char *where(const void *addr, char *buf, size_t n); /* "module+0xoffset" */
void plog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t probe_unimpl(const char *name, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f);
uint64_t probe_slot(int table, int slot, void *ret, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e,
                    uint64_t f);
#endif
