"""Where a small fire-and-forget op's daemon time goes (issue 22 part 5): cProfile of the Python, perf of the C.

    PYTHONPATH=$PWD:$PWD/daemon python bench/smallops_profile.py [--mode launch|step] [--iters N] [--runs 3]
                                                                  [--no-perf] [--out F]

An emulated-GPU daemon with the compiled frame path runs bench/cuda/bandwidth.cu (`launch N`: N empty launches,
N 4-byte memsets, N event records, each then a sync; `step N`: a framework's step, N launches with an event record
and a stream wait after every second one) `--runs` times, twice:

* under cProfile (`python -m cProfile -m pyvgpu_daemon`): each function's own time is put in one of the CATEGORIES
  below by where it lives (a built-in's, by where its callers live), as a share of the frame path's profiled time
  and in µs per op (cProfile's overhead included: read the shares, not the absolute figures);
* under `perf record -p` (no cProfile): the daemon's CPU samples by library (the interpreter, libpvframe, uvloop,
  NumPy, libc, the kernel: the socket reads and wake-ups), so the part no Python profile sees is measured too.
Needs `perf` allowed to attach (root, or perf_event_paranoid <= 1) for the second part; --no-perf skips it.
"""
from __future__ import annotations

import argparse
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Daemon, daemon_command, free_port, interposer_env, wait_listening  # noqa: E402
from remoting_bench import build, run_lines  # noqa: E402

# (category, fragments of "file:function"): the first category with a matching fragment takes a function's own time.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("emulator (backends/emu.py, emu/)", ("/emu/", "backends/emu.py", "backends/base.py:")),
    ("C decode and argument lists (framepath.scan)", ("framepath.py",)),
    ("checks and conversion (fastrun, preparers, handles)", ("fastrun.py", "handlers/", "session.py",
                                                             "<string>:")),    # registry.DECODED's lambdas
    ("loop decision (fastpath)", ("fastpath.py",)),
    ("accounting (scheduler lane, figures, event times)", ("scheduler.py", "event_times.py")),
    ("frames and connection (connection, stream, link)", ("connection.py", "stream.py", "link.py", "wire.py")),
)
OTHER = "other"
# Not in the shares: cProfile counts the event loop's waits in epoll as its own time (uvloop's run is one C call),
# and start-up (imports, the spec, the backend) is in `other`; perf's figures below have neither.
EXCLUDED = ("event loop and its waits (uvloop run, asyncio)", ("asyncio", "uvloop", "run_until_complete", "epoll",
                                                              "select"))
TOP_SYMBOLS = 15
PERF_HZ = 4000
# CPython's cyclic collector (Modules/gcmodule.c), for its share of the daemon's CPU
GC_SYMBOLS = frozenset({"gc_collect_main", "visit_decref", "visit_reachable", "subtract_refs", "update_refs",
                        "move_unreachable", "move_legacy_finalizers", "deduce_unreachable", "gc_collect_with_callback",
                        "dict_traverse", "list_traverse", "tupletraverse", "subtype_traverse", "func_traverse"})
# perf's dso -> column (first match wins)
LIBRARIES = (("[kernel", "kernel (sockets, wake-ups)"), ("libpvframe", "libpvframe (C decode)"),
             ("loop.cpython", "uvloop"), ("numpy", "NumPy"), ("libc.so", "libc"), ("python", "interpreter"),
             ("libpython", "interpreter"))


def ops_of(mode: str, iters: int) -> int:
    return 3 * iters if mode == "launch" else 2 * iters       # a step: iters launches, iters/2 records and waits


def start(work: Path, prefix: list[str]) -> Daemon:
    port = free_port()
    log = work / f"daemon-{port}.log"
    cmd = daemon_command("--host", "127.0.0.1", "--port", str(port))
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*prefix, *cmd[1:]] if prefix else cmd, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYVGPU_DAEMON_COMPILED": "1"})
    wait_listening(proc, port, log, timeout=60)
    return Daemon(port, proc, log, extra=(), backend="emu")


def drive(cuda: Path, d: Daemon, mode: str, iters: int, runs: int) -> None:
    env = {**os.environ, **interposer_env([d])}
    run_lines([str(cuda), mode, "50"], env=env)                    # module load, plans: early, before the runs
    for _ in range(runs):
        run_lines([str(cuda), mode, str(iters)], env=env)


def stop(d: Daemon) -> None:
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)           # a clean exit: cProfile writes its file
    d.proc.wait(60)


def python_profile(cuda: Path, work: Path, mode: str, iters: int, runs: int) -> dict:
    out = work / "daemon.prof"
    d = start(work, [sys.executable, "-m", "cProfile", "-o", str(out)])
    try:
        drive(cuda, d, mode, iters, runs)
    finally:
        stop(d)
    stats = pstats.Stats(str(out)).stats          # (file, line, function) -> (cc, nc, tottime, cumtime, callers)
    own: dict[str, float] = {}
    others: list[tuple[float, str]] = []

    def category(file: str, func: str) -> str:
        where = f"{file}:{func}"
        return next((c for c, frags in (*CATEGORIES, EXCLUDED) if any(f in where for f in frags)), OTHER)
    for (file, _, func), v in stats.items():
        if file == "~" and v[4]:          # a built-in (getattr, len, dict.get, NumPy's C): its callers' time
            for (cfile, _, cfunc), cv in v[4].items():
                cat = category(cfile, cfunc)
                own[cat] = own.get(cat, 0.0) + cv[2]
                if cat == OTHER:
                    others.append((cv[2], f"{func} in {Path(cfile).name}:{cfunc}"))
            continue
        cat = category(file, func)
        own[cat] = own.get(cat, 0.0) + v[2]
        if cat == OTHER:
            others.append((v[2], f"{Path(file).name}:{func}"))
    nops = (runs + 1) * ops_of(mode, iters)     # the warm-up run's ops too (small next to the runs)
    total = sum(t for c, t in own.items() if c not in (OTHER, EXCLUDED[0]))
    return {"ops": nops, "frame_path_s": total,
            "by_category": {c: {"share": t / total if c not in (OTHER, EXCLUDED[0]) else None,
                                "us_per_op": t / nops * 1e6}
                            for c, t in sorted(own.items(), key=lambda kv: -kv[1])},
            "top_other": [f"{t / nops * 1e6:.2f} µs/op {name}" for t, name in sorted(others, reverse=True)[:8]]}


def c_profile(cuda: Path, work: Path, mode: str, iters: int, runs: int) -> dict:
    d = start(work, [])
    data = work / "daemon.perf"
    try:
        env = {**os.environ, **interposer_env([d])}
        run_lines([str(cuda), mode, "50"], env=env)
        assert d.proc is not None
        rec = subprocess.Popen(["perf", "record", "-q", "-F", str(PERF_HZ), "-o", str(data), "-p", str(d.proc.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)                                            # attached
        for _ in range(runs):
            run_lines([str(cuda), mode, str(iters)], env=env)
        rec.send_signal(signal.SIGINT)
        rec.wait(30)
    finally:
        stop(d)
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "-g", "none", "--sort", "dso",
                          "-F", "sample,dso", "--stdio"], capture_output=True, text=True, check=True).stdout
    got: dict[str, int] = {}
    for line in out.splitlines():
        words = line.split(None, 1)
        if len(words) != 2 or line.startswith("#") or not words[0].isdigit():
            continue
        col = next((c for frag, c in LIBRARIES if frag in words[1]), OTHER)
        got[col] = got.get(col, 0) + int(words[0])
    total = sum(got.values()) or 1
    nops = runs * ops_of(mode, iters)
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "-g", "none", "--sort", "sym",
                          "-F", "overhead,sym", "--stdio"], capture_output=True, text=True, check=True).stdout
    symbols: list[tuple[float, str]] = []
    for line in out.splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and words[0].endswith("%") and not line.startswith("#"):
            symbols.append((float(words[0][:-1]), words[1].replace("[.] ", "").replace("[k] ", "").strip()))
    symbols.sort(reverse=True)
    gc_share = sum(pct for pct, name in symbols if name in GC_SYMBOLS) / 100
    return {"samples": total, "by_library": {c: {"share": n / total, "us_per_op": n / PERF_HZ / nops * 1e6}
                                             for c, n in sorted(got.items(), key=lambda kv: -kv[1])},
            "gc_share": gc_share, "top_symbols": [f"{pct:5.2f}% {name}" for pct, name in symbols[:TOP_SYMBOLS]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("launch", "step"), default="launch")
    ap.add_argument("--iters", type=int, default=5000, help="the bandwidth program's count per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-perf", action="store_true", help="cProfile only")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    opts = ap.parse_args(argv)
    cuda, _ = build()
    res: dict = {"mode": opts.mode, "iters": opts.iters, "runs": opts.runs}
    with tempfile.TemporaryDirectory() as tmp:
        res["python"] = python_profile(cuda, Path(tmp), opts.mode, opts.iters, opts.runs)
        if not opts.no_perf:
            res["c"] = c_profile(cuda, Path(tmp), opts.mode, opts.iters, opts.runs)
    print(f"{opts.mode} {opts.iters} x {opts.runs}: {res['python']['ops']} ops")
    print("| the daemon's Python (cProfile, own time) | share | µs per op (profiled) |\n|---|---:|---:|")
    for c, v in res["python"]["by_category"].items():
        share = f"{v['share']:.0%}" if v["share"] is not None else "(not in the shares)"
        print(f"| {c} | {share} | {v['us_per_op']:.2f} |")
    print("largest in other: " + "; ".join(res["python"]["top_other"]))
    if "c" in res:
        print("| the daemon's CPU by library (perf) | share | µs per op |\n|---|---:|---:|")
        for c, v in res["c"]["by_library"].items():
            print(f"| {c} | {v['share']:.0%} | {v['us_per_op']:.2f} |")
        print(f"the cyclic collector (perf, gcmodule.c's functions and traversals): {res['c']['gc_share']:.1%}")
        print("top symbols (perf):\n  " + "\n  ".join(res["c"]["top_symbols"]))
    if opts.out:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
