"""Dense-matrix helpers shared by Level 2 and Level 3: op(A), triangles, triangular solves, C = alpha*P + beta*C.

Matrices here are NumPy arrays (views of column-major device matrices or private copies); the last two axes are
(rows, cols). Nothing here reads an operand the caller did not pass, so beta == 0 / alpha == 0 semantics stay with
the routines.
"""
from __future__ import annotations

import numpy as np

from pyvgpu import cublas_spec as spec

OP_N, OP_T, OP_C = spec.CONSTANTS["OP_N"], spec.CONSTANTS["OP_T"], spec.CONSTANTS["OP_C"]
SOLVE_BLOCK = 64      # rows solved by substitution between two matrix-product updates of the rest


def op(a: np.ndarray, trans: int) -> np.ndarray:
    """op(A): A, A^T, or A^H (conjugate only for complex data: a real A^H is A^T)."""
    if trans == OP_N:
        return a
    t = np.swapaxes(a, -1, -2)
    return np.conj(t) if trans == OP_C and a.dtype.kind == "c" else t


def op_t(a: np.ndarray, trans: int) -> np.ndarray:
    """op(A)^T without copying unless conjugating: A^T for N, A for T, conj(A) for C."""
    if trans == OP_N:
        return np.swapaxes(a, -1, -2)
    return np.conj(a) if trans == OP_C and a.dtype.kind == "c" else a


def update(dst: np.ndarray, prod: np.ndarray, alpha: np.generic, beta: np.generic) -> None:
    """dst = alpha * prod + beta * dst; with beta == 0 dst is not read (NaN/Inf in it cannot leak)."""
    if beta == 0:
        dst[...] = prod if alpha == 1 else alpha * prod
    else:
        dst[...] = (prod if alpha == 1 else alpha * prod) + (dst if beta == 1 else beta * dst)


def scale(dst: np.ndarray, beta: np.generic) -> None:
    """dst = beta * dst; beta == 0 writes zeros without reading dst."""
    if beta == 0:
        dst[...] = 0
    elif beta != 1:
        dst *= beta


def triangle(a: np.ndarray, lower: bool, unit: bool) -> np.ndarray:
    """A dense copy of the referenced triangle of A (the other triangle, and the diagonal when unit, are never
    read: zeros and ones take their places)."""
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(t, 1)
    return t


def op_triangle(a: np.ndarray, lower: bool, unit: bool, trans: int) -> tuple[np.ndarray, bool]:
    """op(T) of the triangle and whether op(T) is lower triangular."""
    return op(triangle(a, lower, unit), trans), lower == (trans == OP_N)


def solve_lower_upper(t: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """X with T X = B (T triangular, n x n; B n x r, overwritten and returned), by blocked substitution: the
    divisions and subtractions a triangular solve defines, so a zero pivot gives Inf/NaN as on a GPU."""
    n = t.shape[0]
    x = b
    starts = list(range(0, n, SOLVE_BLOCK))
    for i0 in (starts if lower else reversed(starts)):
        i1 = min(i0 + SOLVE_BLOCK, n)
        if lower and i0 > 0:
            x[i0:i1] -= t[i0:i1, :i0] @ x[:i0]
        elif not lower and i1 < n:
            x[i0:i1] -= t[i0:i1, i1:] @ x[i1:]
        for i in (range(i0, i1) if lower else range(i1 - 1, i0 - 1, -1)):
            if lower and i > i0:
                x[i] -= t[i, i0:i] @ x[i0:i]
            elif not lower and i < i1 - 1:
                x[i] -= t[i, i + 1:i1] @ x[i + 1:i1]
            x[i] /= t[i, i]
    return x
