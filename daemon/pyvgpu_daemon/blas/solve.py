"""cuBLAS's batched solvers on the emulated GPU (S/D/C/Z, matrices given by device arrays of pointers), with
LAPACK's semantics, which cuBLAS documents them by:

- getrfBatched: LU with partial pivoting (getf2's: the pivot is the first element of largest |re| + |im| in the
  column, ipiv[j] = the 1-based row swapped with row j) or, with P NULL, without; L unit lower and U in place;
  info[i] = the first k with U(k,k) exactly zero (the factorization still completes, as LAPACK's does);
- getrsBatched: op(A) X = B from those factors and pivots (NULL: none); no singularity check, as in cuBLAS;
- getriBatched: C = A^-1 from the factors (C is left unwritten when U(k,k) is zero: info[i] = k);
- geqrfBatched: Householder QR in LAPACK's geqrf layout (NumPy's qr mode="raw" is LAPACK's geqrf, transposed);
- gelsBatched: least squares for m >= n: A becomes its geqrf factors, C its Q^H C with the solution in the first n
  rows (devInfoArray[i] = k when R(k,k) is zero: then C holds Q^H C, as LAPACK's gels leaves it).

Arithmetic runs in the data's precision on private copies, written back once per matrix.
"""
from __future__ import annotations

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import dense
from pyvgpu_daemon.blas.operands import Operands
from pyvgpu_daemon.blas.registry import routine

OP_N = spec.CONSTANTS["OP_N"]


def _magnitude(x: np.ndarray) -> np.ndarray:
    """|re| + |im| (BLAS's i?amax measure), |x| for real data."""
    return np.abs(x.real) + np.abs(x.imag) if x.dtype.kind == "c" else np.abs(x)


def lu(w: np.ndarray, pivot: bool) -> tuple[np.ndarray, int]:
    """LU of the n x n w in place; → (1-based pivots, info)."""
    n = w.shape[0]
    ipiv = np.arange(1, n + 1, dtype=np.int32)
    info = 0
    for j in range(n):
        if pivot:
            p = j + int(np.argmax(_magnitude(w[j:, j])))
            ipiv[j] = p + 1
            if p != j:
                w[[j, p], :] = w[[p, j], :]
        if w[j, j] != 0:
            w[j + 1:, j] /= w[j, j]
        elif info == 0:
            info = j + 1
        w[j + 1:, j + 1:] -= np.outer(w[j + 1:, j], w[j, j + 1:])
    return ipiv, info


def _permutation(ipiv: np.ndarray | None, n: int) -> np.ndarray:
    """The row order the interchanges ipiv[0], ipiv[1], ... make of 0..n-1."""
    perm = np.arange(n)
    if ipiv is not None:
        for j in range(n):
            p = int(ipiv[j]) - 1
            if p != j and 0 <= p < n:
                perm[[j, p]] = perm[[p, j]]
    return perm


def lu_solve(f: np.ndarray, ipiv: np.ndarray | None, b: np.ndarray, trans: int) -> np.ndarray:
    """X with op(A) X = b, A = P L U given as the factors f (getrf's) and pivots."""
    n = f.shape[0]
    perm = _permutation(ipiv, n)
    low, up = dense.triangle(f, True, True), dense.triangle(f, False, False)
    if trans == OP_N:
        y = dense.solve_lower_upper(low, b[perm].copy(), True)
        return dense.solve_lower_upper(up, y, False)
    # op(A) = A^T or A^H = U^op L^op P^T: solve U^op z = b, L^op y = z, then undo the interchanges
    z = dense.solve_lower_upper(dense.op(up, trans).copy(), b.copy(), True)
    y = dense.solve_lower_upper(dense.op(low, trans).copy(), z, False)
    x = np.empty_like(y)
    x[perm] = y
    return x


def _pivots(o: Operands, name: str, i: int, n: int) -> np.ndarray | None:
    p = o.vec(name)
    return None if p is None else p[i * n:(i + 1) * n]


@routine(spec.GETRF_BATCHED)
def getrf_batched(o: Operands) -> None:
    n, count = o["n"], o["batchSize"]
    if count == 0:
        return
    info = o.vec("info")
    pivots = o.vec("P")
    for i, a in enumerate(o.mats("A") if n else [None] * count):
        if a is None:
            info[i] = 0
            continue
        w = a.copy()
        ipiv, info[i] = lu(w, pivots is not None)
        a[...] = w
        if pivots is not None:
            pivots[i * n:(i + 1) * n] = ipiv


@routine(spec.GETRS_BATCHED)
def getrs_batched(o: Operands) -> None:
    n, count = o["n"], o["batchSize"]
    if n == 0 or o["nrhs"] == 0 or count == 0:
        return
    for i, (f, b) in enumerate(zip(o.mats("Aarray"), o.mats("Barray"))):
        b[...] = lu_solve(f, _pivots(o, "devIpiv", i, n), b, o["trans"])


@routine(spec.GETRI_BATCHED)
def getri_batched(o: Operands) -> None:
    n, count = o["n"], o["batchSize"]
    if count == 0:
        return
    info = o.vec("info")
    if n == 0:
        info[...] = 0
        return
    for i, (f, c) in enumerate(zip(o.mats("A"), o.mats("C"))):
        zero = np.flatnonzero(np.diagonal(f) == 0)
        info[i] = zero[0] + 1 if zero.size else 0
        if not zero.size:
            c[...] = lu_solve(f, _pivots(o, "P", i, n), np.eye(n, dtype=f.dtype), OP_N)


@routine(spec.GEQRF_BATCHED)
def geqrf_batched(o: Operands) -> None:
    m, n, count = o["m"], o["n"], o["batchSize"]
    if m == 0 or n == 0 or count == 0:
        return
    for a, tau in zip(o.mats("Aarray"), o.mats("TauArray")):
        h, t = np.linalg.qr(a.copy(), mode="raw")     # LAPACK's geqrf, h transposed
        a[...] = h.T
        tau[:, 0] = t


def apply_qh(f: np.ndarray, tau: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Q^H c for Q = H(1) ... H(k), H(j) = I - tau_j v_j v_j^H with v_j = (0.., 1, f[j+1:, j]) (ormqr's)."""
    c = c.copy()
    for j in range(len(tau)):
        v = np.concatenate(([1], f[j + 1:, j])).astype(c.dtype)
        c[j:] -= np.conj(tau[j]) * np.outer(v, np.conj(v) @ c[j:])
    return c


@routine(spec.GELS_BATCHED)
def gels_batched(o: Operands) -> None:
    m, n, nrhs, count = o["m"], o["n"], o["nrhs"], o["batchSize"]
    if count == 0:
        return
    dev_info = o.vec("devInfoArray")
    if m == 0 or n == 0:
        if dev_info is not None:
            dev_info[...] = 0
        return
    cs = o.mats("Carray") if nrhs else [None] * count
    for i, (a, c) in enumerate(zip(o.mats("Aarray"), cs)):
        h, tau = np.linalg.qr(a.copy(), mode="raw")
        f = h.T
        a[...] = f
        zero = np.flatnonzero(np.diagonal(f)[:n] == 0)
        if dev_info is not None:
            dev_info[i] = zero[0] + 1 if zero.size else 0
        if c is None:
            continue
        qc = apply_qh(f, tau, c)
        if not zero.size:
            qc[:n] = dense.solve_lower_upper(dense.triangle(f[:n], False, False), qc[:n].copy(), False)
        c[...] = qc
