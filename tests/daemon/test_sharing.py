"""A daemon shared by many clients: memory quotas and their errors, the hello's sharing keys, the metrics page
against `daemon status`, and a small end-to-end fairness run on one emulated GPU. (libvcudart's side:
tests/interposer/test_sharing_client.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from harness import call_ok as ok
from harness import free_port
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, HELLO_MEMORY, HELLO_WEIGHT

E = ERROR_CODES
MiB = 1 << 20


def session_of(status: dict, sid: int) -> dict:
    return next(s for s in status["sessions"] if s["id"] == sid)


# ---------------------------------------------------------------------------------------------- quotas
def test_session_limit_fails_only_that_session_and_shows_in_mem_get_info(daemon_factory):
    d = daemon_factory("--emu-devices", "2", "--emu-memory", "256M", "--session-memory", "64M",
                       "--session-memory", "1=96M")
    with Client.connect("127.0.0.1", d.port) as a, Client.connect("127.0.0.1", d.port) as b:
        assert ok(a, "MEM_GET_INFO", 0) == [64 * MiB, 64 * MiB]            # the limit is the session's total
        assert ok(a, "MEM_GET_INFO", 1) == [96 * MiB, 96 * MiB]            # per-device limit
        p = ok(a, "MALLOC", 0, 40 * MiB)
        assert ok(a, "MEM_GET_INFO", 0) == [24 * MiB, 64 * MiB]
        assert a.call("MALLOC", 0, 25 * MiB)[0] == E["cudaErrorMemoryAllocation"]
        q = ok(a, "MALLOC", 0, 24 * MiB)                                  # exactly up to the limit
        assert a.call("MALLOC", 0, 1)[0] == E["cudaErrorMemoryAllocation"]
        # the failure is that session's alone: another session still gets its own 64 MiB
        r = ok(b, "MALLOC", 0, 64 * MiB)
        # ... and the failed session keeps working: free, then allocate again
        ok(a, "FREE", 0, q)
        q = ok(a, "MALLOC", 0, 20 * MiB)
        st = b.status()
        dev0 = session_of(st, a.session)["devices"][0]
        assert (dev0["memory_used"], dev0["memory_limit"]) == (60 * MiB, 64 * MiB)
        assert session_of(st, b.session)["devices"][0]["memory_limit"] == 64 * MiB
        usage0 = st["device_usage"][0]
        assert usage0["memory_used"] == 124 * MiB and usage0["session_memory_limit"] == 64 * MiB
        assert usage0["memory_free"] == 256 * MiB - 124 * MiB
        for ptr in (p, q):
            ok(a, "FREE", 0, ptr)
        ok(b, "FREE", 0, r)


def test_client_request_within_the_daemon_limit(daemon_factory):
    d = daemon_factory("--emu-memory", "256M", "--session-memory", "64M")
    with Client.connect("127.0.0.1", d.port, hello={HELLO_MEMORY: 16 * MiB}) as small, \
            Client.connect("127.0.0.1", d.port, hello={HELLO_MEMORY: 1 << 30}) as greedy, \
            Client.connect("127.0.0.1", d.port) as plain:
        assert ok(small, "MEM_GET_INFO", 0) == [16 * MiB, 16 * MiB]
        assert small.call("MALLOC", 0, 17 * MiB)[0] == E["cudaErrorMemoryAllocation"]
        assert ok(greedy, "MEM_GET_INFO", 0)[1] == 64 * MiB               # capped by the daemon's limit
        assert ok(plain, "MEM_GET_INFO", 0)[1] == 64 * MiB
    # without any daemon limit a request still limits its own session, and only it
    d2 = daemon_factory("--emu-memory", "256M")
    with Client.connect("127.0.0.1", d2.port, hello={HELLO_MEMORY: 8 * MiB}) as c, \
            Client.connect("127.0.0.1", d2.port) as other:
        assert ok(c, "MEM_GET_INFO", 0) == [8 * MiB, 8 * MiB]
        assert c.call("MALLOC", 0, 9 * MiB)[0] == E["cudaErrorMemoryAllocation"]
        assert ok(other, "MEM_GET_INFO", 0)[1] == 256 * MiB
        ok(other, "MALLOC", 0, 100 * MiB)
        # the device's free memory shrinks for everyone, within each limit
        assert ok(other, "MEM_GET_INFO", 0) == [156 * MiB, 256 * MiB]
        assert session_of(other.status(), other.session)["devices"][0]["memory_limit"] is None


def test_module_globals_count_against_the_limit(daemon_factory):
    ptx = b"""
.version 7.0
.target sm_75
.address_size 64
.global .align 4 .b8 big[2097152];
.visible .entry k() { ret; }
"""
    d = daemon_factory("--emu-memory", "256M")
    with Client.connect("127.0.0.1", d.port, hello={HELLO_MEMORY: 3 * MiB}) as c:
        ok(c, "MODULE_LOAD", 0, 1, payload=ptx)
        assert ok(c, "MEM_GET_INFO", 0) == [1 * MiB, 3 * MiB]
        assert c.call("MALLOC", 0, 1 * MiB + 1)[0] == E["cudaErrorMemoryAllocation"]
        assert c.call("MODULE_LOAD", 0, 2, payload=ptx)[0] == E["cudaErrorMemoryAllocation"]
        st = session_of(c.status(), c.session)["devices"][0]
        assert st["modules"] == 1 and st["memory_used"] == 2 * MiB


@pytest.mark.parametrize("key,value", [(HELLO_MEMORY, 0), (HELLO_MEMORY, -5), (HELLO_MEMORY, "1G"),
                                       (HELLO_WEIGHT, 0), (HELLO_WEIGHT, float("nan")), (HELLO_WEIGHT, "x")])
def test_bad_sharing_values_in_the_hello_are_refused(daemon, key, value):
    from pyvgpu.client import HandshakeError
    with pytest.raises(HandshakeError) as exc:
        Client.connect("127.0.0.1", daemon.port, hello={key: value})
    assert exc.value.code == E["cudaErrorInvalidValue"]
    with Client.connect("127.0.0.1", daemon.port) as c:            # the daemon is fine
        assert ok(c, "MEM_GET_INFO", 0)[1] > 0


def test_weights_are_capped_and_reported(daemon_factory):
    d = daemon_factory("--max-weight", "4")
    with Client.connect("127.0.0.1", d.port, hello={HELLO_WEIGHT: 100.0}) as a, \
            Client.connect("127.0.0.1", d.port, hello={HELLO_WEIGHT: 0.5}) as b:
        ok(a, "MEM_GET_INFO", 0)
        ok(b, "MEM_GET_INFO", 0)
        st = a.status()
        assert session_of(st, a.session)["weight"] == 4.0
        assert session_of(st, a.session)["devices"][0]["weight"] == 4.0
        assert session_of(st, b.session)["weight"] == 0.5
        assert session_of(st, b.session)["pid"] == os.getpid()


def test_daemon_rejects_bad_sharing_options(tmp_path):
    for bad, why in ((["--session-memory", "5=1G"], "device 5"), (["--session-memory", "x=1G"], "DEVICE=SIZE"),
                     (["--session-memory", "lots"], "lots"), (["--max-weight", "0.5"], "max-weight")):
        proc = subprocess.run([sys.executable, "-m", "pyvgpu_daemon", "--backend", "emu", "--port",
                               str(free_port()), *bad], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and why in proc.stderr, (bad, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------- metrics
def scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_page_equals_daemon_status(daemon_factory):
    mport = free_port()
    d = daemon_factory("--emu-devices", "2", "--emu-memory", "256M", "--session-memory", "1=32M",
                       "--metrics-port", str(mport))
    with Client.connect("127.0.0.1", d.port, hello={HELLO_WEIGHT: 2.0}) as a, \
            Client.connect("127.0.0.1", d.port) as b:
        p = ok(a, "MALLOC", 0, 3 * MiB)
        ok(a, "MEMCPY_HTOD", 0, p, 0, payload=bytes(1 * MiB))
        ok(a, "MEMCPY_DTOD", 0, p + MiB, p, MiB, 0)
        a.call("MEMCPY_DTOH", 0, p, 4096, 0)
        q = ok(b, "MALLOC", 1, 5 * MiB)
        for _ in range(20):
            b.call("MEMSET", 1, q, 7, 5 * MiB, 0, reply=False)
        ok(b, "DEVICE_SYNC", 1)
        with Client.connect("127.0.0.1", d.port) as watcher:
            status = watcher.status()
        m = scrape(mport)
    L = lambda **kw: tuple(sorted(kw.items()))   # noqa: E731
    assert m[("pyvgpu_daemon_info", L(address=d.address, backend="emu", scheduling="fair"))] == 1
    for u in status["device_usage"]:
        dev = str(u["device"])
        assert m[("pyvgpu_device_memory_used_bytes", L(device=dev))] == u["memory_used"]
        assert m[("pyvgpu_device_memory_total_bytes", L(device=dev))] == u["memory_total"] == 256 * MiB
        assert m[("pyvgpu_device_sessions", L(device=dev))] == u["sessions"]
        assert m[("pyvgpu_device_session_memory_limit_bytes", L(device=dev))] == u["session_memory_limit"]
        assert m[("pyvgpu_device_busy_seconds_total", L(device=dev))] == pytest.approx(u["device_seconds"])
        assert 0 <= m[("pyvgpu_device_busy_ratio", L(device=dev))] <= 1
        for op, h in u["op_latency"].items():
            assert m[("pyvgpu_op_duration_seconds_count", L(device=dev, op=op))] == sum(h["counts"])
            assert m[("pyvgpu_op_duration_seconds_sum", L(device=dev, op=op))] == pytest.approx(h["sum"])
            assert m[("pyvgpu_op_duration_seconds_bucket", L(device=dev, le="+Inf", op=op))] == sum(h["counts"])
    assert status["device_usage"][0]["memory_used"] == 3 * MiB
    assert status["device_usage"][1]["session_memory_limit"] == 32 * MiB
    assert "MEMSET" in status["device_usage"][1]["op_latency"]
    checked = 0
    for s in status["sessions"]:
        if s["self"]:
            continue
        for dev in s["devices"]:
            lab = dict(session=str(s["id"]), client_host=s["hostname"], client_pid=str(s["pid"]),
                       device=str(dev["device"]))
            limit = dev["memory_limit"] if dev["memory_limit"] is not None else 256 * MiB
            assert m[("pyvgpu_session_memory_used_bytes", L(**lab))] == dev["memory_used"]
            assert m[("pyvgpu_session_memory_limit_bytes", L(**lab))] == limit
            assert m[("pyvgpu_session_ops_total", L(**lab))] == dev["ops"]
            assert m[("pyvgpu_session_weight", L(**lab))] == dev["weight"]
            assert m[("pyvgpu_session_device_seconds_total", L(**lab))] == pytest.approx(dev["device_seconds"])
            for direction in ("htod", "dtoh", "dtod"):
                assert m[("pyvgpu_session_transfer_bytes_total", L(**lab, direction=direction))] == \
                    dev[f"bytes_{direction}"]
            checked += 1
    assert checked == 2
    a_dev = session_of(status, a.session)["devices"][0]
    assert (a_dev["bytes_htod"], a_dev["bytes_dtoh"], a_dev["bytes_dtod"]) == (MiB, 4096, MiB)
    assert a_dev["weight"] == 2.0 and session_of(status, a.session)["pid"] == os.getpid()
    # the status query's own session and ended sessions leave no per-session series behind
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with Client.connect("127.0.0.1", d.port) as watcher:
            if all(s["self"] for s in watcher.status()["sessions"]):
                break
        time.sleep(0.05)
    m2 = scrape(mport)
    assert not [k for k in m2 if k[0].startswith("pyvgpu_session_")]
    assert m2[("pyvgpu_op_duration_seconds_count", L(device="1", op="MEMSET"))] == 20   # counts survive the session


def test_metrics_port_in_use_is_a_clear_error(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "pyvgpu_daemon", "--backend", "emu", "--port",
                               str(free_port()), "--metrics-port", str(port)], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 2 and f"cannot serve metrics on 127.0.0.1:{port}" in proc.stderr


# ---------------------------------------------------------------------------------------------- fairness
def test_flooding_session_gets_no_more_than_its_share(daemon_factory):
    """One emulated GPU, a session flooding 32 MiB memsets fire-and-forget and two sessions doing the same work
    four ops at a time, then a sync: over ~2 s each of the three gets at least 0.8 of a third of the device time
    (bench/fairness_bench.py measures the same with 8 CUDA programs)."""
    d = daemon_factory("--emu-memory", "512M")
    stop = threading.Event()
    clients = [Client.connect("127.0.0.1", d.port, timeout=60) for _ in range(3)]
    size = 32 * MiB
    ptrs = [ok(c, "MALLOC", 0, size) for c in clients]

    def flood():
        c, p = clients[0], ptrs[0]
        while not stop.is_set():
            for _ in range(32):
                c.call("MEMSET", 0, p, 1, size, 0, reply=False)
            c.call("DEVICE_SYNC", 0)

    def closed(i):
        c, p = clients[i], ptrs[i]
        while not stop.is_set():
            for _ in range(4):
                c.call("MEMSET", 0, p, 2, size, 0, reply=False)
            c.call("DEVICE_SYNC", 0)

    threads = [threading.Thread(target=flood)] + [threading.Thread(target=closed, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        with Client.connect("127.0.0.1", d.port) as w:
            before = {s["id"]: s["devices"][0]["device_seconds"] for s in w.status()["sessions"] if s["devices"]}
            time.sleep(2.0)
            after = {s["id"]: s["devices"][0]["device_seconds"] for s in w.status()["sessions"] if s["devices"]}
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        for c in clients:
            c.close()
    used = {sid: after[sid] - before[sid] for sid in after}
    total = sum(used.values())
    assert total > 0.5
    shares = {sid: u / total for sid, u in used.items()}
    assert all(s >= 0.8 / 3 for s in shares.values()), shares
