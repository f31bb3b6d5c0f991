/* Framing and msgpack helpers (wire.c). */
#ifndef PV_WIRE_H
#define PV_WIRE_H

#include "pv_io.h"

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

#endif
