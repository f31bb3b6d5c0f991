/* libvcudart shared declarations: minimal CUDA runtime types (no CUDA headers needed), logging, per-thread
 * state, and the interfaces between transport / hostmap / registry / api_*.c. */
#ifndef PV_COMMON_H
#define PV_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <msgpack.h>

#include "protocol_gen.h"
#include "layouts_gen.h"

#define PV_API __attribute__((visibility("default")))
#define PV_WEAK_API __attribute__((visibility("default"), weak))

/* Store a field of a CUDA struct filled in by offset (layouts_gen.h), alignment-safe. */
static inline void pv_put_int(void *base, size_t off, int v) { memcpy((char *)base + off, &v, sizeof v); }
static inline void pv_put_size(void *base, size_t off, size_t v) { memcpy((char *)base + off, &v, sizeof v); }

/* ---- minimal CUDA runtime types (ABI-compatible with CUDA 13.0's declarations) ---- */
typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
typedef struct pv_stream *cudaStream_t;
typedef struct pv_event *cudaEvent_t;
typedef struct pv_func *cudaKernel_t;

enum { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };

#define PV_SUCCESS 0
#define PV_MAX_DEVICES 64
#define PV_MAX_ATTRS 256
#define PV_HOST_ALIGN 4096

/* ---- logging ---- */
void pv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- per-thread state ---- */
struct pv_call_config { dim3 grid, block; size_t shmem; cudaStream_t stream; };
int pv_tls_device(void);                  /* current device of this thread (0 by default) */
void pv_tls_set_device(int dev);
cudaError_t pv_ret(cudaError_t err);      /* records a failure as the thread's last error; returns err */
cudaError_t pv_last_error(int reset);
cudaError_t pv_unsupported(const char *name, atomic_int *once);
const char *pv_err_name(cudaError_t err);  /* api_error.c: "cudaErrorX" or "error N" */
int pv_push_config(const struct pv_call_config *cfg);
int pv_pop_config(struct pv_call_config *cfg);

/* ---- wire (wire.c): framing and msgpack helpers ---- */
const msgpack_object *pv_map_get(const msgpack_object *map, const char *key);
const msgpack_object *pv_map_get_int(const msgpack_object *map, int64_t key);
int pv_obj_i64(const msgpack_object *o, int64_t *out);
int pv_obj_u64(const msgpack_object *o, uint64_t *out);
int pv_obj_f64(const msgpack_object *o, double *out);
int pv_obj_str(const msgpack_object *o, char *out, size_t cap);   /* str or bin → NUL-terminated */
int pv_read_full(int fd, void *buf, size_t n);                    /* 0 ok, -1 error/EOF */
int pv_write_full(int fd, const void *a, size_t an, const void *b, size_t bn);
int pv_read_header(int fd, msgpack_unpacked *out, char **raw);    /* reads u32 + header; caller frees *raw */
void pv_pack_bytes(msgpack_packer *pk, const void *data, size_t n);
void pv_pack_str(msgpack_packer *pk, const char *s);

/* ---- transport (transport.c): one connection per host ---- */
struct pv_pending;
struct pv_conn {
    char host[256];
    int port;
    int fd;
    int first_gpu;                 /* global index of this host's device 0 */
    int ndev;
    atomic_int dead;
    atomic_uint_fast64_t next_id;
    pthread_mutex_t send_mu;       /* one frame at a time on the socket */
    pthread_mutex_t mu;            /* pending list */
    struct pv_pending *pending;
    pthread_t reader;
    int reader_started;
};

struct pv_reply {
    int err;
    msgpack_unpacked msg;          /* owns result */
    char *raw;                     /* header bytes the result may point into */
    const msgpack_object *result;
    int have_msg;
    size_t payload_len;            /* bytes written into the caller's out buffer */
};

/* Request building: the caller packs exactly nargs arguments after pv_req_begin. */
struct pv_req {
    struct pv_conn *conn;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t req_id;
    const void *payload;
    size_t payload_len;
    void *out;                     /* reply payload destination (PAYLOAD_OUT ops) */
    size_t out_cap;
};
void pv_req_begin(struct pv_req *r, struct pv_conn *c, int op, int nargs, int want_reply,
                  const void *payload, size_t payload_len, void *out, size_t out_cap);
/* Sends the request; for a reply request waits for it and fills rep (pv_reply_free after). Returns the
 * cudaError_t of the call (transport failures: PV_ERR_UNAVAILABLE). */
cudaError_t pv_req_finish(struct pv_req *r, struct pv_reply *rep);
void pv_reply_free(struct pv_reply *rep);
/* Connects and performs the handshake; the caller owns *hello (pv_reply_free). NULL + *err on failure. */
struct pv_conn *pv_conn_open(const char *host, int port, int first_gpu, struct pv_reply *hello, cudaError_t *err);
int pv_conn_alive(const struct pv_conn *c);

/* ---- hostmap (hostmap.c): devices ---- */
struct pv_device {
    struct pv_conn *conn;
    int remote;                    /* daemon-local ordinal */
    int index;                     /* global ordinal */
    char name[256];
    unsigned char uuid[16];
    uint64_t total_mem;
    int major, minor, sms, warp, max_tpb, max_block[3], max_grid[3], regs_per_block, clock_khz, mem_clock_khz,
        bus_width, l2, max_tpm, regs_per_sm, max_blocks_per_sm, pci_bus;
    uint64_t smem_per_block, smem_per_sm, const_mem;
    int have_attr[PV_MAX_ATTRS];
    int attr[PV_MAX_ATTRS];
    int flags;                     /* cudaSetDeviceFlags value */
    char pci_id[64];               /* "dddd:bb:dd.f" */
    int cache_config;
};
cudaError_t pv_init(void);                  /* connect to all hosts once; error if none reachable */
int pv_device_count(void);
struct pv_device *pv_device(int index);     /* NULL when out of range */
cudaError_t pv_cur(struct pv_device **out); /* init + current device */
int pv_dev_attr(const struct pv_device *d, int attr, int *value);
const char *pv_token(void);                 /* auth.c */
int pv_hmac_hex(const char *token, const void *nonce, size_t nonce_len, char out[65]);

/* ---- registry (registry.c) ---- */
struct pv_kinfo {
    uint64_t func_id;
    int nparams;
    uint32_t (*params)[2];         /* [offset, size] */
    size_t param_bytes;
    int64_t max_threads, shared, constant, local, regs, ptx, binary;
    /* cudaFuncSetAttribute state of this kernel on this device (start: the module-load attributes; a device
     * reset drops the kinfo, so they return to CUDA's defaults as they do with a new context). */
    _Atomic int64_t max_dyn_shared;   /* cudaFuncAttributeMaxDynamicSharedMemorySize */
    _Atomic int64_t carveout;         /* cudaFuncAttributePreferredSharedMemoryCarveout, -1 = default */
};
struct pv_fatbin;
struct pv_func {
    uint32_t magic;
    struct pv_fatbin *fb;
    const void *host_fun;
    char *name;
    struct pv_kinfo *dev[PV_MAX_DEVICES];
};
struct pv_var {
    struct pv_fatbin *fb;
    const void *host_var;
    char *name;
    size_t size;
    uint64_t addr[PV_MAX_DEVICES];
    int have[PV_MAX_DEVICES];
};
struct pv_func *pv_func_by_host(const void *host_fun);
int pv_func_valid(const struct pv_func *f);
struct pv_var *pv_var_by_host(const void *host_var);
cudaError_t pv_module_ensure(struct pv_fatbin *fb, struct pv_device *d);
void pv_modules_forget_device(int dev);   /* after a device reset */

struct pv_alloc { uint64_t ptr; size_t size; int dev; };
void pv_alloc_add(uint64_t ptr, size_t size, int dev);
int pv_alloc_remove(uint64_t ptr, int *dev);                 /* 0 ok, -1 not an allocation start */
int pv_alloc_find(uint64_t ptr, struct pv_alloc *out);       /* containing allocation; 0 ok */
void pv_alloc_forget_device(int dev);

struct pv_stream { uint32_t magic; int dev; uint64_t remote; unsigned flags; int priority; };
struct pv_event { uint32_t magic; int dev; uint64_t remote; unsigned flags; };
void pv_handle_add(const void *h);
int pv_handle_remove(const void *h);
int pv_handle_valid(const void *h);
/* Resolves a stream for device d: NULL/legacy/per-thread → 0. Returns 0 or cudaErrorInvalidResourceHandle. */
cudaError_t pv_stream_remote(cudaStream_t s, struct pv_device *d, uint64_t *remote, struct pv_device **sdev);

/* ---- memory helpers shared by api files ---- */
cudaError_t pv_memcpy(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int async);

/* Simple request helpers for ops whose args are all unsigned integers. */
cudaError_t pv_call_u64(struct pv_device *d, int op, int want_reply, const uint64_t *args, int nargs,
                        struct pv_reply *rep);

#define PV_STREAM_MAGIC 0x5354524du
#define PV_EVENT_MAGIC 0x45564e54u
#define PV_FUNC_MAGIC 0x46554e43u

#endif
