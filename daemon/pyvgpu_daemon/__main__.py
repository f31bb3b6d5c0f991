"""`python -m pyvgpu_daemon`: run the daemon in the foreground.

    python -m pyvgpu_daemon [--host 127.0.0.1] [--port 7700] [--backend auto|cuda|emu] [--token-file PATH]
                            [--emu-devices N] [--emu-memory SIZE] [--emu-slowdown FACTOR] [--log-level LEVEL]
                            [--session-memory [DEVICE=]SIZE ...] [--max-weight W] [--scheduling fair|off]
                            [--time-slice MS]
                            [--metrics-port PORT] [--metrics-host ADDR]

`pyvgpu daemon start` builds a DaemonOptions and calls run(options) (or main(argv)).
Exit status: 0 after a clean SIGTERM/SIGINT shutdown, 2 for a configuration error (said on stderr).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pyvgpu import config
from pyvgpu.protocol import DEFAULT_PORT


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
    session_memory: list[str] = field(default_factory=list)    # "SIZE" or "DEVICE=SIZE" (sharing.py)
    max_weight: float = 10.0
    scheduling: str = "fair"             # fair | off
    time_slice_ms: float = 2.0
    metrics_port: int | None = None
    metrics_host: str | None = None


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
    ns = p.parse_args(argv)
    return DaemonOptions(host=ns.host, port=ns.port, backend=ns.backend, token_file=ns.token_file,
                         emu_devices=ns.emu_devices, emu_memory=ns.emu_memory, emu_slowdown=ns.emu_slowdown,
                         log_level=ns.log_level, session_memory=ns.session_memory, max_weight=ns.max_weight,
                         scheduling=ns.scheduling, time_slice_ms=ns.time_slice, metrics_port=ns.metrics_port,
                         metrics_host=ns.metrics_host)


def resolve_token(opts: DaemonOptions) -> bytes | None:
    """The token to demand, or None for no authentication; ConfigError when one is required and missing."""
    from pyvgpu.auth import requires_token
    if opts.token:
        return opts.token
    if opts.token_file:
        try:
            text = Path(opts.token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {opts.token_file}: {exc.strerror}") from None
        if not text:
            raise ConfigError(f"token file {opts.token_file} is empty")
        return text.encode()
    if requires_token(opts.host):
        token = config.load_token()
        if not token:
            raise ConfigError(
                f"refusing to listen on {opts.host} without a token: any address other than 127.0.0.1 requires "
                f"authentication. Create one with `pyvgpu daemon start` (it writes {config.token_path()}), set "
                f"PYVGPU_TOKEN, or pass --token-file PATH.")
        return token
    return None


def run(opts: DaemonOptions) -> int:
    logging.basicConfig(level=getattr(logging, opts.log_level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s pyvgpu-daemon %(levelname)s %(message)s")
    log = logging.getLogger("pyvgpu.daemon")
    from pyvgpu_daemon.memtune import tune_malloc
    tune_malloc()            # before the backend allocates anything: large NumPy temporaries stay in the heap
    from pyvgpu_daemon.backends import make_backend
    from pyvgpu.units import parse_size
    from pyvgpu_daemon.server import MetricsError, ServerConfig, run_server
    from pyvgpu_daemon.sharing import Sharing, SharingConfig, parse_session_memory
    try:
        token = resolve_token(opts)
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
                               emu_slowdown=opts.emu_slowdown, instance=f"{opts.host}:{opts.port}")
        Sharing(sharing, backend.devices())          # checks device ordinals of --session-memory
    except (ConfigError, ValueError, RuntimeError) as exc:
        print(f"pyvgpu-daemon: error: {exc}", file=sys.stderr, flush=True)
        return 2
    cfg = ServerConfig(host=opts.host, port=opts.port, token=token, sharing=sharing,
                       metrics_port=opts.metrics_port, metrics_host=opts.metrics_host)
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # uvloop is a dependency; plain asyncio keeps a broken install usable
        log.warning("uvloop not available; using the default asyncio loop")
        runner = asyncio.Runner()
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


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
