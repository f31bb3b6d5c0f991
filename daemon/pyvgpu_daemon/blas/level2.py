"""cuBLAS Level 2 on the emulated GPU: gemv, ger, trsv, symv (S/D/C/Z), computed in the data's precision.

Quick returns are reference BLAS's: nothing happens when m == 0 or n == 0, or when alpha == 0 and beta == 1; with
alpha == 0 the matrix and x are not read, with beta == 0 y is not read.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import dense
from pyvgpu_daemon.blas.operands import Operands
from pyvgpu_daemon.blas.registry import routine

LOWER, UNIT = spec.CONSTANTS["LOWER"], spec.ENUMS["cublasDiagType_t"]["CUBLAS_DIAG_UNIT"]


def _y_update(o: Operands, product: Callable[[], np.ndarray]) -> None:
    """y = alpha * product() + beta * y with reference BLAS's quick returns (alpha == 0 and beta == 1: nothing;
    alpha == 0: y = beta * y, the product's operands are not read; beta == 0: y is not read)."""
    alpha, beta = o.scalar("alpha"), o.scalar("beta")
    if alpha == 0 and beta == 1:
        return
    y = o.vec("y")
    if alpha == 0:
        dense.scale(y, beta)
    else:
        dense.update(y, product(), alpha, beta)


@routine(spec.GEMV)
def gemv(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0:
        return
    _y_update(o, lambda: dense.op(o.mat("A"), o["trans"]) @ o.vec("x"))


@routine(spec.GER)
def ger(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0:
        return
    alpha = o.scalar("alpha")
    if alpha == 0:
        return
    y = o.vec("y")
    if o["conj"] == dense.OP_C:
        y = np.conj(y)
    a = o.mat("A")
    a += (alpha * np.outer(o.vec("x"), y)).astype(a.dtype, copy=False)


@routine(spec.TRSV)
def trsv(o: Operands) -> None:
    if o["n"] == 0:
        return
    t, lower = dense.op_triangle(o.mat("A"), o["uplo"] == LOWER, o["diag"] == UNIT, o["trans"])
    x = o.vec("x")
    x[...] = dense.solve_lower_upper(t, x.copy()[:, None], lower)[:, 0]


@routine(spec.SYMV)
def symv(o: Operands) -> None:
    if o["n"] == 0:
        return

    def product() -> np.ndarray:
        a = o.mat("A")
        # The full symmetric matrix from the stored triangle (the other triangle is never read).
        s = np.tril(a) + np.tril(a, -1).T if o["uplo"] == LOWER else np.triu(a) + np.triu(a, 1).T
        return s @ o.vec("x")
    _y_update(o, product)


def band_to_dense(band: np.ndarray, n: int, k: int, lower: bool) -> np.ndarray:
    """The symmetric n x n matrix of a (k+1) x n band (BLAS's storage: column j holds A(j-k..j, j) from row
    k - (j - i) for upper, A(j..j+k, j) from row i - j for lower); elements outside the band are never read."""
    a = np.zeros((n, n), dtype=band.dtype)
    for d in range(min(k, n - 1) + 1):
        cols = np.arange(d, n)
        vals = band[d, :n - d] if lower else band[k - d, d:]
        rows_lo, cols_lo = (cols, cols - d)
        a[rows_lo, cols_lo] = vals
        a[cols_lo, rows_lo] = vals
    return a


@routine(spec.SBMV)
def sbmv(o: Operands) -> None:
    n, k = o["n"], o["k"]
    if n == 0:
        return
    _y_update(o, lambda: band_to_dense(o.mat("A"), n, k, o["uplo"] == LOWER) @ o.vec("x"))
