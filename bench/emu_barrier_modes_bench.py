"""Emulated GPU: CPU seconds per launch of kernels with `__syncthreads()` run a CTA at a time (translator/ctagen.py:
a CTA's registers as arrays, each block a loop over the threads at it), a thread at a time
(translator/threadgen.py: a block's threads one after the other up to each barrier) and as the lockstep native
code, in one process of this tree, each result checked against NumPy. What ctagen.preferred_reason and
threadgen.slower_reason decide from:
scan_batches' scanTiles (a log-step scan, 4-7 instructions between barriers; tiles of 64 and 1024) and a block sum
(bench/cuda/block_sum.cu: a grid-stride loop before the barriers), 6.5M elements each.

    python bench/emu_barrier_modes_bench.py [--launches N] [--reps N]

Modes: "CTA" runs every eligible kernel a CTA at a time (translator/ctagen.py), "thread, forced" runs every kernel with plain barriers a thread at a time (slower_reason and the
volatile-shared rule ignored: scanTiles is refused thread mode by that rule), "default" is what
the emulator does, "lockstep" is PYVGPU_EMU_THREADGEN=0 PYVGPU_EMU_CTAGEN=0 (the native runs). The modes alternate --reps times; the
best of --launches launches is each figure (process CPU time), the median over the repetitions is printed.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "daemon"), str(ROOT), str(ROOT / "tests")]

import numpy as np  # noqa: E402

from harness import ptx_of  # noqa: E402
from pyvgpu_daemon.emu.limits import EmuLimits  # noqa: E402
from pyvgpu_daemon.emu.memory import DeviceMemory  # noqa: E402
from pyvgpu_daemon.emu.module import EmuModule  # noqa: E402
from pyvgpu_daemon.emu.translator import ctagen, threadgen  # noqa: E402

from emu_sample_kernels_bench import alternate_modes, best_cpu_seconds  # noqa: E402 (bench/: this script's directory)

N = 6815744
MODES = ("CTA", "thread, forced", "default", "lockstep")


def _measure(mode: str, launches: int) -> dict[str, float]:
    slower, warp_sync, preferred = threadgen.slower_reason, threadgen._warp_synchronous_reason, ctagen.preferred_reason
    if mode == "CTA":
        ctagen.preferred_reason = lambda kernel, threadgen_on=True: None
    if mode == "thread, forced":
        # also past the volatile-shared rule, which keeps scanTiles on lockstep code: its volatile loads read back
        # only its own thread's stores in 1-D blocks, so the results (checked below) are right here
        threadgen.slower_reason = threadgen._warp_synchronous_reason = lambda kernel: None
    try:
        limits = EmuLimits(native="on", threadgen=mode not in ("lockstep", "CTA"),
                           ctagen=mode in ("CTA", "default"))
        mem = DeviceMemory(1 << 40, 1 << 28)
        scan = EmuModule.load(ptx_of(str(ROOT / "bench" / "cuda" / "scan_batches.cu")), mem, limits=limits)
        bsum = EmuModule.load(ptx_of(str(ROOT / "bench" / "cuda" / "block_sum.cu")), mem, limits=limits)
        out = {}
        data = np.random.default_rng(1).integers(0, 256, N, dtype=np.uint32)
        src, dst = mem.alloc(4 * N), mem.alloc(4 * N)
        mem.write(src, data.tobytes())
        for size in (64, 1024):
            out[f"scanTiles, tiles of {size}"] = best_cpu_seconds(launches, lambda size=size: scan.launch(
                "_Z9scanTilesP5uint4PKS_j", (N // 1024, 1, 1), (256, 1, 1), 0, struct.pack("<QQI", dst, src, size)))
            got = np.frombuffer(bytes(mem.read(dst, 4 * N)), np.uint32).reshape(-1, size)
            d = data.reshape(-1, size)
            if not np.array_equal(got, np.cumsum(d, axis=1, dtype=np.uint32) - d):
                raise SystemExit(f"{mode}: scanTiles of {size}: wrong result")
        small = (data & 15).astype(np.float32)         # (sums of small integers: exact in float32)
        mem.write(src, small.tobytes())
        out["blockSum, 1024 blocks"] = best_cpu_seconds(launches, lambda: bsum.launch(
            "_Z8blockSumPfPKfi", (1024, 1, 1), (256, 1, 1), 0, struct.pack("<QQi", dst, src, N)))
        got = np.frombuffer(bytes(mem.read(dst, 4 * 1024)), np.float32)
        if got.astype(np.float64).sum() != small.astype(np.float64).sum():
            raise SystemExit(f"{mode}: blockSum: wrong result")
        return out
    finally:
        threadgen.slower_reason, threadgen._warp_synchronous_reason = slower, warp_sync
        ctagen.preferred_reason = preferred




def main() -> None:
    alternate_modes(MODES, _measure, 4, "lockstep", "CTA")


if __name__ == "__main__":
    main()
