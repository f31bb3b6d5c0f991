"""Where pyvgpu keeps its files: the host map, the daemon token and TLS files (XDG config dir), daemon state (XDG
state dir), rebuildable caches (XDG cache dir).

libvcudart reads the same paths (csrc/hostmap.c); keep the two in step.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from pyvgpu.auth import read_token_file

TOKEN_BYTES = 32


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "pyvgpu"


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "pyvgpu"


def cache_dir() -> Path:
    """Rebuildable files: the emulated GPU's native code (daemon/pyvgpu_daemon/emu/native.py)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyvgpu"


def hosts_path() -> Path:
    """One `host:port` per line; `#` starts a comment. Order defines GPU numbering."""
    return config_dir() / "hosts"


def token_path() -> Path:
    return config_dir() / "token"


def tls_dir() -> Path:
    """TLS files: the daemon's own certificate and key, and what clients trust (see pyvgpu/tls.py)."""
    return config_dir() / "tls"


def daemon_pid_path(port: int) -> Path:
    """Pid file of a daemon started by `pyvgpu daemon start --detach` on `port`."""
    return state_dir() / f"daemon-{port}.pid"


def daemon_lease_path(port: int) -> Path:
    """Where `pyvgpu daemon start` keeps the daemon's leases across restarts (--lease-state)."""
    return state_dir() / f"leases-{port}.json"


def daemon_log_path(port: int) -> Path:
    """stdout/stderr of a daemon started by `pyvgpu daemon start --detach` on `port`."""
    return state_dir() / f"daemon-{port}.log"


def load_token() -> bytes | None:
    """PYVGPU_TOKEN (hex or text) wins over the token file; None when neither exists (or the file is empty).
    A token file that group/other may access raises auth.TokenFileError (a clear message for the user)."""
    env = os.environ.get("PYVGPU_TOKEN")
    if env:
        return env.strip().encode()
    path = token_path()
    if not path.exists() or path.stat().st_size == 0:
        return None
    return read_token_file(path)


def write_token(text: str | None = None) -> bytes:
    """Store `text` (default: a fresh random token) as the token file, mode 0600, replacing any old one atomically."""
    text = text if text is not None else secrets.token_hex(TOKEN_BYTES)
    path = token_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".token.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    os.replace(tmp, path)
    return text.encode()


def ensure_token() -> bytes:
    """Return the stored token, creating one (mode 0600) when there is none."""
    token = load_token()
    if token:
        return token
    path = token_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(TOKEN_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:          # an empty file, or another process won the race
        if path.read_text().strip():
            return read_token_file(path)
        return write_token(text)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    return text.encode()
