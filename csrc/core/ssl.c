/* Client TLS: the settings of pyvgpu/tls.py (keep the two in step), read once per process.
 *   PYVGPU_TLS=1|0             force TLS on or off (default: on when a CA or a fingerprint is configured)
 *   PYVGPU_TLS_CA=PATH         trusted CA bundle (default $XDG_CONFIG_HOME/pyvgpu/tls/ca.pem when it exists): the
 *                              daemon's certificate must chain to it and name the host dialled
 *   PYVGPU_TLS_FINGERPRINT=FP[,FP...]  pinned SHA-256 fingerprints of daemon certificates (default: the lines of
 *                              $XDG_CONFIG_HOME/pyvgpu/tls/fingerprints)
 * Both set: both checks must pass. PYVGPU_TLS=1 alone: the system's CA store and the host name. There is no
 * unverified mode; settings that cannot be used make every connection fail (said once on stderr). */
#include <arpa/inet.h>
#include <ctype.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pv_state.h"
#include "pv_io.h"

#define PV_MAX_PINS 32
#define PV_SSL_READ_BUFFER ((size_t)256 << 10)   /* ciphertext one read-ahead recv() may take */

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static struct {
    int on;                        /* TLS for every connection */
    int broken;                    /* settings that cannot be used: connections fail */
    int have_ca;
    char ca[4096];
    int npins;
    unsigned char pins[PV_MAX_PINS][32];
    SSL_CTX *ctx;
} cfg;

/* "sha256:AB:CD..." / "abcd..." -> 32 bytes; -1 when it is not a SHA-256 fingerprint. */
static int parse_fp(const char *s, unsigned char out[32])
{
    while (isspace((unsigned char)*s))
        s++;
    if (strncasecmp(s, "sha256:", 7) == 0)
        s += 7;
    int n = 0, half = -1;
    for (; *s && !isspace((unsigned char)*s) && *s != '#'; s++) {
        if (*s == ':')
            continue;
        int v = isdigit((unsigned char)*s) ? *s - '0'
                : (tolower((unsigned char)*s) >= 'a' && tolower((unsigned char)*s) <= 'f')
                    ? tolower((unsigned char)*s) - 'a' + 10 : -1;
        if (v < 0 || n >= 32)
            return -1;
        if (half < 0) {
            half = v;
        } else {
            out[n++] = (unsigned char)(half << 4 | v);
            half = -1;
        }
    }
    while (isspace((unsigned char)*s))
        s++;
    return n == 32 && half < 0 && (*s == 0 || *s == '#') ? 0 : -1;
}

static void add_pin(const char *text, const char *where)
{
    const char *t = text;
    while (isspace((unsigned char)*t))
        t++;
    if (!*t || *t == '#')
        return;
    if (cfg.npins >= PV_MAX_PINS || parse_fp(t, cfg.pins[cfg.npins]) != 0) {
        pv_log("TLS: %s: '%.80s' is not a SHA-256 certificate fingerprint (or more than %d of them)", where, t,
               PV_MAX_PINS);
        cfg.broken = 1;
        return;
    }
    cfg.npins++;
}

static void load_pins(void)
{
    const char *env = getenv("PYVGPU_TLS_FINGERPRINT");
    if (env && *env) {
        char *dup = strdup(env), *save = NULL;
        for (char *tok = dup ? strtok_r(dup, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save))
            add_pin(tok, "PYVGPU_TLS_FINGERPRINT");
        free(dup);
        return;
    }
    char path[4096], line[512];
    if (pv_config_path("tls/fingerprints", path, sizeof path) != 0)
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f))
        add_pin(line, path);
    fclose(f);
}

static void load_ca(void)
{
    const char *env = getenv("PYVGPU_TLS_CA");
    if (env && *env) {
        snprintf(cfg.ca, sizeof cfg.ca, "%s", env);
        if (access(cfg.ca, R_OK) != 0) {
            pv_log("TLS: PYVGPU_TLS_CA=%s cannot be read", cfg.ca);
            cfg.broken = 1;
            return;
        }
        cfg.have_ca = 1;
    } else if (pv_config_path("tls/ca.pem", cfg.ca, sizeof cfg.ca) == 0 && access(cfg.ca, R_OK) == 0) {
        cfg.have_ca = 1;
    }
}

static void make_ctx(void)
{
    cfg.ctx = SSL_CTX_new(TLS_client_method());
    if (!cfg.ctx) {
        cfg.broken = 1;
        return;
    }
    SSL_CTX_set_min_proto_version(cfg.ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(cfg.ctx, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(cfg.ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Read ahead: one recv() takes as many records as have arrived (up to the read buffer) instead of two per
     * 16 KiB record (header, then body); a bulk reply came at a quarter of plain TCP. Readers must then ask
     * SSL_has_pending, not SSL_pending (io.c). */
    SSL_CTX_set_read_ahead(cfg.ctx, 1);
    SSL_CTX_set_default_read_buffer_len(cfg.ctx, PV_SSL_READ_BUFFER);
    int chain = cfg.have_ca || cfg.npins == 0;      /* pins alone: the pin is the identity (self-signed) */
    if (cfg.have_ca && SSL_CTX_load_verify_locations(cfg.ctx, cfg.ca, NULL) != 1) {
        pv_log("TLS: cannot load the CA bundle %s", cfg.ca);
        cfg.broken = 1;
    } else if (!cfg.have_ca && chain) {
        SSL_CTX_set_default_verify_paths(cfg.ctx);
    }
    SSL_CTX_set_verify(cfg.ctx, chain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
}

static void load_cfg(void)
{
    const char *sw = getenv("PYVGPU_TLS");
    if (sw && *sw && strcmp(sw, "0") != 0 && strcmp(sw, "1") != 0) {
        pv_log("TLS: PYVGPU_TLS=%s: use 1 or 0", sw);
        cfg.broken = cfg.on = 1;
        return;
    }
    if (sw && strcmp(sw, "0") == 0)
        return;
    load_ca();
    load_pins();
    cfg.on = (sw && strcmp(sw, "1") == 0) || cfg.have_ca || cfg.npins > 0 || cfg.broken;
    if (cfg.on && !cfg.broken)
        make_ctx();
}

int pv_ssl_enabled(void)
{
    pthread_once(&cfg_once, load_cfg);
    return cfg.on;
}

static int pinned(SSL *s)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    X509 *cert = SSL_get1_peer_certificate(s);
#else
    X509 *cert = SSL_get_peer_certificate(s);
#endif
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    int ok = cert && X509_digest(cert, EVP_sha256(), md, &len) == 1 && len == 32;
    X509_free(cert);
    for (int i = 0; ok && i < cfg.npins; i++)
        if (memcmp(md, cfg.pins[i], 32) == 0)
            return 1;
    return 0;
}

/* TLS handshake on io (waits bounded by io's tick) and verification of the daemon's certificate. */
cudaError_t pv_ssl_connect(struct pv_io *io, const char *host, int port)
{
    pthread_once(&cfg_once, load_cfg);
    if (cfg.broken || !cfg.ctx) {
        pv_log("TLS settings unusable (see above): not connecting to %s:%d", host, port);
        return PV_ERR_UNAVAILABLE;
    }
    SSL *s = SSL_new(cfg.ctx);
    if (!s || SSL_set_fd(s, io->fd) != 1) {
        SSL_free(s);
        return PV_ERR_UNAVAILABLE;
    }
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    if (!is_ip)
        SSL_set_tlsext_host_name(s, host);
    if (cfg.have_ca || cfg.npins == 0) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(s);
        if (is_ip)
            X509_VERIFY_PARAM_set1_ip_asc(vp, host);
        else
            X509_VERIFY_PARAM_set1_host(vp, host, 0);
    }
    io->ssl = s;            /* io_wait below needs no lock: no other thread uses the stream yet */
    for (;;) {
        int rc = SSL_connect(s);
        if (rc == 1)
            break;
        int e = SSL_get_error(s, rc);
        short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (ev && pv_io_wait(io, ev) == 0)
            continue;
        long vr = SSL_get_verify_result(s);
        unsigned long ec = ERR_get_error();
        char why[256] = "";
        if (vr != X509_V_OK)
            snprintf(why, sizeof why, "certificate not trusted: %s", X509_verify_cert_error_string(vr));
        else if (ec)
            ERR_error_string_n(ec, why, sizeof why);
        else
            snprintf(why, sizeof why, "%s", ev ? "timed out" : "connection closed");
        ERR_clear_error();
        pv_log("TLS handshake with daemon %s:%d failed: %s", host, port, why);
        io->ssl = NULL;
        SSL_free(s);
        return vr != X509_V_OK ? PV_ERR_AUTH : PV_ERR_UNAVAILABLE;
    }
    if (cfg.npins && !pinned(s)) {
        pv_log("TLS: daemon %s:%d presented a certificate whose SHA-256 fingerprint is not pinned "
               "(PYVGPU_TLS_FINGERPRINT or the fingerprints file)", host, port);
        io->ssl = NULL;
        SSL_free(s);
        return PV_ERR_AUTH;
    }
    return PV_SUCCESS;
}
