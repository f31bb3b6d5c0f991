"""Small operations through the daemon's frame path, compiled against Python, against raw C TCP (issue 22 part 5).

    PYTHONPATH=$PWD:$PWD/daemon python bench/smallops_bench.py [--rounds 4] [--iters 2000] [--step 10000] [--out F]
                                                              [--baseline DIR]

Three servers side by side in one run, on the same loopback: an emulated-GPU daemon with the compiled frame path
(PYVGPU_DAEMON_COMPILED=1), one forced to the Python path (=0), and bench/cuda/rawtcp.c; with --baseline DIR, a
fourth: the compiled daemon of another checkout's Python sources (e.g. main before a change: `git archive main | tar
-x -C DIR`), run with this build's libraries (the frame path's library must match its spec). Each round runs every
measurement against each of them, the order rotating by round, so the shared machine's load shifts all alike;
medians (rates) and percentiles (latencies) over all rounds. Client: bench/cuda/bandwidth.cu through libvcudart.

* sync call: cudaMemGetInfo and cudaStreamQuery round trips, p50 / p99, against a 32-byte raw ping-pong;
* retired per second (enqueue plus the final cudaDeviceSynchronize): empty launches `<<<1,1>>>`, cudaMemsetAsync of
  4 bytes, cudaEventRecord, against the same number of 48-byte raw frames and one ping;
* a framework's step: `--step` tiny launches with an event record and a stream wait after every second one,
  retired per second, as a fraction of the launch-only rate of the same daemon;
* the daemon's CPU time per op (/proc/PID/stat over the fire-and-forget runs, launches, memsets, event records and
  the step's, every op sent counted), and the frames the compiled path took (STATUS "frame_path").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interposer_env, start_daemon, stop_process  # noqa: E402
from remoting_bench import FF_FRAME, PING, Servers, build, cpu_seconds, pct, run_lines  # noqa: E402

from pyvgpu import lib_path  # noqa: E402
from pyvgpu.client import Client  # noqa: E402
from pyvgpu.protocol import ENV_DAEMON_COMPILED  # noqa: E402

PATHS = ("compiled", "python")
BASELINE = "baseline"


def frame_path(port: int) -> dict:
    with Client.connect("127.0.0.1", port) as c:
        return c.status()["frame_path"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="rounds (each: every measurement on every server)")
    ap.add_argument("--iters", type=int, default=2000, help="calls per latency run and ops per fire-and-forget run")
    ap.add_argument("--step", type=int, default=10000, help="launches of the framework-step run")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--baseline", type=Path, help="a checkout whose compiled daemon runs side by side (e.g. main)")
    opts = ap.parse_args(argv)
    cuda, raw_bin = build()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        daemons = {"compiled": start_daemon(work, env={ENV_DAEMON_COMPILED: "1"}),
                   "python": start_daemon(work, env={ENV_DAEMON_COMPILED: "0"})}
        if opts.baseline:
            base = opts.baseline.resolve()
            daemons[BASELINE] = start_daemon(work, cwd=base, env={
                ENV_DAEMON_COMPILED: "1", "PYVGPU_LIB": str(lib_path()),
                "PYTHONPATH": os.pathsep.join([str(base), str(base / "daemon")])})
        raws = Servers(raw_bin, 0, work)
        try:
            raw_port = raws._start_raw(raw_bin, work)
            res = measure(cuda, raw_bin, daemons, raw_port, opts)
            res["frame_path"] = {k: frame_path(d.port) for k, d in daemons.items()}
        finally:
            for d in daemons.values():
                d.stop()
            for p in raws.raw_procs:
                stop_process(p, group=True)
    print(report(res, opts))
    if opts.out:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(res, indent=1))
    return 0


def measure(cuda: Path, raw_bin: Path, daemons: dict, raw_port: int, opts) -> dict:
    paths = list(daemons)
    lat: dict[str, dict[str, list[int]]] = {k: {"meminfo": [], "streamquery": []} for k in paths}
    ff: dict[str, dict[str, list[float]]] = {k: {"kernel": [], "memset4": [], "event": [], "step": []} for k in paths}
    cpu: dict[str, list[float]] = {k: [] for k in paths}
    raw_ping: list[int] = []
    raw_ff: list[float] = []

    def pv(path: str, *args) -> dict[str, list[int]]:
        return run_lines([str(cuda), *map(str, args)], env={**os.environ, **interposer_env([daemons[path]])})

    def run(who: str) -> None:
        if who == "raw":
            raw_ping.extend(run_lines([str(raw_bin), "client", str(raw_port), "ping", str(PING), str(opts.iters)])["bw"])
            enq, sync = run_lines([str(raw_bin), "client", str(raw_port), "ff", str(FF_FRAME), str(opts.iters)])["ff"]
            raw_ff.append(opts.iters / ((enq + sync) / 1e9))
            return
        out = pv(who, "lat", opts.iters)
        for k in lat[who]:
            lat[who][k] += out[k]
        pid = daemons[who].proc.pid
        c0 = cpu_seconds(pid)
        out = pv(who, "launch", opts.iters)
        for k in ("kernel", "memset4", "event"):
            enq, sync = out[k]
            ff[who][k].append(opts.iters / ((enq + sync) / 1e9))
        enq, sync = pv(who, "step", opts.step)["step"]
        ff[who]["step"].append(opts.step / ((enq + sync) / 1e9))
        # over both fire-and-forget runs: /proc's clock ticks (10 ms) are a few % of their CPU, not a quarter
        cpu[who].append((cpu_seconds(pid) - c0) / (3 * opts.iters + 2 * opts.step))

    order = [*paths, "raw"]
    for r in range(opts.rounds):
        k = r % len(order)
        for who in order[k:] + order[:k]:
            run(who)
    rp50, rp99 = pct(raw_ping, 50) / 1e3, pct(raw_ping, 99) / 1e3
    res: dict = {"rounds": opts.rounds, "iters": opts.iters, "step": opts.step,
                 "raw": {"ping_p50_us": rp50, "ping_p99_us": rp99, "ff_completed_per_s": statistics.median(raw_ff)}}
    for who in paths:
        res[who] = {
            **{f"{k}_p50_us": pct(v, 50) / 1e3 for k, v in lat[who].items()},
            **{f"{k}_p99_us": pct(v, 99) / 1e3 for k, v in lat[who].items()},
            **{f"{k}_per_s": statistics.median(v) for k, v in ff[who].items()},
            "cpu_us_per_op": statistics.median(cpu[who]) * 1e6}
    return res


def report(res: dict, opts) -> str:
    raw = res["raw"]
    c, p = res["compiled"], res["python"]
    b = res.get(BASELINE)
    base_cols = " baseline (compiled) | compiled / baseline |" if b else ""
    lines = [f"rounds {res['rounds']}, {res['iters']} calls/ops per run, step of {res['step']} launches",
             f"| figure | compiled | Python | compiled / Python |{base_cols} raw C TCP | compiled / raw | target |",
             "|---|---:|---:|---:|" + ("---:|---:|" if b else "") + "---:|---:|---|"]

    def row(what: str, key: str, fmt: str, raw_v: str = "", vs_raw: str = "", target: str = "") -> str:
        x, y = c[key], p[key]
        mid = f" {format(b[key], fmt)} | {x / b[key]:.2f} |" if b else ""
        return f"| {what} | {format(x, fmt)} | {format(y, fmt)} | {x / y:.2f} |{mid} {raw_v} | {vs_raw} | {target} |"
    for k, call in (("meminfo", "cudaMemGetInfo"), ("streamquery", "cudaStreamQuery")):
        for q, target in (("p50", "≤ 1.5× raw"), ("p99", "≤ 3× raw")):
            rv = raw[f"ping_{q}_us"]
            lines.append(row(f"{call} {q} µs", f"{k}_{q}_us", ".1f", f"{rv:.1f}", f"{c[f'{k}_{q}_us'] / rv:.2f}",
                             target))
    rf = raw["ff_completed_per_s"]
    for k, what, target in (("kernel", "empty launches retired /s", "≥ 150 k/s"),
                            ("memset4", "4-byte memsets retired /s", "≥ 300 k/s"),
                            ("event", "event records retired /s", "≥ 300 k/s")):
        lines.append(row(what, f"{k}_per_s", ",.0f", f"{rf:,.0f}", f"{c[f'{k}_per_s'] / rf:.3f}", target))
    lines.append(row("step: launches retired /s (record + wait every 2nd)", "step_per_s", ",.0f"))
    ratio = {k: v["step_per_s"] / v["kernel_per_s"] for k, v in (("c", c), ("p", p), ("b", b)) if v}
    mid = f" {ratio['b']:.2f} | |" if b else ""
    lines.append(f"| step / launch-only rate | {ratio['c']:.2f} | {ratio['p']:.2f} | |{mid} | | ≥ 0.8 |")
    lines.append(row("daemon CPU µs per fire-and-forget op", "cpu_us_per_op", ".1f"))
    lines.append(f"frame path: {json.dumps(res['frame_path'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
