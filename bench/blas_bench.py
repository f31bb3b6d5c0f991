"""Emulated cuBLAS vs NumPy on the same machine: how close the emulated GPU's GEMMs come to NumPy's own matmul.

    python bench/blas_bench.py [--quick] [--rounds 7] [--out FILE.json]

Each case runs the emulated routine (daemon/pyvgpu_daemon/blas, directly over a DeviceMemory: no daemon, no
network) and the NumPy computation that produces the same result from host arrays, interleaved round by round
(emulated, NumPy, emulated, NumPy, ...) so both see the same machine load; the table reports the median of each
and the ratio of the medians. Issue 9's target: SGEMM 1024x1024x1024 within 1.5x of NumPy.

The NumPy side of a case is the natural host equivalent: `A @ B` on float32 arrays for SGEMM (C-ordered: NumPy's
best case), `(A.astype(f32) @ B.astype(f32)).astype(f16)` for fp16 in/out with fp32 compute, `np.matmul` on the
stacked arrays for the batched GEMM.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "daemon"), str(ROOT)]

from pyvgpu import cublas_spec as spec  # noqa: E402
from pyvgpu_daemon import blas  # noqa: E402
from pyvgpu_daemon.emu.memory import DeviceMemory  # noqa: E402

R32F, R16F = spec.DTYPE["CUDA_R_32F"].value, spec.DTYPE["CUDA_R_16F"].value
COMPUTE_32F = spec.COMPUTE["CUBLAS_COMPUTE_32F"]


@dataclass
class Row:
    case: str
    flops: float
    emu_s: float
    numpy_s: float
    ratio: float
    max_abs_err: float


def _put(mem: DeviceMemory, a: np.ndarray) -> int:
    ptr = mem.alloc(a.nbytes)
    mem.write(ptr, np.asfortranarray(a).tobytes(order="F") if a.ndim == 2 else a.tobytes())
    return ptr


def gemm_case(mem: DeviceMemory, m: int, n: int, k: int, dtype: np.dtype, batch: int = 1
              ) -> tuple[Callable[[], None], Callable[[], np.ndarray], Callable[[], np.ndarray]]:
    """(emulated call, numpy call, read back the emulated C) for C = A B (column-major, lda = m ...)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((batch, m, k)).astype(dtype)
    b = rng.standard_normal((batch, k, n)).astype(dtype)
    # device layout: each batch entry column-major, entries back to back
    pa = _put(mem, np.ascontiguousarray(a.transpose(0, 2, 1)))
    pb = _put(mem, np.ascontiguousarray(b.transpose(0, 2, 1)))
    pc = mem.alloc(batch * m * n * dtype.itemsize)
    t = R16F if dtype == np.float16 else R32F
    scale_t = R32F
    args = dict(transa=0, transb=0, m=m, n=n, k=k, alpha=np.float32(1).tobytes(), A=pa, Atype=t, lda=m,
                strideA=m * k, B=pb, Btype=t, ldb=k, strideB=k * n, beta=np.float32(0).tobytes(), C=pc, Ctype=t,
                ldc=m, strideC=m * n, batchCount=batch, computeType=COMPUTE_32F, algo=-1)
    assert spec.gemm_scale_type(t, t, t, COMPUTE_32F) == scale_t
    a2, b2 = (a[0], b[0]) if batch == 1 else (a, b)

    def emu() -> None:
        blas.execute("BLAS_GEMM", mem, args)

    if dtype == np.float16:
        def host() -> np.ndarray:
            return (a2.astype(np.float32) @ b2.astype(np.float32)).astype(np.float16)
    else:
        def host() -> np.ndarray:
            return a2 @ b2

    def read() -> np.ndarray:
        raw = np.frombuffer(bytes(mem.read(pc, batch * m * n * dtype.itemsize)), dtype=dtype)
        c = raw.reshape(batch, n, m).transpose(0, 2, 1)
        return c[0] if batch == 1 else c

    return emu, host, read


def measure(name: str, flops: float, case, rounds: int) -> Row:
    emu, host, read = case
    emu()
    ref = host()                                   # warm-up (and the reference for the error column)
    err = float(np.max(np.abs(read().astype(np.float64) - ref.astype(np.float64))))
    te, tn = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        emu()
        te.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        host()
        tn.append(time.perf_counter() - t0)
    e, n = statistics.median(te), statistics.median(tn)
    return Row(name, flops, e, n, e / n, err)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    mem = DeviceMemory(1 << 40, 1 << 30)
    size = 128 if args.quick else 1024
    cases = [
        (f"SGEMM {size}^3 (fp32)", 2.0 * size ** 3, gemm_case(mem, size, size, size, np.dtype(np.float32))),
        (f"GemmEx {size}^3 fp16 in/out, fp32 compute", 2.0 * size ** 3,
         gemm_case(mem, size, size, size, np.dtype(np.float16))),
        (f"SGEMM strided batched 64 x {size // 8}^3", 64 * 2.0 * (size // 8) ** 3,
         gemm_case(mem, size // 8, size // 8, size // 8, np.dtype(np.float32), batch=64)),
    ]
    rows = [measure(name, flops, case, args.rounds) for name, flops, case in cases]
    print(f"NumPy {np.__version__}, {args.rounds} interleaved rounds, medians")
    print("| case | emulated cuBLAS | NumPy | ratio | GFLOP/s emulated | max abs err vs NumPy |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r.case} | {r.emu_s * 1e3:.1f} ms | {r.numpy_s * 1e3:.1f} ms | {r.ratio:.2f} | "
              f"{r.flops / r.emu_s / 1e9:.1f} | {r.max_abs_err:.2g} |")
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
