"""Two daemons on two ports act as two hosts: the program sees GPU0 and GPU1, drives them from two threads, copies
between them through the client, and each allocation lands on the right daemon (checked with STATUS)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

import pyvgpu
from harness import window_candidate
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
        # GPU k's pointers live in VA window k + 1 (where its host placed it), so pointers of different hosts never
        # collide
        assert window_candidate(ptrs["ptr0"], 3 * MiB, 1 * VA_WINDOW_BYTES) is not None, hex(ptrs["ptr0"])
        assert window_candidate(ptrs["ptr1"], 5 * MiB, 2 * VA_WINDOW_BYTES) is not None, hex(ptrs["ptr1"])
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
    where each host's driver numbers its own address space; all of a host's in the same place), so no two hosts'
    addresses overlap."""
    a, b = daemon_factory(), daemon_factory()
    proc = run(cuda_build("api_multihost.cu"), [a, b], "churn", timeout=600)
    assert "CHURN OK" in proc.stdout, proc.stdout + proc.stderr
    ranges = [tuple(map(int, m)) for m in re.findall(r"^RANGE (\d) (\d+) (\d+)$", proc.stdout, re.M)]
    assert len(ranges) == 240
    places = {(dev, window_candidate(ptr, size, (dev + 1) * VA_WINDOW_BYTES)) for dev, ptr, size in ranges}
    assert len(places) == 2 and None not in {p for _, p in places}, places
    assert_live_ranges_apart(proc.stdout)
    assert all(m == 0 for d in (a, b) for m in session_memory(d.port))      # every block was freed
    proc = run(cuda_build("api_multihost.cu"), [a, b], "managed", timeout=300)
    assert "MANAGED1 cudaSuccess" in proc.stdout and "MANAGED OK" in proc.stdout, proc.stdout + proc.stderr


def assert_live_ranges_apart(out: str) -> None:
    """Replays the churn's RANGE and FREE lines (in the order printed): no range overlaps a live range of the other
    device when it is allocated."""
    live: dict[int, tuple[int, int]] = {}         # start -> (device, size)
    for kind, dev, ptr, size in re.findall(r"^(RANGE|FREE) (\d) (\d+)(?: (\d+))?$", out, re.M):
        dev, ptr = int(dev), int(ptr)
        if kind == "FREE":
            assert live.pop(ptr)[0] == dev, (dev, hex(ptr))
            continue
        for start, (other, n) in live.items():
            assert start + n <= ptr or ptr + int(size) <= start, (dev, hex(ptr), other, hex(start))
        live[ptr] = (dev, int(size))


@pytest.mark.emu_only("starts its own chains")
def test_hosts_whose_drivers_hand_out_the_same_addresses(cuda_build, daemon_factory, run):
    """Two GPU hosts whose drivers ignore every address hint and so hand out the same addresses (chains whose
    libvcuda ignores hints, PYVGPU_FAKE_VA_HINTS: NVIDIA's driver 580 ignored the window's on an H100): the
    program's churn still passes, without a wrong byte, because the client keeps the colliding range, asks again
    and frees it (csrc/core/memory.c, pv_malloc_unique); the collisions really happened (said once), and the
    daemons said their ranges lie outside every window."""
    env = {"PYVGPU_FAKE_VA_HINTS": "ignore"}
    a, b = daemon_factory(backend="chain", env=env), daemon_factory(backend="chain", env=env)
    proc = run(cuda_build("api_multihost.cu"), [a, b], "churn", timeout=600)
    assert "CHURN OK" in proc.stdout, proc.stdout + proc.stderr
    assert_live_ranges_apart(proc.stdout)
    assert "allocating again" in proc.stderr, proc.stderr
    assert all("not in the window" in d.log_text() for d in (a, b))
    assert all(m == 0 for d in (a, b) for m in session_memory(d.port))
    # managed memory, which the client maps at the device address, has no second try: refused cleanly
    proc = run(cuda_build("api_multihost.cu"), [a, b], "managed", timeout=300)
    assert "MANAGED OK" in proc.stdout and "MANAGED1 cudaErrorMemoryAllocation" in proc.stdout, proc.stdout
    assert re.search(r"GPU1 \(127\.0\.0\.1:\d+\) handed out managed memory .* of GPU0 \(127\.0\.0\.1:\d+\): "
                     r"allocation refused", proc.stderr), proc.stderr


def test_hosts_are_driven_in_parallel(cuda_build, daemon_factory, run):
    """No global lock around the network: GPU1's round trips complete while GPU0's thread waits on a slow kernel."""
    slow, fast = daemon_factory("--emu-slowdown", "200"), daemon_factory()
    proc = run(cuda_build("api_parallel.cu"), [slow, fast], "2000", timeout=300)
    t0 = float(re.search(r"^T0 (\d+)", proc.stdout, re.M).group(1))
    t1 = float(re.search(r"^T1 (\d+)", proc.stdout, re.M).group(1))
    assert t0 > 300, proc.stdout            # the slow kernel really was slow
    assert t1 < t0 / 3, proc.stdout         # and GPU1's work did not wait for it
