"""The host map: which daemons a client uses, in which order, and how their GPUs are numbered.

Format of the hosts file (`config.hosts_path()`, i.e. `$XDG_CONFIG_HOME/pyvgpu/hosts`), which libvcudart parses
too (csrc/), so it is deliberately small:

    # comment                  `#` starts a comment anywhere on a line; blank lines are ignored
    gpu-a                      host name or IPv4 address, default port 7700 (protocol.DEFAULT_PORT)
    gpu-b:7701                 host:port, port a decimal 1..65535
    [::1]:7700                 IPv6 addresses are written in brackets, port optional ([fe80::1%eth0] too)

Each line holds one entry; surrounding whitespace is ignored. A bare IPv6 address without brackets is refused
(`2001:db8::1:7700` could be read two ways). `PYVGPU_HOSTS=host:port,host:port` (same entry syntax, comma
separated) replaces the file for one run when it is set and not empty. The same daemon (host and port, host names
compared case-insensitively, IPv6 addresses in canonical form) may appear only once.

GPU numbering: GPUs are numbered in host-map order, then by each host's own device ordinal: with hosts A (2
GPUs) and B (1 GPU), GPU0 = A/0, GPU1 = A/1, GPU2 = B/0.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from pyvgpu import config
from pyvgpu.protocol import DEFAULT_PORT

ENV_HOSTS = "PYVGPU_HOSTS"
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


class HostMapError(ValueError):
    """A malformed or inconsistent host map entry; the message names the entry and where it came from."""


@dataclass(frozen=True)
class Host:
    host: str
    port: int = DEFAULT_PORT

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if self.is_ipv6 else f"{self.host}:{self.port}"

    def key(self) -> tuple[str, int]:
        """Identity used for duplicate detection."""
        if self.is_ipv6:
            addr, _, zone = self.host.partition("%")
            canon = ipaddress.IPv6Address(addr).compressed + (f"%{zone}" if zone else "")
            return canon.lower(), self.port
        return self.host.lower(), self.port

    @classmethod
    def parse(cls, spec: str, default_port: int = DEFAULT_PORT) -> "Host":
        """Parse `host`, `host:port`, `[v6]` or `[v6]:port`; HostMapError explaining what is wrong."""
        text = spec.strip()
        if not text:
            raise HostMapError("empty host entry")
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
        return cls(host, port)


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
    seen: dict[tuple[str, int], int] = {}
    for lineno, raw in enumerate(lines, 1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            host = Host.parse(text)
        except HostMapError as exc:
            raise HostMapError(f"{origin}, line {lineno}: {exc}") from None
        if host.key() in seen:
            raise HostMapError(f"{origin}, line {lineno}: {host} duplicates line {seen[host.key()]}")
        seen[host.key()] = lineno
        hosts.append(host)
    return hosts


def parse_env(value: str, origin: str = ENV_HOSTS) -> list[Host]:
    """Parse a comma-separated list (PYVGPU_HOSTS, `pyvgpu run --hosts`); empty items are ignored."""
    hosts: list[Host] = []
    seen: set[tuple[str, int]] = set()
    for item in value.split(","):
        if not item.strip():
            continue
        try:
            host = Host.parse(item)
        except HostMapError as exc:
            raise HostMapError(f"{origin}: {exc}") from None
        if host.key() in seen:
            raise HostMapError(f"{origin}: {host} is listed twice")
        seen.add(host.key())
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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    os.replace(tmp, path)


HEADER = ("# pyvgpu host map: one daemon per line as host[:port] ([v6addr]:port for IPv6); '#' starts a comment.\n"
          "# GPUs are numbered in this order, then by each host's device ordinal. Managed by `pyvgpu hosts`.\n")


def save(hosts: list[Host], path: Path | None = None) -> None:
    """Write `hosts` as a fresh hosts file (canonical `host:port` lines)."""
    keys = [h.key() for h in hosts]
    if len(set(keys)) != len(keys):
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
    existing = {h.key() for h in parse_lines(lines, str(path))}
    added: list[Host] = []
    present: list[Host] = []
    for host in new:
        if host.key() in existing:
            present.append(host)
            continue
        existing.add(host.key())
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


def number_gpus(reports: Iterable[HostDevices]) -> list[Gpu]:
    """GPU numbering over the reachable hosts: host-map order, then each host's ordinal."""
    gpus: list[Gpu] = []
    for rep in reports:
        if rep.devices is None:
            continue
        for ordinal, dev in enumerate(rep.devices):
            gpus.append(Gpu(index=len(gpus), host=rep.host, remote_ordinal=ordinal,
                            name=str(dev.get("name", "?")), total_mem=int(dev.get("total_mem", 0) or 0),
                            backend=str(dev.get("backend") or rep.backend or "?")))
    return gpus


def query_host(host: Host, token: bytes | None = None, timeout: float = 5.0,
               connect: Callable[..., Any] | None = None) -> HostDevices:
    """Ask one daemon for its devices (HELLO). Failures become a one-line `error`, never an exception."""
    if connect is None:
        from pyvgpu.client import Client
        connect = Client.connect
    try:
        client = connect(host.host, host.port, token=token, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - every failure is reported per host
        return HostDevices(host, error=describe_error(exc))
    try:
        info = client.info or {}
        return HostDevices(host, devices=list(info.get("devices") or []), backend=info.get("backend"))
    finally:
        try:
            client.close()
        except Exception:  # noqa: BLE001
            pass


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


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
