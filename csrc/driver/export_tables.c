/* cuGetExportTable: the private tables NVIDIA's runtime 13.0 asks the driver for, identified by 16-byte UUIDs.
 * What each slot means, and how that was established, is in docs/driver.md ("Export tables"); this file follows
 * it. Every slot is a real function: a slot nobody has seen called logs once, naming table and slot, and returns
 * CUDA_ERROR_NOT_SUPPORTED, so an unexpected use is a clear message rather than a jump to nowhere. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

typedef void (*slot_fn)(void);

static CUresult unknown_slot(const char *table, int slot, atomic_int *once)
{
    pv_log_once(once, "NVIDIA's runtime called slot %d of export table %s, which libvcuda does not implement",
                slot, table);
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define UNKNOWN(tag, uuid, n)                                                                                     \
    static CUresult tag##_##n(void)                                                                               \
    {                                                                                                             \
        static atomic_int once;                                                                                   \
        return unknown_slot(uuid, n, &once);                                                                      \
    }

#define SIZE_OF(nslots) ((slot_fn)(uintptr_t)((nslots) * sizeof(void *)))

/* ------------------------------------------------------------------------ 6bd5fb6c: the runtime's interface */
#define CUDART_UUID "6bd5fb6c-5bf4-e74a-8987-d93912fd9df9"
/* slot 2: the handle of dev's primary context, not retained (the runtime makes it current, then retains it). */
static CUresult cudart_primary_ctx(CUcontext *out, CUdevice dev)
{
    CUresult r = drv_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = drv_primary(dev);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
UNKNOWN(cudart, CUDART_UUID, 1)
UNKNOWN(cudart, CUDART_UUID, 3)
UNKNOWN(cudart, CUDART_UUID, 4)
UNKNOWN(cudart, CUDART_UUID, 5)
UNKNOWN(cudart, CUDART_UUID, 6)
UNKNOWN(cudart, CUDART_UUID, 7)
UNKNOWN(cudart, CUDART_UUID, 8)
UNKNOWN(cudart, CUDART_UUID, 9)
static const slot_fn cudart_table[10] = {
    SIZE_OF(10), (slot_fn)cudart_1, (slot_fn)cudart_primary_ctx, (slot_fn)cudart_3, (slot_fn)cudart_4,
    (slot_fn)cudart_5, (slot_fn)cudart_6, (slot_fn)cudart_7, (slot_fn)cudart_8, (slot_fn)cudart_9,
};

/* ------------------------------------------------------------------------ a094798c: tools callback hooks */
#define HOOKS_UUID "a094798c-2e74-2e74-93f2-0800200c0a66"
/* Buffers the runtime reads to see which tool callbacks are enabled: all zero, none. Slot 2's must hold at least
 * CUPTI_RUNTIME_TRACE_CBID_SIZE (523) entries, slot 6's more than 13 bytes. */
static uint64_t hooks_runtime[1024];
static uint8_t hooks_other[64];
static void hooks_2(void **buf, size_t *count)
{
    *buf = hooks_runtime;
    *count = sizeof hooks_runtime / sizeof hooks_runtime[0];
}
static void hooks_6(void **buf, size_t *size)
{
    *buf = hooks_other;
    *size = 14;
}
UNKNOWN(hooks, HOOKS_UUID, 1)
UNKNOWN(hooks, HOOKS_UUID, 3)
UNKNOWN(hooks, HOOKS_UUID, 4)
UNKNOWN(hooks, HOOKS_UUID, 5)
static const slot_fn hooks_table[7] = {   /* the runtime requires a size of at least 7 slots */
    SIZE_OF(7), (slot_fn)hooks_1, (slot_fn)hooks_2, (slot_fn)hooks_3, (slot_fn)hooks_4, (slot_fn)hooks_5,
    (slot_fn)hooks_6,
};

/* ------------------------------------------------------------------------ 42d85a81: tools TLS */
#define TLS_UUID "42d85a81-23f6-cb47-8298-f6e78a3aecdc"
/* Slot 2: the calling thread's current context. The runtime inside cuBLASLt 13.1 asks for it in
 * cublasLtMatmulAlgoGetHeuristic and hands the answer to 21318c60's slot 4 (the context's id), the key of its
 * per-context data; an error there fails the heuristic (docs/driver.md). */
static CUresult tls_current_ctx(CUcontext *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = drv_ctx_top();
    return CUDA_SUCCESS;
}
UNKNOWN(tls, TLS_UUID, 1)
UNKNOWN(tls, TLS_UUID, 3)
static const slot_fn tls_table[4] = { SIZE_OF(4), (slot_fn)tls_1, (slot_fn)tls_current_ctx, (slot_fn)tls_3 };

/* ------------------------------------------------------------------------ c693336e: context-local storage */
#define CLS_UUID "c693336e-1121-df11-a8c3-68f355d89593"
/* No size slot: slot 0 is a function. ctx NULL means the calling thread's current context. */
static CUresult cls_set(CUcontext c, void *key, void *value, void (*dtor)(CUcontext, void *, void *))
{
    return drv_cls_set(c, key, value, dtor);
}
static CUresult cls_remove(CUcontext c, void *key) { return drv_cls_remove(c, key); }
static CUresult cls_get(void **value, CUcontext c, void *key) { return value ? drv_cls_get(c, key, value) : 1; }
UNKNOWN(cls, CLS_UUID, 3)
static const slot_fn cls_table[4] = { (slot_fn)cls_set, (slot_fn)cls_remove, (slot_fn)cls_get, (slot_fn)cls_3 };

/* ------------------------------------------------------------------------ 263e8860: context wrapper */
#define WRAP_UUID "263e8860-7cd2-6143-92f6-bbd5006dfa7e"
static CUresult wrap_unwrap(CUcontext c, unsigned *is_wrapped, CUcontext *inner)
{
    (void)c;
    (void)inner;
    if (is_wrapped)
        *is_wrapped = 0;   /* no context here wraps another */
    return CUDA_SUCCESS;
}
static int wrap_3(void) { return 0; }   /* the runtime's ordinary path (1 adds a cuCtxSetCurrent per setup) */
UNKNOWN(wrap, WRAP_UUID, 1)
static const slot_fn wrap_table[4] = { SIZE_OF(4), (slot_fn)wrap_1, (slot_fn)wrap_unwrap, (slot_fn)wrap_3 };

/* ------------------------------------------------------------------------ d4082055: integrity check */
#define INTEGRITY_UUID "d4082055-bde6-704b-8d34-ba123c66e1f2"
static CUresult integrity_check(unsigned runtime_version, uint64_t timestamp, uint8_t out[16]);
UNKNOWN(integrity, INTEGRITY_UUID, 2)
static const slot_fn integrity_table[3] = { SIZE_OF(3), (slot_fn)integrity_check, (slot_fn)integrity_2 };

extern CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
extern CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev);

/* The answer binds the process, this library's tables and the devices, exactly as the runtime computes it (the
 * device facts come from the same functions the runtime calls: cuDeviceGetUuid, cuDeviceGetAttribute). */
static CUresult integrity_check(unsigned runtime_version, uint64_t timestamp, uint8_t out[16])
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct pv_integrity_input in;
    memset(&in, 0, sizeof in);
    in.driver_version = PV_CUDA_VERSION;
    in.runtime_version = runtime_version;
    in.pid = (uint32_t)getpid();
    in.tid = (uint32_t)(uintptr_t)pthread_self();   /* what the runtime hashes (its disassembly; not gettid) */
    in.cudart_table = cudart_table;
    in.integrity_table = integrity_table;
    in.fn = (const void *)integrity_table[1];
    in.timestamp = timestamp;
    in.ndevices = (unsigned)pv_device_count();
    if (in.ndevices > PV_INTEGRITY_MAX_DEVICES)
        in.ndevices = PV_INTEGRITY_MAX_DEVICES;
    for (unsigned i = 0; i < in.ndevices; i++) {
        struct pv_integrity_device *dv = &in.devices[i];
        int dom = 0, bus = 0, dev = 0;
        cuDeviceGetUuid((CUuuid *)dv->uuid, (CUdevice)i);
        cuDeviceGetAttribute(&dom, PV_cudaDevAttrPciDomainId, (CUdevice)i);
        cuDeviceGetAttribute(&bus, PV_cudaDevAttrPciBusId, (CUdevice)i);
        cuDeviceGetAttribute(&dev, PV_cudaDevAttrPciDeviceId, (CUdevice)i);
        dv->pci_domain = (uint32_t)dom;
        dv->pci_bus = (uint32_t)bus;
        dv->pci_device = (uint32_t)dev;
    }
    pv_integrity_answer(&in, out);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ lookup */
struct table { const char *uuid; const slot_fn *slots; };
static const struct table tables[] = {
    { CUDART_UUID, cudart_table }, { HOOKS_UUID, hooks_table }, { TLS_UUID, tls_table },
    { CLS_UUID, cls_table }, { WRAP_UUID, wrap_table }, { INTEGRITY_UUID, integrity_table },
};
/* The runtime's optional logging hook: without it the runtime simply does not log through the driver. */
#define DECLINED_UUID "f8cff951-2146-8b4e-b9e2-fb469e7c0dd9"

static void uuid_text(const unsigned char *u, char out[37])
{
    static const int dash[16] = { [3] = 1, [5] = 1, [7] = 1, [9] = 1 };
    char *p = out;
    for (int i = 0; i < 16; i++) {
        p += sprintf(p, "%02x", u[i]);
        if (dash[i])
            *p++ = '-';
    }
    *p = 0;
}

/* "libfoo.so.1+0x1234": the library and offset of a caller, for the one line about a table nobody answers. */
static void drv_caller(const void *addr, char *out, size_t n)
{
    Dl_info info;
    if (dladdr(addr, &info) && info.dli_fname) {
        const char *base = strrchr(info.dli_fname, '/');
        snprintf(out, n, "%s+0x%lx", base ? base + 1 : info.dli_fname,
                 (unsigned long)((const char *)addr - (const char *)info.dli_fbase));
    } else {
        snprintf(out, n, "%p", addr);
    }
}

PV_API CUresult cuGetExportTable(const void **out, const CUuuid *id)
{
    if (!out || !id)
        return CUDA_ERROR_INVALID_VALUE;
    char u[37];
    uuid_text((const unsigned char *)id->bytes, u);
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (strcmp(tables[i].uuid, u) == 0) {
            if (tables[i].slots == cudart_table)
                drv_note_runtime();   /* only NVIDIA's runtime asks for its interface */
            *out = tables[i].slots;
            return CUDA_SUCCESS;
        }
    if ((*out = drv_library_table(u)))
        return CUDA_SUCCESS;
    if (strcmp(u, DECLINED_UUID) != 0) {
        char who[128];
        drv_caller(__builtin_return_address(0), who, sizeof who);
        pv_log("export table %s was asked for (by %s); libvcuda does not know it (CUDA_ERROR_NOT_SUPPORTED)", u, who);
        pv_census_missing("table", "%s by %s", u, who);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}
