"""The listener: handshake and authentication, then one request loop per connection (= session).

The loop thread only parses frames, validates their shape and routes each device op to the ordered worker of
(session, device); replies are written when the worker's result comes back. A frame that breaks the protocol ends
that session with a one-line reason in the log; nothing a client sends can stop the daemon or touch other sessions.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pyvgpu import auth, wire
from pyvgpu.protocol import (ERR_AUTH, ERR_PROTOCOL_MISMATCH, ERROR_CODES, HELLO_CLIENT, HELLO_PROOF,
                             HELLO_REPLY_BACKEND, HELLO_REPLY_DEVICES, HELLO_REPLY_SESSION, HELLO_VA_BASE,
                             HELLO_VERSION, OP_BY_CODE, OP_BY_NAME, PROTOCOL_VERSION, VA_WINDOW_BYTES, OpFlag,
                             OpSpec)
from pyvgpu_daemon import handlers
from pyvgpu_daemon.backends.base import Backend
from pyvgpu_daemon.scheduler import LATENCY_BOUNDS
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.sharing import Sharing, SharingConfig

log = logging.getLogger("pyvgpu.daemon")

HANDSHAKE_TIMEOUT_S = 30.0
MAX_PENDING_JOBS = 4096              # per (session, device): a client flooding async ops waits for the device
MAX_PENDING_BYTES = 256 << 20        # payload bytes queued per (session, device) before reading pauses
WRITE_HIGH_WATER = 64 << 20          # stop reading requests while this much reply data is unsent
OP_HELLO = OP_BY_NAME["HELLO"].code
ERR_INVALID_DEVICE = ERROR_CODES["cudaErrorInvalidDevice"]
ERR_INVALID_VALUE = ERROR_CODES["cudaErrorInvalidValue"]


class SessionEnd(Exception):
    """Ends one session with a reason for the log."""


class MetricsError(RuntimeError):
    """The metrics server could not start (the daemon does not start either)."""


class FrameStream(asyncio.BufferedProtocol):
    """The connection as both reader and writer (the subset of StreamReader/StreamWriter the server uses).

    Why not asyncio streams: StreamReader copies every byte into a growing bytearray and again into the bytes it
    returns; for bulk payloads that ran at a fifth of loopback speed. Here a large read hands the transport the
    destination buffer itself (BufferedProtocol.get_buffer), so a 64 MiB copy lands where it will be used with
    one copy by the kernel. Small frames go through a compacting scratch buffer.
    """

    SCRATCH = 256 << 10
    DIRECT_MIN = 64 << 10             # reads at least this large go straight into their own buffer
    PAUSE_AT = 8 << 20                # unconsumed scratch bytes before the socket stops being read

    def __init__(self, on_connect: Any) -> None:
        self._on_connect = on_connect
        self._buf = bytearray(self.SCRATCH)
        self._lo = 0
        self._hi = 0
        self._target: memoryview | None = None
        self._tpos = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._read_paused = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.transport: asyncio.Transport | None = None

    # -- protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._on_connect(self)

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

    def buffer_updated(self, nbytes: int) -> None:
        if self._target is not None:
            self._tpos += nbytes
            if self._tpos >= len(self._target):
                self._target = None       # full: whatever arrives next belongs to the following frame
        else:
            self._hi += nbytes
            if self._hi - self._lo > self.PAUSE_AT and not self._read_paused and self.transport is not None:
                self._read_paused = True
                self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._wake()
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        if self._read_paused and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # -- reader side
    async def readexactly(self, n: int) -> bytes | bytearray:
        """n bytes (bytes for small reads, a bytearray for large ones); IncompleteReadError at EOF."""
        if n >= self.DIRECT_MIN:
            return await self._read_direct(n)
        while self._hi - self._lo < n:
            if self._eof:
                partial = bytes(self._buf[self._lo:self._hi])
                self._lo = self._hi
                raise asyncio.IncompleteReadError(partial, n)
            await self._wait()
        out = bytes(self._buf[self._lo:self._lo + n])
        self._lo += n
        if self._lo == self._hi:
            self._lo = self._hi = 0
        return out

    async def _read_direct(self, n: int) -> bytearray:
        out = bytearray(n)
        have = min(n, self._hi - self._lo)
        out[:have] = self._buf[self._lo:self._lo + have]
        self._lo += have
        if self._lo == self._hi:
            self._lo = self._hi = 0
        if have < n:
            self._target, self._tpos = memoryview(out), have
            try:
                while self._tpos < n:
                    if self._eof:
                        raise asyncio.IncompleteReadError(bytes(out[:self._tpos]), n)
                    await self._wait()
            finally:
                self._target = None
        return out

    # -- writer side
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default) if self.transport is not None else default

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    async def drain(self) -> None:
        if self._write_paused and self.transport is not None and not self.transport.is_closing():
            fut = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            await fut

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 7700
    token: bytes | None = None       # None: no authentication (only allowed on loopback)
    sharing: SharingConfig = field(default_factory=SharingConfig)
    metrics_port: int | None = None  # serve Prometheus metrics there (metrics.py); None: no metrics
    metrics_host: str | None = None  # default: the daemon's own address


@dataclass
class Server:
    config: ServerConfig
    backend: Backend
    sessions: dict[int, Session] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    _next_session: int = 1
    _server: asyncio.AbstractServer | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _devices: list[dict[str, Any]] = field(default_factory=list)
    bound: tuple[str, int] | None = None
    sharing: Sharing | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._devices = self.backend.devices()
        self.sharing = Sharing(self.config.sharing, self._devices)
        loop = asyncio.get_running_loop()

        def on_connect(stream: FrameStream) -> None:
            task = loop.create_task(self._connection(stream, stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self._server = await loop.create_server(lambda: FrameStream(on_connect), self.config.host,
                                                self.config.port, reuse_address=True)
        sock = self._server.sockets[0].getsockname()
        self.bound = (sock[0], sock[1])

    async def serve_until(self, stop: asyncio.Event) -> None:
        await stop.wait()
        log.info("shutting down: %d session(s) open", len(self.sessions))
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=15)
        await self._server.wait_closed()
        self.backend.close()

    # ------------------------------------------------------------------ connections
    async def _connection(self, reader: Any, writer: Any) -> None:
        peer_info = writer.get_extra_info("peername")
        peer = f"{peer_info[0]}:{peer_info[1]}" if isinstance(peer_info, tuple) else str(peer_info)
        sid = self._next_session
        self._next_session += 1
        session = Session(sid, peer, self.backend, len(self._devices))
        session.sharing = self.sharing
        reason = "client closed the connection"
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not await self._handshake(session, reader, writer):
                return
            self.sessions[sid] = session
            log.info("%s: connected from %s (%s), va_base=%#x", session.tag(), peer, session.client,
                     session.va_base)
            reason = await self._serve(session, reader, writer)
        except SessionEnd as exc:
            reason = str(exc)
        except wire.ProtocolError as exc:
            reason = f"protocol error: {exc}"
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc.__class__.__name__}: {exc}"
        except asyncio.CancelledError:
            reason = "daemon shutting down"
        except Exception:  # noqa: BLE001 - a bug in one session must not take the daemon down
            log.exception("%s: internal error", session.tag())
            reason = "internal error (see traceback above)"
        finally:
            await self._end_session(session, writer, reason)

    async def _handshake(self, session: Session, reader: Any,
                         writer: Any) -> bool:
        nonce = auth.make_nonce()
        auth_required = self.config.token is not None
        writer.write(wire.encode_server_hello(PROTOCOL_VERSION, nonce, auth_required))
        try:
            header = await asyncio.wait_for(wire.read_header(reader), HANDSHAKE_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise SessionEnd(f"no hello within {HANDSHAKE_TIMEOUT_S:.0f} s") from None
        if header is None:
            raise SessionEnd("closed before the hello")
        req = wire.parse_request(header, max_payload=0)
        if req.op != OP_HELLO or len(req.args) != 1 or not isinstance(req.args[0], dict) or req.req_id == 0:
            raise SessionEnd(f"first request is not a well-formed HELLO (op {req.op})")
        hello: dict[Any, Any] = req.args[0]
        version = hello.get(HELLO_VERSION)
        client = hello.get(HELLO_CLIENT)
        session.client = (client if isinstance(client, str) else repr(client))[:200]
        if version != PROTOCOL_VERSION:
            msg = f"protocol version mismatch: client speaks {version!r}, daemon speaks {PROTOCOL_VERSION}"
            await self._reply_and_close(writer, req.req_id, ERR_PROTOCOL_MISMATCH, msg)
            raise SessionEnd(msg)
        if auth_required:
            assert self.config.token is not None
            proof = hello.get(HELLO_PROOF)
            if not auth.verify(self.config.token, nonce, proof if isinstance(proof, str) else None):
                msg = "authentication failed: missing or wrong token proof"
                await self._reply_and_close(writer, req.req_id, ERR_AUTH, msg)
                raise SessionEnd(msg)
        va_base = hello.get(HELLO_VA_BASE)
        if va_base is None:
            va_base = VA_WINDOW_BYTES
        if isinstance(va_base, bool) or not isinstance(va_base, int) or va_base <= 0 \
                or va_base % 4096 or va_base + len(self._devices) * VA_WINDOW_BYTES > (1 << 64):
            msg = f"bad va_base {va_base!r}"
            await self._reply_and_close(writer, req.req_id, ERR_INVALID_VALUE, msg)
            raise SessionEnd(msg)
        session.va_base = va_base
        assert self.sharing is not None
        msg = self.sharing.apply_hello(session, hello)
        if msg is not None:
            await self._reply_and_close(writer, req.req_id, ERR_INVALID_VALUE, msg)
            raise SessionEnd(msg)
        result = {HELLO_REPLY_DEVICES: self._devices, HELLO_REPLY_BACKEND: self.backend.name,
                  HELLO_REPLY_SESSION: session.id}
        writer.writelines(wire.encode_reply(req.req_id, 0, result))
        return True

    async def _reply_and_close(self, writer: Any, req_id: int, err: int, msg: str) -> None:
        writer.writelines(wire.encode_reply(req_id, err, msg))
        try:
            await asyncio.wait_for(writer.drain(), 5)
        except (asyncio.TimeoutError, OSError):
            pass

    async def _serve(self, session: Session, reader: Any, writer: Any) -> str:
        loop = asyncio.get_running_loop()
        max_payload = max((d["total_mem"] for d in self._devices), default=0) + (1 << 20)
        transport = writer.transport
        while True:
            header = await wire.read_header(reader)
            if header is None:
                return "client closed the connection"
            req = wire.parse_request(header)
            spec = OP_BY_CODE.get(req.op)
            if spec is None:
                raise SessionEnd(f"unknown op {req.op}")
            self._check_shape(spec, req, max_payload)
            payload = await wire.read_payload(reader, req.payload_len)
            if spec.flags & OpFlag.NO_DEVICE:
                if spec.name == "STATUS":
                    writer.writelines(wire.encode_reply(req.req_id, 0, self.status(session)))
                elif spec.name == "GOODBYE":
                    writer.writelines(wire.encode_reply(req.req_id, 0, None))
                    return "client said goodbye"
                else:
                    raise SessionEnd(f"{spec.name} after the handshake")
            else:
                self._dispatch(session, spec, req, payload, writer, loop)
                st = session.devices.get(req.args[0]) if isinstance(req.args[0], int) else None
                if st is not None and (st.worker.pending > MAX_PENDING_JOBS
                                       or st.worker.pending_bytes > MAX_PENDING_BYTES):
                    await self._wait_drained(st)
            if transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                await writer.drain()

    @staticmethod
    def _check_shape(spec: OpSpec, req: wire.Request, max_payload: int) -> None:
        if len(req.args) != len(spec.args):
            raise SessionEnd(f"{spec.name} with {len(req.args)} args, spec has {len(spec.args)}")
        if req.payload_len and not spec.flags & OpFlag.PAYLOAD_IN:
            raise SessionEnd(f"{spec.name} carries a {req.payload_len}-byte payload it does not take")
        if req.payload_len > max_payload:
            raise SessionEnd(f"{spec.name} payload of {req.payload_len} bytes exceeds device memory")
        if req.req_id == 0 and not spec.flags & OpFlag.ASYNC:
            raise SessionEnd(f"{spec.name} sent fire-and-forget but is not an ASYNC op")

    def _dispatch(self, session: Session, spec: OpSpec, req: wire.Request, payload: bytes,
                  writer: Any, loop: asyncio.AbstractEventLoop) -> None:
        dev = req.args[0]
        if isinstance(dev, bool) or not isinstance(dev, int) or not 0 <= dev < len(self._devices):
            # No device to latch an asynchronous failure on: answer it when asked, drop it (logged) otherwise.
            log.info("%s: %s on invalid device %r", session.tag(), spec.name, dev)
            if req.req_id:
                writer.writelines(wire.encode_reply(req.req_id, ERR_INVALID_DEVICE))
            return
        st = session.device(dev, loop)
        fut = st.worker.submit(handlers.execute, session, st, self.backend, spec, req.args, payload,
                               req.req_id == 0, nbytes=len(payload), tag=(spec.code, req.args, len(payload)))
        if req.req_id:
            fut.add_done_callback(lambda f, rid=req.req_id: self._send_outcome(session, writer, rid, f))
        else:
            fut.add_done_callback(self._swallow)

    @staticmethod
    def _swallow(fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            log.error("fire-and-forget job raised: %r", fut.exception())

    def _send_outcome(self, session: Session, writer: Any, req_id: int,
                      fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or writer.is_closing():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("%s: job raised %r", session.tag(), exc)
            writer.writelines(wire.encode_reply(req_id, handlers.ERR_UNKNOWN))
            return
        out: handlers.Outcome | None = fut.result()
        if out is None:
            return                       # session is closing
        writer.writelines(wire.encode_reply(req_id, out.err, out.result, out.stdout, out.payload))

    async def _wait_drained(self, st: Any) -> None:
        # Wait for the device to catch up: a no-op job completes when everything queued before it has run.
        await st.worker.submit(lambda: None)

    async def _end_session(self, session: Session, writer: Any, reason: str) -> None:
        session.closing = True
        released = 0
        futures = []
        loop = asyncio.get_running_loop()
        for st in session.devices.values():
            futures.append(st.worker.submit(handlers.cleanup, session, st))
            st.worker.stop()
        for fut in futures:
            try:
                # Shielded: cleanup must finish even when the daemon is being cancelled.
                released += await asyncio.shield(fut)
            except asyncio.CancelledError:
                try:
                    released += await fut
                except Exception:  # noqa: BLE001
                    pass
            except Exception as exc:  # noqa: BLE001
                log.error("%s: cleanup failed: %r", session.tag(), exc)
        for st in session.devices.values():
            await loop.run_in_executor(None, st.worker.join, 5.0)
            if st.lane is not None:
                st.lane.sched.retire(st.lane)
        self.sessions.pop(session.id, None)
        try:
            writer.close()
        except Exception:  # noqa: BLE001
            pass
        log.info("%s: ended (%s); %d ops (%d waited for); released %d bytes on %d device(s)", session.tag(),
                 reason, sum(st.ops for st in session.devices.values()),
                 sum(st.waited for st in session.devices.values()), released, len(session.devices))

    # ------------------------------------------------------------------ status
    def status(self, me: Session | None = None) -> dict[str, Any]:
        sessions = []
        live = sorted(self.sessions.values(), key=lambda x: x.id)
        for s in live:
            entry = s.summary()
            entry["self"] = s is me
            sessions.append(entry)
        assert self.sharing is not None
        return {
            "backend": self.backend.name,
            "address": f"{self.bound[0]}:{self.bound[1]}" if self.bound else "",
            "pid": os.getpid(),
            "uptime_s": time.time() - self.started,
            "protocol": PROTOCOL_VERSION,
            "auth": self.config.token is not None,
            "devices": self._devices,
            "scheduling": "fair" if self.sharing.config.fair else "off",
            "max_weight": self.sharing.config.max_weight,
            "latency_buckets": list(LATENCY_BOUNDS),
            "device_usage": self.sharing.device_figures(live, time.perf_counter()),
            "sessions": sessions,
        }


async def run_server(config: ServerConfig, backend: Backend, ready_line: bool = True) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    server = Server(config, backend)
    metrics = None
    if config.metrics_port is not None:
        from pyvgpu_daemon.metrics import MetricsServer, loop_snapshot
        host = config.metrics_host or config.host
        try:
            metrics = MetricsServer(host, config.metrics_port, loop_snapshot(loop, server.status))
        except OSError as exc:
            raise MetricsError(f"cannot serve metrics on {host}:{config.metrics_port}: {exc.strerror or exc}") \
                from None
        log.info("metrics on http://%s:%d/metrics", metrics.host, metrics.port)
    try:
        await server.start()
    except BaseException:
        if metrics is not None:
            metrics.stop()
        raise
    assert server.bound is not None
    if ready_line:
        print(f"pyvgpu-daemon listening on {server.bound[0]}:{server.bound[1]} backend={backend.name} "
              f"devices={len(server._devices)}", file=sys.stderr, flush=True)
    try:
        await server.serve_until(stop)
    finally:
        if metrics is not None:
            metrics.stop()
