"""Emulated GPU: CPU seconds per launch of kernels whose CTAs talk (atomics, volatile accesses) run a CTA at a time
(translator/ctagen.py with translator/ctaatomic.py) against the lockstep paths, in one process of this tree, each
result checked against NumPy:
CUB's radix-sort histogram kernel as thrust::sort_by_key builds it (bench/cuda/radix_sort_thrust.cu: atom.shared.add
per key and digit, atom.global.add.u64 per bin), 1M keys over 160 CTAs of 256 threads (4 per emulated SM), and a
decoupled look-back (tests/cuda/emu_cta_talk.cu's lookback: a tile counter, flags spun on with volatile loads),
4096 tiles of 256.

    python bench/emu_cta_talk_bench.py [--launches N] [--reps N]

Modes: "CTA" is the default (a CTA at a time), "lockstep native" is PYVGPU_EMU_CTAGEN=0 with native code built at
the first launch (what a long program reaches), "lockstep NumPy" is native code off (what a program's first
launches of a large kernel run: native code comes after NATIVE_S_PER_INSTR of interpreting per instruction). The
modes alternate --reps times; each figure is the best of --launches launches (process CPU time), the median over
the repetitions is printed.
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
from pyvgpu_daemon.emu.translator import ctagen  # noqa: E402

from emu_sample_kernels_bench import alternate_modes, best_cpu_seconds  # noqa: E402 (bench/: this script's directory)

N = 1 << 20
MODES = ("CTA", "lockstep native", "lockstep NumPy")


def _measure(mode: str, launches: int) -> dict[str, float]:
    limits = EmuLimits(native="off" if mode == "lockstep NumPy" else "on", ctagen=mode == "CTA")
    mem = DeviceMemory(1 << 40, 1 << 28)
    sort = EmuModule.load(ptx_of(str(ROOT / "bench" / "cuda" / "radix_sort_thrust.cu")), mem, limits=limits)
    talk = EmuModule.load(ptx_of("emu_cta_talk.cu"), mem, limits=limits)
    histo = next(k for k in sort.kernels if "HistogramKernel" in k)
    out = {}
    keys = np.random.default_rng(1).integers(0, 1 << 32, N, dtype=np.uint32)
    src, bins = mem.alloc(4 * N), mem.alloc(8 * 4 * 256)
    mem.write(src, keys.tobytes())

    def histogram():
        mem.write(bins, bytes(8 * 4 * 256))
        sort.launch(histo, (160, 1, 1), (256, 1, 1), 0, struct.pack("<QQQiiB", bins, src, N, 0, 32, 0))
    out["CUB histogram, 1M keys"] = best_cpu_seconds(launches, histogram)
    got = np.frombuffer(bytes(mem.read(bins, 8 * 4 * 256)), np.uint64).reshape(4, 256)
    exp = np.stack([np.bincount((keys >> (8 * p)) & 255, minlength=256) for p in range(4)])
    if not np.array_equal(got, exp):
        raise SystemExit(f"{mode}: histogram: wrong result")
    if mode == "CTA" and not isinstance(sort.kernel(histo).native_make(), ctagen.CtaCode):
        raise SystemExit("the histogram kernel did not run a CTA at a time")

    tiles = N // 256
    dst, counter, flags, agg, incl = mem.alloc(4 * N), mem.alloc(4), *(mem.alloc(4 * tiles) for _ in range(3))
    small = (keys & 1023).astype(np.uint32)
    mem.write(src, small.tobytes())

    def lookback():
        for a in (counter, flags):
            mem.write(a, bytes(4 * (tiles if a == flags else 1)))
        talk.launch("lookback", (tiles, 1, 1), (256, 1, 1), 0, struct.pack("<6Q", src, dst, counter, flags, agg, incl))
    out["look-back, 4096 tiles"] = best_cpu_seconds(launches, lookback)
    sums = small.reshape(tiles, 256).sum(1, dtype=np.uint32)
    got = np.frombuffer(bytes(mem.read(dst, 4 * N)), np.uint32)
    if not np.array_equal(got, np.repeat(np.cumsum(sums, dtype=np.uint32) - sums, 256)):
        raise SystemExit(f"{mode}: look-back: wrong result")
    return out


def main() -> None:
    alternate_modes(MODES, _measure, 3, "lockstep native", "CTA")


if __name__ == "__main__":
    main()
