"""cudaFuncSetAttribute, cudaFuncGetAttributes, cudaDeviceSetLimit/GetLimit end to end through libvcudart and the
emulated device (tests/cuda/api_funcattr.cu)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from pyvgpu.protocol import LIMIT_DEFAULTS

pytestmark = pytest.mark.chain
PRINTF = "device printf reaches the program only from the emulator: a real GPU's goes to its daemon's own stdout"


def device_answers(out: str) -> tuple[int, dict[int, str], str]:
    """(the opt-in shared memory per block, each cudaLimit's default or "unsupported", big_smem's maximum dynamic
    shared memory and carveout after cudaDeviceReset) a run of the program printed."""
    optin = re.search(r"^optin (\d+)$", out, re.M)
    reset = re.search(r"^RESET (-?\d+ -?\d+)$", out, re.M)
    assert optin and reset, out
    limits = dict((int(n), v) for n, v in re.findall(r"^LIMIT (\d+) (\w+)$", out, re.M))
    return int(optin.group(1)), limits, reset.group(1)


def reference_answers(cuda_build, backend: str) -> tuple[int, dict[int, str], str]:
    """What the device of `backend` answers without pyvgpu: the emulated sm_75 has CUDA's defaults for every limit
    (pyvgpu.protocol.LIMIT_DEFAULTS) and 64 KiB of opt-in shared memory, and keeps big_smem's attributes (64 KiB,
    carveout 50) across a device reset as NVIDIA's runtime does; a real GPU answers what its driver says,
    so the reference is the same program run natively (static runtime, the host's libcuda.so.1; in the GPU check's
    rehearsal that is pyvgpu's own over the emulated GPU, the chain's far end)."""
    if backend != "cuda":
        return 65536, {n: str(v) for n, v in LIMIT_DEFAULTS.items()}, "65536 50"
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    proc = subprocess.run([str(cuda_build("api_funcattr.cu", runtime="static"))], capture_output=True, text=True,
                          timeout=300, env=env)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), "native run: " + proc.stdout + proc.stderr
    return device_answers(proc.stdout)


def test_dynamic_shared_opt_in_attributes_and_limits(cuda_build, daemon, run, backend):
    prog = cuda_build("api_funcattr.cu")
    proc = run(prog, [daemon], timeout=300)
    out = proc.stdout
    assert re.search(r"^OK \d+$", out, re.M), out + proc.stderr
    assert "big_smem ok" in out
    # cudaFuncSetAttribute of a pointer that is no kernel: libvcudart answers as NVIDIA's runtime does on a GPU
    assert re.search(r"^NOTAKERNEL cudaErrorInvalidResourceHandle$", out, re.M), out
    # cudaDevAttrMaxSharedMemoryPerBlockOptin, every limit's default (or the driver's "unsupported", e.g.
    # cudaLimitDevRuntimeSyncDepth on compute capability 9.0 and later) and the attributes after a device reset
    # exactly as the device answers them natively
    optin, limits, reset = device_answers(out)
    assert (optin, limits, reset) == reference_answers(cuda_build, backend)
    assert len(limits) == len(LIMIT_DEFAULTS)
    # nothing fell through to the unsupported stubs
    assert "is not supported" not in proc.stderr


@pytest.mark.emu_only(PRINTF)
def test_printf_fifo_limit_bounds_one_launch(cuda_build, daemon, run):
    prog = cuda_build("api_funcattr.cu")
    fifo = 4096
    proc = run(prog, [daemon], "printf", str(fifo), timeout=300)
    assert "PRINTF_DONE" in proc.stdout, proc.stdout + proc.stderr
    text = proc.stdout.split("PRINTF_DONE")[0]
    lines = [ln for ln in text.splitlines() if ln.startswith("thread ")]
    assert 0 < len(text.encode()) <= fifo
    assert 0 < len(lines) < 2 * 128 * 4                  # the excess was dropped, as on a GPU
    assert "dropped" in daemon.log_text()


@pytest.mark.emu_only(PRINTF)
def test_printf_default_fifo_keeps_everything(cuda_build, daemon, run):
    prog = cuda_build("api_funcattr.cu")
    proc = run(prog, [daemon], "printf", str(1 << 20), timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("thread ")]
    assert len(lines) == 2 * 128 * 4


@pytest.mark.emu_only("starts its own cuda daemon")
def test_on_a_real_gpu(cuda_build, daemon_factory, run):
    """The same program against the cuda backend (cuFuncSetAttribute / cuCtxSetLimit); skipped without a GPU."""
    from pyvgpu_daemon.backends.cuda import probe   # noqa: PLC0415

    if probe()[0] == 0:
        pytest.skip("no CUDA GPU")
    d = daemon_factory(backend="cuda")
    proc = run(cuda_build("api_funcattr.cu"), [d], timeout=300)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
