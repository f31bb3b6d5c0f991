"""Accepting TLS connections so that admission counts them from the moment they are accepted, TLS handshake included.

With `loop.create_server(ssl=...)` asyncio makes the connection's protocol only once the TLS handshake is done, so a
socket that never sends its ClientHello, or stalls in the middle of the handshake, was bounded by nothing but the
handshake timeout: 500 of them held 500 descriptors and TLS states, uncounted. Here the listening sockets are
accepted by this module (a reader callback on each), the new connection is admitted at once (admission.py: counted
per peer address and in total; it may drop older pending ones) and its TLS handshake runs through
`loop.connect_accepted_socket(ssl=...)` in a task of its own, which admission can cancel (FrameStream.abort).

Why not accept plain TCP and upgrade with `loop.start_tls`: uvloop (0.23) starts reading right after a protocol's
connection_made, before a task can call start_tls, so the ClientHello may reach the plain protocol first; and the
frame protocol (a BufferedProtocol) then has to be swapped in under the TLS transport. connect_accepted_socket wraps
the socket in the loop's TLS protocol from its first byte, with the FrameStream as the application protocol exactly
as create_server(ssl=...) did, on uvloop and on the standard loop alike. Plain TCP keeps create_server (server.py).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass, field
from typing import Callable

from pyvgpu_daemon.stream import FrameStream

log = logging.getLogger("pyvgpu.daemon")

BACKLOG = 100                      # as asyncio's create_server
ACCEPTS_PER_WAKEUP = 64            # a burst of connections is accepted over several loop iterations, not one


@dataclass(eq=False)
class _Pending:
    """One accepted connection until its TLS handshake is done."""
    stream: FrameStream
    sock: socket.socket
    handed: bool = False            # the loop's transport owns the socket (and closes it)

    def protocol(self) -> FrameStream:
        self.handed = True
        return self.stream


@dataclass
class TLSListener:
    context: ssl.SSLContext
    handshake_timeout_s: float
    admit: Callable[[FrameStream], None]          # a connection accepted: counted before its handshake
    on_connect: Callable[[FrameStream], None]     # its TLS handshake is done (FrameStream.connection_made)
    ended: Callable[[FrameStream, str], None]     # it ended in its TLS handshake (→ the reason)
    sockets: list[socket.socket] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop | None = None

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Bind every address of `host` (as create_server does) and start accepting → the first bound address."""
        loop = self._loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, _, _, _, addr in dict.fromkeys(infos):
                sock = socket.create_server((addr[0], port), family=family, backlog=BACKLOG)
                sock.setblocking(False)
                self.sockets.append(sock)
                port = port or sock.getsockname()[1]       # port 0: every address on the port the first got
        except OSError:
            self.close()
            raise
        for sock in self.sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)
        name = self.sockets[0].getsockname()
        return name[0], name[1]

    def _accept(self, listening: socket.socket) -> None:
        assert self._loop is not None
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                sock, addr = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:          # EMFILE, ECONNABORTED, ...: this one is lost, the listener goes on
                log.warning("accepting a connection failed: %s", exc)
                return
            sock.setblocking(False)
            pending = _Pending(FrameStream(self.on_connect), sock)
            pending.stream.set_peer(addr)
            pending.stream.accepted_at = self._loop.time()
            task = self._loop.create_task(self._handshake(pending))
            pending.stream.abort_handshake = task.cancel
            self._tasks.add(task)
            task.add_done_callback(lambda t, p=pending: self._done(t, p))
            self.admit(pending.stream)

    async def _handshake(self, pending: _Pending) -> None:
        assert self._loop is not None
        await self._loop.connect_accepted_socket(pending.protocol, pending.sock, ssl=self.context,
                                                 ssl_handshake_timeout=self.handshake_timeout_s)
        # done: the FrameStream's connection_made has started its session

    def _done(self, task: asyncio.Task[None], pending: _Pending) -> None:
        """The handshake task ended (also when it was cancelled before it began: hence a callback, not a finally)."""
        self._tasks.discard(task)
        stream = pending.stream
        stream.abort_handshake = None
        exc = None if task.cancelled() else task.exception()     # retrieved: never logged as unretrieved
        if stream.transport is not None or not task.cancelled() and exc is None:
            return                      # the handshake was done (its session owns the connection now)
        # a timeout, a reset, bytes that are not TLS, a refused certificate... one line, no traceback
        reason = "dropped in its TLS handshake" if exc is None else \
            f"TLS handshake failed: {exc.__class__.__name__}: {exc}"
        if not pending.handed:
            pending.sock.close()
        self.ended(stream, reason)

    def close(self) -> None:
        """Stop accepting; connections still in their TLS handshake are dropped."""
        for sock in self.sockets:
            if self._loop is not None and sock.fileno() >= 0:
                self._loop.remove_reader(sock.fileno())
            sock.close()
        self.sockets.clear()
        for task in list(self._tasks):
            task.cancel()

