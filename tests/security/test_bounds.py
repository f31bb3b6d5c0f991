"""What a peer can make the daemon spend is bounded (issue 11, part 1), measured on the daemon's resident memory.

Each case grew the daemon without bound before: a frame announcing a payload got a zero-filled buffer before any
byte arrived; device-to-host replies nobody reads piled up in the write buffer. Other sessions notice nothing.
"""
from __future__ import annotations

import socket
import time

from harness import frame, raw_session, rss
from pyvgpu import wire
from pyvgpu.client import Client, HandshakeError
from pyvgpu.protocol import ERR_UNAVAILABLE, OP_BY_NAME


def request(op: str, req_id: int, *args, payload_len: int = 0) -> bytes:
    return frame([OP_BY_NAME[op].code, req_id, payload_len, *args])


def test_announced_payloads_cost_nothing_until_they_arrive(daemon):
    victim = Client.connect("127.0.0.1", daemon.port)
    ptr = victim.call("MALLOC", 0, 4096)[1]
    victim.call("MEMCPY_HTOD", 0, ptr, 0, payload=b"v" * 4096)
    time.sleep(0.3)
    before = rss(daemon.proc.pid)
    socks = []
    try:
        for k in range(4):                     # four sessions each announce 512 MiB and send 1 KiB of it
            s = raw_session(daemon.port)
            s.sendall(request("MEMCPY_HTOD", 0, 0, 0, 0, payload_len=512 << 20) + b"x" * 1024)
            socks.append(s)
        time.sleep(1.0)
        grown = rss(daemon.proc.pid) - before
        assert grown < 64 << 20, f"daemon grew {grown >> 20} MiB for 4 x 512 MiB announced, 4 KiB sent"
        assert victim.call("MEMCPY_DTOH", 0, ptr, 4096, 0)[2] == b"v" * 4096     # others are served meanwhile
    finally:
        for s in socks:
            s.close()
        victim.close()


def test_unread_replies_stay_within_the_reply_bound(daemon):
    c = Client.connect("127.0.0.1", daemon.port)
    size = 16 << 20
    ptr = c.call("MALLOC", 0, size)[1]
    c.call("MEMSET", 0, ptr, 0x33, size, 0)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    time.sleep(0.3)
    before = rss(daemon.proc.pid)
    # 64 requests for 16 MiB each (1 GiB of replies), none of them read
    c.sock.sendall(b"".join(request("MEMCPY_DTOH", 100 + i, 0, ptr, size, 0) for i in range(64)))
    time.sleep(3.0)
    grown = rss(daemon.proc.pid) - before
    assert grown < 160 << 20, f"daemon grew {grown >> 20} MiB holding unread replies (bound: 64 MiB + one reply)"
    with Client.connect("127.0.0.1", daemon.port) as other:        # another session notices nothing
        assert other.call("MEM_GET_INFO", 0)[0] == 0
    # the client that reads gets all of them, in order, intact
    for i in range(64):
        rep, payload, _ = wire.recv_reply(c.sock)
        assert (rep.req_id, rep.err, len(payload)) == (100 + i, 0, size) and payload[:4] == b"3333"
    c.close()


def test_a_client_that_reads_nothing_is_ended(daemon_factory):
    d = daemon_factory("--frame-timeout", "1")
    c = Client.connect("127.0.0.1", d.port)
    ptr = c.call("MALLOC", 0, 16 << 20)[1]
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    c.sock.sendall(b"".join(request("MEMCPY_DTOH", 100 + i, 0, ptr, 16 << 20, 0) for i in range(16)))
    t0 = time.monotonic()
    while "client read none of its" not in d.log_text() and time.monotonic() - t0 < 15:
        time.sleep(0.1)
    assert "client read none of its" in d.log_text()
    c.close(goodbye=False)
    with Client.connect("127.0.0.1", d.port) as other:
        assert [s for s in other.status()["sessions"] if not s["self"]] == []


def test_sessions_are_bounded(daemon_factory):
    d = daemon_factory("--max-sessions", "2")
    a = Client.connect("127.0.0.1", d.port)
    b = Client.connect("127.0.0.1", d.port)
    try:
        try:
            Client.connect("127.0.0.1", d.port)
            raise AssertionError("a third session was accepted")
        except HandshakeError as exc:
            assert exc.code == ERR_UNAVAILABLE and "daemon busy" in str(exc)
        assert a.call("MEM_GET_INFO", 0)[0] == 0
    finally:
        b.close()
    time.sleep(0.3)
    with Client.connect("127.0.0.1", d.port) as c:             # room again
        assert c.call("MEM_GET_INFO", 0)[0] == 0
    a.close()
