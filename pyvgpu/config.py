"""Where pyvgpu keeps its files: the host map, the daemon token and TLS files (XDG config dir), daemon state (XDG
state dir), rebuildable caches (XDG cache dir).

libvcudart reads the same paths (csrc/core/hostmap.c); keep the two in step.

Whatever the umask: directories pyvgpu creates are 0700 (private_dir: the config dir holds the token and TLS key, the
state dir daemon logs, the cache dir shared libraries the daemon loads), secret files 0600, other files 0644
(write_file); a umask can only narrow those further.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from pyvgpu.auth import read_token_file

TOKEN_BYTES = 32
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
PUBLIC_FILE = 0o644


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner may enter: missing components are created mode 0700 (not 0777 less the
    umask, as mkdir -p does); an existing `path` of this user that group or other may write or enter is narrowed to
    0700 too. Existing parents are left as they are. → path."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR)
        except FileExistsError:          # another process made it meanwhile: narrowed below like any other
            pass
        os.chmod(d, PRIVATE_DIR)         # exact, whatever the umask
    st = path.stat()
    if st.st_mode & 0o077 and st.st_uid == os.getuid():
        os.chmod(path, PRIVATE_DIR)
    return path


def write_file(path: Path, data: bytes, mode: int = PUBLIC_FILE, append: bool = False) -> None:
    """Write (or append) `data` to `path` with exactly `mode` (less the umask) when the file is created; a
    replacement is atomic (written beside it, then renamed)."""
    path = Path(path)
    if append:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
        with os.fdopen(fd, "ab") as fh:
            fh.write(data)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    private_dir(path.parent)
    write_file(path, (text + "\n").encode(), PRIVATE_FILE)
    return text.encode()


def ensure_token() -> bytes:
    """Return the stored token, creating one (mode 0600) when there is none."""
    token = load_token()
    if token:
        return token
    path = token_path()
    private_dir(path.parent)
    text = secrets.token_hex(TOKEN_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:          # an empty file, or another process won the race
        if path.read_text().strip():
            return read_token_file(path)
        return write_token(text)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    return text.encode()
