"""CUDA graphs through libvcudart on the emulated GPU: stream capture (one stream and fork/join), the explicit API,
instantiate/launch/update, error codes (tests/cuda/api_graph.cu checks every replay against the same work issued on a
plain stream and against host references)."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain


def test_graphs(cuda_build, daemon, run):
    proc = run(cuda_build("api_graph.cu"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout
