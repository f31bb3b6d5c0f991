/* The client core (libpvcore.so): what every API library of a process (libvcudart, libvcuda, libvcublas) shares.
 * One connection per host, one device numbering, one table of allocations, streams, events and modules, one
 * error model (cudaError_t numbers on the wire), and the generated per-op senders (ops_gen.h). No CUDA headers are
 * needed: the few CUDA types the core handles are declared here, ABI-compatible with CUDA 13.0's. */
#ifndef PV_CORE_H
#define PV_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <msgpack.h>

#include "protocol_gen.h"

/* Entry points an API library exports (its version script decides under which node). */
#define PV_API __attribute__((visibility("default")))
#define PV_WEAK_API __attribute__((visibility("default"), weak))

/* ---- minimal CUDA types (ABI-compatible with CUDA 13.0; CUstream == cudaStream_t, CUevent == cudaEvent_t) ---- */
typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
typedef struct pv_stream *cudaStream_t;
typedef struct pv_event *cudaEvent_t;

#define PV_SUCCESS 0
#define PV_MAX_DEVICES 64
#define PV_MAX_ATTRS 256

/* ---- logging and per-thread state (state.c) ---- */
void pv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Logs once per flag (the first caller wins); returns 1 when it logged. */
int pv_log_once(atomic_int *once, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pv_tls_device(void);                  /* current device of this thread (0 by default), shared by all APIs */
void pv_tls_set_device(int dev);
unsigned pv_tls_device_gen(void);         /* counts pv_tls_set_device calls of this thread */
/* The owner new allocations, streams and events of this thread are recorded under: the driver's current context
 * when it is a created one, NULL (its device's primary context) otherwise. */
const void *pv_tls_owner(void);
void pv_tls_set_owner(const void *owner);
#define PV_OWNER_DEVICE ((const void *)1) /* device-level memory no context owns (pools, module storage) */
/* Set by a runtime call on this thread (it binds the device's primary context when none is current); the driver
 * clears it when it changes the thread's contexts. */
int pv_tls_runtime_bound(void);
void pv_tls_set_runtime_bound(int bound);
const char *pv_err_name(cudaError_t err);  /* errors.c: "cudaErrorX" or "error N" */
const char *pv_err_text(cudaError_t err);  /* the description, or NULL for an unknown code */

/* config file paths: $XDG_CONFIG_HOME/pyvgpu/NAME (default ~/.config/pyvgpu/NAME); 0 ok (state.c) */
int pv_config_path(const char *name, char *out, size_t cap);

/* ---- io (io.c): one connection's byte stream, plain TCP or TLS over a non-blocking socket ---- */
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

/* ---- wire (wire.c): framing and msgpack helpers ---- */
const msgpack_object *pv_map_get(const msgpack_object *map, const char *key);
const msgpack_object *pv_map_get_int(const msgpack_object *map, int64_t key);
int pv_obj_i64(const msgpack_object *o, int64_t *out);
int pv_obj_u64(const msgpack_object *o, uint64_t *out);
int pv_obj_f64(const msgpack_object *o, double *out);
int pv_obj_bytes(const msgpack_object *o, const char **p, size_t *n);   /* str or bin: its bytes */
int pv_obj_str(const msgpack_object *o, char *out, size_t cap);   /* str or bin → NUL-terminated */
/* Reads u32 + header of at most `limit` bytes; caller frees *raw. 0 ok, -1 I/O error, -2 malformed. */
int pv_read_header(struct pv_io *io, msgpack_unpacked *out, char **raw, uint32_t limit);
void pv_seal_frame(msgpack_sbuffer *sb);                          /* patches the u32 length prefix of a frame */
void pv_pack_bytes(msgpack_packer *pk, const void *data, size_t n);
void pv_pack_str(msgpack_packer *pk, const char *s);
void pv_pack_dim3(msgpack_packer *pk, dim3 v);

/* ---- transport (transport.c): one connection per host ---- */
struct pv_pending;
struct pv_conn {
    char host[256];
    int port;
    struct pv_io io;
    int first_gpu;                 /* pointer window index of this host's device 0 (see pv_conn_open) */
    int ndev;
    atomic_int dead;
    atomic_uint_fast64_t next_id;
    pthread_mutex_t send_mu;       /* one frame at a time on the socket */
    pthread_mutex_t mu;            /* pending list, receiving, detached requests */
    struct pv_pending *pending;
    int receiving;                 /* the reader is reading the payload of a reply someone waits for */
    struct pv_pending *current;    /* ... that reply's request */
    pthread_cond_t detached_cv;    /* a detached request completed, the read role is free, or the connection died */
    int detached_n;                /* detached requests in flight (pv_req_detach) */
    size_t detached_bytes;         /* reply payload bytes they will bring, at most PV_DETACH_WINDOW_BYTES */
    int reading;                   /* a thread holds the read role: it alone reads frames (transport.c) */
    pthread_t reader;
    atomic_int reader_started;
    atomic_int sending;            /* threads inside a send */
    _Atomic int64_t busy_since_ms; /* when the connection last went from idle to waiting/sending */
    int64_t silence_ms;            /* PYVGPU_REPLY_TIMEOUT_MS: a waiting call gives up after this long unheard */
    int64_t ping_ms;               /* PYVGPU_PING_INTERVAL_MS: keepalive when nothing was sent for this long */
    _Atomic int64_t handshake_deadline_ms;   /* nonzero while connecting */
    int codecs;                    /* bit (1 << codec): compression the hello negotiated (compress.c) */
    _Atomic uint64_t peer_rx_rate; /* bytes/s the daemon receives bulk payloads at (its notices); 0: unknown */
    double rx_rate;                /* bytes/s bulk replies arrive at here (the thread holding the read role) */
    double rx_reported;            /* ... as last told to the daemon (LINK_RATE) */
    atomic_int reason_noted;       /* the daemon's reason for refusing a call was logged (once per connection) */
};

struct pv_reply {
    int err;
    msgpack_unpacked msg;          /* owns result */
    char *raw;                     /* header bytes the result may point into */
    const msgpack_object *result;
    int have_msg;
    size_t payload_len;            /* bytes written into the caller's out buffer */
};

/* A request being built. The generated senders (ops_gen.c) are its only users outside transport.c. */
struct pv_req {
    struct pv_conn *conn;
    int op;
    struct pv_device *dev;         /* the device of a device op (set by pv_op_begin), else NULL */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t req_id;
    const void *payload;
    size_t payload_len;
    void *out;                     /* reply payload destination (PAYLOAD_OUT ops) */
    size_t out_cap;
};
/* Starts a request on connection c: header [op, req_id, payload_len] for nargs arguments the caller packs next. */
void pv_req_begin(struct pv_req *r, struct pv_conn *c, int op, int nargs, int want_reply, const void *payload,
                  size_t payload_len, void *out, size_t out_cap);
/* ... its payload compressed by codec (payload_len bytes on the wire, raw_len decoded); codec 0: pv_req_begin. */
void pv_req_begin_z(struct pv_req *r, struct pv_conn *c, int op, int nargs, int want_reply, const void *payload,
                    size_t payload_len, size_t raw_len, int codec, void *out, size_t out_cap);
/* Sends the request; for a reply request waits for it and fills rep (pv_reply_free after; rep may be NULL).
 * Returns the cudaError_t of the call (transport failures: PV_ERR_UNAVAILABLE). */
cudaError_t pv_req_finish(struct pv_req *r, struct pv_reply *rep);
/* pv_req_finish in two halves, so that one thread can keep several requests in flight (a pipelined copy, copy.c):
 * pv_req_start sends a reply request (*out: its handle; not PV_SUCCESS: nothing was sent or kept), and
 * pv_req_collect waits for its reply, fills rep as pv_req_finish does and frees the handle. Every started request
 * must be collected: its reply payload lands in the request's out buffer whenever it arrives. */
struct pv_inflight;
cudaError_t pv_req_start(struct pv_req *r, struct pv_inflight **out);
cudaError_t pv_req_collect(struct pv_inflight *f, struct pv_reply *rep);
void pv_reply_free(struct pv_reply *rep);
/* Sends a request (req_id != 0, out/out_cap its reply payload's destination) without waiting for the reply: the
 * reader thread puts the payload into out when it arrives, before any later reply of the connection is delivered
 * (the daemon answers in order), and frees the request. For ops flagged DETACHED, whose failure the daemon latches
 * for the next synchronizing call. Blocks only while the connection's detached bytes in flight would exceed
 * PV_DETACH_WINDOW_BYTES (or PV_DETACH_MAX requests); the wait is bounded like a reply's. */
#define PV_DETACH_MAX 1024
cudaError_t pv_req_detach(struct pv_req *r);
/* Until no detached request still writes into [p, p+n) (freeing or unregistering host memory). */
void pv_detached_drain(const void *p, size_t n);
/* stats.c: per-op request statistics, printed at exit when PYVGPU_STATS is set (`pyvgpu run --stats`). */
int64_t pv_now_ns(void);
void pv_stats_note(int op, int dev, int calls, uint64_t bytes, int blocked, int64_t ns);
/* An at-exit report (stats, census): stdout flushed, `target` opened for appending (NULL: stderr; failure logged
 * naming env), its first words "pyvgpu TITLE: pid P EXE" written, the line left open. */
FILE *pv_exit_report_open(const char *target, const char *env, const char *title);
void pv_exit_report_close(FILE *f);
/* The call census (census.c, PYVGPU_CENSUS): entry points reached (the API libraries' census_hook.c), answered
 * "not supported" (the stubs' loggers; lib and name are static strings), names and tables asked for that nothing
 * offers. Each is a no-op while the census is off. */
extern int pv_census_on;
void pv_census_enter(void *fn);
void pv_census_unsupported(const char *lib, const char *name);
void pv_census_missing(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pv_census_absent(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* hello.c: the hello's sharing keys (pid, host name, PYVGPU_MEMORY, PYVGPU_WEIGHT, PYVGPU_LEASES). */
struct pv_hello_extra {
    uint64_t pid;
    char hostname[128];
    uint64_t memory;               /* 0: no request */
    double weight;                 /* 0: the default */
    const char *leases;            /* PYVGPU_LEASES (the environment's string), NULL: none */
};
void pv_hello_extra_read(struct pv_hello_extra *x);
int pv_hello_extra_count(const struct pv_hello_extra *x);              /* map entries pv_hello_extra_pack adds */
void pv_hello_extra_pack(msgpack_packer *pk, const struct pv_hello_extra *x);
/* Connects and performs the handshake; the caller owns *hello (pv_reply_free). NULL + *err on failure.
 * first_gpu: the index of the pointer window of the daemon's device 0 (va_base = (first_gpu + 1) * window). */
struct pv_conn *pv_conn_open(const char *host, int port, int first_gpu, struct pv_reply *hello, cudaError_t *err);
/* The pointer window of the connection's device 0 (the hello's va_base): (first_gpu + 1) windows, moved up by
 * PYVGPU_VA_BASE (the first host's va_base, a multiple of the window; for a client that must leave the first
 * windows free, e.g. a cuda backend daemon running on libvcuda: docs/architecture.md, "The chain"). */
uint64_t pv_conn_va_base(const struct pv_conn *c);
int pv_conn_alive(const struct pv_conn *c);

/* ---- compression of bulk payloads (compress.c; pyvgpu/protocol.py "Compressed payloads") ---- */
int pv_compress_offer(void);                          /* bit (1 << codec) per codec this process can use */
int pv_compress_offer_to(int fd);                     /* ... to the daemon at the other end of fd */
int pv_compress_hello_count(int offer);               /* hello map entries pv_compress_hello_pack adds */
void pv_compress_hello_pack(msgpack_packer *pk, int offer);
int pv_compress_accepted(const msgpack_object *hello_result);    /* codecs the daemon accepted (a mask) */
/* The codec to send n bytes of data with (0: uncompressed), by PYVGPU_COMPRESS and the policy of compress.c. */
int pv_compress_choose(int negotiated, uint64_t link_bps, const void *data, size_t n);
size_t pv_compress_bound(size_t n);                   /* wire bytes n raw bytes may take, block headers included */
/* n bytes → blocks of the wire format in dst (cap bytes); the wire size, 0 when cap is too small. */
size_t pv_compress_encode(int codec, const void *src, size_t n, void *dst, size_t cap);
/* A block header (8 bytes) of a payload with `left` raw bytes still to come: 0 and its lengths when well formed. */
int pv_compress_block_header(const unsigned char hdr[8], size_t left, size_t *clen, size_t *rlen);
int pv_decompress_block(int codec, const void *src, size_t clen, void *dst, size_t rlen);   /* 0: exactly rlen */

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
    uint64_t peers;                /* bit r: kernels here can use the memory of this daemon's device r (snapshot) */
    uint64_t vmm_granularity;      /* virtual memory management's granularity (snapshot; 0: not offered) */
    _Atomic unsigned reset_gen;    /* device resets so far: what a library kept of the device before one is gone */
    _Atomic int refused;           /* a refused module's kernel was used: every synchronization reports it */
    _Atomic uint64_t sent;         /* requests begun to this device (request.c) */
    _Atomic uint64_t quiet_at;     /* `sent` when a blocking copy on stream quiet_stream finished with no other
                                      request begun meanwhile: that stream had no work left (copy.c, streams.c) */
    _Atomic uint64_t quiet_stream;
};
cudaError_t pv_init(void);                  /* connect to all hosts once; error if none reachable */
int pv_initialized(void);                   /* pv_init has succeeded (no side effect) */
int pv_device_count(void);
struct pv_device *pv_device(int index);     /* NULL when out of range */
cudaError_t pv_cur(struct pv_device **out); /* init + current device */
int pv_dev_attr(const struct pv_device *d, int attr, int *value);
/* cudaDeviceGetAttribute's answer (CU_DEVICE_ATTRIBUTE_* has the same numbers): invalid attribute →
 * cudaErrorInvalidValue; a valid one the snapshot lacks → 0 (logged once when log_missing). */
cudaError_t pv_device_attribute(const struct pv_device *d, int attr, int *value, int log_missing);
/* usage.c: a device's figures from its daemon's STATUS (every session's use, not only this process's). */
struct pv_usage { uint64_t used, total, free; double busy; /* share of the last second it ran work, 0..1 */ };
cudaError_t pv_device_usage(struct pv_device *d, struct pv_usage *out);
const char *pv_token(void);                 /* auth.c */
int pv_hmac_hex(const char *token, const void *nonce, size_t nonce_len, char out[65]);

/* ---- requests to a device: the generated senders and what they are built from ---- */
/* Starts a request of op to device d: nargs counts every wire argument (the device ordinal included; the caller
 * packs the rest). PV_ERR_UNAVAILABLE when d's connection is gone. */
cudaError_t pv_op_begin(struct pv_req *r, struct pv_device *d, int op, int nargs, int want_reply,
                        const void *payload, size_t payload_len, void *out, size_t out_cap);
/* ... with a payload compressed by codec (payload_len bytes on the wire, raw_len once decoded); codec 0: plain. */
cudaError_t pv_op_begin_z(struct pv_req *r, struct pv_device *d, int op, int nargs, int want_reply,
                          const void *payload, size_t payload_len, size_t raw_len, int codec, void *out,
                          size_t out_cap);
cudaError_t pv_conn_status(struct pv_conn *c, struct pv_reply *rep);  /* STATUS (request.c); caller frees rep */
/* Decode a reply's result into *out when err is PV_SUCCESS; free rep; a malformed result is logged and becomes
 * cudaErrorUnknown. They return the call's error. */
cudaError_t pv_reply_u64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t *out);
cudaError_t pv_reply_i64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, int64_t *out);
cudaError_t pv_reply_f64(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, double *out);
cudaError_t pv_reply_u64x2(struct pv_device *d, int op, cudaError_t err, struct pv_reply *rep, uint64_t out[2]);
/* Sends a fire-and-forget request, or appends it to this thread's recorder when one is active (record.c). */
cudaError_t pv_req_send(struct pv_req *r);
#include "ops_gen.h"

/* ---- recorder (record.c): fire-and-forget requests captured as frames instead of being sent (graphs) ---- */
struct pv_frames {                 /* the recorded frames of one device, in order */
    struct pv_device *dev;
    char *data;                    /* u32 length | header | payload, repeated */
    size_t len, cap;
    size_t count;
};
struct pv_recorder {
    struct pv_frames *per_dev;     /* one entry per device that received a frame */
    int ndev, capdev;
    cudaError_t err;               /* first failure while recording (out of memory) */
};
/* While a recorder is active on this thread every pv_send_* appends its frame to it (nothing is sent);
 * pv_call_* requests still go out. Recording does not nest. */
void pv_record_begin(struct pv_recorder *rec);
void pv_record_end(void);
int pv_recording(void);
void pv_recorder_free(struct pv_recorder *rec);
struct pv_recorder *pv_record_pause(void);   /* sends go out again until pv_record_resume(the returned recorder) */
void pv_record_resume(struct pv_recorder *rec);

/* ---- coherence (coherence.c): host copies of managed and mapped memory (model at the top of coherence.c) ---- */
enum { PV_REGION_MANAGED = 1, PV_REGION_MAPPED = 2, PV_REGION_VAR = 3, PV_REGION_REGISTERED = 4 };
struct pv_region_info {
    uint64_t host;                 /* where the host copy is (== dev except for registered host memory) */
    uint64_t dev;                  /* the device address */
    size_t size;
    int device;                    /* global index of the device holding it */
    int kind;                      /* PV_REGION_* */
};
size_t pv_page_size(void);
/* A managed or mapped allocation of `size` bytes (rounded up to pages) on d, its host copy mapped at its address. */
cudaError_t pv_region_alloc(struct pv_device *d, size_t size, int kind, struct pv_region_info *out);
/* A device copy on d of the program's memory [host, host+size), kept coherent (cudaHostRegisterMapped). */
cudaError_t pv_region_register(struct pv_device *d, void *host, size_t size, struct pv_region_info *out);
/* A __managed__ variable's storage on d, mirrored at its own address. */
cudaError_t pv_region_attach(struct pv_device *d, uint64_t dev, size_t size, struct pv_region_info *out);
cudaError_t pv_region_free(uint64_t host);          /* by host address; frees the device copy it owns */
int pv_region_find(const void *p, struct pv_region_info *out);   /* host or device address inside a region; 0 ok */
int pv_coherence_pending(void);                     /* the host has written pages not pushed yet */
cudaError_t pv_coherence_flush(struct pv_device *target);        /* push them (before work goes to target) */
/* After a synchronizing op on d answered err: brings the host copies up to date; → err, or the sticky conflict error
 * when the host and the device changed the same bytes (docs/architecture.md, the coherence model). */
cudaError_t pv_coherence_after_sync(struct pv_device *d, cudaError_t err);
/* refusal.c: one line on why d refused a module image (SASS only on the emulated GPU: once per library, named by
 * origin, an address inside the library that held the image). */
void pv_explain_refusal(const void *image, size_t size, const void *origin, struct pv_device *d, cudaError_t err);
void pv_coherence_forget_device(int device);        /* cudaDeviceReset: its regions are gone */

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
    void *api_handle[PV_MAX_DEVICES];   /* an API library's handle for the kernel on a device (libvcuda's CUfunction) */
};
struct pv_var {
    struct pv_fatbin *fb;
    const void *host_var;
    char *name;
    size_t size;
    uint64_t addr[PV_MAX_DEVICES];
    int have[PV_MAX_DEVICES];
    uint64_t managed_host;         /* a __managed__ variable: its host mirror once bound (managed.c), else 0 */
};
/* A module image (fatbin container or PTX) loaded lazily on each device at first use. */
struct pv_fatbin *pv_fatbin_register(const void *wrapper);       /* from a fatbin wrapper; NULL when out of memory */
size_t pv_image_size(const void *image);   /* wrapper, fatbin container, ELF cubin or PTX; 0: not recognised */
/* A module from an image (any pv_image_size form); copy: keep a private copy (the caller may free its own).
 * NULL when the image is not recognised or memory runs out. */
struct pv_fatbin *pv_fatbin_from_image(const void *image, int copy);
/* fb's kernel / variable by name (after a load: every kernel and variable of the module), or NULL. */
struct pv_func *pv_fatbin_func(struct pv_fatbin *fb, const char *name);
struct pv_var *pv_fatbin_var(struct pv_fatbin *fb, const char *name);
struct pv_func *pv_fatbin_func_at(struct pv_fatbin *fb, int i);   /* the i-th kernel, NULL past the end */
/* Unloads fb from every device (MODULE_UNLOAD); its functions stop being valid handles. */
void pv_fatbin_unload(struct pv_fatbin *fb);
struct pv_func *pv_fatbin_add_func(struct pv_fatbin *fb, const void *host_fun, const char *name);
struct pv_var *pv_fatbin_add_var(struct pv_fatbin *fb, const void *host_var, const char *name, size_t size);
struct pv_func *pv_func_by_host(const void *host_fun);
int pv_func_valid(const struct pv_func *f);
struct pv_var *pv_var_by_host(const void *host_var);
/* fb loaded on d (MODULE_LOAD at first use). A refusal is latched in fb and returned again at every use; used by
 * pv_module_ensure, it is also latched on d (pv_refusal_latch), since the call that meets it (a launch, a lazily
 * loaded library's kernel lookup) may be one whose error the program ignores. pv_module_load_now is the explicit
 * load (cuModuleLoadData & co.), whose caller gets the refusal directly. */
cudaError_t pv_module_ensure(struct pv_fatbin *fb, struct pv_device *d);
cudaError_t pv_module_load_now(struct pv_fatbin *fb, struct pv_device *d);
/* refusal.c: a kernel of a module the daemon refused was used on d; every later synchronizing call on d answers
 * with err instead of success (sticky until a device reset), so no program reads, as a result, memory that no
 * kernel wrote. */
void pv_refusal_latch(struct pv_device *d, cudaError_t err);
cudaError_t pv_sync_result(struct pv_device *d, cudaError_t err);   /* after a SYNC_POINTS op answered err */
void pv_modules_forget_device(int dev);   /* after a device reset */

struct pv_alloc { uint64_t ptr; size_t size; int dev; const void *owner; };
/* The owner of mappings made by virtual memory management (libvcuda's cuMemMap): no context owns them, and
 * cudaFree/cuMemFree refuse them (they are unmapped, not freed). */
#define PV_OWNER_VMM ((const void *)&pv_owner_vmm)
extern const char pv_owner_vmm;
void pv_alloc_add(uint64_t ptr, size_t size, int dev);                 /* owned by pv_tls_owner() */
void pv_alloc_add_owned(uint64_t ptr, size_t size, int dev, const void *owner);
/* The starts of the allocations of `owner` on device dev (host memory too when with_host), malloc'd into *out. */
size_t pv_alloc_owned(const void *owner, int dev, int with_host, uint64_t **out);
int pv_alloc_remove(uint64_t ptr, int *dev);                 /* 0 ok, -1 not an allocation start */
int pv_alloc_find(uint64_t ptr, struct pv_alloc *out);       /* containing allocation; 0 ok */
void pv_alloc_forget_device(int dev);
/* Pinned host memory (PV_HOST_ALIGN-aligned, recorded in the allocation table as host memory). */
#define PV_HOST_ALIGN 4096
cudaError_t pv_host_alloc(size_t size, unsigned flags, void **out);
/* hostmem.c: [p, p+size) is pinned memory (launches look for it in parameters); whether [p, p+n) is registered
 * memory (cudaHostRegister; *flags its flags, when asked); a launch's parameter words naming pinned memory become
 * its device copy's addresses (dry: only count them in *hits). */
void pv_host_pinned_note(uint64_t p, size_t size);
int pv_host_registered(const void *p, size_t n, unsigned *flags);
cudaError_t pv_host_translate(struct pv_device *d, const struct pv_kinfo *ki, char *buf, int dry, int *hits);
cudaError_t pv_host_free(void *ptr);                      /* cudaErrorInvalidValue unless from pv_host_alloc */
cudaError_t pv_host_flags(const void *ptr, unsigned *flags);

struct pv_stream { uint32_t magic; int dev; uint64_t remote; unsigned flags; int priority; const void *owner; };
#define PV_EVENT_DISABLE_TIMING 2u   /* cudaEventDisableTiming: no times kept or reported */
struct pv_event {
    uint32_t magic; int dev; uint64_t remote; unsigned flags; const void *owner;
    /* Times the daemon reported (streams.c; under its lock): the event's time on the device's clock after its
     * `known`-th record; valid for cudaEventElapsedTime while no later record was sent (known == sent). */
    uint64_t sent, known;
    double t_ms;
};
void pv_handle_add(const void *h);
int pv_handle_remove(const void *h);
int pv_handle_valid(const void *h);
/* The one stream resolver. A stream argument is NULL or a default-stream sentinel (cudaStreamLegacy = 1,
 * cudaStreamPerThread = 2: the daemon serializes a device's work, so all mean its default stream) or a live stream
 * handle; anything else is cudaErrorInvalidResourceHandle. On success *remote is the daemon handle (0 for the
 * default stream) and *sdev the stream's device (d for the default stream; d may be NULL when the caller only
 * validates). */
cudaError_t pv_stream_resolve(cudaStream_t s, struct pv_device *d, uint64_t *remote, struct pv_device **sdev);
/* 1 when s is a default-stream sentinel or a live stream handle. */
int pv_stream_ok(cudaStream_t s);

/* ---- copies and memsets (copy.c) ---- */
enum { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
/* Transfers with the devices already known (fire-and-forget except device-to-host; d2d between two GPUs is staged
 * through this process, in order with the calling thread). */
cudaError_t pv_copy_h2d(struct pv_device *d, uint64_t dst, const void *src, size_t n, uint64_t stream);
cudaError_t pv_copy_d2h(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream);
/* Device-to-host without waiting (detached requests): dst must stay valid until a synchronization covers the copy. */
cudaError_t pv_copy_d2h_async(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream);
cudaError_t pv_copy_d2d(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n,
                        uint64_t stream);
/* Pitched 2D copies (width bytes per row, height rows); HtoD is sent fire-and-forget, DtoH waits for the rows. */
cudaError_t pv_h2d_2d(struct pv_device *d, uint64_t dst, size_t dpitch, const char *src, size_t spitch,
                      size_t width, size_t height, uint64_t stream);
cudaError_t pv_d2h_2d(struct pv_device *d, char *dst, size_t dpitch, uint64_t src, size_t spitch, size_t width,
                      size_t height, uint64_t stream);
/* 0 and *d = the device whose allocation holds [p, p+n), -1 when no single allocation does. */
int pv_dev_range(const void *p, size_t n, struct pv_device **d);
int pv_is_device_ptr(const void *p);
uint64_t pv_stream_for(cudaStream_t s, struct pv_device *d);       /* daemon handle of s on d (0: default) */
cudaError_t pv_init_with_stream(cudaStream_t s);                   /* initialized, and s is a valid stream */
/* A copy by cudaMemcpyKind (cudaMemcpyDefault: by where the pointers live); async: cudaMemcpyAsync semantics (a
 * device-to-host copy into pinned memory returns before the bytes are there). */
cudaError_t pv_memcpy(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int async);
cudaError_t pv_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                        int kind, cudaStream_t s);
/* copy_features.c: between two GPUs (daemon to daemon, or by their daemon); copies touching managed or mapped
 * memory (1 when handled, result in *err). */
cudaError_t pv_copy_d2d_gpus(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n);
int pv_copy_regions(void *dst, const void *src, size_t n, cudaStream_t s, cudaError_t *err);
int pv_copy2d_regions(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                      int kind, cudaStream_t s, cudaError_t *err);
/* Sets width elements of elem bytes (1, 2, 4) to value in height rows pitch bytes apart. */
cudaError_t pv_memset(void *ptr, size_t pitch, uint32_t value, int elem, size_t width, size_t height, cudaStream_t s);

/* ---- launches (launch.c) ---- */
/* Kernel info of f on device d, loading its module there on first use. */
cudaError_t pv_kinfo_get(struct pv_func *f, struct pv_device *d, struct pv_kinfo **out);
/* Launches f on d after CUDA's configuration checks: args holds one pointer per parameter, or packed (when not
 * NULL) is the parameter buffer already laid out (at least the layout's size). Fire-and-forget. cooperative: every
 * block resident at once (LAUNCH_COOPERATIVE), checked against the occupancy first (pv_cooperative_check). */
cudaError_t pv_launch(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, uint64_t stream,
                      void **args, const void *packed, size_t packed_len, int cooperative);
/* CUDA's rule for a cooperative launch: at most the occupancy's blocks per multiprocessor on every multiprocessor
 * of d (cudaErrorCooperativeLaunchTooLarge). */
cudaError_t pv_cooperative_check(const struct pv_device *d, const struct pv_kinfo *ki, dim3 grid, dim3 block,
                                 size_t shmem);
/* pv_launch's checks, then the parameter buffer it would send (malloc'd, *len bytes) instead of sending it. */
cudaError_t pv_launch_pack(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, void **args,
                           const void *packed, size_t packed_len, char **buf, size_t *len);
/* The packed parameter buffer cuLaunchKernel's `extra` names (CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE, both
 * needed; anything else is cudaErrorInvalidValue). */
cudaError_t pv_launch_extra(void **extra, const void **buf, size_t *len);
int64_t pv_smem_optin(const struct pv_device *d);   /* largest static + dynamic shared memory of a block */
int pv_occupancy(const struct pv_device *d, const struct pv_kinfo *ki, int block, size_t dyn);
/* Sets a function attribute of ki on d (validated, recorded, sent fire-and-forget as FUNC_SET_ATTR). */
cudaError_t pv_func_set_attr(struct pv_device *d, struct pv_kinfo *ki, int attr, int value);

/* ---- streams and events (streams.c); new ones belong to the thread's current device ---- */
/* Device and daemon handle a stream argument refers to (the default streams: the current device's). */
cudaError_t pv_stream_target(cudaStream_t s, struct pv_device **d, uint64_t *remote);
cudaError_t pv_stream_create(unsigned flags, int priority, cudaStream_t *out);
cudaError_t pv_stream_destroy(cudaStream_t s);
cudaError_t pv_stream_sync(cudaStream_t s);
cudaError_t pv_stream_query(cudaStream_t s);                       /* cudaErrorNotReady while busy */
cudaError_t pv_stream_props(cudaStream_t s, unsigned *flags, int *priority);
cudaError_t pv_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t pv_stream_id(cudaStream_t s, unsigned long long *id);
int pv_event_ok(cudaEvent_t e);                                   /* a live event handle */
cudaError_t pv_event_create(unsigned flags, cudaEvent_t *out);
cudaError_t pv_event_destroy(cudaEvent_t e);
cudaError_t pv_event_record(cudaEvent_t e, cudaStream_t s);
cudaError_t pv_event_sync(cudaEvent_t e);
cudaError_t pv_event_query(cudaEvent_t e);                         /* cudaErrorNotReady while pending */
cudaError_t pv_event_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end);
/* A reply's event times (protocol v3, the reply header's sixth field: [handle, records, ms, ...] of events of d
 * whose latest record completed); called by the reader before the caller wakes. */
void pv_event_times_apply(struct pv_device *d, const msgpack_object *times);
/* Destroys the streams and events `owner` made on device dev. */
void pv_streams_release(const void *owner, int dev);
/* Whether `owner` holds allocations, streams or events on device dev. */
int pv_owner_holds(const void *owner, int dev);

#define PV_STREAM_MAGIC 0x5354524du
#define PV_EVENT_MAGIC 0x45564e54u
#define PV_FUNC_MAGIC 0x46554e43u

#endif
