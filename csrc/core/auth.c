/* Token proof for the handshake: hex(HMAC-SHA256(key = token, msg = nonce)), token from PYVGPU_TOKEN or the
 * token file ($XDG_CONFIG_HOME/pyvgpu/token, default ~/.config/pyvgpu/token), surrounding whitespace stripped.
 * A token file that group or other may access is refused (pyvgpu/auth.py applies the same rule). */
#include <ctype.h>
#include <sys/stat.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_auth.h"

static pthread_once_t token_once = PTHREAD_ONCE_INIT;
static char *token_value;

static char *strip(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

static void load_token(void)
{
    const char *env = getenv("PYVGPU_TOKEN");
    if (env && *env) {
        char *dup = strdup(env);
        if (dup) {
            char *t = strip(dup);
            token_value = *t ? strdup(t) : NULL;
            free(dup);
        }
        return;
    }
    char path[4096];
    if (pv_config_path("token", path, sizeof path) != 0)
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || (sb.st_mode & (S_IRWXG | S_IRWXO))) {
        /* a shared secret others on this host can read proves nothing: refuse it, as the daemon and the CLI do */
        pv_log("token file %s is accessible by group/other (mode %04o); not using it: run `chmod 600 %s`", path,
               (unsigned)(sb.st_mode & 07777), path);
        fclose(f);
        return;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *t = strip(buf);
    if (*t)
        token_value = strdup(t);
}

const char *pv_token(void)
{
    pthread_once(&token_once, load_token);
    return token_value;
}

int pv_hmac_hex(const char *token, const void *nonce, size_t nonce_len, char out[65])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), token, (int)strlen(token), nonce, nonce_len, mac, &len) || len != 32)
        return -1;
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < len; i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 15];
    }
    out[64] = 0;
    return 0;
}
