"""The cuda backend's pinned staging for device-to-host replies (backends/cuda_staging.py) and lent reply payloads
(lent.py): buffers pinned once and reused, never lent twice, bounded per context and per daemon, given back only
once the transport holds none of their bytes; and through the chain (the cuda backend on pyvgpu's libcuda.so.1 over
an emulated daemon) every reply byte for byte, pipelined replies included."""
from __future__ import annotations

import socket

import numpy as np
import pytest

from harness import raw_session
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import OP_BY_NAME
from pyvgpu_daemon import lent as lent_mod
from pyvgpu_daemon.backends.cuda import probe
from pyvgpu_daemon.backends.cuda_staging import StagingPool
from pyvgpu_daemon.stream import FrameStream

REAL = "cuda" if probe()[0] else "chain"
MIN = StagingPool.MIN_BYTES


class Pins:
    """register/unregister that record what is pinned (and can refuse)."""

    def __init__(self, refuse: bool = False) -> None:
        self.pinned: dict[int, int] = {}
        self.registered = 0
        self.refuse = refuse

    def register(self, addr: int, size: int) -> None:
        if self.refuse:
            raise RuntimeError("CUDA_ERROR_NOT_PERMITTED")
        assert addr not in self.pinned
        self.pinned[addr] = size
        self.registered += 1

    def unregister(self, addr: int) -> None:
        del self.pinned[addr]

    def pool(self) -> StagingPool:
        return StagingPool(self.register, self.unregister, "test")


def filler(value: int):
    def fill(addr: int) -> None:
        import ctypes
        ctypes.memset(addr, value, MIN)
    return fill


def test_buffers_are_pinned_once_and_reused():
    pins = Pins()
    pool = pins.pool()
    assert pool.copy(MIN - 1, filler(1)) is None                  # small: copied, never pinned
    a = pool.copy(MIN, filler(7))
    assert a is not None and bytes(a.view) == b"\x07" * MIN
    a.release()
    b = pool.copy(MIN, filler(9))
    assert b is not None and bytes(b.view) == b"\x09" * MIN
    assert pins.registered == 1                                  # the same pinned buffer again
    b.release()
    b.release()                                                  # a second release does nothing
    pool.close()
    assert pins.pinned == {}


def test_a_lent_buffer_is_never_lent_again_and_the_pool_is_bounded():
    pins = Pins()
    pool = pins.pool()
    held = [pool.copy(MIN, filler(i)) for i in range(StagingPool.BUFFERS)]
    assert all(h is not None for h in held)
    assert len({id(h.view.obj) for h in held}) == StagingPool.BUFFERS   # distinct buffers
    assert pool.copy(MIN, filler(99)) is None                    # all lent: this reply goes through pageable memory
    assert [bytes(h.view[:1]) for h in held] == [bytes([i]) for i in range(StagingPool.BUFFERS)]
    held[0].release()
    again = pool.copy(MIN, filler(5))
    assert again is not None and pins.registered == StagingPool.BUFFERS
    assert pool.copy(StagingPool.BUFFER_MAX + 1, filler(0)) is None  # larger than any buffer
    for h in (again, *held[1:]):
        h.release()
    # a larger copy replaces a free smaller buffer: still at most BUFFERS pinned, none larger than BUFFER_MAX
    big = pool.copy(4 << 20, filler(3))
    assert big is not None and len(pins.pinned) <= StagingPool.BUFFERS
    assert max(pins.pinned.values()) <= StagingPool.BUFFER_MAX and pool.pinned_bytes() == sum(pins.pinned.values())
    big.release()
    pool.close()


def test_the_daemon_wide_bound(monkeypatch):
    monkeypatch.setattr(StagingPool, "TOTAL_MAX", 3 << 20)
    pins = Pins()
    p1, p2 = pins.pool(), pins.pool()
    a = p1.copy(2 << 20, lambda addr: None)
    assert a is not None
    assert p2.copy(2 << 20, lambda addr: None) is None            # 4 MiB pinned would pass the daemon's 3 MiB
    p1.close()
    assert p2.copy(2 << 20, lambda addr: None) is not None         # given back by the first context's end
    p2.close()


def test_a_refused_registration_falls_back_for_good():
    pins = Pins(refuse=True)
    pool = pins.pool()
    assert pool.copy(MIN, filler(1)) is None
    pins.refuse = False
    assert pool.copy(MIN, filler(1)) is None and pins.registered == 0


def test_a_failed_copy_gives_the_buffer_back():
    pins = Pins()
    pool = pins.pool()

    def fail(addr: int) -> None:
        raise RuntimeError("cuMemcpyDtoHAsync failed")
    for _ in range(StagingPool.BUFFERS + 1):
        with pytest.raises(RuntimeError):
            pool.copy(MIN, fail)
    assert pool.copy(MIN, filler(2)) is not None and pins.registered == 1


class FakeStream:
    WRITE_HIGH = FrameStream.WRITE_HIGH

    def __init__(self, paused: bool) -> None:
        self.write_paused = paused
        self.written: list[bytes] = []
        self.waiting: list = []

    def write_buffer_size(self) -> int:          # paused: more than the high-water mark is unsent
        return 2 * self.WRITE_HIGH if self.write_paused else self.WRITE_HIGH // 2

    def writelines(self, parts) -> None:
        self.parts = list(parts)
        self.written.append(b"".join(bytes(p) for p in parts))

    def when_sent(self, cb) -> None:
        if self.write_paused:
            self.waiting.append(cb)
        else:
            cb()


@pytest.mark.parametrize("paused", [False, True])
def test_lent_payload_goes_back_only_once_sent(paused):
    data = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8)
    released = []
    lent = lent_mod.Lent(memoryview(data), lambda: released.append(1))
    parts = wire.encode_reply(7, 0, None, b"printf output", lent.view)
    s = FakeStream(paused)
    lent_mod.send(s, parts, lent)
    assert s.written[0] == b"".join(bytes(p) for p in wire.encode_reply(7, 0, None, b"printf output", data.tobytes()))
    assert isinstance(s.parts[2], bytes) and len(s.parts[2]) == FrameStream.WRITE_HIGH    # the tail is a copy
    assert released == ([] if paused else [1])
    for cb in s.waiting:
        cb()
    assert released == [1]


def _dtoh_pipelined(c: Client, ptrs: list[tuple[int, int]]) -> list[bytes]:
    """MEMCPY_DTOH_ASYNC of every (ptr, size), all sent before any reply is read."""
    op = OP_BY_NAME["MEMCPY_DTOH_ASYNC"].code
    ids = list(range(1 << 20, (1 << 20) + len(ptrs)))
    c.send_raw(b"".join(b"".join(bytes(p) for p in wire.encode_request(op, i, [0, ptr, size, 0]))
                        for i, (ptr, size) in zip(ids, ptrs)))
    out = []
    for i in ids:
        err, _, data = c._wait(i)
        assert err == 0
        out.append(data)
    return out


def test_replies_byte_for_byte_through_the_backend(daemon_factory):
    d = daemon_factory(backend=REAL)
    rng = np.random.default_rng(11)
    sizes = [MIN - 1, MIN, (1 << 20) + 5, 3 << 20, 16 << 20, StagingPool.BUFFER_MAX, StagingPool.BUFFER_MAX + 4096]
    with Client.connect("127.0.0.1", d.port) as c:
        blocks = []
        for size in sizes:
            data = rng.bytes(size)
            err, p, _ = c.call("MALLOC", 0, size)
            assert err == 0
            assert c.call("MEMCPY_HTOD", 0, p, 0, payload=data)[0] == 0
            blocks.append((p, size, data))
        for p, size, data in blocks:                       # one at a time (the pool's buffers grow, then reused)
            assert c.call("MEMCPY_DTOH", 0, p, size, 0)[2] == data
        for p, size, data in blocks:                       # twice: now from reused buffers
            assert c.call("MEMCPY_DTOH", 0, p, size, 0)[2] == data
        # more replies in flight than the pool has buffers, and larger than the writer's high-water mark
        pipelined = blocks[1:5] * 2
        got = _dtoh_pipelined(c, [(p, size) for p, size, _ in pipelined])
        assert [g == data for g, (_, _, data) in zip(got, pipelined)] == [True] * len(pipelined)
        # device memory changed between two replies: each reply has the bytes of its own moment
        p, size, data = blocks[4]
        assert c.call("MEMSET", 0, p, 0x5A, size, 0)[0] == 0
        assert c.call("MEMCPY_DTOH", 0, p, size, 0)[2] == b"\x5a" * size
    assert "pinned staging for device-to-host copies refused" not in d.log_text()   # the staged path was taken


def test_a_reply_not_yet_sent_keeps_its_bytes(daemon_factory):
    """The client reads nothing while copies of one buffer alternate with memsets of it: the replies wait unsent in
    their staging buffers (and the pool runs out of free ones), yet each carries the bytes of its own moment."""
    d = daemon_factory(backend=REAL)
    n = 16 << 20
    s = raw_session(d.port, timeout=120)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    wire.send_parts(s, wire.encode_request(OP_BY_NAME["MALLOC"].code, 2, [0, n]))
    ptr = wire.recv_reply(s)[0].result
    rounds = StagingPool.BUFFERS + 3
    stream = b""
    for i in range(rounds):
        stream += req("MEMSET", 0, 0, ptr, 0x10 + i, n, 0) + req("MEMCPY_DTOH", 10 + i, 0, ptr, n, 0)
    s.sendall(stream + req("DEVICE_SYNC", 99, 0))
    got = {}
    while len(got) < rounds + 1:
        rep, payload, _ = wire.recv_reply(s)
        assert rep.err == 0, rep
        got[rep.req_id] = payload
    for i in range(rounds):
        assert bytes(got[10 + i]) == bytes([0x10 + i]) * n, i
    s.close()


def req(op: str, req_id: int, *args) -> bytes:
    return b"".join(bytes(p) for p in wire.encode_request(OP_BY_NAME[op].code, req_id, list(args)))
