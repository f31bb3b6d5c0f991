"""Micro-benchmarks of the daemon's hot paths (pytest-benchmark): a regression in any of them shows in one command,

    pytest bench/ --benchmark-only                      # all; --benchmark-compare after --benchmark-autosave

Each measures one step of what bench/remoting_bench.py measures end to end (bench/README.md, "where the time goes"):
framing (encode/decode of a request and a reply), dispatch of a small op on the worker (dispatch.execute) and on the
loop (fastpath.answer), the worker's hand-back, a bulk receive (FrameStream's callbacks landing 16 MiB in device
memory, without a socket; and through a real loopback socket into a daemon), and the emulator's launch path (an
empty kernel, and a one-warp kernel reading parameters and memory) and per-instruction cost (a 64 K-thread vector
add; thread-instructions per second in extra_info). The checks inside only guard that each benchmark measures what it says (no silent no-op)."""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import OP_BY_NAME
from pyvgpu_daemon import fastpath
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.backends.emu import EmuBackend
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.executor import OrderedWorker
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.stream import FrameStream

MIB = 1 << 20
OPS = {name: OP_BY_NAME[name] for name in ("MEMSET", "EVENT_RECORD", "MEM_GET_INFO", "EVENT_CREATE", "MALLOC",
                                             "MODULE_LOAD", "LAUNCH")}

PTX = r"""
.version 9.0
.target sm_75
.address_size 64

.visible .entry empty()
{
	ret;
}

.visible .entry add_one(
	.param .u64 add_one_param_0,
	.param .u32 add_one_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [add_one_param_0];
	ld.param.u32 	%r2, [add_one_param_1];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.u32 	%r6, [%rd4];
	add.s32 	%r7, %r6, 1;
	st.global.u32 	[%rd4], %r7;
$L__BB0_2:
	ret;
}
"""


@pytest.fixture(scope="module")
def device():
    """A session's state of one emulated device, driven directly (no loop, no worker thread running jobs)."""
    backend = EmuBackend(memory=256 * MIB)
    loop = asyncio.new_event_loop()
    session = Session(1, "bench", backend, 1)
    session.va_base = 1 << 40
    st = session.device(0, loop)
    st.ctx = backend.open_context(0, session.va_base, 1)
    ptr = dispatch.execute(session, st, backend, OPS["MALLOC"], [0, 64 * MIB], b"", False).result
    event = dispatch.execute(session, st, backend, OPS["EVENT_CREATE"], [0, 0], b"", False).result
    yield session, st, backend, ptr, event
    st.worker.stop()
    loop.close()


# ---------------------------------------------------------------------------------------------- framing
def test_encode_request(benchmark):
    parts = benchmark(wire.encode_request, OPS["MEMSET"].code, 0, [0, 1 << 40, 7, 4, 0])
    assert len(parts) == 1


def test_decode_request(benchmark):
    body = wire.encode_request(OPS["MEMSET"].code, 0, [0, 1 << 40, 7, 4, 0])[0][4:]

    def decode():
        return wire.parse_request(wire.unpack_header(body))
    assert benchmark(decode).op == OPS["MEMSET"].code


def test_encode_reply(benchmark):
    assert len(benchmark(wire.encode_reply, 12345, 0, [1 << 30, 4 << 30])) == 1


# ---------------------------------------------------------------------------------------------- dispatch
@pytest.mark.parametrize("op", ["EVENT_RECORD", "MEMSET"])
def test_execute_small_op(benchmark, device, op):
    session, st, backend, ptr, event = device
    args = [0, event, 0] if op == "EVENT_RECORD" else [0, ptr, 7, 4, 0]
    assert benchmark(dispatch.execute, session, st, backend, OPS[op], args, b"", True) is None
    assert st.deferred == 0


def test_loop_answer(benchmark, device):
    session, st, backend, _, _ = device
    st.worker.idle = True            # as the worker thread sets it when its queue is empty
    out = benchmark(fastpath.answer, session, st, backend, OPS["MEM_GET_INFO"], [0], b"")
    assert out is not None and out.err == 0


def test_loop_launch(benchmark, device):
    """An empty-kernel LAUNCH run by the loop (fastpath.run_async: the tiny-launch check, dispatch.execute, the
    emulator, the lane's accounting), as the daemon runs each launch of a stream of them on an idle device."""
    session, st, backend, _, _ = device
    info = dispatch.execute(session, st, backend, OPS["MODULE_LOAD"], [0, 7], PTX.encode(), False).result
    args = [0, info["kernels"]["empty"]["id"], [1, 1, 1], [1, 1, 1], 0, 0]
    assert dispatch.execute(session, st, backend, OPS["LAUNCH"], args, b"", True) is None   # compiles it
    st.worker.idle = True            # as the worker thread sets it when its queue is empty
    assert benchmark(fastpath.run_async, session, st, backend, OPS["LAUNCH"], args, b"")
    assert st.deferred == 0


def test_worker_handback(benchmark):
    """1000 fire-and-forget no-op jobs and one waited for, through a real worker thread and loop."""
    loop = asyncio.new_event_loop()
    worker = OrderedWorker("bench", loop)

    def batch():
        for _ in range(1000):
            worker.post(int)
        loop.run_until_complete(worker.submit(int))
    benchmark(batch)
    assert worker.pending == 0
    worker.stop()
    worker.join(5)
    loop.close()


# ---------------------------------------------------------------------------------------------- bulk receive
class _Transport(asyncio.Transport):
    """Enough of a transport for FrameStream outside a loop's socket (no SO_RCVLOWAT: no socket)."""
    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def test_bulk_receive_callbacks(benchmark):
    """16 MiB arriving in 256 KiB reads into device memory: FrameStream's Python cost per read plus the copy
    the kernel would make anyway (here a memmove from a source buffer)."""
    mem = DeviceMemory(1 << 40, 64 * MIB)
    dst = mem.alloc(16 * MIB)
    target = memoryview(mem.view(dst, 16 * MIB)).cast("B")
    src = np.frombuffer(os.urandom(256 << 10), np.uint8)
    loop = asyncio.new_event_loop()

    def receive():
        async def feed():
            s = FrameStream(lambda _s: None)
            s.connection_made(_Transport())
            task = loop.create_task(s._read_into(target, None))
            await asyncio.sleep(0)
            for _ in range(64):
                buf = s.get_buffer(-1)
                n = min(len(buf), len(src))
                np.frombuffer(buf, np.uint8, n)[:] = src[:n]
                s.buffer_updated(n)
            await task
        loop.run_until_complete(feed())
    benchmark(receive)
    assert bytes(target[-4:]) == src[-4:].tobytes()
    loop.close()


@pytest.fixture(scope="module")
def live_daemon():
    """A daemon (emulated device) on a uvloop thread in this process, and a client session to it."""
    import uvloop
    from pyvgpu_daemon.server import Server, ServerConfig
    loop = uvloop.new_event_loop()
    srv = Server(ServerConfig(port=0), EmuBackend(memory=256 * MIB))
    threading.Thread(target=lambda: (asyncio.set_event_loop(loop), loop.run_until_complete(srv.start()),
                                     loop.run_forever()), daemon=True).start()
    t0 = time.monotonic()
    while srv.bound is None and time.monotonic() - t0 < 10:
        time.sleep(0.01)
    c = Client.connect("127.0.0.1", srv.bound[1], tls=None)
    yield c
    c.close()
    loop.call_soon_threadsafe(loop.stop)


def test_bulk_receive_socket(benchmark, live_daemon):
    """A 16 MiB host-to-device copy and the synchronize that proves it landed, over loopback (the client is
    this process's Python: compare runs of this benchmark, not with remoting_bench's C client)."""
    c = live_daemon
    ptr = c.check("MALLOC", 0, 16 * MIB)[0]
    data = os.urandom(16 * MIB)

    def copy():
        c.call("MEMCPY_HTOD", 0, ptr, 0, payload=data, reply=False)
        return c.call("DEVICE_SYNC", 0)[0]
    assert benchmark(copy) == 0
    assert c.check("MEMCPY_DTOH", 0, ptr, 4096, 0)[1] == data[:4096]
    c.call("FREE", 0, ptr)


# ---------------------------------------------------------------------------------------------- emulator
@pytest.fixture(scope="module")
def module():
    mem = DeviceMemory(1 << 40, 64 * MIB)
    return EmuModule.load(PTX.encode(), mem), mem


def test_emu_empty_launch(benchmark, module):
    mod, _ = module
    out = benchmark(mod.launch, "empty", (1, 1, 1), (1, 1, 1), 0, b"")
    assert out.stdout == b""


def test_emu_small_launch(benchmark, module):
    """add_one over one warp: the fixed cost of a launch that reads two parameters and touches memory (what a
    framework's tiny elementwise kernel costs the emulator), 14 instructions per thread."""
    mod, mem = module
    ptr = mem.alloc(4 * 32)
    mem.write(ptr, bytes(4 * 32))
    params = struct.pack("<QI", ptr, 32) + b"\0" * 4
    calls = []

    def launch():
        calls.append(1)
        return mod.launch("add_one", (1, 1, 1), (32, 1, 1), 0, params)
    assert benchmark(launch).stdout == b""
    got = np.frombuffer(bytes(mem.read(ptr, 4 * 32)), np.uint32)
    assert got.min() == got.max() == len(calls)


def test_emu_thread_instructions(benchmark, module):
    """add_one over 64 K threads: 14 instructions per thread (the path of an in-range thread)."""
    mod, mem = module
    n = 1 << 16
    ptr = mem.alloc(4 * n)
    mem.write(ptr, np.zeros(n, np.uint32).tobytes())
    params = struct.pack("<QI", ptr, n) + b"\0" * 4
    calls = []

    def launch():
        calls.append(1)
        mod.launch("add_one", (n // 256, 1, 1), (256, 1, 1), 0, params)
    benchmark(launch)
    got = np.frombuffer(bytes(mem.read(ptr, 4 * n)), np.uint32)
    assert got.min() == got.max() == len(calls)
    benchmark.extra_info["M thread-instructions/s"] = round(14 * n / benchmark.stats.stats.median / 1e6, 1)
