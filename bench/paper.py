"""The paper's experiment: data-parallel MLP training on 1, 2 and 4 remote GPUs, beside its published numbers.

Runs dp_train (examples/dp_train/dp_train.cu, an ordinary multi-GPU CUDA program) as:
  * CPU baseline (`--cpu`, no CUDA call),
  * local GPU, where a real one is visible (skipped with a note otherwise),
  * 1, 2 and 4 remote GPUs: one emulated-GPU daemon per GPU on loopback ports, the unmodified binary under
    LD_PRELOAD=libvcudart.so with PYVGPU_HOSTS listing the daemons,
  * the same 1, 2 and 4 remote GPUs with the products done by cuBLAS (`--gemm cublas`, the binary built with
    -lcublas against libvcublas), beside the program's own kernels,
  * uneven GPUs: two remote GPUs, one daemon started with `--emu-slowdown F`, static vs adaptive balance,
then prints the paper's tables beside the published figures and draws its two figures as PNG:
  fig_time_per_1000.png (time per 1000 batches against the number of GPUs) and
  fig_test_error.png (test error against batches).
Results also go to results.json and tables.md in the output directory.

    python bench/paper.py [--out DIR] [--steps 60] [--batch 100] [--hidden 128] ...
    python -m bench.paper ...          (from the repository root)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]      # this checkout's pyvgpu, and the shared harness

from harness import Daemon, cached_build, interposer_env, lib_path, start_daemon  # noqa: E402
EXAMPLE = ROOT / "examples" / "dp_train"
SOURCE = EXAMPLE / "dp_train.cu"
BUILD = ROOT / "build" / "dp_train"

# The founding paper (GTX 750, ordinary Ethernet, CUDA 7.5, MNIST, batches of 2000): seconds per 1000 batches.
PAPER = {
    "cpu_s": 3451.0,
    "local_s": 18.16,
    "remote1_s": 44.31,
    "speedup2": 1.6,   # 2 remote GPUs vs 1 remote GPU
    "speedup4": 2.2,   # 4 remote GPUs vs 1 remote GPU
    "test_err": 0.01,  # "near 1%"
}
PAPER["remote2_s"] = PAPER["remote1_s"] / PAPER["speedup2"]
PAPER["remote4_s"] = PAPER["remote1_s"] / PAPER["speedup4"]


def log(msg: str) -> None:
    print(f"[paper] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------------
# building, data, daemons
# ---------------------------------------------------------------------------------------------------------------

def nvcc_path() -> str:
    return shutil.which("nvcc") or "/usr/local/bin/nvcc"


def build_binary(nvcc: str | None = None, cublas: bool = False) -> Path:
    """nvcc -cudart shared -O3 -std=c++17 (cublas: also -DDP_TRAIN_CUBLAS -lcublas, against the headers of the
    nvidia-cublas wheel and libvcublas), cached by the source's hash and the flags."""
    nvcc = nvcc or nvcc_path()
    flags = ["-cudart", "shared", "-O3", "-std=c++17"]
    if cublas:
        sys.path.insert(0, str(ROOT / "tools"))
        import cublas_wheel  # noqa: PLC0415
        flags += ["-DDP_TRAIN_CUBLAS", "-I", str(cublas_wheel.fetch()), "-L", str(lib_path().parent), "-lcublas"]
    return cached_build(BUILD, "dp_train", [SOURCE], lambda o: [nvcc, *flags, "-o", str(o), str(SOURCE)])


def load_prepare_digits():
    spec = importlib.util.spec_from_file_location("prepare_digits", EXAMPLE / "prepare_digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def digits_dir(out: str | None = None) -> Path:
    return load_prepare_digits().prepare(out)


def python_env() -> dict:
    """Environment in which `python -m pyvgpu_daemon` and `import pyvgpu` work from a source checkout too."""
    env = dict(os.environ)
    extra = [str(ROOT), str(ROOT / "daemon")]
    env["PYTHONPATH"] = os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def start_emu_daemon(logdir: Path, *extra: str) -> Daemon:
    """An emulated-GPU daemon from this checkout's sources on a free loopback port."""
    return start_daemon(logdir, *extra, env=python_env(), timeout=60)


# ---------------------------------------------------------------------------------------------------------------
# running the program
# ---------------------------------------------------------------------------------------------------------------

def parse_kv(line: str) -> dict:
    out: dict = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            try:
                out[k] = float(v) if k not in ("busy_gpu", "shares") else [float(x) for x in v.split(",")]
            except ValueError:
                out[k] = v
    return out


def parse_output(text: str) -> dict:
    """{'log': [per-interval dicts], 'final': dict, 'header': dict, 'gpus': [names]}."""
    res: dict = {"log": [], "final": {}, "header": {}, "gpus": []}
    for line in text.splitlines():
        if line.startswith("step="):
            res["log"].append(parse_kv(line))
        elif line.startswith("final "):
            res["final"] = parse_kv(line)
        elif line.startswith("# dp_train"):
            res["header"] = parse_kv(line)
        elif line.startswith("# gpu"):
            res["gpus"].append(line.split("name=", 1)[-1].split('"')[1] if '"' in line else line)
    return res


def run_program(binary: Path, args: list[str], label: str, env: dict | None = None, timeout: float = 1800,
                quiet: bool = False) -> dict:
    """Run dp_train, echo its log lines as progress, return the parsed output (+ rc, stderr, wall)."""
    cmd = [str(binary), *args]
    log(f"{label}: {' '.join(cmd[1:])}")
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not quiet and (line.startswith("step=") or line.startswith("final")):
                kv = parse_kv(line)
                extra = f" shares={line.split('shares=')[1].strip()}" if "shares=" in line else ""
                log(f"  {label}: {line.split()[0]} loss={kv.get('loss', 0):.4f} "
                    f"test_err={kv.get('test_err', 0):.4f} ms/1000={kv.get('ms_per_1000', 0):.0f}{extra}")
        proc.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stderr = proc.stderr.read() if proc.stderr else ""
    res = parse_output("".join(lines))
    res.update(rc=proc.returncode, stderr=stderr[-4000:], wall_s=time.monotonic() - t0, args=args,
               load=(load0, os.getloadavg()[0]))  # 1-minute load average before/after: other work on the cores
    if proc.returncode != 0:
        log(f"  {label}: exit {proc.returncode}: {stderr.strip()[-500:]}")
    return res


def remote_env(daemons: list[Daemon]) -> dict:
    return interposer_env(daemons)


# ---------------------------------------------------------------------------------------------------------------
# tables and figures
# ---------------------------------------------------------------------------------------------------------------

def fmt(v, spec=".1f", none="—"):
    return none if v is None else format(v, spec)


def tables(results: dict, cfg: dict) -> str:
    def s_per_1000(key):
        r = results.get(key)
        return r["final"].get("ms_per_1000") / 1000.0 if r and r.get("rc") == 0 and r["final"] else None

    def busy(key):
        r = results.get(key)
        return r["final"].get("busy_per_1000") / 1000.0 if r and r.get("rc") == 0 and r["final"].get("busy_per_1000") is not None else None

    def err(key):
        r = results.get(key)
        return r["final"].get("test_err") if r and r.get("rc") == 0 and r["final"] else None

    def load(key):
        r = results.get(key)
        return "%.1f→%.1f" % tuple(r["load"]) if r and r.get("load") else "—"

    r1 = s_per_1000("remote1")
    local = s_per_1000("local")
    rows = [
        ("CPU only", "cpu", PAPER["cpu_s"], None),
        ("local GPU", "local", PAPER["local_s"], None),
        ("1 remote GPU", "remote1", PAPER["remote1_s"], 1.0),
        ("2 remote GPUs", "remote2", PAPER["remote2_s"], PAPER["speedup2"]),
        ("4 remote GPUs", "remote4", PAPER["remote4_s"], PAPER["speedup4"]),
    ]
    out = []
    out.append(f"Configuration: {cfg['desc']}\n")
    out.append("Table 1: time per 1000 batches (ours: wall; device = CUDA-event busy time; remoting+host = wall - device)\n")
    out.append("| configuration | paper s/1000 | paper × 1 remote | ours s/1000 | ours device s/1000 | ours remoting+host s/1000 | ours × 1 remote | test error | load avg |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, key, paper_s, paper_x in rows:
        ours = s_per_1000(key)
        dev = busy(key)
        note = results.get(key, {}).get("note")
        x = (r1 / ours) if (ours and r1 and key.startswith("remote")) else None
        out.append(f"| {name} | {paper_s:.2f} | {fmt(paper_x, '.2f')} | "
                   f"{fmt(ours, '.3f', note or '—')} | {fmt(dev, '.3f')} | "
                   f"{fmt(ours - dev if ours is not None and dev is not None else None, '.3f')} | {fmt(x, '.2f')} | "
                   f"{fmt(err(key), '.2%')} | {load(key)} |")
    out.append("")
    out.append("Table 2: ratios")
    out.append("| ratio | paper | ours |")
    out.append("|---|---:|---:|")
    out.append(f"| 1 remote GPU speed / local GPU speed | {PAPER['local_s'] / PAPER['remote1_s']:.0%} | "
               f"{fmt(local / r1 if local and r1 else None, '.0%', 'no local GPU')} |")
    cpu = s_per_1000("cpu")
    out.append(f"| CPU time / 1 remote GPU time | {PAPER['cpu_s'] / PAPER['remote1_s']:.1f} | "
               f"{fmt(cpu / r1 if cpu and r1 else None, '.3f')} |")
    for n, key in ((2, "speedup2"), (4, "speedup4")):
        t = s_per_1000(f"remote{n}")
        out.append(f"| {n} remote GPUs vs 1 remote GPU | {PAPER[key]:.1f}× | {fmt(r1 / t if r1 and t else None, '.2f')}× |")
    out.append(f"| final test error | ~{PAPER['test_err']:.0%} (MNIST) | "
               f"{fmt(err('remote1') if err('remote1') is not None else err('cpu'), '.2%')} ({cfg['dataset']}) |")
    out.append("")
    if any(k.startswith("cublas") for k in results):
        out.append("Table 1c: the products by cuBLAS (--gemm cublas: cublasSgemm through libvcublas, NumPy on the "
                   "emulated GPUs) beside the program's own GEMM kernels, same runs otherwise")
        out.append("| configuration | own kernels s/1000 | cuBLAS s/1000 | cuBLAS / own | own device s/1000 | "
                   "cuBLAS device s/1000 | test error own | test error cuBLAS |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for n in (1, 2, 4):
            own, cb = s_per_1000(f"remote{n}"), s_per_1000(f"cublas{n}")
            if own is None and cb is None:
                continue
            out.append(f"| {n} remote GPU{'s' if n > 1 else ''} | {fmt(own, '.3f')} | {fmt(cb, '.3f')} | "
                       f"{fmt(cb / own if cb and own else None, '.2f')} | {fmt(busy(f'remote{n}'), '.3f')} | "
                       f"{fmt(busy(f'cublas{n}'), '.3f')} | {fmt(err(f'remote{n}'), '.2%')} | "
                       f"{fmt(err(f'cublas{n}'), '.2%')} |")
        out.append("")
    if any(k.startswith("paced") for k in results):
        out.append(f"Table 1b: paced emulated GPUs (every daemon --emu-slowdown {cfg.get('paced')}, "
                   f"{cfg.get('paced_steps')} batches): most of each kernel's time is a sleep, so the emulated GPUs "
                   "no longer compete for this machine's cores, as GPUs on separate hosts would not")
        out.append("| configuration | paper × 1 remote | ours s/1000 | ours device s/1000 | ours remoting+host s/1000 | ours × 1 remote |")
        out.append("|---|---:|---:|---:|---:|---:|")
        p1 = s_per_1000("paced1")
        for n, px in ((1, 1.0), (2, PAPER["speedup2"]), (4, PAPER["speedup4"])):
            t, dv = s_per_1000(f"paced{n}"), busy(f"paced{n}")
            out.append(f"| {n} remote GPU{'s' if n > 1 else ''} | {px:.2f} | {fmt(t, '.3f')} | {fmt(dv, '.3f')} | "
                       f"{fmt(t - dv if t is not None and dv is not None else None, '.3f')} | "
                       f"{fmt(p1 / t if p1 and t else None, '.2f')} |")
        out.append("")
    if "uneven_static" in results or "uneven_adaptive" in results:
        out.append(f"Table 3: uneven GPUs (2 remote GPUs, GPU1's daemon with --emu-slowdown {cfg['slowdown']})")
        out.append("| balance | s/1000 batches | final shares (GPU0,GPU1) | test error |")
        out.append("|---|---:|---|---:|")
        for key, name in (("uneven_static", "static"), ("uneven_adaptive", "adaptive")):
            r = results.get(key)
            if not r or r.get("rc") != 0:
                out.append(f"| {name} | failed | | |")
                continue
            shares = r["log"][-1].get("shares") if r["log"] else None
            sh = ",".join(str(int(x)) for x in shares) if isinstance(shares, list) else "equal"
            out.append(f"| {name} | {r['final']['ms_per_1000'] / 1000:.3f} | {sh} | {r['final']['test_err']:.2%} |")
        st, ad = results.get("uneven_static"), results.get("uneven_adaptive")
        if st and ad and st.get("rc") == 0 and ad.get("rc") == 0:
            out.append(f"\nadaptive / static step time: {ad['final']['ms_per_1000'] / st['final']['ms_per_1000']:.2f}")
        out.append("")
    return "\n".join(out)


def _series(results: dict, prefix: str) -> tuple[list[int], list[float]]:
    """GPU counts (1, 2, 4) of the successful runs <prefix><n> and their seconds per 1000 batches."""
    ns, seconds = [], []
    for n in (1, 2, 4):
        r = results.get(f"{prefix}{n}")
        if r and r.get("rc") == 0 and r["final"]:
            ns.append(n)
            seconds.append(r["final"]["ms_per_1000"] / 1000.0)
    return ns, seconds


def figures(results: dict, outdir: Path, cfg: dict) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    ns, ours = _series(results, "remote")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    if ns:
        ax1.plot(ns, ours, "o-", label="pyvgpu: remote emulated GPUs (wall)")
        dev = [results[f"remote{n}"]["final"].get("busy_per_1000", 0) / 1000.0 for n in ns]
        ax1.plot(ns, dev, "s--", label="pyvgpu: device-busy time (CUDA events)")
    for key, style, name in (("cpu", ":", "pyvgpu: CPU baseline"), ("local", "-.", "pyvgpu: local GPU")):
        r = results.get(key)
        if r and r.get("rc") == 0 and r["final"]:
            ax1.axhline(r["final"]["ms_per_1000"] / 1000.0, linestyle=style, color="gray", label=name)
    ax1.set_xlabel("number of GPUs")
    ax1.set_ylabel("seconds per 1000 batches")
    ax1.set_yscale("log")
    ax1.set_xticks([1, 2, 4])
    ax1.set_title(f"Time per 1000 batches ({cfg['dataset']}, batch {cfg['batch']})")
    ax2.plot([1, 2, 4], [1.0, PAPER["speedup2"], PAPER["speedup4"]], "o-", label="paper (GTX 750, Ethernet)")
    if ns:
        ax2.plot(ns, [ours[0] / t for t in ours], "s-", label=f"pyvgpu, emulated GPUs sharing {os.cpu_count()} cores")
    pn, pt = _series(results, "paced")
    if pn:
        ax1.plot(pn, pt, "^-", label=f"pyvgpu: paced emulated GPUs (slowdown {cfg.get('paced')})")
        ax2.plot(pn, [pt[0] / t for t in pt], "^-", label="pyvgpu, paced GPUs (no core contention)")
    ax2.plot([1, 2, 4], [1, 2, 4], ":", color="gray", label="linear")
    ax1.legend(fontsize=7)
    ax2.set_xlabel("number of remote GPUs")
    ax2.set_ylabel("speed-up vs 1 remote GPU")
    ax2.set_xticks([1, 2, 4])
    ax2.set_title("Scaling")
    ax2.legend(fontsize=8)
    paths.append(_save(fig, outdir / "fig_time_per_1000.png"))

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    styles = {"cpu": dict(lw=6, alpha=0.3), "local": dict(lw=4, alpha=0.5, marker="D", ms=5),
              "remote1": dict(lw=2.5, marker="o", ms=6), "remote2": dict(lw=1.5, marker="s", ms=4),
              "remote4": dict(lw=1, marker="^", ms=3, linestyle="--"),
              "uneven_adaptive": dict(lw=1, marker="x", ms=5, linestyle=":")}
    for key, name in (("cpu", "CPU"), ("local", "local GPU"), ("remote1", "1 remote GPU"),
                      ("remote2", "2 remote GPUs"), ("remote4", "4 remote GPUs"),
                      ("uneven_adaptive", "2 uneven GPUs, adaptive balance")):
        r = results.get(key)
        if r and r.get("rc") == 0 and r["log"]:
            ax.plot([e["step"] for e in r["log"]], [100 * e["test_err"] for e in r["log"]], label=name,
                    **styles[key])
    ax.axhline(100 * PAPER["test_err"], linestyle=":", color="gray", label="paper: ~1% (MNIST)")
    ax.set_xlabel("batches")
    ax.set_ylabel("test error (%)")
    ax.set_yscale("log")
    ax.set_title(f"Test error vs batches ({cfg['dataset']}, batch {cfg['batch']}; the curves coincide)")
    ax.legend(fontsize=8)
    paths.append(_save(fig, outdir / "fig_test_error.png"))
    return paths


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt  # noqa: PLC0415 (optional dependency, imported where used)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------------

def local_gpu_available(binary: Path) -> tuple[bool, str]:
    if not shutil.which("nvidia-smi") and not Path("/dev/nvidiactl").exists():
        return False, "no local GPU (no NVIDIA driver)"
    return True, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="paper", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "paper"), help="output directory (default: %(default)s)")
    ap.add_argument("--data", help="MNIST IDX directory (default: scikit-learn's digits, converted once)")
    ap.add_argument("--batch", type=int, default=512, help="global batch (paper: 2000; digits has 1438 training images)")
    ap.add_argument("--hidden", default="128", help="hidden layer sizes, e.g. 128 or 256,128")
    ap.add_argument("--steps", type=int, default=80, help="batches per GPU configuration")
    ap.add_argument("--cpu-steps", type=int, default=0, help="batches for the CPU and local-GPU runs (default: --steps)")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--sync", default="ps", choices=["ps", "ring"])
    ap.add_argument("--gpus", default="1,2,4", help="remote GPU counts to run")
    ap.add_argument("--slowdown", type=float, default=3.0, help="--emu-slowdown of the slow daemon (0: skip)")
    ap.add_argument("--uneven-steps", type=int, default=20, help="batches for each uneven run")
    ap.add_argument("--uneven-batch", type=int, default=0, help="global batch of the uneven runs (default: --batch)")
    ap.add_argument("--paced", type=float, default=8.0,
                    help="also run 1/2/4 remote GPUs with every daemon at --emu-slowdown PACED (0: skip): most of a "
                         "kernel's time is then a sleep, so the emulated GPUs stop competing for this machine's cores")
    ap.add_argument("--paced-steps", type=int, default=12, help="batches for each paced run")
    ap.add_argument("--no-remote", action="store_true", help="skip the remote (daemon) runs")
    ap.add_argument("--no-local", action="store_true", help="skip the local-GPU run")
    ap.add_argument("--binary", help="a built dp_train (default: build it with nvcc)")
    ap.add_argument("--cublas-binary", help="a dp_train built with -DDP_TRAIN_CUBLAS -lcublas (default: build it)")
    ap.add_argument("--no-cublas", action="store_true", help="skip the --gemm cublas runs")
    ap.add_argument("--docs-figures", action="store_true",
                    help="also copy the figures to docs/paper_time_per_1000.png and docs/paper_test_error.png")
    ap.add_argument("--emu-memory", default="1G", help="memory per emulated GPU")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--replot", metavar="DIR", help="only redraw tables and figures from DIR/results.json")
    args = ap.parse_args(argv)
    if args.replot:
        saved = json.loads((Path(args.replot) / "results.json").read_text())
        print(tables(saved["results"], saved["config"]))
        for p in figures(saved["results"], Path(args.replot), saved["config"]):
            log(f"figure: {p}")
            if args.docs_figures:
                shutil.copyfile(p, ROOT / "docs" / ("paper_" + p.name[len("fig_"):]))
        return 0

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    log(f"output directory: {outdir}")
    binary = Path(args.binary) if args.binary else build_binary()
    log(f"binary: {binary}")
    data = Path(args.data) if args.data else digits_dir()
    dataset = "sklearn digits 8x8" if (data / "digits.json").exists() else "MNIST"
    log(f"data: {data} ({dataset})")
    cpu_steps = args.cpu_steps or args.steps
    common = ["--data", str(data), "--batch", str(args.batch), "--hidden", args.hidden, "--lr", str(args.lr),
              "--seed", str(args.seed), "--log-every", str(args.log_every), "--sync", args.sync]
    cfg = {"dataset": dataset, "batch": args.batch, "hidden": args.hidden, "steps": args.steps, "lr": args.lr,
           "slowdown": args.slowdown, "sync": args.sync,
           "desc": f"{dataset}, MLP {args.hidden} hidden, global batch {args.batch}, {args.steps} batches per GPU "
                   f"run ({cpu_steps} CPU), lr {args.lr}, seed {args.seed}, --sync {args.sync}; host: "
                   f"{os.cpu_count()} CPU cores"}
    results: dict = {}
    t_start = time.monotonic()

    results["cpu"] = run_program(binary, [*common, "--cpu", "--steps", str(cpu_steps)], "CPU", timeout=args.timeout)

    ok, why = (False, "skipped (--no-local)") if args.no_local else local_gpu_available(binary)
    if ok:
        env = {"LD_PRELOAD": "", "PYVGPU_HOSTS": ""}
        results["local"] = run_program(binary, [*common, "--gpus", "1", "--steps", str(cpu_steps)], "local GPU",
                                       env=env, timeout=args.timeout)
    else:
        log(f"local GPU: {why}")
        results["local"] = {"rc": None, "note": why, "log": [], "final": {}}

    daemons: list[Daemon] = []
    try:
        if not args.no_remote:
            counts = sorted({int(x) for x in args.gpus.split(",") if x})
            need = max(counts) if counts else 0
            log(f"starting {need} emulated-GPU daemon(s)")
            daemons = [start_emu_daemon(outdir, "--emu-memory", args.emu_memory) for _ in range(need)]
            for n in counts:
                results[f"remote{n}"] = run_program(
                    binary, [*common, "--gpus", str(n), "--steps", str(args.steps)], f"{n} remote GPU(s)",
                    env=remote_env(daemons[:n]), timeout=args.timeout)
            if not args.no_cublas:
                cublas_binary = Path(args.cublas_binary) if args.cublas_binary else build_binary(cublas=True)
                log(f"cuBLAS binary: {cublas_binary}")
                for n in counts:
                    results[f"cublas{n}"] = run_program(
                        cublas_binary, [*common, "--gpus", str(n), "--steps", str(args.steps), "--gemm", "cublas"],
                        f"{n} remote GPU(s), --gemm cublas", env=remote_env(daemons[:n]), timeout=args.timeout)
            if args.paced and args.paced > 1:
                for d in daemons:
                    d.stop()
                log(f"starting {need} paced emulated-GPU daemon(s) (--emu-slowdown {args.paced})")
                daemons = [start_emu_daemon(outdir, "--emu-memory", args.emu_memory, "--emu-slowdown", str(args.paced))
                           for _ in range(need)]
                for n in counts:
                    results[f"paced{n}"] = run_program(
                        binary, [*common, "--gpus", str(n), "--steps", str(args.paced_steps)],
                        f"{n} paced remote GPU(s)", env=remote_env(daemons[:n]), timeout=args.timeout)
                cfg["paced"] = args.paced
                cfg["paced_steps"] = args.paced_steps
                for d in daemons:
                    d.stop()
                daemons = [start_emu_daemon(outdir, "--emu-memory", args.emu_memory)]  # a normal GPU for the uneven pair
            if args.slowdown and args.slowdown > 1:
                slow = start_emu_daemon(outdir, "--emu-memory", args.emu_memory, "--emu-slowdown", str(args.slowdown))
                daemons.append(slow)
                ub = args.uneven_batch or args.batch
                us = args.uneven_steps
                uneven = [a for a in common]
                uneven[uneven.index("--batch") + 1] = str(ub)
                env = remote_env([daemons[0], slow])
                for bal in ("static", "adaptive"):
                    results[f"uneven_{bal}"] = run_program(
                        binary, [*uneven, "--gpus", "2", "--steps", str(us), "--balance", bal],
                        f"uneven GPUs ({bal}, slowdown {args.slowdown}, batch {ub})", env=env, timeout=args.timeout)
                cfg["uneven_batch"] = ub
    finally:
        for d in daemons:
            d.stop()

    text = tables(results, cfg)
    print()
    print(text)
    (outdir / "tables.md").write_text(text + "\n")
    (outdir / "results.json").write_text(json.dumps({"config": cfg, "paper": PAPER, "results": results}, indent=1))
    try:
        for p in figures(results, outdir, cfg):
            log(f"figure: {p}")
            if args.docs_figures:
                dst = ROOT / "docs" / ("paper_" + p.name[len("fig_"):])
                shutil.copyfile(p, dst)
                log(f"figure copied to {dst}")
    except ImportError as e:
        log(f"no figures: {e} (pip install matplotlib)")
    log(f"done in {time.monotonic() - t_start:.0f} s; results in {outdir}")
    failed = [k for k, r in results.items() if r.get("rc") not in (0, None)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
