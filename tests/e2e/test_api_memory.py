"""Memory through libvcudart against an emulated-GPU daemon: round trips of 1 byte .. 256 MiB for every copy kind
(checked byte for byte inside the program), offsets, memset, async copies on streams, 2D copies, host memory,
pointer attributes and mem info."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain

MAX_BYTES = 256 << 20


def test_memory_round_trips_up_to_256_mib(cuda_build, daemon, run):
    prog = cuda_build("api_memory.cu")
    proc = run(prog, [daemon], str(MAX_BYTES), timeout=600)
    m = re.search(r"^OK (\d+)$", proc.stdout, re.M)
    assert m, proc.stdout + proc.stderr
    assert int(m.group(1)) >= 100          # every size of the sweep was checked, plus the fixed scenarios
    assert "FAIL" not in proc.stdout


def test_memory_session_released_after_exit(cuda_build, daemon, run):
    from pyvgpu.client import Client

    prog = cuda_build("api_memory.cu")
    run(prog, [daemon], "4096")
    with Client.connect("127.0.0.1", daemon.port) as c:
        status = c.status()
    others = [s for s in status["sessions"] if not s.get("self")]
    assert all(s["memory"] == 0 for s in others), others
