"""`python -m pyvgpu_daemon`: run the daemon in the foreground.

    python -m pyvgpu_daemon [--host 127.0.0.1] [--port 7700] [--backend auto|cuda|emu] [--token-file PATH]
                            [--tls-cert PATH --tls-key PATH] [--max-sessions N] [--idle-timeout S]
                            [--frame-timeout S] [--drain-timeout S]
                            [--emu-devices N] [--emu-memory SIZE] [--emu-slowdown FACTOR] [--log-level LEVEL]
                            [--session-memory [DEVICE=]SIZE ...] [--max-weight W] [--scheduling fair|off]
                            [--time-slice MS]
                            [--metrics-port PORT] [--metrics-host ADDR] [--compress auto|always|off]
                            [--lease-state PATH]

`pyvgpu daemon start` builds a DaemonOptions and calls run(options) (or main(argv)).
Exit status: 0 after a clean SIGTERM/SIGINT shutdown (queued work drained up to --drain-timeout), 2 for a
configuration error (said on stderr).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path

from pyvgpu import config
from pyvgpu.protocol import DEFAULT_PORT
from pyvgpu_daemon.bounds import Bounds


@dataclass
class DaemonOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    backend: str = "auto"                # auto | cuda | emu
    token_file: str | None = None        # explicit token: authentication is required even on loopback
    token: bytes | None = None           # same, given directly (wins over token_file)
    emu_devices: int = 1
    emu_memory: str | int = "4G"
    emu_slowdown: float = 1.0
    log_level: str = "INFO"
    tls_cert: str | None = None          # PEM certificate (chain) and key: the daemon speaks TLS
    tls_key: str | None = None
    bounds: Bounds = field(default_factory=Bounds)
    session_memory: list[str] = field(default_factory=list)    # "SIZE" or "DEVICE=SIZE" (sharing.py)
    max_weight: float = 10.0
    scheduling: str = "fair"             # fair | off
    time_slice_ms: float = 2.0
    metrics_port: int | None = None
    metrics_host: str | None = None
    compress: str = "auto"               # auto: compress replies where it pays (compress.py); always; off: never
    lease_state: str | None = None       # file the leases survive a restart in (leases.py); None: memory only


# Bounds a user may set on the command line: option -> Bounds field (the rest are documented constants).
BOUND_OPTIONS: dict[str, str] = {
    "--max-sessions": "max_sessions", "--idle-timeout": "idle_timeout_s", "--frame-timeout": "frame_timeout_s",
    "--drain-timeout": "drain_timeout_s", "--handshake-timeout": "handshake_timeout_s",
}


GIL_SWITCH_S = 0.0005       # sys.setswitchinterval of the daemon (see run())


class ConfigError(Exception):
    pass


def parse_args(argv: list[str] | None) -> DaemonOptions:
    p = argparse.ArgumentParser(prog="python -m pyvgpu_daemon",
                                description="pyvgpu daemon: serves remoted CUDA calls on real or emulated GPUs")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other address requires a token)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 = any)")
    p.add_argument("--backend", choices=("auto", "cuda", "emu"), default="auto",
                   help="auto: real GPUs when present, else the emulated device")
    p.add_argument("--token-file", metavar="PATH",
                   help="shared secret clients must prove; default for non-loopback hosts: PYVGPU_TOKEN or "
                        f"{config.token_path()}")
    p.add_argument("--emu-devices", type=int, default=1, metavar="N", help="emulated devices (default 1)")
    p.add_argument("--emu-memory", default="4G", metavar="SIZE", help="memory per emulated device (default 4G)")
    p.add_argument("--emu-slowdown", type=float, default=1.0, metavar="FACTOR",
                   help="make every emulated kernel take FACTOR times as long (load-balancing tests)")
    p.add_argument("--tls-cert", metavar="PATH", help="PEM certificate (chain): speak TLS (required with a token "
                                                      "on any address but loopback)")
    p.add_argument("--tls-key", metavar="PATH", help="PEM private key of --tls-cert")
    defaults = Bounds()
    kinds = {f.name: f.type for f in fields(Bounds)}
    helps = {"max_sessions": "sessions at once (connections still in their handshake do not count: "
             "past 8 per address or 64 in all, one waiting 1 s or more is dropped for a new one; 4 more for "
             "`pyvgpu daemon status` while all are open)", "idle_timeout_s": "seconds without a request or PING before a "
             "session ends", "frame_timeout_s": "seconds a started frame may take (plus 1 s per 256 KiB of payload)",
             "drain_timeout_s": "seconds queued work may finish after SIGTERM",
             "handshake_timeout_s": "seconds for TLS + hello"}
    for opt, name in BOUND_OPTIONS.items():
        p.add_argument(opt, type=int if kinds[name] in (int, "int") else float, default=getattr(defaults, name),
                       metavar="N" if name == "max_sessions" else "S",
                       help=f"{helps[name]} (default {getattr(defaults, name):g})")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.add_argument("--session-memory", action="append", default=[], metavar="[DEVICE=]SIZE",
                   help="device memory each session may hold on every device (SIZE) or on one device "
                        "(DEVICE=SIZE); repeatable; default: no limit")
    p.add_argument("--max-weight", type=float, default=10.0, metavar="W",
                   help="largest share weight a client may ask for (default 10; the default weight is 1)")
    p.add_argument("--scheduling", choices=("fair", "off"), default="fair",
                   help="fair: sessions of a device share its time by weight (default); off: no arbitration")
    p.add_argument("--time-slice", type=float, default=2.0, metavar="MS",
                   help="fair scheduling: device time a session may run ahead of a waiting one before it hands the "
                        "device over (default 2 ms)")
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on this port")
    p.add_argument("--metrics-host", metavar="ADDR", help="address of the metrics server (default: --host)")
    p.add_argument("--compress", choices=("auto", "always", "off"), default="auto",
                   help="auto: offer lz4/zstd for bulk payloads and compress replies where the link is slow and the "
                        "data compresses (default); always: compress every bulk reply to a client that negotiated a "
                        "codec (tests, benchmarks); off: offer no codec")
    p.add_argument("--lease-state", metavar="PATH",
                   help="keep the GPU leases in this file, so that they survive a restart of the daemon (each "
                        "holder then has one lease ttl to renew); default: in memory only")
    ns = p.parse_args(argv)
    try:
        bounds = Bounds(**{name: getattr(ns, opt[2:].replace("-", "_")) for opt, name in BOUND_OPTIONS.items()})
    except ValueError as exc:
        p.error(str(exc))
    return DaemonOptions(host=ns.host, port=ns.port, backend=ns.backend, token_file=ns.token_file,
                         emu_devices=ns.emu_devices, emu_memory=ns.emu_memory, emu_slowdown=ns.emu_slowdown,
                         log_level=ns.log_level, tls_cert=ns.tls_cert, tls_key=ns.tls_key, bounds=bounds,
                         session_memory=ns.session_memory, max_weight=ns.max_weight,
                         scheduling=ns.scheduling, time_slice_ms=ns.time_slice, metrics_port=ns.metrics_port,
                         metrics_host=ns.metrics_host, compress=ns.compress, lease_state=ns.lease_state)


def resolve_token(opts: DaemonOptions) -> bytes | None:
    """The token to demand, or None for no authentication; ConfigError when one is required and missing, or when
    a token file is readable by group/other."""
    from pyvgpu.auth import TokenFileError, read_token_file, requires_token
    if opts.token:
        return opts.token
    try:
        if opts.token_file:
            return read_token_file(opts.token_file)
        token = config.load_token() if requires_token(opts.host) else None
    except TokenFileError as exc:
        raise ConfigError(str(exc)) from None
    if requires_token(opts.host):
        if not token:
            raise ConfigError(
                f"refusing to listen on {opts.host} without a token: any address other than 127.0.0.1 requires "
                f"authentication. Create one with `pyvgpu daemon start` (it writes {config.token_path()}), set "
                f"PYVGPU_TOKEN, or pass --token-file PATH.")
        return token
    return None


def resolve_tls(opts: DaemonOptions) -> ssl.SSLContext | None:
    """The TLS context to serve with, or None for plain TCP (loopback only); ConfigError otherwise."""
    from pyvgpu.auth import requires_tls
    from pyvgpu.tls import TLSConfigError, server_context
    if bool(opts.tls_cert) != bool(opts.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    if not opts.tls_cert:
        if requires_tls(opts.host):
            raise ConfigError(
                f"refusing to listen on {opts.host} without TLS: any address other than 127.0.0.1 carries your data "
                f"and kernels over the network. Pass --tls-cert PATH --tls-key PATH (`pyvgpu daemon start --host "
                f"{opts.host}` creates a self-signed pair and prints its fingerprint).")
        return None
    try:
        return server_context(opts.tls_cert, opts.tls_key)
    except TLSConfigError as exc:
        raise ConfigError(str(exc)) from None


def run(opts: DaemonOptions) -> int:
    logging.basicConfig(level=getattr(logging, opts.log_level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s pyvgpu-daemon %(levelname)s %(message)s")
    log = logging.getLogger("pyvgpu.daemon")
    from pyvgpu_daemon.memtune import tune_malloc
    tune_malloc()            # before the backend allocates anything: large NumPy temporaries stay in the heap
    # An emulated kernel keeps its worker thread busy in Python for as long as it runs; the event loop and other
    # sessions' workers then get the GIL when the launch yields it (emu/runtime/launch.py, while the device is
    # shared) or when the interpreter forces a switch: after 5 ms by default, which every small request of another
    # session paid; 0.5 ms bounds what the launch's own yields do not cover.
    sys.setswitchinterval(GIL_SWITCH_S)
    from pyvgpu_daemon.backends import make_backend
    from pyvgpu.units import parse_size
    from pyvgpu_daemon.leases import LeaseConfig
    from pyvgpu_daemon.server import MetricsError, ServerConfig, run_server
    from pyvgpu_daemon.sharing import Sharing, SharingConfig, parse_session_memory
    try:
        token = resolve_token(opts)
        tls = resolve_tls(opts)
        memory = parse_size(opts.emu_memory)
        default_limit, device_limits = parse_session_memory(opts.session_memory)
        if not opts.max_weight >= 1.0:
            raise ConfigError(f"--max-weight {opts.max_weight}: must be at least 1 (the default weight)")
        if not 0 <= opts.time_slice_ms <= 1000:
            raise ConfigError(f"--time-slice {opts.time_slice_ms}: expected 0 to 1000 ms")
        if opts.metrics_port is not None and not 0 <= opts.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port {opts.metrics_port}: not a port")
        sharing = SharingConfig(default_limit, device_limits, opts.scheduling == "fair", opts.max_weight,
                                opts.time_slice_ms / 1000.0)
        backend = make_backend(opts.backend, emu_devices=opts.emu_devices, emu_memory=memory,
                               emu_slowdown=opts.emu_slowdown, instance=emu_instance(opts.host, opts.port))
        Sharing(sharing, backend.devices())          # checks device ordinals of --session-memory
    except (ConfigError, ValueError, RuntimeError) as exc:
        print(f"pyvgpu-daemon: error: {exc}", file=sys.stderr, flush=True)
        return 2
    cfg = ServerConfig(host=opts.host, port=opts.port, token=token, tls=tls, bounds=opts.bounds, sharing=sharing,
                       metrics_port=opts.metrics_port, metrics_host=opts.metrics_host,
                       compress=opts.compress, leases=LeaseConfig(opts.lease_state))
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # uvloop is a dependency; plain asyncio keeps a broken install usable
        log.warning("uvloop not available; using the default asyncio loop")
        runner = asyncio.Runner()
    from pyvgpu_daemon.memtune import tune_gc
    tune_gc()                # set up: what exists now is never garbage (memtune.py)
    try:
        with runner:
            runner.run(run_server(cfg, backend))
    except MetricsError as exc:
        print(f"pyvgpu-daemon: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except OSError as exc:
        print(f"pyvgpu-daemon: error: cannot listen on {opts.host}:{opts.port}: {exc.strerror or exc}",
              file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        pass
    log.info("stopped")
    return 0


def emu_instance(host: str, port: int) -> str:
    """The name an emulated GPU's UUID is derived from: the daemon's address, so a daemon restarted at the same
    address shows the same GPUs. A daemon on a port the OS picks (--port 0) has no such address before it listens:
    it gets a name of its own per start, or two of them on one host would show GPUs with one UUID."""
    return f"{host}:{port}" if port else f"{host}:0/{uuid.uuid4()}"


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
