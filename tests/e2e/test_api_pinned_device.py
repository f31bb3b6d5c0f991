"""Page-locked host memory used directly by kernels under unified addressing (tests/cuda/api_pinned_device.cu):
cudaMallocHost / cudaHostAlloc memory (mapped flag or not) reached from kernel parameters and checked against host
results, a kernel spinning on a page-locked flag (NVIDIA's p2pBandwidthLatencyTest pattern), registered memory given
a device copy only when its device pointer is asked for; through libvcudart and through NVIDIA's static runtime.
A synchronous copy from page-locked memory has landed when it returns, for a kernel on a non-blocking stream too
(tests/cuda/api_copy_order.cu: the emulator runs in order, a GPU's daemon waits for the copy on HTOD_LANDED)."""
from __future__ import annotations

import re

from harness import run_static


def test_pinned_memory_reached_by_kernels(cuda_build, daemon, run):
    proc = run(cuda_build("api_pinned_device.cu"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


def test_pinned_memory_through_nvidia_static_runtime(cuda_build, daemon):
    proc = run_static(cuda_build("api_pinned_device.cu", runtime="static"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr + daemon.log_tail()


def test_a_copy_from_page_locked_memory_has_landed_when_it_returns(cuda_build, daemon, run):
    """cudaMemcpy from cudaMallocHost memory, then a kernel on a cudaStreamNonBlocking stream reads the new bytes in
    every round. The emulated GPU runs a session's work in order, so this can fail only on a GPU (scripts/gpu-check.sh's
    programs stage), where the daemon's pageable copy returns once staged and a non-blocking stream does not wait
    for the default stream (the managed push's failure in GPU run 6): the client's HTOD_LANDED after the copy makes
    the daemon wait for it (tests/daemon/test_daemon_cuda_htod_landed.py counts that wait on the chain)."""
    proc = run(cuda_build("api_copy_order.cu"), [daemon], timeout=300)
    assert re.search(r"^OK 12$", proc.stdout, re.M), proc.stdout + proc.stderr
