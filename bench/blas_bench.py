"""Emulated cuBLAS vs NumPy on the same machine: how close the emulated GPU's GEMMs come to NumPy's own matmul,
directly and through libvcublas, and how many blocking round trips a cuBLAS call costs a program.

    python bench/blas_bench.py [--quick] [--rounds 7] [--no-remote] [--out FILE.json]

Each case runs the emulated routine (daemon/pyvgpu_daemon/blas, directly over a DeviceMemory: no daemon, no
network) and the NumPy computation that produces the same result from host arrays, interleaved round by round
(emulated, NumPy, emulated, NumPy, ...) so both see the same machine load; the table reports the median of each
and the ratio of the medians. Issue 9's target: SGEMM 1024x1024x1024 within 1.5x of NumPy.

Through libvcublas (`--remote`, the default; needs nvcc and fetches cuBLAS's headers with tools/cublas_wheel.py):
bench/cuda/cublas_loop.cu, an ordinary program built with -lcublas, runs against one emulated-GPU daemon on
loopback; its SGEMM N^3 is timed as call + cudaDeviceSynchronize (operands already on the device), interleaved
round by round with NumPy's matmul in this process. Blocking round trips per call: the program runs once with a
loop of LOOP back-to-back cublasSgemm calls and once without; the daemon's log line at each session's end counts
the ops whose reply the client waited for, and the difference divided by LOOP is the figure (target: 0).

The NumPy side of a case is the natural host equivalent: `A @ B` on float32 arrays for SGEMM (C-ordered: NumPy's
best case), `(A.astype(f32) @ B.astype(f32)).astype(f16)` for fp16 in/out with fp32 compute, `np.matmul` on the
stacked arrays for the batched GEMM.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
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


# ---------------------------------------------------------------------------------------------- through libvcublas
def _build_loop() -> Path:
    import hashlib
    import shutil
    sys.path.insert(0, str(ROOT / "tools"))
    import cublas_wheel
    import pyvgpu
    src = ROOT / "bench" / "cuda" / "cublas_loop.cu"
    nvcc = shutil.which("nvcc") or "/usr/local/bin/nvcc"
    flags = ["-cudart", "shared", "-O3", "-I", str(cublas_wheel.fetch()), "-L", str(pyvgpu.lib_path().parent),
             "-lcublas"]
    digest = hashlib.sha256(src.read_bytes() + repr(flags).encode()).hexdigest()[:16]
    out = ROOT / "build" / "bench-cuda" / f"cublas_loop-{digest}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        subprocess.run([nvcc, *flags, "-o", str(tmp), str(src)], check=True, capture_output=True)
        tmp.rename(out)
    return out


class _Daemon:
    def __init__(self, workdir: Path) -> None:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = workdir / f"daemon-{self.port}.log"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "daemon"), str(ROOT)])}
        self.proc = subprocess.Popen([sys.executable, "-m", "pyvgpu_daemon", "--host", "127.0.0.1", "--port",
                                      str(self.port), "--backend", "emu", "--emu-memory", "2G"],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while "listening" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.05)

    def waited(self) -> list[int]:
        """Ops waited for, per ended session, in order (from the daemon's session-end log lines)."""
        import re
        return [int(m) for m in re.findall(r"ended \(.*?\); \d+ ops \((\d+) waited for\)",
                                           self.log.read_text(errors="replace"))]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _run_loop(prog: Path, daemon: _Daemon, n: int, reps: int, loop: int) -> dict[str, list[float]]:
    import pyvgpu
    env = {**os.environ, "LD_PRELOAD": str(pyvgpu.lib_path()), "PYVGPU_HOSTS": f"127.0.0.1:{daemon.port}",
           "LD_LIBRARY_PATH": str(pyvgpu.lib_path().parent)}
    before = len(daemon.waited())
    proc = subprocess.run([str(prog), str(n), str(reps), str(loop)], capture_output=True, text=True, env=env,
                          timeout=600)
    if proc.returncode != 0 or "FAIL" in proc.stdout:
        raise RuntimeError(f"cublas_loop failed:\n{proc.stdout}\n{proc.stderr}")
    out = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in proc.stdout.splitlines() if line}
    deadline = time.monotonic() + 10
    while len(daemon.waited()) <= before:              # the session's end line follows the program's exit
        if time.monotonic() > deadline:
            raise RuntimeError("no session-end line in the daemon log")
        time.sleep(0.02)
    out["waited"] = [float(daemon.waited()[-1])]
    return out


def remote(n: int, rounds: int, loop: int) -> dict[str, float]:
    import tempfile
    prog = _build_loop()
    with tempfile.TemporaryDirectory() as tmp:
        daemon = _Daemon(Path(tmp))
        try:
            rng = np.random.default_rng(0)
            a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
            remote_us, numpy_us = [], []
            first = None
            for _ in range(rounds):
                first = _run_loop(prog, daemon, n, 3, 0)
                remote_us += first["sgemm_us"]
                for _ in range(3):
                    t0 = time.perf_counter()
                    a @ b
                    numpy_us.append((time.perf_counter() - t0) * 1e6)
            looped = _run_loop(prog, daemon, n, 1, loop)
            base = _run_loop(prog, daemon, n, 1, 0)
        finally:
            daemon.stop()
    assert first is not None
    r, npy = statistics.median(remote_us), statistics.median(numpy_us)
    return {"n": n, "remote_sgemm_ms": r / 1e3, "numpy_ms": npy / 1e3, "ratio": r / npy,
            "upload_ms": first["upload_us"][0] / 1e3, "download_ms": first["download_us"][0] / 1e3,
            "maxerr_col0": first["maxerr_col0"][0], "loop_calls": loop,
            "round_trips_per_call": (looped["waited"][0] - base["waited"][0]) / loop,
            "enqueue_us_per_call": looped["loop_enqueue_ns"][0] / 1e3,
            "loop_total_ms": looped["loop_total_us"][0] / 1e3}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-remote", action="store_true", help="skip the runs through libvcublas and a daemon")
    ap.add_argument("--loop", type=int, default=1000, help="back-to-back calls for the round-trip count")
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
    report: dict = {"direct": [asdict(r) for r in rows]}
    if not args.no_remote:
        rem = remote(size, max(1, args.rounds // 2), 50 if args.quick else args.loop)
        report["remote"] = rem
        print(f"\nThrough libvcublas and one emulated-GPU daemon on loopback ({max(1, args.rounds // 2)} rounds, "
              "medians):")
        print("| measure | value |")
        print("|---|---:|")
        print(f"| SGEMM {size}^3: cublasSgemm + cudaDeviceSynchronize | {rem['remote_sgemm_ms']:.1f} ms |")
        print(f"| SGEMM {size}^3: NumPy matmul, this process | {rem['numpy_ms']:.1f} ms |")
        print(f"| ratio | {rem['ratio']:.2f} |")
        print(f"| upload A and B ({2 * size * size * 4 >> 20} MiB, cudaMemcpy) | {rem['upload_ms']:.1f} ms |")
        print(f"| blocking round trips per cublasSgemm in a loop of {rem['loop_calls']} | "
              f"{rem['round_trips_per_call']:.3f} |")
        print(f"| enqueue time per call in that loop | {rem['enqueue_us_per_call']:.1f} us |")
        print(f"| max abs error of column 0 vs float64 | {rem['maxerr_col0']:.2g} |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
