"""The cuBLAS routines PyTorch and CuPy call that issue 18 added to the emulated cuBLAS, against float64 /
complex128 references and LAPACK's defining properties: cublasDotEx/DotcEx (fp16, bf16 and the wide types),
sbmv, trsmBatched, and the batched solvers getrfBatched (P L U = A, |L| <= 1 with pivoting, info of a singular
matrix, no pivoting with P NULL), getrsBatched (all three operations, pivots and none), getriBatched (the inverse,
info and an untouched C for a singular one), geqrfBatched (Q R = A from the reflectors, Q unitary) and
gelsBatched (the least-squares solution, the residual rows, info for rank deficiency).
Tolerance: blas_harness.assert_close, or for the factorizations the backward error 64 n u max(1, |A|).
"""
from __future__ import annotations

import numpy as np
import pytest

from blas_harness import BF, C, D, EPS, H, PREFIX, S, Z, Dev, assert_close, host, result_value
from pyvgpu import cublas_spec as spec

TYPES = list(PREFIX.items())
I32 = spec.DTYPE["CUDA_R_32I"].value


def ptr_array(dev: Dev, ptrs: list[int]) -> int:
    return dev.put(np.array(ptrs, dtype=np.uint64))


def mats(dev: Dev, arrays: list[np.ndarray], t: int, ld: int) -> tuple[int, list[int]]:
    ptrs = [dev.mat(a, t, ld) for a in arrays]
    return ptr_array(dev, ptrs), ptrs


def ints(dev: Dev, values) -> int:
    return dev.put(np.asarray(values, dtype=np.int32))


def get_ints(dev: Dev, ptr: int, n: int) -> np.ndarray:
    return dev.raw(ptr, n, I32)


def well_conditioned(dev: Dev, n: int, t: int) -> np.ndarray:
    return dev.rand((n, n), t) + 4 * np.eye(n)


def backward_close(got: np.ndarray, ref: np.ndarray, t: int, n: int) -> None:
    tol = 64 * max(n, 1) * EPS[t] * max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


# ================================================================================================ DotEx
@pytest.mark.parametrize("t,ex", [(H, S), (BF, S), (S, S), (D, D), (C, C), (Z, Z)])
@pytest.mark.parametrize("entry", ["cublasDotEx", "cublasDotcEx"])
def test_dot_ex(t, ex, entry):
    d = Dev()
    n = 50
    x, y = d.rand(n, t), d.rand(n, t)
    px, py = d.vec(x, 2, t), d.vec(y, -1, t)
    raw = d.call(entry, n=n, x=px, xType=t, incx=2, y=py, yType=t, incy=-1, result=None, resultType=t,
                 executionType=ex)
    want = np.vdot(x, y) if entry == "cublasDotcEx" and t in (C, Z) else np.dot(x, y)
    assert_close(result_value(raw, t), want, t, n, acc=ex)


def test_dot_ex_refuses_mixed_types():
    from pyvgpu_daemon.blas import BlasError
    d = Dev()
    p = d.vec(d.rand(4, H), 1, H)
    with pytest.raises(BlasError) as e:
        d.call("cublasDotEx", n=4, x=p, xType=H, incx=1, y=p, yType=H, incy=1, result=None, resultType=H,
               executionType=H)          # fp16 execution: not one cuBLAS offers
    assert e.value.status == spec.NOT_SUPPORTED


# ================================================================================================ sbmv
@pytest.mark.parametrize("p,t", [("S", S), ("D", D)])
@pytest.mark.parametrize("uplo", [0, 1])
def test_sbmv(p, t, uplo):
    d = Dev()
    n, k = 9, 3
    full = d.rand((n, n), t)
    full = np.triu(np.tril(full + full.T, k), -k)                    # symmetric, k sub/super-diagonals
    band = np.full((k + 1, n), np.nan)
    for j in range(n):
        for i in range(max(0, j - k), min(n, j + k + 1)):
            if uplo == 1 and i <= j:
                band[k + i - j, j] = full[i, j]
            if uplo == 0 and i >= j:
                band[i - j, j] = full[i, j]
    x, y = d.rand(n, t), d.rand(n, t)
    pa, px, py = d.mat(band, t, k + 2), d.vec(x, 1, t), d.vec(y, 2, t)
    d.call(f"cublas{p}sbmv_v2", uplo=uplo, n=n, k=k, alpha=host(0.5, t), A=pa, lda=k + 2, x=px, incx=1,
           beta=host(2.0, t), y=py, incy=2)
    assert_close(d.get_vec(py, n, 2, t), 0.5 * full @ x + 2 * y, t, 2 * k + 2)


# ================================================================================================ trsmBatched
@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("side,uplo,trans", [(0, 0, 0), (1, 1, 1), (0, 1, 2)])
def test_trsm_batched(p, t, side, uplo, trans):
    d = Dev()
    m, n, batch = 6, 4, 3
    na = m if side == 0 else n
    tri = [np.tril(well_conditioned(d, na, t)) if uplo == 0 else np.triu(well_conditioned(d, na, t))
           for _ in range(batch)]
    bs = [d.rand((m, n), t) for _ in range(batch)]
    pa, _ = mats(d, tri, t, na + 1)
    pb, bptrs = mats(d, bs, t, m)
    d.call(f"cublas{p}trsmBatched", side=side, uplo=uplo, trans=trans, diag=0, m=m, n=n, alpha=host(1.5, t),
           A=pa, lda=na + 1, B=pb, ldb=m, batchCount=batch)
    for a, b, ptr in zip(tri, bs, bptrs):
        opa = a if trans == 0 else (a.conj().T if trans == 2 else a.T)
        want = np.linalg.solve(opa, 1.5 * b) if side == 0 else np.linalg.solve(opa.T, 1.5 * b.T).T
        assert_close(d.get_mat(ptr, m, n, t), want, t, 4 * na)


# ================================================================================================ getrf/getrs/getri
def unpack_lu(f: np.ndarray, ipiv: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = f.shape[0]
    low, up = np.tril(f, -1) + np.eye(n), np.triu(f)
    perm = np.arange(n)
    if ipiv is not None:
        for j in range(n):
            perm[[j, ipiv[j] - 1]] = perm[[ipiv[j] - 1, j]]
    return perm, low, up


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("pivot", [True, False])
def test_getrf_batched(p, t, pivot):
    d = Dev()
    n, batch = 7, 3
    a_list = [d.rand((n, n), t) + (0 if pivot else 4 * np.eye(n)) for _ in range(batch)]
    pa, ptrs = mats(d, a_list, t, n + 1)
    piv = ints(d, np.zeros(n * batch)) if pivot else 0
    info = ints(d, np.full(batch, -5))
    d.call(f"cublas{p}getrfBatched", n=n, A=pa, lda=n + 1, P=piv, info=info, batchSize=batch)
    assert list(get_ints(d, info, batch)) == [0] * batch
    pivots = get_ints(d, piv, n * batch).reshape(batch, n) if pivot else [None] * batch
    for a, ptr, ipiv in zip(a_list, ptrs, pivots):
        perm, low, up = unpack_lu(d.get_mat(ptr, n, n, t, n + 1), ipiv)
        backward_close(low @ up, a[perm], t, n)
        if pivot:
            assert np.all(np.abs(low) <= 1 + 1e-6) and np.all((ipiv >= np.arange(1, n + 1)) & (ipiv <= n))


def test_getrf_batched_reports_a_singular_matrix():
    d = Dev()
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])      # rank 2: U(3,3) = 0
    pa, _ = mats(d, [a, np.eye(3)], D, 3)
    info = ints(d, [-1, -1])
    d.call("cublasDgetrfBatched", n=3, A=pa, lda=3, P=ints(d, np.zeros(6)), info=info, batchSize=2)
    assert list(get_ints(d, info, 2)) == [3, 0]


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("pivot", [True, False])
def test_getrs_batched_solves_after_getrf(p, t, trans, pivot):
    d = Dev()
    n, nrhs, batch = 5, 3, 2
    a_list = [well_conditioned(d, n, t) for _ in range(batch)]
    b_list = [d.rand((n, nrhs), t) for _ in range(batch)]
    pa, _ = mats(d, a_list, t, n)
    piv = ints(d, np.zeros(n * batch)) if pivot else 0
    d.call(f"cublas{p}getrfBatched", n=n, A=pa, lda=n, P=piv, info=ints(d, [0, 0]), batchSize=batch)
    pb, bptrs = mats(d, b_list, t, n + 2)
    d.call(f"cublas{p}getrsBatched", trans=trans, n=n, nrhs=nrhs, Aarray=pa, lda=n, devIpiv=piv, Barray=pb,
           ldb=n + 2, batchSize=batch)
    for a, b, ptr in zip(a_list, b_list, bptrs):
        opa = a if trans == 0 else (a.conj().T if trans == 2 else a.T)
        assert_close(d.get_mat(ptr, n, nrhs, t, n + 2), np.linalg.solve(opa, b), t, 8 * n)


@pytest.mark.parametrize("p,t", TYPES)
def test_getri_batched_inverts_and_reports_singular(p, t):
    d = Dev()
    n = 4
    a = well_conditioned(d, n, t)
    singular = np.zeros((n, n))
    pa, _ = mats(d, [a, singular], t, n)
    piv = ints(d, np.zeros(2 * n))
    d.call(f"cublas{p}getrfBatched", n=n, A=pa, lda=n, P=piv, info=ints(d, [0, 0]), batchSize=2)
    sentinel = np.full((n, n), 7.0)
    pc, cptrs = mats(d, [np.zeros((n, n)), sentinel], t, n)
    info = ints(d, [-1, -1])
    d.call(f"cublas{p}getriBatched", n=n, A=pa, lda=n, P=piv, C=pc, ldc=n, info=info, batchSize=2)
    assert list(get_ints(d, info, 2)) == [0, 1]
    assert_close(d.get_mat(cptrs[0], n, n, t), np.linalg.inv(a), t, 8 * n)
    assert np.array_equal(d.get_mat(cptrs[1], n, n, t), sentinel)          # not computed: left as it was


# ================================================================================================ geqrf/gels
def q_from_reflectors(f: np.ndarray, tau: np.ndarray) -> np.ndarray:
    m = f.shape[0]
    q = np.eye(m, dtype=np.result_type(f, tau, np.float64))
    for j in range(len(tau)):
        v = np.zeros(m, dtype=q.dtype)
        v[j] = 1
        v[j + 1:] = f[j + 1:, j]
        q = q @ (np.eye(m) - tau[j] * np.outer(v, v.conj()))
    return q


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("m,n", [(6, 4), (4, 6)])
def test_geqrf_batched(p, t, m, n):
    d = Dev()
    a_list = [d.rand((m, n), t) for _ in range(2)]
    pa, aptrs = mats(d, a_list, t, m + 1)
    k = min(m, n)
    ptau, tptrs = mats(d, [np.zeros((k, 1)), np.zeros((k, 1))], t, k)
    d.call(f"cublas{p}geqrfBatched", m=m, n=n, Aarray=pa, lda=m + 1, TauArray=ptau, batchSize=2)
    for a, ap, tp in zip(a_list, aptrs, tptrs):
        f = d.get_mat(ap, m, n, t, m + 1)
        tau = d.get_mat(tp, k, 1, t)[:, 0]
        q = q_from_reflectors(f, tau)
        backward_close(q.conj().T @ q, np.eye(m), t, m)
        backward_close(q @ np.vstack([np.triu(f), np.zeros((max(0, m - f.shape[0]), n))])[:m], a, t, m)


@pytest.mark.parametrize("p,t", TYPES)
def test_gels_batched(p, t):
    d = Dev()
    m, n, nrhs = 8, 3, 2
    a_list = [d.rand((m, n), t) for _ in range(2)]
    a_list[1][:, 2] = 0                                  # rank deficient: R(3,3) is exactly 0
    c_list = [d.rand((m, nrhs), t) for _ in range(2)]
    pa, aptrs = mats(d, a_list, t, m)
    pc, cptrs = mats(d, c_list, t, m)
    dev_info = ints(d, [-1, -1])
    d.call(f"cublas{p}gelsBatched", trans=0, m=m, n=n, nrhs=nrhs, Aarray=pa, lda=m, Carray=pc, ldc=m,
           devInfoArray=dev_info, batchSize=2)
    assert list(get_ints(d, dev_info, 2)) == [0, 3]
    f = d.get_mat(aptrs[0], m, n, t)                   # A holds its QR factors: R's diagonal magnitudes
    assert_close(np.abs(np.diagonal(f)), np.abs(np.diagonal(np.linalg.qr(a_list[0], mode="r"))), t, 16 * m)
    got = d.get_mat(cptrs[0], m, nrhs, t)
    x, *_ = np.linalg.lstsq(a_list[0], c_list[0], rcond=None)
    assert_close(got[:n], x, t, 16 * m)
    resid = np.linalg.norm(a_list[0] @ x - c_list[0], axis=0)
    assert_close(np.linalg.norm(got[n:], axis=0), resid, t, 16 * m)      # rows n..m: Q^H C's remainder


def test_gels_refusals():
    from pyvgpu_daemon.blas import BlasError
    d = Dev()
    pa, _ = mats(d, [np.eye(3)], S, 3)
    for args, status in (({"trans": 1, "m": 3, "n": 3}, spec.NOT_SUPPORTED), ({"trans": 0, "m": 2, "n": 3},
                                                                                spec.NOT_SUPPORTED)):
        with pytest.raises(BlasError) as e:
            d.call("cublasSgelsBatched", nrhs=1, Aarray=pa, lda=3, Carray=pa, ldc=3, devInfoArray=0, batchSize=1,
                   **args)
        assert e.value.status == status
