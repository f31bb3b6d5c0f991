"""Faults: a client killed mid-transfer leaves nothing held on the daemon and the next client is served; a daemon
killed mid-call makes the client's calls fail with cudaErrorDevicesUnavailable within a bounded time."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

import pyvgpu
from pyvgpu.client import Client

pytestmark = pytest.mark.chain


def start(prog, daemons, *args):
    env = {**os.environ, "LD_PRELOAD": str(pyvgpu.lib_path()),
           "PYVGPU_HOSTS": ",".join(d.address for d in daemons)}
    return subprocess.Popen([str(prog), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_ready(proc) -> None:
    line = proc.stdout.readline()
    assert line.startswith("READY"), line + proc.stderr.read()


def other_sessions(port: int) -> list[dict]:
    with Client.connect("127.0.0.1", port) as c:
        return [s for s in c.status()["sessions"] if not s.get("self")]


def test_client_killed_mid_transfer_leaves_nothing(cuda_build, daemon, run):
    prog = cuda_build("api_faults.cu")
    proc = start(prog, [daemon], "transfer")
    try:
        wait_ready(proc)
        sessions = other_sessions(daemon.port)
        assert len(sessions) == 1 and sessions[0]["memory"] >= 64 << 20
        time.sleep(0.7)                      # inside the 64 MiB copies
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 15
    while other_sessions(daemon.port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert other_sessions(daemon.port) == []
    # the next client is served
    out = run(cuda_build("api_memory.cu"), [daemon], "65536").stdout
    assert re.search(r"^OK \d+$", out, re.M)


def test_daemon_killed_mid_call_fails_fast(cuda_build, daemon):
    prog = cuda_build("api_faults.cu")
    proc = start(prog, [daemon], "lost")
    try:
        wait_ready(proc)
        time.sleep(0.5)
        t0 = time.monotonic()
        daemon.proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert re.search(r"^LOST cudaErrorDevicesUnavailable \d+$", out, re.M), out + err
    next_ms = int(re.search(r"^NEXT cudaErrorDevicesUnavailable (\d+)$", out, re.M).group(1))
    sync_ms = int(re.search(r"^SYNC cudaErrorDevicesUnavailable (\d+)$", out, re.M).group(1))
    assert next_ms < 1000 and sync_ms < 1000        # later calls fail at once
    assert elapsed < 30
    assert f"connection to daemon {daemon.address} lost" in err


# A daemon that refuses any large device-to-host range starting 64 MiB into its allocation (the emulator's data is
# fine: only the range check is made to fail, as for memory freed meanwhile).
REFUSE_FRAME = """
from pyvgpu_daemon import session
from pyvgpu_daemon.errors import CudaError
_check = session.DeviceState.check_range
def check_range(self, ptr, size, what):
    _check(self, ptr, size, what)
    start = max((a for a in self.allocations if a <= ptr), default=None)
    if "HtoD" not in what and size > (1 << 20) and start is not None and ptr - start == 64 << 20:
        raise CudaError("cudaErrorInvalidValue", "injected: frame refused")
session.DeviceState.check_range = check_range
"""


def test_failing_frame_in_the_middle_of_a_large_copy(cuda_build, daemon_factory, run, tmp_path):
    # A synchronous D2H copy keeps two frames in flight: the refused middle frame fails the copy with the daemon's
    # error, the frame already requested after it is still read, and the session stays in step.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(REFUSE_FRAME)
    daemon = daemon_factory(env={"PYTHONPATH": os.pathsep.join(filter(None, [str(site),
                                                                          os.environ.get("PYTHONPATH")]))})
    proc = run(cuda_build("api_faults.cu"), [daemon], "midcopy", timeout=300)
    assert "MIDCOPY cudaErrorInvalidValue" in proc.stdout, proc.stdout + proc.stderr
    assert "MIDCOPY OK" in proc.stdout, proc.stdout + proc.stderr


def test_forked_child_fails_cleanly_parent_carries_on(cuda_build, daemon, run):
    proc = run(cuda_build("api_faults.cu"), [daemon], "fork", timeout=120)
    assert "FORK OK" in proc.stdout, proc.stdout + proc.stderr
