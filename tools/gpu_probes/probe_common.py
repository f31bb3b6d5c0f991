"""What the framework probes of the real-GPU check share (tools/gpu_check.py's frameworks stage runs each
gpu_probe_*.py; docs/gpu-check.md has the convention).

A probe runs one framework's steps (a short program, BODY) three ways, each in a process of its own with its share
of the probe's time:
  native      on the GPU itself, no pyvgpu: tells a broken probe or GPU from a pyvgpu failure
  driver      NVIDIA's libraries of the framework's own wheels over pyvgpu's driver: a folder holding only
              libcuda.so.1 (libvcuda) and libnvidia-ml.so.1 (libvnvml) on LD_LIBRARY_PATH, PYVGPU_HOSTS = the
              check's `--backend cuda` daemon
  pyvgpu run  the environment `pyvgpu run` gives a program (LD_PRELOAD libvcudart + libvcuda, every client library
              on LD_LIBRARY_PATH)
Each step prints "STEP <name>: ok <detail>" or "STEP <name>: FAIL <why>". Exit 0 when a pyvgpu way passed every
step, 77 when the framework is not installed, else 1; the last line sums up each way.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

SKIP = 77
# Printed by BODY's helper; each probe's body starts with it.
STEP_HELPER = '''
import sys, time
def step(name, fn):
    t = time.monotonic()
    try:
        detail = fn()
        print(f"STEP {name}: ok {detail if detail is not None else ''} ({time.monotonic() - t:.1f} s)", flush=True)
        return True
    except BaseException as exc:  # a failed step is the result, not a crash of the probe
        msg = (str(exc).strip().splitlines() or [''])[0][:240]
        print(f"STEP {name}: FAIL {type(exc).__name__}: {msg}", flush=True)
        return False
def rel_err(got, want):
    import numpy as np
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))
'''


def driver_only_dir(libdir: Path, out: Path) -> Path:
    """A folder with only the driver and NVML of pyvgpu (and the core they load), for LD_LIBRARY_PATH."""
    d = out / "driver-only"
    d.mkdir(parents=True, exist_ok=True)
    for link, target in (("libcuda.so.1", "libvcuda.so.1"), ("libcuda.so", "libvcuda.so.1"),
                         ("libnvidia-ml.so.1", "libvnvml.so.1"), ("libpvcore.so", "libpvcore.so")):
        p = d / link
        if p.is_symlink() or p.exists():
            p.unlink()
        p.symlink_to(libdir / target)
    return d


def ways() -> list[tuple[str, dict]]:
    env = dict(os.environ)
    hosts = env.get("PYVGPU_GPU_CHECK_HOSTS", "")
    libdir = Path(env.get("PYVGPU_GPU_CHECK_LIBDIR", ""))
    out = Path(env.get("PYVGPU_GPU_CHECK_OUT", "."))
    native = dict(env)
    driver = dict(env)
    ld = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and Path(p) != libdir]
    driver["LD_LIBRARY_PATH"] = os.pathsep.join([str(driver_only_dir(libdir, out)), *ld])
    driver["PYVGPU_HOSTS"] = hosts
    from pyvgpu import cli, hostmap   # noqa: PLC0415 (the checkout is on PYTHONPATH)
    run = cli.run_env(hostmap.parse_env(hosts, "--hosts"), base=env)
    return [("native", native), ("driver", driver), ("pyvgpu run", run)]


def main(framework: str, module: str, body: str) -> int:
    if importlib.util.find_spec(module) is None:
        print(f"{framework}: not installed here ({module} not importable)")
        return SKIP
    budget = float(os.environ.get("PYVGPU_GPU_CHECK_SECONDS", "120")) - 3
    t0 = time.monotonic()
    summary: list[str] = []
    passed_ways: list[str] = []
    all_ways = ways()
    for i, (name, env) in enumerate(all_ways):
        left = budget - (time.monotonic() - t0)
        share = max(left / (len(all_ways) - i), min(left, 5.0))   # an even split, but never a useless sliver
        if share < 2:
            summary.append(f"{name}: not run (no time left)")
            continue
        print(f"== {framework} {name} (at most {share:.0f} s)", flush=True)
        try:
            proc = subprocess.run([sys.executable, "-c", STEP_HELPER + body], env=env, capture_output=True,
                                  text=True, timeout=share)
            text, rc, note = proc.stdout, proc.returncode, ""
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            rc, note = None, f"timed out after {share:.0f} s"
            proc = None
        print(text, end="", flush=True)
        if proc is not None and proc.stderr.strip():
            print("stderr: " + "\n".join(proc.stderr.strip().splitlines()[-8:]), flush=True)
        steps = [ln for ln in text.splitlines() if ln.startswith("STEP ")]
        fails = [ln[5:] for ln in steps if ": FAIL" in ln]
        good = len(steps) - len(fails)
        if not note and rc != 0:
            note = f"exit {rc}"
        if steps and not fails and not note:
            summary.append(f"{name} {good}/{len(steps)}")
            if name != "native":
                passed_ways.append(name)
        else:
            first = fails[0] if fails else (proc.stderr.strip().splitlines() or ["?"])[-1][:200] if proc else ""
            summary.append(f"{name} {good}/{len(steps)} ({note + '; ' if note else ''}first failure {first})")
    print(f"{framework}: " + "; ".join(summary))
    return 0 if passed_ways else 1
