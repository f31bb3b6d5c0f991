"""Admission that a slow peer cannot exhaust (issue 23, part 4): connections that have not completed their handshake
do not count against --max-sessions, are bounded per peer address and in total (the oldest goes first), so hundreds
of silent or trickling sockets from one address leave `pyvgpu daemon status` and a new CUDA client working.

Before, 128 such sockets (--max-sessions + the handshake allowance) got every further connection refused for as long
as they lasted (up to --handshake-timeout each, renewed by the attacker at will)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from harness import CUDA_SRC, build_cuda, free_port, interposer_env, rss
from pyvgpu.client import Client, HandshakeError, SessionEnded
from pyvgpu.protocol import ERR_UNAVAILABLE, HELLO_CONTROL
from pyvgpu_daemon.admission import GRACE_S, HARD_FACTOR, WARN_EVERY_S, Admission
from pyvgpu_daemon.bounds import Bounds

SOCKETS = 500


# ---------------------------------------------------------------------------------------------- the bookkeeping
def test_a_peer_at_its_bound_loses_its_oldest_pending_connection():
    a = Admission(total=5, per_peer=2)
    assert a.admit("x1", "10.0.0.1", now=0.0) == [] and a.admit("x2", "10.0.0.1", now=0.0) == []
    assert a.admit("x3", "10.0.0.1", now=2.0) == ["x1"]     # the peer's own oldest goes, the newcomer stays
    assert a.admit("y1", "10.0.0.2", now=2.0) == []          # other peers are not touched
    a.done("x2")                                             # handshake completed: no longer pending
    assert a.admit("x4", "10.0.0.1", now=2.0) == [] and a.pending == 3
    a.done("x2")                                             # twice: no-op
    assert a.pending == 3


def test_a_burst_of_clients_from_one_host_all_get_through():
    """Connections younger than GRACE_S are not dropped below the hard bound: a job's processes starting together."""
    a = Admission(total=4, per_peer=2)
    assert all(a.admit(f"c{i}", "10.0.0.1", now=0.001 * i) == [] for i in range(HARD_FACTOR * 4))
    assert a.pending == HARD_FACTOR * 4
    assert a.admit("late", "10.0.0.1", now=0.5) == ["c0"]     # at the hard bound the oldest goes, young or not
    assert a.admit("later", "10.0.0.1", now=5.0) == ["c1"]    # and once old, over the soft bound, too


def test_at_the_total_bound_the_peer_holding_most_loses_its_oldest():
    a = Admission(total=4, per_peer=3)
    for c in ("a1", "a2", "a3"):
        assert a.admit(c, "A", now=0.0) == []
    assert a.admit("b1", "B", now=0.0) == []
    assert a.admit("c1", "C", now=GRACE_S) == ["a1"] and a.pending == 4
    assert a.admit("c2", "C", now=GRACE_S) == ["a2"]
    line = a.warning("A", now=100.0)
    assert line is not None and line.startswith("2 connection(s) from A dropped")
    assert a.warning("A", now=100.0 + WARN_EVERY_S / 2) is None         # rate-limited
    assert a.warning("C", now=100.0) is None                             # C lost nothing
    with pytest.raises(ValueError):
        Admission(total=0, per_peer=1)


# ---------------------------------------------------------------------------------------------- a daemon under siege
class Siege:
    """SOCKETS connections from 127.0.0.1: half silent, half trickling a HELLO frame one byte every 0.3 s."""

    def __init__(self, port: int) -> None:
        self.socks: list[socket.socket] = []
        self.stop = threading.Event()
        for i in range(SOCKETS):
            s = socket.socket()
            s.setblocking(True)
            s.connect(("127.0.0.1", port))
            self.socks.append(s)
        self.trickle = threading.Thread(target=self._trickle, daemon=True)
        self.trickle.start()

    def _trickle(self) -> None:
        frame = (200).to_bytes(4, "little") + b"\x95" * 200
        i = 0
        while not self.stop.wait(0.3):
            for s in self.socks[1::2]:
                try:
                    s.send(frame[i % len(frame):i % len(frame) + 1], socket.MSG_DONTWAIT)
                except OSError:
                    pass
            i += 1

    def close(self) -> None:
        self.stop.set()
        self.trickle.join(5)
        for s in self.socks:
            s.close()


def timed_status(port: int) -> tuple[float, dict]:
    t = time.perf_counter()
    with Client.connect("127.0.0.1", port, tls=None, timeout=10) as c:
        st = c.status()
    return time.perf_counter() - t, st


@pytest.mark.parametrize("max_sessions", [2])
def test_status_and_a_new_cuda_client_work_under_500_slow_sockets(daemon_factory, max_sessions):
    d = daemon_factory("--emu-devices", "1", "--max-sessions", str(max_sessions))
    prog = build_cuda(CUDA_SRC / "load_mixed.cu")
    siege = Siege(d.port)
    try:
        time.sleep(1.0)                       # the daemon has accepted (and dropped most of) them
        dt, st = timed_status(d.port)
        assert dt < 1.0, f"status took {dt:.2f} s"
        assert [s for s in st["sessions"] if not s["self"]] == []     # pending connections are not sessions
        # a held session does not stop the next one either: pending connections do not count against the maximum
        with Client.connect("127.0.0.1", d.port, tls=None, timeout=10) as held:
            assert held.status()
            t = time.perf_counter()
            proc = subprocess.run([str(prog), "7", "50"], capture_output=True, text=True, timeout=60,
                                  env={**os.environ, **interposer_env([d])})
            cuda_s = time.perf_counter() - t
            assert proc.returncode == 0 and "mismatches=0" in proc.stdout, (proc.stdout, proc.stderr)
            assert cuda_s < 1.0, f"the CUDA client took {cuda_s:.2f} s"
        t = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "daemon", "status", "--port", str(d.port),
                              "--timeout", "5"], capture_output=True, text=True, timeout=60)
        cli_s = time.perf_counter() - t
        assert cli.returncode == 0 and "backend emu" in cli.stdout, (cli.stdout, cli.stderr)
        assert cli_s < 5.0                    # a Python process's start-up included; the request itself: dt above
    finally:
        siege.close()
    log = d.log_text()
    assert "Traceback" not in log
    warnings = re.findall(r"WARNING (\d+) connection\(s\) from 127\.0\.0\.1 dropped before their handshake", log)
    assert warnings and len(warnings) <= 3, log[-3000:]                 # said, but not once per socket
    assert "dropped before its handshake" not in log                   # the dropped ones are not logged one by one


def test_metrics_scrape_under_500_slow_sockets(daemon_factory):
    """The metrics port keeps a bounded number of connections (the oldest goes) and answers a scrape at once."""
    mport = free_port()
    d = daemon_factory("--emu-devices", "1", "--metrics-port", str(mport))
    siege = Siege(mport)
    try:
        time.sleep(1.0)
        t = time.perf_counter()
        body = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read()
        assert time.perf_counter() - t < 1.0
        assert b"pyvgpu_device_memory_total_bytes" in body
        threads = len(os.listdir(f"/proc/{d.proc.pid}/task"))
        assert threads < 100, f"{threads} threads for {SOCKETS} sockets"
        dt, _ = timed_status(d.port)
        assert dt < 1.0
    finally:
        siege.close()


# ---------------------------------------------------------------------------------------------- leftovers (gpufix)
def test_status_gets_in_while_every_session_is_open(daemon_factory):
    """With --max-sessions sessions open, a CUDA client is refused at its HELLO but `pyvgpu daemon status` (a
    HELLO_CONTROL session) still answers within 1 s, in one of Bounds.control_slots; such a session may not touch a
    device, and the slots are bounded too."""
    d = daemon_factory("--emu-devices", "1", "--max-sessions", "2")
    held = [Client.connect("127.0.0.1", d.port, tls=None, timeout=10) for _ in range(2)]
    control: list[Client] = []
    try:
        with pytest.raises(HandshakeError) as refused:
            Client.connect("127.0.0.1", d.port, tls=None, timeout=10)
        assert refused.value.code == ERR_UNAVAILABLE and "daemon busy" in str(refused.value)
        t = time.perf_counter()
        with Client.connect("127.0.0.1", d.port, tls=None, timeout=10, hello={HELLO_CONTROL: True}) as c:
            st = c.status()
        assert time.perf_counter() - t < 1.0
        assert len([s for s in st["sessions"] if not s["self"]]) == 2
        cli = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "daemon", "status", "--port", str(d.port),
                              "--timeout", "5"], capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0 and "backend emu" in cli.stdout, (cli.stdout, cli.stderr)
        with Client.connect("127.0.0.1", d.port, tls=None, timeout=10, hello={HELLO_CONTROL: True}) as c:
            with pytest.raises(SessionEnded, match="control session"):
                c.call("MALLOC", 0, 4096)                    # a control session never gets a device
        control = [Client.connect("127.0.0.1", d.port, tls=None, timeout=10, hello={HELLO_CONTROL: True})
                   for _ in range(Bounds.control_slots)]
        with pytest.raises(HandshakeError, match="daemon busy"):
            Client.connect("127.0.0.1", d.port, tls=None, timeout=10, hello={HELLO_CONTROL: True})
    finally:
        for c in (*held, *control):
            c.close()
