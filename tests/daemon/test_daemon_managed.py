"""Managed memory at the protocol level: MALLOC_MANAGED gives page-aligned, zero-filled memory tracked as managed;
MANAGED_PUSH applies the host's changed bytes (those that differ from the bytes it last saw), and a push of bytes
the device changed too is the sticky conflict error, never a merge; MANAGED_CONFLICT latches the same error;
MANAGED_DIRTY reports exactly the bytes the device changed since the client last saw them (page digests), never the
host's own pushes; bad requests are cudaErrorInvalidValue; managed memory and CUDA arrays count against a session's
memory limit. Also the digest itself: any change of a page changes its digest."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, HELLO_MEMORY, MANAGED_CONFLICT_ERROR, MANAGED_RUN_HEADER, MANAGED_RUNS
from pyvgpu_daemon import managed

E = ERROR_CODES
PG = 4096
MiB = 1 << 20


def ok(c, op, *args, payload=b""):
    err, result, data = c.call(op, *args, payload=payload)
    assert err == 0, f"{op}{args}: {err}"
    return result, data


def runs(*items: tuple) -> bytes:
    """MANAGED_PUSH runs of (address, the host's bytes[, the bytes as it last saw them: zeros by default])."""
    out = b""
    for a, d, *old in items:
        was = old[0] if old else bytes(len(d))
        out += struct.pack(MANAGED_RUN_HEADER, a, len(d)) + d + was
    return out


def dirty(c) -> list[tuple[int, int]]:
    return [tuple(r) for r in ok(c, "MANAGED_DIRTY", 0)[0][MANAGED_RUNS]]


def test_managed_alloc_push_and_dirty(client):
    size = 10 * PG + 100
    p, _ = ok(client, "MALLOC_MANAGED", 0, size, PG, 0)
    assert p % PG == 0
    rounded = 11 * PG
    assert ok(client, "MEMCPY_DTOH", 0, p, rounded, 0)[1] == bytes(rounded)        # zero-filled, whole pages
    assert dirty(client) == []
    # the host's pushes are not reported back
    ok(client, "MANAGED_PUSH", 0, payload=runs((p + 5, b"hello"), (p + 3 * PG + 10, b"x" * 5000)))
    assert ok(client, "MEMCPY_DTOH", 0, p, 8, 0)[1] == b"\0" * 5 + b"hel"
    assert dirty(client) == []
    # device-side changes are, page by page, clipped to the range
    ok(client, "MEMSET", 0, p + 7 * PG + 1, 0x42, 2 * PG, 0)                     # pages 7, 8, 9
    ok(client, "MEMSET", 0, p + 10 * PG, 1, 4, 0)                                # page 10
    ok(client, "MEMSET", 0, p + 1, 0x6C, 1, 0)                                   # page 0
    assert dirty(client) == [(p, PG), (p + 7 * PG, 4 * PG)]
    assert dirty(client) == []                                                   # now known
    # a page the device changed before a push to it is still reported after the push
    ok(client, "MEMSET", 0, p + 2 * PG, 9, 8, 0)
    ok(client, "MANAGED_PUSH", 0, payload=runs((p + 2 * PG + 100, b"abc")))
    assert dirty(client) == [(p + 2 * PG, PG)]
    # a kernel writing the same bytes the host pushed: pushed pages whose device copy changed are re-sent
    ok(client, "FREE", 0, p)
    assert client.call("MANAGED_PUSH", 0, payload=runs((p, b"z")))[0] == E["cudaErrorInvalidValue"]
    assert dirty(client) == []


def test_managed_attach_reports_everything_once(client):
    a, _ = ok(client, "MALLOC", 0, 1000)
    ok(client, "MEMCPY_HTOD", 0, a, 0, payload=bytes(range(200)) * 5)
    ok(client, "MANAGED_ATTACH", 0, a + 10, 900)
    assert dirty(client) == [(a + 10, 900)]
    assert dirty(client) == []
    ok(client, "MEMSET", 0, a + 500, 1, 1, 0)
    assert dirty(client) == [(a + 10, 900)]                                      # one page (from the range start)
    assert client.call("MANAGED_ATTACH", 0, a + 20, 10)[0] == E["cudaErrorInvalidValue"]   # overlaps
    assert client.call("MANAGED_ATTACH", 0, a + 900, 200)[0] == E["cudaErrorInvalidValue"]  # past the allocation


def test_push_writes_only_changed_bytes_and_refuses_conflicts(client):
    p, _ = ok(client, "MALLOC_MANAGED", 0, 2 * PG, PG, 0)
    ok(client, "MEMSET", 0, p + 8, 0x11, 4, 0)                                  # the device writes bytes 8..11
    # the host's span covers them but changed only 0..3 and 12..15: the device's bytes in between stay
    host = b"AAAA" + bytes(8) + b"BBBB"
    ok(client, "MANAGED_PUSH", 0, payload=runs((p, host)))
    assert ok(client, "MEMCPY_DTOH", 0, p, 16, 0)[1] == b"AAAA" + bytes(4) + b"\x11" * 4 + b"BBBB"
    assert client.call("DEVICE_SYNC", 0)[0] == 0
    assert dirty(client) == [(p, PG)]                                           # the device's change, once
    # both changed byte 9 since they last agreed: an error, nothing written, and it stays until a reset
    ok(client, "MEMSET", 0, p + 9, 0x22, 1, 0)
    was = b"AAAA" + bytes(4) + b"\x11" * 4 + b"BBBB"
    client.call("MANAGED_PUSH", 0, payload=runs((p, b"CCCC" + bytes(4) + b"\x11\x33\x11\x11BBBB", was)),
                reply=False)
    conflict = E[MANAGED_CONFLICT_ERROR]
    assert client.call("DEVICE_SYNC", 0)[0] == conflict
    assert client.call("MEM_GET_INFO", 0)[0] == conflict                        # sticky
    assert client.call("MEMCPY_DTOH", 0, p, 16, 0)[0] == conflict
    ok(client, "DEVICE_RESET", 0)
    q, _ = ok(client, "MALLOC_MANAGED", 0, PG, PG, 0)
    assert client.call("MANAGED_CONFLICT", 0, q + 4, 8)[0] == conflict         # the client's report latches it too
    assert client.call("DEVICE_SYNC", 0)[0] == conflict
    ok(client, "DEVICE_RESET", 0)
    assert client.call("DEVICE_SYNC", 0)[0] == 0


def test_conflicts_are_per_word(client):
    """Host and device changing different bytes of one aligned 4-byte word conflict (the merge would be a value
    neither wrote); different words merge."""
    p, _ = ok(client, "MALLOC_MANAGED", 0, PG, PG, 0)
    ok(client, "MEMSET", 0, p + 5, 0x7F, 1, 0)                                   # byte 1 of word 4..7
    ok(client, "MANAGED_PUSH", 0, payload=runs((p + 8, b"\x01\x00\x00\x00")))   # word 8..11: merges
    assert client.call("DEVICE_SYNC", 0)[0] == 0
    assert ok(client, "MEMCPY_DTOH", 0, p + 4, 8, 0)[1] == b"\x00\x7f\x00\x00\x01\x00\x00\x00"
    client.call("MANAGED_PUSH", 0, payload=runs((p + 4, b"\x02\x00\x00\x00")), reply=False)   # byte 0, same word
    assert client.call("DEVICE_SYNC", 0)[0] == E[MANAGED_CONFLICT_ERROR]
    assert managed.words_hit(6, np.array([0, 0, 1, 0, 0], bool)).tolist() == [False, True]


@pytest.mark.parametrize("args", [(0, PG, 0), (100, 3000, 0), (100, PG, 8), (100, 1 << 20, 0)])
def test_bad_managed_allocations(client, args):
    assert client.call("MALLOC_MANAGED", 0, *args)[0] == E["cudaErrorInvalidValue"]


def test_malformed_pushes(client):
    p, _ = ok(client, "MALLOC_MANAGED", 0, PG, PG, 0)
    for bad in (b"\x01\x02", struct.pack(MANAGED_RUN_HEADER, p, 10) + b"short",
                struct.pack(MANAGED_RUN_HEADER, p, 4) + b"abcd",                         # the old bytes missing
                struct.pack(MANAGED_RUN_HEADER, p, 0), runs((p + PG - 2, b"abcd"))):
        client.call("MANAGED_PUSH", 0, payload=bad, reply=False)
        assert client.call("DEVICE_SYNC", 0)[0] == E["cudaErrorInvalidValue"]
    assert client.call("MEM_GET_INFO", 0)[0] == 0


def test_digest_sees_every_change():
    rng = np.random.default_rng(3)
    page = rng.integers(0, 256, managed.PAGE, dtype=np.uint8)
    base = managed.digest_pages(page.tobytes())
    seen = {tuple(base[0])}
    for i in range(0, managed.PAGE, 97):
        for bit in (0, 7):
            q = page.copy()
            q[i] ^= 1 << bit
            d = tuple(managed.digest_pages(q.tobytes())[0])
            assert d not in seen
            seen.add(d)
    f = page.view(np.float64).copy()
    f[[3, 200]] = -f[[3, 200]]                         # two sign flips: the classic blind spot of linear sums
    assert tuple(managed.digest_pages(f.tobytes())[0]) != tuple(base[0])
    assert managed.digest_pages(b"\0" * 100).shape == (1, 2)


def test_managed_memory_and_arrays_count_against_the_session_limit(daemon_factory):
    d = daemon_factory("--emu-memory", "256M")
    with Client.connect("127.0.0.1", d.port, hello={HELLO_MEMORY: 4 * MiB}) as c:
        ok(c, "MALLOC_MANAGED", 0, 2 * MiB, PG, 0)
        assert c.call("MALLOC_MANAGED", 0, 2 * MiB + 1, PG, 0)[0] == E["cudaErrorMemoryAllocation"]
        arr, _ = ok(c, "ARRAY_CREATE", 0, 32, 0, 0, 0, 2, 512, 512, 0, 0)          # 1 MiB of float
        assert c.call("ARRAY_CREATE", 0, 32, 0, 0, 0, 2, 1024, 512, 0, 0)[0] == E["cudaErrorMemoryAllocation"]
        assert ok(c, "MEM_GET_INFO", 0)[0] == [1 * MiB, 4 * MiB]
        ok(c, "ARRAY_DESTROY", 0, arr)
        assert ok(c, "MEM_GET_INFO", 0)[0] == [2 * MiB, 4 * MiB]
