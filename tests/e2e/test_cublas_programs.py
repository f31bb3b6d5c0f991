"""Unmodified CUDA programs that call cuBLAS, built with `nvcc ... -lcublas` against the headers of the
nvidia-cublas wheel and linked against libvcublas (`pyvgpu lib --dir`), run on emulated GPUs through
`pyvgpu run`: two GPUs on two daemons, one thread and one handle per GPU, results checked with NumPy; and the
semantics program (statuses, stream ordering with kernels, pointer modes, beta == 0 over NaN)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyvgpu


@pytest.fixture(scope="session")
def cublas_build(cuda_build, cublas_include):
    lib_dir = str(pyvgpu.lib_path().parent)
    return lambda name: cuda_build(name, "-I", str(cublas_include), "-L", lib_dir, "-lcublas")


def pyvgpu_run(prog: Path, daemons, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    hosts = ",".join(d.address for d in daemons)
    cmd = [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", hosts, "--", str(prog), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        logs = "\n".join(d.log_text()[-3000:] for d in daemons)
        raise AssertionError(f"{prog.name} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}\n{logs}")
    return proc


def load(d: Path, gpu: int, name: str, dtype) -> np.ndarray:
    return np.fromfile(d / f"gpu{gpu}_{name}.bin", dtype=dtype).astype(np.float64)


@pytest.mark.chain
def test_done_when_program_on_two_daemons(cublas_build, daemon_factory, tmp_path):
    prog = cublas_build("cublas_done_when.cu")
    needed = subprocess.run(["readelf", "-d", str(prog)], capture_output=True, text=True, check=True).stdout
    assert "[libcublas.so.13]" in needed
    daemons = [daemon_factory(), daemon_factory()]
    proc = pyvgpu_run(prog, daemons, str(tmp_path))
    assert re.search(r"^OK 2$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "not supported" not in proc.stderr
    for g in range(2):
        m, n, k, lda = 64, 48, 32, 67
        a = load(tmp_path, g, "sgemm_A", np.float32).reshape(k, lda).T[:m]
        b = load(tmp_path, g, "sgemm_B", np.float32).reshape(k, n).T
        c0 = load(tmp_path, g, "sgemm_C0", np.float32).reshape(n, m).T
        c = load(tmp_path, g, "sgemm_C", np.float32).reshape(n, m).T
        np.testing.assert_allclose(c, 1.5 * a @ b.T - 0.5 * c0, rtol=0, atol=1e-5 * k)
        bm, bn, bk, batch = 16, 24, 40, 3
        sa, sb, sc = bk * bm + 5, bk * bn, bm * bn
        ha, hb = load(tmp_path, g, "gemmex_A", np.float16), load(tmp_path, g, "gemmex_B", np.float16)
        hc = load(tmp_path, g, "gemmex_C", np.float32)
        for i in range(batch):
            ai = ha[i * sa:i * sa + bk * bm].reshape(bm, bk).T          # bk x bm, column-major
            bi = hb[i * sb:i * sb + bk * bn].reshape(bn, bk).T
            ci = hc[i * sc:(i + 1) * sc].reshape(bn, bm).T
            np.testing.assert_allclose(ci, ai.T @ bi, rtol=0, atol=1e-5 * bk)
        ga = load(tmp_path, g, "sgemv_A", np.float32).reshape(30, 40).T
        gx, gy0 = load(tmp_path, g, "sgemv_x", np.float32), load(tmp_path, g, "sgemv_y0", np.float32)
        gy = load(tmp_path, g, "sgemv_y", np.float32)
        np.testing.assert_allclose(gy, 2 * ga.T @ gx + gy0, rtol=0, atol=1e-5 * 40)
        want = gy.copy()
        want[:20] += -1.25 * gx[::2]
        np.testing.assert_allclose(load(tmp_path, g, "saxpy_y", np.float32), want, rtol=0, atol=1e-5)
    # the two GPUs computed different data (seeded per GPU), each on its own daemon
    assert not np.array_equal(load(tmp_path, 0, "sgemm_C", np.float32), load(tmp_path, 1, "sgemm_C", np.float32))
    assert all("BLAS_GEMM" in d.log_text() or "ended" in d.log_text() for d in daemons)


@pytest.mark.chain
def test_semantics_program(cublas_build, daemon):
    proc = pyvgpu_run(cublas_build("cublas_semantics.cu"), [daemon])
    assert re.search(r"^OK 28$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "cublasStrmm_v2 is not supported by libvcublas" in proc.stderr
