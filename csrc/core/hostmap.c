/* The host map: PYVGPU_HOSTS=host[:port][/ordinal],... or the hosts file ($XDG_CONFIG_HOME/pyvgpu/hosts, one entry
 * per line, '#' comments), the syntax of pyvgpu/hostmap.py. An entry without /ordinal stands for all of the host's
 * devices, with /ordinal for that one device; a host may appear several times with different ordinals. Each daemon
 * is contacted once (one connection, in order of first appearance); GPUs are numbered in entry order, then by each
 * host's device ordinal, from the device snapshots of the HELLO reply. `auto` entries are resolved by `pyvgpu run`
 * (placement); met here, they are skipped with a note. */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_hostmap.h"

#define PV_MAX_HOSTS 32

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static atomic_int init_done;                     /* pv_init succeeded (by any library of the process) */
static cudaError_t init_err;
static int ndevices;
static struct pv_device devices[PV_MAX_DEVICES];

struct host_entry {
    char host[256];
    int port;
    int device;                   /* daemon-local ordinal, -1: every device of the host */
    int conn;                     /* index of the host's connection (do_init) */
};
static atomic_int auto_noted;

static int parse_port(const char *text, int *port)
{
    char *end;
    if (!*text)
        return -1;
    long p = strtol(text, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return -1;
    *port = (int)p;
    return 0;
}

/* "/N" at the end of an entry: the device ordinal (cut off s); -1 when absent; -2 malformed. */
static int parse_device_sel(char *s)
{
    char *sep = strstr(s, PV_KEY_HOSTMAP_DEVICE_SEP);
    if (!sep)
        return -1;
    *sep = 0;
    char *num = sep + strlen(PV_KEY_HOSTMAP_DEVICE_SEP), *end;
    if (!isdigit((unsigned char)*num))
        return -2;
    long v = strtol(num, &end, 10);
    return (*end || v < 0 || v >= PV_MAX_DEVICES) ? -2 : (int)v;
}

/* host, host:port, [v6] or [v6]:port, each with an optional /ordinal (the syntax of pyvgpu/hostmap.py).
 * 1 parsed, 0 blank or an `auto` entry, -1 malformed. */
static int parse_entry(const char *text, struct host_entry *e)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    char *s = buf;
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    if (!*s)
        return 0;
    size_t alen = strlen(PV_KEY_HOSTMAP_AUTO);
    if (strncasecmp(s, PV_KEY_HOSTMAP_AUTO, alen) == 0 && (s[alen] == 0 || s[alen] == ':')) {
        pv_log_once(&auto_noted, "host map entry '%s' is resolved by `pyvgpu run` (GPU placement); using the "
                    "other entries", s);
        return 0;
    }
    e->device = parse_device_sel(s);
    if (e->device == -2)
        return -1;
    e->port = PV_DEFAULT_PORT;
    if (s[0] == '[') {
        char *close = strchr(s, ']');
        if (!close || close == s + 1)
            return -1;
        *close = 0;
        if (close[1] && (close[1] != ':' || parse_port(close + 2, &e->port) != 0))
            return -1;
        snprintf(e->host, sizeof e->host, "%s", s + 1);
        return 1;
    }
    char *colon = strchr(s, ':');
    if (colon && strchr(colon + 1, ':'))
        return -1;   /* a bare IPv6 address is ambiguous: it must be written in brackets */
    if (colon) {
        *colon = 0;
        if (parse_port(colon + 1, &e->port) != 0 || !*s)
            return -1;
    }
    snprintf(e->host, sizeof e->host, "%s", s);
    return 1;
}

static int same_host(const struct host_entry *a, const struct host_entry *b)
{
    return a->port == b->port && strcasecmp(a->host, b->host) == 0;
}

static int add_entry(struct host_entry *out, int n, const struct host_entry *e, const char *where)
{
    for (int i = 0; i < n; i++)
        if (same_host(&out[i], e) && (out[i].device < 0 || e->device < 0 || out[i].device == e->device)) {
            pv_log("ignoring duplicate host %s:%d in %s", e->host, e->port, where);
            return n;
        }
    out[n] = *e;
    return n + 1;
}

static int read_hosts(struct host_entry *out, int cap)
{
    int n = 0;
    const char *env = getenv("PYVGPU_HOSTS");
    if (env && *env) {
        char *dup = strdup(env), *save = NULL;
        if (!dup)
            return 0;
        for (char *tok = strtok_r(dup, ",", &save); tok && n < cap; tok = strtok_r(NULL, ",", &save)) {
            struct host_entry e;
            int rc = parse_entry(tok, &e);
            if (rc < 0)
                pv_log("ignoring malformed PYVGPU_HOSTS entry '%s'", tok);
            else if (rc > 0)
                n = add_entry(out, n, &e, "PYVGPU_HOSTS");
        }
        free(dup);
        return n;
    }
    char path[4096];
    if (pv_config_path("hosts", path, sizeof path) != 0)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    while (n < cap && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        struct host_entry e;
        line[strcspn(line, "\r\n")] = 0;
        int rc = parse_entry(line, &e);
        if (rc < 0)
            pv_log("ignoring malformed line in %s: %s", path, line);
        else if (rc > 0)
            n = add_entry(out, n, &e, path);
    }
    fclose(f);
    return n;
}

static int64_t get_i64(const msgpack_object *m, const char *key, int64_t dflt)
{
    int64_t v;
    return pv_obj_i64(pv_map_get(m, key), &v) == 0 && v >= 0 ? v : dflt;
}

static void get_dim3(const msgpack_object *m, const char *key, int out[3], int dflt)
{
    const msgpack_object *a = pv_map_get(m, key);
    for (int i = 0; i < 3; i++) {
        int64_t v;
        out[i] = (a && a->type == MSGPACK_OBJECT_ARRAY && a->via.array.size > (uint32_t)i &&
                  pv_obj_i64(&a->via.array.ptr[i], &v) == 0) ? (int)v : dflt;
    }
}

static void set_default_attr(struct pv_device *d, int attr, int value)
{
    if (attr >= 0 && attr < PV_MAX_ATTRS && !d->have_attr[attr]) {
        d->have_attr[attr] = 1;
        d->attr[attr] = value;
    }
}

/* The scalar fields of a device snapshot: where each lands in struct pv_device, its default when the daemon omits
 * it, and the cudaDeviceAttr it also answers when the daemon's attribute table lacks that attribute (0: none). */
struct snapshot_field {
    const char *key;
    size_t offset;
    int is_u64;              /* uint64_t field, else int */
    int64_t dflt;
    int attr;
};
#define INT_FIELD(key, field, dflt, attr) { key, offsetof(struct pv_device, field), 0, dflt, attr }
#define U64_FIELD(key, field, dflt, attr) { key, offsetof(struct pv_device, field), 1, dflt, attr }
static const struct snapshot_field snapshot_fields[] = {
    U64_FIELD(PV_KEY_DEV_TOTAL_MEM, total_mem, 0, 0),
    INT_FIELD(PV_KEY_DEV_MAJOR, major, 7, PV_cudaDevAttrComputeCapabilityMajor),
    INT_FIELD(PV_KEY_DEV_MINOR, minor, 5, PV_cudaDevAttrComputeCapabilityMinor),
    INT_FIELD(PV_KEY_DEV_MULTIPROCESSORS, sms, 1, PV_cudaDevAttrMultiProcessorCount),
    INT_FIELD(PV_KEY_DEV_WARP_SIZE, warp, 32, PV_cudaDevAttrWarpSize),
    INT_FIELD(PV_KEY_DEV_MAX_THREADS_PER_BLOCK, max_tpb, 1024, PV_cudaDevAttrMaxThreadsPerBlock),
    U64_FIELD(PV_KEY_DEV_SHARED_MEM_PER_BLOCK, smem_per_block, 49152, PV_cudaDevAttrMaxSharedMemoryPerBlock),
    U64_FIELD(PV_KEY_DEV_SHARED_MEM_PER_MULTIPROCESSOR, smem_per_sm, 65536,
              PV_cudaDevAttrMaxSharedMemoryPerMultiprocessor),
    INT_FIELD(PV_KEY_DEV_REGS_PER_BLOCK, regs_per_block, 65536, PV_cudaDevAttrMaxRegistersPerBlock),
    INT_FIELD(PV_KEY_DEV_CLOCK_RATE_KHZ, clock_khz, 1000000, PV_cudaDevAttrClockRate),
    INT_FIELD(PV_KEY_DEV_MEMORY_CLOCK_RATE_KHZ, mem_clock_khz, 1000000, PV_cudaDevAttrMemoryClockRate),
    INT_FIELD(PV_KEY_DEV_MEMORY_BUS_WIDTH, bus_width, 256, PV_cudaDevAttrGlobalMemoryBusWidth),
    INT_FIELD(PV_KEY_DEV_L2_CACHE_SIZE, l2, 0, PV_cudaDevAttrL2CacheSize),
    INT_FIELD(PV_KEY_DEV_MAX_THREADS_PER_MULTIPROCESSOR, max_tpm, 2048, PV_cudaDevAttrMaxThreadsPerMultiProcessor),
    U64_FIELD(PV_KEY_DEV_TOTAL_CONST_MEM, const_mem, 65536, PV_cudaDevAttrTotalConstantMemory),
    U64_FIELD(PV_KEY_DEV_VMM_GRANULARITY, vmm_granularity, 0, 0),
};

static void parse_scalars(struct pv_device *d, const msgpack_object *s)
{
    for (size_t i = 0; i < sizeof snapshot_fields / sizeof snapshot_fields[0]; i++) {
        const struct snapshot_field *f = &snapshot_fields[i];
        int64_t v = get_i64(s, f->key, f->dflt);
        if (f->is_u64) {
            uint64_t u = (uint64_t)v;
            memcpy((char *)d + f->offset, &u, sizeof u);
        } else {
            int n = (int)v;
            memcpy((char *)d + f->offset, &n, sizeof n);
        }
    }
}

/* The table's attributes, and the few derived ones, for a daemon whose attribute table lacks them. */
static void default_attrs(struct pv_device *d)
{
    for (size_t i = 0; i < sizeof snapshot_fields / sizeof snapshot_fields[0]; i++) {
        const struct snapshot_field *f = &snapshot_fields[i];
        int64_t v;
        if (!f->attr)
            continue;
        if (f->is_u64) {
            uint64_t u;
            memcpy(&u, (const char *)d + f->offset, sizeof u);
            v = (int64_t)u;
        } else {
            int n;
            memcpy(&n, (const char *)d + f->offset, sizeof n);
            v = n;
        }
        set_default_attr(d, f->attr, (int)v);
    }
    for (int i = 0; i < 3; i++) {
        set_default_attr(d, PV_cudaDevAttrMaxBlockDimX + i, d->max_block[i]);
        set_default_attr(d, PV_cudaDevAttrMaxGridDimX + i, d->max_grid[i]);
    }
    set_default_attr(d, PV_cudaDevAttrPciBusId, d->pci_bus);
    set_default_attr(d, PV_cudaDevAttrUnifiedAddressing, 1);
    set_default_attr(d, PV_cudaDevAttrMaxRegistersPerMultiprocessor, d->regs_per_block);
    set_default_attr(d, PV_cudaDevAttrMaxSharedMemoryPerBlockOptin, (int)d->smem_per_block);
    set_default_attr(d, PV_cudaDevAttrMaxBlocksPerMultiprocessor, 16);
}

static void parse_device(struct pv_device *d, const msgpack_object *s)
{
    if (pv_obj_str(pv_map_get(s, PV_KEY_DEV_NAME), d->name, sizeof d->name) != 0)
        snprintf(d->name, sizeof d->name, "pyvgpu device");
    parse_scalars(d, s);
    get_dim3(s, PV_KEY_DEV_MAX_BLOCK_DIM, d->max_block, 0);
    if (!d->max_block[0]) {
        d->max_block[0] = d->max_block[1] = 1024;
        d->max_block[2] = 64;
    }
    get_dim3(s, PV_KEY_DEV_MAX_GRID_DIM, d->max_grid, 0);
    if (!d->max_grid[0]) {
        d->max_grid[0] = 2147483647;
        d->max_grid[1] = d->max_grid[2] = 65535;
    }
    d->pci_bus = (int)get_i64(s, PV_KEY_DEV_PCI_BUS_ID, d->index);
    char pci[64];
    unsigned dom, bus, slot, fn;
    if (pv_obj_str(pv_map_get(s, PV_KEY_DEV_PCI_BUS_ID), pci, sizeof pci) == 0 &&
        sscanf(pci, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) == 4)
        d->pci_bus = (int)bus;
    snprintf(d->pci_id, sizeof d->pci_id, "0000:%02x:00.0", (unsigned)d->pci_bus & 0xffu);
    if (pv_obj_str(pv_map_get(s, PV_KEY_DEV_PCI_BUS_ID), pci, sizeof pci) == 0 && strchr(pci, ':'))
        snprintf(d->pci_id, sizeof d->pci_id, "%s", pci);
    const msgpack_object *u = pv_map_get(s, PV_KEY_DEV_UUID);
    if (u && u->type == MSGPACK_OBJECT_BIN && u->via.bin.size == 16)
        memcpy(d->uuid, u->via.bin.ptr, 16);
    const msgpack_object *peers = pv_map_get(s, PV_KEY_DEV_PEERS);
    for (uint32_t i = 0; peers && peers->type == MSGPACK_OBJECT_ARRAY && i < peers->via.array.size; i++) {
        int64_t r;
        if (pv_obj_i64(&peers->via.array.ptr[i], &r) == 0 && r >= 0 && r < 64)
            d->peers |= 1ull << r;
    }
    const msgpack_object *attrs = pv_map_get(s, PV_KEY_DEV_ATTRS);
    if (attrs && attrs->type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < attrs->via.map.size; i++) {
            int64_t k, v;
            if (pv_obj_i64(&attrs->via.map.ptr[i].key, &k) == 0 && pv_obj_i64(&attrs->via.map.ptr[i].val, &v) == 0 &&
                k >= 0 && k < PV_MAX_ATTRS) {
                d->have_attr[k] = 1;
                d->attr[k] = (int)v;
            }
        }
    }
    /* the named snapshot fields answer the common attributes when the daemon's table lacks them */
    default_attrs(d);
    /* what pyvgpu provides between hosts, whatever the GPU (a real one may say it can read pageable memory) */
    for (int i = 0; i < PV_REMOTED_DEV_ATTRS_LEN; i++) {
        d->have_attr[pv_remoted_dev_attrs[i][0]] = 1;
        d->attr[pv_remoted_dev_attrs[i][0]] = pv_remoted_dev_attrs[i][1];
    }
    d->regs_per_sm = d->attr[PV_cudaDevAttrMaxRegistersPerMultiprocessor];
    d->max_blocks_per_sm = d->attr[PV_cudaDevAttrMaxBlocksPerMultiprocessor];
}

/* One connection per distinct daemon, in order of first appearance. Each session's pointer windows start after those
 * of the daemons before it (all their devices, selected or not), so pointers never collide. → connections opened. */
static int open_hosts(struct host_entry *hosts, int nh, struct pv_conn **conns, struct pv_reply *hellos,
                      cudaError_t *first_err)
{
    int nconn = 0, window = 0;
    for (int h = 0; h < nh; h++) {
        int k = 0;
        while (k < h && !same_host(&hosts[k], &hosts[h]))
            k++;
        if (k < h) {
            hosts[h].conn = hosts[k].conn;
            continue;
        }
        hosts[h].conn = nconn;
        cudaError_t err;
        conns[nconn] = pv_conn_open(hosts[h].host, hosts[h].port, window, &hellos[nconn], &err);
        if (!conns[nconn]) {
            if (*first_err == PV_SUCCESS)
                *first_err = err;
        } else {
            const msgpack_object *devs = pv_map_get(hellos[nconn].result, PV_KEY_HELLO_REPLY_DEVICES);
            window += (devs && devs->type == MSGPACK_OBJECT_ARRAY) ? (int)devs->via.array.size : 0;
        }
        nconn++;
    }
    return nconn;
}

static void add_device(struct pv_conn *c, const msgpack_object *snap, int remote)
{
    if (ndevices >= PV_MAX_DEVICES)
        return;
    struct pv_device *d = &devices[ndevices];
    memset(d, 0, sizeof *d);
    d->conn = c;
    d->remote = remote;
    d->index = ndevices;
    parse_device(d, snap);
    ndevices++;
    c->ndev++;
}

static void do_init(void)
{
    struct host_entry hosts[PV_MAX_HOSTS];
    int nh = read_hosts(hosts, PV_MAX_HOSTS);
    if (nh == 0) {
        pv_log("no hosts configured (set PYVGPU_HOSTS or run `pyvgpu hosts add HOST`)");
        init_err = PV_cudaErrorNoDevice;
        return;
    }
    cudaError_t first_err = PV_SUCCESS;
    struct pv_conn *conns[PV_MAX_HOSTS];
    struct pv_reply hellos[PV_MAX_HOSTS];
    int nconn = open_hosts(hosts, nh, conns, hellos, &first_err);
    for (int h = 0; h < nh; h++) {
        struct pv_conn *c = conns[hosts[h].conn];
        if (!c)
            continue;
        const msgpack_object *devs = pv_map_get(hellos[hosts[h].conn].result, PV_KEY_HELLO_REPLY_DEVICES);
        int nd = (devs && devs->type == MSGPACK_OBJECT_ARRAY) ? (int)devs->via.array.size : 0;
        if (hosts[h].device >= nd) {
            pv_log("%s:%d has no device %d (it has %d); entry skipped", hosts[h].host, hosts[h].port,
                   hosts[h].device, nd);
            continue;
        }
        for (int r = hosts[h].device < 0 ? 0 : hosts[h].device; r < nd; r++) {
            add_device(c, &devs->via.array.ptr[r], r);
            if (hosts[h].device >= 0)
                break;
        }
    }
    for (int i = 0; i < nconn; i++)
        if (conns[i])
            pv_reply_free(&hellos[i]);
    if (ndevices == 0)
        init_err = first_err != PV_SUCCESS ? first_err : PV_cudaErrorNoDevice;
    atomic_store(&init_done, init_err == PV_SUCCESS);
}

cudaError_t pv_init(void)
{
    pthread_once(&init_once, do_init);
    return init_err;
}

int pv_initialized(void)
{
    return atomic_load(&init_done);
}

int pv_device_count(void)
{
    return pv_init() == PV_SUCCESS ? ndevices : 0;
}

struct pv_device *pv_device(int index)
{
    if (pv_init() != PV_SUCCESS || index < 0 || index >= ndevices)
        return NULL;
    return &devices[index];
}

cudaError_t pv_cur(struct pv_device **out)
{
    cudaError_t err = pv_init();
    if (err != PV_SUCCESS)
        return err;
    struct pv_device *d = pv_device(pv_tls_device());
    if (!d)
        return PV_cudaErrorInvalidDevice;
    pv_tls_set_runtime_bound(1);         /* a runtime call binds the device's primary context when none is current */
    *out = d;
    return PV_SUCCESS;
}

int pv_dev_attr(const struct pv_device *d, int attr, int *value)
{
    if (attr < 0 || attr >= PV_MAX_ATTRS || !d->have_attr[attr])
        return -1;
    *value = d->attr[attr];
    return 0;
}

cudaError_t pv_device_attribute(const struct pv_device *d, int attr, int *value, int log_missing)
{
    if (attr <= 0 || attr >= PV_DEV_ATTR_LIMIT || !pv_dev_attr_valid[attr])
        return PV_cudaErrorInvalidValue;
    if (pv_dev_attr(d, attr, value) != 0) {
        /* a valid attribute the daemon's snapshot does not carry: the feature is reported absent */
        static atomic_uchar logged[PV_DEV_ATTR_LIMIT];
        if (log_missing && atomic_exchange(&logged[attr], 1) == 0)
            pv_log("GPU%d (%s:%d): attribute %d is not in the device snapshot; answering 0", d->index,
                   d->conn->host, d->conn->port, attr);
        *value = 0;
    }
    return PV_SUCCESS;
}
