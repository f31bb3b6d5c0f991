"""The real-GPU check (scripts/gpu-check.sh runs it after the set-up; issue 10).

    python tools/gpu_check.py [--out DIR] [--quick]

Exit status 0 with "no usable GPU: <why>" when the CUDA driver finds none (pyvgpu_daemon.backends.cuda.probe), else:
  1. the GPU tests: pytest over the tests that need a real GPU (tests/daemon/test_daemon_cuda*.py);
  2. the CUDA test programs of tests/cuda as their tests run them (tests/e2e, tests/driver), every daemon on the
     cuda backend (PYVGPU_TEST_BACKEND=cuda); tests that use emulator options or emulator-specific results fail
     there by design, and the report lists each test with its result;
  3. local against remote: bench/cuda/bandwidth.cu (copies, round-trip latency, launches) and the paper workload
     (examples/dp_train) run natively on the GPU and through pyvgpu against the cuda daemon on loopback;
  4. a report, DIR/report.md (+ report.json, the logs): pass/fail per program, the tables, the machine.
Exit status 1 when the GPU tests or the benchmark failed (program failures are listed, see 2).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "daemon"), str(ROOT / "tests"), str(ROOT / "bench")]

# The tests that build and run the CUDA test programs of tests/cuda (and examples) through libvcudart/libvcuda.
PROGRAM_TESTS = ["tests/e2e", "tests/driver"]
GPU_TESTS = ["tests/daemon/test_daemon_cuda.py", "tests/daemon/test_daemon_cuda_blas.py",
             "tests/daemon/test_daemon_cuda_features.py", "tests/daemon/test_daemon_cuda_blaslt.py",
             "tests/daemon/test_daemon_cuda_lt_gpu.py"]
MiB = 1 << 20


def probe() -> tuple[int, str]:
    from pyvgpu_daemon.backends.cuda import probe as cuda_probe   # noqa: PLC0415 (needs the checkout on sys.path)
    return cuda_probe()


def run_gpu_tests(out: Path) -> dict:
    log = out / "gpu-tests.log"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", *GPU_TESTS], cwd=ROOT, capture_output=True,
                          text=True, timeout=3600)
    log.write_text(proc.stdout + proc.stderr)
    summary = next((line for line in reversed(proc.stdout.splitlines()) if " in " in line), "no summary")
    return {"rc": proc.returncode, "summary": summary.strip("= "), "seconds": round(time.monotonic() - t0, 1),
            "log": str(log)}


def run_programs(out: Path) -> list[dict]:
    """The CUDA test programs as their tests run them (arguments, daemons, checks), with every daemon a tests starts
    on the cuda backend (PYVGPU_TEST_BACKEND, tests/conftest.py) → one row per test."""
    log = out / "programs.log"
    env = {**os.environ, "PYVGPU_TEST_BACKEND": "cuda"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *PROGRAM_TESTS],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=7200)
    log.write_text(proc.stdout + proc.stderr)
    rows = []
    for line in proc.stdout.splitlines():
        words = line.split(" ", 2)
        if len(words) >= 2 and words[0] in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
            rows.append({"program": words[1], "status": "pass" if words[0] == "PASSED" else words[0].lower(),
                         "detail": words[2] if len(words) > 2 else ""})
    if not rows:
        rows.append({"program": " ".join(PROGRAM_TESTS), "status": f"exit {proc.returncode}",
                     "detail": (proc.stdout + proc.stderr)[-300:]})
    return rows


def local_vs_remote(daemon, quick: bool) -> dict:
    import paper   # noqa: PLC0415
    import remoting_bench as rb   # noqa: PLC0415
    from harness import interposer_env   # noqa: PLC0415
    cuda, _ = rb.build()
    remote = {**os.environ, **interposer_env([daemon])}
    size, iters = (64 * MiB, 3) if quick else (256 * MiB, 5)
    res: dict = {}
    for where, env in (("local", dict(os.environ)), ("remote", remote)):
        r: dict = {}
        for d in ("h2d", "d2h"):
            ns = rb.run_lines([str(cuda), "bw", d, "pinned", str(size), str(iters)], env=env)["bw"]
            r[f"{d}_GBps"] = size / statistics.median(ns)
        lat = rb.run_lines([str(cuda), "lat", "200"], env=env)
        r["meminfo_p50_us"] = rb.pct(lat["meminfo"], 50) / 1e3
        launch = rb.run_lines([str(cuda), "launch", "2000"], env=env)["kernel"]
        r["launches_per_s"] = 2000 / ((launch[0] + launch[1]) / 1e9)
        res[where] = r
    binary = paper.build_binary()
    data = paper.digits_dir()
    args = ["--data", str(data), "--batch", "100", "--hidden", "128", "--steps", "20" if quick else "200",
            "--log-every", "1000", "--gpus", "1"]
    for where, env in (("local", None), ("remote", remote)):
        run = paper.run_program(binary, args, f"dp_train {where}", env=env, quiet=True)
        if run["rc"] == 0 and run["final"]:
            res[where]["dp_train_ms_per_1000"] = run["final"]["ms_per_1000"]
            res[where]["dp_train_test_err"] = run["final"]["test_err"]
    return res


def report(res: dict) -> str:
    out = ["# pyvgpu GPU check", "", f"{res['machine']}", "", f"GPUs found: {res['gpus']}", "",
           "## GPU tests", "", f"`{' '.join(GPU_TESTS)}`: {res['tests']['summary']} (exit {res['tests']['rc']})", "",
           "## CUDA test programs (their tests, daemons on the cuda backend)", "",
           f"{sum(r['status'] == 'pass' for r in res['programs'])} of {len(res['programs'])} passed", "",
           "| test | result | detail |", "|---|---|---|"]
    for r in res["programs"]:
        detail = r.get("detail", "").replace("\n", " ").replace("|", "/")[:160]
        out.append(f"| {r['program']} | {r['status']} | {detail} |")
    lr = res.get("bench", {})
    if lr:
        keys = sorted({k for v in lr.values() for k in v})
        out += ["", "## Local against remote (loopback, the same GPU)", "", "| figure | local | remote | remote / local |",
                "|---|---:|---:|---:|"]
        for k in keys:
            a, b = lr["local"].get(k), lr["remote"].get(k)
            ratio = f"{b / a:.2f}" if a and b else ""
            out.append(f"| {k} | {a if a is None else f'{a:.3f}'} | {b if b is None else f'{b:.3f}'} | {ratio} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-check")
    ap.add_argument("--quick", action="store_true", help="smaller benchmark sizes")
    a = ap.parse_args(argv)
    count, why = probe()
    if count == 0:
        print(f"no usable GPU: {why}; nothing to check")
        return 0
    from harness import start_daemon   # noqa: PLC0415
    a.out.mkdir(parents=True, exist_ok=True)
    res: dict = {"gpus": count, "machine": f"{platform.node()} {platform.platform()} {os.cpu_count()} CPUs"}
    print(f"==> {count} GPU(s); GPU tests", flush=True)
    res["tests"] = run_gpu_tests(a.out)
    print("==> CUDA test programs (tests/e2e, tests/driver on the cuda backend)", flush=True)
    res["programs"] = run_programs(a.out)
    daemon = start_daemon(a.out, backend="cuda", timeout=120)
    try:
        print("==> local against remote", flush=True)
        try:
            res["bench"] = local_vs_remote(daemon, a.quick)
        except Exception as exc:  # noqa: BLE001 - the report says what failed
            res["bench_error"] = str(exc)[-1000:]
    finally:
        daemon.stop()
    text = report(res)
    if "bench_error" in res:
        text += f"\nbenchmark failed: {res['bench_error']}\n"
    (a.out / "report.md").write_text(text)
    (a.out / "report.json").write_text(json.dumps(res, indent=1))
    print(text)
    print(f"report: {a.out / 'report.md'}")
    failed = res["tests"]["rc"] != 0 or "bench_error" in res
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
