"""Kernels through libvcudart on the emulated GPU: nvcc 13 registration/launch ABI, parameter packing by the layout
from MODULE_LOAD, symbols, device printf on fd 1 in order, launch-config errors answered locally, attributes and
occupancy, stream/event ordering, and a kernel fault surfacing at the next synchronizing call, sticky."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain


def test_kernels(cuda_build, daemon, run, backend):
    proc = run(cuda_build("api_kernels.cu"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    if backend == "emu":
        # printf output of the kernel arrives once (one thread prints), between the host lines around the launch
        assert "before printf kernel\nhello from the device 42\nafter printf kernel\n" in proc.stdout
    else:   # the cuda backend's: on the daemon's stdout, as a GPU's driver writes it
        assert "before printf kernel\nafter printf kernel\n" in proc.stdout
        assert daemon.log_text().count("hello from the device 42") == 1


def test_kernel_fault_is_deferred_and_sticky(cuda_build, daemon, run):
    proc = run(cuda_build("api_kernels.cu"), [daemon], "fault", timeout=600)
    assert "fault cudaErrorIllegalAddress" in proc.stdout
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


@pytest.mark.parametrize("flags", [("-no-compress",), ("-gencode", "arch=compute_75,code=compute_75")],
                         ids=["uncompressed-fatbin", "ptx-only"])
def test_kernels_other_fatbin_shapes(cuda_build, daemon, run, flags):
    proc = run(cuda_build("api_kernels.cu", *flags), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
