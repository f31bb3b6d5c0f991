"""The emulated GPU's cuBLASLt matmul (daemon blas/lt.py) against float64/complex128 host references.

Type combinations PyTorch uses (fp32; fp16 and bf16 with fp32 compute, also into fp32 D; fp16 compute) and the wide
ones (fp64, complex), transposes, column- and row-major layouts, strided batches with gaps, every epilogue of the
table (bias, ReLU/GELU with their auxiliary outputs, DReLU/DGELU with bias gradients, BGRADA/BGRADB), host and
device pointer mode, in place (C == D) and out of place: drawn by hypothesis (modest examples), plus the
documented corner cases (beta == 0 over NaN, alpha == 0 over unreadable A/B, refusals by status, faults).
Tolerance: lt_harness.assert_close, 8 x (output rounding + (k + 8) roundings of the accumulation type) x
max(1, |reference|).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from blas_harness import BF, C, D, H, S, Dev, host
from lt_harness import C32F, COL, EPI, ROW, TYPE_SETS, Problem, acc_type, assert_close
from pyvgpu import cublas_spec as blas
from pyvgpu import cublaslt_spec as spec
from pyvgpu_daemon.blas import BlasError, BlasLimits, lt
from pyvgpu_daemon.errors import CudaError

NOWHERE = 0x1234_5000      # an address no allocation holds: an operand that must not be read
REAL_EPILOGUES = sorted(spec.EPILOGUE)


def run(p: Problem, dev: Dev | None = None, **over) -> tuple[Dev, dict]:
    dev = dev or Dev(p.seed)
    args = {**p.place(dev), **p.scalars(dev), **over}
    lt.execute(dev.mem, args)
    return dev, args


def check_result(p: Problem, dev: Dev) -> None:
    ref = p.reference()
    acc = acc_type(p)
    k = p.tolerance_k()
    assert_close(p.mats["D"].read(dev), ref["D"], p.cd, k, acc)
    if "bias" in ref:
        assert_close(read_bias(p, dev), ref["bias"], p.bias_t, max(p.k, p.n) + 8, acc)
    if "aux" in ref:
        if p.epi.act == "relu":
            assert np.array_equal(read_mask(p, dev), ref["aux"])
        else:
            assert_close(read_gelu_aux(p, dev), ref["aux"], p.cd, k, acc)


def read_bias(p: Problem, dev: Dev) -> np.ndarray:
    b, length = p.bias.shape
    stride = length + 1 if b > 1 else 0
    raw = dev.decode(dev.raw(p.ptrs["bias"], (b - 1) * stride + length, p.bias_t), p.bias_t)
    return np.stack([raw[i * stride:i * stride + length] for i in range(b)])


def read_mask(p: Problem, dev: Dev) -> np.ndarray:
    b, m, n = p.batch, p.m, p.n
    stride = p.aux_ld * n if b > 1 else 0
    raw = np.frombuffer(bytes(dev.mem.read(p.ptrs["aux"], max(stride * b, p.aux_ld * n) // 8)), dtype=np.uint8)
    out = np.zeros((b, m, n), dtype=bool)
    for i in range(b):
        for j in range(n):
            start = (i * stride + j * p.aux_ld) // 8
            out[i, :, j] = np.unpackbits(raw[start:start + (m + 7) // 8], bitorder="little")[:m].astype(bool)
    return out


def read_gelu_aux(p: Problem, dev: Dev) -> np.ndarray:
    b, m, n = p.batch, p.m, p.n
    stride = p.aux_ld * n if b > 1 else 0
    raw = dev.decode(dev.raw(p.ptrs["aux"], max(stride * b, p.aux_ld * n), p.cd), p.cd)
    return np.stack([raw[i * stride:i * stride + p.aux_ld * n].reshape(n, p.aux_ld).T[:m] for i in range(b)])


# ================================================================================================ drawn problems
@st.composite
def problems(draw) -> Problem:
    ab, cd, compute, scale = draw(st.sampled_from(TYPE_SETS))
    complex_ = cd == C
    epilogue = EPI["CUBLASLT_EPILOGUE_DEFAULT"] if complex_ else draw(st.sampled_from(REAL_EPILOGUES))
    ops = [0, 1, 2] if complex_ else [0, 1]
    bgrad = spec.epi_bgrad(epilogue)          # NVIDIA's rules: BGRADA with A as stored, BGRADB with B transposed
    return Problem(ab, cd, compute, scale, m=draw(st.integers(1, 9)), n=draw(st.integers(1, 9)),
                   k=draw(st.integers(0, 9)), batch=draw(st.integers(1, 3)),
                   transa=0 if bgrad == 1 else draw(st.sampled_from(ops)),
                   transb=1 if bgrad == 2 else draw(st.sampled_from(ops)),
                   orders=tuple(draw(st.sampled_from([COL, ROW])) for _ in range(3)), epilogue=epilogue,
                   alpha=draw(st.sampled_from([1.0, -0.75 + 0.5j, 2.0])),
                   beta=draw(st.sampled_from([0.0, 1.0, 0.5 - 0.25j])), pmode=draw(st.sampled_from([0, 1])),
                   in_place=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 16)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_matmul_matches_float64_reference(p):
    if p.epilogue != EPI["CUBLASLT_EPILOGUE_DEFAULT"] and p.orders[2] == ROW and spec.epi_aux(p.epilogue):
        p.orders = (*p.orders[:2], COL)       # auxiliary matrices are column-major: keep D alike for clarity
    dev, _ = run(p)
    check_result(p, dev)


# ================================================================================================ each epilogue
@pytest.mark.parametrize("name", sorted(EPI, key=EPI.get))
@pytest.mark.parametrize("types", [(S, S, C32F, S), (H, H, C32F, S), (BF, BF, C32F, S)], ids=["fp32", "fp16", "bf16"])
def test_every_epilogue_in_the_framework_types(name, types):
    p = Problem(*types, m=13, n=6, k=5, batch=2, epilogue=EPI[name], beta=0.5, in_place=False, seed=3,
                transb=int(spec.epi_bgrad(EPI[name]) == 2))
    dev, _ = run(p)
    check_result(p, dev)


def test_bias_of_a_16_bit_type_under_a_32_bit_d():
    p = Problem(BF, S, C32F, S, m=7, n=4, k=3, epilogue=EPI["CUBLASLT_EPILOGUE_GELU_BIAS"], bias_type=BF)
    dev, _ = run(p)
    check_result(p, dev)


def test_relu_mask_padding_bytes_are_kept():
    p = Problem(S, S, C32F, S, m=9, n=3, k=4, epilogue=EPI["CUBLASLT_EPILOGUE_RELU_AUX"])
    dev, _ = run(p)
    check_result(p, dev)
    raw = np.frombuffer(bytes(dev.mem.read(p.ptrs["aux"], p.aux_ld * p.n // 8)), dtype=np.uint8)
    for j in range(p.n):
        col = raw[j * p.aux_ld // 8:(j + 1) * p.aux_ld // 8]
        assert np.all(col[2:] == 0xA5)            # only ceil(9 / 8) = 2 bytes of a column are the mask's


# ================================================================================================ corner cases
def test_beta_zero_does_not_read_c_and_alpha_zero_does_not_read_a_b():
    p = Problem(S, S, C32F, S, m=4, n=3, k=2, in_place=False)
    dev = Dev()
    args = {**p.place(dev), **p.scalars(dev)}
    nan_c = p.mats["C"]
    dev.mem.write(nan_c.ptr, np.full(nan_c.buffer(dev).size, np.nan, np.float32).tobytes())
    lt.execute(dev.mem, args)
    assert np.isfinite(p.mats["D"].read(dev)).all()
    lt.execute(dev.mem, {**args, "A": NOWHERE, "B": NOWHERE, "alpha": host(0.0, S)})
    assert np.array_equal(p.mats["D"].read(dev), np.zeros((1, 4, 3)))


def test_device_pointer_mode_scalars():
    p = Problem(S, S, C32F, S, m=3, n=3, k=3, alpha=2.0, beta=-1.0, pmode=1)
    dev, _ = run(p)
    check_result(p, dev)


@pytest.mark.parametrize("change,status", [
    ({"Arows": 5}, blas.INVALID_VALUE),                      # op(A) is not m x k
    ({"Dbatch": 2}, blas.INVALID_VALUE),                     # batch counts differ
    ({"Ald": 1}, blas.INVALID_VALUE),                        # ld below rows
    ({"Aorder": 2}, blas.NOT_SUPPORTED),                     # COL32
    ({"scale": D}, blas.NOT_SUPPORTED),                      # type/scale combination
    ({"Dtype": H}, blas.NOT_SUPPORTED),                      # D's type differs from C's
    ({"pmode": 2}, blas.NOT_SUPPORTED),                      # alpha/beta vectors
    ({"transc": 1}, blas.NOT_SUPPORTED),
    ({"epilogue": 3}, blas.NOT_SUPPORTED),                   # not an epilogue
    ({"epilogue": EPI["CUBLASLT_EPILOGUE_BIAS"]}, blas.INVALID_VALUE),          # no bias pointer
    ({"epilogue": EPI["CUBLASLT_EPILOGUE_GELU_AUX"], "aux": 0x1000}, blas.INVALID_VALUE),   # aux ld below m
    ({"epilogue": EPI["CUBLASLT_EPILOGUE_RELU_AUX"], "aux": 0x1000, "aux_ld": 64}, blas.INVALID_VALUE),
    # NVIDIA's cuBLASLt 13.1 heuristic: "BGRADA only works with non-transposed A", "BGRADB ... with transposed B"
    ({"epilogue": EPI["CUBLASLT_EPILOGUE_BGRADA"], "bias": 0x1000, "transa": 1}, blas.NOT_SUPPORTED),
    ({"epilogue": EPI["CUBLASLT_EPILOGUE_BGRADB"], "bias": 0x1000}, blas.NOT_SUPPORTED),
])
def test_refusals_by_status(change, status):
    p = Problem(S, S, C32F, S, m=4, n=4, k=4)
    dev = Dev()
    args = {**p.place(dev), **p.scalars(dev), **change}
    with pytest.raises(BlasError) as exc:
        lt.execute(dev.mem, args)
    assert exc.value.status == status
    assert spec.check({n: args[n] for n in spec.INT_NAMES}).status == status


def test_operand_outside_the_heap_is_an_illegal_address_and_work_is_bounded():
    p = Problem(S, S, C32F, S, m=4, n=4, k=4)
    dev = Dev()
    args = {**p.place(dev), **p.scalars(dev)}
    with pytest.raises(CudaError) as exc:
        lt.execute(dev.mem, {**args, "B": NOWHERE})
    assert exc.value.code == "cudaErrorIllegalAddress" or "IllegalAddress" in str(exc.value)
    with pytest.raises(BlasError) as exc2:
        lt.execute(dev.mem, args, BlasLimits(max_work=63))
    assert exc2.value.status == blas.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"]


def test_gelu_is_the_tanh_approximation():
    x = np.linspace(-4, 4, 101)
    exact = 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    assert np.abs(lt.gelu(x) - exact).max() < 1e-3 and not np.allclose(lt.gelu(x), exact, atol=1e-6)
    h = 1e-6
    assert np.allclose(lt.gelu_grad(x), (lt.gelu(x + h) - lt.gelu(x - h)) / (2 * h), atol=1e-6)


@pytest.mark.parametrize("name", ["CUBLASLT_EPILOGUE_RELU_AUX_BIAS", "CUBLASLT_EPILOGUE_DGELU_BGRAD",
                                  "CUBLASLT_EPILOGUE_BGRADB"])
def test_batches_in_chunks_give_the_same_results(monkeypatch, name):
    monkeypatch.setattr(lt, "CHUNK_BYTES", 1)          # one batch entry per chunk
    p = Problem(H, H, C32F, S, m=10, n=4, k=3, batch=3, epilogue=EPI[name], beta=0.5, in_place=False,
                transb=int(spec.epi_bgrad(EPI[name]) == 2))
    dev, _ = run(p)
    check_result(p, dev)


def test_a_huge_batch_of_shared_operands_takes_little_memory():
    """Batch stride 0 for every operand (a shared weight, a broadcast): 2**20 entries are never expanded."""
    dev = Dev()
    p = Problem(S, S, C32F, S, m=2, n=2, k=2)
    args = {**p.place(dev), **p.scalars(dev)}
    batch = 1 << 20
    args.update({x + "batch": batch for x in "ABCD"}, **{x + "stride": 0 for x in "ABCD"})
    lt.execute(dev.mem, args)
    want = p.mats["A"].values[0] @ p.mats["B"].values[0]
    assert_close(p.mats["D"].read(dev)[0], want, S, 10, S)
