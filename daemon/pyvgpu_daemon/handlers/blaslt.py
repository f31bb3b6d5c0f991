"""The device ops of cuBLASLt, generated from pyvgpu/cublaslt_spec.py like the cuBLAS families' handlers
(handlers/blas.py): they take the ops' arguments by name. LT_MATMUL runs a matmul; LT_HEURISTIC answers whether
the backend has an algorithm for a problem (the emulated GPU: every problem the table accepts; a real GPU: what
NVIDIA's heuristic says, and the plan it makes is the one the matmul then uses). A backend's "no algorithm"
(BlasError CUBLAS_STATUS_NOT_SUPPORTED, saying why) is answered as 0 algorithms and logged with its reason.

A matmul carries everything it needs (the descriptor's and the layouts' attributes): the daemon keeps no cuBLASLt
objects for a session. The handler turns the scalars' wire form into what backends take (the host value's bytes in
host pointer mode, an int device address in device pointer mode), checks the call by the table (the same checks
libvcublasLt made), checks every device region the call may touch against the session's memory when the backend
hands pointers to a real library, runs it on the backend in order on its stream, and turns a refusal (BlasError)
into its cudaError_t (cublas_spec.STATUS_CUDA) for the wire.
"""
from __future__ import annotations

import logging
from typing import Any

from pyvgpu import cublas_spec as blas
from pyvgpu import cublaslt_spec as spec
from pyvgpu_daemon.blas import BlasError, lt_layout, numeric
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, generated

log = logging.getLogger("pyvgpu.daemon")


def backend_args(wire: dict[str, Any]) -> dict[str, Any]:
    """LT_MATMUL's arguments as backends take them (scalars by pointer mode), checked by the table."""
    out = dict(wire)
    if wire["pmode"] == spec.POINTER_MODE_DEVICE:
        for s in spec.SCALARS:
            raw = wire[s]
            if len(raw) != 8:
                raise CudaError("cudaErrorInvalidValue", f"LT_MATMUL: device-mode {s} of {len(raw)} bytes")
            out[s] = int.from_bytes(raw, "little")
    ints = {n: out[n] for n in spec.INT_NAMES}
    failure = spec.check(ints)
    if failure is not None:
        raise CudaError(blas.cuda_error_of_status(failure.status), f"LT_MATMUL: {failure.why}")
    if wire["pmode"] == spec.POINTER_MODE_HOST:
        size = spec.scale_size(ints)
        for s in spec.SCALARS:
            if len(wire[s]) != size:
                raise CudaError("cudaErrorInvalidValue", f"LT_MATMUL: {s} of {len(wire[s])} bytes, not {size}")
    return out


def _beta_zero(args: dict[str, Any]) -> bool:
    """beta is known to be zero (host pointer mode): C is not read."""
    return isinstance(args["beta"], bytes) and numeric.decode(args["beta"], args["scale"]) == 0


def lt_matmul(call: Call, /, **wire: Any) -> None:
    stream = wire.pop("stream")
    args = backend_args(wire)
    if call.ctx.blas_validates_pointers:
        for what, ptr, nbytes in lt_layout.regions(args, _beta_zero(args)):
            call.st.check_range(ptr, nbytes, f"LT_MATMUL {what}")
    try:
        call.ctx.lt_matmul(stream, args)
    except BlasError as exc:
        raise CudaError(blas.cuda_error_of_status(exc.status), str(exc)) from None


def lt_heuristic(call: Call, /, **wire: Any) -> list[int]:
    problem = spec.problem_of(wire)
    failure = spec.check(problem)
    if failure is not None:
        raise CudaError(blas.cuda_error_of_status(failure.status), f"LT_HEURISTIC: {failure.why}")
    aligns = tuple(wire[f"align_{x.lower()}"] for x in spec.MATRICES)
    if any(a == 0 or a & (a - 1) for a in aligns):
        raise CudaError("cudaErrorInvalidValue", f"LT_HEURISTIC: alignments {aligns} are not powers of two")
    try:
        count, workspace = call.ctx.lt_heuristic(problem, aligns)
    except BlasError as exc:
        if exc.status != blas.NOT_SUPPORTED:
            raise CudaError(blas.cuda_error_of_status(exc.status), str(exc)) from None
        log.info("%s: LT_HEURISTIC: no algorithm: %s", call.session.tag(call.st.ordinal), exc.message)
        return [0, 0]
    return [int(count), int(workspace)]


generated("LT_MATMUL", lt_matmul)
generated("LT_HEURISTIC", lt_heuristic)
