"""The generated block code of large kernels, compiled to Python bytecode, kept on disk across daemon runs.

Python's `compile` of a kernel's generated source is the largest single cost of a kernel's first launch: CUB's
onesweep radix-sort kernel (8,600 PTX instructions, 2 MB of generated source) takes about 1 s of CPU to compile,
in every program run, while reading its marshalled code back takes about 30 ms (bench/README.md, "Issue 19 part 6,
fifth step"). So `kernel._bytecode` asks here before compiling a source of at least MIN_SOURCE characters.

What makes an entry right: its file name is a hash of everything `compile` depends on here (the source text, the
code's file name, the interpreter's bytecode magic and cache tag, this format's version), and the file repeats the
magic and holds a SHA-256 of its payload, so an entry written by another Python, a truncated or corrupted file, or
a file of another format is ignored (and removed), and the source is compiled as if nothing were cached. A stale
entry cannot be found: a changed translator writes a different source, hence another key.

Bounded: the directory holds at most max_bytes (PYVGPU_EMU_BYTECODE_CACHE_BYTES, 256 MiB by default) of entries;
the least recently used go first after each write. PYVGPU_EMU_BYTECODE_CACHE=0 turns the cache off. The directory
is private to its user (marshalled code is code: nobody else may plant an entry), files are written under a
temporary name and renamed, so daemons sharing it see whole files or none.

marshal (the standard library's format for code objects, the one .pyc files use) rather than pickle: code objects
are only marshallable, and marshal's output is tied to the interpreter version, which the key holds.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
import sys
import threading
from pathlib import Path
from types import CodeType

from pyvgpu.config import cache_dir, private_dir

log = logging.getLogger("pyvgpu.daemon")

MIN_SOURCE = 64 << 10                # smaller sources compile in a few ms: not worth a file
DEFAULT_MAX_BYTES = 256 << 20
_FORMAT = b"PVBC1\0"
_MAGIC = importlib.util.MAGIC_NUMBER
_HEADER = len(_FORMAT) + len(_MAGIC) + 32     # format, magic, SHA-256 of the payload


def enabled() -> bool:
    return os.environ.get("PYVGPU_EMU_BYTECODE_CACHE", "1") != "0"


def max_bytes() -> int:
    try:
        return max(0, int(os.environ.get("PYVGPU_EMU_BYTECODE_CACHE_BYTES", DEFAULT_MAX_BYTES)))
    except ValueError:
        return DEFAULT_MAX_BYTES


def default_directory() -> Path:
    return cache_dir() / "emu-bytecode"


def key(source: str, filename: str) -> str:
    h = hashlib.sha256()
    for part in (_FORMAT, _MAGIC, sys.implementation.cache_tag.encode(), filename.encode(), source.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:32]


class BytecodeCache:
    """Compiled code by source, in one directory, at most `limit` bytes of entries."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = Path(directory)
        self.limit = limit
        self._lock = threading.Lock()
        self._usable: bool | None = None      # decided at the first use (_check_directory)

    def _path(self, source: str, filename: str) -> Path:
        return self.directory / f"{key(source, filename)}.pvbc"

    def _check_directory(self) -> bool:
        """Whether the directory is this user's alone (made 0700 when missing, narrowed when this user's): code
        read from a directory someone else can write could be anyone's. Decided once; logged when not."""
        with self._lock:
            if self._usable is None:
                try:
                    private_dir(self.directory)
                    st = self.directory.stat()
                    self._usable = st.st_uid == os.getuid() and not st.st_mode & 0o077
                except OSError as e:
                    log.warning("emulated GPU: compiled-code cache %s unusable (%s)", self.directory, e)
                    self._usable = False
                else:
                    if not self._usable:
                        log.warning("emulated GPU: compiled-code cache %s not used: not private to this user",
                                    self.directory)
            return self._usable

    def get(self, source: str, filename: str) -> CodeType | None:
        """The code compiled from `source` under `filename`, or None (no entry, or one that is not whole and of
        this interpreter: then it is removed)."""
        if not self._check_directory():
            return None
        path = self._path(source, filename)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        code = _decode(raw, filename)
        if code is None:
            log.warning("emulated GPU: ignoring a damaged or foreign compiled-code cache entry %s", path.name)
            _unlink(path)
            return None
        try:
            os.utime(path)                   # recently used: pruned last
        except OSError:
            pass
        return code

    def put(self, source: str, filename: str, code: CodeType) -> None:
        """Keep `code` (compiled from `source`); failures to write cost only the next run's compile."""
        payload = marshal.dumps(code)
        blob = _FORMAT + _MAGIC + hashlib.sha256(payload).digest() + payload
        if len(blob) > self.limit or not self._check_directory():
            return
        path = self._path(source, filename)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(blob)
            os.replace(tmp, path)
        except OSError as e:
            log.warning("emulated GPU: compiled-code cache not written (%s)", e)
            _unlink(tmp)
            return
        self.prune()

    def prune(self) -> None:
        """Remove the least recently used entries until the rest fit in `limit` bytes (another daemon may prune at
        the same time: a file already gone is fine)."""
        entries = []
        total = 0
        for f in self.directory.glob("*.pvbc"):
            try:
                st = f.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, f))
            total += st.st_size
        entries.sort()
        for _, size, f in entries:
            if total <= self.limit:
                break
            _unlink(f)
            total -= size


def _decode(raw: bytes, filename: str) -> CodeType | None:
    if len(raw) < _HEADER or not raw.startswith(_FORMAT) or raw[len(_FORMAT):len(_FORMAT) + len(_MAGIC)] != _MAGIC:
        return None
    digest = raw[len(_FORMAT) + len(_MAGIC):_HEADER]
    payload = memoryview(raw)[_HEADER:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    try:
        code = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(code, CodeType) or code.co_filename != filename:
        return None
    return code


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


_shared: BytecodeCache | None = None
_shared_lock = threading.Lock()


def shared() -> BytecodeCache | None:
    """The daemon's cache (None when turned off), in the user's cache directory."""
    global _shared
    if not enabled():
        return None
    with _shared_lock:
        if _shared is None:
            _shared = BytecodeCache(default_directory(), max_bytes())
        return _shared
