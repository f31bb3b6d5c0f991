"""The host map: which daemons a client uses, in which order, and how their GPUs are numbered.

Format of the hosts file (`config.hosts_path()`, i.e. `$XDG_CONFIG_HOME/pyvgpu/hosts`), which libvcudart parses
too (csrc/), so it is deliberately small:

    # comment                  `#` starts a comment anywhere on a line; blank lines are ignored
    gpu-a                      host name or IPv4 address, default port 7700 (protocol.DEFAULT_PORT)
    gpu-b:7701                 host:port, port a decimal 1..65535
    [::1]:7700                 IPv6 addresses are written in brackets, port optional ([fe80::1%eth0] too)
    gpu-c:7700/1               one device of a daemon: its ordinal there after '/' (any entry form)
    auto:2                     2 GPUs chosen by placement among the other entries (`auto` = 1); `pyvgpu run`
                               resolves it (pyvgpu/placement.py); libvcudart alone skips it with a note

Each line holds one entry; surrounding whitespace is ignored. A bare IPv6 address without brackets is refused
(`2001:db8::1:7700` could be read two ways). `PYVGPU_HOSTS=host:port,host:port` (same entry syntax, comma
separated) replaces the file for one run when it is set and not empty. A daemon (host and port, host names
compared case-insensitively, IPv6 addresses in canonical form) may appear once for all its devices, or several
times with different ordinals; `auto` at most once.

GPU numbering: GPUs are numbered in host-map order, then by each host's own device ordinal: with hosts A (2
GPUs) and B (1 GPU), GPU0 = A/0, GPU1 = A/1, GPU2 = B/0; with `B/0,A/1` GPU0 = B/0 and GPU1 = A/1.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from pyvgpu import config
from pyvgpu.protocol import DEFAULT_PORT, HOSTMAP_AUTO, HOSTMAP_DEVICE_SEP
from pyvgpu.units import format_bytes  # noqa: F401 - part of this module's interface (CLI, tests)

ENV_HOSTS = "PYVGPU_HOSTS"
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


class HostMapError(ValueError):
    """A malformed or inconsistent host map entry; the message names the entry and where it came from."""


@dataclass(frozen=True)
class Host:
    host: str
    port: int = DEFAULT_PORT
    device: int | None = None    # `/ORDINAL`: only this device of the daemon; None: all of them
    count: int = 0               # an `auto[:N]` entry: N GPUs to choose by placement (host is HOSTMAP_AUTO)

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    @property
    def is_auto(self) -> bool:
        return self.count > 0

    @property
    def daemon(self) -> "Host":
        """The daemon this entry names (without a device selection)."""
        return Host(self.host, self.port) if self.device is not None else self

    def __str__(self) -> str:
        if self.is_auto:
            return HOSTMAP_AUTO if self.count == 1 else f"{HOSTMAP_AUTO}:{self.count}"
        base = f"[{self.host}]:{self.port}" if self.is_ipv6 else f"{self.host}:{self.port}"
        return base if self.device is None else f"{base}{HOSTMAP_DEVICE_SEP}{self.device}"

    def daemon_key(self) -> tuple[str, int]:
        """Identity of the daemon (host names case-insensitive, IPv6 canonical)."""
        if self.is_auto:
            return HOSTMAP_AUTO, 0
        if self.is_ipv6:
            addr, _, zone = self.host.partition("%")
            canon = ipaddress.IPv6Address(addr).compressed + (f"%{zone}" if zone else "")
            return canon.lower(), self.port
        return self.host.lower(), self.port

    def key(self) -> tuple[str, int, int | None]:
        """Identity of the entry."""
        return (*self.daemon_key(), self.device)

    def overlaps(self, other: "Host") -> bool:
        """Both entries name the same device(s) of one daemon (or both are `auto`): a duplicate."""
        return self.daemon_key() == other.daemon_key() and \
            (self.device is None or other.device is None or self.device == other.device)

    @classmethod
    def parse(cls, spec: str, default_port: int = DEFAULT_PORT) -> "Host":
        """Parse `host`, `host:port`, `[v6]` or `[v6]:port`, each with an optional `/ORDINAL`, or `auto[:N]`;
        HostMapError explaining what is wrong."""
        text = spec.strip()
        if not text:
            raise HostMapError("empty host entry")
        name, colon, count = text.partition(":")
        if name.lower() == HOSTMAP_AUTO:
            if colon and (not count.isdigit() or not 1 <= int(count) <= 64):
                raise HostMapError(f"{spec!r}: expected {HOSTMAP_AUTO} or {HOSTMAP_AUTO}:N with N from 1 to 64")
            return cls(HOSTMAP_AUTO, DEFAULT_PORT, None, int(count) if colon else 1)
        device: int | None = None
        text, sep, dev_text = text.partition(HOSTMAP_DEVICE_SEP)
        if sep:
            if not dev_text.isdigit() or int(dev_text) >= 64:
                raise HostMapError(f"{spec!r}: the device after '{HOSTMAP_DEVICE_SEP}' must be an ordinal 0..63")
            device = int(dev_text)
        port_text: str | None = None
        if text.startswith("["):
            end = text.find("]")
            if end < 0:
                raise HostMapError(f"{spec!r}: missing ']' after the IPv6 address")
            host, rest = text[1:end], text[end + 1:]
            if rest:
                if not rest.startswith(":"):
                    raise HostMapError(f"{spec!r}: expected ':PORT' after ']'")
                port_text = rest[1:]
            addr = host.partition("%")[0]
            try:
                ipaddress.IPv6Address(addr)
            except ValueError:
                raise HostMapError(f"{spec!r}: {host!r} is not an IPv6 address") from None
        else:
            if text.count(":") > 1:
                raise HostMapError(f"{spec!r}: write IPv6 addresses in brackets, e.g. [::1]:{default_port}")
            host, sep, port_text_ = text.partition(":")
            port_text = port_text_ if sep else None
            if not _HOSTNAME.match(host):
                raise HostMapError(f"{spec!r}: {host!r} is not a valid host name or address")
        port = default_port
        if port_text is not None:
            if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
                raise HostMapError(f"{spec!r}: port must be a number from 1 to 65535")
            port = int(port_text)
        return cls(host, port, device)


@dataclass(frozen=True)
class Gpu:
    index: int              # the number a CUDA program sees (cudaSetDevice(index))
    host: Host
    remote_ordinal: int     # the device's ordinal on its daemon
    name: str
    total_mem: int          # bytes
    backend: str            # "cuda" or "emu"


@dataclass
class HostMap:
    hosts: list[Host]
    source: str             # "PYVGPU_HOSTS" or the path of the hosts file

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)


def parse_lines(lines: Iterable[str], origin: str = "hosts file") -> list[Host]:
    """Parse hosts-file lines; HostMapError names `origin` and the line for a bad or duplicate entry."""
    hosts: list[Host] = []
    lines_of: list[int] = []
    for lineno, raw in enumerate(lines, 1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            host = Host.parse(text)
        except HostMapError as exc:
            raise HostMapError(f"{origin}, line {lineno}: {exc}") from None
        for other, at in zip(hosts, lines_of):
            if host.overlaps(other):
                raise HostMapError(f"{origin}, line {lineno}: {host} duplicates line {at}")
        hosts.append(host)
        lines_of.append(lineno)
    return hosts


def parse_env(value: str, origin: str = ENV_HOSTS) -> list[Host]:
    """Parse a comma-separated list (PYVGPU_HOSTS, `pyvgpu run --hosts`); empty items are ignored."""
    hosts: list[Host] = []
    for item in value.split(","):
        if not item.strip():
            continue
        try:
            host = Host.parse(item)
        except HostMapError as exc:
            raise HostMapError(f"{origin}: {exc}") from None
        if any(host.overlaps(h) for h in hosts):
            raise HostMapError(f"{origin}: {host} is listed twice")
        hosts.append(host)
    return hosts


def load_file(path: Path | None = None) -> list[Host]:
    path = path or config.hosts_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return parse_lines(text.splitlines(), str(path))


def load(env: dict[str, str] | None = None, path: Path | None = None) -> HostMap:
    """The host map in effect: PYVGPU_HOSTS when set and not empty, else the hosts file (empty if missing)."""
    env = os.environ if env is None else env
    value = env.get(ENV_HOSTS, "")
    if value.strip():
        return HostMap(parse_env(value), ENV_HOSTS)
    path = path or config.hosts_path()
    return HostMap(load_file(path), str(path))


def _write_lines(path: Path, lines: list[str]) -> None:
    config.private_dir(path.parent)
    config.write_file(path, "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode())


HEADER = ("# pyvgpu host map: one daemon per line as host[:port] ([v6addr]:port for IPv6); '#' starts a comment.\n"
          "# GPUs are numbered in this order, then by each host's device ordinal. Managed by `pyvgpu hosts`.\n")


def save(hosts: list[Host], path: Path | None = None) -> None:
    """Write `hosts` as a fresh hosts file (canonical `host:port` lines)."""
    if any(a.overlaps(b) for i, a in enumerate(hosts) for b in hosts[:i]):
        raise HostMapError("refusing to save a host map with duplicate entries")
    _write_lines(path or config.hosts_path(), [HEADER, *(f"{h}\n" for h in hosts)])


def add(new: list[Host], path: Path | None = None) -> tuple[list[Host], list[Host]]:
    """Append hosts not yet in the file, keeping its other lines (comments included).

    Returns (added, already_present)."""
    path = path or config.hosts_path()
    try:
        lines = path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        lines = [HEADER]
    existing = parse_lines(lines, str(path))
    added: list[Host] = []
    present: list[Host] = []
    for host in new:
        if any(host.overlaps(h) for h in existing):
            present.append(host)
            continue
        existing.append(host)
        added.append(host)
    if added:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        _write_lines(path, lines + [f"{h}\n" for h in added])
    return added, present


def remove(gone: list[Host], path: Path | None = None) -> tuple[list[Host], list[Host]]:
    """Drop the lines naming these hosts, keeping the rest of the file. Returns (removed, not_found)."""
    path = path or config.hosts_path()
    try:
        lines = path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        lines = []
    parse_lines(lines, str(path))           # refuse to edit a broken file
    targets = {h.key(): h for h in gone}
    keep: list[str] = []
    removed: dict[tuple[str, int], Host] = {}
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text:
            host = Host.parse(text)
            if host.key() in targets:
                removed[host.key()] = host
                continue
        keep.append(line)
    if removed:
        _write_lines(path, keep)
    return list(removed.values()), [h for k, h in targets.items() if k not in removed]


# ---------------------------------------------------------------------------------------------- naming
@dataclass
class HostDevices:
    """What one daemon reported, or why it could not be asked."""
    host: Host
    devices: list[dict[str, Any]] | None = None
    backend: str | None = None
    error: str | None = None
    status: dict[str, Any] | None = None      # the daemon's STATUS (load, memory, sessions) when asked for


def number_gpus(reports: Iterable[HostDevices]) -> list[Gpu]:
    """GPU numbering over the reachable hosts: host-map order, then each host's ordinal (only the selected
    device for an entry with /ORDINAL; an ordinal the daemon does not have numbers nothing)."""
    gpus: list[Gpu] = []
    for rep in reports:
        if rep.devices is None:
            continue
        for ordinal, dev in enumerate(rep.devices):
            if rep.host.device is not None and ordinal != rep.host.device:
                continue
            gpus.append(Gpu(index=len(gpus), host=rep.host.daemon, remote_ordinal=ordinal,
                            name=str(dev.get("name", "?")), total_mem=int(dev.get("total_mem", 0) or 0),
                            backend=str(dev.get("backend") or rep.backend or "?")))
    return gpus


def query_host(host: Host, token: bytes | None = None, timeout: float = 5.0,
               connect: Callable[..., Any] | None = None, status: bool = False) -> HostDevices:
    """Ask one daemon for its devices (HELLO) and, with `status`, its STATUS. Failures become a one-line `error`,
    never an exception."""
    if connect is None:
        from pyvgpu.client import Client
        connect = Client.connect
    try:
        client = connect(host.host, host.port, token=token, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - every failure is reported per host
        return HostDevices(host, error=describe_error(exc))
    try:
        info = client.info or {}
        rep = HostDevices(host, devices=list(info.get("devices") or []), backend=info.get("backend"))
        if status:
            try:
                rep.status = client.status()
            except Exception as exc:  # noqa: BLE001
                return HostDevices(host, error=describe_error(exc))
        return rep
    finally:
        try:
            client.close()
        except Exception:  # noqa: BLE001
            pass


def query_daemons(entries: list[Host], token: bytes | None = None, timeout: float = 5.0,
                  connect: Callable[..., Any] | None = None, status: bool = False) -> list[HostDevices]:
    """Ask each daemon of `entries` once (concurrently); → one report per entry, in entry order (an entry with
    /ORDINAL shares its daemon's report). `auto` entries are skipped."""
    import concurrent.futures
    daemons: dict[tuple[str, int], Host] = {}
    for e in entries:
        if not e.is_auto:
            daemons.setdefault(e.daemon_key(), e.daemon)
    if not daemons:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(daemons))) as pool:
        got = dict(zip(daemons, pool.map(lambda h: query_host(h, token, timeout, connect, status),
                                         daemons.values())))
    return [HostDevices(e, r.devices, r.backend, r.error, r.status)
            for e in entries if not e.is_auto for r in (got[e.daemon_key()],)]


def describe_error(exc: BaseException) -> str:
    """One line for a failure to use a daemon: network failures start with 'unreachable: '."""
    import socket
    if isinstance(exc, socket.gaierror):
        return f"unreachable: cannot resolve the host name ({exc.strerror or exc})"
    if isinstance(exc, ConnectionRefusedError):
        return "unreachable: connection refused (is `pyvgpu daemon start` running there?)"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "unreachable: timed out (is a pyvgpu daemon listening there?)"
    if isinstance(exc, OSError):
        return f"unreachable: {exc.strerror or exc}"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
