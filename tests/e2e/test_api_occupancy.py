"""Occupancy (tests/cuda/api_occupancy.cu): cudaOccupancyMaxActiveBlocksPerMultiprocessor and
cudaOccupancyAvailableDynamicSMemPerBlock through libvcudart, and built with NVIDIA's static runtime (whose calls are
libvcuda's cuOccupancy*: NVIDIA's libcublas asks cuOccupancyAvailableDynamicSMemPerBlock in cublasCreate, GPU run 1
#5), checked against the rules of CUDA's occupancy calculator (cuda_occupancy.h) written out below; on a real GPU
against a native run of the same program."""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

import pytest

import pyvgpu

pytestmark = pytest.mark.chain
PROGRAM = "api_occupancy.cu"


@dataclass
class Device:
    smem_sm: int
    optin: int
    reserved: int
    threads_sm: int
    blocks_sm: int
    regs_sm: int
    major: int
    minor: int

    @property
    def step(self) -> int:
        """Shared memory allocation granularity: 256 bytes before sm_80, 128 from it."""
        return 128 if self.major >= 8 else 256

    def config_up(self, size: int) -> int:
        """`size` rounded up to a shared memory size the SM can be configured to (cuda_occupancy.h,
        cudaOccAlignUpShmemSizeVoltaPlus; the emulated sm_75, Turing, has 32 and 64 KiB)."""
        if (self.major, self.minor) == (7, 5):
            kib = [32, 64]
        elif self.major == 7:
            kib = [0, 8, 16, 32, 64, 96]
        elif self.major == 8:
            kib = [0, 8, 16, 32, 64, 100] + ([132, 164] if self.minor in (0, 7) else [])
        else:                  # sm_90 (and Blackwell's 10.x): up to 228 KiB
            kib = [0, 8, 16, 32, 64, 100, 132, 164, 196, 228]
        return next(k * 1024 for k in kib if size <= k * 1024)


@dataclass
class Func:
    static: int
    regs: int
    max_dyn: int
    carveout: int = -1


def preferred(dev: Device, f: Func) -> int:
    """The SM's shared memory the function's carveout preference asks for: percent of it (all by default), rounded
    down to a byte, then up to a configurable size."""
    return dev.config_up(dev.smem_sm if f.carveout < 0 else dev.smem_sm * f.carveout // 100)


def active(dev: Device, f: Func, block: int, dyn: int) -> int:
    """Blocks of `block` threads with `dyn` bytes of dynamic shared memory resident on one SM: the least of the
    thread, block, register and shared-memory limits. A block is allocated its static + dynamic shared memory plus
    the driver's reserve, rounded up to the step; several share the carveout's preferred part of the SM (all of it
    by default), a preference too small for one block gives way."""
    warps = -(-block // 32)
    limit = min(dev.threads_sm // (warps * 32), dev.blocks_sm)
    if f.regs:
        limit = min(limit, dev.regs_sm // (-(-f.regs * 32 // 256) * 256 * warps))
    alloc = -(-(f.static + dev.reserved + dyn) // dev.step) * dev.step
    if dyn > f.max_dyn or alloc > dev.optin + dev.reserved:
        return 0
    return min(limit, max(preferred(dev, f), alloc) // alloc) if alloc else limit


def available(dev: Device, f: Func, block: int, nblocks: int) -> int | None:
    """What cudaOccupancyAvailableDynamicSMemPerBlock answers, or None (cudaErrorInvalidValue) when nblocks do not
    fit without any dynamic shared memory: cuda_occupancy.h's closed form (cudaOccAvailableDynamicSMemPerBlock), not
    the occupancy's definition. One block may have the per-block limit (opt-in plus the reserve); several share the
    preferred part of the SM evenly in allocation steps; less the static shared memory but not the reserve, so from
    sm_80 the answer can be up to the reserve more than really fits (an H100 natively: 46592 for 5 blocks of 32
    threads, where 5 blocks fit with 45568; real-GPU run 3)."""
    if active(dev, f, block, 0) < nblocks:
        return None
    limit = dev.optin + dev.reserved
    per_sm = limit if nblocks == 1 else (preferred(dev, f) or dev.config_up(1))
    avail = min(per_sm // nblocks // dev.step * dev.step, limit)
    return min(max(avail - f.static, 0), f.max_dyn)


def check_against_rules(out: str) -> int:
    """Every ACTIVE and AVAIL line of the program's output as the rules say; returns how many were checked."""
    dev = None
    funcs: dict[str, Func] = {}
    carveout = -1
    checked = 0
    for line in out.splitlines():
        word, *rest = line.split()
        if word == "DEV":
            dev = Device(*map(int, rest))
        elif word == "FUNC":
            funcs[rest[0]] = Func(*map(int, rest[1:]))
        elif word == "OPTIN":       # the program opted both functions in to all the shared memory a block may have
            funcs["dyn_user"].max_dyn = dev.optin
            funcs["static_user"].max_dyn = dev.optin - funcs["static_user"].static
        elif word == "CARVEOUT":
            carveout = int(rest[0])
        elif word in ("ACTIVE", "AVAIL"):
            f = funcs[rest[0]]
            f = Func(f.static, f.regs, f.max_dyn, carveout if rest[0] == "dyn_user" else -1)
            if word == "ACTIVE":
                block, dyn, n = map(int, rest[1:])
                assert n == active(dev, f, block, dyn), line
            else:
                block, nblocks, got = int(rest[1]), int(rest[2]), rest[3]
                want = available(dev, f, block, nblocks)
                assert got == ("invalid" if want is None else str(want)), line
            checked += 1
    return checked


def answers(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.split()[:1] in (["DEV"], ["FUNC"], ["ACTIVE"], ["AVAIL"])]


def native_answers(cuda_build) -> list[str]:
    """The same program run natively (static runtime, the host's libcuda.so.1): a real GPU's driver's answers."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    native = subprocess.run([str(cuda_build(PROGRAM, runtime="static"))], capture_output=True, text=True,
                            timeout=300, env=env)
    assert re.search(r"^OK 7$", native.stdout, re.M), "native run: " + native.stdout + native.stderr
    return answers(native.stdout)


def test_occupancy_through_libvcudart(cuda_build, daemon, run, backend):
    proc = run(cuda_build(PROGRAM), [daemon], timeout=300)
    assert re.search(r"^OK 7$", proc.stdout, re.M), proc.stdout + proc.stderr
    if backend == "cuda":          # a real GPU: every answer is its driver's own (gpu-check runs this way)
        assert answers(proc.stdout) == native_answers(cuda_build)
    else:
        assert check_against_rules(proc.stdout) > 150
    assert "is not supported" not in proc.stderr


def test_occupancy_through_nvidia_static_runtime_and_libvcuda(cuda_build, daemon, backend):
    exe = cuda_build(PROGRAM, runtime="static")
    env = {**os.environ, "LD_LIBRARY_PATH": str(pyvgpu.lib_dir()), "PYVGPU_HOSTS": daemon.address,
           "PYVGPU_CENSUS": "1"}
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert re.search(r"^OK 7$", proc.stdout, re.M), proc.stdout + proc.stderr + daemon.log_tail()
    if backend == "cuda":
        assert answers(proc.stdout) == native_answers(cuda_build)
    else:
        assert check_against_rules(proc.stdout) > 150
    assert "is not supported by libvcuda" not in proc.stderr, proc.stderr
    # NVIDIA's runtime answered through libvcuda's driver calls, not a calculator of its own
    assert re.search(r"^census reached libcuda.so.1 cuOccupancyAvailableDynamicSMemPerBlock [1-9]",
                     proc.stderr + proc.stdout, re.M), proc.stderr


@pytest.mark.emu_only("starts its own cuda daemon")
def test_on_a_real_gpu_as_natively(cuda_build, daemon_factory, run):
    """On a real GPU every answer must be the driver's own: the same program run natively is the reference."""
    from pyvgpu_daemon.backends.cuda import probe   # noqa: PLC0415

    if probe()[0] == 0:
        pytest.skip("no CUDA GPU")
    proc = run(cuda_build(PROGRAM), [daemon_factory(backend="cuda")], timeout=300)
    assert re.search(r"^OK 7$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert answers(proc.stdout) == native_answers(cuda_build)
