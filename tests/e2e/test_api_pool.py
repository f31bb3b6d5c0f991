"""Stream-ordered memory pools through libvcudart (tests/cuda/api_pool.cu): default and created pools, stream-ordered
reuse, release threshold and trimming, watermarks, current pool per device, access, maximum size, graph
allocations, CUDA's error codes; on one emulated GPU and on two GPUs of one daemon (peer access descriptors)."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain


@pytest.mark.parametrize("gpus", [1, 2])
def test_pools(cuda_build, daemon_factory, run, gpus):
    d = daemon_factory("--emu-devices", str(gpus))
    proc = run(cuda_build("api_pool.cu"), [d], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
