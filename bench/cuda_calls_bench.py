#!/usr/bin/env python3
"""The cuda backend's CPU time per fast op: its calls into the driver from compiled code (backends/cuda_calls.py,
libpvdrvcall.so) against the same calls through cuda-python (PYVGPU_CUDA_CALLS=python), side by side in one run.

    python bench/cuda_calls_bench.py [--backend cuda|chain] [--ops N] [--rounds R] [--sync N] [--json out.json]

A process of its own per way of calling (its cuda-python loads the driver: a GPU's, or on a machine without one
pyvgpu's libcuda.so.1 over an emulated daemon, the chain) opens the backend's context and calls its methods as the
daemon's worker does: N ops of each kind in a row, timed by the calling thread's CPU time (time.thread_time: the
backend's own work and the driver's on that thread, not the emulated daemon's) and by the wall clock. Rounds
alternate the two ways (ABAB...); medians over rounds. On the chain the driver's own cost per op (libvcuda sends each
op to the emulated daemon) is in both columns; the difference is the backend's.

--sync N (0: skipped) adds the synchronous calls' latency through a `--backend cuda` daemon: `bench/cuda/bandwidth.cu
lat N` (cudaMemGetInfo, cudaStreamQuery through libvcudart) against a daemon whose event loop answers such queries
itself (a GPU host's default: CudaBackend.loop_answers; forced on the chain, where the loop may then wait behind the
emulated GPU's kernels, which this program never queues) and one that hands every op to the session's worker thread,
rounds alternating; p50/p99 per call, and the daemon's CPU time per call (its /proc stat over the program's run).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

KERNEL = r'extern "C" __global__ void empty(int *p) {}'
WAYS = {"compiled": "", "python": "python"}     # the value of PYVGPU_CUDA_CALLS
# A cuda daemon told its driver is pyvgpu's own (True: every op on the worker, the baseline of --sync) or a GPU's (False:
# queries on the loop, which the chain does not do by default: cuda.CudaBackend.loop_answers).
FORCED = ("import runpy; from pyvgpu_daemon.backends import cuda_driver; cuda_driver.pyvgpu_driver = lambda *a: {};"
          " runpy.run_module('pyvgpu_daemon', run_name='__main__', alter_sys=True)")

CHILD = r"""
import json, sys, time
from pyvgpu_daemon.backends.base import FastOp
from pyvgpu_daemon.backends.cuda import CudaBackend

n = int(sys.argv[2])
backend = CudaBackend()
ctx = backend.open_context(0, 1 << 40, 1)
p = ctx.malloc(1 << 20)
mod = ctx.module_load(open(sys.argv[1], "rb").read())
k = mod.kernels["empty"]
s = ctx.stream_create(0, 0)
ev = ctx.event_create(2)                       # cudaEventDisableTiming, as frameworks' sync events
params = p.to_bytes(8, "little")
word = b"\1\2\3\4"
ops = {
    "launch <<<1,1>>>": lambda: ctx.launch(mod, k, (1, 1, 1), (1, 1, 1), 0, params, s),
    "memset 4 B": lambda: ctx.memset(p, 7, 4, s),
    "memset 2D 32-bit": lambda: ctx.memset_elems(p, 64, 0xDEADBEEF, 4, 4, 2, s),
    "event record": lambda: ctx.event_record(ev, s),
    "stream wait event": lambda: ctx.stream_wait_event(s, ev, 0),
    "copy HtoD 4 B": lambda: ctx.memcpy_htod(p + 64, word, s),
    "copy DtoD 4 B": lambda: ctx.memcpy_dtod(p + 128, p + 64, 4, s),
}
RUN = 64
runs = {                                       # DeviceContext.run_fast: RUN ops in one call (a framework's step)
    f"run of {RUN}: launches": [FastOp("launch", (mod, k, (1, 1, 1), (1, 1, 1), 0, params, s))] * RUN,
    f"run of {RUN}: memsets": [FastOp("memset", (p, 7, 4, s))] * RUN,
    f"run of {RUN}: mixed": [FastOp("launch", (mod, k, (1, 1, 1), (1, 1, 1), 0, params, s)),
                             FastOp("event_record", (ev, s)), FastOp("stream_wait_event", (s, ev, 0)),
                             FastOp("memset", (p, 7, 4, s))] * (RUN // 4),
}
for name, batch in runs.items():
    ops[name + " (per op)"] = (lambda b=batch: ctx.run_fast(b), len(batch))
if ctx.calls is not None:                      # the floor: the driver's own cost, a packed run replayed from C
    packed = ctx.calls.run(ctx._cx)
    for _ in range(RUN):
        packed.memset("PV_DC_MEMSET_D8", p, 0, 7, 4, 1, int(s))
    records = ctx.calls.ffi.from_buffer("pv_dc_op[]", packed.records)
    failed = ctx.calls.ffi.new("size_t *")
    ops[f"run of {RUN}: memsets, C alone"] = (
        lambda: ctx.calls.lib.pv_dc_run(ctx.calls.table, ctx._cx, records, RUN, failed), RUN)
out = {"compiled": ctx.calls is not None}
for name, op in ops.items():
    op, per = op if isinstance(op, tuple) else (op, 1)
    calls = max(1, n // per)
    for _ in range(max(1, 50 // per)):
        op()
    ctx.synchronize()
    c0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(calls):
        op()
    c1, w1 = time.thread_time(), time.perf_counter()
    ctx.synchronize()
    out[name] = [(c1 - c0) / (calls * per) * 1e6, (w1 - w0) / (calls * per) * 1e6]
ctx.close()
print("RESULT " + json.dumps(out))
"""


def gpu_present() -> bool:
    from pyvgpu_daemon.backends.cuda import probe   # noqa: PLC0415
    return probe()[0] > 0


def run_child(image: Path, n: int, way: str, env: dict[str, str]) -> dict:
    env = {**os.environ, **env, "PYVGPU_CUDA_CALLS": WAYS[way],
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "daemon"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(image), str(n)], capture_output=True, text=True,
                          timeout=600, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            got = json.loads(line[7:])
            if got.pop("compiled") != (way == "compiled"):
                raise SystemExit(f"the {way} run did not call the way it was asked (the daemon's log line says why)")
            return got
    raise SystemExit(f"{way} run failed:\n{proc.stdout}{proc.stderr}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")     # utime + stime


def sync_latency(work: Path, n: int, rounds: int, env: dict[str, str]) -> dict:
    """p50/p99 µs of cudaMemGetInfo and cudaStreamQuery through a cuda daemon answering on its loop or its worker,
    and the daemon's CPU µs per call."""
    from harness import LOOPBACK, Daemon, free_port, interposer_env, wait_listening   # noqa: PLC0415
    from remoting_bench import build, pct   # noqa: PLC0415
    program = build()[0]
    samples: dict[str, dict[str, list[float]]] = {w: {"meminfo": [], "streamquery": [], "cpu": []}
                                                  for w in ("loop", "worker")}
    for r in range(rounds):
        for way in (("loop", "worker") if r % 2 == 0 else ("worker", "loop")):
            port = free_port()
            log = work / f"daemon-{way}-{port}.log"
            head = [sys.executable, "-c", FORCED.format(way == "worker")]
            with open(log, "wb") as fh:
                proc = subprocess.Popen([*head, "--backend", "cuda", "--host", LOOPBACK, "--port", str(port)],
                                        stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env})
            d = Daemon(port, proc, log, backend="cuda")
            try:
                wait_listening(proc, port, log, timeout=60)
                c0 = cpu_seconds(proc.pid)
                out = subprocess.run([str(program), "lat", str(n)], capture_output=True, text=True, timeout=300,
                                     env={**os.environ, **interposer_env([d])})
                c1 = cpu_seconds(proc.pid)
            finally:
                d.stop()
            if out.returncode != 0:
                raise SystemExit(f"bandwidth lat through the {way} daemon failed:\n{out.stdout}{out.stderr}")
            for line in out.stdout.splitlines():
                words = line.split()
                if words and words[0] in ("meminfo", "streamquery"):
                    samples[way][words[0]] += [int(w) / 1e3 for w in words[1:]]
            samples[way]["cpu"].append((c1 - c0) / (2 * n) * 1e6)
    return {way: {"meminfo p50": pct(s["meminfo"], 50), "meminfo p99": pct(s["meminfo"], 99),
                  "streamquery p50": pct(s["streamquery"], 50), "streamquery p99": pct(s["streamquery"], 99),
                  "daemon CPU per call": statistics.median(s["cpu"])} for way, s in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cuda", "chain"), default=None,
                    help="cuda: the machine's GPU (default when there is one); chain: pyvgpu's driver over an "
                         "emulated daemon")
    ap.add_argument("--ops", type=int, default=2000, help="ops of each kind per round (default 2000)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per way of calling, alternating (default 4)")
    ap.add_argument("--sync", type=int, default=2000, help="synchronous calls per program run (0: no sync part)")
    ap.add_argument("--json", type=Path, help="write the medians here too")
    args = ap.parse_args()
    backend = args.backend or ("cuda" if gpu_present() else "chain")
    from harness import chain_env, real_driver_fatbin, start_daemon   # noqa: PLC0415
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        image = real_driver_fatbin(work, KERNEL, "empty")
        emu = start_daemon(work, backend="emu") if backend == "chain" else None
        try:
            env = chain_env(emu) if emu else {}
            runs: dict[str, list[dict]] = {w: [] for w in WAYS}
            for r in range(args.rounds):
                for way in (WAYS if r % 2 == 0 else reversed(list(WAYS))):
                    runs[way].append(run_child(image, args.ops, way, env))
            sync = sync_latency(work, args.sync, args.rounds, env) if args.sync else None
        finally:
            if emu:
                emu.stop()
    names = list(runs["compiled"][0])
    table = {name: {way: [statistics.median(r[name][i] for r in runs[way]) if name in runs[way][0] else None
                          for i in (0, 1)] for way in WAYS}
             for name in names}
    print(f"backend: {backend}; {args.ops} ops of each kind per round, {args.rounds} rounds per way, medians")
    print(f"{'op':34} {'compiled CPU µs':>16} {'python CPU µs':>14} {'ratio':>6} {'compiled wall µs':>17} "
          f"{'python wall µs':>15}")
    for name, row in table.items():
        (cc, cw), (pc, pw) = row["compiled"], row["python"]
        if pc is None:          # compiled only (the floor)
            print(f"{name:34} {cc:16.2f} {'':14} {'':6} {cw:17.2f}")
            continue
        print(f"{name:34} {cc:16.2f} {pc:14.2f} {cc / pc:6.2f} {cw:17.2f} {pw:15.2f}")
    if sync:
        print(f"\nsynchronous calls through a --backend cuda daemon ({args.sync} each per run, {args.rounds} runs "
              "per way), µs")
        print(f"{'':30} {'loop answers':>13} {'worker only':>12} {'ratio':>6}")
        for key in sync["loop"]:
            a, b = sync["loop"][key], sync["worker"][key]
            print(f"{key:30} {a:13.1f} {b:12.1f} {a / b:6.2f}")
    if args.json:
        args.json.write_text(json.dumps({"backend": backend, "ops": args.ops, "rounds": args.rounds,
                                         "table": table, "sync": sync}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
