"""The `pyvgpu` command: daemons, the host map, GPU listing, running programs through libvcudart.

Every failure is one line on stderr (`pyvgpu: error: ...`) and a nonzero exit status, never a traceback
(set PYVGPU_DEBUG=1 to get the traceback of an unexpected error).
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pyvgpu
from pyvgpu import auth, config, frameworks, hostmap, leasing, placement, tls
from pyvgpu.hostmap import Host, HostMapError, format_bytes
from pyvgpu.protocol import (DEFAULT_PORT, ENV_CENSUS, ENV_LEASES, ENV_MEMORY, ENV_STATS, ENV_WEIGHT, HELLO_CONTROL,
                             MIN_LEASE_FRACTION, STATUS_LEASES)
from pyvgpu.units import parse_size

PROG = "pyvgpu"
DAEMON_MODULE = "pyvgpu_daemon"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _err(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------- helpers
def connect_address(host: str) -> str:
    """Where to connect to reach a daemon listening on `host` (wildcards → loopback)."""
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((connect_address(host), port), timeout=timeout):
            return True
    except OSError:
        return False


def parse_port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: expected a number from 1 to 65535")
    return int(text)


def parse_host_spec(text: str) -> Host:
    try:
        return Host.parse(text)
    except HostMapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def _pid_state(pid: int) -> str | None:
    """'running', 'zombie' or None (gone). Looks at /proc so a reaped-late zombie does not count as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return "running"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state = stat.rsplit(")", 1)[1].split()[0]
        return "zombie" if state in ("Z", "X") else "running"
    except (FileNotFoundError, IndexError):
        return "running"


def _is_our_daemon(pid: int) -> bool:
    """The pid still belongs to a pyvgpu daemon (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True    # no /proc: trust the pid file
    return any(DAEMON_MODULE.encode() in part or b"pyvgpu" in part for part in cmdline)


def _live_daemon_pid(port: int) -> int | None:
    pid = _read_pid(config.daemon_pid_path(port))
    if pid is not None and _pid_state(pid) == "running" and _is_our_daemon(pid):
        return pid
    return None


def _load_client():
    try:
        from pyvgpu.client import Client
    except ImportError as exc:
        raise CliError(f"the protocol client is not available ({exc})") from None
    return Client


# ---------------------------------------------------------------------------------------------- daemon
def daemon_argv(args: argparse.Namespace) -> list[str]:
    """Arguments for `python -m pyvgpu_daemon`, from `pyvgpu daemon start`'s options.

    A daemon on a non-loopback address reads the token itself (PYVGPU_TOKEN or the token file); this makes sure
    one exists, creating the token file when neither does. It also needs TLS: without --tls-cert/--tls-key this
    host's self-signed certificate is used, created when missing, and its fingerprint is printed for clients."""
    argv = ["--host", args.host, "--port", str(args.port), "--backend", args.backend]
    if args.token_file is not None:
        if not Path(args.token_file).is_file():
            raise CliError(f"token file {args.token_file} does not exist (create one with `pyvgpu token`)")
        argv += ["--token-file", str(args.token_file)]
    elif auth.requires_token(args.host) and config.load_token() is None:
        config.ensure_token()
        _note(f"listening on {args.host} requires a token: created {config.token_path()}; clients need the same "
              f"token in their {config.token_path()} or PYVGPU_TOKEN (`pyvgpu token --show` prints it)")
    argv += _tls_argv(args)
    if args.emu_devices is not None:
        argv += ["--emu-devices", str(args.emu_devices)]
    if args.emu_memory is not None:
        argv += ["--emu-memory", args.emu_memory]
    if args.emu_slowdown is not None:
        argv += ["--emu-slowdown", str(args.emu_slowdown)]
    if args.log_level is not None:
        argv += ["--log-level", args.log_level]
    for spec in args.session_memory or []:
        argv += ["--session-memory", spec]
    lease_state = args.lease_state or str(config.daemon_lease_path(args.port))
    if lease_state != "none":
        argv += ["--lease-state", lease_state]
    for flag, value in (("--max-weight", args.max_weight), ("--scheduling", args.scheduling),
                        ("--time-slice", args.time_slice),
                        ("--metrics-port", args.metrics_port), ("--metrics-host", args.metrics_host)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def _tls_argv(args: argparse.Namespace) -> list[str]:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise CliError("--tls-cert and --tls-key go together")
    if args.tls_cert:
        return ["--tls-cert", str(args.tls_cert), "--tls-key", str(args.tls_key)]
    if not auth.requires_tls(args.host):
        return []
    cert, key = tls.daemon_cert_paths()
    if not (cert.is_file() and key.is_file()):
        names = list(dict.fromkeys([socket.gethostname(), socket.getfqdn(), "localhost", "127.0.0.1"]
                                   + ([args.host] if args.host not in ("0.0.0.0", "::") else [])))
        tls.make_self_signed(cert, key, names)
        _note(f"listening on {args.host} requires TLS: created a self-signed certificate {cert}")
    fp = tls.cert_fingerprint(cert)
    _note(f"TLS certificate sha256:{fp}; on each client: `{PROG} tls trust {fp}` "
          f"(or PYVGPU_TLS_FINGERPRINT={fp})")
    return ["--tls-cert", str(cert), "--tls-key", str(key)]


def cmd_daemon_start(args: argparse.Namespace) -> int:
    argv = daemon_argv(args)
    if port_open(args.host, args.port):
        pid = _live_daemon_pid(args.port)
        owner = f" (a daemon started by `pyvgpu daemon start --detach`, pid {pid})" if pid else ""
        raise CliError(f"something is already listening on {args.host}:{args.port}{owner}")
    if not args.detach:
        try:
            from pyvgpu_daemon.__main__ import main as daemon_main
        except ImportError as exc:
            raise CliError(f"the daemon package is not installed ({exc})") from None
        return int(daemon_main(argv) or 0)
    return _start_detached(args, argv)


def _start_detached(args: argparse.Namespace, argv: list[str]) -> int:
    pid_path = config.daemon_pid_path(args.port)
    log_path = config.daemon_log_path(args.port)
    old = _live_daemon_pid(args.port)
    if old is not None:
        raise CliError(f"a daemon for port {args.port} is already running (pid {old}, pid file {pid_path})")
    config.private_dir(pid_path.parent)
    cmd = [sys.executable, "-m", DAEMON_MODULE, *argv]
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, config.PRIVATE_FILE), "ab") as log:
        start_offset = log.tell()
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} pyvgpu daemon start: {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    config.write_file(pid_path, f"{proc.pid}\n".encode())
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            pid_path.unlink(missing_ok=True)
            raise CliError(f"the daemon exited with status {code} during start-up: "
                           f"{_last_log_line(log_path, start_offset)} (log: {log_path})")
        if port_open(args.host, args.port, timeout=0.2):
            what = _describe_running(args)
            print(f"daemon listening on {args.host}:{args.port} (pid {proc.pid}, {what}); "
                  f"log: {log_path}; stop it with `{PROG} daemon stop --port {args.port}`")
            return 0
        time.sleep(0.05)
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
    pid_path.unlink(missing_ok=True)
    raise CliError(f"the daemon did not listen on {args.host}:{args.port} within {args.wait:.0f} s "
                   f"(log: {log_path})")


def _describe_running(args: argparse.Namespace) -> str:
    """'backend emu, 2 device(s)' from the daemon's hello, or the requested backend if it cannot be asked."""
    token = Path(args.token_file).read_text().strip().encode() if args.token_file else config.load_token()
    try:
        client = _load_client().connect(connect_address(args.host), args.port, token=token, timeout=5.0)
    except Exception:  # noqa: BLE001 - only a nicer message is at stake
        return f"backend {args.backend}"
    try:
        info = client.info or {}
        return f"backend {info.get('backend', args.backend)}, {len(info.get('devices') or [])} device(s)"
    finally:
        client.close()


def _last_log_line(path: Path, offset: int = 0) -> str:
    """The last non-empty line the daemon wrote since `offset` (this start's part of the appended log)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return "no log"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("--- ")]
    return lines[-1] if lines else "no output"


def cmd_daemon_stop(args: argparse.Namespace) -> int:
    pid_path = config.daemon_pid_path(args.port)
    pid = _read_pid(pid_path)
    if pid is None:
        others = sorted(p.stem.split("-", 1)[1] for p in config.state_dir().glob("daemon-*.pid"))
        hint = f" (pid files exist for port {', '.join(others)}; use --port)" if others else ""
        raise CliError(f"no daemon started with `{PROG} daemon start --detach` on port {args.port}: "
                       f"no pid file {pid_path}{hint}")
    if _pid_state(pid) != "running" or not _is_our_daemon(pid):
        pid_path.unlink(missing_ok=True)
        raise CliError(f"the daemon on port {args.port} (pid {pid}) is not running; removed its stale pid file")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and _pid_state(pid) == "running":
        time.sleep(0.05)
    forced = False
    if _pid_state(pid) == "running":
        os.kill(pid, signal.SIGKILL)
        forced = True
        end = time.monotonic() + 5
        while time.monotonic() < end and _pid_state(pid) == "running":
            time.sleep(0.05)
    pid_path.unlink(missing_ok=True)
    how = f"killed after {args.timeout:.0f} s without exiting on SIGTERM" if forced else "stopped"
    print(f"daemon on port {args.port} (pid {pid}) {how}")
    return 0


def _connect(host: str, port: int, timeout: float):
    """A session for the daemon's own ops (HELLO_CONTROL: it gets in while --max-sessions sessions are open)."""
    Client = _load_client()
    try:
        return Client.connect(connect_address(host), port, token=config.load_token(), timeout=timeout,
                              hello={HELLO_CONTROL: True})
    except Exception as exc:  # noqa: BLE001
        raise CliError(f"cannot reach the daemon at {Host(connect_address(host), port)}: "
                       f"{hostmap.describe_error(exc)}") from None


def cmd_daemon_status(args: argparse.Namespace) -> int:
    client = _connect(args.host, args.port, args.timeout)
    try:
        status = client.status()
        info = getattr(client, "info", None) or {}
    finally:
        client.close()
    if args.json:
        print(json.dumps(status, indent=2, default=_json_default))
        return 0
    print(format_status(Host(connect_address(args.host), args.port), status, info))
    return 0


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray)):
        return obj.hex()
    return str(obj)


def _mem(value: Any) -> str:
    return format_bytes(int(value)) if isinstance(value, (int, float)) else str(value)


def _slowdown(value: Any) -> str:
    return f"{float(value):.2f}x" if isinstance(value, (int, float)) else "-"


def format_status(where: Host, status: dict, info: dict | None = None) -> str:
    """Human-readable `daemon status`: backend, devices (memory in use, load, sharing slowdown), sessions (weight,
    memory used of its limit and device time per device)."""
    status = status or {}
    info = info or {}
    head = f"daemon {status.get('address') or where}: backend {status.get('backend') or info.get('backend') or '?'}"
    if "pid" in status:
        head += f", pid {status['pid']}"
    if isinstance(status.get("uptime_s"), (int, float)):
        head += f", up {float(status['uptime_s']):.0f} s"
    if "auth" in status:
        head += ", token required" if status["auth"] else ", no token (loopback)"
    if status.get("scheduling"):
        head += f", scheduling {status['scheduling']}"
    if isinstance(status.get("handshaking"), int) and status["handshaking"]:
        head += f", {status['handshaking']} connection(s) in their handshake"
    lines = [head]
    sessions = [s for s in (status.get("sessions") or []) if isinstance(s, dict)]
    usage = {u.get("device"): u for u in (status.get("device_usage") or []) if isinstance(u, dict)}
    devices = status.get("devices") or info.get("devices") or []
    lines.append(f"devices: {len(devices)}")
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict):
            lines.append(f"  {i}: {dev}")
            continue
        u = usage.get(i, {})
        total = dev.get("total_mem")
        used = u.get("memory_used", u.get("memory", 0))
        mem = f"{_mem(used)} held of {_mem(total) if total is not None else '?'}"
        if isinstance(u.get("sessions"), int):
            mem += f" by {u['sessions']} session(s)"
        line = f"  {i}: {dev.get('name', '?')}, {mem}" + (f", {dev['backend']}" if dev.get("backend") else "")
        if isinstance(u.get("busy_ratio"), (int, float)):
            line += (f"; busy {u['busy_ratio']:.2f} (last 10 s), {u.get('active_sessions', 0)} active, "
                     f"sharing slowdown {_slowdown(u.get('slowdown'))}")
        if isinstance(u.get("session_memory_limit"), int) and u["session_memory_limit"] != total:
            line += f"; session limit {_mem(u['session_memory_limit'])}"
        lease = leasing.summary(status, i)
        if lease != "-":
            line += f"; leased: {lease}"
        lines.append(line)
    leases = [x for x in status.get(STATUS_LEASES) or [] if isinstance(x, dict)]
    if leases:
        lines.append(f"leases: {len(leases)}")
    for x in leases:
        kind = "exclusive" if x.get("exclusive") else f"share {float(x.get('fraction', 0)):g}"
        if not x.get("exclusive") and isinstance(x.get("memory"), int):
            kind += f", {_mem(x['memory'])} quota, weight {float(x.get('weight') or 0):g}"
        lines.append(f"  lease {x.get('tag', '?')}: dev {x.get('device', '?')}, {kind}, {x.get('holder') or '?'}"
                     + (f", job {x['job']}" if x.get("job") else "")
                     + f", expires in {float(x.get('expires_in', 0)):.0f} s (ttl {float(x.get('ttl', 0)):g} s), "
                       f"{x.get('sessions', 0)} session(s)")
    others = [s for s in sessions if not s.get("self")]
    lines.append(f"sessions: {len(others)}" + (" (not counting this status query)" if len(others) != len(sessions)
                                               else ""))
    for s in others:
        who = s.get("client") or s.get("peer") or ""
        line = f"  session {s.get('id', '?')}" + (f" ({who})" if who else "")
        if s.get("peer") and s.get("client"):
            line += f" from {s['peer']}"
        if isinstance(s.get("since"), (int, float)):
            line += f", {max(0.0, time.time() - float(s['since'])):.0f} s"
        if isinstance(s.get("weight"), (int, float)) and s["weight"] != 1.0:
            line += f", weight {s['weight']:g}"
        if "memory" in s:
            line += f": {_mem(s['memory'])} held"
        per_dev = []
        for d in s.get("devices") or []:
            if not isinstance(d, dict):
                continue
            extra = ", ".join(f"{d[k]} {k}" for k in ("allocations", "modules", "streams", "events") if d.get(k))
            err = f", sticky error {d['sticky_error']}" if d.get("sticky_error") else ""
            used = d.get("memory_used", d.get("memory", 0))
            limit = d.get("memory_limit")
            mem = f"{_mem(used)} of {_mem(limit)} limit" if isinstance(limit, int) else f"{_mem(used)}, no limit"
            if isinstance(d.get("device_seconds"), (int, float)):
                mem += f", {d['device_seconds']:.3f} s device time"
                if d.get("slowdown") is not None:
                    mem += f", slowdown {_slowdown(d['slowdown'])}"
            per_dev.append(f"dev {d.get('device', '?')}: {mem}" + (f" ({extra})" if extra else "") + err)
        if per_dev:
            line += " [" + "; ".join(per_dev) + "]"
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- hosts
def cmd_hosts_add(args: argparse.Namespace) -> int:
    added, present = hostmap.add(args.hosts)
    for h in present:
        _note(f"{h} is already in the host map; not added again")
    for h in added:
        print(f"added {h}")
    _warn_env_override()
    return 0


def cmd_hosts_remove(args: argparse.Namespace) -> int:
    if args.all:
        if args.hosts:
            raise CliError("give either hosts or --all, not both", 2)
        path = config.hosts_path()
        count = len(hostmap.load_file(path))
        hostmap.save([], path)
        print(f"removed all {count} host(s)")
        return 0
    if not args.hosts:
        raise CliError("name the hosts to remove (HOST[:PORT]...) or give --all", 2)
    removed, missing = hostmap.remove(args.hosts)
    for h in removed:
        print(f"removed {h}")
    for h in missing:
        _err(f"{h} is not in the host map ({config.hosts_path()})")
    _warn_env_override()
    return 1 if missing else 0


def cmd_hosts_list(args: argparse.Namespace) -> int:
    hm = hostmap.load()
    if args.json:
        print(json.dumps({"source": hm.source, "hosts": [str(h) for h in hm]}, indent=2))
        return 0
    if hm.source == hostmap.ENV_HOSTS:
        _note(f"{hostmap.ENV_HOSTS} is set: it replaces {config.hosts_path()} for this shell")
    if not len(hm):
        _note(f"the host map is empty ({hm.source}); add daemons with `{PROG} hosts add HOST[:PORT]`")
        return 0
    for h in hm:
        print(h)
    return 0


def _warn_env_override() -> None:
    if os.environ.get(hostmap.ENV_HOSTS, "").strip():
        _note(f"note: {hostmap.ENV_HOSTS} is set and replaces the hosts file while it is set")


# ---------------------------------------------------------------------------------------------- devices
def _host_map_for(args: argparse.Namespace) -> hostmap.HostMap:
    if getattr(args, "hosts", None):
        return hostmap.HostMap(hostmap.parse_env(args.hosts, "--hosts"), "--hosts")
    return hostmap.load()


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _device_load(rep: hostmap.HostDevices, ordinal: int) -> dict[str, Any]:
    """The device_usage entry of `ordinal` in a report's daemon status ({} when the daemon did not say)."""
    for u in (rep.status or {}).get("device_usage") or []:
        if isinstance(u, dict) and u.get("device") == ordinal:
            return u
    return {}


def _daemon_entries(args: argparse.Namespace) -> list[Host]:
    """The host map's (or --hosts') entries that name daemons (not `auto`); CliError when there are none."""
    hm = _host_map_for(args)
    entries = [h for h in hm.hosts if not h.is_auto]
    if not entries:
        raise CliError(f"no hosts: the host map ({hm.source}) is empty; add one with "
                       f"`{PROG} hosts add HOST[:PORT]` or pass --hosts")
    return entries


def _report_of(reports: list[hostmap.HostDevices], g: hostmap.Gpu) -> hostmap.HostDevices | None:
    return next((r for r in reports if r.host.daemon_key() == g.host.daemon_key() and r.error is None), None)


def leases_of(reports: list[hostmap.HostDevices], g: hostmap.Gpu) -> list[Any]:
    rep = _report_of(reports, g)
    return [x for x in ((rep.status or {}).get(STATUS_LEASES) or [] if rep else [])
            if isinstance(x, dict) and x.get("device") == g.remote_ordinal]


def cmd_devices(args: argparse.Namespace) -> int:
    entries = _daemon_entries(args)
    reports = hostmap.query_daemons(entries, config.load_token(), args.timeout, _load_client().connect, status=True)
    gpus = hostmap.number_gpus(reports)
    failed = [r for r in reports if r.error is not None]
    load = {}
    for g in gpus:
        rep = next(r for r in reports if r.host.daemon_key() == g.host.daemon_key() and r.error is None)
        load[g.index] = _device_load(rep, g.remote_ordinal)
    if args.json:
        print(json.dumps({
            "gpus": [{"index": g.index, "host": str(g.host), "remote_ordinal": g.remote_ordinal, "name": g.name,
                      "total_mem": g.total_mem, "backend": g.backend,
                      "memory_used": load[g.index].get("memory_used"),
                      "busy_ratio": load[g.index].get("busy_ratio"),
                      "sharing_slowdown": load[g.index].get("slowdown"),
                      "sessions": load[g.index].get("sessions"),
                      "active_sessions": load[g.index].get("active_sessions"),
                      "leases": [x for x in leases_of(reports, g) if isinstance(x, dict)]} for g in gpus],
            "errors": [{"host": str(r.host), "error": r.error} for r in failed]}, indent=2))
    else:
        if gpus:
            rows = [("GPU", "HOST", "ORDINAL", "NAME", "MEMORY", "USED", "BUSY", "SLOWDOWN", "SESSIONS", "LEASE",
                     "BACKEND")]
            for g in gpus:
                u = load[g.index]
                busy = u.get("busy_ratio")
                rep = _report_of(reports, g)
                rows.append((f"GPU{g.index}", str(g.host), str(g.remote_ordinal), g.name, format_bytes(g.total_mem),
                             format_bytes(int(u["memory_used"])) if "memory_used" in u else "?",
                             f"{busy:.2f}" if isinstance(busy, (int, float)) else "?", _slowdown(u.get("slowdown")),
                             str(u.get("sessions", "?")),
                             leasing.summary(rep.status or {}, g.remote_ordinal, 40) if rep else "?", g.backend))
            print(_table(rows))
        else:
            _note("no GPUs found")
        for r in reports:
            if r.error is None and not r.devices:
                _note(f"{r.host}: the daemon reports no devices")
            elif r.error is None and r.host.device is not None and r.host.device >= len(r.devices or []):
                _note(f"{r.host}: the daemon has no device {r.host.device}")
    for r in {r.host.daemon_key(): r for r in failed}.values():
        _err(f"{r.host.daemon}: {r.error}")
    if failed and gpus:
        _note("GPU numbers above count only the reachable hosts")
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------- run / lib / token
def _lib(name: str = pyvgpu.LIB_NAME) -> Path:
    try:
        return pyvgpu.lib_path(name)
    except FileNotFoundError as exc:
        raise CliError(str(exc)) from None


def cmd_lib(args: argparse.Namespace) -> int:
    if args.dir:
        print(_lib(pyvgpu.DRIVER_LIB_NAME).parent)
    elif args.preload:
        print(" ".join(str(p) for p in pyvgpu.forwarded_libraries(_lib(pyvgpu.DRIVER_LIB_NAME).parent)))
    else:
        print(_lib(pyvgpu.DRIVER_LIB_NAME if args.driver else pyvgpu.LIB_NAME))
    return 0


def static_executable(path: str) -> bool:
    """Whether path is an ELF executable without a program interpreter (statically linked): such a program
    cannot dlopen libcuda.so.1 nor take LD_PRELOAD, so nothing can remote its CUDA calls."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return False                       # not a little-endian 64-bit ELF: not ours to judge
            phoff = int.from_bytes(head[0x20:0x28], "little")
            phentsize = int.from_bytes(head[0x36:0x38], "little")
            phnum = int.from_bytes(head[0x38:0x3A], "little")
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    types = [int.from_bytes(table[i:i + 4], "little") for i in range(0, len(table), phentsize)]
    return 3 not in types and 2 not in types       # no PT_INTERP, no PT_DYNAMIC


DRIVER_NAME = b"libcuda.so"
SCAN_LIMIT = 1 << 30                               # bytes of an executable searched for driver paths


def driver_paths(path: str, own_dir: Path | None = None) -> list[str]:
    """The absolute paths of a libcuda.so* the file names (NUL-terminated strings, as dlopen takes them), other than
    files of pyvgpu's own library directory: a program that loads the driver by path bypasses libvcuda."""
    found: list[str] = []
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            end = min(len(data), SCAN_LIMIT)
            i = data.find(DRIVER_NAME, 0, end)
            while i >= 0:
                start = data.rfind(b"\0", max(0, i - 1024), i) + 1
                stop = data.find(b"\0", i, min(end, i + 64))
                text = data[start:stop] if stop > 0 else b""
                if text.startswith(b"/") and all(0x21 <= c < 0x7f for c in text):
                    p = text.decode()
                    if p not in found and not (own_dir and Path(p).parent == own_dir):
                        found.append(p)
                i = data.find(DRIVER_NAME, i + 1, end)
    except (OSError, ValueError):                  # unreadable, or empty (mmap of 0 bytes)
        return []
    return found


def run_env(hosts: list[Host] | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `pyvgpu run` gives the program."""
    env = dict(os.environ if base is None else base)
    # libvcudart stands in for libcudart.so.13 (programs built with -cudart shared); libvcuda for libcuda.so.1
    # (the static runtime nvcc links by default, NVIDIA's own libcudart, driver-API programs, CUDA libraries);
    # libvcublas, libvnvml, ... for theirs. Preloaded, each SONAME is taken before anything else can load NVIDIA's
    # copy: it beats an RPATH/RUNPATH (torch's wheel folders) and the already-loaded check of loaders that take
    # absolute paths (CuPy's cuda-pathfinder); a copy loaded by path anyway (torch's own preloading) is shadowed,
    # the preloaded one binds first (`--explain` shows which file served each library).
    runtime, driver = _lib(), _lib(pyvgpu.DRIVER_LIB_NAME)
    libs = [str(p) for p in pyvgpu.forwarded_libraries(driver.parent)] or [str(runtime), str(driver)]
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p and p not in libs]
    env["LD_PRELOAD"] = " ".join([*libs, *preload])
    # The names programs look for (libcuda.so, libcublas.so.13, ...) are in the same directory.
    libdir = str(driver.parent)
    paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != libdir]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, *paths])
    if hosts is None:
        hosts = list(hostmap.load(env))
    if not hosts:
        raise CliError(f"no hosts: the host map ({config.hosts_path()}) is empty; add one with "
                       f"`{PROG} hosts add HOST[:PORT]` or pass --hosts")
    env[hostmap.ENV_HOSTS] = ",".join(str(h) for h in hosts)
    return env


def place(pool: list[Host], n: int, memory: int, timeout: float, explain: bool) -> list[Host]:
    """The n GPUs of `pool` placement chooses (best first), as host:port/ordinal entries, without leasing them
    (inside a job that holds leases already: the pool is the job's own GPUs)."""
    if not pool:
        raise CliError("placement needs a pool: the host map has no daemons besides `auto` (add some with "
                       f"`{PROG} hosts add HOST[:PORT]` or pass --hosts)")
    reports = hostmap.query_daemons(pool, config.load_token(), timeout, _load_client().connect, status=True)
    candidates: list[placement.Candidate] = []
    for r in reports:
        if r.error is not None:
            _note(f"placement: skipping {r.host}: {r.error}")
            continue
        candidates += placement.candidates_from_status(r.host, r.status or {"devices": r.devices},
                                                       len(candidates), only=r.host.device)
    chosen, every = placement.rank(candidates, n, memory)
    if explain:
        for ch in every:
            print(f"{PROG}: placement: {placement.explain(ch, memory)}", file=sys.stderr)
    if len(chosen) < n:
        fits = f" with {format_bytes(memory)} free" if memory else ""
        raise CliError(f"placement: {n} GPU(s) asked, {len(chosen)} of the pool's {len(candidates)} "
                       f"reachable GPU(s) qualify{fits} (--explain says why)")
    return [Host(ch.candidate.host.host, ch.candidate.host.port, ch.candidate.ordinal) for ch in chosen]


def lease_gpus(args: argparse.Namespace, pool: list[Host], n: int, memory: int, command: list[str]) -> leasing.Held:
    """Lease n GPUs of the pool for the program (waiting for them unless --no-wait), best first."""
    if not pool:
        raise CliError("placement needs a pool: the host map has no daemons besides `auto` (add some with "
                       f"`{PROG} hosts add HOST[:PORT]` or pass --hosts)")
    terms = leasing.Terms(holder=f"{PROG} run (pid {os.getpid()} on {socket.gethostname()}): "
                                 f"{' '.join(command)[:120]}",
                          job=f"{PROG}-run:{socket.gethostname()}:{os.getpid()}", ttl=args.lease_ttl,
                          fraction=args.share, memory=(memory or None) if args.share is not None else None,
                          weight=args.weight if args.share is not None else None)

    def on_round(rnd: leasing.Round) -> None:
        if args.explain:
            for ch in rnd.every:
                print(f"{PROG}: placement: {placement.explain(ch, memory)}", file=sys.stderr)
        for e in rnd.errors:
            _note(f"placement: skipping {e}")

    def on_wait(why: str) -> None:
        limit = "" if args.wait is None else f" (at most {args.wait:g} s)"
        _note(f"waiting for a lease{limit}: {why}")

    try:
        held = leasing.acquire(pool, n, terms, memory=memory, wait=0.0 if args.no_wait else args.wait,
                               token=config.load_token(), timeout=args.timeout, connect=_load_client().connect,
                               on_round=on_round, on_wait=on_wait)
    except leasing.LeaseError as exc:
        hint = "; without --no-wait it waits for them" if args.no_wait else ""
        raise CliError(f"no lease: {exc}{hint}") from None
    if args.explain:
        _note(f"leased {leasing.shares(held)}")
    return held


def start_failure(program: str, exc: OSError) -> CliError:
    """The one-line error, with the shell's exit status, for a program that could not be started."""
    if isinstance(exc, FileNotFoundError):
        return CliError(f"{program}: command not found", 127)
    if isinstance(exc, PermissionError):
        return CliError(f"{program}: permission denied (is it executable?)", 126)
    return CliError(f"{program}: {exc.strerror or exc}", 126)


FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def run_leased(command: list[str], env: dict[str, str], held: leasing.Held, ttl: float, timeout: float) -> int:
    """Run the program as a child while its leases are renewed; give them back when it exits (also when it cannot
    start). → its exit status (128 + N when signal N ended it). Signals sent to `pyvgpu run` go on to the program;
    Ctrl-C reaches the program from the terminal directly."""
    token = config.load_token()
    keeper = leasing.Keeper(held, ttl, token, timeout).start()
    previous = {sig: signal.getsignal(sig) for sig in (*FORWARDED_SIGNALS, signal.SIGINT)}
    proc: subprocess.Popen | None = None
    early: list[int] = []                 # signals that came before Popen returned (the program may run already)

    def forward(sig: int, _frame: Any) -> None:
        if proc is None:
            early.append(sig)
        elif proc.poll() is None:
            proc.send_signal(sig)

    try:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, forward)
        signal.signal(signal.SIGINT, lambda _s, _f: None)
        try:
            proc = subprocess.Popen(command, env=env)
        except OSError as exc:
            raise start_failure(command[0], exc) from None
        for sig in early:
            proc.send_signal(sig)
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        keeper.stop()
        for problem in leasing.release(held, token, timeout):
            _note(f"could not give a lease back ({problem}); it expires within {ttl:g} s")
    return 128 - code if code < 0 else code


def cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("nothing to run: usage: pyvgpu run [--hosts HOST:PORT,...] [-n N] -- PROGRAM [ARGS...]", 2)
    entries = hostmap.parse_env(args.hosts, "--hosts") if args.hosts else list(hostmap.load())
    memory = 0
    if args.memory is not None:
        try:
            memory = parse_size(args.memory)
        except ValueError as exc:
            raise CliError(f"--memory: {exc}", 2) from None
    if args.weight is not None and not args.weight > 0:
        raise CliError("--weight must be a positive number", 2)
    autos = [h for h in entries if h.is_auto]
    n = args.n if args.n is not None else sum(h.count for h in autos)
    if args.n is not None and args.n < 1:
        raise CliError("-n must be at least 1", 2)
    if args.share is not None and not MIN_LEASE_FRACTION <= args.share <= 1:
        raise CliError(f"--share must be from {MIN_LEASE_FRACTION:g} to 1", 2)
    if args.wait is not None and args.wait < 0:
        raise CliError("--wait must not be negative", 2)
    if not args.lease_ttl >= 1:
        raise CliError("--lease-ttl must be at least 1 second", 2)
    pool = [h for h in entries if not h.is_auto]
    held = None
    if not n:
        hosts = entries
    elif os.environ.get(ENV_LEASES):         # inside a job that holds leases: choose among its GPUs
        hosts = place(pool, n, memory, args.timeout, args.explain)
    else:
        held = lease_gpus(args, pool, n, memory, command)
        hosts = held.hosts()
    env = run_env(hosts)
    if held is not None:
        env[ENV_LEASES] = ",".join(held.ids())
    if memory:
        env[ENV_MEMORY] = str(memory)
    if args.weight is not None:
        env[ENV_WEIGHT] = repr(float(args.weight))
    if args.stats is not None:
        env[ENV_STATS] = args.stats
    if args.census is not None:
        env[ENV_CENSUS] = args.census
    elif args.explain:
        env[ENV_CENSUS] = "libraries"
    wanted = {k: v for k, v in frameworks.PTX_SWITCHES.items() if k not in env}
    ptx_linker = _lib(pyvgpu.DRIVER_LIB_NAME).parent / pyvgpu.PTX_LINKER_LIB_NAME
    if (wanted or ptx_linker.is_file()) and frameworks.emulated(
            [h for h in hosts if not h.is_auto], config.load_token(), min(args.timeout, frameworks.QUERY_TIMEOUT_S),
            _load_client().connect):
        env.update(frameworks.jit_switches(env, True))
        env["LD_PRELOAD"] = frameworks.with_ptx_linker(env["LD_PRELOAD"], ptx_linker, True)
        nvidia_linker = frameworks.nvidia_nvjitlink()
        if nvidia_linker and frameworks.ENV_NVIDIA_NVJITLINK not in env:
            env[frameworks.ENV_NVIDIA_NVJITLINK] = str(nvidia_linker)
    exe = shutil.which(command[0], path=env.get("PATH")) if "/" not in command[0] else command[0]
    if exe and static_executable(exe):
        raise CliError(f"{command[0]} is statically linked: it cannot load libcuda.so.1 or take LD_PRELOAD, so "
                       f"its CUDA calls cannot be remoted (link it dynamically; nvcc does by default)", 126)
    bypass = driver_paths(exe, Path(env["LD_LIBRARY_PATH"].split(os.pathsep)[0])) if exe else []
    if bypass:
        _note(f"{command[0]} names the CUDA driver by path ({bypass[0]}): if it loads it from there, its CUDA calls "
              f"bypass pyvgpu and cannot be remoted (libcuda.so.1 loaded by name is pyvgpu's)")
    if args.verbose:
        extra = "".join(f" {k}={env[k]}" for k in (ENV_MEMORY, ENV_WEIGHT, ENV_LEASES, *frameworks.PTX_SWITCHES,
                                                    frameworks.ENV_NVIDIA_NVJITLINK) if k in env)
        _note(f"LD_PRELOAD={env['LD_PRELOAD']} LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']} "
              f"{hostmap.ENV_HOSTS}={env[hostmap.ENV_HOSTS]}{extra}")
    sys.stdout.flush()
    sys.stderr.flush()
    if held is not None:
        return run_leased(command, env, held, args.lease_ttl, args.timeout)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        raise start_failure(command[0], exc) from None
    return 0  # not reached


def cmd_tls_fingerprint(args: argparse.Namespace) -> int:
    cert = Path(args.cert) if args.cert else tls.daemon_cert_paths()[0]
    if not cert.is_file():
        raise CliError(f"no daemon certificate {cert} yet (`{PROG} daemon start --host ADDR` creates one)")
    print(tls.cert_fingerprint(cert))
    return 0


def cmd_tls_trust(args: argparse.Namespace) -> int:
    try:
        path = tls.trust_fingerprint(args.fingerprint, args.note or "")
    except tls.TLSConfigError as exc:
        raise CliError(str(exc), 2) from None
    print(f"trusted: {tls.normalize_fingerprint(args.fingerprint)} (in {path}); this client now speaks TLS to "
          f"every daemon")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from pyvgpu import top
    entries = _daemon_entries(args)
    if not args.interval > 0:
        raise CliError("--interval must be positive", 2)
    clear = sys.stdout.isatty() if args.clear is None else args.clear
    return top.run(entries, args.interval, args.iterations, sys.stdout, clear, args.timeout)


def cmd_token(args: argparse.Namespace) -> int:
    path = config.token_path()
    if args.new:
        config.write_token()
        print(f"new token written to {path}; restart daemons that use it and copy it to their clients")
    elif not path.exists() or not path.read_text().strip():
        config.write_token()
        print(f"created token {path}")
    elif not args.show:
        print(f"token exists: {path}")
    if os.environ.get("PYVGPU_TOKEN"):
        _note("PYVGPU_TOKEN is set: it overrides the token file in this shell")
    if args.show:
        print(path.read_text().strip())
    return 0


# ---------------------------------------------------------------------------------------------- parser
class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=_Formatter,
        description="pyvgpu: run unmodified CUDA programs on GPUs of other hosts (or on an emulated GPU).",
        epilog="typical use:\n"
               "  pyvgpu daemon start                 # on each GPU host (127.0.0.1:7700 by default)\n"
               "  pyvgpu hosts add gpu-a gpu-b:7701   # on the client: GPU0, GPU1, ... appear\n"
               "  pyvgpu devices                      # list them\n"
               "  pyvgpu run -- ./app args            # or: LD_PRELOAD=$(pyvgpu lib) ./app\n")
    p.add_argument("--version", action="version", version=f"{PROG} {pyvgpu.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    # daemon
    d = sub.add_parser("daemon", help="start, stop or inspect a GPU daemon on this host",
                       description="Manage the pyvgpu daemon, which executes remoted CUDA calls on this host's "
                                   "GPUs (backend cuda) or on emulated GPUs (backend emu).")
    dsub = d.add_subparsers(dest="daemon_command", metavar="ACTION")
    dsub.required = True
    ds = dsub.add_parser(
        "start", help="start a daemon (foreground unless --detach)", formatter_class=_Formatter,
        description="Start a daemon. It listens on 127.0.0.1 unless --host says otherwise; listening on any other "
                    "address requires a token (created in the config directory when missing, see "
                    "`pyvgpu token`). Runs in the foreground until Ctrl-C / SIGTERM unless --detach is given.")
    ds.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    ds.add_argument("--port", type=parse_port, default=DEFAULT_PORT, help="TCP port (default: %(default)s)")
    ds.add_argument("--backend", choices=("auto", "cuda", "emu"), default="auto",
                    help="cuda: this host's GPUs via cuda-python; emu: emulated GPUs on the CPU; "
                         "auto: cuda when a GPU is present, else emu (default: %(default)s)")
    ds.add_argument("--detach", action="store_true",
                    help="run in the background: writes a pid file and a log under "
                         f"{config.state_dir()} (keyed by port), waits until the daemon listens")
    ds.add_argument("--token-file", metavar="PATH",
                    help="require clients to prove this shared token, even on loopback (default for a "
                         f"non-loopback --host: PYVGPU_TOKEN or {config.token_path()}, created when missing)")
    ds.add_argument("--tls-cert", metavar="PATH",
                    help="PEM certificate to serve TLS with (default for a non-loopback --host: this host's "
                         f"self-signed {tls.daemon_cert_paths()[0]}, created when missing)")
    ds.add_argument("--tls-key", metavar="PATH", help="PEM private key of --tls-cert")
    ds.add_argument("--emu-devices", type=int, metavar="N", help="number of emulated GPUs (backend emu; default 1)")
    ds.add_argument("--emu-memory", metavar="SIZE",
                    help="memory of each emulated GPU, e.g. 4G or 512M (backend emu; default 4G)")
    ds.add_argument("--emu-slowdown", type=float, metavar="F",
                    help="make the emulated GPUs F times slower (for uneven-GPU experiments)")
    ds.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                    help="daemon log verbosity (default: INFO)")
    ds.add_argument("--session-memory", action="append", metavar="[DEVICE=]SIZE",
                    help="memory quota of each session: on every device (e.g. 2G) or on one (e.g. 1=8G); "
                         "repeatable; clients may ask for less (`pyvgpu run --memory`); default: none")
    ds.add_argument("--max-weight", type=float, metavar="W",
                    help="largest share weight a client may ask for with `pyvgpu run --weight` (default 10)")
    ds.add_argument("--scheduling", choices=("fair", "off"),
                    help="fair: the sessions of a device share its time by weight (default); off: no arbitration")
    ds.add_argument("--time-slice", type=float, metavar="MS",
                    help="device time a session may run ahead of a waiting one before it hands the GPU over "
                         "(default 2 ms)")
    ds.add_argument("--metrics-port", type=int, metavar="PORT",
                    help="serve Prometheus metrics at http://HOST:PORT/metrics")
    ds.add_argument("--metrics-host", metavar="ADDR",
                    help="address of the metrics server (default: the daemon's --host)")
    ds.add_argument("--lease-state", metavar="PATH",
                    help="file the daemon keeps its GPU leases in, so that a restart keeps the GPUs of running jobs "
                         "leased to them (default: "
                         f"{config.state_dir()}/leases-PORT.json; `none`: in memory only)")
    ds.add_argument("--wait", type=float, default=START_TIMEOUT_S, metavar="SECONDS",
                    help="with --detach: how long to wait for the daemon to listen (default: %(default)s)")
    ds.set_defaults(func=cmd_daemon_start)
    dstop = dsub.add_parser("stop", help="stop a daemon started with --detach",
                            description="Stop the daemon that `pyvgpu daemon start --detach` started on PORT "
                                        "(SIGTERM, then SIGKILL after --timeout seconds), using its pid file.")
    dstop.add_argument("--port", type=parse_port, default=DEFAULT_PORT, help="its port (default: %(default)s)")
    dstop.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S, metavar="SECONDS",
                       help="seconds to wait after SIGTERM before SIGKILL (default: %(default)s)")
    dstop.set_defaults(func=cmd_daemon_stop)
    dstat = dsub.add_parser("status", help="show a daemon's devices and sessions",
                            description="Connect to a daemon and show its backend, devices (memory in use) and "
                                        "sessions (client, memory held per device).")
    dstat.add_argument("--host", default="127.0.0.1", help="daemon address (default: %(default)s)")
    dstat.add_argument("--port", type=parse_port, default=DEFAULT_PORT, help="daemon port (default: %(default)s)")
    dstat.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="connect timeout")
    dstat.add_argument("--json", action="store_true", help="print the raw status as JSON")
    dstat.set_defaults(func=cmd_daemon_status)

    # hosts
    h = sub.add_parser("hosts", help="edit the host map (which daemons this client uses)",
                       formatter_class=_Formatter,
                       description=f"The host map lives in {config.hosts_path()}: one HOST[:PORT] per line "
                                   f"(IPv6 as [ADDR]:PORT, default port {DEFAULT_PORT}, '#' comments). GPUs are "
                                   f"numbered in host-map order, then by each host's device ordinal. "
                                   f"PYVGPU_HOSTS=host:port,... replaces the file for one run.")
    hsub = h.add_subparsers(dest="hosts_command", metavar="ACTION")
    hsub.required = True
    ha = hsub.add_parser("add", help="append daemons to the host map",
                         description="Append HOST[:PORT] entries to the host map (entries already present are "
                                     "reported and skipped).")
    ha.add_argument("hosts", nargs="+", type=parse_host_spec, metavar="HOST[:PORT]")
    ha.set_defaults(func=cmd_hosts_add)
    hr = hsub.add_parser("remove", help="remove daemons from the host map",
                         description="Remove HOST[:PORT] entries (or all with --all) from the host map.")
    hr.add_argument("hosts", nargs="*", type=parse_host_spec, metavar="HOST[:PORT]")
    hr.add_argument("--all", action="store_true", help="empty the host map")
    hr.set_defaults(func=cmd_hosts_remove)
    hl = hsub.add_parser("list", help="print the host map in GPU-numbering order",
                         description="Print the host map in effect (PYVGPU_HOSTS if set, else the hosts file).")
    hl.add_argument("--json", action="store_true", help="print as JSON")
    hl.set_defaults(func=cmd_hosts_list)

    # devices
    dv = sub.add_parser("devices", help="list GPU0..GPUn over all hosts",
                        description="Ask every daemon in the host map for its devices and print them as a CUDA "
                                    "program will number them (GPU0, GPU1, ...: host-map order, then each host's "
                                    "device ordinal): index, host:port, remote ordinal, name, memory, "
                                    "backend. An unreachable host gets one error line and a nonzero exit; the "
                                    "others are still listed.")
    dv.add_argument("--hosts", metavar="HOST:PORT,...", help="use these daemons instead of the host map")
    dv.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="per-host connect timeout")
    dv.add_argument("--json", action="store_true", help="print as JSON")
    dv.set_defaults(func=cmd_devices)

    # run
    r = sub.add_parser("run", help="run a program with its CUDA calls remoted",
                       usage="pyvgpu run [-h] [-v] [--hosts HOST:PORT,...] [-n N [--explain] [--no-wait | --wait S] "
                             "[--share F] [--lease-ttl S]] [--memory SIZE] [--weight W] [--stats [FILE]] "
                             "[--census [FILE]] -- PROGRAM [ARGS...]",
                       description="Run PROGRAM with its CUDA calls going to the daemons of the host map (or "
                                   "--hosts): LD_PRELOAD holds libvcudart (for programs built with -cudart shared) "
                                   "and libvcuda, the libcuda.so.1 drop-in (for nvcc's default static runtime, "
                                   "NVIDIA's own libcudart, driver-API programs), LD_LIBRARY_PATH the directory "
                                   "`pyvgpu lib --dir` prints, PYVGPU_HOSTS the hosts. With -n N (or an `auto:N` "
                                   "entry in the host map) it leases N GPUs of the pool, for itself alone (or a "
                                   "--share of each): those where it is predicted to slow down least and to slow "
                                   "others least, with --memory free (pyvgpu/placement.py; --explain prints why). "
                                   "While all are leased it waits in line (--no-wait: fails at once); the leases are "
                                   "renewed while the program runs and given back when it exits. Inside a job that "
                                   "holds leases (PYVGPU_LEASES set, e.g. a Slurm job) -n chooses among the job's GPUs. "
                                   "Against emulated GPUs it also sets CUPY_COMPILE_WITH_PTX=1 (unless set) and "
                                   "preloads libvnvJitLink.so (nvJitLink linking PTX only), so that CuPy and "
                                   "numba-cuda hand them PTX.")
    r.add_argument("--hosts", metavar="HOST:PORT,...", help="use these daemons instead of the host map")
    r.add_argument("-n", type=int, metavar="N",
                   help="lease N GPUs of the pool (host map or --hosts) for the program, the best ones first")
    r.add_argument("--explain", action="store_true",
                   help="with -n / auto: one line per GPU on the decision; at exit, which file served each CUDA "
                        "library (pyvgpu's or NVIDIA's; sets PYVGPU_CENSUS=libraries)")
    rw = r.add_mutually_exclusive_group()
    rw.add_argument("--no-wait", action="store_true",
                    help="with -n / auto: fail at once when not enough GPUs are free for a lease")
    rw.add_argument("--wait", type=float, metavar="SECONDS",
                    help="with -n / auto: wait at most this long for free GPUs (default: as long as it takes)")
    r.add_argument("--share", type=float, metavar="F",
                   help="with -n / auto: lease a share F (0 < F <= 1) of each GPU instead of all of it: the "
                        "program gets F of its memory (or --memory) and a weight F on its time, beside other shares")
    r.add_argument("--lease-ttl", type=float, default=30.0, metavar="SECONDS",
                   help="with -n / auto: a lease not renewed for this long expires (the program's sessions there "
                        "end); renewed every third of it while the program runs (default: %(default)s)")
    r.add_argument("--memory", metavar="SIZE",
                   help="device memory the program needs per GPU, e.g. 1G: placement picks GPUs with that much "
                        "free, and the daemons limit the program's sessions to it (cudaMemGetInfo shows it)")
    r.add_argument("--weight", type=float, metavar="W",
                   help="the program's share of each GPU's time relative to other programs there (default 1; "
                        "daemons cap it with --max-weight)")
    r.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="per-host connect timeout for placement (default: %(default)s)")
    r.add_argument("--stats", nargs="?", const="1", metavar="FILE",
                   help="at exit, print per op the calls, bytes, calls that blocked on a reply (blocking round "
                        "trips) and the time blocked, to stderr (or append them to FILE); sets PYVGPU_STATS")
    r.add_argument("--census", nargs="?", const="1", metavar="FILE",
                   help="at exit, the call census: every CUDA entry point reached and every one answered 'not "
                        "supported', driver names and tables asked for and not offered, which file served each "
                        "CUDA library; to stderr (or appended to FILE); sets PYVGPU_CENSUS")
    r.add_argument("-v", "--verbose", action="store_true", help="print the environment it sets")
    r.add_argument("command", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]")
    r.set_defaults(func=cmd_run)

    # top
    tp = sub.add_parser("top", help="live view of every daemon's GPUs and sessions",
                        description="Poll every daemon of the host map (or --hosts) and show, per GPU, memory in "
                                    "use, busy ratio, sharing slowdown and sessions; per session its client, "
                                    "weight, memory used of its limit, share of device time, ops/s and bytes/s; "
                                    "per op the rate and latency (p50/p99). Ctrl-C ends it.")
    tp.add_argument("--hosts", metavar="HOST:PORT,...", help="use these daemons instead of the host map")
    tp.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="refresh period (default 1)")
    tp.add_argument("--iterations", "-n", type=int, default=0, metavar="N",
                    help="stop after N refreshes (default: run until interrupted)")
    tp.add_argument("--clear", action=argparse.BooleanOptionalAction, default=None,
                    help="clear the screen between refreshes (default: when stdout is a terminal)")
    tp.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="per-host connect timeout")
    tp.set_defaults(func=cmd_top)

    # lib
    lb = sub.add_parser("lib", help="print the path of libvcudart.so (--driver: libvcuda, --dir: their directory)",
                        description="Print the path of the interposer library libvcudart.so (SONAME libcudart.so.13), "
                                    "for LD_PRELOAD=$(pyvgpu lib) ./app; with --driver the driver drop-in "
                                    "libvcuda.so.1 (SONAME libcuda.so.1); with --dir the directory holding every "
                                    "client library and the names programs look for (libcuda.so.1, libcuda.so, "
                                    "libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libnvidia-ml.so.1, ...), for "
                                    "LD_LIBRARY_PATH and `nvcc app.cu -L$(pyvgpu lib --dir) -lcuda`. PYVGPU_LIB "
                                    "overrides where libvcudart is looked for (the others are beside it).")
    lbg = lb.add_mutually_exclusive_group()
    lbg.add_argument("--driver", action="store_true", help="print the path of libvcuda.so.1")
    lbg.add_argument("--dir", action="store_true", help="print the directory of the client libraries")
    lbg.add_argument("--preload", action="store_true",
                     help="print every client library, for LD_PRELOAD=\"$(pyvgpu lib --preload)\" (what `pyvgpu "
                          "run` preloads: they then win over the copies Python wheels bring)")
    lb.set_defaults(func=cmd_lib)

    # tls
    tl = sub.add_parser("tls", help="TLS fingerprints: show this host's daemon certificate, trust a daemon's",
                        formatter_class=_Formatter,
                        description="Daemons off loopback speak TLS. A client trusts a daemon by its certificate's "
                                    "SHA-256 fingerprint (PYVGPU_TLS_FINGERPRINT or the list in "
                                    f"{tls.fingerprints_path()}) or by a CA bundle (PYVGPU_TLS_CA or "
                                    f"{tls.ca_path({})}). Once either is set, the client uses TLS for every daemon.")
    tlsub = tl.add_subparsers(dest="tls_command", metavar="ACTION")
    tlsub.required = True
    tf = tlsub.add_parser("fingerprint", help="print the SHA-256 fingerprint of a daemon certificate",
                          description="Print the fingerprint of this host's daemon certificate (or of --cert).")
    tf.add_argument("--cert", metavar="PATH", help="a PEM certificate (default: this host's daemon certificate)")
    tf.set_defaults(func=cmd_tls_fingerprint)
    tt = tlsub.add_parser("trust", help="trust a daemon certificate on this client",
                          description="Add a daemon certificate's SHA-256 fingerprint to this client's list.")
    tt.add_argument("fingerprint", help="64 hex digits (colons and a sha256: prefix allowed)")
    tt.add_argument("--note", help="a comment stored with it (e.g. the host)")
    tt.set_defaults(func=cmd_tls_trust)

    # token
    t = sub.add_parser("token", help="create or show the shared token for non-loopback daemons",
                       description=f"A daemon listening on a non-loopback address requires clients to prove a "
                                   f"shared token (HMAC challenge-response). It is stored in {config.token_path()} "
                                   f"(mode 0600); clients read the same file or PYVGPU_TOKEN. Without options: "
                                   f"create it if missing and print its path.")
    tg = t.add_mutually_exclusive_group()
    tg.add_argument("--show", action="store_true", help="print the token (creating it if missing)")
    tg.add_argument("--new", action="store_true", help="replace the token with a fresh random one")
    t.set_defaults(func=cmd_token)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        _err(str(exc))
        return exc.code
    except HostMapError as exc:
        _err(str(exc))
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        if os.environ.get("PYVGPU_DEBUG"):
            raise
        _err(f"{type(exc).__name__}: {exc}".splitlines()[0])
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
