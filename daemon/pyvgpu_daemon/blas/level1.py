"""cuBLAS Level 1 on the emulated GPU: vector operations (axpy, scal, dot, nrm2, asum, amax/amin, copy, swap, rot).

n <= 0 is a quick return (results 0); scal, nrm2, asum and amax/amin also return at once for incx <= 0, as
reference BLAS and cuBLAS's documentation say. Element-wise updates run in the data's precision; reductions
accumulate in float64 (complex128) and round once, at least as accurate as a GPU's tree reduction.
"""
from __future__ import annotations

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import numeric
from pyvgpu_daemon.blas.operands import Operands
from pyvgpu_daemon.blas.registry import routine


def _wide(v: np.ndarray) -> np.ndarray:
    return v.astype(np.complex128 if v.dtype.kind == "c" else np.float64)


@routine(spec.AXPY)
def axpy(o: Operands) -> None:
    if o["n"] <= 0:
        return
    alpha = o.scalar("alpha")
    if alpha == 0:
        return                      # y unchanged; x is not read
    y = o.vec("y")
    y += (alpha * o.vec("x")).astype(y.dtype, copy=False)


@routine(spec.SCAL)
def scal(o: Operands) -> None:
    if o["n"] <= 0 or o["incx"] <= 0:
        return
    x = o.vec("x")
    x *= o.scalar("alpha")


@routine(spec.DOT)
def dot(o: Operands) -> None:
    if o["n"] <= 0:
        o.set_result("result", 0)
        return
    x, y = _wide(o.vec("x")), _wide(o.vec("y"))
    o.set_result("result", np.vdot(x, y) if o["conj"] == spec.CONSTANTS["OP_C"] else np.dot(x, y))


@routine(spec.NRM2)
def nrm2(o: Operands) -> None:
    if o["n"] <= 0 or o["incx"] <= 0:
        o.set_result("result", 0)
        return
    a = np.abs(_wide(o.vec("x")))
    # Scaled by the largest magnitude so float64 data cannot overflow in the squares (as BLAS's dnrm2 does).
    top = a.max(initial=0.0)
    if top == 0 or not np.isfinite(top):
        o.set_result("result", np.nan if np.isnan(a).any() else top)
        return
    o.set_result("result", top * np.sqrt(np.sum(np.square(a / top))))


@routine(spec.ASUM)
def asum(o: Operands) -> None:
    if o["n"] <= 0 or o["incx"] <= 0:
        o.set_result("result", 0)
        return
    x = _wide(o.vec("x"))
    o.set_result("result", np.sum(np.abs(x.real)) + np.sum(np.abs(x.imag)) if x.dtype.kind == "c"
                 else np.sum(np.abs(x)))


@routine(spec.IAMAX)
def iamax(o: Operands) -> None:
    """1-based index of the first largest (smallest) |Re| + |Im|. Reference BLAS compares with > (<), so a NaN
    is chosen only when it is the first element."""
    if o["n"] <= 0 or o["incx"] <= 0:
        o.set_result("result", 0)
        return
    x = _wide(o.vec("x"))
    a = np.abs(x.real) + np.abs(x.imag) if x.dtype.kind == "c" else np.abs(x)
    if np.isnan(a[0]):
        o.set_result("result", 1)
        return
    if o["minimum"]:
        o.set_result("result", int(np.argmin(np.where(np.isnan(a), np.inf, a))) + 1)
    else:
        o.set_result("result", int(np.argmax(np.where(np.isnan(a), -np.inf, a))) + 1)


@routine(spec.COPY)
def copy(o: Operands) -> None:
    if o["n"] <= 0:
        return
    o.vec("y")[...] = o.vec("x")


@routine(spec.SWAP)
def swap(o: Operands) -> None:
    if o["n"] <= 0:
        return
    x, y = o.vec("x"), o.vec("y")
    old_x = x.copy()
    x[...] = y
    y[...] = old_x


@routine(spec.ROT)
def rot(o: Operands) -> None:
    if o["n"] <= 0:
        return
    x, y = o.vec("x"), o.vec("y")
    c, s = o.scalar("c"), o.scalar("s")
    cx, cy = x.copy(), y.copy()
    x[...] = c * cx + s * cy
    y[...] = c * cy - np.conj(s) * cx



@routine(spec.DOT_EX)
def dot_ex(o: Operands) -> None:
    """cublasDotEx/DotcEx: fp16/bf16 data too (the table checks the execution type); accumulated in float64 /
    complex128, at least as accurate as the execution type, and rounded once to the result's type."""
    if o["n"] <= 0:
        o.set_result("result", 0)
        return
    wide = np.dtype(np.complex128 if spec.is_complex(o["xType"]) else np.float64)
    x = numeric.load(o.vec("x"), o["xType"], wide)
    y = numeric.load(o.vec("y"), o["yType"], wide)
    o.set_result("result", np.vdot(x, y) if o["conj"] == spec.CONSTANTS["OP_C"] else np.dot(x, y))
