"""Framework probe of scripts/gpu-check.sh (tools/gpu_check.py runs tests/**/gpu_probe_*.py): the scripts of
tests/frameworks under `pyvgpu run` against the real-GPU daemon PYVGPU_GPU_CHECK_HOSTS, with everything that needs
framework kernels (--real): CuPy (CUB included), cuSOLVER through CuPy (LU and eigh included), numba-cuda, PyTorch (elementwise, reductions, softmax, random
numbers, autograd, a 30-step Adam MLP against the CPU, a cuDNN convolution; tensors on two GPUs when two daemons
are given), JAX's jnp.dot. A framework the machine lacks is reported and not counted. Exit 0 when every script
that ran passed, 77 when none could run or in a rehearsal (the chain's emulated GPU stands in: tests/frameworks
runs the same scripts there), else 1; the last line sums up. tools/gpu_probes/gpu_probe_{torch,cupy,numba}.py are the check's
own shorter probes (native, driver-only and `pyvgpu run` ways); this one runs the full test scripts."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SKIP = 77
# (name, module, script, arguments, share of the probe's time)
RUNS = [("cupy", "cupy", "fw_cupy.py", [], 0.25), ("cusolver", "cupy", "fw_cusolver.py", ["--real"], 0.1),
        ("numba", "numba", "fw_numba.py", [], 0.15), ("torch", "torch", "fw_torch.py", ["--real"], 0.3),
        ("jax", "jax", "fw_jax.py", [], 0.2)]


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
    ran, failed, missing = 0, [], []
    for name, module, script, args, share in RUNS:
        if importlib.util.find_spec(module) is None:
            missing.append(name)
            continue
        extra = ["--two-gpus"] if module == "torch" and "," in hosts else []
        cmd = [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", hosts, "--census", str(out / f"census-{name}.txt"),
               "--", sys.executable, str(HERE / script), *args, *extra]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget * share)
        except subprocess.TimeoutExpired:
            failed.append(f"{name} (timed out)")
            continue
        (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
        print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else f"{name}: no output", flush=True)
        ran += 1
        if proc.returncode != 0:
            failed.append(name)
    if not ran:
        print(f"no framework installed ({', '.join(missing)})")
        return SKIP
    print(f"frameworks: {ran - len(failed)} of {ran} passed" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; not installed: {', '.join(missing)}" if missing else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
