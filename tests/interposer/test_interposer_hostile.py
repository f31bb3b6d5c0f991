"""A daemon that answers with malformed frames never crashes or hangs libvcudart: the connection is dropped, the
call fails with cudaErrorDevicesUnavailable, later calls fail at once, and the reason is logged."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading

import msgpack
import pytest

from harness import serve_one_connection
from pyvgpu import wire
from pyvgpu.protocol import ERR_UNAVAILABLE, PROTOCOL_VERSION

SCRIPT = r"""
import json, sys, time, cffi
ffi = cffi.FFI()
ffi.cdef("int cudaGetDeviceCount(int *); int cudaMalloc(void **, size_t); int cudaMemGetInfo(size_t *, size_t *);")
lib = ffi.dlopen(sys.argv[1])
n = ffi.new("int *"); p = ffi.new("void **"); a = ffi.new("size_t *"); b = ffi.new("size_t *")
out = {"count_err": lib.cudaGetDeviceCount(n), "count": n[0]}
t = time.monotonic(); out["malloc"] = lib.cudaMalloc(p, 64); out["malloc_s"] = time.monotonic() - t
t = time.monotonic(); out["info"] = lib.cudaMemGetInfo(a, b); out["info_s"] = time.monotonic() - t
print(json.dumps(out))
"""

SNAPSHOT = {"name": "hostile", "total_mem": 1 << 30, "major": 7, "minor": 5, "attrs": {}}


def frame(obj) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return struct.pack("<I", len(body)) + body


BAD_REPLIES = {
    "garbage": lambda rid: b"\x05\x00\x00\x00\xc1\xc1\xc1\xc1\xc1",
    "huge-header": lambda rid: struct.pack("<I", 0xFFFFFFF0) + b"x" * 16,
    "wrong-shape": lambda rid: frame([rid, 0]),
    "map-not-array": lambda rid: frame({"req_id": rid}),
    "truncated-payload": lambda rid: frame([rid, 0, 1000, 1 << 41, None]) + b"abc",
}


def hostile_daemon(kind: str, done: threading.Event) -> int:
    def handle(conn):
        conn.sendall(wire.encode_server_hello(PROTOCOL_VERSION, b"n" * 32, False))
        header, _ = wire.recv_frame(conn)
        conn.sendall(b"".join(bytes(p) for p in wire.encode_reply(
            header[1], 0, {"devices": [SNAPSHOT], "backend": "emu", "session": 1})))
        header, _ = wire.recv_frame(conn)           # the MALLOC
        conn.sendall(BAD_REPLIES[kind](header[1]))
        if kind != "truncated-payload":    # the others stay connected: the client must notice by itself
            done.wait(10)

    return serve_one_connection(handle)


@pytest.mark.parametrize("kind", sorted(BAD_REPLIES))
def test_malformed_reply_fails_cleanly(vcudart, tmp_path, kind):
    done = threading.Event()
    port = hostile_daemon(kind, done)
    env = {**{k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}, "PYVGPU_HOSTS": f"127.0.0.1:{port}",
           "XDG_CONFIG_HOME": str(tmp_path)}
    try:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(vcudart)], capture_output=True, text=True, env=env,
                              timeout=60)
    finally:
        done.set()
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["count_err"], out["count"]) == (0, 1)
    assert out["malloc"] == ERR_UNAVAILABLE and out["malloc_s"] < 5
    assert out["info"] == ERR_UNAVAILABLE and out["info_s"] < 0.5
    assert f"connection to daemon 127.0.0.1:{port} lost" in proc.stderr
    if kind != "truncated-payload":
        assert "malformed" in proc.stderr
