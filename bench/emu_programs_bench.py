"""Emulated-GPU speed on whole programs: CUDA programs of the kinds that were too slow (issue 13 part 4), built with
`nvcc -cudart shared`, run unmodified through libvcudart against a fresh emulated-GPU daemon, timed by wall clock
(start of the program to its exit, so module load, copies and every launch count), with the daemon's CPU time
(user + system, /proc/PID/stat) beside it: on a shared machine it moves less with the other jobs than wall time;
and its children's (the C compilers of native builds and the child that compiles large Python sources, reaped by
the daemon), which a cold cache adds and the daemon's own figure leaves out.

    python bench/emu_programs_bench.py [--quick] [--reps N] [--program NAME] [--timeout S] \\
        [--baseline DIR] [--env KEY=VALUE ...] [--load N] [--cache cold|warm|both]

Programs (bench/cuda/): black_scholes (4M options x 512 launches, the default of NVIDIA's BlackScholes sample) and
streams_overlap (16M ints, 4 streams, 10 repetitions, as NVIDIA's simpleStreams); the workloads of issue 19 part 6 at
their samples' defaults: simple_streams (simpleStreams itself: 16M ints in registered mapped memory, 4 streams, 100
repetitions), scan_batches (the scan sample: 6.5M uints in arrays of 4 .. 256K, 100 cycles each), radix_sort_thrust
(1M key/value pairs sorted 100 times) and large_param (1000 launches each of a 4 KB-parameter and a 32 KB-parameter
kernel). --quick runs smaller sizes (fewer repetitions: the same work per repetition, for ratios).
--baseline DIR also runs every program against another tree (e.g. `git archive a78f723 | tar -x -C DIR`): its
`daemon` and root directories go first on the daemon's PYTHONPATH, and when DIR/build/dev/lib holds its client
libraries (cmake -S DIR -B DIR/build/dev) the program runs on those; the two trees alternate and the ratio is
printed. A run longer than --timeout seconds is stopped and shown as "> S". --env sets daemon environment variables
(e.g. PYVGPU_EMU_NATIVE=off). --load N keeps N processes spinning on the CPU (at the bench's own priority) for
the whole invocation: issue 19 part 6 asks for its times "under load", and a load of its own makes that load the
same from run to run (the load average is printed at the end: other jobs add to it).
--profile DIR samples each daemon with py-spy (every thread while runnable, not pausing it) into
DIR/TREE-PROGRAM-CACHE.txt (py-spy's raw collapsed stacks: Python functions) and the machine with perf's CPU clock into
DIR/TREE-PROGRAM-CACHE.perf (`perf report --pid PID --sort dso`: CPU time by shared object, the interpreter, NumPy,
each kernel's library; bench/README.md, "a cold run's CPU"). The program's own CPU (the client's:
libvcudart's calls, its copies) is printed with every run.

--cache says which native-code cache (emu/native.py, under XDG_CACHE_HOME) each daemon starts with: "cold" an empty
one (the first run on a machine: every compile included), "warm" one that a run of the same program and arguments
of the same tree filled (made by an untimed run first when build/bench-programs/ has none yet for the tree's
emulator code as it is now: a cache left by other code would have the warm run compile; as CUDA's own PTX JIT has
~/.nv/ComputeCache), "both" a cold run and then a warm one on what it left, each timed (the default). The
caller's own cache is never used.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import harness  # noqa: E402

PROGRAMS = {
    "black_scholes": (("4000000", "512"), ("4000000", "16")),
    "streams_overlap": (("16777216", "4", "10"), ("4194304", "4", "2")),
    "simple_streams": (("16777216", "4", "100", "registered"), ("16777216", "4", "4", "registered")),
    "scan_batches": (("6815744", "100"), ("6815744", "2")),
    "radix_sort_thrust": (("1048576", "100"), ("1048576", "3")),
    "large_param": (("1000",), ("40",)),
}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User + system CPU seconds of a live process (every thread), and of its children it waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


def run_once(exe: Path, args: tuple[str, ...], workdir: Path, tree: Path | None, env: dict[str, str],
             timeout: float, profile: Path | None = None) -> tuple[float | None, tuple[float, float, float], str]:
    """(wall seconds or None when stopped at the timeout, (daemon CPU seconds, its children's, the program's), the
    program's result line). `profile`: a file for py-spy's samples of the daemon."""
    denv = dict(env)
    penv = None
    # the tree's own daemon package first (without it, "this tree" ran whatever copy site-packages holds:
    # `python -m pyvgpu_daemon` does not find daemon/pyvgpu_daemon from the checkout's root)
    denv["PYTHONPATH"] = os.pathsep.join(filter(None, [str((tree or ROOT) / "daemon"), str(tree or ROOT),
                                                       None if tree is not None else os.environ.get("PYTHONPATH")]))
    if tree is not None:
        lib = tree / "build" / "dev" / "lib"
        if (lib / "libvcudart.so").exists():             # the tree's own client libraries
            penv = {"LD_PRELOAD": str(lib / "libvcudart.so"),
                    "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(lib), os.environ.get("LD_LIBRARY_PATH")]))}
    d = harness.start_daemon(workdir, env=denv, cwd=Path("/") if tree is not None else None)
    spy = perf = None
    try:
        if profile is not None:
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(d.proc.pid), "--format", "raw", "--threads",
                                    "--nonblocking", "--rate", "50", "-o", str(profile)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # and perf's CPU-clock samples (py-spy counts a thread waiting for a CPU as busy: perf only CPU time)
            perf = shutil.which("perf") and subprocess.Popen(
                ["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F", "199",     # (-p misses later threads)
                 "-o", str(profile.with_suffix(".perf"))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.perf_counter()
        c0 = os.times()
        try:
            proc = harness.run_cuda(exe, [d], *args, timeout=timeout, env=penv)
            secs, out = time.perf_counter() - t0, proc.stdout
        except subprocess.TimeoutExpired:
            secs, out = None, ""
        c1 = os.times()      # the program is the only child reaped in between (the daemon is reaped by stop())
        cpu = (*cpu_seconds(d.proc.pid), c1.children_user + c1.children_system - c0.children_user - c0.children_system)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)          # py-spy writes its file on SIGINT
            spy.wait(timeout=60)
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
        d.stop()
    last = [ln for ln in out.splitlines() if ln and not ln.startswith("PASS")]
    return secs, cpu, (last[-1] if last else f"stopped after {timeout:.0f} s")


def fmt(times: list, timeout: float) -> str:
    done = [t for t in times if t is not None]
    if len(done) < len(times):
        return f"> {timeout:.0f}"
    return f"{statistics.median(done):.1f}"


@contextlib.contextmanager
def cpu_load(n: int):
    """n processes that spin on the CPU until the block ends (killed then, whatever happened)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (fewer repetitions)")
    ap.add_argument("--reps", type=int, default=1, help="runs per program and tree (median)")
    ap.add_argument("--program", action="append", choices=list(PROGRAMS), help="(repeatable; default: all)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before a run is stopped")
    ap.add_argument("--baseline", type=Path, help="another tree whose daemon runs the same programs")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the daemon (repeatable)")
    ap.add_argument("--load", type=int, default=0, help="processes spinning on the CPU during the runs")
    ap.add_argument("--profile", type=Path, help="a folder for py-spy's samples of each daemon")
    ap.add_argument("--cache", choices=("cold", "warm", "both"), default="both",
                    help="the daemons' native-code cache: empty, filled by the same run before, or one run of each")
    args = ap.parse_args()
    with cpu_load(args.load):
        run_all(args)


def emu_digest(tree: Path | None) -> str:
    """A digest of a tree's emulator code (what its native-code cache depends on): a warm cache is kept per digest."""
    root = (tree or ROOT) / "daemon" / "pyvgpu_daemon" / "emu"
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def run_all(args: argparse.Namespace) -> None:
    env = dict(kv.split("=", 1) for kv in args.env)
    workdir = ROOT / "build" / "bench-programs"
    workdir.mkdir(parents=True, exist_ok=True)
    trees = {"this tree": None} if args.baseline is None else {"baseline": args.baseline.resolve(), "this tree": None}
    modes = ("cold", "warm") if args.cache == "both" else (args.cache,)
    rows = []
    for name in args.program or list(PROGRAMS):
        exe = harness.build_cuda(ROOT / "bench" / "cuda" / f"{name}.cu")
        pargs = PROGRAMS[name][1 if args.quick else 0]
        res = {(label, mode): ([], [], []) for label in trees for mode in modes}     # wall, CPU, children's CPU
        for _ in range(args.reps):
            for label, tree in trees.items():          # alternating, so a change of load hits both
                # one cache directory per tree, program, arguments and emulator code: "warm" is what the same run
                # left (one left by the tree's code before a change is removed)
                stem = f"{label.replace(' ', '-')}-{name}-{'-'.join(pargs)}-"
                cache = workdir / "cache" / (stem + emu_digest(tree))
                for old in (workdir / "cache").glob(stem + "*"):
                    if old != cache and len(old.name) == len(cache.name):
                        shutil.rmtree(old, ignore_errors=True)
                if "cold" in modes:
                    shutil.rmtree(cache, ignore_errors=True)
                elif not cache.exists():
                    print(f"  {name} [{label}]: filling the warm cache (untimed)", flush=True)
                    run_once(exe, pargs, workdir, tree, {**env, "XDG_CACHE_HOME": str(cache)}, args.timeout)
                for mode in modes:
                    prof = None
                    if args.profile is not None:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        prof = args.profile / f"{label.replace(' ', '-')}-{name}-{mode}.txt"
                    secs, cpu, out = run_once(exe, pargs, workdir, tree, {**env, "XDG_CACHE_HOME": str(cache)},
                                              args.timeout, prof)
                    r = res[label, mode]
                    r[0].append(secs)
                    r[1].append(cpu[0])
                    r[2].append(cpu[1])
                    print(f"  {name} [{label}, {mode} cache]: wall "
                          f"{'> %.0f' % args.timeout if secs is None else '%.1f' % secs} s, "
                          f"daemon CPU {cpu[0]:.1f} s (+ {cpu[1]:.1f} s in its children: compilers), "
                          f"the program's {cpu[2]:.1f} s; {out}",
                          flush=True)
        rows.extend((name, pargs, mode, res) for mode in modes)
    if args.load:
        print(f"\n{args.load} process(es) spinning on the CPU during the runs (--load)")
    print(f"\nload average now: {os.getloadavg()[0]:.1f}, {os.getloadavg()[1]:.1f}, {os.getloadavg()[2]:.1f}")
    print(f"{'program':<16} {'arguments':<20} {'cache':<6} "
          + " ".join(f"{lb + ' wall s':>16} {lb + ' CPU s':>15} {'+ cc s':>7}" for lb in trees)
          + ("  wall ratio" if len(trees) > 1 else ""))
    for name, pargs, mode, res in rows:
        cols = " ".join(f"{fmt(res[lb, mode][0], args.timeout):>16} {statistics.median(res[lb, mode][1]):>15.1f} "
                        f"{statistics.median(res[lb, mode][2]):>7.1f}" for lb in trees)
        ratio = ""
        if len(trees) > 1:
            base, cur = res["baseline", mode][0], res["this tree", mode][0]
            if None in cur:
                ratio = "  n/a"
            elif None in base:
                ratio = f"  > {args.timeout / statistics.median(cur):.1f}x"
            else:
                ratio = f"  {statistics.median(base) / statistics.median(cur):.1f}x"
        print(f"{name:<16} {' '.join(pargs):<20} {mode:<6} {cols}{ratio}")


if __name__ == "__main__":
    main()
