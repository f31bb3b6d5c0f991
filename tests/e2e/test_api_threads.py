"""Eight threads share each host's single connection (pipelined requests, replies matched by request id), on one
emulated GPU and on two GPUs of one host; stream-ordered allocation, host functions, callbacks, capture status."""
from __future__ import annotations

import re
import subprocess

import pytest

pytestmark = pytest.mark.chain


@pytest.mark.parametrize("ndev", [1, 2])
def test_threads_share_a_connection(cuda_build, daemon_factory, run, ndev):
    d = daemon_factory("--emu-devices", str(ndev))
    proc = run(cuda_build("api_threads.cu"), [d], timeout=600)
    assert re.search(r"^OK 83$", proc.stdout, re.M), proc.stdout + proc.stderr


def test_per_thread_default_stream_build(cuda_build, daemon, run):
    """Built with --default-stream per-thread the program calls the *_ptsz / *_ptds entry points."""
    prog = cuda_build("api_threads.cu", "--default-stream", "per-thread")
    imports = subprocess.run(["nm", "-D", "--undefined-only", str(prog)], capture_output=True,
                             text=True, check=True).stdout
    assert "cudaMemcpyAsync_ptsz" in imports and "cudaStreamSynchronize_ptsz" in imports
    proc = run(prog, [daemon], timeout=600)
    assert re.search(r"^OK 83$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "not supported" not in proc.stderr
