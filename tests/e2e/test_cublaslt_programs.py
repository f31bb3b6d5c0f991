"""An unmodified CUDA program that calls cuBLASLt the way PyTorch does (tests/cuda/cublaslt_torch.cu: nn.Linear /
addmm with bias, ReLU and GELU epilogues in fp32, fp16 and bf16, a strided-batch bmm in fp16, device-mode scalars),
built with `nvcc ... -lcublasLt` against the nvidia-cublas wheel's headers and linked against libvcublasLt
(`pyvgpu lib --dir`), run through `pyvgpu run` on two GPUs of two daemons; every result checked against float64
NumPy from the inputs as stored. Tolerance: 8 x (the output type's rounding + (k + 8) float32 roundings) x
max(1, |reference|), float32 being the compute type. On a real GPU (scripts/gpu-check.sh) the same program runs on
NVIDIA's cuBLASLt behind the daemon, and the same checks apply."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyvgpu

EPS = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}


@pytest.fixture(scope="session")
def cublaslt_build(cuda_build, cublas_include):
    lib_dir = str(pyvgpu.lib_path().parent)
    return lambda name: cuda_build(name, "-I", str(cublas_include), "-L", lib_dir, "-lcublasLt")


def load(d: Path, gpu: int, name: str) -> np.ndarray:
    return np.fromfile(d / f"gpu{gpu}_{name}.bin", dtype=np.float32).astype(np.float64)


def close(got: np.ndarray, want: np.ndarray, out: str, k: int) -> None:
    tol = 8 * (EPS[out] + (k + 8) * EPS["fp32"]) * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.chain
def test_torch_style_program_on_two_daemons(cublaslt_build, daemon_factory, tmp_path):
    prog = cublaslt_build("cublaslt_torch.cu")
    needed = subprocess.run(["readelf", "-d", str(prog)], capture_output=True, text=True, check=True).stdout
    assert "[libcublasLt.so.13]" in needed and "[libcublas.so.13]" not in needed
    daemons = [daemon_factory(), daemon_factory()]
    cmd = [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", ",".join(d.address for d in daemons), "--",
           str(prog), str(tmp_path)]
    stats = tmp_path / "stats.txt"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYVGPU_STATS": str(stats)})
    assert proc.returncode == 0 and re.search(r"^OK 2$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "not supported" not in proc.stderr
    out, inp, n = 24, 40, 16
    acts = {"fp32": lambda x: x, "fp16": lambda x: np.maximum(x, 0), "bf16": gelu}
    for g in range(2):
        for t, act in acts.items():
            w = load(tmp_path, g, f"linear_{t}_W").reshape(out, inp)          # W stored in x out: row o = column
            x = load(tmp_path, g, f"linear_{t}_X").reshape(n, inp)
            b = load(tmp_path, g, f"linear_{t}_b")
            y = load(tmp_path, g, f"linear_{t}_Y").reshape(n, out)            # column-major out x N = row-major N x out
            close(y, act(x @ w.T + b), t, inp)
        m, nn, k, batch = 8, 12, 20, 3
        sa, sb, sc = m * k + 5, nn * k + 3, m * nn + 7
        a, bb = load(tmp_path, g, "bmm_fp16_A"), load(tmp_path, g, "bmm_fp16_B")
        c0, c = load(tmp_path, g, "bmm_fp16_C0"), load(tmp_path, g, "bmm_fp16_C")
        for i in range(batch):
            ai = a[i * sa:i * sa + m * k].reshape(k, m).T
            bi = bb[i * sb:i * sb + nn * k].reshape(k, nn).T                  # B[i] is n x k, used transposed
            want = ai @ bi.T + c0[i * sc:i * sc + m * nn].reshape(nn, m).T
            close(c[i * sc:i * sc + m * nn].reshape(nn, m).T, want, "fp16", k)
            gap = slice(i * sc + m * nn, (i + 1) * sc)
            assert np.array_equal(c[gap], c0[gap])                            # the batch gaps were not written
        m, nn, k = 10, 7, 9
        a = load(tmp_path, g, "addmm_fp32_A").reshape(k, m).T
        bb = load(tmp_path, g, "addmm_fp32_B").reshape(nn, k).T
        c = load(tmp_path, g, "addmm_fp32_C").reshape(nn, m).T
        close(load(tmp_path, g, "addmm_fp32_D").reshape(nn, m).T, 0.75 * a @ bb - 2.0 * c, "fp32", k)
        assert np.array_equal(load(tmp_path, g, "addmm_fp32_C_after").reshape(nn, m).T, c)   # C only read
    assert not np.array_equal(load(tmp_path, 0, "linear_fp32_Y"), load(tmp_path, 1, "linear_fp32_Y"))
    # A matmul costs no blocking round trip (5 per GPU, all fire-and-forget); a heuristic query one, the first time
    # a handle meets a problem (5 problems per GPU here; a training loop repeats its few).
    rows = {line.split()[0]: line.split() for line in stats.read_text().splitlines() if line.strip()}
    assert rows["LT_MATMUL"][1] == "10" and rows["LT_MATMUL"][3] == "0", rows["LT_MATMUL"]
    assert rows["LT_HEURISTIC"][1] == "10" and rows["LT_HEURISTIC"][3] == "10", rows["LT_HEURISTIC"]
    assert all("LT_MATMUL" in d.log_text() or "ended" in d.log_text() for d in daemons)
