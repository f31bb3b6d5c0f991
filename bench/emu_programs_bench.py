"""Emulated-GPU speed on whole programs: CUDA programs of the kinds that were too slow (issue 13 part 4), built with
`nvcc -cudart shared`, run unmodified through libvcudart against a fresh emulated-GPU daemon, timed by wall clock
(start of the program to its exit, so module load, copies and every launch count).

    python bench/emu_programs_bench.py [--quick] [--reps N] [--program NAME] \\
        [--daemon-python PYTHON] [--daemon-path DIR ...] [--env KEY=VALUE ...]

Programs (bench/cuda/): black_scholes (4M options x 512 launches, the default of NVIDIA's BlackScholes sample) and
streams_overlap (16M ints, 4 streams, 10 repetitions, as NVIDIA's simpleStreams). --quick runs smaller sizes.
--daemon-python/--daemon-path run the daemon from another interpreter or tree (e.g. an older checkout's
`daemon` and repository root, for before/after comparisons); --env sets daemon environment variables (e.g.
PYVGPU_EMU_NATIVE=off).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import harness  # noqa: E402

PROGRAMS = {
    "black_scholes": (("4000000", "512"), ("4000000", "16")),
    "streams_overlap": (("16777216", "4", "10"), ("4194304", "4", "2")),
}


def run_once(exe: Path, args: tuple[str, ...], workdir: Path, python: str | None, path: list[str],
             env: dict[str, str]) -> tuple[float, str]:
    saved = harness.sys.executable
    denv = dict(env)
    if path:
        denv["PYTHONPATH"] = os.pathsep.join(path)
    try:
        if python:
            harness.sys.executable = python
        d = harness.start_daemon(workdir, env=denv, cwd=Path("/") if path else None)
    finally:
        harness.sys.executable = saved
    try:
        t0 = time.perf_counter()
        proc = harness.run_cuda(exe, [d], *args, timeout=3600)
        secs = time.perf_counter() - t0
    finally:
        d.stop()
    last = [ln for ln in proc.stdout.splitlines() if ln and not ln.startswith("PASS")]
    return secs, (last[-1] if last else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--program", action="append", choices=list(PROGRAMS))
    ap.add_argument("--daemon-python")
    ap.add_argument("--daemon-path", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    args = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in args.env)
    workdir = ROOT / "build" / "bench-programs"
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"{'program':<18} {'arguments':<24} {'best s':>8} {'median s':>9}  output")
    for name in args.program or list(PROGRAMS):
        exe = harness.build_cuda(ROOT / "bench" / "cuda" / f"{name}.cu")
        pargs = PROGRAMS[name][1 if args.quick else 0]
        times, out = [], ""
        for _ in range(args.reps):
            secs, out = run_once(exe, pargs, workdir, args.daemon_python, args.daemon_path, env)
            times.append(secs)
        times.sort()
        print(f"{name:<18} {' '.join(pargs):<24} {times[0]:>8.1f} {times[len(times) // 2]:>9.1f}  {out}")


if __name__ == "__main__":
    main()
