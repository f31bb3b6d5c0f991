"""An exception on a (session, device) worker thread ends that request with an error and never hangs the session
(issue 23): outside the jobs (the worker's own bookkeeping, executor.py) every job taken, queued or submitted later
fails with it, the device's turn goes to its other sessions; after the handler (its reply: printf output, event
times, compression; dispatch.execute) the request is answered cudaErrorUnknown and a lent payload goes back."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME
from pyvgpu_daemon.backends.emu import EmuBackend
from pyvgpu_daemon.executor import OrderedWorker
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.lent import Lent
from pyvgpu_daemon.scheduler import DeviceScheduler
from pyvgpu_daemon.session import Session

WORK = (OP_BY_NAME["MEMSET"].code, [0, 0x10, 0, 64, 0], 0)


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(5)
    lp.close()


def submit(loop, worker, fn, tag=WORK):
    async def go():
        return await worker.submit(fn, tag=tag)
    return asyncio.run_coroutine_threadsafe(go(), loop)


def test_a_bookkeeping_failure_fails_the_jobs_instead_of_hanging_them(loop):
    sched = DeviceScheduler(0, quantum=0.0)
    bad = OrderedWorker("bad", loop, sched.lane(1.0, "bad"))
    other = OrderedWorker("other", loop, sched.lane(1.0, "other"))
    calls = []
    end = bad.lane.end

    def failing_end(*a):
        if len(calls) >= 2:               # the second job's bookkeeping fails
            raise RuntimeError("scheduler bug")
        return end(*a)
    bad.lane.end = failing_end
    gate = threading.Event()
    try:
        first = submit(loop, bad, lambda: calls.append(1) or "one")
        assert first.result(10) == "one"
        second = submit(loop, bad, lambda: (gate.wait(10), calls.append(2), "two")[-1])
        queued = [submit(loop, bad, lambda: calls.append(3)) for _ in range(3)]
        gate.set()
        assert second.result(10) == "two"            # the job itself ran and its answer came back
        for f in queued:                             # those behind it fail instead of waiting forever
            with pytest.raises(RuntimeError, match="scheduler bug"):
                f.result(10)
        with pytest.raises(RuntimeError, match="scheduler bug"):
            submit(loop, bad, lambda: calls.append(4)).result(10)     # and so does any later one
        assert calls == [1, 2]
        t0 = time.monotonic()
        assert submit(loop, other, lambda: "free").result(10) == "free"   # the device's turn was given back
        assert time.monotonic() - t0 < 5
    finally:
        for w in (bad, other):
            w.stop()
            w.join(5)


def test_a_failing_reply_is_an_error_and_gives_the_lent_payload_back(monkeypatch):
    backend = EmuBackend(memory=1 << 24)
    loop = asyncio.new_event_loop()
    s = Session(1, "test", backend, 1)
    s.va_base = 1 << 40
    st = s.device(0, loop)
    try:
        ptr = dispatch.execute(s, st, backend, OP_BY_NAME["MALLOC"], [0, 1 << 20], b"", False).result
        released = []

        def lend(src, size, stream):
            return Lent(memoryview(bytearray(size)), lambda: released.append(size))
        monkeypatch.setattr(st.ctx, "memcpy_dtoh_reply", lend)
        out = dispatch.execute(s, st, backend, OP_BY_NAME["MEMCPY_DTOH"], [0, ptr, 1 << 20, 0], b"", False)
        assert out.err == 0 and out.lent is not None and released == []     # lent until the server sent it
        out.lent.release()
        assert released == [1 << 20]

        def broken(ctx):
            raise RuntimeError("event clock bug")
        monkeypatch.setattr(st.event_times, "report", broken)
        out = dispatch.execute(s, st, backend, OP_BY_NAME["MEMCPY_DTOH"], [0, ptr, 1 << 20, 0], b"", False)
        assert out.err == ERROR_CODES["cudaErrorUnknown"] and out.lent is None
        assert released == [1 << 20, 1 << 20]
    finally:
        st.worker.stop()
        loop.close()
