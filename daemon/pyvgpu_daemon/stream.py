"""FrameStream: one client connection as an asyncio protocol that reads frames with deadlines and writes replies.

Why not asyncio streams: StreamReader copies every byte into a growing bytearray and again into the bytes it
returns; for bulk payloads that ran at a fifth of loopback speed. Here a large read hands the transport the
destination buffer itself (BufferedProtocol.get_buffer), so a 16 MiB copy lands where it will be used with one
copy by the kernel. Small frames go through a compacting scratch buffer that starts small and grows only while a
client pipelines many frames.

Bounds (what a peer can make this object spend):
- a payload buffer is `np.empty`: malloc'd, never zero-filled, so its pages are committed as the bytes land (glibc
  serves sizes above the mmap threshold from fresh mappings; smaller ones from the heap), not when a header
  merely announces a size;
- the scratch buffer stops the socket being read once PAUSE_AT unconsumed bytes wait in it, and reading resumes
  once they are consumed down to RESUME_AT or the reader waits for more (flow_control.py: one mechanism, so a
  session never waits for input with its socket unread);
- every wait for bytes has a deadline (idle before a frame, the frame's own deadline once it started); a missed
  deadline raises TimeoutError and the server ends the session.

Under TLS, large replies are handed to the TLS transport TLS_SLICE bytes at a time, the next slice once the previous
ones are on their way (resume_writing). The TLS layer (uvloop's SSLProtocol) encrypts whatever it is given into one
memory buffer and copies that out before sending the first byte: a 64 MiB reply cost 3 × 64 MiB of fresh memory
(page faults, a growing buffer reallocated and cleansed) and sent nothing until all of it was encrypted. The slices
not yet handed over count as unsent bytes (write_buffer_size) and keep the writer paused, so drain() still means "all
sent" (bench/README.md, "TLS").
"""
from __future__ import annotations

import asyncio
import collections
import fcntl
import socket
import struct
import termios
import time
from typing import Any

import numpy as np

from pyvgpu import wire
from pyvgpu.protocol import FRAME_PREFIX_BYTES, MAX_HEADER_BYTES
from pyvgpu_daemon.flow_control import FlowControl

_PREFIX = struct.Struct("<I")


class Draining(Exception):
    """The daemon is shutting down: this connection reads no further frames."""


class StreamTimeout(Exception):
    """A read missed its deadline (idle client, trickled frame); the message says which."""


class ConnectionClosed(ConnectionError):
    """The peer closed the connection inside a frame; the message says where."""


class FrameStream(asyncio.BufferedProtocol):
    SCRATCH_MIN = 64 << 10            # scratch buffer of a quiet connection
    SCRATCH_KEEP = 256 << 10          # a scratch buffer grown past this is dropped once empty
    DIRECT_MIN = 64 << 10             # reads at least this large go straight into their own buffer
    PAUSE_AT = 64 << 10               # unconsumed scratch bytes before the socket stops being read: a thousand
                                      # pipelined small frames, and little of a bulk payload that arrives before
                                      # its header is parsed (the rest lands in its own buffer, or device memory)
    RESUME_AT = 16 << 10              # ... and reading resumes once they are consumed down to this
    LOWAT_MAX = 1 << 20               # while a large payload arrives, wake for no less than this (SO_RCVLOWAT)
    WRITE_HIGH = 64 << 10             # unsent reply bytes above which the writer counts as paused; it resumes only
                                      # once everything is sent (low water 0), so drain() means "all sent" (a reply
                                      # sent straight from device memory relies on it: connection.py)
    TLS_SLICE = 256 << 10             # under TLS, replies reach the TLS transport in slices of at most this

    def __init__(self, on_connect: Any) -> None:
        self._on_connect = on_connect
        self.peer = "?"                   # the peer's address and port, as text
        self.peer_host = "?"              # its address alone (admission.py bounds connections per address)
        self._buf = bytearray(self.SCRATCH_MIN)
        self._lo = 0
        self._hi = 0
        self._target: memoryview | None = None
        self._tpos = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._draining = False
        self._flow: FlowControl | None = None     # pauses/resumes the transport (made with it)
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed: asyncio.Future[None] | None = None     # done when the connection is lost
        self._sock: Any = None            # the plain TCP socket (None under TLS), for SO_RCVLOWAT
        self._lowat = 1
        # Set by the server once the session is established: called when bytes arrive while the reader waits for
        # a new frame, to handle the complete frames it can without waking the reader (Connection.frames_now).
        self.on_data: Any = None
        self._parked = False              # the reader waits for the first byte of a frame
        self.handled_at = 0.0             # loop time on_data last handled a frame (activity for the idle timeout)
        self.last_write = time.monotonic()
        self._tls = False                 # the transport is uvloop's/asyncio's TLS layer
        self._slices: collections.deque[Any] = collections.deque()    # TLS: reply bytes not handed over yet
        self._sliced = 0                  # ... their size
        self._transport_paused = False    # the transport asked us to stop writing (pause_writing)
        self.capture: Any = None          # a binary file that receives every byte received (PYVGPU_DAEMON_CAPTURE)
        self.abort_handshake: Any = None  # cancels its TLS handshake while there is no transport (tls_accept.py)
        self.accepted_at: float | None = None   # loop time the connection was accepted (the handshake's deadline)

    # -- protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._flow = FlowControl(self.transport, self.PAUSE_AT, self.RESUME_AT, self.WRITE_HIGH)
        if self.peer_host == "?":
            self.set_peer(transport.get_extra_info("peername"))
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, ValueError):     # already closed: the session ends at its first read
                pass
            if transport.get_extra_info("sslcontext") is None:
                self._sock = sock
        self._tls = transport.get_extra_info("sslcontext") is not None
        # the loop, kept: asyncio.get_running_loop() makes a getpid() system call each time (per frame here)
        self.loop = asyncio.get_running_loop()
        if self.accepted_at is None:
            self.accepted_at = self.loop.time()
        self.closed = self.loop.create_future()
        self._on_connect(self)

    def set_peer(self, peer: Any) -> None:
        """The peer's address (kept: a socket that closed has no peer name any more)."""
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "an unknown peer (gone at once)"
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else "?"

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._target is not None:
            return self._target[self._tpos:]
        if self._hi == len(self._buf):
            if self._lo:
                n = self._hi - self._lo
                self._buf[:n] = self._buf[self._lo:self._hi]
                self._lo, self._hi = 0, n
            else:
                self._buf.extend(bytes(len(self._buf)))
        return memoryview(self._buf)[self._hi:]

    def _set_lowat(self, n: int) -> None:
        """Wake the loop only once n bytes are readable. A large payload otherwise arrives in a wake-up (and a
        Python callback) per ~64 KiB; the kernel's copy is the same either way."""
        if self._sock is not None and n != self._lowat:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
                self._lowat = n
            except (OSError, ValueError):     # closed under us (uvloop's socket then has fd -1: ValueError)
                self._sock = None

    def buffer_updated(self, nbytes: int) -> None:
        if self.capture is not None:
            self._record(nbytes)
        if self._target is not None:
            self._tpos += nbytes
            left = len(self._target) - self._tpos
            if left <= 0:
                self._target = None       # full: whatever arrives next belongs to the following frame
                self._set_lowat(1)
            elif left < self._lowat:
                self._set_lowat(left)     # never wait for bytes beyond the payload
        else:
            self._hi += nbytes
            if self._parked and self.on_data is not None and not self._draining:
                self.on_data()            # consumes what it handles (_advance steers reading)
                if not self._buffered():
                    return                # all handled: the reader keeps waiting for the next frame
            if self._flow is not None:
                self._flow.reading(self._hi - self._lo, False)    # the reader is woken below and consumes first
        self._wake()

    def _record(self, nbytes: int) -> None:
        """The bytes just received, to the capture file (PYVGPU_DAEMON_CAPTURE; a failed write stops capturing)."""
        src = self._target[self._tpos:self._tpos + nbytes] if self._target is not None else \
            memoryview(self._buf)[self._hi:self._hi + nbytes]
        try:
            self.capture.write(src)
        except (OSError, ValueError):
            self.capture = None

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._wake()
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)
        self._slices.clear()
        self._sliced = 0
        if self._flow is not None:
            self._flow.lost()

    def pause_writing(self) -> None:
        self._transport_paused = True
        if self._flow is not None:
            self._flow.pause_writing()

    def resume_writing(self) -> None:
        self._transport_paused = False
        if self._slices:
            self._feed()
        if self._flow is not None and not self._slices and not self._transport_paused:
            self._flow.resume_writing()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @staticmethod
    def _expire(fut: asyncio.Future[None]) -> None:
        if not fut.done():
            fut.set_exception(TimeoutError())

    async def _wait(self, deadline: float | None) -> None:
        """Until more bytes, EOF or a drain request; TimeoutError at `deadline` (loop time)."""
        if self._draining:
            raise Draining()
        if self._flow is not None:
            self._flow.reading(self._hi - self._lo, True)     # whoever waits for bytes must be able to get them
        loop = self.event_loop()
        self._waiter = fut = loop.create_future()
        timer = loop.call_at(deadline, self._expire, fut) if deadline is not None else None
        try:
            await fut
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        if self._draining:
            raise Draining()

    def event_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop if self.loop is not None else asyncio.get_running_loop()

    def stop_reading(self) -> None:
        """Daemon shutdown: the next (or current) wait for bytes raises Draining."""
        self._draining = True
        self._wake()

    # -- reader side
    def _buffered(self) -> int:
        return self._hi - self._lo

    def arrived(self) -> int:
        """Bytes received and not yet read: this buffer's and the kernel's socket buffer's (FIONREAD). A transfer's
        rate is measured on the bytes that arrive after this (connection.py's link-rate samples)."""
        n = self._buffered()
        sock = self.get_extra_info("socket")
        if sock is not None and not self.is_closing():
            try:
                n += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
            except (OSError, ValueError):     # closed under us (fd -1: ValueError)
                pass
        return n

    def _take(self, n: int) -> bytes:
        out = bytes(self._buf[self._lo:self._lo + n])
        self._advance(n)
        return out

    def _advance(self, n: int) -> None:
        self._lo += n
        if self._lo == self._hi:
            self._lo = self._hi = 0
            if len(self._buf) > self.SCRATCH_KEEP:
                self._buf = bytearray(self.SCRATCH_MIN)
        flow = self._flow
        if flow is not None and flow.read_paused:
            flow.reading(self._hi - self._lo, False)

    async def readexactly(self, n: int, deadline: float | None = None) -> bytes | memoryview:
        """n bytes (bytes for small reads, a memoryview of an np.empty buffer for large ones);
        IncompleteReadError at EOF, TimeoutError past `deadline`."""
        if n >= self.DIRECT_MIN:
            return await self._read_direct(n, deadline)
        while self._buffered() < n:
            if self._eof:
                partial = self._take(self._buffered())
                raise asyncio.IncompleteReadError(partial, n)
            await self._wait(deadline)
        return self._take(n)

    async def _read_direct(self, n: int, deadline: float | None) -> memoryview:
        out = memoryview(np.empty(n, dtype=np.uint8)).cast("B")
        await self._read_into(out, deadline)
        return out

    async def _read_into(self, out: memoryview, deadline: float | None) -> None:
        """Fill `out` (a writable byte view) from the stream: what is buffered is copied, the rest the transport
        writes into it directly."""
        n = len(out)
        have = min(n, self._buffered())
        out[:have] = self._buf[self._lo:self._lo + have]
        self._take(have)
        if have < n:
            self._target, self._tpos = out, have
            self._set_lowat(min(n - have, self.LOWAT_MAX))
            try:
                while self._tpos < n:
                    if self._eof:
                        raise asyncio.IncompleteReadError(bytes(out[:self._tpos]), n)
                    await self._wait(deadline)
            finally:
                self._target = None
                self._set_lowat(1)

    def peek_header(self) -> tuple[list[Any], int] | None:
        """The next frame's header and size when all of it is buffered already, without consuming it, else None;
        ProtocolError for a bad length or header."""
        lo = self._lo
        if self._hi - lo < FRAME_PREFIX_BYTES:
            return None
        (n,) = _PREFIX.unpack_from(self._buf, lo)
        if not 0 < n <= MAX_HEADER_BYTES:
            wire.header_length(_PREFIX.pack(n))       # raises the usual ProtocolError
        if self._hi - lo - FRAME_PREFIX_BYTES < n:
            return None
        body = bytes(self._buf[lo + FRAME_PREFIX_BYTES:lo + FRAME_PREFIX_BYTES + n])
        return wire.unpack_header(body), FRAME_PREFIX_BYTES + n

    def header_now(self) -> tuple[list[Any], int] | None:
        """peek_header, consuming the header (no await: a client that pipelines small frames has many waiting)."""
        if self._draining:
            raise Draining()
        got = self.peek_header()
        if got is not None:
            self._take(got[1])
        return got

    def window(self) -> tuple[bytearray, int, int]:
        """The scratch buffer and the bounds of its unconsumed bytes (framepath.py scans them in place; consumed
        with skip)."""
        return self._buf, self._lo, self._hi

    def buffered(self, n: int) -> bool:
        """At least n bytes are buffered."""
        return self._hi - self._lo >= n

    def skip(self, n: int) -> None:
        """Consume n buffered bytes (a header peek_header returned)."""
        self._advance(n)

    def payload_now(self, n: int) -> bytes | None:
        """n payload bytes when they are buffered already and small (no await), else None."""
        if n < self.DIRECT_MIN and self._hi - self._lo >= n:
            return self._take(n)
        return None

    async def read_header(self, idle_s: float | None, frame_s: float) -> tuple[list[Any], int] | None:
        """The next frame's header and its size in bytes, or None on a clean EOF before a frame starts.
        The first byte must come within idle_s (None: no limit), the rest of the header within frame_s of it."""
        if self._draining:
            raise Draining()
        loop = self.event_loop()
        idle_deadline = loop.time() + idle_s if idle_s is not None else None
        while not self._buffered():
            if self._eof:
                return None
            self._parked = True
            try:
                await self._wait(idle_deadline)
            except TimeoutError:
                assert idle_s is not None
                if self.handled_at + idle_s <= loop.time():
                    raise StreamTimeout(f"idle for {idle_s:.0f} s (no request, no PING)") from None
                idle_deadline = self.handled_at + idle_s      # on_data handled frames meanwhile: not idle
            finally:
                self._parked = False
        deadline = loop.time() + frame_s
        try:
            prefix = await self.readexactly(FRAME_PREFIX_BYTES, deadline)
            n = wire.header_length(bytes(prefix))
            body = await self.readexactly(n, deadline)
        except asyncio.IncompleteReadError:
            raise ConnectionClosed("closed inside a frame header") from None
        except TimeoutError:
            raise StreamTimeout(f"frame header not complete within {frame_s:.0f} s") from None
        return wire.unpack_header(bytes(body)), FRAME_PREFIX_BYTES + n

    async def read_payload(self, n: int, within_s: float) -> bytes | memoryview:
        if n == 0:
            return b""
        try:
            return await self.readexactly(n, self.event_loop().time() + within_s)
        except asyncio.IncompleteReadError as exc:
            raise ConnectionClosed(f"closed after {len(exc.partial)} of {n} payload bytes") from None
        except TimeoutError:
            raise StreamTimeout(f"{n}-byte payload not complete within {within_s:.0f} s (too slow)") from None

    async def read_payload_into(self, out: memoryview, within_s: float) -> None:
        """read_payload into a buffer of the caller's (device memory: connection.py), same errors."""
        try:
            await self._read_into(out, self.event_loop().time() + within_s)
        except asyncio.IncompleteReadError as exc:
            raise ConnectionClosed(f"closed after {len(exc.partial)} of {len(out)} payload bytes") from None
        except TimeoutError:
            raise StreamTimeout(f"{len(out)}-byte payload not complete within {within_s:.0f} s (too slow)") from None

    # -- writer side
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default) if self.transport is not None else default

    def write_buffer_size(self) -> int:
        return (self.transport.get_write_buffer_size() if self.transport is not None else 0) + self._sliced

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.last_write = time.monotonic()
        if not self._tls or (not self._slices and sum(map(len, parts)) <= self.TLS_SLICE):
            self.transport.writelines(parts)
            return
        for p in parts:                   # behind what waits already: replies keep their order
            if len(p):
                self._slices.append(p)
                self._sliced += len(p)
        self._feed()
        if self._slices and self._flow is not None:
            self._flow.pause_writing()    # paused until the last slice is handed over and sent

    def _feed(self) -> None:
        """TLS: hand slices to the transport until it pauses us (its buffer is past WRITE_HIGH) or none are left."""
        transport, q = self.transport, self._slices
        while q and not self._transport_paused:
            if transport is None or transport.is_closing():
                q.clear()
                self._sliced = 0
                return
            head = q[0]
            if len(head) <= self.TLS_SLICE:
                q.popleft()
                part = head
            else:
                view = head if isinstance(head, memoryview) else memoryview(head)
                part, q[0] = view[:self.TLS_SLICE], view[self.TLS_SLICE:]
            self._sliced -= len(part)
            transport.write(part)         # may call pause_writing at once

    async def drain(self) -> None:
        """Until everything written is sent (or the connection is lost)."""
        if self._flow is not None and self._flow.write_paused and not self.is_closing():
            await self._flow.drain()

    async def unsent_at_most(self, n: int) -> None:
        """Until at most n written bytes are unsent (or the connection is lost); woken by the transport. TLS slices
        not handed over yet count: while any wait, the wake-up is the writer resuming once all are handed over and
        sent (drain)."""
        flow = self._flow
        if flow is None:
            return
        while self.write_buffer_size() > n and not self.is_closing():
            if self._slices:
                await flow.drain()
            else:
                await flow.unsent_at_most(n)

    def when_sent(self, callback: Any) -> None:
        """callback() once everything written so far is sent or the connection is lost (at once if nothing waits)."""
        if self._flow is not None:
            self._flow.when_sent(callback)
        else:
            callback()

    @property
    def write_paused(self) -> bool:
        """More than WRITE_HIGH bytes were left unsent; stays True until everything is sent."""
        return self._flow is not None and self._flow.write_paused

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        """Close once the transport sent what it holds. TLS slices not handed over yet are dropped: they may be
        views of device memory the session's end has freed."""
        self._slices.clear()
        self._sliced = 0
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once, unsent bytes and all (admission: a pending connection that must go)."""
        self._slices.clear()
        self._sliced = 0
        if self.transport is not None:
            self.transport.abort()
        elif self.abort_handshake is not None:
            self.abort_handshake()        # still in its TLS handshake
