"""The listener: plain TCP or TLS (tls_accept.py), admission of new connections, one session per connection, the
daemon's status and its shutdown.

What happens to one connection lives beside it, one concern per file: handshake.py (greeting, HELLO, token proof),
lifecycle.py (a session's life from handshake to teardown; heartbeats; the shutdown drain), connection.py (one
session's frame loop and the one route decision per frame), link.py (a session's flow control: its request queue and
reply bounds, waits woken by events), handlers/control.py (the ops the daemon answers itself).
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
from pathlib import Path
from typing import Any

from pyvgpu import protocol
from pyvgpu.protocol import ENV_DAEMON_CAPTURE, PROTOCOL_VERSION
from pyvgpu_daemon import framepath
from pyvgpu_daemon.handlers import control, lease  # noqa: F401 (lease registers LEASE_*)
from pyvgpu_daemon.admission import Admission
from pyvgpu_daemon.backends.base import Backend
from pyvgpu_daemon.bounds import Bounds
from pyvgpu_daemon.framepath import FramePath
from pyvgpu_daemon.leases import LeaseConfig, LeaseTable
from pyvgpu_daemon.lifecycle import abort, heartbeats, run_session
from pyvgpu_daemon.link import Link
from pyvgpu_daemon.peer import PeerHub
from pyvgpu_daemon.scheduler import LATENCY_BOUNDS
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.sharing import Sharing, SharingConfig
from pyvgpu_daemon.stream import FrameStream
from pyvgpu_daemon.tls_accept import TLSListener

log = logging.getLogger("pyvgpu.daemon")

# Every op the daemon answers itself has its control handler (checked at import, as dispatch.py checks device ops).
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
class Server:
    config: ServerConfig
    backend: Backend
    sessions: dict[int, Session] = field(default_factory=dict)
    links: dict[int, Link] = field(default_factory=dict)        # the established sessions' flow control
    started: float = field(default_factory=time.time)
    devices: list[dict[str, Any]] = field(default_factory=list)  # the backend's device snapshots (HELLO, STATUS)
    payload_cap: int = 0             # the largest payload a request may announce: the largest device, plus slack
    oversize_slot: asyncio.Lock | None = None   # one frame above the session queue bound at a time (link.py)
    drain_deadline: float | None = None          # loop time the shutdown drain ends (lifecycle.drain)
    bound: tuple[str, int] | None = None
    hub: PeerHub = field(default_factory=PeerHub)    # tickets of copies to other daemons (peer.py)
    sharing: Sharing | None = None
    leases: LeaseTable | None = None
    admission: Admission | None = None                # connections before their handshake (admission.py)
    framepath: FramePath | None = None                # the compiled frame path, when it loads (framepath.py)
    capture_dir: Path | None = None                   # PYVGPU_DAEMON_CAPTURE: each session's received bytes there
    _next_session: int = 1
    _server: asyncio.AbstractServer | None = None      # the plain TCP listener
    _tls: TLSListener | None = None                     # ... or the TLS one (tls_accept.py)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _streams: set[FrameStream] = field(default_factory=set)
    _heartbeat: asyncio.Task[None] | None = None
    _dropped: set[FrameStream] = field(default_factory=set)     # pending connections admission dropped

    @property
    def bounds(self) -> Bounds:
        return self.config.bounds

    @property
    def ndevices(self) -> int:
        return len(self.devices)

    def __post_init__(self) -> None:
        self.hub.token = self.config.token               # the daemon proves its own token to a peer daemon

    # ------------------------------------------------------------------ listening
    async def start(self) -> None:
        self.devices = self.backend.devices()
        self.payload_cap = max((d["total_mem"] for d in self.devices), default=0) + (1 << 20)
        self.oversize_slot = asyncio.Lock()
        self.framepath = framepath.load()
        if os.environ.get(ENV_DAEMON_CAPTURE):
            self.capture_dir = Path(os.environ[ENV_DAEMON_CAPTURE])
            self.capture_dir.mkdir(parents=True, exist_ok=True)
            log.info("capturing every session's received bytes into %s", self.capture_dir)
        self.sharing = Sharing(self.config.sharing, self.devices)
        self.admission = Admission(self.bounds.max_handshaking, self.bounds.max_handshaking_per_peer)
        loop = asyncio.get_running_loop()
        self.leases = LeaseTable(self.sharing.totals, self.config.leases, self.sessions.values,
                                 lambda s, why: abort(self.links[s.id], why) if s.id in self.links else None,
                                 self.sharing.schedulers.clamp_weight)
        self.leases.start(loop)

        if self.config.tls is None:
            def on_connect(stream: FrameStream) -> None:
                self._admit(stream)
                self._start_session(stream)

            self._server = await loop.create_server(lambda: FrameStream(on_connect), self.config.host,
                                                    self.config.port, reuse_address=True)
            sock = self._server.sockets[0].getsockname()
            self.bound = (sock[0], sock[1])
        else:
            # counted from the accept on, TLS handshake included (tls_accept.py)
            self._tls = TLSListener(self.config.tls, self.bounds.handshake_timeout_s, self._admit,
                                    self._start_session, self._tls_ended)
            self.bound = await self._tls.listen(self.config.host, self.config.port)
        self._heartbeat = loop.create_task(heartbeats(self.links.values, self.bounds.heartbeat_s))

    def _admit(self, stream: FrameStream) -> None:
        """A new connection: pending until its handshake is done (admission may drop older pending ones)."""
        assert self.admission is not None
        for old in self.admission.admit(stream, stream.peer_host):
            assert isinstance(old, FrameStream)
            self._dropped.add(old)
            old.abort()
        warning = self.admission.warning(stream.peer_host)
        if warning is not None:
            log.warning("%s", warning)

    def _start_session(self, stream: FrameStream) -> None:
        """A connection ready for the greeting (after TLS, if any): its session's task."""
        self._streams.add(stream)
        sid = self._next_session
        self._next_session += 1
        task = asyncio.get_running_loop().create_task(run_session(self, stream, sid))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _tls_ended(self, stream: FrameStream, reason: str) -> None:
        """A connection ended in its TLS handshake: no session began."""
        self.forget_stream(stream)
        quiet = self.was_dropped(stream)          # admission logged it (one line per peer, rate-limited)
        log.log(logging.DEBUG if quiet else logging.INFO, "connection from %s ended before a session began (%s)",
                stream.peer, reason)

    def forget_stream(self, stream: FrameStream) -> None:
        """A connection's session ended: it no longer counts for admission or shutdown."""
        self._streams.discard(stream)
        assert self.admission is not None
        self.admission.done(stream)

    def was_dropped(self, stream: FrameStream) -> bool:
        """Whether admission dropped this connection before its handshake (it logged that already)."""
        if stream in self._dropped:
            self._dropped.discard(stream)
            return True
        return False

    async def serve_until(self, stop: asyncio.Event) -> None:
        await stop.wait()
        log.info("shutting down: %d session(s) open; queued work may finish for %.0f s", len(self.sessions),
                 self.bounds.drain_timeout_s)
        if self._server is not None:
            self._server.close()
        if self._tls is not None:
            self._tls.close()
        loop = asyncio.get_running_loop()
        self.drain_deadline = loop.time() + self.bounds.drain_timeout_s
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
            "handshaking": self.admission.pending if self.admission is not None else 0,   # admission.py
            "devices": self.devices,
            "scheduling": "fair" if self.sharing.config.fair else "off",
            "max_weight": self.sharing.config.max_weight,
            "latency_buckets": list(LATENCY_BOUNDS),
            protocol.STATUS_DEVICE_USAGE: usage,
            "sessions": sessions,
            protocol.STATUS_LEASES: self.leases.view(),
            "lease_counts": dict(self.leases.counts, waiting=self.leases.waiting()),
            "frame_path": self.framepath.figures() if self.framepath is not None else {"compiled": False},
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
              f"devices={server.ndevices}" + (" tls" if config.tls is not None else ""),
              file=sys.stderr, flush=True)
    try:
        await server.serve_until(stop)
    finally:
        if metrics is not None:
            metrics.stop()
