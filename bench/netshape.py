"""A latency- and bandwidth-shaping TCP proxy on loopback (asyncio), for benchmarks at network round-trip times.

    python bench/netshape.py --target 127.0.0.1:7700 [--port 0] [--rtt-ms 1] [--rate 1G]

prints "listening PORT" once ready; every connection to PORT gets its own connection to the target. Each direction
is a link with a one-way delay of RTT/2 and, with --rate, a line rate in bits per second (1G, 10G, 500M): a piece of
at most PIECE bytes read at time t leaves the link at max(t, link free) + size / rate and is delivered RTT/2 later,
so a copy is paced by the rate and a request waits a round trip for its reply, as on a network. Bytes in the link
are bounded (its bandwidth-delay product plus a router-like queue of QUEUE_BYTES; 32 MiB without a rate): past that
the proxy stops reading that side and TCP's flow control pushes back on the sender.

Loopback only (it listens on 127.0.0.1). Why a timerfd: asyncio's timers wake through epoll's millisecond timeout,
too coarse for a 0.1 ms one-way delay; a timerfd (CLOCK_MONOTONIC, absolute, nanoseconds) watched by the event loop
wakes on time (the kernel's default timer slack is 50 µs). Delivered delays are measured by the benchmark itself
(a ping-pong through the proxy), never assumed.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import socket
import struct
import sys
import time
from collections import deque
from typing import Any, Callable

PIECE_MIN = 16 << 10            # bytes per scheduled piece (more at high rates: about 50 µs of line time each)
QUEUE_BYTES = 4 << 20           # queue beyond the bandwidth-delay product before reading stops
UNPACED_LIMIT = 32 << 20        # bytes in flight without a rate
CLOCK_MONOTONIC, TFD_NONBLOCK, TFD_CLOEXEC, TFD_TIMER_ABSTIME = 1, 0o4000, 0o2000000, 1


def parse_rate(text: str | None) -> float:
    """'1G' → 1e9 bits/s (decimal units, as line rates are given); None or '0' → 0 (no rate)."""
    if not text or text == "0":
        return 0.0
    units = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    t = text.strip().upper().removesuffix("BPS").removesuffix("B")
    mult = units.get(t[-1], 1.0)
    return float(t[:-1] if t[-1] in units else t) * mult


class Timer:
    """One absolute CLOCK_MONOTONIC timer watched by the loop: arm(t) calls fire() once time.monotonic() >= t."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fire: Callable[[], None]) -> None:
        self.loop, self.fire = loop, fire
        self.fd = -1
        self.handle: asyncio.TimerHandle | None = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._settime = libc.timerfd_settime
            fd = libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
            if fd >= 0:
                self.fd = fd
                loop.add_reader(fd, self._ready)
        except (OSError, AttributeError):
            self.fd = -1                           # no timerfd: the loop's own (millisecond) timers

    def arm(self, at: float) -> None:
        if self.fd < 0:
            if self.handle is not None:
                self.handle.cancel()
            self.handle = self.loop.call_at(self.loop.time() + max(0.0, at - time.monotonic()), self.fire)
            return
        sec = int(at)
        nsec = max(1, int((at - sec) * 1e9))       # 0/0 would disarm it
        spec = struct.pack("qqqq", 0, 0, sec, nsec)
        buf = ctypes.create_string_buffer(spec)
        self._settime(self.fd, TFD_TIMER_ABSTIME, buf, None)

    def _ready(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            return
        self.fire()

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1


class Link:
    """One direction: bytes read from `src` are delivered to `dst` after the line time and the one-way delay."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float, rate_bps: float) -> None:
        self.delay = delay_s
        self.rate = rate_bps / 8.0                 # bytes per second; 0: no rate
        self.piece = max(PIECE_MIN, int(self.rate * 50e-6)) if self.rate else 1 << 20
        self.limit = int(self.rate * delay_s) + QUEUE_BYTES if self.rate else UNPACED_LIMIT
        self.queue: deque[tuple[float, bytes | memoryview]] = deque()
        self.queued = 0
        self.free_at = 0.0
        self.src: asyncio.Transport | None = None
        self.dst: asyncio.Transport | None = None
        self.paused = False
        self.eof = False
        self.timer = Timer(loop, self.deliver)

    def feed(self, data: bytes) -> None:
        now = time.monotonic()
        if not self.rate:
            if not self.delay and not self.queue and self.dst is not None:
                self.dst.write(data)                # no shaping at all: straight through
                return
            self.queue.append((now + self.delay, data))
            self.queued += len(data)
        else:
            view = memoryview(data)
            for i in range(0, len(data), self.piece):
                part = view[i:i + self.piece]
                self.free_at = max(now, self.free_at) + len(part) / self.rate
                self.queue.append((self.free_at + self.delay, part))
                self.queued += len(part)
        if self.queued > self.limit and not self.paused and self.src is not None:
            self.paused = True
            self.src.pause_reading()
        self.timer.arm(self.queue[0][0])

    def close_after(self) -> None:
        """The source sent EOF: forward it once everything before it was delivered."""
        self.eof = True
        if not self.queue:
            self._eof()

    def _eof(self) -> None:
        if self.dst is not None and not self.dst.is_closing() and self.dst.can_write_eof():
            self.dst.write_eof()

    def deliver(self) -> None:
        if self.dst is None:
            return                                 # the other side is not connected yet: attach() delivers
        now = time.monotonic()
        out = []
        while self.queue and self.queue[0][0] <= now:
            _, part = self.queue.popleft()
            out.append(part)
            self.queued -= len(part)
        if out and self.dst is not None and not self.dst.is_closing():
            self.dst.writelines(out)
        if self.paused and self.queued <= self.limit // 2 and self.src is not None:
            self.paused = False
            self.src.resume_reading()
        if self.queue:
            self.timer.arm(self.queue[0][0])
        elif self.eof:
            self._eof()

    def close(self) -> None:
        self.timer.close()


class Side(asyncio.Protocol):
    """One socket of a proxied connection: what it reads goes into `out` (the link toward the other socket)."""

    def __init__(self, out: Link, inbound: Link, on_lost: Callable[[], None]) -> None:
        self.out, self.inbound, self.on_lost = out, inbound, on_lost
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.out.src = transport
        self.inbound.dst = transport
        if self.inbound.queue:
            self.inbound.deliver()                 # what arrived before this side was connected

    def data_received(self, data: bytes) -> None:
        self.out.feed(data)

    def eof_received(self) -> bool:
        self.out.close_after()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost()


async def serve(target: tuple[str, int], port: int, rtt_ms: float, rate_bps: float,
                ready: Callable[[int], None]) -> None:
    loop = asyncio.get_running_loop()
    delay = rtt_ms / 2000.0

    class Accepted(asyncio.Protocol):
        def __init__(self) -> None:
            self.up = Link(loop, delay, rate_bps)      # client -> target
            self.down = Link(loop, delay, rate_bps)    # target -> client
            self.client = Side(self.up, self.down, self.lost)
            self.upstream: asyncio.Transport | None = None

        def connection_made(self, transport: Any) -> None:
            self.client.connection_made(transport)
            transport.pause_reading()
            loop.create_task(self.connect(transport))

        async def connect(self, transport: Any) -> None:
            try:
                up, _ = await loop.create_connection(lambda: Side(self.down, self.up, self.lost), *target)
            except OSError:
                transport.close()
                return
            self.upstream = up
            transport.resume_reading()

        def data_received(self, data: bytes) -> None:
            self.client.data_received(data)

        def eof_received(self) -> bool:
            return self.client.eof_received()

        def lost(self) -> None:
            for t in (self.client.transport, self.upstream):
                if t is not None and not t.is_closing():
                    t.close()
            self.up.close()
            self.down.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self.lost()

    server = await loop.create_server(Accepted, "127.0.0.1", port)
    ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, metavar="HOST:PORT")
    ap.add_argument("--port", type=int, default=0, help="listening port on 127.0.0.1 (0: any free one)")
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="added round-trip time in ms")
    ap.add_argument("--rate", default=None, help="line rate per direction, bits/s (1G, 10G, 500M; default none)")
    a = ap.parse_args(argv)
    host, _, port = a.target.rpartition(":")
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    try:   # timers on time: the kernel may otherwise fire them up to 50 µs late (PR_SET_TIMERSLACK = 29, 1 ns)
        ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass

    def ready(p: int) -> None:
        print(f"listening {p}", flush=True)

    try:
        asyncio.run(serve((host, int(port)), a.port, a.rtt_ms, parse_rate(a.rate), ready))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
