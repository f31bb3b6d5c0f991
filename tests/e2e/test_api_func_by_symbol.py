"""cudaGetFuncBySymbol end to end (tests/cuda/api_func_by_symbol.cu): the CUfunction libvcudart gives for a kernel it
registered is one libvcuda launches (cuLaunchKernel, results byte for byte the runtime launch's) and queries
(cuFuncGetAttribute, equal to cudaFuncGetAttributes); a NULL out pointer and a pointer that is no kernel fail as CUDA
documents. XLA (JAX) finds every kernel of its own so."""
from __future__ import annotations

import re

import pytest

import pyvgpu

pytestmark = pytest.mark.chain


def test_driver_function_of_a_runtime_kernel(cuda_build, daemon, run):
    proc = run(cuda_build("api_func_by_symbol.cu", f"-L{pyvgpu.lib_dir()}", "-lcuda"), [daemon], timeout=300)
    assert re.search(r"^OK 7$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "is not supported" not in proc.stderr
