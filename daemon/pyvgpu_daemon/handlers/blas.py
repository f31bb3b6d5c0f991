"""Device ops of cuBLAS: handle create/destroy/workspace and one handler per routine family of
pyvgpu/cublas_spec.py, generated from the table (each takes the op's arguments by name, like every handler).

A family handler turns the wire forms into what backends take: a scalar's bytes stay the host value in host
pointer mode and are an 8-byte little-endian device address in device pointer mode; a result pointer is None in
host pointer mode (the value goes back as the reply's payload). It checks every device region the call names
against the session's memory when the backend hands pointers to a real library, runs the call on the backend, and
turns a status the call is refused with (BlasError) into its cudaError_t (cublas_spec.STATUS_CUDA) for the wire.
Handles live in the session's DeviceState and die with it (kinds.py: DeviceState.teardown).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import BlasError
from pyvgpu_daemon.blas.regions import regions
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, generated, handler, pop_handle


@handler("BLAS_CREATE")
def blas_create(c: Call) -> int:
    return c.st.add(c.st.blas_handles, c.ctx.blas_create)      # bound: cublas_spec.MAX_HANDLES_PER_DEVICE


@handler("BLAS_DESTROY")
def blas_destroy(c: Call, handle: int) -> None:
    c.ctx.blas_destroy(pop_handle(c.st.blas_handles, handle, "cuBLAS handle"))


@handler("BLAS_SET_WORKSPACE")
def blas_set_workspace(c: Call, handle: Any, ptr: int, size: int) -> None:
    if size:
        c.st.check_range(ptr, size, "cuBLAS workspace")
    c.ctx.blas_set_workspace(handle, ptr, size)


def backend_args(fam: spec.Family, wire: dict[str, Any], pmode: int) -> dict[str, Any]:
    """The family's arguments as backends take them, from their wire forms."""
    if pmode not in (spec.POINTER_MODE_HOST, spec.POINTER_MODE_DEVICE):
        raise CudaError("cudaErrorInvalidValue", f"{fam.name}: pointer mode {pmode}")
    device = pmode == spec.POINTER_MODE_DEVICE
    out = dict(wire)
    for a in fam.args:
        if isinstance(a, spec.Scalar) and device:
            raw = wire[a.name]
            if len(raw) != 8:
                raise CudaError("cudaErrorInvalidValue", f"{fam.name}: device-mode {a.name} of {len(raw)} bytes")
            out[a.name] = int.from_bytes(raw, "little")
        elif isinstance(a, spec.Result) and not device:
            out[a.name] = None
    return out


def _check_regions(c: Call, fam: spec.Family, args: dict[str, Any]) -> None:
    values = {k: (1 if v is None or isinstance(v, bytes) else v) for k, v in args.items()}
    failure = spec.check(fam, values)
    if failure is not None:             # the library refuses it before touching memory: nothing to check
        return

    def read_pointers(ptr: int, count: int) -> list[int]:
        c.st.check_range(ptr, count * 8, f"{fam.name} pointer array")
        return [int(p) for p in np.frombuffer(c.ctx.memcpy_dtoh(ptr, count * 8, None), dtype=np.uint64)]

    for what, ptr, nbytes in regions(fam, args, spec.derived(fam, values), read_pointers):
        c.st.check_range(ptr, nbytes, f"{fam.name} {what}")


def _family_handler(fam: spec.Family) -> Callable[..., Any]:
    result = spec.has_result(fam)

    def run(call: Call, /, **wire: Any) -> bytes | None:       # ("c" is an argument of BLAS_ROT)
        handle, stream, pmode, math = wire.pop("handle"), wire.pop("stream"), wire.pop("pmode"), wire.pop("math")
        args = backend_args(fam, wire, pmode)
        if call.ctx.blas_validates_pointers:
            _check_regions(call, fam, args)
        try:
            out = call.ctx.blas_call(handle, fam.name, stream, pmode, math, args)
        except BlasError as exc:
            raise CudaError(spec.cuda_error_of_status(exc.status), str(exc)) from None
        return (out or b"") if result else None

    run.__name__ = f"blas_{fam.name.lower()}"
    return run


for _fam in spec.FAMILIES:
    generated(_fam.name, _family_handler(_fam))
