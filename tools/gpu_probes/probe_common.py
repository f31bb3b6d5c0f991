"""What the framework probes of the real-GPU check share (tools/gpu_check.py's frameworks stage runs each
gpu_probe_*.py; docs/gpu-check.md has the convention).

A probe runs one framework's steps (a short program, BODY) three ways, each in a process of its own with its share
of the probe's time:
  native      on the GPU itself, no pyvgpu: tells a broken probe or GPU from a pyvgpu failure
  driver      NVIDIA's libraries of the framework's own wheels over pyvgpu's driver: a folder holding only
              libcuda.so.1 (libvcuda) and libnvidia-ml.so.1 (libvnvml) on LD_LIBRARY_PATH, PYVGPU_HOSTS = the
              check's `--backend cuda` daemon; the call census of that process (libvcuda's entry points reached,
              answered unsupported, tables and names asked for and not offered) goes to census-driver.txt of the
              probe's output folder: where NVIDIA's libraries fail only this way (cublasCreate's
              CUBLAS_STATUS_INTERNAL_ERROR on an H100, GPU run 3), it says what they asked for; cuBLAS's and
              cuBLASLt's own logs (cublas-driver.log, cublaslt-driver-PID.log there) say which step failed
  pyvgpu run  the environment `pyvgpu run` gives a program (LD_PRELOAD libvcudart + libvcuda, every client library
              on LD_LIBRARY_PATH)
Each step prints "STEP <name>: ok <detail>" or "STEP <name>: FAIL <why>". Exit 0 when a pyvgpu way passed every
step; 77 when the framework is not installed, or when the native run fails too and no pyvgpu way failed a step
that passed natively (the last line says "not applicable: fails natively: <why>"); else 1. The last line sums up
each way.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
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


def library_logs(out: Path) -> dict[str, str]:
    """cuBLAS's and cuBLASLt's own logs of the driver way, into the probe's folder: the census counts what NVIDIA's
    libraries called, not what failed; where cublasCreate answers CUBLAS_STATUS_INTERNAL_ERROR only this way (an H100,
    GPU runs 2 and 3), these name the step inside it that failed. cuBLAS: CUBLAS_LOGINFO_DBG/CUBLAS_LOGDEST_DBG;
    cuBLASLt: CUBLASLT_LOG_LEVEL 5 (errors, hints, info and every API call: a failing create stops early) with its
    %i (the process id) in the file name."""
    return {"CUBLAS_LOGINFO_DBG": "1", "CUBLAS_LOGDEST_DBG": str(out / "cublas-driver.log"),
            "CUBLASLT_LOG_LEVEL": "5", "CUBLASLT_LOG_FILE": str(out / "cublaslt-driver-%i.log")}


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
    driver["PYVGPU_CENSUS"] = str(out / "census-driver.txt")
    driver.update(library_logs(out))
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
    results: dict[str, Outcome] = {}
    all_ways = ways()
    for i, (name, env) in enumerate(all_ways):
        left = budget - (time.monotonic() - t0)
        share = max(left / (len(all_ways) - i), min(left, 5.0))   # an even split, but never a useless sliver
        if share < 2:
            summary.append(f"{name}: not run (no time left)")
            continue
        print(f"== {framework} {name} (at most {share:.0f} s)", flush=True)
        results[name] = run_way(env, body, share)
        summary.append(results[name].line(name))
    rc, verdict = judge(results)
    print(f"{framework}: " + (verdict + "; " if verdict else "") + "; ".join(summary))
    return rc


@dataclass
class Outcome:
    """One way's run of the body: its steps and how the process ended."""
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)     # step -> why
    note: str = ""                                           # timed out / exit code / nothing ran
    first: str = ""                                          # the first failure, for the summary

    @property
    def ok(self) -> bool:
        return bool(self.passed) and not self.failed and not self.note

    def line(self, name: str) -> str:
        total = len(self.passed) + len(self.failed)
        if self.ok:
            return f"{name} {total}/{total}"
        return f"{name} {len(self.passed)}/{total} ({self.note + '; ' if self.note else ''}first failure {self.first})"


def run_way(env: dict, body: str, seconds: float) -> Outcome:
    try:
        proc = subprocess.run([sys.executable, "-c", STEP_HELPER + body], env=env, capture_output=True, text=True,
                              timeout=seconds)
        text, rc, note = proc.stdout, proc.returncode, ""
    except subprocess.TimeoutExpired as exc:
        text = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        rc, note = None, f"timed out after {seconds:.0f} s"
        proc = None
    print(text, end="", flush=True)
    if proc is not None and proc.stderr.strip():
        print("stderr: " + "\n".join(proc.stderr.strip().splitlines()[-8:]), flush=True)
    out = Outcome(note=note or (f"exit {rc}" if rc != 0 else ""))
    for ln in text.splitlines():
        if ln.startswith("STEP ") and ": " in ln:
            step, result = ln[5:].split(": ", 1)
            if result.startswith("FAIL"):
                out.failed[step] = result[5:]
            else:
                out.passed.append(step)
    if out.failed:
        out.first = next(f"{k}: FAIL {v}" for k, v in out.failed.items())
    elif proc is not None:
        out.first = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
    return out


def judge(results: dict[str, Outcome]) -> tuple[int, str]:
    """(exit code, a verdict for the summary line). A pyvgpu way passes when it passes every step; a step that fails
    natively too is the framework's or the machine's, not pyvgpu's: then the probe is not applicable here (77),
    unless a pyvgpu way failed a step that passed natively (pyvgpu's failure: 1)."""
    native = results.get("native")
    remote = {n: o for n, o in results.items() if n != "native"}
    if any(o.ok for o in remote.values()):
        return 0, ""
    if native is None or native.ok:
        return 1, ""
    # native failed: pyvgpu is to blame only for what worked natively
    worked = set(native.passed)
    blamed = [f"{n}: {s}" for n, o in remote.items() for s in o.failed if s in worked]
    if blamed:
        return 1, f"fails through pyvgpu where native passes ({blamed[0]})"
    why = native.first if native.failed else native.note or native.first
    return SKIP, f"not applicable: fails natively: {why}"
