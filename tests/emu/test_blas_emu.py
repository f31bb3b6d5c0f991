"""The emulated GPU's cuBLAS (daemon/pyvgpu_daemon/blas) against float64/complex128 host references.

Every supported routine in every supported type, called the way its C entry point would be (the table's bound
arguments plus the call's), with leading dimensions above the minimum, negative increments, strided and
pointer-array batches, both pointer modes, beta == 0 over NaN, alpha == 0 over unreadable operands, k == 0, and
the documented CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED cases. Tolerances: blas_harness.assert_close
(8 x (output rounding + k accumulated roundings of the arithmetic type) x max(1, |reference|)).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from blas_harness import BF, C, D, H, I32, OP_C, OP_N, OP_T, PREFIX, S, Z, Dev, assert_close, host, op, \
    result_value
from pyvgpu import cublas_spec as spec
from pyvgpu_daemon import blas
from pyvgpu_daemon.blas import BlasError, BlasLimits
from pyvgpu_daemon.errors import CudaError

TYPES = list(PREFIX.items())
REAL_OF = {S: S, D: D, C: S, Z: D}
NAN_PTR = 0x1234_5000    # an address no allocation holds: an operand that must not be read
LOWER, UPPER, LEFT, RIGHT = 0, 1, 0, 1


def scalars(dev: Dev, mode: str, t: int, *values):
    """alpha/beta/... in host pointer mode (bytes) or device pointer mode (device addresses)."""
    return [host(v, t) if mode == "host" else dev.scalar(v, t) for v in values]


def pick(t: int, real: complex) -> complex:
    return real if t in (C, Z) else real.real


# ================================================================================================ Level 1
@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("incx,incy", [(1, 1), (2, -1), (-3, 2)])
def test_axpy(p, t, incx, incy):
    d = Dev()
    n = 37
    x, y = d.rand(n, t), d.rand(n, t)
    alpha = pick(t, 0.75 - 0.5j)
    px, py = d.vec(x, incx, t), d.vec(y, incy, t)
    d.call(f"cublas{p}axpy_v2", n=n, alpha=host(alpha, t), x=px, incx=incx, y=py, incy=incy)
    assert_close(d.get_vec(py, n, incy, t), alpha * x + y, t, 2)
    assert np.array_equal(d.get_vec(px, n, incx, t), x)


@pytest.mark.parametrize("p,t", TYPES)
def test_axpy_alpha_zero_does_not_read_x(p, t):
    d = Dev()
    y = d.rand(5, t)
    py = d.vec(y, 1, t)
    d.call(f"cublas{p}axpy_v2", n=5, alpha=host(0, t), x=NAN_PTR, incx=1, y=py, incy=1)
    assert np.array_equal(d.get_vec(py, 5, 1, t), y)


@pytest.mark.parametrize("name,at,xt", [("cublasSscal_v2", S, S), ("cublasDscal_v2", D, D), ("cublasCscal_v2", C, C),
                                        ("cublasZscal_v2", Z, Z), ("cublasCsscal_v2", S, C),
                                        ("cublasZdscal_v2", D, Z)])
@pytest.mark.parametrize("mode", ["host", "device"])
def test_scal(name, at, xt, mode):
    d = Dev()
    x = d.rand(20, xt)
    alpha = pick(at, -1.5 + 0.25j)
    px = d.vec(x, 3, xt)
    (a,) = scalars(d, mode, at, alpha)
    d.call(name, n=20, alpha=a, x=px, incx=3)
    assert_close(d.get_vec(px, 20, 3, xt), alpha * x, xt)
    d.call(name, n=20, alpha=a, x=px, incx=-1)          # incx <= 0: nothing happens (reference BLAS)
    d.call(name, n=0, alpha=a, x=px, incx=3)
    assert_close(d.get_vec(px, 20, 3, xt), alpha * x, xt)


@pytest.mark.parametrize("name,t,conj", [("cublasSdot_v2", S, False), ("cublasDdot_v2", D, False),
                                         ("cublasCdotu_v2", C, False), ("cublasCdotc_v2", C, True),
                                         ("cublasZdotu_v2", Z, False), ("cublasZdotc_v2", Z, True)])
@pytest.mark.parametrize("mode", ["host", "device"])
def test_dot(name, t, conj, mode):
    d = Dev()
    n = 50
    x, y = d.rand(n, t), d.rand(n, t)
    px, py = d.vec(x, -2, t), d.vec(y, 1, t)
    ref = np.sum((np.conj(x) if conj else x) * y)
    if mode == "host":
        raw = d.call(name, n=n, x=px, incx=-2, y=py, incy=1, result=None)
        got = result_value(raw, t)
    else:
        pr = d.put(d.sentinel(1, t))
        assert d.call(name, n=n, x=px, incx=-2, y=py, incy=1, result=pr) is None
        got = d.decode(d.raw(pr, 1, t), t)[0]
    assert_close(got, ref, t, n)
    assert result_value(d.call(name, n=0, x=px, incx=1, y=py, incy=1, result=None), t) == 0


@pytest.mark.parametrize("name,xt,rt", [("cublasSnrm2_v2", S, S), ("cublasDnrm2_v2", D, D),
                                        ("cublasScnrm2_v2", C, S), ("cublasDznrm2_v2", Z, D)])
def test_nrm2(name, xt, rt):
    d = Dev()
    x = d.rand(33, xt)
    px = d.vec(x, 2, xt)
    assert_close(result_value(d.call(name, n=33, x=px, incx=2, result=None), rt), np.linalg.norm(x), rt, 33)
    assert result_value(d.call(name, n=33, x=px, incx=0, result=None), rt) == 0     # incx <= 0 -> 0
    assert result_value(d.call(name, n=-1, x=px, incx=1, result=None), rt) == 0


def test_dnrm2_does_not_overflow():
    d = Dev()
    x = np.array([3e300, 4e300])
    got = result_value(d.call("cublasDnrm2_v2", n=2, x=d.vec(x, 1, D), incx=1, result=None), D)
    assert got == pytest.approx(5e300, rel=1e-15)


@pytest.mark.parametrize("name,xt,rt", [("cublasSasum_v2", S, S), ("cublasDasum_v2", D, D),
                                        ("cublasScasum_v2", C, S), ("cublasDzasum_v2", Z, D)])
def test_asum(name, xt, rt):
    d = Dev()
    x = d.rand(40, xt)
    px = d.vec(x, 1, xt)
    ref = np.sum(np.abs(x.real) + np.abs(x.imag))
    assert_close(result_value(d.call(name, n=40, x=px, incx=1, result=None), rt), ref, rt, 40)
    assert result_value(d.call(name, n=40, x=px, incx=-1, result=None), rt) == 0


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("which", ["amax", "amin"])
def test_iamax_iamin(p, t, which):
    d = Dev()
    x = d.rand(30, t)
    metric = np.abs(x.real) + np.abs(x.imag)
    best = int(np.argmax(metric) if which == "amax" else np.argmin(metric))
    x[best + 5 if best + 5 < 30 else best - 5] = x[best]        # a tie later in the vector: the first wins
    px = d.vec(x, 2, t)
    name = f"cublasI{p.lower()}{which}_v2"
    assert result_value(d.call(name, n=30, x=px, incx=2, result=None), I32) == min(best, best + 5 if best + 5 < 30
                                                                                   else best - 5) + 1
    # device pointer mode with the _64 API: an int64 result
    pr = d.put(np.zeros(1, np.int64))
    d.call(name + "_64", n=30, x=px, incx=2, result=pr)
    assert d.raw(pr, 1, spec.DTYPE["CUDA_R_64I"].value)[0] == result_value(
        d.call(name, n=30, x=px, incx=2, result=None), I32)
    assert result_value(d.call(name, n=0, x=px, incx=1, result=None), I32) == 0
    assert result_value(d.call(name, n=5, x=px, incx=0, result=None), I32) == 0


def test_isamax_nan_semantics():
    d = Dev()
    first_nan = d.vec(np.array([np.nan, 5.0, 1.0]), 1, S)
    later_nan = d.vec(np.array([1.0, np.nan, 7.0, -7.0]), 1, S)
    assert result_value(d.call("cublasIsamax_v2", n=3, x=first_nan, incx=1, result=None), I32) == 1
    assert result_value(d.call("cublasIsamax_v2", n=4, x=later_nan, incx=1, result=None), I32) == 3
    assert result_value(d.call("cublasIsamin_v2", n=4, x=later_nan, incx=1, result=None), I32) == 1


@pytest.mark.parametrize("p,t", TYPES)
def test_copy_swap(p, t):
    d = Dev()
    x, y = d.rand(25, t), d.rand(25, t)
    px, py = d.vec(x, -2, t), d.vec(y, 3, t)
    d.call(f"cublas{p}swap_v2", n=25, x=px, incx=-2, y=py, incy=3)
    assert np.array_equal(d.get_vec(px, 25, -2, t), y) and np.array_equal(d.get_vec(py, 25, 3, t), x)
    d.call(f"cublas{p}copy_v2", n=25, x=px, incx=-2, y=py, incy=3)
    assert np.array_equal(d.get_vec(py, 25, 3, t), y)
    raw = d.raw(py, 1 + 24 * 3, t)
    assert np.isnan(np.delete(raw, np.arange(0, 75, 3)).real).all()    # the gaps were not written


@pytest.mark.parametrize("name,t,ct,stype", [("cublasSrot_v2", S, S, S), ("cublasDrot_v2", D, D, D),
                                             ("cublasCrot_v2", C, S, C), ("cublasZrot_v2", Z, D, Z),
                                             ("cublasCsrot_v2", C, S, S), ("cublasZdrot_v2", Z, D, D)])
@pytest.mark.parametrize("mode", ["host", "device"])
def test_rot(name, t, ct, stype, mode):
    d = Dev()
    x, y = d.rand(17, t), d.rand(17, t)
    c, s = 0.6, pick(stype, 0.8 - 0.3j)
    px, py = d.vec(x, 1, t), d.vec(y, -1, t)
    pc, ps = scalars(d, mode, ct, c)[0], scalars(d, mode, stype, s)[0]
    d.call(name, n=17, x=px, incx=1, y=py, incy=-1, c=pc, s=ps)
    assert_close(d.get_vec(px, 17, 1, t), c * x + s * y, t, 2)
    assert_close(d.get_vec(py, 17, -1, t), c * y - np.conj(s) * x, t, 2)


# ================================================================================================ Level 2
@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("trans", [OP_N, OP_T, OP_C])
@pytest.mark.parametrize("mode", ["host", "device"])
def test_gemv(p, t, trans, mode):
    d = Dev()
    m, n, lda = 13, 9, 16
    a = d.rand((m, n), t)
    xl, yl = (n, m) if trans == OP_N else (m, n)
    x, y = d.rand(xl, t), d.rand(yl, t)
    alpha, beta = pick(t, 1.25 + 0.5j), pick(t, -0.5 + 1j)
    pa, px, py = d.mat(a, t, lda), d.vec(x, -2, t), d.vec(y, 3, t)
    pal, pbe = scalars(d, mode, t, alpha, beta)
    d.call(f"cublas{p}gemv_v2", trans=trans, m=m, n=n, alpha=pal, A=pa, lda=lda, x=px, incx=-2, beta=pbe, y=py,
           incy=3)
    assert_close(d.get_vec(py, yl, 3, t), alpha * op(a, trans) @ x + beta * y, t, max(m, n))


@pytest.mark.parametrize("p,t", TYPES)
def test_gemv_beta_zero_does_not_read_y_alpha_zero_does_not_read_a(p, t):
    d = Dev()
    m, n = 6, 4
    a, x = d.rand((m, n), t), d.rand(n, t)
    py = d.vec(np.full(m, np.nan), 1, t)
    d.call(f"cublas{p}gemv_v2", trans=OP_N, m=m, n=n, alpha=host(1, t), A=d.mat(a, t), lda=m, x=d.vec(x, 1, t),
           incx=1, beta=host(0, t), y=py, incy=1)
    assert_close(d.get_vec(py, m, 1, t), a @ x, t, n)
    d.call(f"cublas{p}gemv_v2", trans=OP_N, m=m, n=n, alpha=host(0, t), A=NAN_PTR, lda=m, x=NAN_PTR,
           incx=1, beta=host(2, t), y=py, incy=1)
    assert_close(d.get_vec(py, m, 1, t), 2 * (a @ x), t, n)


@pytest.mark.parametrize("name,t,conj", [("cublasSger_v2", S, False), ("cublasDger_v2", D, False),
                                         ("cublasCgeru_v2", C, False), ("cublasCgerc_v2", C, True),
                                         ("cublasZgeru_v2", Z, False), ("cublasZgerc_v2", Z, True)])
def test_ger(name, t, conj):
    d = Dev()
    m, n, lda = 7, 5, 9
    a, x, y = d.rand((m, n), t), d.rand(m, t), d.rand(n, t)
    alpha = pick(t, 0.5 + 2j)
    pa = d.mat(a, t, lda)
    d.call(name, m=m, n=n, alpha=host(alpha, t), x=d.vec(x, 2, t), incx=2, y=d.vec(y, -1, t), incy=-1, A=pa,
           lda=lda)
    assert_close(d.get_mat(pa, m, n, t, lda), a + alpha * np.outer(x, np.conj(y) if conj else y), t, 2)
    assert np.isnan(d.raw(pa, lda * n, t).reshape(n, lda)[:, m:].real).all()    # padding rows untouched


def triangular(d: Dev, n: int, t: int, lower: bool, unit: bool) -> tuple[np.ndarray, np.ndarray]:
    """(stored matrix with NaN in the unreferenced triangle [and diagonal], the matrix it means)."""
    full = d.rand((n, n), t, scale=0.3) + np.eye(n) * (n if not unit else 0)
    keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    if unit:
        keep &= ~np.eye(n, dtype=bool)
    meant = np.where(keep, full, 0) + (np.eye(n) if unit else 0)
    stored = np.where(keep, full, np.nan)
    return stored, meant


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("uplo,trans,diag", list(itertools.product([LOWER, UPPER], [OP_N, OP_T, OP_C], [0, 1])))
def test_trsv(p, t, uplo, trans, diag):
    d = Dev()
    n, lda = 11, 12
    stored, meant = triangular(d, n, t, uplo == LOWER, diag == 1)
    b = d.rand(n, t)
    px = d.vec(b, -1, t)
    d.call(f"cublas{p}trsv_v2", uplo=uplo, trans=trans, diag=diag, n=n, A=d.mat(stored, t, lda), lda=lda, x=px,
           incx=-1)
    assert_close(d.get_vec(px, n, -1, t), np.linalg.solve(op(meant, trans), b), t, 4 * n)


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("uplo", [LOWER, UPPER])
def test_symv(p, t, uplo):
    d = Dev()
    n = 10
    full = d.rand((n, n), t)
    sym = np.tril(full) + np.tril(full, -1).T if uplo == LOWER else np.triu(full) + np.triu(full, 1).T
    stored = np.where(np.tril(np.ones((n, n), bool)) if uplo == LOWER else np.triu(np.ones((n, n), bool)), full,
                      np.nan)
    x, y = d.rand(n, t), d.rand(n, t)
    alpha, beta = pick(t, 2 - 1j), pick(t, 0.5j + 0.25)
    py = d.vec(y, 2, t)
    d.call(f"cublas{p}symv_v2", uplo=uplo, n=n, alpha=host(alpha, t), A=d.mat(sym * 0 + stored, t, n + 1),
           lda=n + 1, x=d.vec(x, 1, t), incx=1, beta=host(beta, t), y=py, incy=2)
    assert_close(d.get_vec(py, n, 2, t), alpha * sym @ x + beta * y, t, n)


# ================================================================================================ Level 3
def gemm_ref(a, b, c, transa, transb, alpha, beta):
    prod = op(a, transa) @ op(b, transb)
    return alpha * prod + (beta * c if beta != 0 else 0)


@pytest.mark.parametrize("name,t", [("cublasSgemm_v2", S), ("cublasDgemm_v2", D), ("cublasCgemm_v2", C),
                                    ("cublasZgemm_v2", Z), ("cublasHgemm", H)])
@pytest.mark.parametrize("transa,transb", list(itertools.product([OP_N, OP_T, OP_C], repeat=2)))
def test_gemm(name, t, transa, transb):
    d = Dev()
    m, n, k = 9, 7, 12
    a = d.rand((m, k) if transa == OP_N else (k, m), t)
    b = d.rand((k, n) if transb == OP_N else (n, k), t)
    c = d.rand((m, n), t)
    alpha, beta = pick(t, 1.5 - 0.5j), pick(t, -0.75 + 0.25j)
    lda, ldb, ldc = a.shape[0] + 2, b.shape[0] + 1, m + 3
    pa, pb, pc = d.mat(a, t, lda), d.mat(b, t, ldb), d.mat(c, t, ldc)
    d.call(name, transa=transa, transb=transb, m=m, n=n, k=k, alpha=host(alpha, t), A=pa, lda=lda, B=pb, ldb=ldb,
           beta=host(beta, t), C=pc, ldc=ldc)
    assert_close(d.get_mat(pc, m, n, t, ldc), gemm_ref(a, b, c, transa, transb, alpha, beta), t, k,
                 acc=S if t == H else None)
    assert np.isnan(d.raw(pc, ldc * n, t).reshape(n, ldc)[:, m:].real).all()      # padding of C untouched


@pytest.mark.parametrize("name,t", [("cublasSgemm_v2", S), ("cublasZgemm_v2", Z), ("cublasHgemm", H)])
@pytest.mark.parametrize("mode", ["host", "device"])
def test_gemm_beta_zero_ignores_nan_c_and_alpha_zero_ignores_a_b(name, t, mode):
    d = Dev()
    m, n, k = 5, 6, 4
    a, b = d.rand((m, k), t), d.rand((k, n), t)
    pc = d.mat(np.full((m, n), np.nan), t)
    one, zero, two = scalars(d, mode, t, 1, 0, 2)
    d.call(name, transa=OP_N, transb=OP_N, m=m, n=n, k=k, alpha=one, A=d.mat(a, t), lda=m, B=d.mat(b, t), ldb=k,
           beta=zero, C=pc, ldc=m)
    ref = a @ b
    assert_close(d.get_mat(pc, m, n, t), ref, t, k, acc=S if t == H else None)
    d.call(name, transa=OP_N, transb=OP_N, m=m, n=n, k=k, alpha=zero, A=NAN_PTR, lda=m, B=NAN_PTR, ldb=k,
           beta=two, C=pc, ldc=m)
    assert_close(d.get_mat(pc, m, n, t), 2 * ref, t, k, acc=S if t == H else None)
    d.call(name, transa=OP_N, transb=OP_N, m=m, n=n, k=0, alpha=one, A=NAN_PTR, lda=m, B=NAN_PTR, ldb=1,
           beta=zero, C=pc, ldc=m)                               # k == 0: C = beta C = 0
    assert not d.get_mat(pc, m, n, t).any()


# (A/B type, C type, compute type name): the GEMM_TYPES rows pyvgpu supports
EX_COMBOS = [(H, H, "CUBLAS_COMPUTE_16F"), (H, H, "CUBLAS_COMPUTE_32F"), (H, S, "CUBLAS_COMPUTE_32F"),
             (BF, BF, "CUBLAS_COMPUTE_32F"), (BF, S, "CUBLAS_COMPUTE_32F_FAST_16BF"), (S, S, "CUBLAS_COMPUTE_32F"),
             (S, S, "CUBLAS_COMPUTE_32F_FAST_TF32"), (D, D, "CUBLAS_COMPUTE_64F"), (C, C, "CUBLAS_COMPUTE_32F"),
             (Z, Z, "CUBLAS_COMPUTE_64F_PEDANTIC")]


def scale_type(abt: int, ct: int, compute: str) -> int:
    return spec.gemm_scale_type(abt, abt, ct, spec.COMPUTE[compute])


@pytest.mark.parametrize("abt,ct,compute", EX_COMBOS)
def test_gemm_ex(abt, ct, compute):
    d = Dev()
    m, n, k = 8, 10, 16
    a, b, c = d.rand((k, m), abt), d.rand((k, n), abt), d.rand((m, n), ct)
    st = scale_type(abt, ct, compute)
    alpha, beta = pick(st, 0.5 + 1j), pick(st, 2 - 1j)
    pc = d.mat(c, ct, m + 1)
    d.call("cublasGemmEx", transa=OP_T, transb=OP_N, m=m, n=n, k=k, alpha=host(alpha, st), A=d.mat(a, abt),
           Atype=abt, lda=k, B=d.mat(b, abt), Btype=abt, ldb=k, beta=host(beta, st), C=pc, Ctype=ct, ldc=m + 1,
           computeType=spec.COMPUTE[compute], algo=-1)
    acc = D if "64F" in compute else S
    assert_close(d.get_mat(pc, m, n, ct, m + 1), alpha * a.T @ b + beta * c, ct, k, acc=acc)


def test_sgemm_ex_fp16_inputs_fp32_output():
    d = Dev()
    m, n, k = 4, 3, 5
    a, b = d.rand((m, k), H), d.rand((k, n), H)
    pc = d.mat(np.zeros((m, n)), S)
    d.call("cublasSgemmEx", transa=OP_N, transb=OP_N, m=m, n=n, k=k, alpha=host(1, S), A=d.mat(a, H), Atype=H,
           lda=m, B=d.mat(b, H), Btype=H, ldb=k, beta=host(0, S), C=pc, Ctype=S, ldc=m)
    assert_close(d.get_mat(pc, m, n, S), a @ b, S, k)


@pytest.mark.parametrize("abt,ct,compute", [(H, H, "CUBLAS_COMPUTE_64F"), (S, H, "CUBLAS_COMPUTE_32F"),
                                            (BF, BF, "CUBLAS_COMPUTE_16F"), (S, S, "CUBLAS_COMPUTE_32I"),
                                            (D, D, "CUBLAS_COMPUTE_32F")])
def test_gemm_ex_unsupported_combination(abt, ct, compute):
    d = Dev()
    with pytest.raises(BlasError) as err:
        d.call("cublasGemmEx", transa=OP_N, transb=OP_N, m=2, n=2, k=2, alpha=host(1, S), A=NAN_PTR, Atype=abt,
               lda=2, B=NAN_PTR, Btype=abt, ldb=2, beta=host(0, S), C=NAN_PTR, Ctype=ct, ldc=2,
               computeType=spec.COMPUTE[compute], algo=-1)
    assert err.value.status == spec.NOT_SUPPORTED


@pytest.mark.parametrize("name,t", [("cublasSgemmStridedBatched", S), ("cublasDgemmStridedBatched", D),
                                    ("cublasCgemmStridedBatched", C), ("cublasZgemmStridedBatched", Z),
                                    ("cublasHgemmStridedBatched", H)])
def test_gemm_strided_batched(name, t):
    d = Dev()
    m, n, k, batch = 6, 5, 7, 3
    a = d.rand((1, m, k), t)                    # strideA = 0: one A for every batch entry
    b, c = d.rand((batch, n, k), t), d.rand((batch, m, n), t)
    sb, sc = n * k + 4, m * n + 9
    pa, pb, pc = d.mat(a, t), d.mat(b, t, batch_stride=sb), d.mat(c, t, batch_stride=sc)
    alpha, beta = pick(t, 1 - 1j), pick(t, 0.5 + 0.5j)
    d.call(name, transa=OP_N, transb=OP_T, m=m, n=n, k=k, alpha=host(alpha, t), A=pa, lda=m, strideA=0, B=pb,
           ldb=n, strideB=sb, beta=host(beta, t), C=pc, ldc=m, strideC=sc, batchCount=batch)
    raw = d.raw(pc, (batch - 1) * sc + m * n, t)
    for i in range(batch):
        got = d.decode(raw[i * sc:i * sc + m * n].reshape(n, m).T, t)
        assert_close(got, alpha * a[0] @ b[i].T + beta * c[i], t, k, acc=S if t == H else None)
        if i < batch - 1:
            assert np.isnan(raw[i * sc + m * n:(i + 1) * sc].real).all()        # gaps between entries untouched


@pytest.mark.parametrize("abt,ct,compute", [(H, H, "CUBLAS_COMPUTE_32F"), (BF, S, "CUBLAS_COMPUTE_32F"),
                                            (S, S, "CUBLAS_COMPUTE_32F_PEDANTIC")])
def test_gemm_strided_batched_ex(abt, ct, compute):
    d = Dev()
    m, n, k, batch = 4, 6, 8, 4
    a, b, c = d.rand((batch, m, k), abt), d.rand((batch, k, n), abt), d.rand((batch, m, n), ct)
    st = scale_type(abt, ct, compute)
    pc = d.mat(c, ct)
    d.call("cublasGemmStridedBatchedEx", transa=OP_N, transb=OP_N, m=m, n=n, k=k, alpha=host(2, st),
           A=d.mat(a, abt), Atype=abt, lda=m, strideA=m * k, B=d.mat(b, abt), Btype=abt, ldb=k, strideB=k * n,
           beta=host(-1, st), C=pc, Ctype=ct, ldc=m, strideC=m * n, batchCount=batch,
           computeType=spec.COMPUTE[compute], algo=-1)
    got = d.decode(d.raw(pc, batch * m * n, ct).reshape(batch, n, m).transpose(0, 2, 1), ct)
    assert_close(got, 2 * a @ b - c, ct, k, acc=S)


@pytest.mark.parametrize("name,t", [("cublasSgemmBatched", S), ("cublasDgemmBatched", D),
                                    ("cublasCgemmBatched", C), ("cublasZgemmBatched", Z), ("cublasHgemmBatched", H)])
def test_gemm_batched(name, t):
    d = Dev()
    m, n, k, batch = 5, 4, 6, 3
    a, b, c = d.rand((batch, k, m), t), d.rand((batch, k, n), t), d.rand((batch, m, n), t)
    pas = [d.mat(a[i], t) for i in range(batch)]
    pbs = [d.mat(b[i], t) for i in range(batch)]
    pcs = [d.mat(c[i], t) for i in range(batch)]
    arrays = [d.put(np.array(p, dtype=np.uint64)) for p in (pas, pbs, pcs)]
    alpha, beta = pick(t, -1 + 0.5j), pick(t, 0.25)
    d.call(name, transa=OP_C, transb=OP_N, m=m, n=n, k=k, alpha=host(alpha, t), Aarray=arrays[0], lda=k,
           Barray=arrays[1], ldb=k, beta=host(beta, t), Carray=arrays[2], ldc=m, batchCount=batch)
    for i in range(batch):
        assert_close(d.get_mat(pcs[i], m, n, t), alpha * a[i].conj().T @ b[i] + beta * c[i], t, k,
                     acc=S if t == H else None)


def test_gemm_batched_ex_bf16():
    d = Dev()
    m, n, k, batch = 3, 3, 4, 2
    a, b = d.rand((batch, m, k), BF), d.rand((batch, k, n), BF)
    pcs = [d.mat(np.full((m, n), np.nan), BF) for _ in range(batch)]
    arr = [d.put(np.array([d.mat(x[i], BF) for i in range(batch)], np.uint64)) for x in (a, b)]
    d.call("cublasGemmBatchedEx", transa=OP_N, transb=OP_N, m=m, n=n, k=k, alpha=host(1, S), Aarray=arr[0],
           Atype=BF, lda=m, Barray=arr[1], Btype=BF, ldb=k, beta=host(0, S), Carray=d.put(np.array(pcs, np.uint64)),
           Ctype=BF, ldc=m, batchCount=batch, computeType=spec.COMPUTE["CUBLAS_COMPUTE_32F"], algo=-1)
    for i in range(batch):
        assert_close(d.get_mat(pcs[i], m, n, BF), a[i] @ b[i], BF, k, acc=S)


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("transa,transb", [(OP_N, OP_N), (OP_T, OP_C), (OP_C, OP_N)])
def test_geam(p, t, transa, transb):
    d = Dev()
    m, n = 6, 4
    a = d.rand((m, n) if transa == OP_N else (n, m), t)
    b = d.rand((m, n) if transb == OP_N else (n, m), t)
    alpha, beta = pick(t, 2 + 1j), pick(t, -0.5)
    pc = d.mat(np.zeros((m, n)), t, m + 2)
    d.call(f"cublas{p}geam", transa=transa, transb=transb, m=m, n=n, alpha=host(alpha, t), A=d.mat(a, t),
           lda=a.shape[0], beta=host(beta, t), B=d.mat(b, t), ldb=b.shape[0], C=pc, ldc=m + 2)
    assert_close(d.get_mat(pc, m, n, t, m + 2), alpha * op(a, transa) + beta * op(b, transb), t, 2)


@pytest.mark.parametrize("p,t", TYPES)
def test_geam_in_place_and_zero_scalars(p, t):
    d = Dev()
    m, n = 5, 3
    a, b = d.rand((m, n), t), d.rand((m, n), t)
    pa = d.mat(a, t)
    d.call(f"cublas{p}geam", transa=OP_N, transb=OP_N, m=m, n=n, alpha=host(3, t), A=pa, lda=m, beta=host(0, t),
           B=NAN_PTR, ldb=m, C=pa, ldc=m)                     # C = 3 A in place; B not read
    assert_close(d.get_mat(pa, m, n, t), 3 * a, t)
    pb = d.mat(b, t)
    d.call(f"cublas{p}geam", transa=OP_N, transb=OP_N, m=m, n=n, alpha=host(0, t), A=NAN_PTR, lda=m,
           beta=host(1, t), B=pb, ldb=m, C=pa, ldc=m)         # C = B; A not read
    assert np.array_equal(d.get_mat(pa, m, n, t), b)
    with pytest.raises(BlasError) as err:                     # in place on A with op(A) = A^T is refused
        d.call(f"cublas{p}geam", transa=OP_T, transb=OP_N, m=m, n=m, alpha=host(1, t), A=pa, lda=m,
               beta=host(1, t), B=pb, ldb=m, C=pa, ldc=m)
    assert err.value.status == spec.INVALID_VALUE


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("mode,incx", [(LEFT, 1), (RIGHT, -2), (LEFT, 0)])
def test_dgmm(p, t, mode, incx):
    d = Dev()
    m, n = 7, 5
    a = d.rand((m, n), t)
    x = d.rand(m if mode == LEFT else n, t)
    if incx == 0:
        x[:] = x[0]
    pc = d.mat(np.zeros((m, n)), t)
    d.call(f"cublas{p}dgmm", mode=mode, m=m, n=n, A=d.mat(a, t, m + 1), lda=m + 1,
           x=d.vec(x if incx else x[:1], incx or 1, t), incx=incx, C=pc, ldc=m)
    ref = np.diag(x) @ a if mode == LEFT else a @ np.diag(x)
    assert_close(d.get_mat(pc, m, n, t), ref, t)


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("side,uplo,trans,diag",
                         list(itertools.product([LEFT, RIGHT], [LOWER, UPPER], [OP_N, OP_T, OP_C], [0, 1])))
def test_trsm(p, t, side, uplo, trans, diag):
    d = Dev()
    m, n = 9, 6
    size = m if side == LEFT else n
    stored, meant = triangular(d, size, t, uplo == LOWER, diag == 1)
    b = d.rand((m, n), t)
    alpha = pick(t, 1.5 - 0.5j)
    pb = d.mat(b, t, m + 1)
    d.call(f"cublas{p}trsm_v2", side=side, uplo=uplo, trans=trans, diag=diag, m=m, n=n, alpha=host(alpha, t),
           A=d.mat(stored, t, size + 2), lda=size + 2, B=pb, ldb=m + 1)
    opa = op(meant, trans)
    ref = np.linalg.solve(opa, alpha * b) if side == LEFT else np.linalg.solve(opa.T, (alpha * b).T).T
    assert_close(d.get_mat(pb, m, n, t, m + 1), ref, t, 4 * size)


def test_trsm_blocked_large_and_alpha_zero():
    """n above the substitution block (64): the blocked update path; alpha == 0 zeroes B without reading A."""
    d = Dev()
    n, r = 150, 3
    stored, meant = triangular(d, n, D, True, False)
    b = d.rand((n, r), D)
    pb = d.mat(b, D)
    d.call("cublasDtrsm_v2", side=LEFT, uplo=LOWER, trans=OP_N, diag=0, m=n, n=r, alpha=host(1, D),
           A=d.mat(stored, D), lda=n, B=pb, ldb=n)
    assert_close(d.get_mat(pb, n, r, D), np.linalg.solve(meant, b), D, 4 * n)
    d.call("cublasDtrsm_v2", side=LEFT, uplo=LOWER, trans=OP_N, diag=0, m=n, n=r, alpha=host(0, D),
           A=NAN_PTR, lda=n, B=pb, ldb=n)
    assert not d.get_mat(pb, n, r, D).any()


@pytest.mark.parametrize("p,t", TYPES)
@pytest.mark.parametrize("uplo,trans", list(itertools.product([LOWER, UPPER], [OP_N, OP_T])))
def test_syrk(p, t, uplo, trans):
    d = Dev()
    n, k = 7, 4
    a = d.rand((n, k) if trans == OP_N else (k, n), t)
    c = d.rand((n, n), t)
    keep = np.tril(np.ones((n, n), bool)) if uplo == LOWER else np.triu(np.ones((n, n), bool))
    stored_c = np.where(keep, c, np.nan)                     # the other triangle must stay as it was
    alpha, beta = pick(t, 0.5 - 1j), pick(t, 2)
    pc = d.mat(stored_c, t, n + 1)
    d.call(f"cublas{p}syrk_v2", uplo=uplo, trans=trans, n=n, k=k, alpha=host(alpha, t), A=d.mat(a, t),
           lda=a.shape[0], beta=host(beta, t), C=pc, ldc=n + 1)
    opa = a if trans == OP_N else a.T
    got = d.get_mat(pc, n, n, t, n + 1)
    assert_close(got[keep], (alpha * opa @ opa.T + beta * c)[keep], t, k)
    assert np.isnan(got[~keep].real).all()


def test_csyrk_refuses_conjugate_transpose():
    d = Dev()
    with pytest.raises(BlasError) as err:
        d.call("cublasCsyrk_v2", uplo=LOWER, trans=OP_C, n=2, k=2, alpha=host(1, C), A=NAN_PTR, lda=2,
               beta=host(0, C), C=NAN_PTR, ldc=2)
    assert err.value.status == spec.INVALID_VALUE


# ================================================================================================ errors
def gemm_args(**over):
    base = dict(transa=OP_N, transb=OP_N, m=4, n=4, k=4, alpha=host(1, S), A=NAN_PTR, lda=4, B=NAN_PTR, ldb=4,
                beta=host(0, S), C=NAN_PTR, ldc=4)
    return {**base, **over}


@pytest.mark.parametrize("over", [dict(m=-1), dict(n=-1), dict(k=-1), dict(lda=3), dict(ldb=3), dict(ldc=3),
                                  dict(transa=OP_T, lda=3, k=5), dict(transa=3), dict(transb=7),
                                  dict(alpha=0), dict(beta=0), dict(m=0, ldc=0)])
def test_gemm_invalid_values(over):
    with pytest.raises(BlasError) as err:
        Dev().call("cublasSgemm_v2", **gemm_args(**over))
    assert err.value.status == spec.INVALID_VALUE


def test_gemm_lda_small_but_valid_when_transposed():
    """lda >= max(1, k) is enough for op(A) = A^T with m > k (no error, and the right answer)."""
    d = Dev()
    m, k = 6, 2
    a, b = d.rand((k, m), S), d.rand((k, 3), S)
    pc = d.mat(np.zeros((m, 3)), S)
    d.call("cublasSgemm_v2", transa=OP_T, transb=OP_N, m=m, n=3, k=k, alpha=host(1, S), A=d.mat(a, S), lda=k,
           B=d.mat(b, S), ldb=k, beta=host(0, S), C=pc, ldc=m)
    assert_close(d.get_mat(pc, m, 3, S), a.T @ b, S, k)


@pytest.mark.parametrize("entry,args", [
    ("cublasSgemv_v2", dict(trans=OP_N, m=3, n=3, alpha=host(1, S), A=NAN_PTR, lda=2, x=NAN_PTR, incx=1,
                            beta=host(0, S), y=NAN_PTR, incy=1)),
    ("cublasSgemv_v2", dict(trans=OP_N, m=3, n=3, alpha=host(1, S), A=NAN_PTR, lda=3, x=NAN_PTR, incx=0,
                            beta=host(0, S), y=NAN_PTR, incy=1)),
    ("cublasSger_v2", dict(m=3, n=-2, alpha=host(1, S), x=NAN_PTR, incx=1, y=NAN_PTR, incy=1, A=NAN_PTR, lda=3)),
    ("cublasStrsv_v2", dict(uplo=2, trans=OP_N, diag=0, n=3, A=NAN_PTR, lda=3, x=NAN_PTR, incx=1)),
    ("cublasStrsv_v2", dict(uplo=0, trans=OP_N, diag=2, n=3, A=NAN_PTR, lda=3, x=NAN_PTR, incx=1)),
    ("cublasSsymv_v2", dict(uplo=0, n=3, alpha=host(1, S), A=NAN_PTR, lda=3, x=NAN_PTR, incx=1, beta=host(0, S),
                            y=NAN_PTR, incy=0)),
    ("cublasSdgmm", dict(mode=2, m=3, n=3, A=NAN_PTR, lda=3, x=NAN_PTR, incx=1, C=NAN_PTR, ldc=3)),
    ("cublasStrsm_v2", dict(side=RIGHT, uplo=0, trans=OP_N, diag=0, m=5, n=3, alpha=host(1, S), A=NAN_PTR, lda=2,
                            B=NAN_PTR, ldb=5)),
    ("cublasSsyrk_v2", dict(uplo=0, trans=OP_T, n=3, k=4, alpha=host(1, S), A=NAN_PTR, lda=3, beta=host(0, S),
                            C=NAN_PTR, ldc=3)),
    ("cublasSdot_v2", dict(n=3, x=NAN_PTR, incx=1, y=NAN_PTR, incy=1, result=0)),
    ("cublasSgemmStridedBatched", dict(gemm_args(), strideA=0, strideB=0, strideC=16, batchCount=-1)),
])
def test_documented_invalid_values(entry, args):
    with pytest.raises(BlasError) as err:
        Dev().call(entry, **args)
    assert err.value.status == spec.INVALID_VALUE


def test_operand_outside_allocations_is_illegal_address():
    d = Dev()
    small = d.mat(np.zeros((4, 3)), S)                       # 12 floats; ldc = 5 needs 14
    with pytest.raises(CudaError) as err:
        d.call("cublasSgemm_v2", **gemm_args(m=4, n=3, k=0, C=small, ldc=5, beta=host(1.5, S)))
    assert err.value.code == spec_cuda("cudaErrorIllegalAddress")
    with pytest.raises(CudaError) as err:                    # a device-mode alpha nowhere
        d.call("cublasSaxpy_v2", n=2, alpha=NAN_PTR, x=small, incx=1, y=small, incy=1)
    assert err.value.code == spec_cuda("cudaErrorIllegalAddress")


def test_misaligned_operand():
    d = Dev()
    p = d.mat(np.zeros((4, 4)), S)
    with pytest.raises(CudaError) as err:
        d.call("cublasSscal_v2", n=2, alpha=host(2, S), x=p + 2, incx=1)
    assert err.value.code == spec_cuda("cudaErrorMisalignedAddress")


def test_work_budget():
    d = Dev()
    with pytest.raises(BlasError) as err:
        args = gemm_args(m=64, n=64, k=64, lda=64, ldb=64, ldc=64)
        blas.execute("BLAS_GEMM", d.mem, {**spec.ENTRY["cublasSgemm_v2"].binding(), **args},
                     limits=BlasLimits(max_work=64 ** 3 - 1))
    assert err.value.status == spec.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"]


def test_malformed_calls():
    d = Dev()
    with pytest.raises(BlasError):
        blas.execute("BLAS_NOPE", d.mem, {})
    with pytest.raises(BlasError) as err:
        blas.execute("BLAS_GEMM", d.mem, gemm_args())            # type arguments missing
    assert err.value.status == spec.INVALID_VALUE
    with pytest.raises(BlasError):
        d.call("cublasSgemm_v2", **gemm_args(m="4"))
    with pytest.raises(BlasError):                              # wrong-size host scalar
        d.call("cublasSscal_v2", n=1, alpha=b"\0" * 8, x=d.vec(np.ones(1), 1, S), incx=1)


def spec_cuda(name: str) -> int:
    from pyvgpu.protocol import ERROR_CODES
    return ERROR_CODES[name]


# ================================================================================================ properties
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(0, 9), n=st.integers(0, 9), k=st.integers(0, 9), transa=st.sampled_from([OP_N, OP_T, OP_C]),
       transb=st.sampled_from([OP_N, OP_T, OP_C]), pads=st.tuples(*[st.integers(0, 3)] * 3),
       batch=st.integers(1, 3), gap=st.integers(0, 5), t=st.sampled_from([S, Z]), beta0=st.booleans())
def test_gemm_strided_batched_property(m, n, k, transa, transb, pads, batch, gap, t, beta0):
    d = Dev(seed=m * 100 + n * 10 + k)
    ar, ac = (m, k) if transa == OP_N else (k, m)
    br, bc = (k, n) if transb == OP_N else (n, k)
    lda, ldb, ldc = max(ar, 1) + pads[0], max(br, 1) + pads[1], max(m, 1) + pads[2]
    a, b, c = d.rand((batch, ar, ac), t), d.rand((batch, br, bc), t), d.rand((batch, m, n), t)
    sa, sb, sc = lda * ac + gap, ldb * bc + gap, ldc * n + gap
    pa, pb = d.mat(a, t, lda, sa), d.mat(b, t, ldb, sb)
    pc = d.mat(np.full(c.shape, np.nan) if beta0 else c, t, ldc, sc)
    alpha, beta = pick(t, 0.5 - 2j), 0 if beta0 else pick(t, 1.5 + 0.5j)
    d.call(f"cublas{'S' if t == S else 'Z'}gemmStridedBatched", transa=transa, transb=transb, m=m, n=n, k=k,
           alpha=host(alpha, t), A=pa, lda=lda, strideA=sa, B=pb, ldb=ldb, strideB=sb, beta=host(beta, t), C=pc,
           ldc=ldc, strideC=sc, batchCount=batch)
    for i in range(batch):
        if m and n:
            got = d.decode(d.raw(pc + i * sc * (4 if t == S else 16), ldc * n, t).reshape(n, ldc).T[:m], t)
            ref = alpha * op(a[i], transa) @ op(b[i], transb) + (beta * c[i] if not beta0 else 0)
            assert_close(got, ref, t, max(k, 1))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 20), incx=st.integers(-3, 3).filter(bool), incy=st.integers(-3, 3).filter(bool),
       t=st.sampled_from([S, D, C, Z]))
def test_level1_increments_property(n, incx, incy, t):
    d = Dev(seed=n)
    p = {S: "S", D: "D", C: "C", Z: "Z"}[t]
    x, y = d.rand(n, t), d.rand(n, t)
    px, py = d.vec(x, incx, t), d.vec(y, incy, t)
    d.call(f"cublas{p}axpy_v2", n=n, alpha=host(2, t), x=px, incx=incx, y=py, incy=incy)
    y2 = d.get_vec(py, n, incy, t)
    assert_close(y2, 2 * x + y, t, 2)
    dot = "dot" if t in (S, D) else "dotc"
    got = result_value(d.call(f"cublas{p}{dot}_v2", n=n, x=px, incx=incx, y=py, incy=incy, result=None), t)
    assert_close(got, np.sum(np.conj(x) * y2), t, max(n, 1))
    d.call(f"cublas{p}swap_v2", n=n, x=px, incx=incx, y=py, incy=incy)
    assert np.array_equal(d.get_vec(px, n, incx, t), y2) and np.array_equal(d.get_vec(py, n, incy, t), x)


def test_bf16_rounding_is_nearest_even():
    from pyvgpu_daemon.blas.numeric import bf16_to_f32, f32_to_bf16
    values = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, np.inf, -np.inf, 3.0e38], dtype=np.float32)
    bits = f32_to_bf16(values)
    back = bf16_to_f32(bits)
    assert back[0] == 1.0 and back[1] == 1.0                 # tie -> even
    assert back[2] == 1 + 4 * 2 ** -8                        # tie -> even (up)
    assert back[3] == -2.5 and np.isinf(back[4]) and back[5] == -np.inf
    assert np.isnan(bf16_to_f32(f32_to_bf16(np.array([np.nan], np.float32))))[0]
