/* Framing of the pyvgpu protocol (u32 LE header length | msgpack header | raw payload) and msgpack-object
 * accessors. Bulk payloads are written and read straight between the stream (io.c) and the caller's buffers. */
#include <stdlib.h>
#include <string.h>

#include "pv_io.h"
#include "pv_wire.h"

int pv_read_header(struct pv_io *io, msgpack_unpacked *out, char **raw, uint32_t limit)
{
    unsigned char prefix[4];
    *raw = NULL;
    if (pv_io_read(io, prefix, 4) != 0)
        return -1;
    uint32_t n = (uint32_t)prefix[0] | ((uint32_t)prefix[1] << 8) | ((uint32_t)prefix[2] << 16) |
                 ((uint32_t)prefix[3] << 24);
    if (n == 0 || n > limit)
        return -2;
    char *body = malloc(n);
    if (!body)
        return -1;
    if (pv_io_read(io, body, n) != 0) {
        free(body);
        return -1;
    }
    size_t off = 0;
    msgpack_unpacked_init(out);
    if (msgpack_unpack_next(out, body, n, &off) != MSGPACK_UNPACK_SUCCESS || off != n ||
        out->data.type != MSGPACK_OBJECT_ARRAY) {
        msgpack_unpacked_destroy(out);
        free(body);
        return -2;
    }
    *raw = body;   /* the unpacked object may reference body (str/bin); keep it alive with the object */
    return 0;
}

void pv_pack_bytes(msgpack_packer *pk, const void *data, size_t n)
{
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, data, n);
}

void pv_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static int key_is(const msgpack_object *k, const char *key)
{
    size_t n = strlen(key);
    if (k->type == MSGPACK_OBJECT_STR)
        return k->via.str.size == n && memcmp(k->via.str.ptr, key, n) == 0;
    if (k->type == MSGPACK_OBJECT_BIN)
        return k->via.bin.size == n && memcmp(k->via.bin.ptr, key, n) == 0;
    return 0;
}

const msgpack_object *pv_map_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (key_is(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

const msgpack_object *pv_map_get_int(const msgpack_object *map, int64_t key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        int64_t k;
        const msgpack_object *ko = &map->via.map.ptr[i].key;
        if (pv_obj_i64(ko, &k) == 0 && k == key)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

int pv_obj_i64(const msgpack_object *o, int64_t *out)
{
    if (!o)
        return -1;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)o->via.u64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_BOOLEAN) {
        *out = o->via.boolean ? 1 : 0;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_STR) {   /* map keys that went through JSON-ish paths */
        char buf[32];
        if (o->via.str.size == 0 || o->via.str.size >= sizeof buf)
            return -1;
        memcpy(buf, o->via.str.ptr, o->via.str.size);
        buf[o->via.str.size] = 0;
        char *end;
        long long v = strtoll(buf, &end, 10);
        if (*end)
            return -1;
        *out = v;
        return 0;
    }
    return -1;
}

int pv_obj_u64(const msgpack_object *o, uint64_t *out)
{
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *out = o->via.u64;
        return 0;
    }
    return -1;
}

int pv_obj_f64(const msgpack_object *o, double *out)
{
    if (!o)
        return -1;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) {
        *out = o->via.f64;
        return 0;
    }
    int64_t i;
    if (pv_obj_i64(o, &i) == 0) {
        *out = (double)i;
        return 0;
    }
    return -1;
}

int pv_obj_bytes(const msgpack_object *o, const char **p, size_t *n)
{
    if (o && o->type == MSGPACK_OBJECT_STR) {
        *p = o->via.str.ptr;
        *n = o->via.str.size;
        return 0;
    }
    if (o && o->type == MSGPACK_OBJECT_BIN) {
        *p = o->via.bin.ptr;
        *n = o->via.bin.size;
        return 0;
    }
    return -1;
}

int pv_obj_str(const msgpack_object *o, char *out, size_t cap)
{
    const char *p;
    size_t n;
    if (cap == 0 || pv_obj_bytes(o, &p, &n) != 0)
        return -1;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
    return 0;
}

void pv_seal_frame(msgpack_sbuffer *sb)
{
    uint32_t n = (uint32_t)(sb->size - 4);
    unsigned char *d = (unsigned char *)sb->data;
    d[0] = n & 0xff;
    d[1] = (n >> 8) & 0xff;
    d[2] = (n >> 16) & 0xff;
    d[3] = (n >> 24) & 0xff;
}

void pv_pack_dim3(msgpack_packer *pk, dim3 v)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint32(pk, v.x);
    msgpack_pack_uint32(pk, v.y);
    msgpack_pack_uint32(pk, v.z);
}
