"""Peer ops at the protocol level: copies between the devices of one daemon (MEMCPY_PEER) and the two halves of a
copy between daemons (PEER_EXPORT's single-use, bounded, per-session tickets; PEER_FETCH; PEER_PULL), with CUDA's
error codes for bad devices, ranges, tickets and unreachable peers."""
from __future__ import annotations

import os
import time

import pytest

from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, MAX_PEER_CHUNK, MAX_PEER_HELD, PEER_TICKET

from harness import wait_no_sessions

E = ERROR_CODES


def ok(c, op, *args, payload=b""):
    err, result, data = c.call(op, *args, payload=payload)
    assert err == 0, f"{op}{args}: {err}"
    return result, data


@pytest.fixture
def two_dev(daemon_factory):
    d = daemon_factory("--emu-devices", "2")
    with Client.connect("127.0.0.1", d.port) as c:
        yield c


def test_memcpy_peer_between_devices_of_one_daemon(two_dev):
    c = two_dev
    data = os.urandom(100_000)
    a, _ = ok(c, "MALLOC", 0, len(data))
    b, _ = ok(c, "MALLOC", 1, len(data))
    ok(c, "MEMCPY_HTOD", 0, a, 0, payload=data)
    ok(c, "MEMCPY_PEER", 1, b + 10, 0, a + 20, 5000, 0)
    assert ok(c, "MEMCPY_DTOH", 1, b + 10, 5000, 0)[1] == data[20:5020]
    assert c.call("MEMCPY_PEER", 1, b, 1, b, 10, 0)[0] == E["cudaErrorInvalidDevice"]        # itself
    assert c.call("MEMCPY_PEER", 1, b, 7, a, 10, 0)[0] == E["cudaErrorInvalidDevice"]        # no such device
    assert c.call("MEMCPY_PEER", 1, b, 0, a + len(data) - 5, 10, 0)[0] == E["cudaErrorInvalidValue"]
    assert c.call("MEMCPY_PEER", 1, a, 0, a, 10, 0)[0] == E["cudaErrorInvalidValue"]         # dst is not dev 1's
    # emulated kernels reach the other device's memory once peer access is enabled
    assert c.devices[0]["peers"] == [1] and c.devices[1]["peers"] == [0]
    ok(c, "PEER_ENABLE", 0, 1)
    assert c.call("PEER_ENABLE", 0, 1)[0] == E["cudaErrorPeerAccessAlreadyEnabled"]
    ok(c, "PEER_DISABLE", 0, 1)
    assert c.call("PEER_DISABLE", 0, 1)[0] == E["cudaErrorPeerAccessNotEnabled"]
    assert c.call("PEER_ENABLE", 0, 7)[0] == E["cudaErrorInvalidDevice"]


def test_tickets(daemon_factory):
    d = daemon_factory()
    with Client.connect("127.0.0.1", d.port) as c, Client.connect("127.0.0.1", d.port) as other:
        data = os.urandom(3000)
        a, _ = ok(c, "MALLOC", 0, 4096)
        ok(c, "MEMCPY_HTOD", 0, a, 0, payload=data)
        t = ok(c, "PEER_EXPORT", 0, a, 3000)[0][PEER_TICKET]
        assert isinstance(t, bytes) and len(t) == 16
        ok(c, "MEMSET", 0, a, 0, 4096, 0)                   # the export is a snapshot
        assert ok(other, "PEER_FETCH", t)[1] == data         # any authenticated session holding the ticket
        assert other.call("PEER_FETCH", t)[0] == E["cudaErrorInvalidValue"]     # once
        assert other.call("PEER_FETCH", b"x" * 16)[0] == E["cudaErrorInvalidValue"]
        assert other.call("PEER_FETCH", "not bytes")[0] == E["cudaErrorInvalidValue"]
        assert c.call("PEER_EXPORT", 0, a, 5000)[0] == E["cudaErrorInvalidValue"]               # past the end
        assert c.call("PEER_EXPORT", 0, a, 0)[0] == E["cudaErrorInvalidValue"]
        # a session's tickets go with it
        t2 = ok(c, "PEER_EXPORT", 0, a, 100)[0][PEER_TICKET]
    assert wait_no_sessions(d.port)["others"] == []         # the session end runs on the daemon
    with Client.connect("127.0.0.1", d.port) as late:
        assert late.call("PEER_FETCH", t2)[0] == E["cudaErrorInvalidValue"]


def test_held_ticket_bytes_are_bounded(daemon_factory):
    d = daemon_factory()
    with Client.connect("127.0.0.1", d.port) as c:
        a, _ = ok(c, "MALLOC", 0, MAX_PEER_CHUNK)
        tickets = [ok(c, "PEER_EXPORT", 0, a, MAX_PEER_CHUNK)[0][PEER_TICKET]
                   for _ in range(MAX_PEER_HELD // MAX_PEER_CHUNK)]
        assert c.call("PEER_EXPORT", 0, a, 1)[0] == E["cudaErrorMemoryAllocation"]
        assert len(ok(c, "PEER_FETCH", tickets[0])[1]) == MAX_PEER_CHUNK
        ok(c, "PEER_EXPORT", 0, a, 1)                        # room again
        assert c.call("PEER_EXPORT", 0, a, MAX_PEER_CHUNK + 1)[0] == E["cudaErrorInvalidValue"]


def test_peer_pull(daemon_factory):
    src, dst = daemon_factory(), daemon_factory()
    with Client.connect("127.0.0.1", src.port) as s, Client.connect("127.0.0.1", dst.port) as t:
        data = os.urandom(50_000)
        a, _ = ok(s, "MALLOC", 0, len(data))
        ok(s, "MEMCPY_HTOD", 0, a, 0, payload=data)
        b, _ = ok(t, "MALLOC", 0, len(data))
        tk = ok(s, "PEER_EXPORT", 0, a, len(data))[0][PEER_TICKET]
        ok(t, "PEER_PULL", 0, b, len(data), "127.0.0.1", src.port, tk)
        assert ok(t, "MEMCPY_DTOH", 0, b, len(data), 0)[1] == data
        assert t.call("PEER_PULL", 0, b, len(data), "127.0.0.1", src.port, tk)[0] == E["cudaErrorInvalidValue"]
        tk = ok(s, "PEER_EXPORT", 0, a, 100)[0][PEER_TICKET]
        assert t.call("PEER_PULL", 0, b, 200, "127.0.0.1", src.port, tk)[0] == E["cudaErrorInvalidValue"]  # size
        from harness import free_port
        t0 = time.monotonic()
        err = t.call("PEER_PULL", 0, b, 100, "127.0.0.1", free_port(), tk)[0]
        assert err == E["cudaErrorDevicesUnavailable"] and time.monotonic() - t0 < 10
        assert t.call("PEER_PULL", 0, b + len(data), 100, "127.0.0.1", src.port, tk)[0] == E["cudaErrorInvalidValue"]
        assert t.call("PEER_PULL", 0, b, 100, "", src.port, tk)[0] == E["cudaErrorInvalidValue"]
    assert f"fetched {len(data)} B from peer daemon 127.0.0.1:{src.port}" in dst.log_text()
