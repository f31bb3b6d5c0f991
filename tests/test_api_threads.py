"""Eight threads share each host's single connection (pipelined requests, replies matched by request id), on one
emulated GPU and on two GPUs of one host; stream-ordered allocation, host functions, callbacks, capture status."""
from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("ndev", [1, 2])
def test_threads_share_a_connection(cuda_build, daemon_factory, run, ndev):
    d = daemon_factory("--emu-devices", str(ndev))
    proc = run(cuda_build("api_threads.cu"), [d], timeout=600)
    assert re.search(r"^OK 83$", proc.stdout, re.M), proc.stdout + proc.stderr
