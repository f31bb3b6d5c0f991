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

    @property
    def step(self) -> int:
        """Shared memory allocation granularity: 256 bytes before sm_80, 128 from it."""
        return 128 if self.major >= 8 else 256


@dataclass
class Func:
    static: int
    regs: int
    max_dyn: int
    carveout: int = -1


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
    share = dev.smem_sm if f.carveout < 0 else -(-(dev.smem_sm * f.carveout // 100) // dev.step) * dev.step
    return min(limit, max(share, alloc) // alloc) if alloc else limit


def available(dev: Device, f: Func, block: int, nblocks: int) -> int | None:
    """The most dynamic shared memory (at most the function's cap) with which nblocks blocks still fit, or None
    (cudaErrorInvalidValue) when they do not fit without any: found by bisection over the occupancy, so it is the
    definition itself, not the closed form the library uses."""
    if active(dev, f, block, 0) < nblocks:
        return None
    lo, hi = 0, f.max_dyn
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if active(dev, f, block, mid) >= nblocks else (lo, mid - 1)
    return lo


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
