"""A connection that closes at any point ends its session cleanly (issue 23, part 2): one log line naming the
session, no traceback, its memory released, and the daemon keeps serving everyone else.

A scripted client conversation (handshake, allocation, a bulk host-to-device copy received straight into device
memory, a memset, a small copy with a reply, a 16 MiB device-to-host reply sent from device memory, more requests
queued behind it) is cut at every frame boundary and inside every frame's prefix, header and payload, with an orderly
close (FIN) and an abortive one (RST); the last cut sends everything and closes without reading the replies (the
daemon is writing then). After each cut the session must be gone within a few seconds; at the end the daemon's
memory must not have grown by what the sessions held.
"""
from __future__ import annotations

import asyncio
import re
import socket
import ssl
import struct
import time

import pytest

from harness import ptx_of, rss
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.tls import ClientTLS
from pyvgpu_daemon.stream import FrameStream
from pyvgpu.protocol import OP_BY_NAME, PROTOCOL_VERSION

MiB = 1 << 20
HELD = 16 * MiB                      # what each session allocates and fills


def frame_bytes(op: str, req_id: int, args: list, payload: bytes = b"") -> bytes:
    return b"".join(bytes(p) for p in wire.encode_request(OP_BY_NAME[op].code, req_id, args, payload))


def conversation(ptr: int) -> list[tuple[bytes, int]]:
    """The client's frames and, for each, the length of its prefix + header (the rest is payload)."""
    frames = [
        frame_bytes("HELLO", 1, [{"version": PROTOCOL_VERSION, "client": "cut"}]),
        frame_bytes("MALLOC", 2, [0, HELD]),
        frame_bytes("MEMCPY_HTOD", 0, [0, ptr, 0], b"\x11" * MiB),          # lands in device memory
        frame_bytes("MEMSET", 0, [0, ptr + MiB, 0x22, HELD - MiB, 0]),
        frame_bytes("MEMCPY_HTOD", 3, [0, ptr, 0], b"\x33" * (32 << 10)),   # through the read buffer, answered
        frame_bytes("MEMCPY_DTOH", 4, [0, ptr, HELD, 0]),                   # 16 MiB sent from device memory
        frame_bytes("MEMCPY_DTOH", 5, [0, ptr, MiB, 0]),
        frame_bytes("DEVICE_SYNC", 6, [0]),
    ]
    return [(f, 4 + struct.unpack_from("<I", f)[0]) for f in frames]


def cut_points(frames: list[tuple[bytes, int]]) -> list[int]:
    points, at = set(), 0
    for f, head in frames:
        points.update({at, at + 2, at + head // 2, at + head})
        if len(f) > head:
            points.add(at + head + (len(f) - head) // 2)
        at += len(f)
    points.add(at)
    return sorted(points)


def others(status: dict) -> list[dict]:
    return [s for s in status["sessions"] if not s["self"]]


def wait_alone(monitor: Client, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while True:
        left = others(monitor.status())
        if not left:
            return
        assert time.monotonic() < deadline, f"sessions left behind: {left}"
        time.sleep(0.02)


def first_pointer(port: int) -> int:
    """Where a new session's first allocation lands (each session has its own address window)."""
    with Client.connect("127.0.0.1", port, tls=None) as c:
        ptr = c.check("MALLOC", 0, HELD)[0]
        c.check("FREE", 0, ptr)
    return ptr


def run_cut(port: int, stream: bytes, k: int, rst: bool, tls: bool = False) -> None:
    """Connect, send the first k bytes of the client's side, close (RST: abortively)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = raw
    try:
        if rst:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if k and tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        if k:
            wire.recv_header(s)                   # the server's hello
            s.sendall(stream[:k])
            time.sleep(0.03)                      # let the daemon reach the wait this cut interrupts
    finally:
        raw.close()


def check_log(log: str, cuts: int) -> None:
    """No traceback, nothing above INFO, one line per session saying it ended (and why)."""
    assert "Traceback" not in log and "internal error" not in log, log[-4000:]
    assert not re.search(r" (WARNING|ERROR|CRITICAL) ", log), log[-4000:]
    ended = re.findall(r"session (\d+): (?:ended \(|connection from .* ended before a session began)", log)
    assert len(ended) == len(set(ended)), "a session's end logged twice"
    assert len(ended) >= cuts, (len(ended), cuts)


def test_connection_cut_anywhere(daemon_factory):
    d = daemon_factory("--emu-devices", "1", "--compress", "off")
    ptr = first_pointer(d.port)
    frames = conversation(ptr)
    stream = b"".join(f for f, _ in frames)
    points = cut_points(frames)
    assert len(points) > 25
    with Client.connect("127.0.0.1", d.port, tls=None) as monitor:
        for k in points[:6]:                      # warm-up: the daemon's own memory settles first
            run_cut(d.port, stream, k, False)
            wait_alone(monitor)
        base = rss(d.proc.pid)
        cuts = 0
        for rst in (False, True):
            for k in points:
                run_cut(d.port, stream, k, rst)
                wait_alone(monitor)
                cuts += 1
        grown = rss(d.proc.pid) - base
        # the daemon still serves: a new session works at once
        with Client.connect("127.0.0.1", d.port, tls=None) as c:
            p = c.check("MALLOC", 0, MiB)[0]
            c.call("MEMCPY_HTOD", 0, p, 0, payload=b"\x7f" * MiB)
            assert c.check("MEMCPY_DTOH", 0, p, MiB, 0)[1] == b"\x7f" * MiB
    check_log(d.log_text(), cuts)
    assert grown < 4 * HELD, f"the daemon grew by {grown >> 20} MiB over {cuts} cut sessions of {HELD >> 20} MiB"


def test_tls_connection_cut_anywhere(daemon_factory, tls_pair):
    """The same cuts over TLS (a closing TLS transport fails differently), and connections that close inside the TLS
    handshake itself."""
    d = daemon_factory("--emu-devices", "1", "--compress", "off", "--tls-cert", str(tls_pair.cert), "--tls-key",
                       str(tls_pair.key))
    tls = ClientTLS(None, frozenset({tls_pair.fingerprint}))
    with Client.connect("127.0.0.1", d.port, tls=tls) as c:
        ptr = c.check("MALLOC", 0, HELD)[0]
        c.check("FREE", 0, ptr)
    frames = conversation(ptr)
    stream = b"".join(f for f, _ in frames)
    points = cut_points(frames)[::3] + [len(stream)]
    cuts = 0
    with Client.connect("127.0.0.1", d.port, tls=tls) as monitor:
        for rst in (False, True):
            for k in [0] + points:
                run_cut(d.port, stream, k, rst, tls=True)
                wait_alone(monitor)
                cuts += 1
            for junk in (b"\x16\x03\x01\x02\x00\x01", b"GET / HTTP/1.0\r\n\r\n"):   # a torn ClientHello, not TLS
                raw = socket.create_connection(("127.0.0.1", d.port), timeout=10)
                if rst:
                    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                raw.sendall(junk)
                time.sleep(0.03)
                raw.close()
                wait_alone(monitor)
    log = d.log_text()
    assert "Traceback" not in log and "internal error" not in log, log[-4000:]
    ended = re.findall(r"session (\d+): ended \(", log)
    assert len(ended) == len(set(ended)) and len(ended) >= cuts - 2 * 3, log[-3000:]


SPIN = "_Z4spinPii"                  # tests/cuda/api_parallel.cu: spin(int *out, int iters), one block


def test_connection_cut_while_waiting_for_the_device(daemon_factory):
    """A session whose request queue is full behind a long kernel (the daemon waits for its device before reading
    on) is cut: it ends at once, its kernel is cancelled and its memory released."""
    d = daemon_factory("--emu-devices", "1", "--compress", "off", "--emu-slowdown", "200")
    with Client.connect("127.0.0.1", d.port, tls=None) as monitor:
        for rst in (False, True):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
            c = Client(s, "127.0.0.1", d.port)
            c._handshake(None, None, "cut-busy", PROTOCOL_VERSION, {})
            info = c.check("MODULE_LOAD", 0, 1, payload=ptx_of("api_parallel.cu"))[0]
            out = c.check("MALLOC", 0, HELD)[0]
            c.call("MEMSET", 0, out, 1, HELD, 0, reply=False)
            func = info["kernels"][SPIN]["id"]
            c.call("LAUNCH", 0, func, [1, 1, 1], [256, 1, 1], 0, 0, payload=struct.pack("<Qi4x", out, 1 << 20),
                   reply=False)
            for _ in range(5000):                # more than the session's job queue holds (4096)
                c.call("MEMSET", 0, out, 2, 4096, 0, reply=False)
            busy = others(monitor.status())
            assert busy and busy[0]["devices"][0]["memory"] == HELD
            if rst:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            t0 = time.monotonic()
            s.close()
            wait_alone(monitor, within=5)
            assert time.monotonic() - t0 < 5
    check_log(d.log_text(), 2)


class _ClosedSocket:
    """uvloop's socket of a transport whose fd closed: fileno() -1, and setsockopt raises ValueError."""
    family = socket.AF_INET

    def fileno(self) -> int:
        return -1

    def setsockopt(self, *args) -> None:
        raise ValueError("negative file descriptor")


class _Transport(asyncio.Transport):
    def __init__(self, sock) -> None:
        super().__init__()
        self.sock = sock
        self.closing = False

    def get_extra_info(self, name, default=None):
        return {"socket": self.sock, "peername": ("127.0.0.1", 9)}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def is_closing(self):
        return self.closing

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def test_stream_calls_on_a_socket_closed_under_them():
    """arrived() and SO_RCVLOWAT changes on a socket whose fd is gone: no exception (ValueError or OSError), the
    stream carries on with what it buffered."""
    async def main():
        for sock in (_ClosedSocket(), socket.socket()):
            if isinstance(sock, socket.socket):
                sock.close()                      # the standard library's closed socket: OSError (EBADF)
            t = _Transport(sock)
            s = FrameStream(lambda _s: None)
            s.connection_made(t)
            assert s.peer == "127.0.0.1:9"
            buf = s.get_buffer(-1)
            buf[:3] = b"abc"
            s.buffer_updated(3)
            assert s.arrived() == 3
            t.closing = True
            assert s.arrived() == 3
            s._set_lowat(1 << 20)                  # as a large payload's read does
            s._set_lowat(1)
    asyncio.run(main())
