"""What the daemon's loop does itself when a device is idle (daemon/pyvgpu_daemon/fastpath.py): the same answers,
errors and ordering as through the worker. Copies of 16 MiB take the landing and send-from-device-memory paths
(above fastpath.LANDING_MIN and SEND_MIN); pipelined requests make the worker busy, so both paths are crossed."""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import time

from harness import PUT_PTX, raw_session
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME
from pyvgpu_daemon import fastpath
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.backends.emu import EmuBackend
from pyvgpu_daemon.emu.runtime import launch as emu_launch
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.sharing import Sharing, SharingConfig

MIB = 1 << 20
INVALID_VALUE = ERROR_CODES["cudaErrorInvalidValue"]
BAD_HANDLE = ERROR_CODES["cudaErrorInvalidResourceHandle"]


def req(op: str, req_id: int, *args, payload: bytes = b"") -> bytes:
    return b"".join(bytes(p) for p in wire.encode_request(OP_BY_NAME[op].code, req_id, list(args), payload))


def test_large_copies_round_trip_idle_and_busy(client: Client):
    n = 16 * MIB
    a = client.check("MALLOC", 0, n)[0]
    b = client.check("MALLOC", 0, n)[0]
    first = os.urandom(n)
    client.call("MEMCPY_HTOD", 0, a, 0, payload=first, reply=False)       # idle device: lands in device memory
    assert client.check("MEMCPY_DTOH", 0, a, n, 0)[1] == first           # idle: sent from device memory
    # queued work first: the copy A -> B must read A before the next payload overwrites it
    second = bytes(reversed(first[:MIB])) * 16
    client.call("MEMCPY_DTOD", 0, b, a, n, 0, reply=False)
    client.call("MEMCPY_HTOD", 0, a, 0, payload=second, reply=False)
    assert client.check("MEMCPY_DTOH", 0, b, n, 0)[1] == first
    assert client.check("MEMCPY_DTOH", 0, a, n, 0)[1] == second


def test_reply_from_device_memory_is_not_changed_by_later_work(daemon):
    """The client reads nothing while a memset of the same bytes follows the device-to-host request: the reply
    still carries the bytes as they were when the copy was ordered."""
    n = 16 * MIB
    s = raw_session(daemon.port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    wire.send_parts(s, wire.encode_request(OP_BY_NAME["MALLOC"].code, 2, [0, n]))
    rep, _, _ = wire.recv_reply(s)
    ptr = rep.result
    pattern = os.urandom(n)
    s.sendall(req("MEMCPY_HTOD", 0, 0, ptr, 0, payload=pattern) + req("DEVICE_SYNC", 3, 0))
    assert wire.recv_reply(s)[0].err == 0
    s.sendall(req("MEMCPY_DTOH", 4, 0, ptr, n, 0) + req("MEMSET", 0, 0, ptr, 0, n, 0) + req("DEVICE_SYNC", 5, 0))
    time.sleep(0.5)                       # the memset would have run by now if nothing held it
    rep, payload, _ = wire.recv_reply(s)
    assert rep.req_id == 4 and rep.err == 0 and bytes(payload) == pattern
    assert wire.recv_reply(s)[0].req_id == 5
    s.sendall(req("MEMCPY_DTOH", 6, 0, ptr, n, 0))
    rep, payload, _ = wire.recv_reply(s)
    assert rep.req_id == 6 and bytes(payload) == bytes(n)
    s.close()


def test_loop_answers_return_latched_and_handle_errors(client: Client):
    ptr = client.check("MALLOC", 0, 256)[0]
    client.call("MEMSET", 0, ptr + 4096, 1, 4, 0, reply=False)          # fails on the worker, latched
    time.sleep(0.2)                                                      # the device is idle again
    assert client.call("MEM_GET_INFO", 0)[0] == 0                        # not a synchronizing op: no latched error
    assert client.call("DEVICE_SYNC", 0)[0] == INVALID_VALUE             # answered on the loop: the latched error
    assert client.call("DEVICE_SYNC", 0)[0] == 0                         # ... once
    assert client.call("STREAM_QUERY", 0, 0x7777)[0] == BAD_HANDLE
    stream = client.check("STREAM_CREATE", 0, 0, 0)[0]
    assert client.call("STREAM_QUERY", 0, stream)[0] == 0


def test_landing_refuses_memory_that_is_not_the_sessions(client: Client):
    n = 16 * MIB
    ptr = client.check("MALLOC", 0, n)[0]
    client.call("MEMCPY_HTOD", 0, ptr, 0, payload=b"\x11" * n, reply=False)
    assert client.call("DEVICE_SYNC", 0)[0] == 0
    # runs 64 KiB past the allocation's end: refused as a whole, nothing written
    client.call("MEMCPY_HTOD", 0, ptr + 64 * 1024, 0, payload=b"\x22" * n, reply=False)
    client.call("MEMCPY_HTOD", 0, ptr + 2 * n, 0, payload=b"\x33" * (128 << 10), reply=False)
    assert client.call("DEVICE_SYNC", 0)[0] == INVALID_VALUE
    assert client.check("MEMCPY_DTOH", 0, ptr, n, 0)[1] == b"\x11" * n


@contextlib.contextmanager
def two_sessions():
    """An emulated backend, session 1 alone on device 0 with an idle worker, and a function that makes session 2
    open the same device: (backend, session 1, its DeviceState, open_second)."""
    backend = EmuBackend(memory=64 * MIB)
    sharing = Sharing(SharingConfig(), backend.devices())
    loop = asyncio.new_event_loop()
    sessions = []
    try:
        for sid in (1, 2):
            s = Session(sid, "test", backend, 1)
            s.va_base, s.sharing = sid << 40, sharing
            sessions.append(s)
        st = sessions[0].device(0, loop)
        st.worker.idle = True                      # as its thread sets it with an empty queue
        yield backend, sessions[0], st, lambda: sessions[1].device(0, loop)
    finally:
        for s in sessions:
            for dev in s.devices.values():
                dev.worker.stop()
        loop.close()


def test_shared_device_work_takes_the_turn_queries_stay_on_the_loop():
    """Alone on a device, the loop runs a session's small work itself; once another session uses the device, its
    work goes to the worker (the session's turn: fair share and the sharing slowdown stay measured), while state
    queries, which need no turn, are still answered on the loop."""
    with two_sessions() as (backend, a, st, open_second):
        ptr = dispatch.execute(a, st, backend, OP_BY_NAME["MALLOC"], [0, 4096], b"", False).result
        memset = [0, ptr, 7, 4, 0]
        assert fastpath.run_async(a, st, backend, OP_BY_NAME["MEMSET"], memset, b"")
        open_second()                              # a second session opens the device
        assert not fastpath.run_async(a, st, backend, OP_BY_NAME["MEMSET"], memset, b"")
        out = fastpath.answer(a, st, backend, OP_BY_NAME["MEM_GET_INFO"], [0], b"")
        assert out is not None and out.err == 0


LOOP_PTX = PUT_PTX + b""".visible .entry spin(.param .u64 out, .param .u32 n)
{
  .reg .b32 %r<3>; .reg .pred %p<2>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, 0;
LOOP:
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, %r1;
  @%p1 bra LOOP;
  ret;
}
"""


def test_only_tiny_launches_run_on_the_loop(monkeypatch):
    """A launch runs on the loop only when the emulator knows it is short whatever its parameters: a loop-free
    kernel over few threads that has run before (on the worker, which compiled it); never a kernel with a loop
    (its cost is its argument's), never a first launch, never while another session shares the device."""
    monkeypatch.setattr(emu_launch, "TINY_SECONDS", 60.0)    # a loaded host's timing must not decide the test
    with two_sessions() as (backend, a, st, open_second):

        def run(op, *args, payload=b""):
            out = dispatch.execute(a, st, backend, OP_BY_NAME[op], [0, *args], payload, False)
            assert out.err == 0
            return out
        ptr = run("MALLOC", 4096).result
        kernels = run("MODULE_LOAD", 1, payload=LOOP_PTX).result["kernels"]
        launch = OP_BY_NAME["LAUNCH"]

        def args(name):
            return [0, kernels[name]["id"], [1, 1, 1], [32, 1, 1], 0, 0]

        def params(v):
            return struct.pack("<QI", ptr, v) + b"\0" * 4
        assert not fastpath.run_async(a, st, backend, launch, args("put"), params(1))    # first launch: worker
        run("LAUNCH", *args("put")[1:], payload=params(1))
        assert fastpath.run_async(a, st, backend, launch, args("put"), params(2))        # ran here and now
        assert bytes(run("MEMCPY_DTOH", ptr, 4, 0).payload) == struct.pack("<I", 2)
        assert not fastpath.run_async(a, st, backend, launch, [0, 12345, [1, 1, 1], [32, 1, 1], 0, 0], params(3))
        assert not fastpath.run_async(a, st, backend, launch, [0, args("put")[1], [1, 1], [32, 1, 1], 0, 0],
                                      params(3))                                          # malformed: worker
        run("LAUNCH", *args("spin")[1:], payload=params(3))
        assert not fastpath.run_async(a, st, backend, launch, args("spin"), params(10 ** 6))
        open_second()                              # a second session opens the device: its turn on the worker
        assert not fastpath.run_async(a, st, backend, launch, args("put"), params(4))

