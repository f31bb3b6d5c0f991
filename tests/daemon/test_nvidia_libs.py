"""NVIDIA's cuBLAS and cuBLASLt in the cuda backend (backends/nvidia_libs.py, cublas_cuda.py, cublaslt_cuda.py):
where the daemon finds them, the one clear error when it cannot, and the real libraries running over the chain
(the cuda backend on pyvgpu's libcuda.so.1 over an emulated GPU, docs/architecture.md "The chain").

Over the chain NVIDIA's libcublasLt.so.13 (the nvidia-cublas wheel of the frameworks tier) creates its handle, runs
its heuristic, and its fp32 matmul kernel, which ships PTX, runs on the emulated GPU: the result is checked against
NumPy. A problem NVIDIA refuses is answered as NVIDIA answers it (no algorithm, then CUBLAS_STATUS_NOT_SUPPORTED)
with NVIDIA's reason in the daemon's log. NVIDIA's libcublas.so.13 creates its handle; its SGEMM kernel is SASS only,
so the GEMM is an error status naming the library, never a wrong number. On a real GPU the same code runs NVIDIA's
kernels (tests/daemon/test_daemon_cuda_lt_gpu.py, tests/e2e/test_cublas*_programs.py under gpu-check).

Cost: one chain (two daemons) for the module; NVIDIA's fp32 matmul module (100 kernels of PTX) takes the emulator
~15 s to load on a loaded 2-core machine.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from harness import nvidia_chain_env, start_daemon
from pyvgpu import cublas_spec as blas
from pyvgpu import cublaslt_spec as spec
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME
from pyvgpu_daemon.backends import nvidia_libs
from pyvgpu_daemon.blas import BlasError

EPI = spec.ENUMS["cublasLtEpilogue_t"]
NOT_INITIALIZED = blas.STATUS["CUBLAS_STATUS_NOT_INITIALIZED"]


# ------------------------------------------------------------------------------------------------ finding them
class FakeFFI:
    """Records what would be loaded; files named in `fail` do not load."""

    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.fail, self.opened = fail, []

    def dlopen(self, path: str):
        self.opened.append(path)
        if path in self.fail or not (os.path.isfile(path) or "/" not in path):
            raise OSError(f"{path}: cannot open shared object file")
        return object()


def test_the_variable_is_the_only_choice_and_a_missing_file_names_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PYVGPU_CUBLASLT_LIB", str(tmp_path / "nowhere" / "libcublasLt.so.13"))
    assert nvidia_libs.candidates(nvidia_libs.CUBLASLT) == [("$PYVGPU_CUBLASLT_LIB",
                                                             str(tmp_path / "nowhere" / "libcublasLt.so.13"))]
    with pytest.raises(BlasError) as exc:
        nvidia_libs.load(FakeFFI(), nvidia_libs.CUBLASLT)
    assert exc.value.status == NOT_INITIALIZED
    assert "$PYVGPU_CUBLASLT_LIB: " in exc.value.message and "nowhere" in exc.value.message
    assert "PYVGPU_CUBLASLT_LIB" in exc.value.message.rsplit(".", 1)[-1]     # the remedy is named


def test_every_place_tried_is_named_when_nothing_loads(monkeypatch):
    monkeypatch.delenv("PYVGPU_CUBLAS_LIB", raising=False)
    places = nvidia_libs.candidates(nvidia_libs.CUBLAS)
    assert places[-1] == ("the loader's search path", "libcublas.so.13")
    assert any(w.startswith("cuda-pathfinder") for w, _ in places)
    ffi = FakeFFI(fail={p for _, p in places if p})
    with pytest.raises(BlasError) as exc:
        nvidia_libs.load(ffi, nvidia_libs.CUBLAS)
    msg = exc.value.message
    assert msg.startswith("libcublas.so.13 (NVIDIA's, CUDA 13) cannot be loaded; tried: $PYVGPU_CUBLAS_LIB unset; ")
    for where, _ in places:
        assert where.split(":")[0] in msg
    assert "Install the nvidia-cublas wheel" in msg


def test_libcublas_loads_its_own_cublaslt_first(tmp_path, monkeypatch):
    """NVIDIA's libcublas links libcublasLt.so.13: the one beside it is loaded first, so a forwarding
    libcublasLt.so.13 on LD_LIBRARY_PATH (the chain's) cannot pair with it."""
    for name in ("libcublas.so.13", "libcublasLt.so.13"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setenv("PYVGPU_CUBLAS_LIB", str(tmp_path / "libcublas.so.13"))
    ffi = FakeFFI()
    _, path = nvidia_libs.load(ffi, nvidia_libs.CUBLAS)
    assert path == str(tmp_path / "libcublas.so.13")
    assert ffi.opened == [str(tmp_path / "libcublasLt.so.13"), str(tmp_path / "libcublas.so.13")]


def test_a_load_failure_is_kept_not_retried_per_call():
    calls = []

    def make():
        calls.append(1)
        raise BlasError(NOT_INITIALIZED, "libcublasLt.so.13 (NVIDIA's, CUDA 13) cannot be loaded; tried: x")
    once = nvidia_libs.Loaded(make)
    for _ in range(3):
        with pytest.raises(BlasError) as exc:
            once.get()
        assert exc.value.status == NOT_INITIALIZED and "tried: x" in exc.value.message
    assert calls == [1]


# ------------------------------------------------------------------------------------------------ over the chain
@pytest.fixture(scope="module")
def nvidia_chain(tmp_path_factory):
    work = tmp_path_factory.mktemp("nvchain")
    d = start_daemon(work, backend="chain", env=nvidia_chain_env(work))
    c = Client.connect("127.0.0.1", d.port)
    yield d, c
    c.close()
    d.stop()


def put(c: Client, raw: bytes) -> int:
    err, p, _ = c.call("MALLOC", 0, len(raw))
    assert err == 0
    assert c.call("MEMCPY_HTOD", 0, p, 0, payload=raw)[0] == 0
    return p


def lt_args(epilogue: str, m: int, n: int, k: int, batch: int, **over) -> dict:
    args = {a.field: a.default for a in spec.DESC_WIRE}
    args.update(compute=68, scale=0, epilogue=EPI[epilogue], alpha=np.float32(1.5).tobytes(),
                beta=np.float32(0.5).tobytes(), workspace=0, workspace_size=0)
    for x, (rows, cols) in {"A": (m, k), "B": (k, n), "C": (m, n), "D": (m, n)}.items():
        args.update({x + "type": 0, x + "order": 0, x + "rows": rows, x + "cols": cols, x + "ld": rows,
                     x + "batch": batch, x + "stride": rows * cols + 4 if batch > 1 else 0})
    args.update(over)
    return args


def heuristic(c: Client, args: dict) -> list[int]:
    full = {**args, "dev": 0, "max_workspace": 0, "align_a": 256, "align_b": 256, "align_c": 256, "align_d": 256}
    err, res, _ = c.call("LT_HEURISTIC", *(full[n] for n in OP_BY_NAME["LT_HEURISTIC"].arg_names))
    assert err == 0
    return res


def matmul(c: Client, args: dict) -> int:
    return c.call("LT_MATMUL", *({"dev": 0, "stream": 0, **args}[n] for n in OP_BY_NAME["LT_MATMUL"].arg_names))[0]


def test_nvidias_cublaslt_runs_its_fp32_matmul_on_the_emulated_gpu(nvidia_chain):
    d, c = nvidia_chain
    m, n, k, batch = 37, 9, 13, 2
    args = lt_args("CUBLASLT_EPILOGUE_DEFAULT", m, n, k, batch)
    rng = np.random.default_rng(7)
    mats = {x: rng.standard_normal(args[x + "stride"] * batch).astype(np.float32) for x in "ABC"}
    ptrs = {x: put(c, mats[x].tobytes()) for x in "ABC"}
    assert heuristic(c, args)[0] == 1
    args.update(A=ptrs["A"], B=ptrs["B"], C=ptrs["C"], D=ptrs["C"])
    assert matmul(c, args) == 0, d.log_tail()
    err, _, raw = c.call("MEMCPY_DTOH", 0, ptrs["C"], mats["C"].nbytes, 0)
    assert err == 0
    got = np.frombuffer(raw, np.float32)
    for i in range(batch):
        def mat(x, rows, cols):
            return mats[x][i * args[x + "stride"]:][:rows * cols].reshape(cols, rows).T.astype(np.float64)
        want = 1.5 * mat("A", m, k) @ mat("B", k, n) + 0.5 * mat("C", m, n)
        d_i = got[i * args["Cstride"]:][:m * n].reshape(n, m).T
        np.testing.assert_allclose(d_i, want, rtol=0, atol=8 * (k + 8) * 2.0 ** -24 * max(1, np.abs(want).max()))
        gap = slice(i * args["Cstride"] + m * n, (i + 1) * args["Cstride"])
        assert np.array_equal(got[gap], mats["C"][gap])          # batch gaps untouched
    log = d.log_text()
    assert re.search(r"libcublasLt\.so\.13 loaded from \S*nvidia/cu13/lib/libcublasLt\.so\.13", log), log[-3000:]


def test_a_problem_nvidia_refuses_is_refused_with_nvidias_reason(nvidia_chain):
    """Batched DReLU bias gradients into one bias vector (batch stride 0) overlap: NVIDIA's heuristic refuses them
    (the table leaves that to the library). LT_HEURISTIC answers no algorithm, LT_MATMUL NOT_SUPPORTED, and the log
    carries cuBLASLt's own words."""
    d, c = nvidia_chain
    m, n, k = 16, 8, 8
    args = lt_args("CUBLASLT_EPILOGUE_DRELU_BGRAD", m, n, k, 2, bias=0x1000, aux=0x2000, aux_ld=128,
                   aux_stride=128 * n, bias_stride=0)
    assert spec.check({**{x: args.get(x, 0x100) for x in spec.INT_NAMES}, "workspace": 0}) is None
    assert heuristic(c, args) == [0, 0]
    ptrs = {x: put(c, bytes(4 * (args[x + "stride"] * 2 + 64))) for x in "ABC"}
    args.update(A=ptrs["A"], B=ptrs["B"], C=ptrs["C"], D=ptrs["C"], bias=put(c, bytes(4 * m)),
                aux=put(c, bytes(128 * n * 2 // 8)))
    assert matmul(c, args) == ERROR_CODES["cudaErrorNotSupported"]
    log = d.log_text()
    assert re.search(r"LT_HEURISTIC: no algorithm: cublasLtMatmulAlgoGetHeuristic refused the problem for "
                     r"EPILOGUE_DRELU_BGRAD, A/B/C/D R_32F/R_32F/R_32F/R_32F, .*batch 2: cuBLASLt says \"", log), \
        log[-3000:]
    assert re.search(r"LT_MATMUL failed: cudaErrorNotSupported: CUBLAS_STATUS_NOT_SUPPORTED: .*cuBLASLt says "
                     r"\"[^\"]*biasBatchStride", log), log[-3000:]
    assert "[cublasLt]" not in log                  # NVIDIA's own lines (no session named) are not printed


def test_nvidias_cublas_starts_and_its_gemm_is_right_or_refused(nvidia_chain):
    """cuBLAS picks its kernel by the problem: one with PTX runs on the emulated GPU and must be right; a SASS-only
    one (cuBLAS's usual SGEMM kernels) is refused, an error status naming the library, never a wrong number."""
    d, c = nvidia_chain
    results = {}
    for m, n, k in ((8, 8, 8), (33, 17, 9)):
        err, h, _ = c.call("BLAS_CREATE", 0)
        assert err == 0, d.log_tail()
        rng = np.random.default_rng(m)
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        pa, pb = put(c, a.tobytes(order="F")), put(c, b.tobytes(order="F"))
        pc = put(c, np.full(m * n, 7, np.float32).tobytes())
        vals = dict(transa=0, transb=0, m=m, n=n, k=k, alpha=np.float32(1).tobytes(), A=pa, Atype=0, lda=m,
                    strideA=0, B=pb, Btype=0, ldb=k, strideB=0, beta=np.float32(0).tobytes(), C=pc, Ctype=0, ldc=m,
                    strideC=0, batchCount=1, computeType=68, algo=-1)
        base = {"dev": 0, "handle": h, "stream": 0, "pmode": 0, "math": 0}
        err = c.call("BLAS_GEMM", *({**base, **vals}[x] for x in OP_BY_NAME["BLAS_GEMM"].arg_names))[0]
        if err == 0:         # fire-and-forget failures surface at the next synchronizing call
            err = c.call("DEVICE_SYNC", 0)[0]
        if err == 0:
            raw = c.call("MEMCPY_DTOH", 0, pc, m * n * 4, 0)[2]
            got = np.frombuffer(raw, np.float32).reshape(n, m).T
            np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=0, atol=1e-4 * max(1, k))
        else:
            assert "ships its kernels as SASS only" in d.log_text(), d.log_tail()
            assert c.call("DEVICE_RESET", 0)[0] == 0          # the refusal is sticky until a reset
        results[(m, n, k)] = err
    print("cuBLAS SGEMM over the chain:", results)
