"""Device ops through the daemon: memory round trips byte for byte, streams/events, CUDA's error codes,
deferred and sticky error rules."""
from __future__ import annotations

import os

import numpy as np
import pytest

from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, VA_WINDOW_BYTES

from harness import wait_no_sessions

E = ERROR_CODES


def ok(c: Client, op: str, *args, payload=b""):
    err, result, data = c.call(op, *args, payload=payload)
    assert err == 0, f"{op}{args}: error {err}"
    return result, data


@pytest.mark.parametrize("size", [1, 7, 255, 256, 257, 4096, 1_000_003, 64 << 20])
def test_htod_dtoh_round_trip(client, size):
    data = os.urandom(size) if size < (1 << 20) else np.random.default_rng(size).bytes(size)
    ptr, _ = ok(client, "MALLOC", 0, size)
    assert ptr % 256 == 0
    ok(client, "MEMCPY_HTOD", 0, ptr, 0, payload=data)
    _, back = ok(client, "MEMCPY_DTOH", 0, ptr, size, 0)
    assert back == data
    ok(client, "FREE", 0, ptr)


def test_dtod_memset_and_offsets(client):
    n = 1 << 20
    data = os.urandom(n)
    a, _ = ok(client, "MALLOC", 0, n)
    b, _ = ok(client, "MALLOC", 0, n)
    ok(client, "MEMCPY_HTOD", 0, a, 0, payload=data)
    ok(client, "MEMCPY_DTOD", 0, b, a, n, 0)
    assert ok(client, "MEMCPY_DTOH", 0, b, n, 0)[1] == data
    ok(client, "MEMSET", 0, b + 100, 0x1CD, 1000, 0)         # value is taken modulo 256, like cudaMemset
    expect = data[:100] + b"\xcd" * 1000 + data[1100:]
    assert ok(client, "MEMCPY_DTOH", 0, b, n, 0)[1] == expect
    ok(client, "MEMCPY_DTOD", 0, a + 10, b + 100, 50, 0)      # interior pointers
    assert ok(client, "MEMCPY_DTOH", 0, a, 70, 0)[1] == data[:10] + b"\xcd" * 50 + data[60:70]
    # fire-and-forget copies are ordered before the next synchronizing read
    assert client.call("MEMSET", 0, a, 0, n, 0, reply=False) == (0, None, b"")
    client.call("MEMCPY_HTOD", 0, a + 5, 0, payload=b"xyz", reply=False)
    assert ok(client, "MEMCPY_DTOH", 0, a, 10, 0)[1] == b"\0" * 5 + b"xyz\0\0"


def test_2d_copies_and_memset(client):
    width, height, pitch = 100, 7, 128
    rows = os.urandom(width * height)
    d, _ = ok(client, "MALLOC", 0, pitch * height)
    e, _ = ok(client, "MALLOC", 0, 256 * height)
    ok(client, "MEMSET", 0, d, 0xEE, pitch * height, 0)
    ok(client, "MEMCPY2D_HTOD", 0, d, pitch, width, height, 0, payload=rows)
    _, back = ok(client, "MEMCPY2D_DTOH", 0, d, pitch, width, height, 0)
    assert back == rows
    raw = ok(client, "MEMCPY_DTOH", 0, d, pitch * height, 0)[1]
    for r in range(height):
        assert raw[r * pitch:r * pitch + width] == rows[r * width:(r + 1) * width]
        assert raw[r * pitch + width:(r + 1) * pitch] == b"\xee" * (pitch - width)
    ok(client, "MEMCPY2D_DTOD", 0, e, 256, d, pitch, width, height, 0)
    assert ok(client, "MEMCPY2D_DTOH", 0, e, 256, width, height, 0)[1] == rows
    ok(client, "MEMSET2D", 0, e, 256, 0x11, 10, height, 0)
    got = ok(client, "MEMCPY2D_DTOH", 0, e, 256, width, height, 0)[1]
    for r in range(height):
        assert got[r * width:r * width + 10] == b"\x11" * 10
        assert got[r * width + 10:(r + 1) * width] == rows[r * width + 10:(r + 1) * width]
    assert client.call("MEMCPY2D_DTOH", 0, d, 50, 60, 2, 0)[0] == E["cudaErrorInvalidPitchValue"]
    assert client.call("MEMCPY2D_HTOD", 0, d, pitch, width, 2, 0, payload=b"short")[0] == E["cudaErrorInvalidValue"]
    assert client.call("MEMCPY2D_DTOH", 0, d, pitch, width, height + 1, 0)[0] == E["cudaErrorInvalidValue"]


def test_malloc_free_accounting_and_oom(daemon_factory):
    d = daemon_factory("--emu-memory", "64M")
    with Client.connect("127.0.0.1", d.port) as c, Client.connect("127.0.0.1", d.port) as other:
        assert ok(c, "MALLOC", 0, 0)[0] == 0                   # cudaMalloc(0) → NULL, success
        p, _ = ok(c, "MALLOC", 0, 40 << 20)
        free, total = ok(other, "MEM_GET_INFO", 0)[0]          # the budget is per device, across sessions
        assert total == 64 << 20 and free == total - (40 << 20)
        assert other.call("MALLOC", 0, 30 << 20)[0] == E["cudaErrorMemoryAllocation"]
        ok(c, "FREE", 0, p)
        ok(other, "MALLOC", 0, 30 << 20)
        assert c.call("MALLOC", 0, 1 << 40)[0] == E["cudaErrorMemoryAllocation"]
        ok(c, "FREE", 0, 0)                                    # cudaFree(NULL) is a no-op


def test_invalid_pointers_give_cuda_codes(client):
    p, _ = ok(client, "MALLOC", 0, 1000)
    inval = E["cudaErrorInvalidValue"]
    assert client.call("FREE", 0, p + 8)[0] == inval
    assert client.call("FREE", 0, 0xDEADBEEF)[0] == inval
    assert client.call("MEMCPY_DTOH", 0, p + 900, 200, 0)[0] == inval
    assert client.call("MEMCPY_HTOD", 0, p + 999, 0, payload=b"ab")[0] == inval
    assert client.call("MEMCPY_DTOD", 0, p, 12345, 10, 0)[0] == inval
    assert client.call("MEMSET", 0, VA_WINDOW_BYTES * 5, 0, 10, 0)[0] == inval
    ok(client, "FREE", 0, p)
    assert client.call("FREE", 0, p)[0] == inval                          # double free
    assert client.call("MEMCPY_DTOH", 0, p, 10, 0)[0] == inval            # use after free
    assert client.call("MALLOC", 3, 10)[0] == E["cudaErrorInvalidDevice"]
    assert client.call("MEM_GET_INFO", -1)[0] == E["cudaErrorInvalidDevice"]
    assert client.call("MALLOC", 0, "big")[0] == inval                    # wrong type
    assert client.call("MALLOC", 0, -5)[0] == inval


def test_other_sessions_memory_is_out_of_reach(daemon):
    with Client.connect("127.0.0.1", daemon.port) as a, Client.connect("127.0.0.1", daemon.port) as b:
        p, _ = ok(a, "MALLOC", 0, 4096)
        ok(a, "MEMSET", 0, p, 7, 4096, 0)
        # same va_base → b's window overlaps a's addresses, but its tables do not hold a's allocation
        assert b.call("MEMCPY_DTOH", 0, p, 16, 0)[0] == E["cudaErrorInvalidValue"]
        assert b.call("FREE", 0, p)[0] == E["cudaErrorInvalidValue"]
        assert ok(a, "MEMCPY_DTOH", 0, p, 4, 0)[1] == b"\x07" * 4


def test_streams_and_events(client):
    bad = E["cudaErrorInvalidResourceHandle"]
    s, _ = ok(client, "STREAM_CREATE", 0, 1, 0)
    e1, _ = ok(client, "EVENT_CREATE", 0, 0)
    e2, _ = ok(client, "EVENT_CREATE", 0, 0)
    nt, _ = ok(client, "EVENT_CREATE", 0, 2)                 # cudaEventDisableTiming
    assert len({s, e1, e2, nt}) == 4 and 0 not in {s, e1, e2, nt}
    assert client.call("EVENT_ELAPSED", 0, e1, e2)[0] == bad   # never recorded
    p, _ = ok(client, "MALLOC", 0, 64 << 20)
    ok(client, "EVENT_RECORD", 0, e1, s)
    ok(client, "MEMSET", 0, p, 1, 64 << 20, s)
    ok(client, "EVENT_RECORD", 0, e2, s)
    ok(client, "STREAM_WAIT_EVENT", 0, 0, e2, 0)
    ok(client, "EVENT_SYNC", 0, e2)
    ok(client, "EVENT_QUERY", 0, e2)
    ok(client, "STREAM_QUERY", 0, s)
    ok(client, "STREAM_SYNC", 0, s)
    ok(client, "STREAM_SYNC", 0, 0)
    ok(client, "STREAM_SYNC", 0, 2)                           # cudaStreamPerThread
    ms, _ = ok(client, "EVENT_ELAPSED", 0, e1, e2)
    assert isinstance(ms, float) and 0 < ms < 60_000
    ok(client, "EVENT_RECORD", 0, nt, 0)
    assert client.call("EVENT_ELAPSED", 0, e1, nt)[0] == bad
    # garbage and destroyed handles; a stream handle is not an event handle
    assert client.call("STREAM_SYNC", 0, 0x7777777)[0] == bad
    assert client.call("EVENT_RECORD", 0, s, 0)[0] == bad
    assert client.call("EVENT_QUERY", 0, 12345)[0] == bad
    ok(client, "STREAM_DESTROY", 0, s)
    ok(client, "EVENT_DESTROY", 0, e1)
    assert client.call("STREAM_DESTROY", 0, s)[0] == bad
    assert client.call("MEMSET", 0, p, 0, 10, s)[0] == bad
    assert client.call("EVENT_SYNC", 0, e1)[0] == bad
    assert client.call("STREAM_DESTROY", 0, 0)[0] == bad
    assert client.call("LAUNCH", 0, 99, [1, 1, 1], [1, 1, 1], 0, 0)[0] == E["cudaErrorInvalidDeviceFunction"]


def test_deferred_error_returned_by_next_sync_op(client):
    p, _ = ok(client, "MALLOC", 0, 100)
    # fire-and-forget failures get no reply...
    client.call("MEMSET", 0, p, 0, 1000, 0, reply=False)                  # out of bounds
    client.call("EVENT_RECORD", 0, 0xBAD, 0, reply=False)                 # second failure: first one wins
    # ...non-SYNC ops do not collect it...
    assert client.call("MEM_GET_INFO", 0)[0] == 0
    # ...the next SYNC op does, once
    assert client.call("DEVICE_SYNC", 0)[0] == E["cudaErrorInvalidValue"]
    assert client.call("DEVICE_SYNC", 0)[0] == 0
    client.call("MEMCPY_HTOD", 0, p + 99, 0, payload=b"xx", reply=False)
    err, _, data = client.call("MEMCPY_DTOH", 0, p, 10, 0)
    assert err == E["cudaErrorInvalidValue"] and data == b""
    assert ok(client, "MEMCPY_DTOH", 0, p, 3, 0)[1] == b"\0\0\0"
    # a deferred error on device 0 does not leak into another device's SYNC (single device here: use FREE)
    client.call("STREAM_DESTROY", 0, 0xBAD, reply=False)
    assert client.call("FREE", 0, p)[0] == E["cudaErrorInvalidResourceHandle"]
    assert client.call("FREE", 0, 0)[0] == 0


def test_deferred_errors_are_per_device(daemon_factory):
    d = daemon_factory("--emu-devices", "2")
    with Client.connect("127.0.0.1", d.port) as c:
        c.call("EVENT_DESTROY", 1, 0xBAD, reply=False)
        assert c.call("DEVICE_SYNC", 0)[0] == 0
        assert c.call("DEVICE_SYNC", 1)[0] == E["cudaErrorInvalidResourceHandle"]


def test_device_reset_frees_everything(client, daemon):
    p, _ = ok(client, "MALLOC", 0, 1 << 20)
    s, _ = ok(client, "STREAM_CREATE", 0, 0, 0)
    ok(client, "DEVICE_RESET", 0)
    assert client.call("MEMCPY_DTOH", 0, p, 1, 0)[0] == E["cudaErrorInvalidValue"]
    assert client.call("STREAM_SYNC", 0, s)[0] == E["cudaErrorInvalidResourceHandle"]
    me = [x for x in client.status()["sessions"] if x["self"]][0]
    assert me["memory"] == 0 and me["devices"][0]["streams"] == 0
    free, total = ok(client, "MEM_GET_INFO", 0)[0]
    assert free == total


def test_module_load_without_image_or_emulator(client):
    err, _, _ = client.call("MODULE_LOAD", 0, 1)
    assert err == E["cudaErrorInvalidValue"]
    err, _, _ = client.call("MODULE_LOAD", 0, 1, payload=b"not a fatbin")
    # with the emulator present a garbage image is rejected; without it the op is unsupported
    assert err != 0


def test_status_reports_sessions_memory_and_devices(daemon):
    with Client.connect("127.0.0.1", daemon.port, client_text="tester 42") as a:
        ok(a, "MALLOC", 0, 3000)
        ok(a, "MALLOC", 0, 5000)
        with Client.connect("127.0.0.1", daemon.port) as b:
            st = b.status()
            assert st["backend"] == "emu" and len(st["devices"]) == 1
            mine = {s["id"]: s for s in st["sessions"]}
            other = mine[a.session]
            assert other["client"] == "tester 42" and other["memory"] == 8000 and not other["self"]
            assert other["devices"][0]["allocations"] == 2
            assert mine[b.session]["self"]
            assert [{k: u[k] for k in ("device", "memory", "sessions")} for u in st["device_usage"]] == \
                [{"device": 0, "memory": 8000, "sessions": 1}]
    assert wait_no_sessions(daemon.port)["others"] == []       # a and b end on the daemon after they close
