"""Hostile and broken clients: random/truncated frames, disconnects mid-transfer, slow neighbours.
The daemon must keep serving everyone else and hold nothing for clients that are gone."""
from __future__ import annotations

import socket
import struct
import threading
import time

import msgpack
from hypothesis import HealthCheck, given, settings, strategies as st

from harness import frame, raw_session, wait_no_sessions
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import ERR_UNAVAILABLE, OP_BY_NAME, OPS

E_OK = 0


def good_frames() -> st.SearchStrategy[bytes]:
    """Well-formed-looking requests with random argument values (valid shapes, hostile contents)."""
    anyval = st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.none(), st.binary(max_size=8),
                       st.text(max_size=4), st.lists(st.integers(0, 5000), max_size=4), st.floats())
    def build(spec, vals, rid, payload):
        args = list(vals[:len(spec.args)])
        return frame([spec.code, rid, len(payload), *args], payload)
    return st.builds(build, st.sampled_from([o for o in OPS if o.name not in ("HELLO", "GOODBYE")]),
                     st.lists(anyval, min_size=8, max_size=8), st.integers(1, 1000),
                     st.binary(max_size=16)).map(lambda b: b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blobs=st.lists(st.one_of(st.binary(max_size=64), good_frames()), min_size=1, max_size=6),
       cut=st.integers(0, 200))
def test_random_frames_never_bring_the_daemon_down(daemon, blobs, cut):
    bystander = Client.connect("127.0.0.1", daemon.port)
    try:
        ptr = bystander.call("MALLOC", 0, 64)[1]
        bystander.call("MEMCPY_HTOD", 0, ptr, 0, payload=b"k" * 64)
        s = raw_session(daemon.port)
        data = b"".join(blobs)
        try:
            s.sendall(data[:max(1, len(data) - cut)])     # often truncated mid-frame
            s.settimeout(0.05)
            try:
                while s.recv(65536):
                    pass
            except (socket.timeout, OSError):
                pass
        finally:
            s.close()
        # the other session carries on, its data intact
        err, _, back = bystander.call("MEMCPY_DTOH", 0, ptr, 64, 0)
        assert err == 0 and back == b"k" * 64
    finally:
        bystander.close()
    assert daemon.proc.poll() is None


def test_malformed_frames_end_only_that_session(daemon):
    bad_inputs = [
        struct.pack("<I", 0),                                      # empty header
        struct.pack("<I", 1 << 30) + b"x",                         # absurd header length
        frame({"op": 1}),                                          # header not an array
        frame([999, 1, 0]),                                        # unknown op
        frame([OP_BY_NAME["MALLOC"].code, 1, 0, 0]),              # wrong arity
        frame([OP_BY_NAME["MALLOC"].code, 0, 0, 0, 16]),          # fire-and-forget on a non-ASYNC op
        frame([OP_BY_NAME["MALLOC"].code, 1, 5, 0, 16], b"12345"),  # payload on an op without one
        frame([OP_BY_NAME["MEMCPY_HTOD"].code, 1, 1 << 33, 0, 0, 0]),  # payload beyond device memory
        frame([OP_BY_NAME["HELLO"].code, 1, 0, {}]),               # second hello
        b"\xff\xff\xff\xff",
    ]
    with Client.connect("127.0.0.1", daemon.port) as keeper:
        for data in bad_inputs:
            s = raw_session(daemon.port)
            s.sendall(data)
            s.settimeout(5)
            rep, _, _ = wire.recv_reply(s)                         # the daemon says why it ends this session
            assert rep.is_notice and rep.err == ERR_UNAVAILABLE and isinstance(rep.result, str), rep
            assert s.recv(100) == b""                              # ... and closes it
            s.close()
            assert keeper.call("MEM_GET_INFO", 0)[0] == 0
    log = daemon.wait_log("not an ASYNC op")
    assert "unknown op 999" in log and "with 1 args" in log and "not an ASYNC op" in log
    assert "Traceback" not in log
    assert wait_no_sessions(daemon.port)["others"] == []


def test_disconnect_mid_transfer_leaves_nothing_held(daemon):
    c = Client.connect("127.0.0.1", daemon.port)
    ptrs = [c.call("MALLOC", 0, 8 << 20)[1] for _ in range(4)]
    s_ev = c.call("STREAM_CREATE", 0, 0, 0)[1]
    assert s_ev
    # announce a 32 MiB copy, send half of it, vanish
    header = wire.encode_request(OP_BY_NAME["MEMCPY_HTOD"].code, 77, [0, ptrs[0], 0], b"")[0]
    body = msgpack.packb([OP_BY_NAME["MEMCPY_HTOD"].code, 77, 32 << 20, 0, ptrs[0], 0])
    assert header
    c.sock.sendall(struct.pack("<I", len(body)) + body + b"\1" * (16 << 20))
    c.sock.close()
    res = wait_no_sessions(daemon.port)
    assert res["others"] == []
    free, total = Client.connect("127.0.0.1", daemon.port).call("MEM_GET_INFO", 0)[1]
    assert free == total
    assert "released 33554432 bytes" in daemon.wait_log("released 33554432 bytes")
    # the next client is served normally
    with Client.connect("127.0.0.1", daemon.port) as d:
        p = d.call("MALLOC", 0, 1 << 20)[1]
        d.call("MEMCPY_HTOD", 0, p, 0, payload=b"z" * (1 << 20))
        assert d.call("MEMCPY_DTOH", 0, p, 1 << 20, 0)[2] == b"z" * (1 << 20)


def test_disconnect_with_queued_async_work(daemon):
    c = Client.connect("127.0.0.1", daemon.port)
    p = c.call("MALLOC", 0, 256 << 20)[1]
    for _ in range(20):
        c.call("MEMSET", 0, p, 3, 256 << 20, 0, reply=False)
    c.sock.close()
    assert wait_no_sessions(daemon.port, timeout=30)["others"] == []


def test_slow_op_in_one_session_does_not_block_another(daemon_factory):
    d = daemon_factory("--emu-memory", "2G")
    a = Client.connect("127.0.0.1", d.port, timeout=300)   # seconds of device work on a loaded machine
    b = Client.connect("127.0.0.1", d.port, timeout=300)
    try:
        size = 1536 << 20
        p = a.call("MALLOC", 0, size)[1]
        done = threading.Event()
        span: list[float] = []

        def slow() -> None:
            t0 = time.perf_counter()
            # first touch of 1.5 GiB of emulated memory, then a full copy: seconds of device work
            a.call("MEMSET", 0, p, 1, size, 0, reply=False)
            a.call("MEMCPY_DTOD", 0, p, p + (size // 2), size // 2, 0, reply=False)
            assert a.call("DEVICE_SYNC", 0)[0] == 0
            span.append(time.perf_counter() - t0)
            done.set()

        t = threading.Thread(target=slow)
        t.start()
        time.sleep(0.05)
        worst = 0.0
        calls = 0
        while not done.is_set():
            t0 = time.perf_counter()
            q = b.call("MALLOC", 0, 4096)[1]
            assert b.call("FREE", 0, q)[0] == 0
            worst = max(worst, time.perf_counter() - t0)
            calls += 1
        t.join()
        assert span and span[0] > 0.2, "slow op too fast to prove anything"
        assert calls >= 3
        assert worst < span[0] / 2, (worst, span[0], calls)
    finally:
        a.close()
        b.close()


def test_many_sessions_in_parallel(daemon):
    errors: list[str] = []

    def worker(k: int) -> None:
        try:
            with Client.connect("127.0.0.1", daemon.port) as c:
                for i in range(10):
                    data = bytes([k, i]) * 5000
                    p = c.call("MALLOC", 0, len(data))[1]
                    c.call("MEMCPY_HTOD", 0, p, 0, payload=data, reply=False)
                    err, _, back = c.call("MEMCPY_DTOH", 0, p, len(data), 0)
                    if err or back != data:
                        errors.append(f"{k}/{i}: err {err}")
                    c.call("FREE", 0, p)
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert wait_no_sessions(daemon.port)["others"] == []
