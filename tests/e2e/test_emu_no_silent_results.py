"""No silent wrong results (issue 19, done-when; issue 18 part 6): a module the emulated GPU refuses, and an
emulator fault injected into a kernel, leave every later launch of those kernels and the next synchronisation
reporting an error (tests/cuda/emu_refusal.cu), through libvcudart and through NVIDIA's own runtime over libvcuda
(which keeps a lazily loaded module's failure to itself: the refusal is latched on the device, csrc/core/refusal.c).
"""
from __future__ import annotations

import os
import subprocess

import pytest

import pyvgpu

SASS_ONLY = ("-gencode", "arch=compute_75,code=sm_75")

# Loaded into the daemon at start (sitecustomize on its PYTHONPATH): kernels named injected_fault* fail inside the
# emulator as an internal bug would.
INJECTOR = '''
from pyvgpu_daemon.emu.runtime import chunk as _chunk
_run = _chunk.Chunk.run
def _faulty_run(self):
    if "injected_fault" in self.kernel.name:
        raise RuntimeError("fault injected by the test")
    return _run(self)
_chunk.Chunk.run = _faulty_run
'''


def emulated_only(daemon) -> None:
    """The sticky refusal is the emulated GPU's rule (csrc/core/refusal.c): a real GPU answers each launch of a kernel
    it has no image for with cudaErrorNoKernelImageForDevice and nothing else, as CUDA does (cuDNN relies on that)."""
    if daemon.backend == "cuda":
        pytest.skip("a real GPU: a refused kernel is an error of its own launch only, as in CUDA")


def test_refused_module_through_libvcudart(cuda_build, daemon, run):
    emulated_only(daemon)
    proc = run(cuda_build("emu_refusal.cu", *SASS_ONLY), [daemon], "refused")
    assert "PASS emu_refusal refused" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.count("cudaErrorNoKernelImageForDevice") >= 5, proc.stdout   # 3 launches, sync, copy


def test_refused_module_through_nvidias_runtime_over_libvcuda(cuda_build, daemon):
    emulated_only(daemon)
    exe = cuda_build("emu_refusal.cu", *SASS_ONLY, runtime="static")
    env = {**os.environ, "LD_LIBRARY_PATH": str(pyvgpu.lib_dir()), "PYVGPU_HOSTS": daemon.address}
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([str(exe), "refused"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "PASS emu_refusal refused" in proc.stdout, proc.stdout + proc.stderr
    assert "a kernel of a refused module was used" in proc.stderr


@pytest.mark.emu_only("the fault is injected into the emulator")
def test_injected_emulator_fault_is_reported_at_every_later_launch_and_sync(cuda_build, daemon_factory, run,
                                                                           tmp_path):
    (tmp_path / "sitecustomize.py").write_text(INJECTOR)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    daemon = daemon_factory(env={"PYTHONPATH": path})
    proc = run(cuda_build("emu_refusal.cu"), [daemon], "fault")
    assert "PASS emu_refusal fault" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.count("cudaErrorLaunchFailure") >= 6, proc.stdout
    log = daemon.log_text()
    assert "injected_fault_kernel" in log and "internal emulator error: RuntimeError: fault injected by the test" in log
