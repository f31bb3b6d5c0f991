"""libvnvml (SONAME libnvidia-ml.so.1), the NVML drop-in beside libvcuda: device count, names, UUIDs, PCI ids and
compute capability as the CUDA libraries see them, memory in use and utilization from the daemons' status, every
other NVML call NVML_ERROR_NOT_SUPPORTED; checked with a C program and with nvidia-ml-py (pynvml) on GPUs of two
daemons; the exports are nvml.h's."""
from __future__ import annotations

import pytest

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from harness import ROOT, TEST_BACKEND

NVML_DIR = ROOT / "csrc" / "nvml"


def nvml_header() -> Path:
    """nvml.h of the pinned nvidia-nvml-dev wheel (the `test` extra), found as tools/gen_nvml_exports.py finds it."""
    spec = importlib.util.spec_from_file_location("gen_nvml_exports", ROOT / "tools" / "gen_nvml_exports.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    header = gen.installed_header()
    if not header and TEST_BACKEND != "emu":     # a GPU host's check brings no build dependencies (CI has it)
        pytest.skip(f"needs nvml.h of {gen.PINNED}, a build dependency this GPU host does not have")
    assert header, f"{gen.PINNED} is not installed (pip install -e .[test])"
    return header


@pytest.mark.chain
def test_c_program_against_two_daemons(cuda_build, daemon_factory, lib_dir):
    a, b = daemon_factory(), daemon_factory("--emu-devices", "2")
    prog = cuda_build("nvml_check.c", f"-I{nvml_header().parent}", f"-L{lib_dir}", "-lnvidia-ml", "-lcuda",
                      runtime="none")
    ptx = cuda_build("drv_kernels.cu", "-ptx", runtime="none")
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "PYVGPU_HOSTS": f"{a.address},{b.address}"}
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([str(prog), str(ptx), "3"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "OK 30"
    assert proc.stderr.count("nvmlDeviceGetTemperature is not supported by libvnvml") == 1


PYNVML = """
import pynvml
pynvml.nvmlInit()
n = pynvml.nvmlDeviceGetCount()
print("count", n)
for i in range(n):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    print("gpu", i, pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h), mem.total, mem.used + mem.free,
          util.gpu, pci.busId)
print("driver", pynvml.nvmlSystemGetDriverVersion())
try:
    pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0))
except pynvml.NVMLError_NotSupported:
    print("power not supported")
pynvml.nvmlShutdown()
"""


@pytest.mark.chain
def test_pynvml_sees_the_remote_gpus(daemon_factory, lib_dir):
    a, b = daemon_factory("--emu-memory", "1G"), daemon_factory("--emu-memory", "2G")
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "PYVGPU_HOSTS": f"{a.address},{b.address}"}
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([sys.executable, "-c", PYNVML], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "count 2"
    gpus = [ln.split() for ln in lines if ln.startswith("gpu ")]
    assert [int(g[-4]) for g in gpus] == [1 << 30, 2 << 30]          # total memory, as each daemon was started
    assert all(g[-4] == g[-3] and 0 <= int(g[-2]) <= 100 for g in gpus)
    assert all(g[-5].startswith("GPU-") for g in gpus) and gpus[0][-5] != gpus[1][-5]
    assert "pyvgpu emulated GPU" in lines[1]
    assert lines[-2].startswith("driver 580") and lines[-1] == "power not supported"


def test_exports_are_nvml_h(lib_dir):
    lib = lib_dir / "libvnvml.so.1"
    dyn = subprocess.run(["readelf", "-d", str(lib)], check=True, capture_output=True, text=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dyn
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True).stdout
    exported = {ln.split()[2] for ln in nm.splitlines() if len(ln.split()) == 3}
    listed = set((NVML_DIR / "nvml_exports.txt").read_text().split())
    assert exported == listed and len(listed) > 400
    implemented = {ln.split()[2] for ln in nm.splitlines() if len(ln.split()) == 3 and ln.split()[1] == "T"}
    assert {"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetMemoryInfo", "nvmlErrorString"} <= implemented


@pytest.mark.skipif(TEST_BACKEND != "emu", reason="a build check (csrc/nvml's generated files against "
                    "nvidia-nvml-dev's nvml.h), no daemon's: CI runs it, a GPU host's check has nothing to add")
def test_generated_nvml_files_up_to_date(tmp_path):
    """csrc/nvml's generated files match nvml.h (NVML_HEADER, else the pinned nvidia-nvml-dev wheel's)."""
    header = os.environ.get("NVML_HEADER")
    args = ["--header", header] if header else []
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_nvml_exports.py"), *args, "--out", str(tmp_path)],
                   check=True, timeout=300)
    for name in ("nvml_exports.txt", "unsupported_gen.c", "libnvidia-ml.map"):
        assert (tmp_path / name).read_text() == (NVML_DIR / name).read_text(), name
