"""What `pyvgpu run` sets for JIT frameworks: against emulated GPUs, which run PTX and no SASS, what makes a
framework hand the driver PTX instead of a cubin it compiled for one architecture.

- CuPy: ``CUPY_COMPILE_WITH_PTX=1`` (CuPy's documented environment variable: NVRTC emits PTX, not a cubin).
- numba-cuda: it links every kernel into a cubin, with nvJitLink where installed (else with the driver's
  ``cuLink*``, which libvcuda answers with the PTX), and no documented switch changes that. So pyvgpu's
  PTX-only nvJitLink (libvnvJitLink.so, SONAME libnvJitLink.so.13, csrc/nvjitlink) is preloaded: numba's PTX is
  its "cubin", the emulated GPU runs it.

A variable the user set is never overridden; real GPUs get nothing (their drivers take cubins, and NVIDIA's
nvJitLink serves them)."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyvgpu.hostmap import Host, query_daemons

EMU_BACKEND = "emu"
QUERY_TIMEOUT_S = 1.0      # asking the daemons which backend they run must not delay a program much
PTX_SWITCHES: dict[str, str] = {"CUPY_COMPILE_WITH_PTX": "1"}


def emulated(hosts: list[Host], token: bytes | None, timeout: float,
             connect: Callable[..., Any] | None = None) -> bool:
    """Whether any GPU of these daemons is emulated (unreachable daemons count as not: the program reports them)."""
    for report in query_daemons(hosts, token, timeout, connect):
        if report.error is None and (report.backend == EMU_BACKEND or
                                     any(d.get("backend") == EMU_BACKEND for d in report.devices or [])):
            return True
    return False


ENV_NVIDIA_NVJITLINK = "PYVGPU_NVJITLINK_LIB"    # NVIDIA's libnvJitLink.so.13, for the PTX linker's -lto links


def nvidia_nvjitlink() -> Path | None:
    """NVIDIA's libnvJitLink.so.13 from the nvidia-nvjitlink wheel (site-packages/nvidia/cu13/lib: torch's and
    cupy-cuda13x's CUDA 13 layout), found without loading it; None when that wheel is not installed."""
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        path = Path(base) / "cu13" / "lib" / "libnvJitLink.so.13"
        if path.is_file():
            return path
    return None


def with_ptx_linker(preload: str, linker: Path, is_emulated: bool) -> str:
    """LD_PRELOAD with the PTX-only nvJitLink added for emulated GPUs (when it was built), unchanged otherwise."""
    names = preload.replace(":", " ").split()
    if not is_emulated or not linker.is_file() or str(linker) in names:
        return preload
    return " ".join([*names, str(linker)])


def jit_switches(env: Mapping[str, str], is_emulated: bool) -> dict[str, str]:
    """The variables to add to `env` for programs on these GPUs."""
    if not is_emulated:
        return {}
    return {k: v for k, v in PTX_SWITCHES.items() if k not in env}
