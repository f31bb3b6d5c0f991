"""Emulated GPU: CPU seconds per launch of kernels with warp operations run a CTA at a time (translator/ctagen.py
with translator/ctawarp.py: a warp operation per warp of the threads at its block) and as the lockstep native code,
in one process of this tree, each result checked against the host's sums. What ctagen.preferred_reason decides
from for kernels with warp operations. The kernels are tests/cuda/emu_reduce.cu's:
- k5<256>: a shared-memory tree unrolled down to 64, then the first warp's shfl_down (1M ints);
- k7<256>: a grid-stride sum, warp sums with shfl_down, then the warp sums under a ballot's mask (4M ints, 64 CTAs);
- k11_tiles<32> and <4>: cg::reduce over tiled_partition (shfl with a width; no barrier; 1M ints).

    python bench/emu_warp_modes_bench.py [--launches N] [--reps N]

Modes: "CTA" runs every eligible kernel a CTA at a time (ctagen.preferred_reason ignored), "default" is what the
emulator does, "lockstep" is PYVGPU_EMU_CTAGEN=0 PYVGPU_EMU_THREADGEN=0 (the native runs). The modes alternate
--reps times; the best of --launches launches is each figure (process CPU time), the median over the repetitions
is printed.
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

MODES = ("CTA", "default", "lockstep")
N_TREE, N_GRID = 1 << 20, 1 << 22


def _names(mod: EmuModule) -> dict[str, str]:
    out = {}
    for k in mod.kernels:
        base = k.split("P")[0].lstrip("_Z0123456789").split("I")[0]
        tmpl = k.split("ILj")[1].split("E")[0] if "ILj" in k else ""
        out[f"{base}<{tmpl}>" if tmpl else base] = k
    return out


def _measure(mode: str, launches: int) -> dict[str, float]:
    preferred = ctagen.preferred_reason
    if mode == "CTA":
        ctagen.preferred_reason = lambda kernel, threadgen_on=True: None
    try:
        limits = EmuLimits(native="on", threadgen=mode != "lockstep", ctagen=mode != "lockstep")
        mem = DeviceMemory(1 << 40, 1 << 28)
        mod = EmuModule.load(ptx_of(str(ROOT / "tests" / "cuda" / "emu_reduce.cu")), mem, limits=limits)
        k = _names(mod)
        data = (((np.arange(N_GRID, dtype=np.uint64) * 2654435761) >> 24) & 0xFF).astype(np.int32) - 128
        src, dst = mem.alloc(4 * N_GRID), mem.alloc(4 * N_GRID)
        mem.write(src, data.tobytes())
        out = {}

        def total(n_out: int) -> int:
            return int(np.frombuffer(bytes(mem.read(dst, 4 * n_out)), np.int32).astype(np.int64).sum())

        blocks = N_TREE // 512
        out["k5<256>, 1M ints"] = best_cpu_seconds(launches, lambda: mod.launch(
            k["k5<256>"], (blocks, 1, 1), (256, 1, 1), 1024, struct.pack("<QQI", src, dst, N_TREE)))
        if total(blocks) != int(data[:N_TREE].astype(np.int64).sum()):
            raise SystemExit(f"{mode}: k5: wrong sum")
        out["k7<256>, 4M ints"] = best_cpu_seconds(launches, lambda: mod.launch(
            k["k7<256>"], (64, 1, 1), (256, 1, 1), 36, struct.pack("<QQI", src, dst, N_GRID)))
        if total(64) != int(data.astype(np.int64).sum()):
            raise SystemExit(f"{mode}: k7: wrong sum")
        for g in (32, 4):
            out[f"k11_tiles<{g}>, 1M ints"] = best_cpu_seconds(launches, lambda g=g: mod.launch(
                k[f"k11_tiles<{g}>"], (N_TREE // 128, 1, 1), (128, 1, 1), 0, struct.pack("<QQI", src, dst, N_TREE)))
            got = np.frombuffer(bytes(mem.read(dst, 4 * N_TREE // g)), np.int32)
            if not np.array_equal(got, data[:N_TREE].reshape(-1, g).sum(1)):
                raise SystemExit(f"{mode}: k11_tiles<{g}>: wrong sums")
        return out
    finally:
        ctagen.preferred_reason = preferred


def main() -> None:
    alternate_modes(MODES, _measure, 4, "lockstep", "CTA")


if __name__ == "__main__":
    main()
