/* Compressed bulk payloads (pyvgpu/protocol.py, "Compressed payloads"): codecs, the block format, and the choice.
 *
 * The codecs are the system's liblz4 and libzstd, opened at run time (dlopen) rather than linked: their runtime
 * libraries are on virtually every Linux host (systemd and the package managers use them), their -dev packages often
 * are not (GPU hosts without network), and a client without them still works, offering no codec. The few functions
 * used are part of both libraries' stable ABI (declared below by hand for that reason).
 *
 * The choice (pv_compress_choose): PYVGPU_COMPRESS=off never compresses, lz4/zstd always do (tests, benchmarks);
 * auto (the default) offers no codec to a daemon on a loopback address (a loopback copy is a memcpy) and elsewhere
 * compresses by the policy below; adaptive applies the policy on loopback too (benchmarks through the shaping proxy
 * bench/netshape.py, which listens on loopback). The policy: compress a payload of at least PV_COMPRESS_MIN_BYTES
 * when the daemon has reported the rate at which it receives (a heartbeat notice) and a codec's predicted time,
 * bytes / its speed + compressed bytes / rate, is at most PV_COMPRESS_GAIN of bytes / rate; ratio and speed come
 * from compressing samples of the payload. Decoding never writes
 * more than a block's stated raw length, and a reply may not claim more raw bytes than its destination holds. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_wire.h"
#include "pv_stats.h"
#include "pv_compress.h"

typedef int (*lz4_compress_fn)(const char *src, char *dst, int n, int cap);
typedef int (*lz4_decompress_fn)(const char *src, char *dst, int n, int cap);
typedef size_t (*zstd_compress_fn)(void *dst, size_t cap, const void *src, size_t n, int level);
typedef size_t (*zstd_decompress_fn)(void *dst, size_t cap, const void *src, size_t n);
typedef unsigned (*zstd_is_error_fn)(size_t code);

static struct {
    lz4_compress_fn lz4_compress;
    lz4_decompress_fn lz4_decompress;
    zstd_compress_fn zstd_compress;
    zstd_decompress_fn zstd_decompress;
    zstd_is_error_fn zstd_is_error;
    int mode;                      /* PV_COMPRESS_OFF / AUTO / a codec id (always that one) */
    int available;                 /* bit (1 << codec) per codec that loaded */
} cz;
static pthread_once_t cz_once = PTHREAD_ONCE_INIT;
static _Atomic double speed_bps[3];   /* per codec: bytes/s it compresses at here, learnt from samples */

enum { PV_COMPRESS_OFF = -1, PV_COMPRESS_AUTO = 0, PV_COMPRESS_ADAPTIVE = 100 };

static void *sym(void *lib, const char *name) { return lib ? dlsym(lib, name) : NULL; }

static void cz_init(void)
{
    const char *env = getenv(PV_KEY_ENV_COMPRESS);
    cz.mode = PV_COMPRESS_AUTO;
    if (env && (!strcmp(env, "off") || !strcmp(env, "0")))
        cz.mode = PV_COMPRESS_OFF;
    else if (env && !strcmp(env, "lz4"))
        cz.mode = PV_CODEC_LZ4;
    else if (env && !strcmp(env, "zstd"))
        cz.mode = PV_CODEC_ZSTD;
    else if (env && !strcmp(env, "adaptive"))
        cz.mode = PV_COMPRESS_ADAPTIVE;
    else if (env && *env && strcmp(env, "auto") != 0)
        pv_log("ignoring %s='%s': expected off, auto, adaptive, lz4 or zstd", PV_KEY_ENV_COMPRESS, env);
    if (cz.mode == PV_COMPRESS_OFF)
        return;
    void *lz4 = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    cz.lz4_compress = (lz4_compress_fn)sym(lz4, "LZ4_compress_default");
    cz.lz4_decompress = (lz4_decompress_fn)sym(lz4, "LZ4_decompress_safe");
    if (cz.lz4_compress && cz.lz4_decompress)
        cz.available |= 1 << PV_CODEC_LZ4;
    void *zstd = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    cz.zstd_compress = (zstd_compress_fn)sym(zstd, "ZSTD_compress");
    cz.zstd_decompress = (zstd_decompress_fn)sym(zstd, "ZSTD_decompress");
    cz.zstd_is_error = (zstd_is_error_fn)sym(zstd, "ZSTD_isError");
    if (cz.zstd_compress && cz.zstd_decompress && cz.zstd_is_error)
        cz.available |= 1 << PV_CODEC_ZSTD;
    if (cz.mode > 0 && cz.mode != PV_COMPRESS_ADAPTIVE && !(cz.available & (1 << cz.mode)))
        pv_log("%s=%s: that codec's library could not be loaded; not compressing", PV_KEY_ENV_COMPRESS, env);
}

static const char *const codec_names[3] = { NULL, "lz4", "zstd" };

int pv_compress_offer(void)
{
    pthread_once(&cz_once, cz_init);
    return cz.available;
}

/* Whether fd's peer is this host (127.0.0.0/8, ::1, an IPv4-mapped loopback address). */
static int peer_is_loopback(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

int pv_compress_offer_to(int fd)
{
    int mask = pv_compress_offer();
    if (cz.mode == PV_COMPRESS_AUTO && peer_is_loopback(fd))
        return 0;                  /* a loopback copy is a memcpy: compressing can only cost */
    return mask;
}

int pv_compress_hello_count(int mask) { return mask ? 1 : 0; }

void pv_compress_hello_pack(msgpack_packer *pk, int mask)
{
    if (!mask)
        return;
    pv_pack_str(pk, PV_KEY_HELLO_COMPRESS);
    msgpack_pack_array(pk, (size_t)__builtin_popcount((unsigned)mask));
    for (int c = 1; c <= 2; c++)
        if (mask & (1 << c))
            pv_pack_str(pk, codec_names[c]);
}

int pv_compress_accepted(const msgpack_object *hello_result)
{
    const msgpack_object *list = pv_map_get(hello_result, PV_KEY_HELLO_COMPRESS);
    int mask = 0;
    if (!list || list->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    for (uint32_t i = 0; i < list->via.array.size; i++) {
        char name[16];
        if (pv_obj_str(&list->via.array.ptr[i], name, sizeof name) != 0)
            continue;
        for (int c = 1; c <= 2; c++)
            if (!strcmp(name, codec_names[c]))
                mask |= 1 << c;
    }
    return mask & pv_compress_offer();
}

/* ---------------------------------------------------------------------------------------------- blocks */
static size_t block_bound(size_t n) { return n + n / 255 + 64; }   /* >= LZ4's and zstd's compress bounds */

size_t pv_compress_bound(size_t n)
{
    size_t blocks = (n + PV_COMPRESS_BLOCK - 1) / PV_COMPRESS_BLOCK;
    return blocks * 8 + n + n / 255 + 64 * blocks;
}

/* One block: compressed size, or 0 when it did not shrink (the caller stores it). */
static size_t block_compress(int codec, const void *src, size_t n, void *dst, size_t cap)
{
    size_t k = 0;
    if (codec == PV_CODEC_LZ4) {
        int r = cz.lz4_compress(src, dst, (int)n, (int)cap);
        k = r > 0 ? (size_t)r : 0;
    } else if (codec == PV_CODEC_ZSTD) {
        size_t r = cz.zstd_compress(dst, cap, src, n, PV_ZSTD_LEVEL);
        k = cz.zstd_is_error(r) ? 0 : r;
    }
    return k < n ? k : 0;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t pv_compress_encode(int codec, const void *src, size_t n, void *dst, size_t cap)
{
    unsigned char *out = dst;
    size_t pos = 0;
    for (size_t off = 0; off < n; off += PV_COMPRESS_BLOCK) {
        size_t raw = n - off < PV_COMPRESS_BLOCK ? n - off : PV_COMPRESS_BLOCK;
        if (pos + 8 + block_bound(raw) > cap)
            return 0;
        size_t k = block_compress(codec, (const char *)src + off, raw, out + pos + 8, cap - pos - 8);
        if (!k) {
            memcpy(out + pos + 8, (const char *)src + off, raw);
            k = raw;
        }
        put_u32(out + pos, (uint32_t)k);
        put_u32(out + pos + 4, (uint32_t)raw);
        pos += 8 + k;
    }
    return pos;
}

int pv_compress_block_header(const unsigned char hdr[8], size_t left, size_t *clen, size_t *rlen)
{
    *clen = get_u32(hdr);
    *rlen = get_u32(hdr + 4);
    size_t want = left < PV_COMPRESS_BLOCK ? left : PV_COMPRESS_BLOCK;
    return (*rlen == want && *clen > 0 && *clen <= *rlen) ? 0 : -1;
}

int pv_decompress_block(int codec, const void *src, size_t clen, void *dst, size_t rlen)
{
    if (clen == rlen) {
        memcpy(dst, src, rlen);
        return 0;
    }
    if (!(pv_compress_offer() & (1 << codec)))
        return -1;
    if (codec == PV_CODEC_LZ4)
        return cz.lz4_decompress(src, dst, (int)clen, (int)rlen) == (int)rlen ? 0 : -1;
    size_t r = cz.zstd_decompress(dst, rlen, src, clen);
    return !cz.zstd_is_error(r) && r == rlen ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------------- the choice */
static void learn_speed(int codec, size_t n, int64_t ns)
{
    if (ns <= 0)
        return;
    double v = (double)n * 1e9 / (double)ns, old = atomic_load(&speed_bps[codec]);
    atomic_store(&speed_bps[codec], old > 0 ? 0.7 * old + 0.3 * v : v);
}

int pv_compress_choose(int negotiated, uint64_t link_bps, const void *data, size_t n)
{
    pthread_once(&cz_once, cz_init);
    if (!negotiated || cz.mode == PV_COMPRESS_OFF || n < PV_COMPRESS_MIN_BYTES)
        return 0;
    if (cz.mode > 0 && cz.mode != PV_COMPRESS_ADAPTIVE)
        return negotiated & (1 << cz.mode) ? cz.mode : 0;
    if (!link_bps)
        return 0;                  /* the daemon has not measured the link yet */
    size_t k = n / PV_COMPRESS_SAMPLES < PV_COMPRESS_SAMPLE_BYTES ? n / PV_COMPRESS_SAMPLES : PV_COMPRESS_SAMPLE_BYTES;
    unsigned char sample[PV_COMPRESS_SAMPLES * PV_COMPRESS_SAMPLE_BYTES];
    for (int i = 0; i < PV_COMPRESS_SAMPLES; i++) {
        size_t at = (n - k) * (size_t)i / (PV_COMPRESS_SAMPLES > 1 ? PV_COMPRESS_SAMPLES - 1 : 1);
        memcpy(sample + (size_t)i * k, (const char *)data + at, k);
    }
    size_t total = k * PV_COMPRESS_SAMPLES;
    size_t cap = block_bound(total);
    unsigned char *tmp = malloc(cap);
    if (!tmp)
        return 0;
    double plain = 1.0 / (double)link_bps, best_t = PV_COMPRESS_GAIN * plain;
    int best = 0;
    for (int c = 1; c <= 2; c++) {
        if (!(negotiated & (1 << c)))
            continue;
        int64_t t0 = pv_now_ns();
        size_t z = block_compress(c, sample, total, tmp, cap);
        learn_speed(c, total, pv_now_ns() - t0);
        double ratio = z ? (double)z / (double)total : 1.0, speed = atomic_load(&speed_bps[c]);
        /* compressing and sending add up: a block is compressed, then written (the socket buffer hides little) */
        double per_byte = (speed > 0 ? 1.0 / speed : plain) + ratio * plain;
        if (per_byte < best_t) {
            best = c;
            best_t = per_byte;
        }
    }
    free(tmp);
    return best;
}
