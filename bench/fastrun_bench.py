"""A run of FAST ops on the emulated GPU, in process, without sockets (issue 22 part 5): µs of CPU per op.

    PYTHONPATH=$PWD:$PWD/daemon python bench/fastrun_bench.py [--ops 200] [--reps 15] [--baseline DIR]

What the compiled frame path does with a run once libpvframe decoded it, with nothing else: `fastrun.execute_run`
(the preparers' checks, DeviceContext.run_fast, the per-op results) over runs of `--ops` ops of one kind: empty
launches `<<<1,1>>>`, 4-byte memsets, event records, and a framework's step (two launches, an event record, a
stream wait). The figure is thread CPU time per op, the best of `--reps` batches of 25 runs (CPU time: the shared
machine's load moves it less than wall time). `--baseline DIR`: the same in another checkout's Python sources (e.g.
main before a change: `git archive main | tar -x -C DIR`), run in a subprocess, side by side.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMPTY_PTX = b""".version 9.0
.target sm_75
.address_size 64
.visible .entry empty()
{
  ret;
}
"""
KINDS = ("launch", "memset", "record", "step")


def measure(nops: int, reps: int) -> dict[str, float]:
    from pyvgpu.protocol import OP_BY_NAME
    from pyvgpu_daemon import fastrun
    from pyvgpu_daemon.backends.emu import EmuBackend
    from pyvgpu_daemon.handlers import dispatch
    from pyvgpu_daemon.session import Session

    backend = EmuBackend(memory=64 << 20)
    session = Session(1, "bench", backend, 1)
    session.va_base = 1 << 40
    st = session.device(0, asyncio.new_event_loop())

    def call(op: str, *args: object, payload: bytes = b"") -> object:
        out = dispatch.execute(session, st, backend, OP_BY_NAME[op], [0, *args], payload, False)
        assert out is not None and out.err == 0, (op, out and out.err)
        return out.result

    ptr = call("MALLOC", 4096)
    stream = call("STREAM_CREATE", 0, 0)
    event = call("EVENT_CREATE", 0)
    func = call("MODULE_LOAD", 1, payload=EMPTY_PTX)["kernels"]["empty"]["id"]
    launch = (OP_BY_NAME["LAUNCH"], [0, func, [1, 1, 1], [1, 1, 1], 0, stream], b"")
    memset = (OP_BY_NAME["MEMSET"], [0, ptr, 1, 4, stream], b"")
    record = (OP_BY_NAME["EVENT_RECORD"], [0, event, stream], b"")
    wait = (OP_BY_NAME["STREAM_WAIT_EVENT"], [0, 0, event, 0], b"")
    runs = {"launch": [launch] * nops, "memset": [memset] * nops, "record": [record] * nops,
            "step": [launch, launch, record, wait] * (nops // 4)}
    out = {}
    try:
        for kind in KINDS:
            ops = runs[kind]
            fastrun.execute_run(session, st, backend, ops)       # the plan made, the kernel translated
            assert st.deferred == 0 and st.sticky == 0
            best = float("inf")
            for _ in range(reps):
                t = time.thread_time()
                for _ in range(25):
                    fastrun.execute_run(session, st, backend, ops)
                best = min(best, (time.thread_time() - t) / (25 * len(ops)))
            assert st.deferred == 0 and st.sticky == 0
            out[kind] = best * 1e6
    finally:
        st.worker.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=200, help="ops per run")
    ap.add_argument("--reps", type=int, default=15, help="batches of 25 runs; the best counts")
    ap.add_argument("--baseline", type=Path, help="another checkout whose Python runs the same, side by side")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)    # one line of figures (the baseline's)
    a = ap.parse_args(argv)
    mine = measure(a.ops, a.reps)
    if a.json:
        print(json.dumps(mine))
        return 0
    cols = {"this": mine}
    if a.baseline is not None:
        base = a.baseline.resolve()
        env = {**os.environ, "PYTHONPATH": f"{base}{os.pathsep}{base / 'daemon'}"}
        got = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--ops", str(a.ops), "--reps",
                              str(a.reps), "--json"], env=env, capture_output=True, text=True, check=True, cwd=base)
        cols["baseline"] = json.loads(got.stdout.strip().splitlines()[-1])
    print(f"runs of {a.ops} ops, CPU µs per op (best of {a.reps} x 25 runs)")
    print("| op | " + " | ".join(cols) + (" | this / baseline |" if len(cols) > 1 else " |"))
    print("|---|" + "---:|" * (len(cols) + (len(cols) > 1)))
    for kind in KINDS:
        row = [f"{c[kind]:.2f}" for c in cols.values()]
        if len(cols) > 1:
            row.append(f"{cols['this'][kind] / cols['baseline'][kind]:.2f}")
        print(f"| {kind} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
