"""Emulated GPU: CPU seconds per launch of the hot kernels of issue 19 part 6's samples, in one process
(EmuModule.launch of the kernel's PTX, native code on, after a first launch that builds it), so that a change of
the interpreter shows without a whole program's start-up, copies and compile time around it. Each result is
checked (the scan against NumPy's, every element of addFactor's array).

    python bench/emu_sample_kernels_bench.py [--baseline DIR] [--reps N] [--launches N]

Kernels (bench/cuda/, compiled to sm_75 PTX): scan_batches' scanTiles over 6.5M uints (1.7M threads, tile sizes 64
and 1024: 4 and 8 barrier-separated steps) and simple_streams' addFactor over 4M ints (5 load-add-store steps).
--baseline DIR measures another tree too (e.g. `git archive f7009e1 | tar -x -C DIR`): each tree runs in its own
process with its `daemon` and root directories first on the path, the two alternating --reps times; the best of
--launches launches is each run's figure (process CPU time: the chunks' threads included), the median of the runs
is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCAN_N = 6815744
STREAM_N = 1 << 22


def best_cpu_seconds(launches: int, launch) -> float:
    """The least CPU time of `launches` calls of launch(), after one that builds the native code."""
    launch()
    times = []
    for _ in range(launches):
        t = time.process_time()
        launch()
        times.append(time.process_time() - t)
    return min(times)


def alternate_modes(modes: tuple[str, ...], measure, default_launches: int, base: str, against: str) -> None:
    """The modes' CPU seconds per launch (measure(mode, launches) -> {kernel: seconds}), alternating --reps times so
    that a change of load hits every mode; prints each repetition, then the medians and base / against per kernel
    (the main of the benchmarks that compare an emulator's paths in one process)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--launches", type=int, default=default_launches)
    args = ap.parse_args()
    res: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
    for _ in range(args.reps):
        for m in modes:
            for k, v in measure(m, args.launches).items():
                res[m].setdefault(k, []).append(v)
            print(f"  [{m}] " + ", ".join(f"{k}: {vs[-1]:.3f} s" for k, vs in res[m].items()), flush=True)
    print(f"\nload average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'kernel':<26}" + "".join(f"{m + ' CPU s':>22}" for m in modes) + f"  {base} / {against}")
    for k in res[base]:
        med = {m: statistics.median(res[m][k]) for m in modes}
        print(f"{k:<26}" + "".join(f"{med[m]:>22.3f}" for m in modes) + f"  {med[base] / med[against]:.2f}x")


def _worker(launches: int) -> dict[str, float]:
    sys.path[:0] = [str(ROOT / "tests")]
    import numpy as np  # noqa: PLC0415
    from harness import ptx_of  # noqa: PLC0415
    from pyvgpu_daemon.emu.limits import EmuLimits  # noqa: PLC0415
    from pyvgpu_daemon.emu.memory import DeviceMemory  # noqa: PLC0415
    from pyvgpu_daemon.emu.module import EmuModule  # noqa: PLC0415

    def best(launch) -> float:
        return best_cpu_seconds(launches, launch)

    out = {}
    mem = DeviceMemory(1 << 40, 1 << 28)
    scan = EmuModule.load(ptx_of(str(ROOT / "bench" / "cuda" / "scan_batches.cu")), mem,
                          limits=EmuLimits(native="on"))
    src, dst = mem.alloc(4 * SCAN_N), mem.alloc(4 * SCAN_N)
    data = np.random.default_rng(1).integers(0, 256, SCAN_N, dtype=np.uint32)
    mem.write(src, data.tobytes())
    for size in (64, 1024):
        def launch(size=size):
            scan.launch("_Z9scanTilesP5uint4PKS_j", (SCAN_N // 1024, 1, 1), (256, 1, 1), 0,
                        struct.pack("<QQI", dst, src, size))
        out[f"scanTiles, tiles of {size}"] = best(launch)
        got = np.frombuffer(bytes(mem.read(dst, 4 * SCAN_N)), np.uint32).reshape(-1, size)
        d = data.reshape(-1, size)
        if not np.array_equal(got, np.cumsum(d, axis=1, dtype=np.uint32) - d):
            raise SystemExit(f"scanTiles of {size}: wrong result")
    streams = EmuModule.load(ptx_of(str(ROOT / "bench" / "cuda" / "simple_streams.cu")), mem,
                             limits=EmuLimits(native="on"))
    arr, factor = mem.alloc(4 * STREAM_N), mem.alloc(4)
    mem.write(factor, struct.pack("<i", 5))
    mem.fill(arr, 0, 4 * STREAM_N)

    def add_factor():
        streams.launch("_Z9addFactorPiPKii", (STREAM_N // 512, 1, 1), (512, 1, 1), 0,
                       struct.pack("<QQi", arr, factor, 5))
    out["addFactor, 4M ints"] = best(add_factor)
    got = np.frombuffer(bytes(mem.read(arr, 4 * STREAM_N)), np.int32)
    if not (got == 25 * (launches + 1)).all():
        raise SystemExit("addFactor: wrong result")
    return out


def _run(tree: Path | None, launches: int) -> dict[str, float]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree / "daemon"), str(tree)])
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "daemon"), str(ROOT)])
    proc = subprocess.run([sys.executable, __file__, "--worker", "--launches", str(launches)], env=env,
                          capture_output=True, text=True, check=False, cwd="/" if tree is not None else None)
    if proc.returncode != 0:
        raise SystemExit(f"worker ({tree or 'this tree'}) failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.launches)))
        return
    trees = {"this tree": None} if args.baseline is None else {"baseline": args.baseline.resolve(), "this tree": None}
    res: dict[str, dict[str, list[float]]] = {lb: {} for lb in trees}
    for _ in range(args.reps):
        for label, tree in trees.items():          # alternating, so a change of load hits both
            for k, v in _run(tree, args.launches).items():
                res[label].setdefault(k, []).append(v)
            print(f"  [{label}] " + ", ".join(f"{k}: {v:.3f} s" for k, v in
                                              ((k, vs[-1]) for k, vs in res[label].items())), flush=True)
    print(f"\nload average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'kernel':<28}" + "".join(f"{lb + ' CPU s':>18}" for lb in trees) + ("  ratio" if len(trees) > 1 else ""))
    for k in res["this tree"]:
        cols = "".join(f"{statistics.median(res[lb][k]):>18.3f}" for lb in trees)
        ratio = f"  {statistics.median(res['baseline'][k]) / statistics.median(res['this tree'][k]):.2f}x" \
            if len(trees) > 1 else ""
        print(f"{k:<28}{cols}{ratio}")


if __name__ == "__main__":
    main()
