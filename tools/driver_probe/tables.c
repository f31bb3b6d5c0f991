/* cuGetExportTable for the probe: every UUID asked for gets a table of PROBE_NSLOTS logging trampolines
 * (slot 0 holds the table's size in bytes, except in the context-local-storage table whose slot 0 is a
 * function), and the slots whose meaning was established (docs/driver.md) answer as the driver would.
 * PROBE_NO_TABLE=<uuid hex> refuses one table, PROBE_TABLE_SIZE / PROBE_EMPTY_TABLE shrink one, to see what the
 * runtime does then. */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integrity.h"
#include "probe.h"

struct table {
    unsigned char uuid[16];
    void *slots[PROBE_NSLOTS];
};

static struct table tables[PROBE_NTABLES];
static int ntables;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void hex(const unsigned char *u, char *out)
{
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", u[i]);
}

/* ---- answers established by experiment (docs/driver.md) */

extern CUresult probe_primary_ctx(CUcontext *pctx, CUdevice dev);

/* a094798c...: the runtime's tools callback hooks. Slots 2 and 6 hand the runtime a buffer and its size. */
static uint64_t hook_buf2[4096], hook_buf6[64];
static uint64_t tools_hooks(int k, uint64_t *a, int *done)
{
    *done = 1;
    switch (k) {
    case 2:
        *(void **)a[0] = hook_buf2;
        *(size_t *)a[1] = (size_t)atol(getenv("PROBE_HOOK2") ? getenv("PROBE_HOOK2") : "1024");
        return 0;
    case 6:
        *(void **)a[0] = hook_buf6;
        *(size_t *)a[1] = 14;
        return 0;
    }
    *done = 0;
    return 0;
}

__attribute__((destructor)) static void hook_report(void)
{
    int n2 = 0, last2 = -1, n6 = 0;
    for (int i = 0; i < 4096; i++)
        if (hook_buf2[i])
            n2++, last2 = i;
    for (int i = 0; i < 64 * 8; i++)
        if (((unsigned char *)hook_buf6)[i])
            n6++;
    plog("hooks: buffer2 %d non-zero words, last index %d; buffer6 %d non-zero bytes", n2, last2, n6);
}

/* 6bd5fb6c...: the runtime's interface (module loading from fatbins, primary contexts). */
static uint64_t cudart_iface(int k, uint64_t *a, int *done)
{
    *done = 1;
    switch (k) {
    case 2:
        return probe_primary_ctx((CUcontext *)a[0], (CUdevice)a[1]);
    }
    *done = 0;
    return 0;
}

static struct table *find_table(const char *uuid_hex);
extern CUresult cuCtxGetCurrent(CUcontext *);

/* c693336e...: context-local storage: the runtime keeps its per-context state in the driver's context.
 * slot 0 set(ctx, key, value, dtor(ctx, key, value)); slot 1 remove(ctx, key); slot 2 get(&value, ctx, key).
 * ctx NULL means the calling thread's current context; get fails while nothing is stored. */
struct cls {
    CUcontext ctx;
    void *key, *value, *dtor;
};
static struct cls cls_items[256];
static int ncls;
static uint64_t ctx_storage(int k, uint64_t *a, int *done)
{
    *done = 1;
    CUcontext ctx;
    switch (k) {
    case 0:
        ctx = (CUcontext)a[0];
        if (!ctx)
            cuCtxGetCurrent(&ctx);
        for (int i = 0; i < ncls; i++)
            if (cls_items[i].ctx == ctx && cls_items[i].key == (void *)a[1]) {
                cls_items[i].value = (void *)a[2];
                return 0;
            }
        cls_items[ncls++] = (struct cls){ctx, (void *)a[1], (void *)a[2], (void *)a[3]};
        plog("  cls set ctx=%p key=%p value=%p dtor=%p", (void *)ctx, (void *)a[1], (void *)a[2], (void *)a[3]);
        return 0;
    case 1:
        ctx = (CUcontext)a[0];
        if (!ctx)
            cuCtxGetCurrent(&ctx);
        for (int i = 0; i < ncls; i++)
            if (cls_items[i].ctx == ctx && cls_items[i].key == (void *)a[1]) {
                cls_items[i] = cls_items[--ncls];
                plog("  cls removed");
                return 0;
            }
        return CUDA_ERROR_INVALID_VALUE;
    case 2:
        ctx = (CUcontext)a[1];
        if (!ctx)
            cuCtxGetCurrent(&ctx);
        for (int i = 0; i < ncls; i++)
            if (cls_items[i].ctx == ctx && cls_items[i].key == (void *)a[2]) {
                *(void **)a[0] = cls_items[i].value;
                return 0;
            }
        return getenv("PROBE_CLS_GET_RC") ? (uint64_t)atoi(getenv("PROBE_CLS_GET_RC")) : CUDA_ERROR_INVALID_VALUE;
    }
    *done = 0;
    return 0;
}

/* d4082055...: integrity check, slot 1 (runtime_version, timestamp, out[16]); see integrity.c. */
static uint64_t integrity(int k, uint64_t *a, int *done)
{
    *done = 1;
    if (k != 1) {
        *done = 0;
        return 0;
    }
    struct pv_integrity_input in = {0};
    struct table *self = find_table("d4082055bde6704b8d34ba123c66e1f2");
    struct table *rt = find_table("6bd5fb6c5bf4e74a8987d93912fd9df9");
    in.driver_version = 13000;
    in.runtime_version = (uint32_t)a[0];
    in.timestamp = a[1];
    in.pid = (uint32_t)getpid();
    in.tid = (uint32_t)(uintptr_t)pthread_self(); /* the runtime hashes pthread_self(), not gettid() */
    in.cudart_table = rt ? rt->slots : NULL;
    in.integrity_table = self->slots;
    in.fn = self->slots[1];
    in.ndevices = 1;
    memset(in.devices[0].uuid, 0x5a, 16);
    in.devices[0].pci_bus = 1;
    pv_integrity_answer(&in, (uint8_t *)a[2]);
    const uint8_t *o = (const uint8_t *)a[2];
    plog("  integrity(rt=%u, ts=%lu) -> %02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x",
         in.runtime_version, (unsigned long)in.timestamp, o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8],
         o[9], o[10], o[11], o[12], o[13], o[14], o[15]);
    return 0;
}

/* 263e8860...: context wrapper. slot 2 unwrap(ctx, &is_wrapped, &inner): contexts here are never wrapped.
 * slot 3 takes no arguments; the runtime records whether it returned 1. */
static uint64_t ctx_wrapper(int k, uint64_t *a, int *done)
{
    *done = 1;
    switch (k) {
    case 2:
        *(unsigned *)a[1] = 0;
        return 0;
    case 3:
        return getenv("PROBE_WRAPPER3") ? (uint64_t)atoi(getenv("PROBE_WRAPPER3")) : 0;
    }
    *done = 0;
    return 0;
}

/* What the driver does when a context goes away (cuCtxDestroy, cuDevicePrimaryCtxReset): every value stored
 * for it is handed to its destructor, then forgotten. */
void probe_ctx_gone(CUcontext ctx)
{
    for (int i = 0; i < ncls;) {
        if (cls_items[i].ctx != ctx) {
            i++;
            continue;
        }
        struct cls c = cls_items[i];
        cls_items[i] = cls_items[--ncls];
        plog("  cls destructor %p(ctx=%p, key=%p, value=%p)", c.dtor, (void *)ctx, c.key, c.value);
        if (c.dtor && !getenv("PROBE_NO_CLS_DTOR"))
            ((void (*)(CUcontext, void *, void *))c.dtor)(ctx, c.key, c.value);
    }
}

struct known {
    const char *uuid;
    const char *name;
    uint64_t (*answer)(int slot, uint64_t *args, int *done);
    int unsized; /* slot 0 is a function, not the table's size */
};
static const struct known known[] = {
    {"a094798c2e742e7493f20800200c0a66", "tools-runtime-callback-hooks", tools_hooks},
    {"6bd5fb6c5bf4e74a8987d93912fd9df9", "cudart-interface", cudart_iface},
    {"d4082055bde6704b8d34ba123c66e1f2", "integrity-check", integrity},
    {"c693336e1121df11a8c368f355d89593", "context-local-storage", ctx_storage, 1},
    {"263e88607cd2614392f6bbd5006dfa7e", "context-wrapper", ctx_wrapper},
};

static struct table *find_table(const char *uuid_hex)
{
    char u[33];
    for (int t = 0; t < ntables; t++) {
        hex(tables[t].uuid, u);
        if (strcmp(u, uuid_hex) == 0)
            return &tables[t];
    }
    return NULL;
}

uint64_t probe_slot(int t, int k, void *ret, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f)
{
    char u[33], w[256];
    uint64_t args[6] = {a, b, c, d, e, f}, r = 0;
    int done = 0;
    hex(tables[t].uuid, u);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i].uuid, u) == 0)
            r = known[i].answer(k, args, &done);
    plog("SLOT %s[%d](0x%lx, 0x%lx, 0x%lx, 0x%lx, 0x%lx, 0x%lx) -> %s%lu  from %s", u, k, a, b, c, d, e, f,
         done ? "" : "UNKNOWN ", r, where(ret, w, sizeof w));
    return r;
}

CUresult cuGetExportTable(const void **out, const CUuuid *id)
{
    char u[33], w[256];
    hex((const unsigned char *)id->bytes, u);
    plog("cuGetExportTable(%s) from %s", u, where(__builtin_return_address(0), w, sizeof w));
    const char *refuse = getenv("PROBE_NO_TABLE");
    if (refuse && strstr(refuse, u)) {
        plog("  refused (PROBE_NO_TABLE)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&mu);
    int t;
    for (t = 0; t < ntables; t++)
        if (memcmp(tables[t].uuid, id->bytes, 16) == 0)
            break;
    if (t == ntables) {
        if (ntables == PROBE_NTABLES) {
            pthread_mutex_unlock(&mu);
            return CUDA_ERROR_UNKNOWN;
        }
        ntables++;
        memcpy(tables[t].uuid, id->bytes, 16);
        tables[t].slots[0] = (void *)(uintptr_t)(PROBE_NSLOTS * sizeof(void *));
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strcmp(known[i].uuid, u) == 0 && known[i].unsized)
                tables[t].slots[0] = probe_slot_fns[t][0];
        /* PROBE_TABLE_SIZE=<uuid hex>:<bytes>: what the table claims in slot 0, to find the runtime's minimum */
        const char *sz = getenv("PROBE_TABLE_SIZE");
        if (sz && strncmp(sz, u, 32) == 0 && sz[32] == ':')
            tables[t].slots[0] = (void *)(uintptr_t)atol(sz + 33);
        /* PROBE_EMPTY_TABLE=<uuid hex>: a table that claims N bytes (PROBE_EMPTY_SIZE, default 8), NULL slots */
        const char *empty = getenv("PROBE_EMPTY_TABLE");
        if (empty && strstr(empty, u)) {
            const char *n = getenv("PROBE_EMPTY_SIZE");
            tables[t].slots[0] = (void *)(uintptr_t)(n ? atol(n) : 8);
            for (int k = 1; k < PROBE_NSLOTS; k++)
                tables[t].slots[k] = NULL;
            plog("  empty table (PROBE_EMPTY_TABLE), size %lu", (unsigned long)(uintptr_t)tables[t].slots[0]);
        }
        for (int k = 1; k < PROBE_NSLOTS; k++)
            tables[t].slots[k] = probe_slot_fns[t][k];
    }
    *out = tables[t].slots;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}
