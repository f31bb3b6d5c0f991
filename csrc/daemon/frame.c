/* The compiled frame path's decoder (pv_frame.h). The headers it accepts are msgpack arrays of integers (a dim3 is
 * a nested array of three): decoded here by hand in a few branches rather than through msgpack-c's unpacker, which
 * builds an object tree in a zone per frame; for a 10-integer header that allocation and the walk over the tree
 * cost more than the decode itself, and anything outside these shapes is left to the Python path anyway. */
#include "pv_frame.h"

#include <string.h>

#include "frame_ops_gen.h"

struct cursor {
    const uint8_t *p;
    const uint8_t *end;
};

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* One msgpack integer → *v (as int64: the kinds below bound it); 0 when the next value is not an integer or is
 * truncated. uint64 values above INT64_MAX are refused (no kind accepts them). */
static int read_int(struct cursor *c, int64_t *v)
{
    if (c->p >= c->end)
        return 0;
    uint8_t t = *c->p++;
    int n;
    int sign = 0;
    if (t <= 0x7f) {
        *v = t;
        return 1;
    }
    if (t >= 0xe0) {
        *v = (int8_t)t;
        return 1;
    }
    switch (t) {
    case 0xcc: n = 1; break;
    case 0xcd: n = 2; break;
    case 0xce: n = 4; break;
    case 0xcf: n = 8; break;
    case 0xd0: n = 1; sign = 1; break;
    case 0xd1: n = 2; sign = 1; break;
    case 0xd2: n = 4; sign = 1; break;
    case 0xd3: n = 8; sign = 1; break;
    default: return 0;
    }
    if (c->end - c->p < n)
        return 0;
    uint64_t u = be(c->p, n);
    c->p += n;
    if (sign) {
        int bits = 8 * n;
        *v = bits == 64 ? (int64_t)u : (int64_t)(u << (64 - bits)) >> (64 - bits);
    } else {
        if (u > (uint64_t)INT64_MAX)
            return 0;
        *v = (int64_t)u;
    }
    return 1;
}

/* The length of a msgpack array at the cursor; -1 when the next value is not an array. */
static int64_t read_array(struct cursor *c)
{
    if (c->p >= c->end)
        return -1;
    uint8_t t = *c->p++;
    if ((t & 0xf0) == 0x90)
        return t & 0x0f;
    if (t == 0xdc && c->end - c->p >= 2) {
        c->p += 2;
        return (int64_t)be(c->p - 2, 2);
    }
    if (t == 0xdd && c->end - c->p >= 4) {
        c->p += 4;
        return (int64_t)be(c->p - 4, 4);
    }
    return -1;
}

/* One argument of kind k into out (1 or 3 words). → words written, 0 when the value is not of the kind. */
static int read_arg(struct cursor *c, uint8_t k, int64_t *out)
{
    int64_t v;
    switch (k) {
    case PVF_K_DIM3:
        if (read_array(c) != 3)
            return 0;
        for (int i = 0; i < 3; i++)
            if (!read_int(c, &out[i]) || out[i] < 0 || out[i] > 0xffffffffLL)
                return 0;
        return 3;
    case PVF_K_U63:
        if (!read_int(c, &v) || v < 0)
            return 0;
        break;
    case PVF_K_I64:
        if (!read_int(c, &v))
            return 0;
        break;
    case PVF_K_U32:
        if (!read_int(c, &v) || v < 0 || v > 0xffffffffLL)
            return 0;
        break;
    case PVF_K_I32:
        if (!read_int(c, &v) || v < INT32_MIN || v > INT32_MAX)
            return 0;
        break;
    default:
        return 0;
    }
    *out = v;
    return 1;
}

/* The frame at buf[pos, len) into rec; → the offset of its end, 0 when it is not one this path takes. */
static size_t decode(const uint8_t *buf, size_t len, size_t pos, uint64_t payload_max, int64_t *rec)
{
    if (len - pos < 4)
        return 0;
    uint32_t hlen = (uint32_t)buf[pos] | (uint32_t)buf[pos + 1] << 8 | (uint32_t)buf[pos + 2] << 16 |
                    (uint32_t)buf[pos + 3] << 24;
    if (hlen == 0 || hlen > PVF_MAX_HEADER_BYTES || len - pos - 4 < hlen)
        return 0;
    struct cursor c = { buf + pos + 4, buf + pos + 4 + hlen };
    int64_t fields = read_array(&c);
    int64_t code, req_id, plen;
    if (fields < 3 || !read_int(&c, &code) || code < 0 || code > PVF_MAX_CODE || !pvf_index[code])
        return 0;
    const struct pvf_op *op = &pvf_ops[pvf_index[code] - 1];
    if (fields != 3 + op->nargs || !read_int(&c, &req_id) || req_id != 0 || !read_int(&c, &plen) || plen < 0)
        return 0;
    if ((uint64_t)plen >= payload_max || (plen && !op->payload_in))
        return 0;
    memset(rec, 0, sizeof(int64_t) * PVF_RECORD_WORDS);
    int64_t *w = rec + PVF_RECORD_HEAD;
    for (int i = 0; i < op->nargs; i++) {
        int n = read_arg(&c, op->kinds[i], w);
        if (!n)
            return 0;
        w += n;
    }
    if (c.p != c.end)                       /* trailing bytes: a malformed header, the Python path's to refuse */
        return 0;
    size_t payload = pos + 4 + hlen;
    if ((uint64_t)(len - payload) < (uint64_t)plen)
        return 0;                           /* payload not all received yet */
    rec[0] = code;
    rec[1] = (int64_t)payload;
    rec[2] = plen;
    rec[3] = (int64_t)(payload + (size_t)plen);
    return payload + (size_t)plen;
}

int pvf_scan(const uint8_t *buf, size_t len, uint64_t payload_max, int64_t *out, int max_ops)
{
    size_t pos = 0;
    int n = 0;
    if (payload_max > PVF_MAX_PAYLOAD_BYTES)
        payload_max = PVF_MAX_PAYLOAD_BYTES;
    while (n < max_ops && pos < len) {
        size_t end = decode(buf, len, pos, payload_max, out + (size_t)n * PVF_RECORD_WORDS);
        if (!end)
            break;
        pos = end;
        n++;
    }
    return n;
}

int pvf_record_words(void)
{
    return PVF_RECORD_WORDS;
}

const char *pvf_signature(void)
{
    return PVF_SIGNATURE;
}
