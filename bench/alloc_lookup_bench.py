"""The client's address lookup (csrc/core/registry.c: pv_alloc_find / pv_alloc_find_device): what it costs per call
on a framework-sized table, and how many lookups each API call makes.

    python bench/alloc_lookup_bench.py [--rounds 15] [--calls 200] [--json out.json]

1. ns per lookup (bench/cuda/alloc_lookup.c against the checkout's libpvcore): 1,000 and 10,000 allocations of mixed
   sizes (512 B to 20 MiB) with small gaps, below them nothing, a 1 GiB entry or a 60 GiB one (JAX preallocates 75%
   of an 80 GB GPU as one pool), and 64 pinned host buffers; lookups of interior pointers (hit, hit_dev), of gaps
   (gap) and of pageable host memory just above the allocations (host: cudaMemcpy asks whether its host side is
   pinned, and misses, for every copy from malloc'd memory). The last column is each row against the same table
   without the large entry, side by side in this run: the lookup must not depend on the largest entry's size.
2. Lookups per call (bench/cuda/lookup_ops.cu through libvcudart against an emulated daemon, each lookup counted by
   an LD_PRELOAD shim, bench/cuda/lookup_count.c): each kind of call run `--calls` times and 0 times, the difference
   over the count.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT), str(ROOT / "daemon")]

from harness import build_cuda, cached_build, interposer_env, start_daemon  # noqa: E402
from pyvgpu import lib_path  # noqa: E402

SRC = Path(__file__).resolve().parent / "cuda"
BUILD = ROOT / "build" / "bench-lookup"
CC = shutil.which("cc") or shutil.which("gcc") or "cc"
GIB = 1 << 30
MODES = ("launch", "memset", "h2d_pageable", "h2d_pinned", "d2h_pageable", "d2d", "memcpy_default")


def per_lookup(rounds: int) -> list[dict]:
    core = lib_path("libpvcore.so")
    exe = cached_build(BUILD, "alloc_lookup", [SRC / "alloc_lookup.c", core],
                       lambda o: [CC, "-O2", "-o", str(o), str(SRC / "alloc_lookup.c"), f"-L{core.parent}",
                                  "-lpvcore", f"-Wl,-rpath,{core.parent}"])
    rows = []
    for n in (1000, 10000):
        base = None
        for big in (0, GIB, 60 * GIB):
            out = subprocess.run([str(exe), str(n), str(big), str(rounds)], capture_output=True, text=True,
                                 timeout=600, check=True).stdout
            row = json.loads(out)
            base = base or row
            row["vs_no_big"] = {k: row[k] / base[k] for k in ("hit_ns", "hit_dev_ns", "gap_ns", "host_ns")}
            rows.append(row)
    return rows


def per_call(calls: int) -> dict[str, dict[str, float]]:
    program = build_cuda(SRC / "lookup_ops.cu")
    counter = cached_build(BUILD, "lookup_count", [SRC / "lookup_count.c"],
                           lambda o: [CC, "-O2", "-shared", "-fPIC", "-o", str(o), str(SRC / "lookup_count.c"),
                                      "-ldl"])
    work = Path(tempfile.mkdtemp(prefix="lookup-bench-"))
    daemon = start_daemon(work)
    try:
        env = {**os.environ, **interposer_env([daemon])}
        env["LD_PRELOAD"] = f"{counter} {env['LD_PRELOAD']}"
        out: dict[str, dict[str, float]] = {}
        for mode in MODES:
            counts = []
            for n in (0, calls):
                path = work / f"{mode}-{n}.count"
                env["PYVGPU_LOOKUP_COUNT"] = str(path)
                proc = subprocess.run([str(program), mode, str(n)], env=env, capture_output=True, text=True,
                                      timeout=300)
                if proc.returncode != 0 or not path.exists():
                    raise RuntimeError(f"lookup_ops {mode} {n}: exit {proc.returncode}: {proc.stderr[-500:]}")
                counts.append(dict(line.split() for line in path.read_text().splitlines()))
            out[mode] = {k: (int(counts[1][k]) - int(counts[0][k])) / calls for k in counts[0]}
        return out
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15, help="timed passes of 4096 lookups per figure (median)")
    ap.add_argument("--calls", type=int, default=200, help="calls of each kind for the lookups-per-call count")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    rows = per_lookup(args.rounds)
    print("| allocations | large entry | hit ns | hit_dev ns | gap ns | host ns | host / without the large entry |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['allocations']} | {r['big'] // GIB} GiB | {r['hit_ns']} | {r['hit_dev_ns']} | {r['gap_ns']} | "
              f"{r['host_ns']} | {r['vs_no_big']['host_ns']:.2f} |")
    calls = per_call(args.calls)
    print("\n| call | pv_alloc_find per call | pv_alloc_find_device per call |")
    print("|---|---:|---:|")
    for mode, c in calls.items():
        print(f"| {mode} | {c['find']:.2f} | {c['find_device']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"per_lookup": rows, "per_call": calls}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
