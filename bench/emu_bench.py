"""Emulated-GPU speed: thread-instructions per second of the NumPy lockstep interpreter.

    python bench/emu_bench.py [--quick]

Kernels come from tests/cuda/emu_basic.cu and emu_shared.cu (compiled with nvcc -ptx, cached under build/emu-ptx).
Thread-instructions are counted exactly: the dynamic instruction count of each thread, summed over the launch
(measured by the interpreter's own per-block counters in a separate counting run, not timed).
"""
from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "daemon"), str(ROOT), str(ROOT / "tests")]

from pyvgpu_daemon.emu.chunk_api import EXIT  # noqa: E402
from pyvgpu_daemon.emu.memory import DeviceMemory  # noqa: E402
from pyvgpu_daemon.emu.module import EmuModule  # noqa: E402
from pyvgpu_daemon.emu.runtime import Chunk  # noqa: E402
from harness import ptx_of  # noqa: E402


def count_thread_instructions(mod, kernel, grid, block, shmem, params) -> int:
    """Run once with per-lane block counting: sum over lanes of the instructions each executed."""
    k = mod.kernel(kernel)
    sizes = np.array([len(b.instrs) + (b.term is not None) for b in k.blocks], np.int64)   # fall-through: no term
    total = 0
    bind = Chunk.bind_blocks

    def counting_bind(chunk):
        blocks, handlers = bind(chunk)
        wrapped = []
        for bi, (c, mfn) in enumerate(blocks):
            def cw(c=c, bi=bi):
                nonlocal total
                total += int(sizes[bi]) * int((chunk.st != EXIT).sum())
                return c()

            def mw(m, mfn=mfn, bi=bi):
                nonlocal total
                total += int(sizes[bi]) * int(m.sum())
                return mfn(m)
            wrapped.append((cw, mw))
        return wrapped, handlers
    Chunk.bind_blocks = counting_bind
    threads = mod.limits.threads
    mod.limits.threads = 1          # one chunk at a time: the counters above are not shared safely
    try:
        mod.launch(kernel, grid, block, shmem, params)
    finally:
        Chunk.bind_blocks = bind
        mod.limits.threads = threads
    return total


def bench(mod, kernel, grid, block, shmem, params, reps):
    n_ti = count_thread_instructions(mod, kernel, grid, block, shmem, params)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        mod.launch(kernel, grid, block, shmem, params)
        best = min(best, time.perf_counter() - t)
    return n_ti, best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the 512^3 matmul")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    mem = DeviceMemory(1 << 40, 1 << 31)
    basic = EmuModule.load(ptx_of("emu_basic.cu"), mem)
    shared = EmuModule.load(ptx_of("emu_shared.cu"), mem)
    rows = []

    def alloc(arr):
        p = mem.alloc(arr.nbytes)
        mem.write(p, arr.tobytes())
        return p

    for n in (256, 1 << 20):
        a = np.random.default_rng(0).random(n, dtype=np.float32)
        pa, pb, pc = alloc(a), alloc(a), alloc(a)
        params = struct.pack("<QQQi", pa, pb, pc, n)
        rows.append(("vector add", n, *bench(basic, "vecAdd", ((n + 255) // 256, 1, 1), (256, 1, 1), 0, params,
                                                args.reps)))
        x = np.random.default_rng(1).integers(-100, 100, n).astype(np.int32)
        px, po = alloc(x), alloc(np.zeros(max(1, n // 256), np.int32))
        params = struct.pack("<QQi", px, po, n)
        rows.append(("block reduction", n, *bench(shared, "blockReduce", ((n + 255) // 256, 1, 1), (256, 1, 1), 0,
                                                     params, args.reps)))
        side = int(round(n ** 0.5))      # square matmul with side*side threads
        A = np.random.default_rng(2).random((side, side), dtype=np.float32)
        pA, pB, pC = alloc(A), alloc(A), alloc(A)
        params = struct.pack("<QQQiii", pA, pB, pC, side, side, side)
        g = ((side + 15) // 16, (side + 15) // 16, 1)
        rows.append((f"tiled matmul {side}^3", side * side,
                     *bench(shared, "matmulTiled", g, (16, 16, 1), 0, params, 1 if side > 64 else args.reps)))
    print(f"{'kernel':<22} {'threads':>9} {'thread-instr':>14} {'seconds':>9} {'M thread-instr/s':>17}")
    for name, n, ti, t in rows:
        print(f"{name:<22} {n:>9} {ti:>14} {t:>9.4f} {ti / t / 1e6:>17.1f}")
    if not args.quick:
        side = 512
        A = np.random.default_rng(3).random((side, side), dtype=np.float32)
        B = np.random.default_rng(4).random((side, side), dtype=np.float32)
        pA, pB, pC = alloc(A), alloc(B), alloc(np.zeros((side, side), np.float32))
        params = struct.pack("<QQQiii", pA, pB, pC, side, side, side)
        t = time.perf_counter()
        shared.launch("matmulTiled", (32, 32, 1), (16, 16, 1), 0, params)
        dt = time.perf_counter() - t
        C = np.frombuffer(bytes(mem.read(pC, side * side * 4)), np.float32).reshape(side, side)
        err = float(np.abs(C - A @ B).max())
        print(f"512x512x512 tiled shared-memory matmul: {dt:.2f} s (max |err| vs NumPy {err:.2e})")


if __name__ == "__main__":
    main()
