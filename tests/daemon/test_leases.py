"""Leases in the daemon (daemon/pyvgpu_daemon/leases.py, ops 420-439) through the protocol: atomic grants under
concurrent requests, waiting in line, expiry, sessions tied to leases (refused without one, ended with theirs),
shares with their quotas and weights, leases kept across a restart (--lease-state), malformed requests, and what
status and the metrics page show."""
from __future__ import annotations

import itertools
import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness import daemon_command, free_port, stop_process, wait_listening
from pyvgpu.client import Client, SessionEnded
from pyvgpu.protocol import ERROR_CODES, HELLO_LEASES, MAX_LEASE_TTL_S

UNAVAILABLE = ERROR_CODES["cudaErrorDevicesUnavailable"]
INVALID = ERROR_CODES["cudaErrorInvalidValue"]
NOMEM = ERROR_CODES["cudaErrorMemoryAllocation"]
MiB = 1 << 20


def connect(d, leases: list[str] | None = None, timeout: float = 10) -> Client:
    hello = {HELLO_LEASES: ",".join(leases)} if leases is not None else None
    return Client.connect("127.0.0.1", d.port, timeout=timeout, hello=hello)


def acquire(c: Client, **req):
    err, result, _ = c.call("LEASE_ACQUIRE", {"holder": "test", **req})
    return err, result


def granted(c: Client, **req) -> list[dict]:
    err, result = acquire(c, **req)
    assert err == 0, result
    return result["leases"]


def test_concurrent_requests_get_distinct_gpus_atomically(daemon_factory):
    """16 clients ask for one GPU of 4 at the same instant: exactly 4 are granted, each a different GPU; the others
    are told, at once, what holds them."""
    d = daemon_factory("--emu-devices", "4")
    clients = [connect(d) for _ in range(16)]
    start = threading.Barrier(16)
    out: list = [None] * 16

    def ask(i: int) -> None:
        start.wait()
        out[i] = acquire(clients[i], holder=f"client {i}", ttl=30)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    wins = [r["leases"][0] for err, r in out if err == 0]
    losses = [r for err, r in out if err != 0]
    assert len(wins) == 4 and sorted(x["device"] for x in wins) == [0, 1, 2, 3]
    assert all(x["exclusive"] and len(x["id"]) == 32 for x in wins)
    assert len(losses) == 12 and all(err == UNAVAILABLE for err, _ in out if err) and \
        all("not free" in r and "holds GPU" in r for r in losses), losses
    for c in clients:
        c.close()


def test_waiting_in_line_is_served_in_order_as_leases_end(daemon_factory):
    """One GPU: A holds it (ttl 1 s, not renewed); B then C wait in line. A's lease expires and B gets the GPU at
    once; B gives it back and C gets it. A renewed lease does not expire."""
    d = daemon_factory()
    a, b, c = connect(d), connect(d), connect(d)
    held = granted(a, ttl=1.0)[0]
    got: dict = {}

    def wait(name: str, client: Client, delay: float) -> None:
        time.sleep(delay)
        t0 = time.monotonic()
        got[name] = (acquire(client, holder=name, wait=20, ttl=30), time.monotonic(), t0)

    tb = threading.Thread(target=wait, args=("B", b, 0.0))
    tc = threading.Thread(target=wait, args=("C", c, 0.2))
    tb.start()
    tc.start()
    tb.join(15)
    (err, result), b_at, b_asked = got["B"]
    assert err == 0 and result["leases"][0]["device"] == 0
    assert 0.5 <= b_at - b_asked <= 5, "B is served when A's lease expires"
    assert "C" not in got, "C waits behind B"
    st = a.status()
    assert st["lease_counts"]["waiting"] == 1 and st["lease_counts"]["expired"] == 1
    rel = a.call("LEASE_RELEASE", {"ids": [result["leases"][0]["id"]]})
    assert rel[0] == 0 and rel[1]["released"] == [result["leases"][0]["id"]]
    tc.join(15)
    (err, result), c_at, _ = got["C"]
    assert err == 0 and c_at - b_at >= 0
    # A's expired lease is unknown now
    assert a.call("LEASE_RENEW", {"ids": [held["id"]]})[1] == {"renewed": [], "unknown": [held["id"]]}
    for x in (a, b, c):
        x.close()


def test_renewal_keeps_a_lease_and_expiry_ends_its_sessions(daemon_factory):
    d = daemon_factory("--emu-devices", "2")
    holder = connect(d)
    # A ttl of 2 s renewed every 0.4 s: a renewal may come up to 1.6 s late (a loaded machine's sleep and round
    # trip; with a ttl of 0.8 s, 0.4 s late lost the lease) and the lease still outlives its ttl by renewals.
    lease = granted(holder, ttl=2.0, devices=[1])[0]
    user = connect(d, [lease["id"]])
    assert user.call("MALLOC", 1, 1 << 20)[0] == 0
    for _ in range(7):                       # 2.8 s, renewed every 0.4 s: still there
        time.sleep(0.4)
        assert holder.call("LEASE_RENEW", {"ids": [lease["id"]]})[1]["renewed"] == [lease["id"]]
    assert [x["tag"] for x in holder.status()["leases"]] == [lease["id"][:8]]
    # not renewed: it expires (its ttl after the last renewal; polled, bounded), and its session is ended with the
    # reason
    deadline = time.monotonic() + 2.0 + 10
    while holder.status()["leases"] and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(SessionEnded, match=f"lease {lease['id'][:8]} .*expired"):
        user.call("MALLOC", 1, 1 << 20)
    assert holder.status()["leases"] == []
    holder.close()


def test_sessions_need_the_lease_of_a_leased_gpu(daemon_factory):
    """A leased GPU serves only the sessions that present its lease (others get cudaErrorDevicesUnavailable and the
    reason, as CUDA answers for a GPU taken in exclusive mode); a GPU without a lease serves anyone, and then cannot be
    leased whole; releasing a lease ends its sessions."""
    d = daemon_factory("--emu-devices", "2")
    holder = connect(d)
    lease = granted(holder, holder="slurm job 7 (alice)", job="slurm:c:7", devices=[0])[0]
    stranger = connect(d, ["0123456789abcdef0123456789abcdef"])     # someone else's id: no lease here
    err, reason, _ = stranger.call("MALLOC", 0, 1 << 20)
    assert err == UNAVAILABLE and "slurm job 7 (alice)" in reason and "PYVGPU_LEASES" in reason
    assert stranger.call("MALLOC", 1, 1 << 20)[0] == 0                # device 1 is not leased
    user = connect(d, ["junk", lease["id"]])
    ptr = user.call("MALLOC", 0, 1 << 20)
    assert ptr[0] == 0
    st = holder.status()
    assert st["leases"][0]["sessions"] == 1 and "id" not in st["leases"][0]
    # device 1 is used without a lease: not leasable whole, a share is
    err, why = acquire(holder, devices=[1])
    assert err == UNAVAILABLE
    assert granted(holder, devices=[1], fraction=0.5)[0]["exclusive"] is False
    # the job's leases, found by job, then released by job: the session using one is ended, saying why
    listed = holder.call("LEASE_LIST", {"job": "slurm:c:7"})[1]["leases"]
    assert [x["id"] for x in listed] == [lease["id"]]
    assert holder.call("LEASE_RELEASE", {"job": "slurm:c:7"})[1]["released"] == [lease["id"]]
    with pytest.raises(SessionEnded, match="released by its holder"):
        user.call("MALLOC", 0, 1 << 20)
    assert stranger.call("MALLOC", 0, 1 << 20)[0] == 0                # free again: anyone may use it
    for x in (holder, stranger):
        x.close()


def test_shares_get_quotas_and_weights(daemon_factory):
    d = daemon_factory("--emu-memory", "1G")
    c = connect(d)
    half = granted(c, fraction=0.5, holder="half")[0]
    quarter = granted(c, fraction=0.25, weight=3.0, holder="quarter")[0]
    assert half["memory"] == 512 * MiB and half["weight"] == 0.5
    assert quarter["memory"] == 256 * MiB and quarter["weight"] == 3.0
    assert acquire(c, fraction=0.5)[0] == UNAVAILABLE               # 0.75 + 0.5 > 1
    assert acquire(c)[0] == UNAVAILABLE                             # not whole
    assert granted(c, fraction=0.25, memory=128 * MiB)[0]["memory"] == 128 * MiB     # fills it
    user = connect(d, [half["id"]])
    free, total = user.call("MEM_GET_INFO", 0)[1]
    assert total == 512 * MiB and free <= total
    assert user.call("MALLOC", 0, 600 * MiB)[0] == NOMEM
    assert user.call("MALLOC", 0, 500 * MiB)[0] == 0
    mine = [s for s in c.status()["sessions"] if s["id"] == user.session][0]
    assert mine["devices"][0]["weight"] == 0.5 and mine["devices"][0]["memory_limit"] == 512 * MiB
    usage = c.status()["device_usage"][0]
    assert usage["leases"] == 3 and usage["leased_fraction"] == 1.0 and usage["lease_free"] == 0.0
    user.close()
    c.close()


def test_malformed_requests_are_refused_and_the_session_goes_on(daemon_factory):
    d = daemon_factory("--emu-devices", "2")
    c = connect(d)
    for bad, why in [({"count": 0}, "count"), ({"count": 3}, "count"), ({"devices": [2]}, "devices"),
                     ({"devices": [0, 0]}, "devices"), ({"fraction": 1.5}, "fraction"),
                     ({"fraction": 0.001}, "fraction"), ({"ttl": -1}, "ttl"), ({"ttl": MAX_LEASE_TTL_S * 2}, "ttl"),
                     ({"wait": 3600}, "wait"), ({"memory": 1 << 20}, "share"), ({"holder": 5}, "holder"),
                     ({"count": True}, "count")]:
        err, result = acquire(c, **bad)
        assert err == INVALID and why in result, (bad, result)
    assert c.call("LEASE_ACQUIRE", [1, 2])[0] == INVALID
    assert c.call("LEASE_RENEW", {"ids": "x"})[0] == INVALID
    assert c.call("LEASE_RELEASE", {"ids": [1]})[0] == INVALID
    assert c.call("LEASE_RELEASE", {"job": ""})[0] == INVALID
    assert c.call("LEASE_LIST", {"job": 3})[0] == INVALID
    assert granted(c)[0]["device"] == 0                     # still served
    c.close()


def test_a_waiting_client_that_leaves_takes_nothing(daemon_factory):
    d = daemon_factory()
    a, b = connect(d), connect(d)
    first = granted(a, ttl=30)[0]
    def wait() -> None:
        try:
            acquire(b, wait=30)
        except (OSError, ConnectionError, ValueError):
            pass                                            # its connection is shut down below

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while a.status()["lease_counts"]["waiting"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    b.sock.shutdown(socket.SHUT_RDWR)                       # gone while waiting
    while a.status()["lease_counts"]["waiting"] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert a.status()["lease_counts"]["waiting"] == 0
    a.call("LEASE_RELEASE", {"ids": [first["id"]]})
    time.sleep(0.2)
    assert a.status()["leases"] == []                       # nothing was granted to the leaver
    t.join(10)
    a.close()


def _daemon_on(port: int, tmp: Path, *extra: str) -> subprocess.Popen:
    log = tmp / f"daemon-{port}-{time.monotonic_ns()}.log"
    proc = subprocess.Popen(daemon_command("--host", "127.0.0.1", "--port", str(port), "--emu-devices", "2", *extra),
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    wait_listening(proc, port, log)
    return proc


def test_leases_survive_a_restart_with_lease_state(tmp_path):
    """--lease-state: the daemon's leases are on disk at every grant and end; a restarted daemon holds them again (with
    one ttl for their holders to renew), so a running job keeps its GPU; one not renewed then expires."""
    state = tmp_path / "leases.json"
    port = free_port()
    proc = _daemon_on(port, tmp_path, "--lease-state", str(state))
    try:
        c = Client.connect("127.0.0.1", port)
        kept = granted(c, job="j1", ttl=2.0, devices=[1])[0]
        dropped = granted(c, job="j2", ttl=2.0, devices=[0])[0]
        c.close()
        saved = json.loads(state.read_text())
        assert sorted(x["id"] for x in saved) == sorted([kept["id"], dropped["id"]])
        assert state.stat().st_mode & 0o777 == 0o600          # lease ids are capabilities
    finally:
        stop_process(proc)
    proc = _daemon_on(port, tmp_path, "--lease-state", str(state))
    try:
        c = Client.connect("127.0.0.1", port)
        assert [x["id"] for x in c.call("LEASE_LIST", {"job": "j1"})[1]["leases"]] == [kept["id"]]
        assert acquire(c, devices=[1])[0] == UNAVAILABLE         # still leased to j1
        user = Client.connect("127.0.0.1", port, hello={HELLO_LEASES: kept["id"]})
        assert user.call("MALLOC", 1, 1 << 20)[0] == 0            # its holder's programs use it
        # j1 renews every 0.5 s, j2's holder is gone: j2 expires one ttl after the restart. Renewed until then (at
        # least 3 s, past that ttl; at most 15 s), not for a fixed 3 s, which a loaded machine's starved daemon timer
        # could outlast.
        deadline = time.monotonic() + 15
        for i in itertools.count():
            time.sleep(0.5)
            assert c.call("LEASE_RENEW", {"ids": [kept["id"]]})[1]["renewed"] == [kept["id"]]
            left = c.call("LEASE_LIST", {})[1]["leases"]
            if i >= 5 and len(left) == 1 or time.monotonic() > deadline:
                break
        assert [x["tag"] for x in left] == [kept["id"][:8]]
        assert [x["id"] for x in json.loads(state.read_text())] == [kept["id"]]
        user.close()
        c.close()
    finally:
        stop_process(proc)


def test_status_and_metrics_show_leases(daemon_factory):
    from test_sharing import scrape
    mport = free_port()
    d = daemon_factory("--emu-devices", "2", "--metrics-port", str(mport))
    c = connect(d)
    excl = granted(c, holder="slurm job 9 (bob)", job="slurm:c:9", devices=[0])[0]
    share = granted(c, holder="pyvgpu run (pid 5 on n1): ./a", fraction=0.25, devices=[1])[0]
    st = c.status()
    assert [(x["device"], x["holder"], x["exclusive"]) for x in st["leases"]] == [
        (0, "slurm job 9 (bob)", True), (1, "pyvgpu run (pid 5 on n1): ./a", False)]
    assert st["device_usage"][0]["lease_exclusive"] and st["device_usage"][1]["lease_free"] == 0.75
    m = scrape(mport)
    assert m[("pyvgpu_device_leases", (("device", "0"),))] == 1.0
    assert m[("pyvgpu_device_leased_ratio", (("device", "1"),))] == 0.25
    info = [k for k in m if k[0] == "pyvgpu_lease_info"]
    assert (("device", "0"), ("holder", "slurm job 9 (bob)"), ("job", "slurm:c:9"), ("lease", excl["id"][:8]),
            ("mode", "exclusive")) in [k[1] for k in info]
    assert any(dict(k[1])["mode"] == "share 0.25" and dict(k[1])["lease"] == share["id"][:8] for k in info)
    assert 0 < m[("pyvgpu_lease_expiry_seconds", (("device", "0"), ("lease", excl["id"][:8])))] <= 30
    assert m[("pyvgpu_leases_total", (("event", "granted"),))] == 2.0
    c.close()
