"""Native code for the interpreter (translator/cgen.py, threadgen.py, ctagen.py write it): C compiled by the host's C
compiler into a shared library, cached on disk, loaded with ctypes (the standard library: no extra dependency).

Optional by design: a daemon host need not have a compiler. When none is found, or compiling or loading fails,
`load` answers None (logged once per reason) and kernels keep running as NumPy code, with identical results.

The library is built for this machine (-march=native: the vector units decide the speed) with the flags that keep
IEEE semantics (-ffp-contract=off: no fused multiply-adds the PTX did not ask for; no -ffast-math), and cached
under the XDG cache dir by a hash of the source, the compiler, the flags and the CPU's feature flags, written
under a temporary name and renamed, so concurrent daemons share it safely. PYVGPU_EMU_CC names the compiler.
A caller may add flags (`extra`, after FLAGS: a later -O wins, so a generator picks the optimisation level by its
source's size) and may hand over several translation units, compiled at once (at most `jobs`) into objects and
linked into one library.

A build that fails or times out is remembered beside the cache by its key (`<key>.failed`, its reason inside), so
no daemon spends COMPILE_TIMEOUT on the same source again: `load` then answers None at once, logged once per
process with the kernel's name. A failure that says nothing about the source (the compiler or its cc1 killed by a
signal from outside, memory or disk exhausted: _TRANSIENT) is not remembered. Another compiler or other flags make
another key (tried afresh); clearing the cache, or a longer COMPILE_TIMEOUT than the one a timeout was recorded
under, tries again; a timeout while the machine had more runnable processes than cores is not remembered either
(on a loaded machine a build that fits COMPILE_TIMEOUT alone may not).

A caller may ask whether a library is cached (`cached`: a kernel builds a quick tier at a lower level first only
when its full build is not) and remove one (`discard`: the quick tier once the full build is cached). Beside a full
build not yet made, by its library's key, a record of the seconds its quick tier's launches would have saved running
it (`<key>.rent`: `rent_paid`, `save_rent`), so that the full build's rent accrues across daemon runs, as a JIT with
a persistent cache counts a method's calls; a record that is unreadable or of another version counts as nothing.

A kernel whose native code the launch policy found worth building (runtime/launch.py: its launches ran long
enough) is recorded beside the cache too (`<kernel key>.wanted`, by the kernel's name and code, the paths allowed
and the generator's own source), so that the next daemon starts that build at the kernel's first launch, in the
background: with the library cached, it costs only the source's generation (a warm cache, as CUDA's
~/.nv/ComputeCache for its PTX JIT).

The cache holds at most MAX_CACHED libraries, markers and records (each kernel a client loads may add one): the
least recently used go first (a library in use stays mapped after its file is removed); what the build of a daemon
killed meanwhile left under temporary names goes once no build can be writing it.

A compiler runs in a process group of its own (so that a timeout stops cc1 too), which a signal to the daemon does
not reach: a daemon that exits stops its compilers (atexit), or a build it no longer waits for went on compiling for
minutes after it (CUB's onesweep: 20 s of CPU in 4 units) on a machine the next daemon shares.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import importlib
import json
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from pyvgpu.config import cache_dir, private_dir

log = logging.getLogger("pyvgpu.daemon")

FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared")
COMPILE_TIMEOUT = 120           # seconds one build may take (every translation unit and the link)
MAX_CACHED = 1024               # libraries and failure markers kept in the cache directory (about 15-30 KB each)
FAILED = ".failed"              # suffix of a failure marker
WANTED = ".wanted"              # suffix of a kernel's record: its native code was worth building here (`wanted`)
RENT = ".rent"                  # suffix of a library's record: what its quick tier's launches saved so far (`rent_paid`)
RENT_VERSION = "pyvgpu-rent 1"  # (a record of another version, or unreadable, counts as nothing saved)
RECORD = ".kernel"              # suffix of a kernel's record: its library's key and what its code needs (`record`)
RECORD_VERSION = "pyvgpu-kernel-record 1"
MAX_RECORD_BYTES = 1 << 20      # a record larger than this is not one (read bounded: onesweep's is about 6 KB)
VERSION_TIMEOUT = 10            # seconds `cc --version` may take (compiler_identity)

_lock = threading.Lock()        # one build at a time per process (the daemon runs launches on several threads)
_warned: set[str] = set()
_running: set[subprocess.Popen] = set()     # compilers running now (each its process group), stopped at exit
_running_lock = threading.Lock()
_stopping = False               # the process is exiting: no compiler starts (_stop_builds)


class BuildFailed(Exception):
    """The compiler exited with an error or ran past the timeout: remembered (a marker) so it is not run again."""


def compiler() -> str | None:
    cc = os.environ.get("PYVGPU_EMU_CC")
    if cc:
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def accepts(flags: tuple[str, ...]) -> bool:
    """Whether this machine's compiler takes `flags` (an empty unit compiled with them: once per compiler and flags
    in a process; no compiler, or one that cannot be run now: True, its build says why). A flag a compiler does not
    know is an error (GCC: "unrecognized command-line option"), which `load` remembers as the source's failure."""
    cc = compiler()
    return cc is None or _accepts(cc, tuple(flags))


@functools.lru_cache(maxsize=64)
def _accepts(cc: str, flags: tuple[str, ...]) -> bool:
    try:
        r = subprocess.run([cc, *flags, "-x", "c", "-c", "-o", os.devnull, "-"], input=b"", capture_output=True,
                           timeout=30)
    except (OSError, subprocess.SubprocessError):
        return True
    return r.returncode == 0


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


def compiler_identity(cc: str) -> str:
    """What names the compiler `cc` for the cache's keys: its path and what `cc --version` prints (another version
    at the same path, or a wrapper that runs another compiler, makes other keys), once per process and compiler
    file; a compiler that cannot say is named by its path and file alone."""
    try:
        st = os.stat(cc)
        stamp = (os.path.realpath(cc), st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = (cc, 0, 0)
    return _compiler_identity(cc, stamp)


@functools.lru_cache(maxsize=64)
def _compiler_identity(cc: str, stamp: tuple) -> str:
    head = f"{cc} {stamp[0]}"
    try:
        proc = subprocess.Popen([cc, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    except OSError as e:
        return f"{head} ({type(e).__name__}) {stamp[1]} {stamp[2]}"
    try:
        out, _ = proc.communicate(timeout=VERSION_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"{head} (no version) {stamp[1]} {stamp[2]}"
    if proc.returncode != 0:
        return f"{head} (exit {proc.returncode}) {stamp[1]} {stamp[2]}"
    return f"{head}\n{out.strip()}"


def library_key(sources: Sequence[str], cc: str, flags: tuple[str, ...]) -> str:
    """The cache key of a library: its sources, compiler (compiler_identity: its version), flags and this CPU's
    features."""
    return hashlib.sha256("\0".join((*sources, compiler_identity(cc), " ".join(flags), _cpu_signature())
                                     ).encode()).hexdigest()[:24]


def load(source: str | Sequence[str], directory: Path | None = None, extra: tuple[str, ...] = (), name: str = "",
         jobs: int = 1) -> ctypes.CDLL | None:
    """The shared library of C `source` (one translation unit, or a sequence of them, each compiled on its own, at
    most `jobs` at once, then linked together), built once per machine with FLAGS and then `extra`; or None.
    `name` (the kernel's) goes into the log when the build fails."""
    cc = compiler()
    if cc is None:
        _warn_once("no C compiler", "set PYVGPU_EMU_CC or install cc")
        return None
    units, flags, key, directory = _keyed(source, extra, directory, cc)
    path = directory / f"{key}.so"
    marker = directory / f"{key}{FAILED}"
    with _lock:
        if path.exists():
            _touch(path)
        elif _failed_before(marker):
            _warn_once(f"failed {key}", f"{name or 'a kernel'}: its build failed before, not tried again "
                       f"({_read(marker)}; {marker})")
            return None
        else:
            try:
                private_dir(directory)      # shared libraries this daemon loads: nobody else may plant one
                _build(cc, units, path, flags, jobs)
            except BuildFailed as e:
                _remember(marker, str(e))
                _prune(directory, MAX_CACHED)
                _warn_once(f"failed {key}", f"{name or 'a kernel'}: {e}")
                return None
            except (OSError, subprocess.SubprocessError, RuntimeError) as e:
                _warn_once("compiler failed", f"{name or 'a kernel'}: "
                           f"{str(e).splitlines()[0] if str(e) else type(e).__name__} (not remembered: tried again)")
                return None
            _prune(directory, MAX_CACHED)   # (only when this build added a file: a library or a failure marker)
        return _open(path)


def _open(path: Path) -> ctypes.CDLL | None:
    """The library at `path`, loaded, or None where it fails to load (said once)."""
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:
        _warn_once("library failed to load", str(e))
        return None


def _keyed(source: str | Sequence[str], extra: tuple[str, ...], directory: Path | None,
           cc: str) -> tuple[tuple[str, ...], tuple[str, ...], str, Path]:
    """(units, flags, key, directory) of a library as `load` builds it."""
    units = (source,) if isinstance(source, str) else tuple(source)
    flags = FLAGS + tuple(extra)
    return units, flags, library_key(units, cc, flags), directory or cache_dir() / "emu-native"


def cached(source: str | Sequence[str], directory: Path | None = None, extra: tuple[str, ...] = ()) -> bool:
    """Whether `load(source, directory, extra)` would find its library built (in the cache): a caller with a quicker
    build to run meanwhile (a lower optimisation level: translator/kernel.py's quick tier) skips it then."""
    cc = compiler()
    if cc is None:
        return False
    _, _, key, directory = _keyed(source, extra, directory, cc)
    return (directory / f"{key}.so").exists()


def discard(source: str | Sequence[str], directory: Path | None = None, extra: tuple[str, ...] = ()) -> None:
    """Remove the cached library of `load(source, directory, extra)` (a quick tier once its full build is cached:
    the cache keeps the one a later daemon uses). A process that loaded it keeps it mapped."""
    cc = compiler()
    if cc is None:
        return
    _, _, key, directory = _keyed(source, extra, directory, cc)
    with _lock:
        try:
            (directory / f"{key}.so").unlink()
        except OSError:
            pass


@functools.cache
def generator_signature() -> str:
    """A hash of the code that writes native code (the emulator's Python: emu/**/*.py, the PTX parser and the
    layout included), once per process: a kernel's records (`wanted`, `record`) hold for the generator that made
    them only. An install without sources (compiled files in their place) is hashed by those; one with neither gets
    a signature of its own each process, so its records never match (a miss costs a build, a wrong match would run
    another generator's layout)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    files = sorted(here.rglob("*.py")) or sorted(f for f in here.rglob("*.pyc") if f.parent.name != "__pycache__")
    if not files:
        return "no sources " + os.urandom(16).hex()
    for f in files:
        h.update(str(f.relative_to(here)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def settings_signature() -> str:
    """A hash of the emulator's settings as this process has them now: every module-level constant (an upper-case
    name: _is_setting) of the modules that make a kernel's C, and which function each module-level function and
    class method is (a test or an operator that replaces one, or changes a level or a bound, changes the C the
    same PTX makes). Read at each call (settings may change while a process runs): tens of ms, once a build."""
    h = hashlib.sha256()
    for name in _generator_modules():
        mod = importlib.import_module(name)
        h.update(name.encode() + b"\0")
        for attr, value in sorted(vars(mod).items()):
            if _is_setting(attr, value):
                h.update(f"{attr}={_setting(value, mod.__name__)}\0".encode())
    return h.hexdigest()


_IMMUTABLE = (bool, int, float, str, bytes, type(None), tuple, frozenset)


def _is_setting(attr: str, value) -> bool:
    """Whether a module attribute is a setting: a function or class, a public upper-case name, or a private one of
    an immutable value (not what a module keeps as it runs: kernel.py's _BYTECODE, this one's _warned, counts)."""
    if attr.startswith("__"):
        return False
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return True
    name = attr.lstrip("_")
    if not name or not name.isupper():
        return False
    return not attr.startswith("_") or isinstance(value, _IMMUTABLE) or (
        dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen)


@functools.cache
def _generator_modules() -> tuple[str, ...]:
    """The modules whose settings make a kernel's C: the translator's, the PTX parser's, the layout, the limits and
    this one (always the same set, whatever a process imported so far)."""
    here = Path(__file__).resolve().parent
    package = __name__.rpartition(".")[0]
    names = [f"{package}.{sub}.{f.stem}" for sub in ("translator", "ptx") for f in sorted((here / sub).glob("*.py"))
             if f.stem != "__init__"]
    return tuple(sorted(names + [f"{package}.{m}" for m in ("layout", "limits", "native")]))


def _setting(value, module: str) -> str:
    """A setting's canonical text (the same in every process: sets sorted; functions and classes by name)."""
    if isinstance(value, type):
        if value.__module__ != module:
            return f"class {value.__module__}.{value.__qualname__}"
        return f"class {value.__qualname__}(" + ",".join(
            f"{a}={_setting(v, module)}" for a, v in sorted(vars(value).items())
            if callable(v) or isinstance(v, (staticmethod, classmethod, property)) or a.isupper()) + ")"
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    if callable(value) and hasattr(value, "__qualname__"):
        return f"fn {getattr(value, '__module__', '?')}.{value.__qualname__}"
    if isinstance(value, (bool, int, float, str, bytes, type(None))):
        return repr(value)
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_setting(v, module) for v in value)) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_setting(v, module) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{_setting(k, module)}:{_setting(v, module)}" for k, v in value.items())) + "}"
    if dataclasses.is_dataclass(value):
        return f"{type(value).__qualname__}(" + ",".join(
            _setting(getattr(value, f.name), module) for f in dataclasses.fields(value)) + ")"
    return type(value).__qualname__           # (objects: their state is no setting; their class names them)


def kernel_key(*parts: str) -> str:
    """The key of a kernel's record (`wanted`): what identifies it (its name, its code, the paths the limits allow),
    the generator, the compiler, the flags and this CPU's features."""
    return library_key((*parts, generator_signature()), compiler() or "", FLAGS)


def wanted(key: str, directory: Path | None = None) -> bool:
    """Whether the kernel of `key` had its native code built here before because its launches were worth it (the
    launch policy may then start the build at its first launch: a cached library costs only its generation)."""
    path = (directory or cache_dir() / "emu-native") / f"{key}{WANTED}"
    if path.exists():
        _touch(path)
        return True
    return False


def mark_wanted(key: str, directory: Path | None = None) -> None:
    directory = directory or cache_dir() / "emu-native"
    try:
        private_dir(directory)
        (directory / f"{key}{WANTED}").touch()
    except OSError:
        pass


def record_key(*parts: str) -> str:
    """The key of a kernel's record (`record`): what its C is generated from (the caller's parts: its PTX, name,
    the limits, the path), the generator (its code, generator_signature, and its settings now,
    settings_signature), the compiler (compiler_identity), FLAGS and this CPU's features, not the C itself: a warm
    run finds the library without generating it."""
    return library_key((*parts, "record", generator_signature(), settings_signature()), compiler() or "", FLAGS)


def record(key: str, directory: Path | None = None) -> dict | None:
    """The record saved under `key` (save_record), or None: none, unreadable, larger than MAX_RECORD_BYTES, not
    JSON, of another version or another key (a record that could name the wrong library or layout is a miss:
    the caller generates the C and finds its library by the C's own key)."""
    path = (directory or cache_dir() / "emu-native") / f"{key}{RECORD}"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_RECORD_BYTES + 1)
        if len(raw) > MAX_RECORD_BYTES:
            return None
        rec = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):     # (RecursionError: JSON nested past the parser's limit)
        return None
    if not isinstance(rec, dict) or rec.get("version") != RECORD_VERSION or rec.get("key") != key or \
            not isinstance(rec.get("library"), str) or not re.fullmatch(r"[0-9a-f]{24}", rec["library"]):
        return None
    _touch(path)
    return rec


def save_record(key: str, fields: dict, directory: Path | None = None) -> None:
    """Save `fields` (JSON) as the record of `key`, with its version and key (written under a temporary name and
    renamed); the cache's bound counts it."""
    directory = directory or cache_dir() / "emu-native"
    path = directory / f"{key}{RECORD}"
    new = not path.exists()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        private_dir(directory)
        tmp.write_text(json.dumps({"version": RECORD_VERSION, "key": key, **fields}))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    if new:
        _prune(directory, MAX_CACHED)


def library_of(source: str | Sequence[str], directory: Path | None = None, extra: tuple[str, ...] = ()) -> str | None:
    """The key of `load(source, directory, extra)`'s library (None: no compiler), for a record."""
    cc = compiler()
    return None if cc is None else _keyed(source, extra, directory, cc)[2]


def load_cached(key: str, directory: Path | None = None) -> ctypes.CDLL | None:
    """The cached library of key `key` (library_of), loaded, or None when it is not in the cache (nothing built)."""
    if compiler() is None or not re.fullmatch(r"[0-9a-f]{24}", key):
        return None
    path = (directory or cache_dir() / "emu-native") / f"{key}.so"
    with _lock:
        if not path.exists():
            return None
        _touch(path)
        return _open(path)


def rent_path(source: str | Sequence[str], directory: Path | None = None, extra: tuple[str, ...] = ()) -> Path | None:
    """Where the rent record of `load(source, directory, extra)`'s library lives (None: no compiler)."""
    cc = compiler()
    if cc is None:
        return None
    _, _, key, directory = _keyed(source, extra, directory, cc)
    return directory / f"{key}{RENT}"


def rent_paid(path: Path | None) -> float:
    """The seconds recorded at `path` (rent_path), 0.0 when there is no record or it is not one of this version's
    (unreadable, corrupt, another version's, not a finite non-negative number)."""
    if path is None:
        return 0.0
    try:
        with open(path, "rb") as f:
            text = f.read(128).decode("ascii")
    except (OSError, ValueError):
        return 0.0
    head, _, value = text.strip().partition("\n")
    try:
        seconds = float(value) if head == RENT_VERSION else 0.0
    except ValueError:
        return 0.0
    if not 0.0 <= seconds < 1e9:      # (NaN too)
        return 0.0
    _touch(path)
    return seconds


def save_rent(path: Path | None, seconds: float) -> None:
    """Record `seconds` at `path` (written under a temporary name and renamed: a daemon that reads it meanwhile sees
    the old record or the new one); the cache's bound counts it."""
    if path is None:
        return
    new = not path.exists()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        private_dir(path.parent)
        tmp.write_text(f"{RENT_VERSION}\n{float(seconds)!r}\n")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    if new:
        _prune(path.parent, MAX_CACHED)


def drop_rent(path: Path | None) -> None:
    """Remove a rent record (its full build is cached)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _failed_before(marker: Path) -> bool:
    """Whether a build of this key failed before, for a reason that holds now (a timeout recorded under a shorter
    COMPILE_TIMEOUT than today's does not)."""
    try:
        reason = marker.read_text()
    except (OSError, ValueError):
        return False
    if reason.startswith("timeout "):
        try:
            if float(reason.split()[1]) < COMPILE_TIMEOUT:
                return False
        except (IndexError, ValueError):
            pass
    _touch(marker)
    return True


def _read(marker: Path) -> str:
    try:
        return marker.read_text().strip()
    except OSError:
        return "?"


def _remember(marker: Path, reason: str) -> None:
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        tmp.write_text(reason + "\n")
        os.replace(tmp, marker)
    except OSError:
        pass


def _build(cc: str, units: tuple[str, ...], path: Path, flags: tuple[str, ...], jobs: int) -> None:
    """Compile and link `units` into `path` within COMPILE_TIMEOUT (BuildFailed when the compiler says no or runs
    too long)."""
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}")
    srcs = [tmp.with_name(f"{tmp.name}.{i}.c") for i in range(len(units))]
    objs = [s.with_suffix(".o") for s in srcs]
    try:
        for s, text in zip(srcs, units):
            s.write_text(text)
        if len(units) == 1:
            _run([cc, *flags, "-o", str(tmp), str(srcs[0]), "-lm"], COMPILE_TIMEOUT)
        else:
            deadline = time.monotonic() + COMPILE_TIMEOUT
            cflags = [f for f in flags if f != "-shared"]
            with ThreadPoolExecutor(max(1, min(jobs, len(units)))) as ex:
                for f in [ex.submit(lambda s=s, o=o: _run([cc, *cflags, "-c", "-o", str(o), str(s)],
                                                          deadline - time.monotonic())) for s, o in zip(srcs, objs)]:
                    f.result()
            _run([cc, *flags, "-o", str(tmp), *map(str, objs), "-lm"], deadline - time.monotonic())
        os.replace(tmp, path)
    finally:
        for f in (*srcs, *objs, tmp):
            try:
                f.unlink()
            except FileNotFoundError:
                pass


# What a compiler's driver prints when a failure says nothing about the source: its subprocess (cc1, as, ld) killed
# by a signal from outside (the OOM killer, an operator: GCC's driver then exits 1, not by the signal), memory or
# disk exhausted. Such a build is tried again later, not remembered as failed.
_TRANSIENT = re.compile(r"(Killed|Terminated|Hangup|Interrupt) signal terminated program|"
                        r"unable to execute command: (Killed|Terminated)|internal compiler error: (Killed|Terminated)|"
                        r"out of memory|memory exhausted|Cannot allocate memory|No space left on device")


def _run(cmd: list[str], timeout: float) -> None:
    """Run the compiler in a process group of its own, so that a timeout stops its subprocesses too (cc1 goes on
    after its driver is killed)."""
    if timeout <= 0:
        raise _timeout()
    # (started and registered under one lock: a process exiting meanwhile (_stop_builds) finds it, or it never
    # starts; registered after its start, a compiler the exit did not see yet went on compiling for nobody)
    with _running_lock:
        if _stopping:
            raise RuntimeError("the process is exiting (not remembered)")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        _running.add(proc)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise _timeout() from None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        with _running_lock:
            _running.discard(proc)
    if proc.returncode < 0:             # killed by a signal (not ours: the OOM killer, an operator): try again later
        raise RuntimeError(f"{cmd[0]} killed by signal {-proc.returncode}")
    if proc.returncode != 0:
        failure = RuntimeError if _TRANSIENT.search(err) else BuildFailed
        raise failure(f"{cmd[0]} exited {proc.returncode}: {' '.join(err.strip().split())[:300]}")


def _timeout() -> Exception:
    """A build past COMPILE_TIMEOUT: remembered (BuildFailed) when the machine had a core for it; with more runnable
    processes than cores (the 1-minute load average), the same build may finish in time later: not remembered."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    if load > (os.cpu_count() or 1):
        return RuntimeError(f"timeout {COMPILE_TIMEOUT} s at load {load:.1f} (not remembered)")
    return BuildFailed(f"timeout {COMPILE_TIMEOUT} s")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


@atexit.register
def _stop_builds() -> None:
    """At the process's exit: kill the compilers of builds still running (their threads are daemon threads, gone
    with the process; the compilers' process groups are not)."""
    global _stopping
    with _running_lock:
        _stopping = True
        procs = list(_running)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _touch(path: Path) -> None:
    """Mark a cached library as used (the cache drops the least recently used first)."""
    try:
        os.utime(path)
    except OSError:
        pass


_TEMPORARY = re.compile(rf"[0-9a-f]{{24}}(\{FAILED}|\{RENT}|\{RECORD})?\.\d+\.\d+(\.\d+\.[co])?$")  # (_build's,
# _remember's, save_rent's, save_record's)


def _prune(directory: Path, keep: int) -> None:
    """Remove the least recently used libraries, failure markers, kernel and rent records beyond `keep` (another daemon may
    prune at the same time: a file already gone is fine), and what builds left under their temporary names (`_build`,
    `_remember`: `<key>.<pid>.<thread>...`) when their daemon was killed, once no build can still be writing them."""
    stale = time.time() - 2 * COMPILE_TIMEOUT - 60
    for f in directory.glob("*.*.*"):
        try:
            if _TEMPORARY.match(f.name) and f.stat().st_mtime < stale:
                f.unlink()
        except FileNotFoundError:
            pass
    entries = []
    for f in (*directory.glob("*.so"), *directory.glob(f"*{FAILED}"), *directory.glob(f"*{WANTED}"),
              *directory.glob(f"*{RENT}"), *directory.glob(f"*{RECORD}")):
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
