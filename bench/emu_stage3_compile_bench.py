"""Emulated GPU: what stage 3's C (translator/ctagen.py, a CTA at a time) costs to compile, and what CUB's onesweep
kernel (radix_sort_thrust's sort time) costs a launch a CTA at a time against the lockstep native code.

    python bench/emu_stage3_compile_bench.py --compile-times [--opt=-O1 --opt='-O1 -fno-tree-ccp' ...] [--program PATH.cu ...]
    python bench/emu_stage3_compile_bench.py --launches N [--keys N] [--threads 1 2]

(--skip-over BYTES: larger sources are listed, not compiled; with PYTHONPATH set to another tree's daemon, that
tree's sources are measured: e.g. main before this step, whose onesweep source does not compile in 300 s.)
--compile-times: for every kernel of the programs (default: bench/cuda/radix_sort_thrust.cu and scan_batches.cu,
tests/cuda/emu_reduce.cu and emu_cta_talk.cu) that stage 3 takes, its CTA-at-a-time source (ctagen.kernel_source,
its compile-time cap lifted) is generated and compiled by the C compiler as emu/native.py does (native.FLAGS,
then ctagen.flags(source): the optimisation level its size gets, or each --opt level given), timed by the
compiler's user CPU seconds (what moves least with other jobs on a shared machine; wall seconds beside).
Columns: bytes, blocks, PTX instructions, bytes per instruction, region functions (ctasplit.py), seconds.
--launches: CPU seconds per launch of one onesweep pass (1M keys and values, bits 0..7; `--keys`) run a CTA at a
time and as the lockstep native code (PYVGPU_EMU_CTAGEN=0), best of N after one that builds the code, each result
checked against a stable sort by the digit; and CUB's histogram kernel (160 CTAs over the same keys) likewise.
With --threads, each path on each number of threads (EmuLimits.talk_threads: a talking kernel's CTAs run on that
many, translator/ctaatomic.py), the wall seconds of a launch beside its CPU seconds (best of N each; and the median).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "daemon"), str(ROOT), str(ROOT / "tests")]

import numpy as np  # noqa: E402

from harness import ptx_of  # noqa: E402
from pyvgpu_daemon.emu import native  # noqa: E402
from pyvgpu_daemon.emu.limits import EmuLimits  # noqa: E402
from pyvgpu_daemon.emu.memory import DeviceMemory  # noqa: E402
from pyvgpu_daemon.emu.module import EmuModule  # noqa: E402
from pyvgpu_daemon.emu.translator import ctagen  # noqa: E402
from pyvgpu_daemon.emu.translator.cgen import NoC  # noqa: E402
from pyvgpu_daemon.emu.translator.codegen import Codegen  # noqa: E402

SORT = ROOT / "bench" / "cuda" / "radix_sort_thrust.cu"
PROGRAMS = [str(SORT), str(ROOT / "bench" / "cuda" / "scan_batches.cu"), "emu_reduce.cu", "emu_cta_talk.cu"]
TILE = 11776                      # onesweep's tile: 256 threads x 46 keys
MODES = ("CTA", "lockstep native")  # (--launches: a CTA at a time, the lockstep native code)
JOBS = 2                          # (ctasplit.JOBS where this tree has it)


def _short(name: str) -> str:
    for key in ("Onesweep", "HistogramKernel", "ExclusiveSum", "scanTiles", "scanTotals", "addOffsets"):
        if key in name:
            return key
    return name[:40]


def _compile_seconds(source: str | list[str], flags: tuple[str, ...]) -> tuple[float, float]:
    """(the compiler's user CPU seconds, wall seconds) for a source or translation units (ctasplit.JOBS at once),
    built by native.load into an empty directory (not cached)."""
    units = ctagen.PRELUDE_C + source if isinstance(source, str) else [ctagen.PRELUDE_C + s for s in source]
    with tempfile.TemporaryDirectory() as d:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
        t = time.perf_counter()
        jobs = {} if isinstance(source, str) else {"jobs": JOBS}      # (a tree before native.load's jobs: one unit)
        if native.load(units, directory=Path(d), extra=flags, **jobs) is None:
            raise SystemExit("the build failed")
        return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before, time.perf_counter() - t


def _shown(flags: tuple[str, ...]) -> str:
    """An optimisation level's flags in a table: the -O level and how many -f flags follow it."""
    rest = [f for f in flags if not f.startswith("-O")]
    return " ".join([f for f in flags if f.startswith("-O")] or ["-O3"]) + (f" + {len(rest)} -f" if rest else "")


def compile_times(programs: list[str], opts: list[str], skip_over: int) -> None:
    # (this tree's cap, or the MAX_SOURCE_BYTES of a tree before it, lifted; such a tree has no ctagen.flags: -O3)
    ctagen.MAX_COMPILE_S = ctagen.MAX_SOURCE_BYTES = float("inf")
    tree_flags = getattr(ctagen, "flags", lambda source: ctagen.FLAGS)
    mem = DeviceMemory(1 << 40, 1 << 24)
    print("| kernel | bytes | blocks | instructions | bytes / instr | regions | flags | compiler user s | wall s |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for prog in programs:
        mod = EmuModule.load(ptx_of(prog), mem, limits=EmuLimits())
        for name in mod.kernels:
            k = mod.kernel(name)
            if ctagen.eligible_reason(k) is not None:
                continue
            try:
                src = ctagen.kernel_source(k, Codegen(k), "fn")[0]
            except NoC:
                continue
            text = src if isinstance(src, str) else "".join(src)
            ninstr = sum(len(b.instrs) + 1 for b in k.blocks)
            regions = text.count(") int64_t fn_r") - text.count("_fr *restrict F, int64_t res);")
            for opt in opts or [None]:
                flags = tree_flags(src) if opt is None else ctagen.FLAGS + tuple(opt.split())
                user, wall = _compile_seconds(src, flags) if len(text) <= skip_over else (None, None)
                took = "not run" if user is None else f"{user:.1f} | {wall:.1f}"
                print(f"| {Path(prog).stem}: {_short(name)} | {len(text)} | {len(k.blocks)} | {ninstr} | "
                      f"{len(text) / ninstr:.0f} | {regions} | {_shown(flags[1:])} | {took} |", flush=True)


def best_wall_cpu(launches: int, launch) -> tuple[float, float, float, float]:
    """(least wall seconds, least CPU seconds, their medians) of `launches` calls of launch(), after one that builds
    the code."""
    launch()
    walls, cpus = [], []
    for _ in range(launches):
        t, c = time.perf_counter(), time.process_time()
        launch()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), statistics.median(walls), statistics.median(cpus)


def launch_times(launches: int, n: int, modes: list[str], threads: list[int | None]) -> None:
    keys = np.random.default_rng(1).integers(0, 1 << 32, n, dtype=np.uint32)
    order = np.argsort(keys & 255, kind="stable")
    for mode, nthreads in [(m, t) for m in modes for t in threads]:
        mem = DeviceMemory(1 << 40, 1 << 28)
        kw = {} if nthreads is None else {"talk_threads": nthreads}
        mod = EmuModule.load(ptx_of(str(SORT)), mem, limits=EmuLimits(native="on", ctagen=mode == "CTA", **kw))
        one = next(k for k in mod.kernels if "Onesweep" in k)
        histo = next(k for k in mod.kernels if "HistogramKernel" in k)
        t = time.perf_counter()
        code = mod.kernel(one).native_make()
        built = time.perf_counter() - t
        if (mode == "CTA") != isinstance(code, ctagen.CtaCode):
            raise SystemExit(f"{mode}: onesweep did not take the path asked for ({type(code).__name__})")
        nb = -(-n // TILE)
        kin, kout, vin, vout = (mem.alloc(4 * n) for _ in range(4))
        look, ctrs, bout, bins = mem.alloc(4 * 256 * nb), mem.alloc(64), mem.alloc(8 * 256), mem.alloc(8 * 256)
        hist = mem.alloc(8 * 4 * 256)
        mem.write(kin, keys.tobytes())
        mem.write(vin, np.arange(n, dtype=np.uint32).tobytes())
        count = np.bincount(keys & 255, minlength=256).astype(np.uint64)
        mem.write(bins, (np.cumsum(count) - count).astype(np.uint64).tobytes())

        def onesweep():
            mem.write(look, bytes(4 * 256 * nb))
            mem.write(ctrs, bytes(64))
            mod.launch(one, (nb, 1, 1), (256, 1, 1), 0,
                       struct.pack("<8QiiiB", look, ctrs, bout, bins, kout, kin, vout, vin, n, 0, 8, 0))

        def histogram():
            mem.write(hist, bytes(8 * 4 * 256))
            mod.launch(histo, (160, 1, 1), (256, 1, 1), 0, struct.pack("<QQQiiB", hist, kin, n, 0, 32, 0))

        w1, s1, mw1, ms1 = best_wall_cpu(launches, onesweep)
        ok = bytes(mem.read(kout, 4 * n)) == keys[order].tobytes() and \
            bytes(mem.read(vout, 4 * n)) == order.astype(np.uint32).tobytes()
        w2, s2, _, _ = best_wall_cpu(launches, histogram)
        exp = np.stack([np.bincount((keys >> (8 * p)) & 255, minlength=256) for p in range(4)]).astype(np.uint64)
        ok = ok and (n % 4096 != 0 or bytes(mem.read(hist, 8 * 4 * 256)) == exp.tobytes())
        if not ok:
            raise SystemExit(f"{mode}: wrong result")
        on = "" if nthreads is None else f", {nthreads} thread{'s' if nthreads > 1 else ''}"
        print(f"{mode}{on}: onesweep {w1:.3f} s wall, {s1:.3f} s CPU per launch (median {mw1:.3f}, {ms1:.3f}; its code "
              f"built in {built:.1f} s), histogram {w2:.3f} s wall, {s2:.3f} s CPU", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile-times", action="store_true")
    ap.add_argument("--opt", action="append", default=[],
                    help="an optimisation level to time (repeatable), its flags split at spaces: --opt=-O2 "
                         "--opt='-O1 -fno-tree-ccp' (default: ctagen.flags')")
    ap.add_argument("--program", nargs="*", default=PROGRAMS)
    ap.add_argument("--skip-over", type=int, default=1 << 60, help="sources larger than this many bytes: not compiled")
    ap.add_argument("--launches", type=int, default=0)
    ap.add_argument("--keys", type=int, default=1 << 20)
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES,
                    help="--launches: the paths to time (default both)")
    ap.add_argument("--threads", nargs="*", type=int, default=[None],
                    help="--launches: EmuLimits.talk_threads to time each path on (default: EmuLimits')")
    a = ap.parse_args()
    if a.compile_times:
        compile_times(a.program, a.opt, a.skip_over)
    if a.launches:
        launch_times(a.launches, a.keys, a.modes, a.threads)
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
