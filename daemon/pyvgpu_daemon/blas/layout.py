"""Where the elements of a cuBLAS operand lie: shapes and strides (in elements) of vectors and column-major
matrices, and the span of addresses they cover. The emulated routines view the device heap with these
(operands.py); the daemon checks the regions a real library will touch against the session's memory (regions.py).

Vector element i is at i * inc for inc >= 0 and at (n - 1 - i) * |inc| for inc < 0 (BLAS's convention: a negative
increment walks backwards from the last element). Element (i, j) of a column-major matrix with leading dimension
ld is at i + j * ld; a strided batch adds a first axis with stride `stride`.
"""
from __future__ import annotations


def vector(n: int, inc: int) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(offset of logical element 0, shape, strides) of an n-vector with increment inc, in elements."""
    n = max(n, 0)
    return ((n - 1) * -inc if inc < 0 and n > 0 else 0), (n,), (inc,)


def matrix(rows: int, cols: int, ld: int, batch: int | None = None,
           stride: int = 0) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of a rows x cols matrix, or of a (batch, rows, cols) strided batch."""
    if batch is None:
        return (rows, cols), (1, ld)
    return (batch, rows, cols), (stride, 1, ld)


def span(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int] | None:
    """(lowest, highest) element offset reached from element 0, or None for an empty operand."""
    if any(n <= 0 for n in shape):
        return None
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    return lo, hi
