"""Prometheus metrics (`--metrics-port`): the daemon's status, as the metrics page of prometheus_client.

Nothing is counted here: every value is read at scrape time from the same status map `pyvgpu daemon status` prints
(Server.status, built on the event loop, so a scrape sees one consistent snapshot), so the hot path pays nothing
for metrics beyond the figures the scheduler keeps anyway. The HTTP server is prometheus_client's own, in its own
thread; a scrape asks the loop for a snapshot and waits at most SNAPSHOT_TIMEOUT_S.

What a peer can make the metrics server spend is bounded like the daemon's own port (issue 23): a thread per
connection, at most MAX_CONNECTIONS of them (a new connection closes the oldest, so silent or trickling sockets cost
their opener its older ones and a scrape always gets in), and REQUEST_TIMEOUT_S for each read of a request.

Names follow Prometheus' conventions (base units, `_bytes`, `_seconds`, `_total` for counters, `_ratio` for 0..1)
and the ecosystem's (dcgm-exporter's per-GPU gauges, HAMi's `..._memory_used_bytes` / `..._memory_limit_bytes` per
container): see METRICS below, documented in docs/operations.md.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
from collections import OrderedDict
from socketserver import ThreadingMixIn
from typing import Any, Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                    InfoMetricFamily)
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger("pyvgpu.daemon")

SNAPSHOT_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 32                 # open connections to the metrics server (a new one closes the oldest)
REQUEST_TIMEOUT_S = 10.0             # each read of a request
DEVICE = ["device"]
SESSION = ["session", "client_host", "client_pid", "device"]

# name -> (help, labels): the page's contents, in order.
METRICS: dict[str, tuple[str, list[str]]] = {
    "pyvgpu_daemon": ("The daemon: backend, scheduling, address", []),
    "pyvgpu_device": ("A device of the daemon: name, uuid, backend", DEVICE),
    "pyvgpu_device_memory_total_bytes": ("Device memory", DEVICE),
    "pyvgpu_device_memory_used_bytes": ("Device memory held by sessions (allocations and module globals)", DEVICE),
    "pyvgpu_device_session_memory_limit_bytes": ("Per-session memory limit set by the operator", DEVICE),
    "pyvgpu_device_busy_ratio": ("Fraction of the last 10 s the device ran some session's work", DEVICE),
    "pyvgpu_device_sharing_slowdown_ratio": ("Slowdown of sessions' device work while sharing vs alone, last 10 s "
                                             "(absent when nothing was shared)", DEVICE),
    "pyvgpu_device_sessions": ("Sessions using the device", DEVICE),
    "pyvgpu_device_active_sessions": ("Sessions that ran work on the device in the last 10 s", DEVICE),
    "pyvgpu_device_busy_seconds": ("Device time of all sessions since the daemon started", DEVICE),
    "pyvgpu_session_memory_used_bytes": ("Device memory a session holds", SESSION),
    "pyvgpu_session_memory_limit_bytes": ("A session's memory limit (the device's memory when it has none)",
                                          SESSION),
    "pyvgpu_session_weight": ("A session's share weight on the device", SESSION),
    "pyvgpu_session_device_seconds": ("Device time a session used", SESSION),
    "pyvgpu_session_turn_wait_seconds": ("Time a session's work waited for other sessions' work", SESSION),
    "pyvgpu_session_ops": ("Ops a session ran on the device", SESSION),
    "pyvgpu_session_transfer_bytes": ("Bytes a session moved: htod (request payloads), dtoh (reply payloads), "
                                      "dtod (device copies)", SESSION + ["direction"]),
    "pyvgpu_op_duration_seconds": ("Op latency from the daemon receiving it to its completion", ["device", "op"]),
    "pyvgpu_device_leases": ("Leases held on the device", DEVICE),
    "pyvgpu_device_leased_ratio": ("Part of the device leased (1: exclusively or fully shared)", DEVICE),
    "pyvgpu_lease": ("A lease: its device, tag (id prefix), holder, job, mode", ["device", "lease", "holder", "job",
                                                                             "mode"]),
    "pyvgpu_lease_expiry_seconds": ("Seconds until a lease expires unless renewed", ["device", "lease"]),
    "pyvgpu_lease_sessions": ("Sessions using a lease", ["device", "lease"]),
    "pyvgpu_leases": ("Leases granted, released by their holders and expired, since the daemon started", ["event"]),
    "pyvgpu_lease_requests_waiting": ("Lease requests waiting in line for a GPU", []),
}


def _family(name: str, kind: type) -> Any:
    text, labels = METRICS[name]
    return kind(name, text, labels=labels)


class StatusCollector(Collector):
    """A prometheus_client collector over a status snapshot function."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        yield from families(self.snapshot())


def families(status: dict[str, Any]) -> Iterator[Any]:
    """The metric families of one status map."""
    info = _family("pyvgpu_daemon", InfoMetricFamily)
    info.add_metric([], {"backend": str(status.get("backend", "")), "scheduling": str(status.get("scheduling", "")),
                         "address": str(status.get("address", ""))})
    yield info
    devices = status.get("devices") or []
    usage = status.get("device_usage") or []
    dev_info = _family("pyvgpu_device", InfoMetricFamily)
    for r, d in enumerate(devices):
        uuid = d.get("uuid")
        dev_info.add_metric([str(r)], {"name": str(d.get("name", "")), "backend": str(d.get("backend", "")),
                                       "uuid": uuid.hex() if isinstance(uuid, (bytes, bytearray)) else str(uuid)})
    yield dev_info
    gauges = {name: _family(name, GaugeMetricFamily) for name in (
        "pyvgpu_device_memory_total_bytes", "pyvgpu_device_memory_used_bytes",
        "pyvgpu_device_session_memory_limit_bytes", "pyvgpu_device_busy_ratio",
        "pyvgpu_device_sharing_slowdown_ratio", "pyvgpu_device_sessions", "pyvgpu_device_active_sessions")}
    busy = _family("pyvgpu_device_busy_seconds", CounterMetricFamily)
    buckets = [*(repr(float(b)) for b in status.get("latency_buckets") or []), "+Inf"]
    latency = _family("pyvgpu_op_duration_seconds", HistogramMetricFamily)
    for u in usage:
        dev = [str(u["device"])]
        for name, key in (("pyvgpu_device_memory_total_bytes", "memory_total"),
                          ("pyvgpu_device_memory_used_bytes", "memory_used"),
                          ("pyvgpu_device_session_memory_limit_bytes", "session_memory_limit"),
                          ("pyvgpu_device_busy_ratio", "busy_ratio"),
                          ("pyvgpu_device_sharing_slowdown_ratio", "slowdown"),
                          ("pyvgpu_device_sessions", "sessions"),
                          ("pyvgpu_device_active_sessions", "active_sessions")):
            if u.get(key) is not None:
                gauges[name].add_metric(dev, float(u[key]))
        busy.add_metric(dev, float(u.get("device_seconds", 0.0)))
        for op, h in (u.get("op_latency") or {}).items():
            cum, acc = [], 0
            for bound, count in zip(buckets, h["counts"]):
                acc += count
                cum.append((bound, acc))
            latency.add_metric(dev + [op], cum, float(h["sum"]))
    yield from gauges.values()
    yield busy
    yield latency
    yield from _session_families(status, {u["device"]: u for u in usage})
    yield from _lease_families(status, usage)


def _lease_families(status: dict[str, Any], usage: list[dict[str, Any]]) -> Iterator[Any]:
    count = _family("pyvgpu_device_leases", GaugeMetricFamily)
    ratio = _family("pyvgpu_device_leased_ratio", GaugeMetricFamily)
    for u in usage:
        if u.get("leases") is not None:
            count.add_metric([str(u["device"])], float(u["leases"]))
            ratio.add_metric([str(u["device"])], float(u.get("leased_fraction", 0.0)))
    info = _family("pyvgpu_lease", InfoMetricFamily)
    expiry = _family("pyvgpu_lease_expiry_seconds", GaugeMetricFamily)
    sessions = _family("pyvgpu_lease_sessions", GaugeMetricFamily)
    for x in status.get("leases") or []:
        dev, tag = str(x["device"]), str(x["tag"])
        mode = "exclusive" if x.get("exclusive") else f"share {float(x.get('fraction', 0)):g}"
        info.add_metric([dev, tag, str(x.get("holder", "")), str(x.get("job", "")), mode], {})
        expiry.add_metric([dev, tag], float(x.get("expires_in", 0.0)))
        sessions.add_metric([dev, tag], float(x.get("sessions", 0)))
    events = _family("pyvgpu_leases", CounterMetricFamily)
    counts = status.get("lease_counts") or {}
    for event in ("granted", "released", "expired"):
        events.add_metric([event], float(counts.get(event, 0)))
    waiting = _family("pyvgpu_lease_requests_waiting", GaugeMetricFamily)
    waiting.add_metric([], float(counts.get("waiting", 0)))
    yield from (count, ratio, info, expiry, sessions, events, waiting)


def _session_families(status: dict[str, Any], usage: dict[int, dict[str, Any]]) -> Iterator[Any]:
    gauges = {name: _family(name, GaugeMetricFamily) for name in (
        "pyvgpu_session_memory_used_bytes", "pyvgpu_session_memory_limit_bytes", "pyvgpu_session_weight")}
    counters = {name: _family(name, CounterMetricFamily) for name in (
        "pyvgpu_session_device_seconds", "pyvgpu_session_turn_wait_seconds", "pyvgpu_session_ops",
        "pyvgpu_session_transfer_bytes")}
    for s in status.get("sessions") or []:
        if s.get("self"):
            continue                     # the status query itself (a metrics scrape has none)
        host = str(s.get("hostname") or str(s.get("peer", "")).rsplit(":", 1)[0])
        pid = "" if s.get("pid") is None else str(s["pid"])
        for d in s.get("devices") or []:
            labels = [str(s["id"]), host, pid, str(d["device"])]
            limit = d.get("memory_limit")
            if limit is None:
                limit = usage.get(d["device"], {}).get("memory_total", 0)
            gauges["pyvgpu_session_memory_used_bytes"].add_metric(labels, float(d.get("memory_used", 0)))
            gauges["pyvgpu_session_memory_limit_bytes"].add_metric(labels, float(limit))
            if d.get("weight") is not None:
                gauges["pyvgpu_session_weight"].add_metric(labels, float(d["weight"]))
            counters["pyvgpu_session_device_seconds"].add_metric(labels, float(d.get("device_seconds", 0.0)))
            counters["pyvgpu_session_turn_wait_seconds"].add_metric(labels,
                                                                    float(d.get("turn_wait_seconds", 0.0)))
            counters["pyvgpu_session_ops"].add_metric(labels, float(d.get("ops", 0)))
            for direction in ("htod", "dtoh", "dtod"):
                counters["pyvgpu_session_transfer_bytes"].add_metric(labels + [direction],
                                                                     float(d.get(f"bytes_{direction}", 0)))
    yield from gauges.values()
    yield from counters.values()


def loop_snapshot(loop: asyncio.AbstractEventLoop, status: Callable[[], dict[str, Any]]) -> Callable[[], dict]:
    """A snapshot function for another thread: runs `status` on the loop and waits for it (bounded)."""
    def snapshot() -> dict[str, Any]:
        fut: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(status())
            except BaseException as exc:  # noqa: BLE001 - handed to the scraping thread
                fut.set_exception(exc)
        loop.call_soon_threadsafe(run)
        return fut.result(SNAPSHOT_TIMEOUT_S)
    return snapshot


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - the base class's name
        pass                                                    # scrapes are not worth a log line each


class _HTTPServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most MAX_CONNECTIONS connections (the oldest is closed for a new one)."""
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128             # listen backlog (socketserver's default, 5, drops bursts of connects)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._conns: OrderedDict[socket.socket, None] = OrderedDict()
        self._conns_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            if len(self._conns) >= MAX_CONNECTIONS:
                oldest, _ = self._conns.popitem(last=False)
                try:
                    oldest.shutdown(socket.SHUT_RDWR)   # its handler's read ends; the thread finishes
                except OSError:
                    pass
            self._conns[request] = None
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.pop(request, None)
        super().shutdown_request(request)


def _server_class(host: str, port: int) -> type[_HTTPServer]:
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    return type("_MetricsHTTPServer", (_HTTPServer,), {"address_family": family})


class MetricsServer:
    """The Prometheus metrics page (prometheus_client's WSGI app) on (host, port), serving one StatusCollector;
    stop() ends it."""

    def __init__(self, host: str, port: int, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatusCollector(snapshot))
        self._httpd = make_server(host, port, make_wsgi_app(self.registry), _server_class(host, port), _Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        self.port = int(self._httpd.server_address[1])
        self.host = host

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
