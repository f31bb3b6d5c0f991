"""Native code for the interpreter (translator/cgen.py writes it): C compiled by the host's C compiler into a shared
library, cached on disk, loaded with ctypes (the standard library: no extra dependency).

Optional by design: a daemon host need not have a compiler. When none is found, or compiling or loading fails,
`load` answers None (logged once per reason) and kernels keep running as NumPy code, with identical results.

The library is built for this machine (-march=native: the vector units decide the speed) with the flags that keep
IEEE semantics (-ffp-contract=off: no fused multiply-adds the PTX did not ask for; no -ffast-math), and cached
under the XDG cache dir by a hash of the source, the compiler, the flags and the CPU's feature flags, written
under a temporary name and renamed, so concurrent daemons share it safely. PYVGPU_EMU_CC names the compiler.
The cache holds at most MAX_CACHED libraries (each kernel a client loads may add one): the least recently used
go first (a library in use stays mapped after its file is removed).
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import threading
from pathlib import Path

from pyvgpu.config import cache_dir, private_dir

log = logging.getLogger("pyvgpu.daemon")

FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared")
COMPILE_TIMEOUT = 120           # seconds one compiler run may take
MAX_CACHED = 1024               # libraries kept in the cache directory (about 15-30 KB each)

_lock = threading.Lock()        # one build at a time per process (the daemon runs launches on several threads)
_warned: set[str] = set()


def compiler() -> str | None:
    cc = os.environ.get("PYVGPU_EMU_CC")
    if cc:
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _cpu_signature() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor() + platform.machine()


def _warn_once(reason: str, detail: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        log.warning("emulated GPU: native code unavailable (%s), kernels run as NumPy code: %s", reason, detail)


def load(source: str, directory: Path | None = None, extra: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """The shared library of a C source (built once per machine and source, with FLAGS and `extra` flags), or
    None."""
    cc = compiler()
    if cc is None:
        _warn_once("no C compiler", "set PYVGPU_EMU_CC or install cc")
        return None
    flags = FLAGS + tuple(extra)
    key = hashlib.sha256("\0".join((source, cc, " ".join(flags), _cpu_signature())).encode()).hexdigest()[:24]
    directory = directory or cache_dir() / "emu-native"
    path = directory / f"{key}.so"
    with _lock:
        if path.exists():
            _touch(path)
        else:
            try:
                private_dir(directory)      # shared libraries this daemon loads: nobody else may plant one
                _compile(cc, source, path, flags)
                _prune(directory, MAX_CACHED)
            except (OSError, subprocess.SubprocessError, RuntimeError) as e:
                _warn_once("compiler failed", str(e).splitlines()[0] if str(e) else type(e).__name__)
                return None
        try:
            return ctypes.CDLL(str(path))
        except OSError as e:
            _warn_once("library failed to load", str(e))
            return None


def _compile(cc: str, source: str, path: Path, flags: tuple[str, ...] = FLAGS) -> None:
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}")
    src = tmp.with_suffix(".c")
    src.write_text(source)
    try:
        proc = subprocess.run([cc, *flags, "-o", str(tmp), str(src), "-lm"], capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"{cc} exited {proc.returncode}: {proc.stderr.strip()[:500]}")
        os.replace(tmp, path)
    finally:
        for f in (src, tmp):
            try:
                f.unlink()
            except FileNotFoundError:
                pass


def _touch(path: Path) -> None:
    """Mark a cached library as used (the cache drops the least recently used first)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _prune(directory: Path, keep: int) -> None:
    """Remove the least recently used libraries beyond `keep` (another daemon may prune at the same time: a file
    already gone is fine)."""
    entries = []
    for f in directory.glob("*.so"):
        try:
            entries.append((f.stat().st_mtime, f))
        except FileNotFoundError:
            pass
    entries.sort()
    for _, f in entries[:max(0, len(entries) - keep)]:
        try:
            f.unlink()
        except FileNotFoundError:
            pass
