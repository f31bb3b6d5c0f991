/* Compressed bulk payloads (compress.c; pyvgpu/protocol.py "Compressed payloads"). */
#ifndef PV_COMPRESS_H
#define PV_COMPRESS_H

#include "pv_base.h"

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

#endif
