"""Managed and mapped memory through libvcudart (tests/cuda/api_managed.cu): host and device see one pointer and the
same bytes (host writes before launches, device writes after every kind of synchronization, concurrent writes to
different bytes of a page), __managed__ variables, prefetch and advice, zero-copy host memory, graphs over managed
memory, CUDA's error codes; and managed/mapped memory of two GPUs used by both, on one daemon and on two."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain


def test_managed_and_mapped(cuda_build, daemon, run):
    proc = run(cuda_build("api_managed.cu"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


@pytest.mark.parametrize("layout", ["one daemon", "two daemons"])
def test_managed_two_gpus(cuda_build, daemon_factory, run, layout):
    daemons = [daemon_factory("--emu-devices", "2")] if layout == "one daemon" else [daemon_factory(), daemon_factory()]
    proc = run(cuda_build("api_managed.cu"), daemons, "multi", timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
