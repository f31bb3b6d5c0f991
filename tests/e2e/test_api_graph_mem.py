"""Graph memory nodes (tests/cuda/api_graph_mem.cu): allocation and free nodes from the explicit API and from stream
capture, checked against host results and CUDA's rules (fixed addresses, allocations outliving a launch and freed
outside, relaunch refused while one is live unless auto-freed, the restrictions on such graphs, graph-memory
attributes); through libvcudart, and built the default way (NVIDIA's runtime on libvcuda's cuGraph* calls)."""
from __future__ import annotations

import re

import pytest

from harness import run_static

pytestmark = pytest.mark.chain


def test_graph_memory_nodes_through_libvcudart(cuda_build, daemon, run):
    proc = run(cuda_build("api_graph_mem.cu"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


def test_graph_memory_nodes_through_nvidia_static_runtime(cuda_build, daemon):
    proc = run_static(cuda_build("api_graph_mem.cu", runtime="static"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr + daemon.log_tail()
    assert "is not supported by libvcuda" not in proc.stderr, proc.stderr
