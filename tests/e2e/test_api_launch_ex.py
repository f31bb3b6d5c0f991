"""Launches with attributes (tests/cuda/api_launch_ex.cu): cudaLaunchKernelExC and cuLaunchKernelEx with the
attributes CUB, thrust and frameworks pass (hints give a plain launch's results, events are recorded after the kernel,
cooperative launches run, bigger clusters and unknown attributes are refused with CUDA's codes, a captured launch
replays),
and thrust/CUB merge sorts launched through cudaLaunchKernelExC against std::sort; through libvcudart, and built the
default way (NVIDIA's static runtime, which reaches libvcuda's cuLaunchKernelEx)."""
from __future__ import annotations

import re
import subprocess

import pytest

import pyvgpu
from harness import run_static

pytestmark = pytest.mark.chain

PROGRAM = "api_launch_ex.cu"


def flags() -> tuple[str, ...]:
    return (f"-L{pyvgpu.lib_dir()}", "-lcuda")


def imports(exe) -> str:
    return subprocess.run(["nm", "-D", str(exe)], capture_output=True, text=True, check=True).stdout


def test_launch_with_attributes_through_libvcudart(cuda_build, daemon, run):
    exe = cuda_build(PROGRAM, *flags())
    assert "cudaLaunchKernelExC" in imports(exe)          # thrust/CUB merge sort really take this path
    proc = run(exe, [daemon], timeout=900)
    assert re.search(r"^OK 32$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "ClusterDimension (4) refused" in proc.stderr   # refusals are said, by name


def test_launch_with_attributes_through_nvidia_static_runtime(cuda_build, daemon):
    proc = run_static(cuda_build(PROGRAM, *flags(), runtime="static"), [daemon], timeout=900)
    assert re.search(r"^OK 32$", proc.stdout, re.M), proc.stdout + proc.stderr + daemon.log_tail()
    assert "is not supported by libvcuda" not in proc.stderr, proc.stderr
