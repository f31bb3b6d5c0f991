"""NVIDIA's CUDA 13 libraries the cuda backend calls (libcublas.so.13, libcublasLt.so.13): where they are looked
for, loaded once per daemon, and one clear error naming every place looked at when none loads.

Looked for in order: the library's variable ($PYVGPU_CUBLAS_LIB, $PYVGPU_CUBLASLT_LIB: when set, the only choice);
the nvidia-cublas wheel's folder for CUDA 13 (`site-packages/nvidia/cu13/lib`, the layout of cupy-cuda13x's and
torch's cu13 dependencies); cuda-pathfinder (NVIDIA's own finder: the wheel layouts, conda, CUDA_HOME/CUDA_PATH);
last the dynamic loader's search (LD_LIBRARY_PATH, ld.so.cache). libcublas.so.13 needs libcublasLt.so.13: the
cuBLASLt of libcublas's own folder is loaded first, so the loader's search (which may hold pyvgpu's forwarding
libcublasLt.so.13, as on the chain) cannot pair NVIDIA's cuBLAS with another cuBLASLt.

A library that cannot be loaded is CUBLAS_STATUS_NOT_INITIALIZED for every call that needs it (NVIDIA's status
for a library that could not start), with the places tried in the message, logged once by the daemon.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import BlasError

log = logging.getLogger("pyvgpu.daemon")


@dataclass(frozen=True)
class NvidiaLib:
    soname: str                  # libcublasLt.so.13
    env: str                     # PYVGPU_CUBLASLT_LIB
    pathfinder: str              # cuda-pathfinder's name: cublasLt
    wheel: str                   # the PyPI wheel that ships it
    needs: str | None = None     # the soname of a library it links (loaded first from its own folder)


CUBLASLT = NvidiaLib("libcublasLt.so.13", "PYVGPU_CUBLASLT_LIB", "cublasLt", "nvidia-cublas")
CUBLAS = NvidiaLib("libcublas.so.13", "PYVGPU_CUBLAS_LIB", "cublas", "nvidia-cublas", needs=CUBLASLT.soname)


def _wheel_dirs() -> list[Path]:
    try:
        import nvidia  # noqa: PLC0415 - the namespace package of NVIDIA's wheels
    except ImportError:
        return []
    return [Path(base) / "cu13" / "lib" for base in getattr(nvidia, "__path__", [])]


def _pathfinder(name: str) -> str:
    """The file cuda-pathfinder finds (and loads) for `name`; OSError with its reason when it finds none."""
    try:
        from cuda import pathfinder  # noqa: PLC0415 - optional: cuda-python's finder
    except ImportError as exc:
        raise OSError("cuda-pathfinder is not installed") from exc
    try:
        return str(pathfinder.load_nvidia_dynamic_lib(name).abs_path)
    except Exception as exc:  # noqa: BLE001 - its errors (not found, not available) are reasons, all alike here
        raise OSError(f"{type(exc).__name__}: {exc}") from exc


def candidates(lib: NvidiaLib) -> list[tuple[str, str]]:
    """(where, file) to try in order; a place that has nothing is ("where: why", "")."""
    chosen = os.environ.get(lib.env)
    if chosen:
        return [(f"${lib.env}", chosen)]
    out: list[tuple[str, str]] = []
    wheel = [d / lib.soname for d in _wheel_dirs() if (d / lib.soname).is_file()]
    out += [(f"the {lib.wheel} wheel", str(p)) for p in wheel] or [(f"the {lib.wheel} wheel: not installed "
                                                                    f"(no nvidia/cu13/lib/{lib.soname})", "")]
    try:
        found = _pathfinder(lib.pathfinder)
        if Path(found).name.startswith(lib.soname):
            out.append(("cuda-pathfinder", found))
        else:
            out.append((f"cuda-pathfinder: found {found}, not CUDA 13's {lib.soname}", ""))
    except OSError as exc:
        out.append((f"cuda-pathfinder: {exc}", ""))
    out.append(("the loader's search path", lib.soname))
    return out


def load(ffi: Any, lib: NvidiaLib) -> tuple[Any, str]:
    """(cffi library, the file loaded). BlasError(CUBLAS_STATUS_NOT_INITIALIZED) naming every place tried."""
    tried: list[str] = [] if os.environ.get(lib.env) else [f"${lib.env} unset"]
    for where, path in candidates(lib):
        if not path:
            tried.append(where)
            continue
        try:
            if lib.needs:
                sibling = Path(path).parent / lib.needs
                if sibling.is_file():
                    ffi.dlopen(str(sibling))         # libcublas's own cuBLASLt first (module docstring)
            handle = ffi.dlopen(path)
        except OSError as exc:
            tried.append(f"{where}: {exc}")
            continue
        log.info("cuda backend: %s loaded from %s (%s)", lib.soname, path, where)
        return handle, path
    raise BlasError(spec.STATUS["CUBLAS_STATUS_NOT_INITIALIZED"],
                    f"{lib.soname} (NVIDIA's, CUDA 13) cannot be loaded; tried: " + "; ".join(tried)
                    + f". Install the {lib.wheel} wheel for the daemon's Python or set {lib.env}")


class Loaded:
    """One library of a daemon process, loaded on first use (a daemon without such clients never loads it); a
    failure is kept and raised again, never retried per call."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._value: Any = None
        self._error: BlasError | None = None

    def get(self) -> Any:
        if self._value is None:
            if self._error is not None:
                raise BlasError(self._error.status, self._error.message)
            try:
                self._value = self._make()
            except BlasError as exc:
                log.error("cuda backend: %s", exc.message)
                self._error = exc
                raise
        return self._value
