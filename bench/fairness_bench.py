"""Sharing benchmark: fair time-sharing of one emulated GPU, the scheduler's cost to a session alone, and a
placement demonstration. Every tenant is an unmodified CUDA program (`bench/cuda/share.cu`, nvcc -cudart shared)
running through libvcudart against `python -m pyvgpu_daemon --backend emu`.

    python bench/fairness_bench.py [--quick] [--out results.json] [--baseline-checkout /path/to/other/checkout]
                                   [--only fairness,overhead,placement]

* fairness: 8 tenants on one emulated GPU for SECONDS: 7 `steady` (spin kernels of ~2 ms in batches of 8, a
  cudaDeviceSynchronize after each batch) and 1 flooder: the same kernel fire-and-forget with a synchronize only
  every 256 launches (`flood`), or 64 MiB device-to-device copies likewise (`dtod`, which the emulator runs in
  NumPy without holding the GIL). Between two status samples (every tenant started, none stopped) the daemon gives
  each tenant's device time and device ops. With the kernel flooder every tenant runs the same kernel, so its share
  of the kernels run is its share of the device's work, independent of the daemon's own accounting; fair share is
  weight / total weight. Configurations: fair, off (`--scheduling off`: no arbitration, the daemon before the
  scheduler), fair with one steady tenant at weight 3 (fair share 3/10), and the copy flooder fair and off.
* overhead: one session alone, the daemon with the scheduler (fair) against `--scheduling off`, and against another
  checkout's daemon when --baseline-checkout is given (e.g. main before the scheduler). Workloads: 5000 fire-and-forget
  4-byte memsets, 5000 empty launches, 1000 launch+synchronize round trips, 40 spin kernels. Rounds rotate the order
  of the daemons; medians of ROUNDS runs.
* placement: 4 emulated GPUs under different loads (two flooders; one flooder; idle; idle with memory held),
  `pyvgpu run -n 4 --memory 64M --explain` ranks them; then a probe program (40 spin kernels) runs on each GPU and
  its measured slowdown (vs alone) is printed next to the prediction.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from harness import NVCC, cached_build, start_daemon  # noqa: E402
from pyvgpu.client import Client  # noqa: E402

SRC = Path(__file__).resolve().parent / "cuda" / "share.cu"
BUILD = ROOT / "build" / "bench-share"
MiB = 1 << 20
STEADY_ITERS, BATCH = 64, 8


def build() -> Path:
    return cached_build(BUILD, "share", [SRC], lambda out: [NVCC, "-cudart", "shared", "-O3", "-o", str(out),
                                                            str(SRC)])


DAEMON_PIDS: dict[int, int] = {}          # port -> pid of the daemons this script started (CPU time)


def cpu_seconds(port: int) -> float:
    """User + system CPU time of the daemon on `port` so far (its exited threads included)."""
    fields = Path(f"/proc/{DAEMON_PIDS[port]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def daemon(workdir: Path, *extra: str, checkout: Path = ROOT):
    """A daemon of `checkout` (its pyvgpu and pyvgpu_daemon first on the path) on a free port; → port."""
    d = start_daemon(workdir, *extra, env={"PYTHONPATH": f"{checkout}:{checkout / 'daemon'}"}, cwd=checkout)
    DAEMON_PIDS[d.port] = d.proc.pid
    try:
        yield d.port
    finally:
        DAEMON_PIDS.pop(d.port, None)
        d.stop()


def lib() -> str:
    import pyvgpu
    return os.environ.get("PYVGPU_BENCH_LIB") or str(pyvgpu.lib_path())


def tenant(exe: Path, hosts: str, *args, weight: float | None = None, memory: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "LD_PRELOAD": lib(), "PYVGPU_HOSTS": hosts}
    if weight is not None:
        env["PYVGPU_WEIGHT"] = str(weight)
    if memory is not None:
        env["PYVGPU_MEMORY"] = memory
    return subprocess.Popen([str(exe), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def finish(p: subprocess.Popen, timeout: float = 600) -> dict[str, int]:
    out, err = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(p.args)} exited {p.returncode}: {err[-2000:]}")
    words = out.split()
    return {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)}


def run_alone(exe: Path, hosts: str, *args) -> dict[str, int]:
    return finish(tenant(exe, hosts, *args))


def sessions_by_pid(port: int) -> dict[int, dict]:
    with Client.connect("127.0.0.1", port, timeout=30) as c:
        st = c.status()
    return {s["pid"]: s["devices"][0] for s in st["sessions"] if not s["self"] and s["devices"]}


# ---------------------------------------------------------------------------------------------- fairness
FLOODS = {"kernels": ("flood", STEADY_ITERS), "dtod": ("dtod", 64 * MiB)}


def fairness_run(exe: Path, workdir: Path, seconds: float, scheduling: str, flood: str,
                 weights: list[float]) -> dict:
    """8 tenants at once; per tenant between two status samples: device time (daemon) and device ops run."""
    with daemon(workdir, "--scheduling", scheduling, "--emu-memory", "1G") as port:
        hosts = f"127.0.0.1:{port}"
        procs = [("steady", tenant(exe, hosts, "steady", seconds, STEADY_ITERS, BATCH, weight=weights[i]))
                 for i in range(7)]
        mode, arg = FLOODS[flood]
        procs.append((f"flood-{flood}", tenant(exe, hosts, mode, seconds, arg)))
        try:
            time.sleep(min(2.0, seconds * 0.25))
            t0, before = time.perf_counter(), sessions_by_pid(port)
            time.sleep(seconds * 0.5)
            t1, after = time.perf_counter(), sessions_by_pid(port)
            for _, p in procs:
                finish(p)
        finally:
            for _, p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    rows = []
    for kind, p in procs:
        b, a = before[p.pid], after[p.pid]
        rows.append({"kind": kind, "weight": a.get("weight", 1.0),
                     "device_s": a["device_seconds"] - b["device_seconds"], "ops": a["work_ops"] - b["work_ops"]})
    wsum = sum(r["weight"] for r in rows)
    total_dev = sum(r["device_s"] for r in rows)
    for r in rows:
        r["fair_share"] = r["weight"] / wsum
        r["device_of_fair"] = r["device_s"] / total_dev / r["fair_share"] if total_dev else 0.0
    out = {"scheduling": scheduling, "flood": flood, "weights": weights, "window_s": t1 - t0,
           "device_s_per_s": total_dev / (t1 - t0), "tenants": rows}
    steady = [r for r in rows if r["kind"] == "steady"]
    out["min_steady_device_of_fair"] = min(r["device_of_fair"] for r in steady)
    if flood == "kernels":
        # every tenant runs the same kernel: its share of the kernels run is its share of the device's work
        total_ops = sum(r["ops"] for r in rows)
        for r in rows:
            r["kernels_of_fair"] = r["ops"] / total_ops / r["fair_share"] if total_ops else 0.0
        out["min_steady_kernels_of_fair"] = min(r["kernels_of_fair"] for r in steady)
        out["flooder_kernels_of_fair"] = rows[-1]["kernels_of_fair"]
        out["kernels_per_s"] = total_ops / (t1 - t0)
    else:
        out["steady_kernels_per_s"] = [r["ops"] / (t1 - t0) for r in steady]
        out["flooder_copies_per_s"] = rows[-1]["ops"] / (t1 - t0)
    return out


def bench_fairness(exe: Path, workdir: Path, quick: bool, rounds: int, log, seconds: float | None = None) -> dict:
    seconds = seconds or (6.0 if quick else 12.0)
    configs = [("fair", "kernels", [1.0] * 7), ("off", "kernels", [1.0] * 7), ("fair", "kernels", [3.0] + [1.0] * 6),
               ("fair", "dtod", [1.0] * 7), ("off", "dtod", [1.0] * 7)]
    if quick:
        configs, rounds = configs[:2], 1
    runs = []
    for r in range(rounds):
        for scheduling, flood, weights in configs:
            run = fairness_run(exe, workdir, seconds, scheduling, flood, weights)
            run["round"] = r
            runs.append(run)
            what = (f"min steady kernels/fair {run['min_steady_kernels_of_fair']:.2f}, flooder "
                    f"{run['flooder_kernels_of_fair']:.2f}, weight-3 tenant {run['tenants'][0]['kernels_of_fair']:.2f}"
                    if flood == "kernels" else
                    f"steady kernels/s {min(run['steady_kernels_per_s']):.0f}..{max(run['steady_kernels_per_s']):.0f}"
                    f", flooder copies/s {run['flooder_copies_per_s']:.0f}")
            log(f"fairness {scheduling:4s} flood={flood:7s} w0={weights[0]:g}: {what}; min steady device time/fair "
                f"{run['min_steady_device_of_fair']:.2f}")
    return {"runs": runs, "seconds": seconds}


# ---------------------------------------------------------------------------------------------- overhead
WORKLOADS = (("memset x20000 (fire-and-forget)", ("ops", 20000, "memset")),
             ("empty launch x10000 (fire-and-forget)", ("ops", 10000, "launch")),
             ("launch+sync x3000 (round trips)", ("sync", 3000)),
             ("spin kernel x100", ("kernels", 100, STEADY_ITERS)))


def bench_overhead(exe: Path, workdir: Path, rounds: int, baseline: Path | None, log) -> dict:
    """One session alone: wall time of the program and CPU time of the daemon, per daemon configuration."""
    configs = [("fair", ROOT, ()), ("off", ROOT, ("--scheduling", "off"))]
    if baseline is not None:
        configs.append(("baseline", baseline, ()))
    names = [c[0] for c in configs]
    wall: dict[str, dict[str, list[float]]] = {w: {n: [] for n in names} for w, _ in WORKLOADS}
    cpu: dict[str, dict[str, list[float]]] = {w: {n: [] for n in names} for w, _ in WORKLOADS}
    with ExitStack() as stack:
        port_of = {name: stack.enter_context(daemon(workdir, *extra, checkout=co)) for name, co, extra in configs}
        for name in names:                                  # warm-up: module loads, first sessions
            for _, args in WORKLOADS:
                run_alone(exe, f"127.0.0.1:{port_of[name]}", *args)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for wname, args in WORKLOADS:
                for name in order:
                    c0 = cpu_seconds(port_of[name])
                    wall[wname][name].append(run_alone(exe, f"127.0.0.1:{port_of[name]}", *args)["ns"] / 1e9)
                    cpu[wname][name].append(cpu_seconds(port_of[name]) - c0)
    rows = []
    for wname, _ in WORKLOADS:
        mw = {n: statistics.median(v) for n, v in wall[wname].items()}
        mc = {n: statistics.median(v) for n, v in cpu[wname].items()}
        row = {"workload": wname, "wall_median_s": mw, "cpu_median_s": mc, "wall": wall[wname], "cpu": cpu[wname]}
        ref = "baseline" if "baseline" in mw else "off"
        row["reference"] = ref
        row["wall_vs_ref"] = mw["fair"] / mw[ref] - 1.0
        row["cpu_vs_ref"] = mc["fair"] / mc[ref] - 1.0
        rows.append(row)
        log(f"overhead {wname:40s} wall " + " ".join(f"{k} {v * 1e3:7.1f}" for k, v in mw.items())
            + " ms; daemon cpu " + " ".join(f"{k} {v * 1e3:7.1f}" for k, v in mc.items())
            + f" ms; fair vs {ref}: wall {row['wall_vs_ref']:+.1%}, cpu {row['cpu_vs_ref']:+.1%}")
    return {"rounds": rounds, "rows": rows}


# ---------------------------------------------------------------------------------------------- placement
def bench_placement(exe: Path, workdir: Path, log) -> dict:
    seconds = 40.0
    with daemon(workdir, "--emu-devices", "4", "--emu-memory", "256M") as port:
        h = f"127.0.0.1:{port}"
        probe = ("kernels", 30, STEADY_ITERS)
        run_alone(exe, f"{h}/2", *probe)                     # warm-up
        alone = statistics.median(run_alone(exe, f"{h}/2", *probe)["ns"] for _ in range(3)) / 1e9
        loads = [tenant(exe, f"{h}/0", "flood", seconds, STEADY_ITERS),
                 tenant(exe, f"{h}/0", "flood", seconds, STEADY_ITERS),
                 tenant(exe, f"{h}/1", "steady", seconds, STEADY_ITERS, 1),
                 tenant(exe, f"{h}/3", "hold", seconds, 220 * MiB)]
        try:
            time.sleep(4.0)
            env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'daemon'}"}
            placed = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", h, "-n", "3",
                                     "--memory", "64M", "--explain", "--", "sh", "-c", "echo $PYVGPU_HOSTS"],
                                    capture_output=True, text=True, env=env, timeout=120)
            explain = [ln.split("placement: ", 1)[1] for ln in placed.stderr.splitlines() if "placement: " in ln]
            measured = {}
            for dev in range(4):
                ts = [run_alone(exe, f"{h}/{dev}", *probe)["ns"] / 1e9 for _ in range(2)]
                measured[dev] = statistics.median(ts) / alone
        finally:
            for p in loads:
                p.kill()
                p.wait()
    for line in explain:
        log(f"placement: {line}")
    log(f"placement: chose {placed.stdout.strip()}; probe slowdown measured per GPU: "
        + ", ".join(f"GPU{d} {m:.2f}x" for d, m in measured.items()))
    return {"explain": explain, "chosen": placed.stdout.strip(), "probe_alone_s": alone,
            "measured_slowdown": measured}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    ap.add_argument("--out", type=Path, help="write the results as JSON")
    ap.add_argument("--rounds", type=int, default=7, help="overhead: runs per daemon and workload (default 7)")
    ap.add_argument("--fair-rounds", type=int, default=2, help="fairness: repetitions of every configuration")
    ap.add_argument("--seconds", type=float, help="fairness: length of each run (default 12; 6 with --quick)")
    ap.add_argument("--baseline-checkout", type=Path, help="overhead: also time this checkout's daemon")
    ap.add_argument("--only", default="fairness,overhead,placement", help="comma-separated parts to run")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))    # stop daemons and tenants on the way out
    exe = build()
    parts = set(args.only.split(","))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_before": os.getloadavg()}}
    import tempfile
    with tempfile.TemporaryDirectory(prefix="pyvgpu-share-") as tmp:
        workdir = Path(tmp)
        log = lambda m: print(m, flush=True)   # noqa: E731
        if "fairness" in parts:
            results["fairness"] = bench_fairness(exe, workdir, args.quick, args.fair_rounds, log, args.seconds)
        if "overhead" in parts:
            results["overhead"] = bench_overhead(exe, workdir, 2 if args.quick else args.rounds,
                                                 args.baseline_checkout, log)
        if "placement" in parts and not args.quick:
            results["placement"] = bench_placement(exe, workdir, log)
    results["machine"]["load_after"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
