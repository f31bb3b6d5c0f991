"""Emulated GPU: what a launch costs outside its kernel's native code, in one process (no client, no frames):
scan_batches' kernels (bench/cuda/scan_batches.cu) at the program's default size (6.5M uints: scanTiles and
addOffsets 6,656 CTAs of 256 threads, 26 chunks; scanTotals one chunk), each launched --launches times in a row as
the program does. Per launch: process CPU, wall, and the CPU its chunks spent in the kernel's native code
(threadgen.ThreadCode._run_chunk, timed per thread); "outside" is CPU minus native. --tree DIR runs another tree's
daemon package (e.g. a `git archive` of the base) for a before/after in one invocation; --threads sets
PYVGPU_EMU_THREADS (chunk threads); --tiles the scanTiles tile sizes measured (4 and 1024 unless given: the program
runs every power of two from 4 to 1024).

    python bench/emu_launch_fixed_bench.py [--launches N] [--reps N] [--tree DIR] [--threads N] [--elements N] \
        [--tiles 4,64,..]

--elements sets the scan's size (a multiple of 8192): 655360 makes launches of 1-2 ms (640 CTAs, 3 chunks).
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(tree: Path, launches: int, N: int, tiles: list[int]) -> dict[str, tuple[float, float, float]]:
    sys.path[:0] = [str(tree / "daemon"), str(tree), str(ROOT / "tests")]
    import numpy as np  # noqa: PLC0415

    from harness import ptx_of  # noqa: PLC0415
    from pyvgpu_daemon.emu.limits import EmuLimits  # noqa: PLC0415
    from pyvgpu_daemon.emu.memory import DeviceMemory  # noqa: PLC0415
    from pyvgpu_daemon.emu.module import EmuModule  # noqa: PLC0415
    from pyvgpu_daemon.emu.translator import threadgen  # noqa: PLC0415

    native: list[float] = []
    inner = threadgen.ThreadCode._run_chunk

    def timed(self, *a):
        t = time.thread_time()
        try:
            return inner(self, *a)
        finally:
            native.append(time.thread_time() - t)

    threadgen.ThreadCode._run_chunk = timed
    mem = DeviceMemory(1 << 40, 1 << 28)
    mod = EmuModule.load(ptx_of(str(ROOT / "bench" / "cuda" / "scan_batches.cu")), mem,
                         limits=EmuLimits(native="on"))
    data = np.random.default_rng(1).integers(0, 256, N, dtype=np.uint32)
    src, dst, buf = mem.alloc(4 * N), mem.alloc(4 * N), mem.alloc(4 * (N // 1024 + 1))
    mem.write(src, data.tobytes())
    ntiles = N // 1024
    kernels = {
        **{f"scanTiles, tiles of {t}": ("_Z9scanTilesP5uint4PKS_j", (ntiles, 1, 1), struct.pack("<QQI", dst, src, t))
           for t in tiles},
        "scanTotals": ("_Z10scanTotalsPjPKjS1_jj", (-(-ntiles // 256), 1, 1),
                                 struct.pack("<QQQII", buf, dst, src, ntiles, 8)),
        "addOffsets": ("_Z10addOffsetsP5uint4PKj", (ntiles, 1, 1), struct.pack("<QQ", dst, buf)),
    }
    out = {}
    for label, (name, grid, params) in kernels.items():
        mod.launch(name, grid, (256, 1, 1), 0, params)        # (builds the native code)
        native.clear()
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(launches):
            mod.launch(name, grid, (256, 1, 1), 0, params)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        out[label] = (cpu / launches, wall / launches, sum(native) / launches)
    kernels["scanTiles, tiles of 1024"] = ("_Z9scanTilesP5uint4PKS_j", (ntiles, 1, 1),
                                           struct.pack("<QQI", dst, src, 1024))
    for label in ("scanTiles, tiles of 1024", "scanTotals", "addOffsets"):     # one scan of arrays of 8K, checked
        name, grid, params = kernels[label]
        mod.launch(name, grid, (256, 1, 1), 0, params)
    got = np.frombuffer(bytes(mem.read(dst, 4 * N)), np.uint32).reshape(-1, 8192)
    d = data.reshape(-1, 8192)
    if not np.array_equal(got, np.cumsum(d, axis=1, dtype=np.uint32) - d):
        raise SystemExit("wrong result")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tree", type=Path, action="append", help="a tree to measure (repeatable; default: this one)")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--elements", type=int, default=6815744)
    ap.add_argument("--tiles", default="4,1024", help="scanTiles' tile sizes, comma-separated")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        for label, v in measure(a.child, a.launches, a.elements, [int(t) for t in a.tiles.split(",")]).items():
            print(f"{label}\t{v[0]}\t{v[1]}\t{v[2]}")
        return
    trees = [t.resolve() for t in a.tree or [ROOT]]
    env = dict(os.environ)
    if a.threads:
        env["PYVGPU_EMU_THREADS"] = str(a.threads)
    env.pop("PYTHONPATH", None)
    res: dict = {}
    for _ in range(a.reps):
        for t in trees:                          # alternating: a change of load hits every tree
            p = subprocess.run([sys.executable, __file__, "--child", str(t), "--launches", str(a.launches),
                                "--elements", str(a.elements), "--tiles", a.tiles],
                               capture_output=True, text=True, env=env, check=True)
            for line in p.stdout.splitlines():
                label, *v = line.split("\t")
                res.setdefault((str(t), label), []).append(tuple(map(float, v)))
    print(f"load average {os.getloadavg()[0]:.1f}; {a.elements} elements, {a.threads or 'default'} chunk threads; "
          f"ms per launch, median of {a.reps} runs of {a.launches} launches")
    print(f"{'tree':<28} {'kernel':<26} {'CPU':>7} {'wall':>7} {'native':>7} {'outside':>8}")
    for (t, label), vals in res.items():
        cpu, wall, nat = (statistics.median(v[k] for v in vals) * 1e3 for k in range(3))
        print(f"{t[-28:]:<28} {label:<26} {cpu:7.2f} {wall:7.2f} {nat:7.2f} {cpu - nat:8.2f}")


if __name__ == "__main__":
    main()
