"""cuBLAS Level 3 and BLAS-like extensions on the emulated GPU: gemm (all types, strided and pointer-array
batches), geam, dgmm, trsm (and its pointer-array batch), syrk.

GEMM computes C^T = op(B)^T op(A)^T: a column-major matrix with leading dimension ld is, transposed, a row-major
one with row stride ld, which is the layout NumPy's matmul hands to BLAS without copying (its output included).
So an fp32 GEMM is one sgemm call on views of the device heap; fp16/bf16 inputs are widened to the compute type
first (numeric.py). With alpha == 0 (or k == 0) A and B are not read; with beta == 0 C is not read.
"""
from __future__ import annotations

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import dense, numeric
from pyvgpu_daemon.blas.operands import Operands
from pyvgpu_daemon.blas.registry import routine

LOWER, LEFT = spec.CONSTANTS["LOWER"], spec.CONSTANTS["LEFT"]
UNIT = spec.ENUMS["cublasDiagType_t"]["CUBLAS_DIAG_UNIT"]


def _gemm_into(o: Operands, c: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: np.generic,
               beta: np.generic) -> None:
    """C = alpha op(A) op(B) + beta C on (batch, rows, cols) stacks; alpha != 0."""
    atype, btype, ctype, compute = o["Atype"], o["Btype"], o["Ctype"], o["computeType"]
    cdt = numeric.compute_dtype(ctype, compute)
    ct = np.swapaxes(c, -1, -2)
    at, bt = dense.op_t(a, o["transa"]), dense.op_t(b, o["transb"])
    alpha, beta = cdt.type(alpha), cdt.type(beta)
    if all(numeric.storage(t) == cdt for t in (atype, btype, ctype)):
        if beta == 0:
            np.matmul(bt, at, out=ct)           # straight into C: not read, NaNs in it cannot leak
            if alpha != 1:
                ct *= alpha
        else:
            prod = np.matmul(bt, at)
            if alpha != 1:
                prod *= alpha
            if beta != 1:
                ct *= beta
            ct += prod
        return
    prod = np.matmul(numeric.load(bt, btype, cdt), numeric.load(at, atype, cdt))
    if alpha != 1:
        prod *= alpha
    if beta != 0:
        prod += beta * numeric.load(ct, ctype, cdt)
    numeric.store(ct, prod, ctype)


def _scale_c(o: Operands, c: np.ndarray, beta: np.generic) -> None:
    """C = beta C (alpha == 0 or k == 0)."""
    ctype = o["Ctype"]
    if beta == 0:
        c[...] = 0
    elif beta != 1:
        cdt = numeric.compute_dtype(ctype, o["computeType"])
        numeric.store(c, cdt.type(beta) * numeric.load(c, ctype, cdt), ctype)


@routine(spec.GEMM)
def gemm(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0 or o["batchCount"] == 0:
        return
    alpha, beta = o.scalar("alpha"), o.scalar("beta")
    if alpha == 0 or o["k"] == 0:
        if beta != 1:
            _scale_c(o, o.mat("C"), beta)
        return
    _gemm_into(o, o.mat("C"), o.mat("A"), o.mat("B"), alpha, beta)


@routine(spec.GEMM_BATCHED)
def gemm_batched(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0 or o["batchCount"] == 0:
        return
    alpha, beta = o.scalar("alpha"), o.scalar("beta")
    cs = o.mats("Carray")
    if alpha == 0 or o["k"] == 0:
        if beta != 1:
            for c in cs:
                _scale_c(o, c, beta)
        return
    for a, b, c in zip(o.mats("Aarray"), o.mats("Barray"), cs):
        _gemm_into(o, c[None], a[None], b[None], alpha, beta)


@routine(spec.GEAM)
def geam(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0:
        return
    alpha, beta = o.scalar("alpha"), o.scalar("beta")
    total: np.ndarray | int = 0
    if alpha != 0:
        total = alpha * dense.op(o.mat("A"), o["transa"])
    if beta != 0:
        total = total + beta * dense.op(o.mat("B"), o["transb"])
    o.mat("C")[...] = total       # computed before C is written: in place on A or B is safe


@routine(spec.DGMM)
def dgmm(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0:
        return
    a, x = o.mat("A"), o.vec("x")
    o.mat("C")[...] = x[:, None] * a if o["mode"] == LEFT else a * x[None, :]


def _trsm_one(o: Operands, a: np.ndarray, b: np.ndarray, alpha: np.generic) -> None:
    """B = X with op(A) X = alpha B (LEFT) or X op(A) = alpha B (RIGHT), alpha != 0."""
    t, lower = dense.op_triangle(a, o["uplo"] == LOWER, o["diag"] == UNIT, o["trans"])
    rhs = (alpha * b).astype(b.dtype)
    if o["side"] == LEFT:
        b[...] = dense.solve_lower_upper(t, rhs, lower)
    else:                         # X op(A) = R  <=>  op(A)^T X^T = R^T
        b[...] = dense.solve_lower_upper(np.ascontiguousarray(t.T), np.ascontiguousarray(rhs.T), not lower).T


@routine(spec.TRSM)
def trsm(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0:
        return
    alpha = o.scalar("alpha")
    b = o.mat("B")
    if alpha == 0:
        b[...] = 0                # A is not read
        return
    _trsm_one(o, o.mat("A"), b, alpha)


@routine(spec.TRSM_BATCHED)
def trsm_batched(o: Operands) -> None:
    if o["m"] == 0 or o["n"] == 0 or o["batchCount"] == 0:
        return
    alpha = o.scalar("alpha")
    bs = o.mats("B")
    if alpha == 0:
        for b in bs:
            b[...] = 0            # A is not read
        return
    for a, b in zip(o.mats("A"), bs):
        _trsm_one(o, a, b, alpha)


@routine(spec.SYRK)
def syrk(o: Operands) -> None:
    n, k = o["n"], o["k"]
    if n == 0:
        return
    alpha, beta = o.scalar("alpha"), o.scalar("beta")
    if (alpha == 0 or k == 0) and beta == 1:
        return
    c = o.mat("C")
    tri = np.tril_indices(n) if o["uplo"] == LOWER else np.triu_indices(n)
    if alpha == 0 or k == 0:
        c[tri] = 0 if beta == 0 else beta * c[tri]
        return
    a = dense.op(o.mat("A"), dense.OP_N if o["trans"] == dense.OP_N else dense.OP_T)
    prod = (a @ a.T)[tri]
    c[tri] = alpha * prod if beta == 0 else alpha * prod + beta * c[tri]
