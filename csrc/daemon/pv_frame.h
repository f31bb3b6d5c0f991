/* libpvframe: the daemon's compiled frame path (issue 22 part 1), loaded by daemon/pyvgpu_daemon/framepath.py
 * through cffi (ABI mode: a plain C library, no Python headers; framepath.py's cdef repeats these declarations).
 *
 * pvf_scan decodes a run of request frames laid end to end in a connection's receive buffer: consecutive frames
 * that are ops flagged FAST on their spec line (pyvgpu/protocol.py; the table is generated: frame_ops_gen.h), sent
 * fire-and-forget (req_id 0), complete in the buffer, with every argument of the kind its wire type says and in
 * range. It stops before the first frame that is anything else (incomplete, another op, a request with a reply, a
 * value the Python path must judge or refuse): the Python path then handles that frame exactly as without this
 * library, so what this library accepts it decodes to the values msgpack gives Python, and nothing else. */
#ifndef PV_FRAME_H
#define PV_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* Decodes at most max_ops frames of buf[0, len) whose payloads are each below payload_max bytes; out receives
 * pvf_record_words() int64 words per frame: op code, payload offset and length (bytes, from buf), the frame's end
 * (from buf), then its arguments in wire order (a dim3 as three words, unused words 0). → the frames decoded. */
int pvf_scan(const uint8_t *buf, size_t len, uint64_t payload_max, int64_t *out, int max_ops);

/* Words per record (PVF_RECORD_WORDS). */
int pvf_record_words(void);

/* The spec this library was generated from (pyvgpu/protocol.py's fast_signature()): the loader refuses another. */
const char *pvf_signature(void);

#endif
