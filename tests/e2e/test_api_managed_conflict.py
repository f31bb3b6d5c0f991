"""Managed and mapped memory without silent merges (tests/cuda/api_managed_conflict.cu): host and device updating the
same words between two synchronizations (systemWideAtomics' pattern, with managed and with mapped memory; a host
write racing a kernel, then more work; a host thread writing during the synchronization) end in the sticky
conflict error naming the range, until cudaDeviceReset; disjoint and ordered updates merge exactly; the device
attributes say what pyvgpu provides."""
from __future__ import annotations

import re

import pytest

from harness import run_static
from pyvgpu.protocol import MANAGED_CONFLICT_ERROR

pytestmark = pytest.mark.chain


@pytest.mark.parametrize("scenario", ["ordered", "atomics", "mapped", "kernel-after", "thread"])
def test_same_bytes_changed_on_both_sides_is_an_error(cuda_build, daemon, run, scenario):
    proc = run(cuda_build("api_managed_conflict.cu"), [daemon], scenario, timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    if scenario != "ordered":
        # the daemon names the range and the error in its log (the client too, when it found it in a merge)
        log = daemon.log_text() + proc.stderr
        assert re.search(r"managed memory \[0x[0-9a-f]+", log), log[-3000:]
        assert MANAGED_CONFLICT_ERROR in log


def test_conflict_through_nvidia_static_runtime(cuda_build, daemon):
    """Built the default way: NVIDIA's runtime on libvcuda gets the same attributes and the same error."""
    exe = cuda_build("api_managed_conflict.cu", runtime="static")
    for scenario in ("atomics", "ordered"):
        proc = run_static(exe, [daemon], scenario, timeout=600)
        assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr + daemon.log_tail()
