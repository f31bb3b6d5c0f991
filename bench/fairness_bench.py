"""Sharing benchmark: fair time-sharing of one emulated GPU, the scheduler's cost to a session alone, and a
placement demonstration. Every tenant is an unmodified CUDA program (`bench/cuda/share.cu`, nvcc -cudart shared)
running through libvcudart against `python -m pyvgpu_daemon --backend emu`.

    python bench/fairness_bench.py [--quick] [--out results.json] [--baseline-checkout /path/to/other/checkout]
                                   [--only fairness,overhead,placement]

* fairness: 8 tenants on one emulated GPU for SECONDS: 7 `steady` (spin kernels of ~2 ms in batches of 8, a
  cudaDeviceSynchronize after each batch) and 1 flooder (`flood`: 4x longer kernels fire-and-forget, or `dtod`:
  64 MiB device-to-device copies, which the emulator runs in NumPy without holding the GIL). Between two status samples (after every tenant has started, before any stops) each
  tenant's device time comes from the daemon (device_seconds) and, independently of the daemon's accounting, from the
  work it got done (ops run x the alone time of one such op, measured alone first). Its fair share is 1/8 of the
  total; the figure is the smallest share / fair share of the 7 steady tenants. The same with `--scheduling off`
  (no arbitration: the daemon before the scheduler) and with one steady tenant at weight 3 (its fair share 3/10).
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
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = Path(__file__).resolve().parent / "cuda" / "share.cu"
BUILD = ROOT / "build" / "bench-share"
NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"
sys.path.insert(0, str(ROOT))
from pyvgpu.client import Client  # noqa: E402

MiB = 1 << 20
STEADY_ITERS, FLOOD_ITERS, BATCH = 64, 256, 8


def build() -> Path:
    digest = hashlib.sha256(SRC.read_bytes() + NVCC.encode()).hexdigest()[:16]
    out = BUILD / f"share-{digest}"
    if not out.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        proc = subprocess.run([NVCC, "-cudart", "shared", "-O3", "-o", str(tmp), str(SRC)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{proc.stderr}")
        tmp.rename(out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def daemon(workdir: Path, *extra: str, checkout: Path = ROOT):
    """A daemon of `checkout` (its pyvgpu and pyvgpu_daemon first on the path) on a free port; → port."""
    port = free_port()
    log = workdir / f"daemon-{port}.log"
    env = {**os.environ, "PYTHONPATH": f"{checkout}:{checkout / 'daemon'}"}
    proc = subprocess.Popen([sys.executable, "-m", "pyvgpu_daemon", "--host", "127.0.0.1", "--port", str(port),
                             "--backend", "emu", *extra], stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"daemon exited:\n{log.read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("daemon did not listen") from None
                time.sleep(0.05)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
FLOODS = {"kernels": ("flood", FLOOD_ITERS), "dtod": ("dtod", 64 * MiB)}


def alone_op_seconds(exe: Path, workdir: Path, reps: int = 3) -> dict[str, float]:
    """Alone device time of one op of each tenant kind (steady kernel, flood kernel, 64 MiB device copy): each kind
    runs alone for a second, `reps` times interleaved, and the daemon's device_seconds / ops of that session are
    taken; the median."""
    kinds = {"steady": ("steady", 1.5, STEADY_ITERS, BATCH),
             **{k: (mode, 1.5, arg) for k, (mode, arg) in FLOODS.items()}}
    got: dict[str, list[float]] = {k: [] for k in kinds}
    with daemon(workdir, "--emu-memory", "1G") as port:
        hosts = f"127.0.0.1:{port}"
        run_alone(exe, hosts, "kernels", 2, STEADY_ITERS)          # warm-up
        for _ in range(reps):
            for kind, args in kinds.items():
                p = tenant(exe, hosts, *args)
                time.sleep(0.5)
                b = sessions_by_pid(port).get(p.pid)
                time.sleep(0.8)
                a = sessions_by_pid(port)[p.pid]
                finish(p)
                if b is not None and a["ops"] > b["ops"]:
                    got[kind].append((a["device_seconds"] - b["device_seconds"]) / (a["ops"] - b["ops"]))
    return {k: statistics.median(v) for k, v in got.items()}


def fairness_run(exe: Path, workdir: Path, seconds: float, scheduling: str, flood: str, weights: list[float],
                 alone: dict[str, float]) -> dict:
    with daemon(workdir, "--scheduling", scheduling, "--emu-memory", "1G") as port:
        hosts = f"127.0.0.1:{port}"
        procs = []
        for i in range(7):
            procs.append(("steady", tenant(exe, hosts, "steady", seconds, STEADY_ITERS, BATCH, weight=weights[i])))
        mode, arg = FLOODS[flood]
        procs.append((flood, tenant(exe, hosts, mode, seconds, arg)))
        time.sleep(min(2.0, seconds * 0.25))
        t0, before = time.perf_counter(), sessions_by_pid(port)
        time.sleep(seconds * 0.5)
        t1, after = time.perf_counter(), sessions_by_pid(port)
        results = [(kind, p, finish(p)) for kind, p in procs]
    rows = []
    for kind, p, res in results:
        b, a = before[p.pid], after[p.pid]
        ops = a["ops"] - b["ops"]
        rows.append({"kind": kind, "weight": a.get("weight", 1.0), "device_s": a["device_seconds"] - b["device_seconds"],
                     "ops": ops, "work_s": ops * alone[kind]})
    total_dev = sum(r["device_s"] for r in rows)
    total_work = sum(r["work_s"] for r in rows)
    wsum = sum(r["weight"] for r in rows)
    for r in rows:
        fair = r["weight"] / wsum
        r["fair_share"] = fair
        r["device_share_of_fair"] = r["device_s"] / total_dev / fair if total_dev else 0.0
        r["work_share_of_fair"] = r["work_s"] / total_work / fair if total_work else 0.0
    steady = [r for r in rows if r["kind"] == "steady"]
    return {"scheduling": scheduling, "flood": flood, "weights": weights, "window_s": t1 - t0,
            "busy_fraction": total_dev / (t1 - t0), "work_fraction": total_work / (t1 - t0), "tenants": rows,
            "min_steady_device_of_fair": min(r["device_share_of_fair"] for r in steady),
            "min_steady_work_of_fair": min(r["work_share_of_fair"] for r in steady),
            "flooder_work_of_fair": next(r["work_share_of_fair"] for r in rows if r["kind"] != "steady")}


def bench_fairness(exe: Path, workdir: Path, quick: bool, log) -> dict:
    seconds = 6.0 if quick else 12.0
    alone = alone_op_seconds(exe, workdir)
    log(f"alone: steady kernel {alone['steady'] * 1e3:.2f} ms, flood kernel {alone['kernels'] * 1e3:.2f} ms, "
        f"64 MiB device copy {alone['dtod'] * 1e3:.2f} ms")
    runs = []
    configs = [("fair", "kernels", [1.0] * 7), ("off", "kernels", [1.0] * 7), ("fair", "dtod", [1.0] * 7),
               ("off", "dtod", [1.0] * 7), ("fair", "kernels", [3.0] + [1.0] * 6)]
    if quick:
        configs = configs[:2]
    for scheduling, flood, weights in configs:
        r = fairness_run(exe, workdir, seconds, scheduling, flood, weights, alone)
        runs.append(r)
        log(f"fairness {scheduling:4s} flood={flood:7s} weights={weights[0]:g},1..: min steady share/fair "
            f"{r['min_steady_work_of_fair']:.2f} (work) {r['min_steady_device_of_fair']:.2f} (device time), "
            f"flooder {r['flooder_work_of_fair']:.2f}")
    return {"alone_op_s": alone, "runs": runs, "seconds": seconds}


# ---------------------------------------------------------------------------------------------- overhead
WORKLOADS = (("memset x5000 (fire-and-forget)", ("ops", 5000, "memset")),
             ("empty launch x5000 (fire-and-forget)", ("ops", 5000, "launch")),
             ("launch+sync x1000 (round trips)", ("sync", 1000)),
             ("spin kernel x40", ("kernels", 40, STEADY_ITERS)))


def bench_overhead(exe: Path, workdir: Path, rounds: int, baseline: Path | None, log) -> dict:
    configs = [("fair", ROOT, ()), ("off", ROOT, ("--scheduling", "off"))]
    if baseline is not None:
        configs.append(("baseline", baseline, ()))
    samples: dict[str, dict[str, list[float]]] = {w: {c[0]: [] for c in configs} for w, _ in WORKLOADS}
    with contextmanager_stack([daemon(workdir, *extra, checkout=co) for _, co, extra in configs]) as ports:
        hosts = {name: f"127.0.0.1:{port}" for (name, _, _), port in zip(configs, ports)}
        for name in hosts:                                  # warm-up: module loads, first sessions
            for _, args in WORKLOADS:
                run_alone(exe, hosts[name], *args)
        for r in range(rounds):
            order = [c[0] for c in configs]
            order = order[r % len(order):] + order[:r % len(order)]
            for wname, args in WORKLOADS:
                for name in order:
                    samples[wname][name].append(run_alone(exe, hosts[name], *args)["ns"] / 1e9)
    rows = []
    for wname, _ in WORKLOADS:
        med = {name: statistics.median(v) for name, v in samples[wname].items()}
        row = {"workload": wname, "median_s": med, "samples": samples[wname],
               "fair_vs_off": med["fair"] / med["off"] - 1.0}
        if "baseline" in med:
            row["fair_vs_baseline"] = med["fair"] / med["baseline"] - 1.0
        rows.append(row)
        log(f"overhead {wname:40s} " + "  ".join(f"{k} {v * 1e3:8.1f} ms" for k, v in med.items())
            + f"  fair/off {row['fair_vs_off']:+.1%}"
            + (f"  fair/baseline {row['fair_vs_baseline']:+.1%}" if "fair_vs_baseline" in row else ""))
    return {"rounds": rounds, "rows": rows}


@contextmanager
def contextmanager_stack(cms):
    from contextlib import ExitStack
    with ExitStack() as stack:
        yield [stack.enter_context(cm) for cm in cms]


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
    ap.add_argument("--baseline-checkout", type=Path, help="overhead: also time this checkout's daemon")
    ap.add_argument("--only", default="fairness,overhead,placement", help="comma-separated parts to run")
    args = ap.parse_args()
    exe = build()
    parts = set(args.only.split(","))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_before": os.getloadavg()}}
    import tempfile
    with tempfile.TemporaryDirectory(prefix="pyvgpu-share-") as tmp:
        workdir = Path(tmp)
        log = lambda m: print(m, flush=True)   # noqa: E731
        if "fairness" in parts:
            results["fairness"] = bench_fairness(exe, workdir, args.quick, log)
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
