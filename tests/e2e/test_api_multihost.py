"""Two daemons on two ports act as two hosts: the program sees GPU0 and GPU1, drives them from two threads, copies
between them through the client, and each allocation lands on the right daemon (checked with STATUS)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

import pyvgpu
from pyvgpu.client import Client
from pyvgpu.protocol import VA_WINDOW_BYTES

MiB = 1 << 20
pytestmark = pytest.mark.chain


def session_memory(port: int) -> list[int]:
    with Client.connect("127.0.0.1", port) as c:
        return [s["memory"] for s in c.status()["sessions"] if not s.get("self")]


def test_two_hosts_two_threads(cuda_build, daemon_factory):
    a, b = daemon_factory(), daemon_factory()
    prog = cuda_build("api_multihost.cu")
    env = {**os.environ, "LD_PRELOAD": str(pyvgpu.lib_path()), "PYVGPU_HOSTS": f"{a.address},{b.address}"}
    proc = subprocess.Popen([str(prog)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(("READY", "FAIL")):
                break
        assert lines and lines[-1].startswith("READY"), "".join(lines) + proc.stderr.read()
        ptrs = dict(zip(("ptr0", "ptr1"), map(int, lines[-2].split()[1::2])))
        # GPU k's pointers live in VA window k + 1, so pointers of different hosts never collide
        assert ptrs["ptr0"] // VA_WINDOW_BYTES == 1
        assert ptrs["ptr1"] // VA_WINDOW_BYTES == 2
        # host A holds GPU0's 3 MiB; host B holds GPU1's 5 MiB plus the 3 MiB peer-copy target
        assert session_memory(a.port) == [3 * MiB]
        assert session_memory(b.port) == [8 * MiB]
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert out.strip().endswith("OK")


def test_allocations_of_two_hosts_never_overlap(cuda_build, daemon_factory, run):
    """Two threads allocate and free blocks of mixed sizes on two hosts, copy with cudaMemcpyDefault within and
    across them, and free each other's: every block of host k lies in its pointer window k + 1 (on a chain too,
    where each host's driver numbers its own address space), so no two hosts' addresses overlap."""
    a, b = daemon_factory(), daemon_factory()
    proc = run(cuda_build("api_multihost.cu"), [a, b], "churn", timeout=600)
    assert "CHURN OK" in proc.stdout, proc.stdout + proc.stderr
    ranges = [tuple(map(int, m)) for m in re.findall(r"^RANGE (\d) (\d+) (\d+)$", proc.stdout, re.M)]
    assert len(ranges) == 240
    for dev, ptr, size in ranges:
        assert ptr // VA_WINDOW_BYTES == dev + 1 and (ptr + size - 1) // VA_WINDOW_BYTES == dev + 1, (dev, hex(ptr))
    assert all(m == 0 for d in (a, b) for m in session_memory(d.port))      # every block was freed


def test_hosts_are_driven_in_parallel(cuda_build, daemon_factory, run):
    """No global lock around the network: GPU1's round trips complete while GPU0's thread waits on a slow kernel."""
    slow, fast = daemon_factory("--emu-slowdown", "200"), daemon_factory()
    proc = run(cuda_build("api_parallel.cu"), [slow, fast], "2000", timeout=300)
    t0 = float(re.search(r"^T0 (\d+)", proc.stdout, re.M).group(1))
    t1 = float(re.search(r"^T1 (\d+)", proc.stdout, re.M).group(1))
    assert t0 > 300, proc.stdout            # the slow kernel really was slow
    assert t1 < t0 / 3, proc.stdout         # and GPU1's work did not wait for it
