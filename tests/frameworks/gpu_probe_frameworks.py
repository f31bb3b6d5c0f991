"""Framework probe of scripts/gpu-check.sh (tools/gpu_check.py runs tests/**/gpu_probe_*.py): the scripts of
tests/frameworks under `pyvgpu run` against the real-GPU daemon PYVGPU_GPU_CHECK_HOSTS, with everything that needs
framework kernels (--real): CuPy (CUB included), cuSOLVER through CuPy (LU and eigh included), cuFFT through CuPy, numba-cuda, PyTorch (elementwise, reductions, softmax, random
numbers, autograd, a 30-step Adam MLP against the CPU, a cuDNN convolution; tensors on two GPUs when two daemons
are given), JAX's jnp.dot. A framework the machine lacks is reported and not counted. A script that fails under pyvgpu
is run again natively (no pyvgpu): when it fails there too and no check that passed natively failed under pyvgpu, the
framework is "not applicable" here (broken on the machine, not pyvgpu's; the rule of tools/gpu_probes/probe_common.py)
and not counted either. Exit 0 when every script that counted passed, 77 when none could run or in a rehearsal (the chain's emulated GPU stands in: tests/frameworks
runs the same scripts there), else 1; the last line sums up. tools/gpu_probes/gpu_probe_{torch,cupy,numba}.py are the check's
own shorter probes (native, driver-only and `pyvgpu run` ways); this one runs the full test scripts."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SKIP = 77
# (name, module, script, arguments, share of the probe's time)
RUNS = [("cupy", "cupy", "fw_cupy.py", [], 0.2), ("cusolver", "cupy", "fw_cusolver.py", ["--real"], 0.1),
        ("cufft", "cupy", "fw_cufft.py", [], 0.05),
        ("numba", "numba", "fw_numba.py", [], 0.15), ("torch", "torch", "fw_torch.py", ["--real"], 0.3),
        ("jax", "jax", "fw_jax.py", [], 0.2)]
# The numba script's processes here, natively and under pyvgpu alike (nowhere else: CI's runs of the same scripts do
# not have it): numba-cuda registers an overload of np.row_stack, the alias of np.vstack that NumPy 2.5 removed, when
# it first compiles a kernel, so on the GPU image every numba-cuda kernel failed natively (GPU runs 1-3); the alias is
# put back before the script runs (tools/gpu_probes/gpu_probe_numba.py does the same and says more).
NUMPY_25_SHIM = """import runpy, sys
import numpy as np
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
    print(f"numpy shim: np.row_stack = np.vstack for numba-cuda (NumPy {np.__version__}; this probe only)", flush=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
PRELUDES = {"numba": NUMPY_25_SHIM}


def python_for(name: str) -> list[str]:
    """The interpreter command line a framework's script runs under (with its prelude, if it has one)."""
    return [sys.executable, "-c", PRELUDES[name]] if name in PRELUDES else [sys.executable]


def checks_passed(out: str) -> set[str]:
    """The checks a script's output (tests/frameworks/fwcheck.py) says passed."""
    return set(re.findall(r"^ok (.+)$", out, re.M))


def checks_failed(out: str) -> list[str]:
    return re.findall(r"^(?:WRONG|refused) ([^:]+):", out, re.M)


def native_verdict(remote_out: str, native_rc: int, native_out: str) -> str | None:
    """Why a script that failed under pyvgpu is not applicable here (it fails natively too, and under pyvgpu nothing
    failed that passed natively), or None: the failure is pyvgpu's."""
    if native_rc == 0:
        return None
    worked = checks_passed(native_out)
    if any(c in worked for c in checks_failed(remote_out)):
        return None
    line = next((ln for ln in native_out.splitlines() if ln.startswith(("WRONG ", "refused "))), None)
    last = native_out.strip().splitlines()[-1] if native_out.strip() else f"exit {native_rc}"
    return f"fails natively: {line or last}"


def run_natively(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """The script alone on the GPU itself (no pyvgpu run, nothing preloaded); a timeout counts as a failure."""
    native_env = {k: v for k, v in env.items() if k != "LD_PRELOAD" and not k.startswith("PYVGPU_")}
    try:
        proc = subprocess.run(cmd, env=native_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "timed out natively"
    return proc.returncode, proc.stdout + proc.stderr


def main() -> int:
    hosts = os.environ.get("PYVGPU_GPU_CHECK_HOSTS")
    if not hosts:
        print("no PYVGPU_GPU_CHECK_HOSTS: nothing to probe")
        return SKIP
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    libdir = os.environ.get("PYVGPU_GPU_CHECK_LIBDIR")
    if libdir:
        env["PYVGPU_LIB"] = str(Path(libdir) / "libvcudart.so")
    budget = float(os.environ.get("PYVGPU_GPU_CHECK_SECONDS", "600"))
    out = Path(os.environ.get("PYVGPU_GPU_CHECK_OUT", "."))
    if os.environ.get("PYVGPU_GPU_CHECK_REHEARSAL") == "1":
        print("rehearsal: these scripts run on emulated GPUs in tests/frameworks already; nothing to add here")
        return SKIP
    ran, failed, missing, not_applicable = 0, [], [], []
    for name, module, script, args, share in RUNS:
        if importlib.util.find_spec(module) is None:
            missing.append(name)
            continue
        extra = ["--two-gpus"] if module == "torch" and "," in hosts else []
        cmd = [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", hosts, "--census", str(out / f"census-{name}.txt"),
               "--", *python_for(name), str(HERE / script), *args, *extra]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget * share)
        except subprocess.TimeoutExpired:
            failed.append(f"{name} (timed out)")
            continue
        (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
        print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else f"{name}: no output", flush=True)
        if proc.returncode != 0:
            rc, native_out = run_natively([*python_for(name), str(HERE / script), *args, *extra], env,
                                          budget * share)
            (out / f"{name}-native.log").write_text(native_out)
            why = native_verdict(proc.stdout, rc, native_out)
            if why:
                print(f"{name}: not applicable: {why}", flush=True)
                not_applicable.append(name)
                continue
            failed.append(name)
        ran += 1
    if not ran:
        print(f"no framework could run here (not installed: {', '.join(missing) or 'none'}; not applicable: "
              f"{', '.join(not_applicable) or 'none'})")
        return SKIP
    print(f"frameworks: {ran - len(failed)} of {ran} passed" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; not installed: {', '.join(missing)}" if missing else "")
          + (f"; not applicable (fail natively): {', '.join(not_applicable)}" if not_applicable else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
