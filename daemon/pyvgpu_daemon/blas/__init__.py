"""cuBLAS on the emulated GPU: each family of pyvgpu/cublas_spec.py computed with NumPy over the device heap.

    execute("BLAS_GEMM", memory, {"transa": 0, ..., "alpha": b"...", "A": 0x1000000100, ...}) -> bytes | None

Arguments are the family's, by name: ints for sizes, enums, types and device pointers; a scalar is its value's
bytes (host pointer mode) or a device address (device pointer mode); a result is None (host pointer mode: the
returned bytes are the value) or a device address. The call is checked first by the table's rules
(cublas_spec.check: the same rules libvcublas applies on the client), then charged against the work budget, then
run by the family's routine (level1/level2/level3). Failures: BlasError(status) for what cuBLAS refuses,
CudaError for device faults (a view outside every allocation is cudaErrorIllegalAddress).

Runs on the (session, device) worker thread like a kernel launch; floating-point exceptions are silent, as on a GPU.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import level1, level2, level3, solve  # noqa: F401  (importing them registers the routines)
from pyvgpu_daemon.blas.operands import LIMITS, HostValue, BlasError, BlasLimits, Operands
from pyvgpu_daemon.blas.registry import ROUTINES
from pyvgpu_daemon.emu.memory import DeviceMemory

__all__ = ["execute", "BlasError", "BlasLimits", "LIMITS"]

_missing = {f.name for f in spec.FAMILIES} - set(ROUTINES)
if _missing:
    raise RuntimeError(f"no emulated routine for {sorted(_missing)}")


def _check_values(fam: spec.Family, args: Mapping[str, Any]) -> dict[str, int]:
    """The ints the table's checks see: host-mode scalars and results count as non-NULL pointers."""
    if set(args) != set(fam.wire_names):
        raise BlasError(spec.INVALID_VALUE, f"{fam.name}: arguments {sorted(set(args) ^ set(fam.wire_names))} "
                                            "missing or unknown")
    out: dict[str, int] = {}
    for a in fam.args:
        if isinstance(a, spec.HostInfo):
            continue
        v = args[a.name]
        if isinstance(a, spec.Scalar) and isinstance(v, HostValue):
            out[a.name] = 1
        elif isinstance(a, spec.Result) and v is None:
            out[a.name] = 1
        elif isinstance(v, int) and not isinstance(v, bool):
            out[a.name] = v
        else:
            raise BlasError(spec.INVALID_VALUE, f"{fam.name}: {a.name} = {type(v).__name__}")
    return out


def execute(name: str, memory: DeviceMemory, args: Mapping[str, Any], limits: BlasLimits = LIMITS) -> bytes | None:
    fam = spec.FAMILY.get(name)
    if fam is None:
        raise BlasError(spec.NOT_SUPPORTED, f"unknown cuBLAS operation {name!r}")
    values = _check_values(fam, args)
    failure = spec.check(fam, values)
    if failure is not None:
        raise BlasError(failure.status, f"{name}: {failure.why}")
    work = spec.evaluate(fam.work, values)
    if work > limits.max_work:
        raise BlasError(spec.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"],
                        f"{name}: {work} multiply-adds exceed the emulated device's budget of {limits.max_work}")
    ops = Operands(fam, memory, args, spec.derived(fam, values))
    with np.errstate(all="ignore"):
        ROUTINES[name](ops)
    return ops.result
