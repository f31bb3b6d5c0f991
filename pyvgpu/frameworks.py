"""What `pyvgpu run` sets for JIT frameworks: against emulated GPUs, which run PTX and no SASS, the documented
switches that make a framework hand the driver PTX instead of a cubin it compiled for one architecture.

- CuPy: ``CUPY_COMPILE_WITH_PTX=1`` (CuPy's documented environment variable: NVRTC emits PTX, not a cubin).
- numba-cuda: none needed when nvJitLink is absent (numba then emits PTX and links it with the driver's
  ``cuLink*``, which libvcuda answers with that PTX); with nvJitLink installed numba links a cubin on the client
  and no documented switch changes that, so its kernels are refused on emulated GPUs (docs/frameworks.md).

A variable the user set is never overridden; real GPUs get nothing (their drivers take cubins)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
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


def jit_switches(env: Mapping[str, str], is_emulated: bool) -> dict[str, str]:
    """The variables to add to `env` for programs on these GPUs."""
    if not is_emulated:
        return {}
    return {k: v for k, v in PTX_SWITCHES.items() if k not in env}
