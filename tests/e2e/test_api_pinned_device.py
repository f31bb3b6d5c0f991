"""Page-locked host memory used directly by kernels under unified addressing (tests/cuda/api_pinned_device.cu):
cudaMallocHost / cudaHostAlloc memory (mapped flag or not) reached from kernel parameters and checked against host
results, a kernel spinning on a page-locked flag (NVIDIA's p2pBandwidthLatencyTest pattern), registered memory given
a device copy only when its device pointer is asked for; through libvcudart and through NVIDIA's static runtime."""
from __future__ import annotations

import re

from harness import run_static


def test_pinned_memory_reached_by_kernels(cuda_build, daemon, run):
    proc = run(cuda_build("api_pinned_device.cu"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


def test_pinned_memory_through_nvidia_static_runtime(cuda_build, daemon):
    proc = run_static(cuda_build("api_pinned_device.cu", runtime="static"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr + daemon.log_tail()
