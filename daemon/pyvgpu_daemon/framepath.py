"""The compiled frame path (issue 22 part 1): runs of FAST ops decoded in C and handed to the backend in one call.

libpvframe (csrc/daemon/frame.c, its op table generated from the spec by tools/gen_frame_c.py) scans the bytes a
connection has received and decodes, in one call, the run of frames at their head that are ops flagged FAST, sent
fire-and-forget, complete, with every argument of its wire type and in range (pv_frame.h). `Connection.step_now`
takes such a run first: it consumes the frames, groups consecutive ops of one device, and runs each group as one job
(fastrun.execute_run, on the loop where fastpath allows every op of it, else one worker job), which hands the
backend the whole group through DeviceContext.run_fast. Everything else (the first frame the C side does not take,
requests with replies, set-up, errors) goes the Python path as before, so both paths see the same frames in the same
order; a run decodes to exactly the values msgpack gives the Python path (tests/daemon/test_framepath.py replays the
same frames through both and compares replies and state).

Binding: cffi in ABI mode over a plain C library. One call decodes a whole run (up to MAX_OPS frames), so the
per-call cost of the binding (~0.3 µs for cffi's ABI mode) is paid once per run, not per frame; the records come
back as one int64 array read with a single memoryview.tolist(). An API-mode or CPython module would save part of that
0.3 µs per run but needs Python's headers at build time and a module per interpreter ABI; the package's build
(CMake, scikit-build-core) already builds plain shared libraries for the client, and this one is built beside them.

PYVGPU_DAEMON_COMPILED=0 (protocol.ENV_DAEMON_COMPILED) forces the Python path; a missing or unloadable library
falls back to it with one log line.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

from pyvgpu.protocol import ENV_DAEMON_COMPILED, OP_BY_CODE, OPS, OpSpec, fast_signature

log = logging.getLogger("pyvgpu.daemon")

LIB_NAME = "libpvframe.so"
MAX_OPS = 256                 # frames one scan decodes (a run longer than this is taken in several)
FIRST_BYTES = 7               # u32 prefix, array marker, op code, req_id: what scan looks at before calling
assert all(code < 0x80 for code in (spec.code for spec in OPS if spec.fast)), "FAST op codes are msgpack fixints"
RECORD_HEAD = 4               # code, payload offset, payload length, end of the frame (tools/gen_frame_c.py)
_CDEF = """
int pvf_scan(const uint8_t *buf, size_t len, uint64_t payload_max, int64_t *out, int max_ops);
int pvf_record_words(void);
const char *pvf_signature(void);
"""

Decoded = tuple[OpSpec, list[Any], int, int, int]     # (spec, arguments, payload offset, payload length, frame end)


def _builder(spec: OpSpec) -> Callable[[list[int], int], list[Any]]:
    """rec, at → the op's arguments as msgpack gives them to the Python path (a dim3 as a list of three). Made as
    one expression per op from its spec line: a loop over the layout costs about a microsecond per frame."""
    parts = []
    w = RECORD_HEAD
    for a in spec.args:
        parts.append(f"r[a + {w}:a + {w + 3}]" if a.type == "dim3" else f"r[a + {w}]")
        w += 3 if a.type == "dim3" else 1
    return eval(f"lambda r, a: [{', '.join(parts)}]")      # noqa: S307 - text made above from the spec alone


class FramePath:
    """The loaded library and its record buffer (one per daemon: the loop is its only user)."""

    def __init__(self, ffi: Any, lib: Any) -> None:
        self.ffi = ffi
        self.lib = lib
        self.words = int(lib.pvf_record_words())
        self.out = ffi.new("int64_t[]", MAX_OPS * self.words)
        self.view = memoryview(ffi.buffer(self.out)).cast("q")
        self.build = {spec.code: _builder(spec) for spec in OPS if spec.fast}
        self.codes = frozenset(self.build)
        self.frames = 0               # frames taken by this path, and the runs they came in (STATUS "frame_path")
        self.runs = 0

    def figures(self) -> dict[str, Any]:
        return {"compiled": True, "frames": self.frames, "runs": self.runs}

    def scan(self, buf: bytearray, lo: int, hi: int, payload_max: int) -> list[Decoded]:
        """The run of FAST frames at the head of buf[lo:hi) (payloads each below payload_max bytes), offsets
        relative to lo; [] when the first frame is not one."""
        # The usual first frame that is not one, a request waiting for its reply or another op, is told by two bytes
        # (op code and req_id as msgpack fixints after the prefix and the array's marker) without the call.
        if hi - lo < FIRST_BYTES or buf[lo + 5] not in self.codes or buf[lo + 6]:
            return []
        ffi = self.ffi
        n = self.lib.pvf_scan(ffi.from_buffer("uint8_t[]", buf) + lo, hi - lo, payload_max, self.out, MAX_OPS)
        if n == 0:
            return []
        words = self.words
        rec = self.view[:n * words].tolist()
        build = self.build
        out = []
        for at in range(0, n * words, words):
            code = rec[at]
            out.append((OP_BY_CODE[code], build[code](rec, at), rec[at + 1], rec[at + 2], rec[at + 3]))
        return out


def load() -> FramePath | None:
    """The compiled frame path, or None (forced off, or not loadable: one log line says why)."""
    if os.environ.get(ENV_DAEMON_COMPILED, "1") == "0":
        log.info("frame path: Python (%s=0)", ENV_DAEMON_COMPILED)
        return None
    try:
        import cffi  # noqa: PLC0415 - optional at run time: the Python path works without it

        from pyvgpu import lib_path  # noqa: PLC0415
        ffi = cffi.FFI()
        ffi.cdef(_CDEF)
        path = lib_path(LIB_NAME)
        fp = FramePath(ffi, ffi.dlopen(str(path)))
    except (ImportError, OSError) as exc:      # FileNotFoundError (not built), a dlopen failure
        log.warning("frame path: Python (the compiled one did not load: %s)", str(exc)[:300])
        return None
    built = ffi.string(fp.lib.pvf_signature()).decode()
    if built != fast_signature():
        log.warning("frame path: Python (%s was generated from another spec: rebuild it)", path)
        return None
    log.info("frame path: compiled (%s)", path)
    return fp
