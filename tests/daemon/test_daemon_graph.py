"""Graphs at the protocol level: an upload is a list of this device's own fire-and-forget frames (GRAPH_CREATE),
replayed in order by one GRAPH_LAUNCH with the launch's stream; uploads are checked when they arrive (only graph ops,
this device, the spec's arity and types, bounded count and bytes) and a bad one is cudaErrorInvalidValue, never a
broken session. Also the one-message launch seen from libvcudart."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from pyvgpu import wire
from pyvgpu.protocol import ERROR_CODES, MAX_GRAPH_BYTES, OP_BY_NAME

E = ERROR_CODES


def frame(op: str, *args, payload: bytes = b"", req_id: int = 0) -> bytes:
    return b"".join(bytes(p) for p in wire.encode_request(OP_BY_NAME[op].code, req_id, list(args), payload))


def ok(c, op, *args, payload=b""):
    err, result, data = c.call(op, *args, payload=payload)
    assert err == 0, f"{op}{args}: {err}"
    return result, data


def test_graph_upload_and_replay(client):
    n = 4096
    a, _ = ok(client, "MALLOC", 0, n)
    b, _ = ok(client, "MALLOC", 0, n)
    s, _ = ok(client, "STREAM_CREATE", 0, 0, 0)
    ev, _ = ok(client, "EVENT_CREATE", 0, 0)
    body = (frame("MEMSET", 0, a, 0x11, n, 0) + frame("MEMSET_ELEMS", 0, a, 0, 0x2233, 2, 8, 1, 0)
            + frame("MEMCPY_DTOD", 0, b, a, n, 0) + frame("MEMSET2D", 0, b, 64, 0x7F, 16, 4, 0)
            + frame("EVENT_RECORD", 0, ev, 0) + frame("STREAM_WAIT_EVENT", 0, s, ev, 0))
    g, _ = ok(client, "GRAPH_CREATE", 0, payload=body)
    ok(client, "MEMSET", 0, a, 0, n, 0)
    ok(client, "MEMSET", 0, b, 0, n, 0)
    assert ok(client, "MEMCPY_DTOH", 0, b, 16, 0)[1] == b"\0" * 16      # uploading runs nothing
    before = client.status()["sessions"]
    for _ in range(3):
        assert client.call("GRAPH_LAUNCH", 0, g, s, reply=False) == (0, None, b"")
    ok(client, "STREAM_SYNC", 0, s)
    expect = bytearray(b"\x11" * n)
    expect[:16] = b"\x33\x22" * 8
    for r in range(4):
        expect[64 * r:64 * r + 16] = b"\x7f" * 16
    assert ok(client, "MEMCPY_DTOH", 0, b, n, 0)[1] == bytes(expect)
    mine = [x for x in client.status()["sessions"] if x["self"]][0]
    old = [x for x in before if x["self"]][0]
    assert mine["devices"][0]["ops"] - old["devices"][0]["ops"] == 3 + 1 + 1     # 3 launches, the sync, the read
    assert mine["devices"][0]["graphs"] == 1
    ok(client, "GRAPH_DESTROY", 0, g)
    assert client.call("GRAPH_LAUNCH", 0, g, 0)[0] == E["cudaErrorInvalidResourceHandle"]
    assert client.call("GRAPH_DESTROY", 0, g)[0] == E["cudaErrorInvalidResourceHandle"]


def test_graph_launch_errors_name_the_op_and_are_deferred(client, daemon):
    a, _ = ok(client, "MALLOC", 0, 256)
    ev, _ = ok(client, "EVENT_CREATE", 0, 0)
    g, _ = ok(client, "GRAPH_CREATE", 0, payload=frame("MEMSET", 0, a, 1, 256, 0) + frame("EVENT_RECORD", 0, ev, 0))
    ok(client, "EVENT_DESTROY", 0, ev)
    client.call("GRAPH_LAUNCH", 0, g, 0, reply=False)
    assert client.call("DEVICE_SYNC", 0)[0] == E["cudaErrorInvalidResourceHandle"]
    assert ok(client, "MEMCPY_DTOH", 0, a, 4, 0)[1] == b"\1" * 4          # the ops before the bad one ran
    assert "graph op 1 (EVENT_RECORD)" in daemon.log_text()
    g2, _ = ok(client, "GRAPH_CREATE", 0, payload=frame("MEMSET", 0, a + 200, 1, 100, 0))
    assert client.call("GRAPH_LAUNCH", 0, g2, 0)[0] == E["cudaErrorInvalidValue"]        # out of range at launch


@pytest.mark.parametrize("bad", [
    "not frames", "other op", "wrong device", "with reply", "arity", "arg type", "trailing", "huge length"])
def test_bad_uploads_are_invalid_value(client, bad):
    a, _ = ok(client, "MALLOC", 0, 256)
    good = frame("MEMSET", 0, a, 1, 16, 0)
    body = {
        "not frames": b"\x05\x00\x00\x00garbage",
        "other op": frame("MALLOC", 0, 16),
        "wrong device": frame("MEMSET", 1, a, 1, 16, 0),
        "with reply": frame("MEMSET", 0, a, 1, 16, 0, req_id=7),
        "arity": frame("MEMSET", 0, a, 1, 16),
        "arg type": frame("MEMSET", 0, "a", 1, 16, 0),
        "trailing": good + b"\x01\x02",
        "huge length": struct.pack("<I", 1 << 30) + b"x",
    }[bad]
    assert client.call("GRAPH_CREATE", 0, payload=good + body)[0] == E["cudaErrorInvalidValue"]
    assert client.call("MEM_GET_INFO", 0)[0] == 0                      # the session carries on


def test_graph_bytes_are_bounded_per_session(client):
    a, _ = ok(client, "MALLOC", 0, 256)
    one = frame("MEMSET", 0, a, 1, 16, 0, payload=b"")
    filler = frame("LAUNCH", 0, 1, [1, 1, 1], [1, 1, 1], 0, 0, payload=b"\0" * (16 << 20))
    handles = []
    while True:
        err, h, _ = client.call("GRAPH_CREATE", 0, payload=one + filler)
        if err:
            assert err == E["cudaErrorMemoryAllocation"]
            break
        handles.append(h)
        assert len(handles) * (16 << 20) <= MAX_GRAPH_BYTES
    assert len(handles) >= MAX_GRAPH_BYTES // (17 << 20)
    ok(client, "GRAPH_DESTROY", 0, handles.pop())
    ok(client, "GRAPH_CREATE", 0, payload=one)                         # room again


CDEF = """
typedef int cudaError_t;
typedef struct { void *dst; size_t pitch; unsigned value, elementSize; size_t width, height; } cudaMemsetParams;
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaGraphCreate(void **, unsigned);
cudaError_t cudaGraphAddMemsetNode(void **, void *, void **, size_t, cudaMemsetParams *);
cudaError_t cudaGraphInstantiate(void **, void *, unsigned long long);
cudaError_t cudaGraphLaunch(void *, void *);
cudaError_t cudaDeviceSynchronize(void);
"""

SCRIPT = r"""
import json, sys, cffi
from pyvgpu.client import Client
ffi = cffi.FFI(); ffi.cdef(sys.argv[2]); lib = ffi.dlopen(sys.argv[1])
port = int(sys.argv[3])
p = ffi.new("void **"); assert lib.cudaMalloc(p, 4096) == 0
g = ffi.new("void **"); assert lib.cudaGraphCreate(g, 0) == 0
prev = ffi.NULL
for i in range(40):
    mp = ffi.new("cudaMemsetParams *", {"dst": ffi.cast("char *", p[0]) + 100 * i, "pitch": 0, "value": i,
                                        "elementSize": 1, "width": 100, "height": 1})
    node = ffi.new("void **"); deps = ffi.new("void *[1]", [prev])
    assert lib.cudaGraphAddMemsetNode(node, g[0], deps if prev != ffi.NULL else ffi.NULL, 1 if prev != ffi.NULL else 0, mp) == 0
    prev = node[0]
x = ffi.new("void **"); assert lib.cudaGraphInstantiate(x, g[0], 0) == 0
def ops():
    with Client.connect("127.0.0.1", port) as c:
        other = [s for s in c.status()["sessions"] if not s["self"]]
        return other[0]["devices"][0]["ops"]
before = ops()
for _ in range(25):
    assert lib.cudaGraphLaunch(x[0], ffi.NULL) == 0
assert lib.cudaDeviceSynchronize() == 0
after = ops()
buf = ffi.new("unsigned char[4000]")
assert lib.cudaMemcpy(buf, p[0], 4000, 2) == 0
print(json.dumps({"ops": after - before, "bytes": list(bytes(ffi.buffer(buf)))}))
"""


def test_libvcudart_launches_a_graph_with_one_message(daemon, vcudart):
    env = {**os.environ, "PYVGPU_HOSTS": daemon.address}
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(vcudart), CDEF, str(daemon.port)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ops"] == 25 + 1                       # 25 GRAPH_LAUNCH + the synchronize, not 25 x 40 memsets
    assert out["bytes"] == [i for i in range(40) for _ in range(100)]
