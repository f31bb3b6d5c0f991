"""Where the operands of a cuBLASLt matmul lie (pyvgpu/cublaslt_spec.py's LT_MATMUL arguments): shapes and strides
of A, B, C, D, the bias vector and the epilogue's auxiliary matrix, and the device regions they cover.

The emulated matmul views the heap with these (lt.py); the daemon checks the regions a real library will touch
against the session's allocations first (handlers/blaslt.py), or a client could make cuBLASLt read or write another
session's memory.

A matrix is (batch, rows, cols) with strides (batch stride, 1, ld) when column-major and (batch stride, ld, 1)
when row-major, in elements. The bias (or bias gradient) of batch i starts at bias + i * bias_stride. A GELU
auxiliary matrix is column-major m x n with leading dimension aux_ld and batch stride aux_stride (elements); a ReLU
bit mask has bit i + j * aux_ld of batch b at bit b * aux_stride (both multiples of 128 bits, so every column
starts on a byte): it is viewed as bytes, ceil(m / 8) of them per column.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from pyvgpu import cublas_spec as blas
from pyvgpu import cublaslt_spec as spec
from pyvgpu_daemon.blas import layout

Geometry = tuple[tuple[int, ...], tuple[int, ...]]     # (shape, strides in elements)


def matrix(v: Mapping[str, int], x: str) -> Geometry:
    """The (batch, rows, cols) geometry of matrix x ("A".."D") as its layout describes it (op() not applied)."""
    rows, cols, ld = v[x + "rows"], v[x + "cols"], v[x + "ld"]
    inner = (1, ld) if v[x + "order"] == spec.ORDER_COL else (ld, 1)
    return (v[x + "batch"], rows, cols), (v[x + "stride"], *inner)


def bias_length(v: Mapping[str, int]) -> int:
    """Elements of one batch's bias vector: D's rows, or D's columns for BGRADB."""
    return v["Dcols"] if spec.epi_bias_out(v["epilogue"]) == 2 else v["Drows"]


def bias(v: Mapping[str, int]) -> Geometry:
    return (v["Dbatch"], bias_length(v)), (v["bias_stride"], 1)


def gelu_aux(v: Mapping[str, int]) -> Geometry:
    return (v["Dbatch"], v["Drows"], v["Dcols"]), (v["aux_stride"], 1, v["aux_ld"])


def relu_mask(v: Mapping[str, int]) -> Geometry:
    """The mask's bytes: (batch, ceil(m / 8), n) with strides in bytes."""
    return (v["Dbatch"], (v["Drows"] + 7) // 8, v["Dcols"]), (v["aux_stride"] // 8, 1, v["aux_ld"] // 8)


def size_of(dtype: int) -> int:
    return blas.DTYPE_BY_VALUE[dtype].size


def _span(addr: int, geo: Geometry, itemsize: int) -> tuple[int, int] | None:
    reach = layout.span(*geo)
    if reach is None:
        return None
    return addr + reach[0] * itemsize, (reach[1] - reach[0] + 1) * itemsize


def regions(v: Mapping[str, Any], beta_zero: bool) -> Iterator[tuple[str, int, int]]:
    """(what, address, bytes) of every device region the call may touch. `v`: the call's arguments, alpha/beta
    as bytes (host pointer mode) or device addresses (ints); beta_zero: beta is known to be 0 (C is not read)."""
    d = {**v, **spec.derived(v)}
    empty = d["m"] == 0 or d["n"] == 0
    for s in spec.SCALARS:
        if isinstance(v[s], int):
            yield s, v[s], size_of(v["scale"])
    for x in ("A", "B", "C", "D"):
        if x == "C" and beta_zero:
            continue
        if x in "AB" and (empty or d["k"] == 0):
            continue
        span = _span(v[x], matrix(v, x), size_of(v[x + "type"]))
        if span:
            yield x, *span
    epi = v["epilogue"]
    if (spec.epi_bias_in(epi) or spec.epi_bias_out(epi)) and not empty:
        span = _span(v["bias"], bias(v), size_of(d["bias_dtype"]))
        if span:
            yield "bias", *span
    aux = spec.epi_aux(epi)
    if aux and not empty:
        span = _span(v["aux"], *((relu_mask(v), 1) if aux == 1 else (gelu_aux(v), size_of(d["aux_dtype"]))))
        if span:
            yield "aux", *span
    if v["workspace_size"]:
        yield "workspace", v["workspace"], v["workspace_size"]
