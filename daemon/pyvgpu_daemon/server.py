"""The listener: TLS, handshake and authentication, then one request loop per connection (= session).

The loop thread only parses frames, validates their shape and routes each device op to the ordered worker of
(session, device); replies are written when the worker's result comes back. A frame that breaks the protocol ends
that session with a one-line reason in the log (and a notice to the client); nothing a client sends can stop the
daemon or touch other sessions.

Flow control (bounds.py): before a request's payload is read, the session's queue of received-but-unexecuted
request bytes must have room (else the loop waits for its devices); a PAYLOAD_OUT request is admitted only while
the reply bytes the session is owed and has not read fit the reply bound; a frame larger than the queue bound is
admitted alone, one at a time daemon-wide. Every wait for the client has a deadline; while a session has work in
flight the daemon sends heartbeats, so the client can bound its own waits.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pyvgpu import auth, protocol, wire
from pyvgpu.protocol import (COMPRESS_CODECS, ERR_AUTH, ERR_PROTOCOL_MISMATCH, ERR_UNAVAILABLE, ERROR_CODES,
                             HELLO_COMPRESS, HELLO_LEASES, HELLO_REPLY_BACKEND, HELLO_REPLY_DEVICES, HELLO_REPLY_SESSION,
                             NOTICE_RATE, OP_BY_CODE, OP_BY_NAME, PROTOCOL_VERSION, RATE_REPORT_CHANGE,
                             RATE_SAMPLE_MIN_BYTES, VA_WINDOW_BYTES, OpSpec)
from pyvgpu_daemon import compress, fastpath
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.handlers import control, lease  # noqa: F401 (lease registers LEASE_*)
from pyvgpu_daemon.admission import Admission
from pyvgpu_daemon.backends.base import Backend
from pyvgpu_daemon.bounds import Bounds
from pyvgpu_daemon.errors import SessionEnd
from pyvgpu_daemon.leases import LeaseConfig, LeaseTable
from pyvgpu_daemon.peer import PeerHub
from pyvgpu_daemon.scheduler import LATENCY_BOUNDS
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.sharing import Sharing, SharingConfig
from pyvgpu_daemon.stream import ConnectionClosed, Draining, FrameStream, StreamTimeout

log = logging.getLogger("pyvgpu.daemon")

OP_HELLO = OP_BY_NAME["HELLO"].code
ERR_INVALID_DEVICE = ERROR_CODES["cudaErrorInvalidDevice"]
ERR_INVALID_VALUE = ERROR_CODES["cudaErrorInvalidValue"]
POLL_S = 0.02                        # re-check interval while waiting for a client to read its replies
# Every op the daemon answers itself has its control handler (checked at import, as the handlers package checks device ops).
assert not control.missing(), f"NO_DEVICE ops without a control handler: {sorted(control.missing())}"


class MetricsError(RuntimeError):
    """The metrics server could not start (the daemon does not start either)."""


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 7700
    token: bytes | None = None       # None: no authentication (only allowed on loopback)
    tls: ssl.SSLContext | None = None
    bounds: Bounds = field(default_factory=Bounds)
    sharing: SharingConfig = field(default_factory=SharingConfig)
    metrics_port: int | None = None  # serve Prometheus metrics there (metrics.py); None: no metrics
    metrics_host: str | None = None  # default: the daemon's own address
    compress: str = "auto"           # auto | always | off: compression of bulk payloads (compress.py)
    leases: LeaseConfig = field(default_factory=LeaseConfig)   # --lease-state (leases.py)


@dataclass
class Link:
    """One connection's flow-control state (touched on the loop thread only)."""
    session: Session
    stream: FrameStream
    outstanding: int = 0             # requests whose reply is not written yet
    reply_owed: int = 0              # payload bytes of those replies
    oversize: bool = False           # holds the daemon-wide slot for a frame above the session queue bound
    rx_rate: float = 0.0             # bytes/s bulk payloads arrive at (compress.py's link rate for the client)
    rx_reported: float = 0.0         # the rate last told to the client
    sending_device_memory: bool = False   # a reply sent from device memory may still be partly unsent (fastpath)

    def queued_jobs(self) -> int:
        return sum(st.worker.pending for st in self.session.devices.values())

    def queued_bytes(self) -> int:
        return sum(st.worker.pending_bytes for st in self.session.devices.values())

    def busy(self) -> bool:
        return self.outstanding > 0 or self.queued_jobs() > 0


def reply_bytes(spec: OpSpec, args: list[Any]) -> int:
    """Payload bytes a PAYLOAD_OUT request's reply will carry: the product of its extent arguments (none: a small
    result, a BLAS scalar or a peer ticket's bounded chunk; a bad argument: 0, the handler refuses it)."""
    if not spec.payload_out:
        return 0
    return spec.extent(args) or 0


@dataclass
class Server:
    config: ServerConfig
    backend: Backend
    sessions: dict[int, Session] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    _next_session: int = 1
    _server: asyncio.AbstractServer | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _streams: set[FrameStream] = field(default_factory=set)
    _links: dict[int, Link] = field(default_factory=dict)
    _oversize: asyncio.Lock | None = None
    _heartbeat: asyncio.Task[None] | None = None
    _drain_deadline: float | None = None
    _devices: list[dict[str, Any]] = field(default_factory=list)
    _payload_cap: int = 0
    bound: tuple[str, int] | None = None
    hub: PeerHub = field(default_factory=PeerHub)    # tickets of copies to other daemons (peer.py)
    sharing: Sharing | None = None
    leases: LeaseTable | None = None
    admission: Admission | None = None                # connections before their handshake (admission.py)
    _dropped: set[FrameStream] = field(default_factory=set)     # pending connections admission dropped

    @property
    def bounds(self) -> Bounds:
        return self.config.bounds

    def __post_init__(self) -> None:
        self.hub.token = self.config.token               # the daemon proves its own token to a peer daemon

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._devices = self.backend.devices()
        self._payload_cap = max((d["total_mem"] for d in self._devices), default=0) + (1 << 20)
        self._oversize = asyncio.Lock()
        self.sharing = Sharing(self.config.sharing, self._devices)
        self.admission = Admission(self.bounds.max_handshaking, self.bounds.max_handshaking_per_peer)
        loop = asyncio.get_running_loop()
        self.leases = LeaseTable(self.sharing.totals, self.config.leases, self.sessions.values,
                                 lambda s, why: self._abort(self._links[s.id], why) if s.id in self._links else None,
                                 self.sharing.schedulers.clamp_weight)
        self.leases.start(loop)

        def on_connect(stream: FrameStream) -> None:
            assert self.admission is not None
            for old in self.admission.admit(stream, stream.peer_host):
                assert isinstance(old, FrameStream)
                self._dropped.add(old)
                old.abort()
            warning = self.admission.warning(stream.peer_host)
            if warning is not None:
                log.warning("%s", warning)
            self._streams.add(stream)
            task = loop.create_task(self._connection(stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        tls: dict[str, Any] = {}
        if self.config.tls is not None:
            tls = {"ssl": self.config.tls, "ssl_handshake_timeout": self.bounds.handshake_timeout_s}
        self._server = await loop.create_server(lambda: FrameStream(on_connect), self.config.host,
                                                self.config.port, reuse_address=True, **tls)
        sock = self._server.sockets[0].getsockname()
        self.bound = (sock[0], sock[1])
        self._heartbeat = loop.create_task(self._heartbeats())

    async def serve_until(self, stop: asyncio.Event) -> None:
        await stop.wait()
        log.info("shutting down: %d session(s) open; queued work may finish for %.0f s", len(self.sessions),
                 self.bounds.drain_timeout_s)
        assert self._server is not None
        self._server.close()
        loop = asyncio.get_running_loop()
        self._drain_deadline = loop.time() + self.bounds.drain_timeout_s
        for stream in list(self._streams):
            stream.stop_reading()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self.bounds.drain_timeout_s + 5)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self.backend.close()

    # ------------------------------------------------------------------ connections
    async def _connection(self, stream: FrameStream) -> None:
        peer = stream.peer
        sid = self._next_session
        self._next_session += 1
        session = Session(sid, peer, self.backend, len(self._devices), hub=self.hub)
        session.sharing = self.sharing
        link = Link(session, stream)
        reason = "client closed the connection"
        notify = False                   # tell the client why the daemon ends its session
        established = False
        try:
            try:
                await asyncio.wait_for(self._handshake(session, stream), self.bounds.handshake_timeout_s)
            except TimeoutError:
                raise SessionEnd(f"no hello within {self.bounds.handshake_timeout_s:.0f} s") from None
            established = True
            assert self.admission is not None
            self.admission.done(stream)
            self.sessions[sid] = session
            self._links[sid] = link
            loop = asyncio.get_running_loop()
            session.end_soon = lambda why: loop.call_soon_threadsafe(self._abort, link, why)
            log.info("%s: connected from %s (%s), va_base=%#x", session.tag(), peer, session.client,
                     session.va_base)
            reason = await self._serve(link)
        except Draining:
            reason, notify = "daemon shutting down", True
            if established:
                await self._drain(link)
        except SessionEnd as exc:
            reason, notify = str(exc), established
        except StreamTimeout as exc:
            reason, notify = f"timed out: {exc}", established
        except wire.ProtocolError as exc:
            reason, notify = f"protocol error: {exc}", established
        except ConnectionClosed as exc:
            reason = f"connection lost: {exc}"
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc.__class__.__name__}: {exc}"
        except asyncio.CancelledError:
            reason, notify = "daemon shutting down", True
        except Exception as exc:  # noqa: BLE001 - a bug in one session must not take the daemon down
            if stream.is_closing():
                # Whatever a socket that closed under an operation raises (OSError, ValueError for its fd of -1,
                # an SSL error, ...): the client went away; the session ends with this one line.
                reason = f"connection lost: {exc.__class__.__name__}: {exc}"
            else:
                log.exception("%s: internal error", session.tag())
                reason, notify = "internal error (see traceback above)", established
        finally:
            self._streams.discard(stream)
            assert self.admission is not None
            self.admission.done(stream)
            quiet = stream in self._dropped            # admission logged it (one line per peer, rate-limited)
            if quiet:
                self._dropped.discard(stream)
                reason = "dropped before its handshake: its address has too many connections waiting"
            await self._end_session(link, reason, notify, quiet)

    async def _handshake(self, session: Session, stream: FrameStream) -> None:
        nonce = auth.make_nonce()
        auth_required = self.config.token is not None
        stream.writelines([wire.encode_server_hello(PROTOCOL_VERSION, nonce, auth_required)])
        got = await stream.read_header(None, self.bounds.handshake_timeout_s)
        if got is None:
            raise SessionEnd("closed before the hello")
        req = wire.parse_request(got[0], max_payload=0)
        if req.op != OP_HELLO or len(req.args) != 1 or req.req_id == 0:
            raise SessionEnd(f"first request is not a well-formed HELLO (op {req.op})")
        try:
            hello = wire.parse_hello(req.args[0])
        except wire.ProtocolError as exc:
            await self._reply_and_close(stream, req.req_id, ERR_INVALID_VALUE, f"malformed hello: {exc}")
            raise SessionEnd(f"malformed hello: {exc}") from None
        session.client = hello.client
        if hello.version != PROTOCOL_VERSION:
            msg = f"protocol version mismatch: client speaks {hello.version!r:.20}, daemon speaks {PROTOCOL_VERSION}"
            await self._reply_and_close(stream, req.req_id, ERR_PROTOCOL_MISMATCH, msg)
            raise SessionEnd(msg)
        if auth_required:
            assert self.config.token is not None
            if not auth.verify(self.config.token, nonce, hello.proof):
                msg = "authentication failed: missing or wrong token proof"
                await self._reply_and_close(stream, req.req_id, ERR_AUTH, msg)
                raise SessionEnd(msg)
        if len(self.sessions) >= self.bounds.max_sessions:
            msg = f"daemon busy: {len(self.sessions)} sessions open (--max-sessions {self.bounds.max_sessions})"
            await self._reply_and_close(stream, req.req_id, ERR_UNAVAILABLE, msg)
            raise SessionEnd(msg)
        va_base = VA_WINDOW_BYTES if hello.va_base is None else hello.va_base
        if va_base <= 0 or va_base % 4096 or va_base + len(self._devices) * VA_WINDOW_BYTES > (1 << 64):
            msg = f"bad va_base {va_base!r}"
            await self._reply_and_close(stream, req.req_id, ERR_INVALID_VALUE, msg)
            raise SessionEnd(msg)
        session.va_base = va_base
        assert self.sharing is not None
        assert self.leases is not None
        msg = self.sharing.apply_hello(session, hello.fields) or \
            self.leases.bind_hello(session, hello.fields.get(HELLO_LEASES))
        if msg is not None:
            await self._reply_and_close(stream, req.req_id, ERR_INVALID_VALUE, msg)
            raise SessionEnd(msg)
        result = {HELLO_REPLY_DEVICES: self._devices, HELLO_REPLY_BACKEND: self.backend.name,
                  HELLO_REPLY_SESSION: session.id}
        codecs = compress.accept(hello.fields.get(HELLO_COMPRESS), self.config.compress != "off")
        if codecs:
            session.codecs = tuple(COMPRESS_CODECS[n] for n in codecs)
            session.compress_always = self.config.compress == "always"
            result[HELLO_COMPRESS] = codecs
        stream.writelines(wire.encode_reply(req.req_id, 0, result))

    async def _reply_and_close(self, stream: FrameStream, req_id: int, err: int, msg: str) -> None:
        stream.writelines(wire.encode_reply(req_id, err, msg))
        try:
            await asyncio.wait_for(stream.drain(), 5)
        except (TimeoutError, OSError):
            pass

    async def _serve(self, link: Link) -> str:
        b = self.bounds
        stream = link.stream
        max_payload = self._max_payload()
        stream.on_data = lambda: self._frames_now(link)
        while True:
            if self._step_now(link):
                continue
            # The per-frame path for what _step_now leaves: waits (flow control, payloads still to come), frames
            # without a device, errors. Checks that usually pass are made inline and only their waits are awaited.
            if link.reply_owed or stream.write_buffer_size():
                await self._wait_replies_read(link, 0)
            got = stream.header_now()
            if got is None:
                got = await stream.read_header(b.idle_timeout_s, b.frame_timeout_s)
                if got is None:
                    return "client closed the connection"
            header, hsize = got
            req = wire.parse_request(header)
            spec = OP_BY_CODE.get(req.op)
            if spec is None:
                raise SessionEnd(f"unknown op {req.op}")
            self._check_shape(spec, req, max_payload, link.session.codecs)
            if link.sending_device_memory:
                await self._wait_sent(link)
            if not spec.device:
                ended = control.CONTROL[spec.code](self, link, req)
                if ended is not None:
                    return ended
                continue
            plen = req.payload_len
            nbytes = hsize + req.size               # a compressed payload counts as decoded
            need = reply_bytes(spec, req.args) if spec.payload_out else 0
            if not self._room(link, nbytes):
                await self._admit_request(link, nbytes)
            if need or link.reply_owed or stream.write_buffer_size():
                await self._wait_replies_read(link, need)
            if plen >= fastpath.LANDING_MIN and not req.codec and await self._land(link, spec, req):
                continue
            payload: Any = stream.payload_now(plen) if plen else b""
            if payload is None:
                t0, early = time.perf_counter(), stream.arrived() if plen >= RATE_SAMPLE_MIN_BYTES else 0
                payload = await stream.read_payload(plen, b.payload_deadline_s(plen))
                if plen >= RATE_SAMPLE_MIN_BYTES:
                    self._rate_sample(link, plen - early, time.perf_counter() - t0)
            if req.codec:
                compress.check_blocks(payload, req.raw_len, req.codec)
                payload = compress.Compressed(req.codec, req.raw_len, payload)
            self._dispatch(link, spec, req, payload, nbytes, need)

    def _max_payload(self) -> int:
        """The largest payload a request may announce: a copy the size of the largest device, plus slack."""
        return self._payload_cap

    def _step_now(self, link: Link) -> bool:
        """Handle the next frame at once when it is complete in the buffer and needs no wait: a device op whose
        payload (if any) is small and buffered, with room in the session's queue and no reply bytes owed. → True
        when handled; False leaves the stream untouched for _serve's general path (which also raises the errors)."""
        stream = link.stream
        if link.sending_device_memory or link.reply_owed or stream.write_buffer_size():
            return False
        got = stream.peek_header()
        if got is None:
            return False
        header, hsize = got
        req = wire.parse_request(header)
        spec = OP_BY_CODE.get(req.op)
        if spec is None or not spec.device or req.codec:
            return False                  # a compressed payload takes _serve's path (decoded size, Compressed)
        self._check_shape(spec, req, self._max_payload(), link.session.codecs)
        plen = req.payload_len
        nbytes = hsize + plen
        if plen >= FrameStream.DIRECT_MIN or not stream.buffered(nbytes) or not self._room(link, nbytes):
            return False
        need = reply_bytes(spec, req.args) if spec.payload_out else 0   # fits: nothing else is owed
        stream.skip(hsize)
        payload = stream.payload_now(plen) if plen else b""
        self._dispatch(link, spec, req, payload, nbytes, need)
        return True

    def _frames_now(self, link: Link) -> None:
        """FrameStream.on_data: bytes arrived while the session waited for a frame; handle what _step_now can
        right in the transport's callback (no wake-up of _serve, one loop iteration less per small request).
        Anything else, errors included, is left to _serve."""
        handled = False
        try:
            while self._step_now(link):
                handled = True
        except (wire.ProtocolError, SessionEnd):
            pass                          # raised before the frame was consumed: _serve meets it and ends the session
        except Exception:  # noqa: BLE001 - a callback of the transport must not raise
            log.exception("%s: handling a frame failed", link.session.tag())
        if handled:
            link.stream.handled_at = link.stream.event_loop().time()

    async def _land(self, link: Link, spec: OpSpec, req: wire.Request) -> bool:
        """Receive a host-to-device copy straight into device memory when its device is idle (fastpath.landing).
        → False when the request must take the ordinary path (nothing was read)."""
        st = self._idle_device(link, req)
        view = fastpath.landing(st, spec, req.args, req.payload_len) if st is not None else None
        if view is None:
            return False
        assert st is not None
        t0, early = time.perf_counter(), link.stream.arrived() if req.payload_len >= RATE_SAMPLE_MIN_BYTES else 0
        try:
            await link.stream.read_payload_into(view, self.bounds.payload_deadline_s(req.payload_len))
        finally:
            self._release_oversize(link)
        if req.payload_len >= RATE_SAMPLE_MIN_BYTES:
            self._rate_sample(link, req.payload_len - early, time.perf_counter() - t0)
        fastpath.landed(st, spec, req.args, req.payload_len, t0)
        if req.req_id:
            self._write_outcome(link, req.req_id, dispatch.Outcome(0))
        return True

    def _idle_device(self, link: Link, req: wire.Request) -> Any:
        """The session's state of the request's device, when it exists already (else None)."""
        dev = req.args[0]
        return link.session.devices.get(dev) if type(dev) is int else None

    @staticmethod
    def _check_shape(spec: OpSpec, req: wire.Request, max_payload: int, codecs: tuple[int, ...] = ()) -> None:
        if len(req.args) != len(spec.args):
            raise SessionEnd(f"{spec.name} with {len(req.args)} args, spec has {len(spec.args)}")
        if req.payload_len and not spec.payload_in:
            raise SessionEnd(f"{spec.name} carries a {req.payload_len}-byte payload it does not take")
        if req.size > max_payload:
            raise SessionEnd(f"{spec.name} payload of {req.size} bytes exceeds device memory")
        if req.codec and (req.codec not in codecs or not spec.compressible):
            raise SessionEnd(f"{spec.name} with a payload compressed by codec {req.codec}, not negotiated for it")
        if req.req_id == 0 and not spec.is_async:
            raise SessionEnd(f"{spec.name} sent fire-and-forget but is not an ASYNC op")

    def _abort(self, link: Link, why: str) -> None:
        """End a session from outside its _serve (a worker found its request malformed: Session.end_soon): the
        client is told why and the connection closes, which ends _serve and runs the usual cleanup."""
        stream = link.stream
        if link.session.closing or stream.is_closing():
            return
        log.warning("%s: ending the session: %s", link.session.tag(), why)
        stream.writelines(wire.encode_notice(ERR_UNAVAILABLE, why))
        stream.close()

    def _rate_sample(self, link: Link, nbytes: int, seconds: float) -> None:
        """nbytes of a bulk payload arrived in `seconds` (what had arrived before the read began is not counted):
        the client learns the rate (a heartbeat notice's result) when it moved by more than RATE_REPORT_CHANGE, and
        compresses by it (compress.c)."""
        if seconds <= 0 or nbytes < RATE_SAMPLE_MIN_BYTES or not link.session.codecs:
            return
        rate = nbytes / seconds
        link.rx_rate = rate if not link.rx_rate else 0.5 * link.rx_rate + 0.5 * rate
        last = link.rx_reported
        if not last or abs(link.rx_rate - last) > RATE_REPORT_CHANGE * last:
            link.rx_reported = link.rx_rate
            link.stream.writelines(wire.encode_notice(0, info={NOTICE_RATE: int(link.rx_rate)}))

    # ------------------------------------------------------------------ flow control
    def _room(self, link: Link, nbytes: int) -> bool:
        """_admit_request would not wait (the usual case, tested without a coroutine)."""
        b = self.bounds
        if nbytes > b.session_queue_bytes:
            return False
        jobs = queued = 0
        for st in link.session.devices.values():
            w = st.worker
            jobs += w.pending
            queued += w.pending_bytes
        return not (queued + nbytes > b.session_queue_bytes and queued) and jobs < b.session_queue_jobs

    async def _admit_request(self, link: Link, nbytes: int) -> None:
        """Room in the session's request queue for nbytes more, waiting for its devices if needed. A frame larger
        than the whole queue bound waits for an empty queue and for the daemon-wide oversize slot."""
        b = self.bounds
        queued = link.queued_bytes()
        if queued + nbytes > b.session_queue_bytes and queued or link.queued_jobs() >= b.session_queue_jobs:
            await self._until(link, self._session_drained(link))
        if nbytes > b.session_queue_bytes:
            assert self._oversize is not None
            await self._until(link, self._oversize.acquire())
            link.oversize = True

    def _release_oversize(self, link: Link) -> None:
        if link.oversize:
            link.oversize = False
            assert self._oversize is not None
            self._oversize.release()

    async def _session_drained(self, link: Link) -> None:
        """Until every job queued on the session's devices so far has run."""
        waits = [st.worker.submit(lambda: None) for st in link.session.devices.values() if st.worker.pending]
        if waits:
            await asyncio.gather(*waits)

    async def _until(self, link: Link, aw: Any) -> Any:
        """Await aw, but give up (ConnectionError) as soon as the client's connection is gone."""
        task = asyncio.ensure_future(aw)
        closed = link.stream.closed
        assert closed is not None
        done, _ = await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            task.cancel()
            raise ConnectionError("client went away while its session waited for its device")
        return task.result()

    async def _wait_replies_read(self, link: Link, need: int) -> None:
        """Until the reply bytes the session is owed or has not read, plus need, fit the reply bound (a single
        larger reply is admitted when nothing else is owed). A client that reads nothing for frame_timeout_s ends."""
        b = self.bounds
        stream = link.stream
        last = None
        stall_until = 0.0
        while True:
            owed = link.reply_owed + stream.write_buffer_size()
            if owed == 0 or owed + need <= b.reply_queue_bytes:
                return
            if stream.is_closing():
                raise ConnectionError("connection closed")
            now = time.monotonic()
            if last is None or owed < last:
                stall_until = now + b.frame_timeout_s
            elif now > stall_until:
                raise SessionEnd(f"client read none of its {owed} reply bytes for {b.frame_timeout_s:.0f} s")
            last = owed if last is None else min(last, owed)
            await asyncio.sleep(POLL_S)

    async def _wait_sent(self, link: Link) -> None:
        """Nothing of this session runs until the device bytes of a reply sent from device memory are on their way
        (fastpath.py); a client that reads none of them for frame_timeout_s is ended, as in _wait_replies_read."""
        stream = link.stream
        last = stream.write_buffer_size()
        while stream.write_paused:
            try:
                await asyncio.wait_for(self._until(link, stream.drain()), self.bounds.frame_timeout_s)
            except TimeoutError:
                owed = stream.write_buffer_size()
                if owed >= last:
                    raise SessionEnd(f"client read none of its {owed} reply bytes for "
                                     f"{self.bounds.frame_timeout_s:.0f} s") from None
                last = owed
        link.sending_device_memory = False

    def _dispatch(self, link: Link, spec: OpSpec, req: wire.Request, payload: Any, nbytes: int, need: int) -> None:
        session, stream = link.session, link.stream
        dev = req.args[0]
        if type(dev) is not int or not 0 <= dev < len(self._devices):      # type(): a bool is not a device
            # No device to latch an asynchronous failure on: answer it when asked, drop it (logged) otherwise.
            log.info("%s: %s on invalid device %r", session.tag(), spec.name, dev)
            if req.req_id:
                stream.writelines(wire.encode_reply(req.req_id, ERR_INVALID_DEVICE))
            self._release_oversize(link)
            return
        st = session.devices.get(dev)
        if st is None:
            assert self.leases is not None
            refusal = self.leases.admit(session, dev)
            if refusal is not None:     # leased to another holder: CUDA's answer for a GPU taken exclusively
                log.info("%s: %s refused: %s", session.tag(dev), spec.name, refusal)
                if req.req_id:
                    stream.writelines(wire.encode_reply(req.req_id, ERR_UNAVAILABLE, refusal))
                self._release_oversize(link)
                return
            st = session.device(dev, stream.event_loop())
        worker = st.worker
        tag = (spec.code, req.args, len(payload))
        req_id = req.req_id
        if req_id == 0:
            if not link.oversize and worker.idle and not worker.pending and \
                    fastpath.run_async(session, st, self.backend, spec, req.args, payload):
                return
            if link.oversize:
                fut = worker.submit(dispatch.execute, session, st, self.backend, spec, req.args, payload, True,
                                    nbytes=nbytes, tag=tag)
                fut.add_done_callback(lambda _f: self._release_oversize(link))
            else:
                worker.post(dispatch.execute, session, st, self.backend, spec, req.args, payload, True,
                            nbytes=nbytes, tag=tag)
            return
        if not link.oversize and worker.idle and not worker.pending:
            if spec.code == fastpath.OP_DTOH:
                parts = fastpath.reply_from_device(session, st, spec, req_id, req.args)
                if parts is not None:
                    stream.writelines(parts)
                    link.sending_device_memory = stream.write_paused
                    return
            out = fastpath.answer(session, st, self.backend, spec, req.args, payload)
            if out is not None:
                self._write_outcome(link, req_id, out)
                return
        link.outstanding += 1
        link.reply_owed += need
        if link.oversize:
            worker.call(lambda result, exc: (self._release_oversize(link), self._send_outcome(link, req_id, need,
                                                                                               result, exc)),
                        dispatch.execute, session, st, self.backend, spec, req.args, payload, False, nbytes=nbytes,
                        tag=tag)
        else:
            worker.call(lambda result, exc: self._send_outcome(link, req_id, need, result, exc),
                        dispatch.execute, session, st, self.backend, spec, req.args, payload, False, nbytes=nbytes,
                        tag=tag)

    def _send_outcome(self, link: Link, req_id: int, need: int, out: dispatch.Outcome | None,
                      exc: BaseException | None) -> None:
        """A worker's answer to request req_id (called on the loop when the job is handed back)."""
        link.outstanding -= 1
        link.reply_owed -= need
        if link.stream.is_closing():
            return
        if exc is not None:
            log.error("%s: job raised %r", link.session.tag(), exc)
            link.stream.writelines(wire.encode_reply(req_id, dispatch.ERR_UNKNOWN))
            return
        if out is not None:              # None: the session is closing
            self._write_outcome(link, req_id, out)

    def _write_outcome(self, link: Link, req_id: int, out: dispatch.Outcome) -> None:
        try:
            parts = wire.encode_reply(req_id, out.err, out.result, out.stdout, out.payload, out.event_times,
                                      out.raw_len, out.codec)
        except wire.ProtocolError as exc:
            # Never leave the client waiting: a result too large for a reply frame becomes an error reply.
            log.error("%s: reply %d cannot be sent (%s); answering cudaErrorUnknown", link.session.tag(), req_id, exc)
            parts = wire.encode_reply(req_id, dispatch.ERR_UNKNOWN)
        link.stream.writelines(parts)

    async def _heartbeats(self) -> None:
        """Every session with work in flight hears from the daemon at least every heartbeat_s."""
        interval = self.bounds.heartbeat_s
        beat = wire.encode_notice(0)
        while True:
            await asyncio.sleep(interval / 2)
            now = time.monotonic()
            for link in list(self._links.values()):
                s = link.stream
                try:
                    if link.busy() and now - s.last_write >= interval and s.write_buffer_size() == 0:
                        s.writelines(beat)
                except Exception:  # noqa: BLE001 - one session's broken transport must not stop everyone's beat
                    log.exception("%s: heartbeat failed", link.session.tag())

    # ------------------------------------------------------------------ ending
    async def _drain(self, link: Link) -> None:
        """Daemon shutdown: let the session's queued work finish and its replies go out, up to the deadline."""
        loop = asyncio.get_running_loop()
        left = (self._drain_deadline or loop.time()) - loop.time()
        try:
            await asyncio.wait_for(self._until(link, self._session_drained(link)), max(left, 0.0))
            while link.stream.write_buffer_size() and not link.stream.is_closing() \
                    and loop.time() < (self._drain_deadline or 0):
                await asyncio.sleep(POLL_S)
        except (TimeoutError, ConnectionError):
            pass

    async def _end_session(self, link: Link, reason: str, notify: bool, quiet: bool = False) -> None:
        session, stream = link.session, link.stream
        session.closing = True
        stream.on_data = None
        self.hub.drop_session(session.id)
        self._links.pop(session.id, None)
        if self.leases is not None:
            self.leases.session_ended(session)
        if notify and not stream.is_closing():
            stream.writelines(wire.encode_notice(ERR_UNAVAILABLE, reason))
        released = 0
        futures = []
        loop = asyncio.get_running_loop()
        busy = sum(1 for st in session.devices.values() if not st.worker.idle)
        for st in session.devices.values():
            if st.ctx is not None:
                st.ctx.cancel()          # an orphaned kernel stops at its next check instead of running on
            futures.append(st.worker.submit(dispatch.cleanup, session, st))
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
        self._release_oversize(link)
        self.sessions.pop(session.id, None)
        if self.leases is not None and session.devices:
            self.leases.serve_waiters()      # the GPUs it used are free now: waiting lease requests may fit
        try:
            stream.close()
        except Exception:  # noqa: BLE001
            pass
        if session.va_base or session.devices:
            log.info("%s: ended (%s); %d ops (%d waited for); released %d bytes on %d device(s)%s", session.tag(),
                     reason, sum(st.ops for st in session.devices.values()),
                     sum(st.waited for st in session.devices.values()), released, len(session.devices),
                     f"; work in progress cancelled on {busy} device(s)" if busy else "")
        else:
            log.log(logging.DEBUG if quiet else logging.INFO,
                    "%s: connection from %s ended before a session began (%s)", session.tag(), session.peer, reason)

    # ------------------------------------------------------------------ status
    def status(self, me: Session | None = None) -> dict[str, Any]:
        sessions = []
        live = sorted(self.sessions.values(), key=lambda x: x.id)
        for s in live:
            entry = s.summary()
            entry["self"] = s is me
            sessions.append(entry)
        assert self.sharing is not None and self.leases is not None
        usage = self.sharing.device_figures(live, time.perf_counter())
        for u in usage:
            u.update(self.leases.device_figures(u[protocol.USAGE_DEVICE]))
            u["unusable"] = self.backend.unusable(u[protocol.USAGE_DEVICE])
        return {
            "backend": self.backend.name,
            "address": f"{self.bound[0]}:{self.bound[1]}" if self.bound else "",
            "pid": os.getpid(),
            "uptime_s": time.time() - self.started,
            "protocol": PROTOCOL_VERSION,
            "auth": self.config.token is not None,
            "tls": self.config.tls is not None,
            "devices": self._devices,
            "scheduling": "fair" if self.sharing.config.fair else "off",
            "max_weight": self.sharing.config.max_weight,
            "latency_buckets": list(LATENCY_BOUNDS),
            protocol.STATUS_DEVICE_USAGE: usage,
            "sessions": sessions,
            protocol.STATUS_LEASES: self.leases.view(),
            "lease_counts": dict(self.leases.counts, waiting=self.leases.waiting()),
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
              f"devices={len(server._devices)}" + (" tls" if config.tls is not None else ""),
              file=sys.stderr, flush=True)
    try:
        await server.serve_until(stop)
    finally:
        if metrics is not None:
            metrics.stop()
