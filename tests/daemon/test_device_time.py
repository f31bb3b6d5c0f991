"""Device time no session can hold (issue 23, part 3), on the emulated GPU: a long kernel pauses between its steps
while other sessions' work runs, by the fair scheduler's weights, and keeps running to the right result; other
sessions' allocations, frees, copies and launches are not queued behind it.

Before, a kernel held its device's turn until it ended: another session's copy waited for all of it.
"""
from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest

from harness import ptx_of
from pyvgpu.client import Client
from pyvgpu.protocol import HELLO_WEIGHT

THREADS = 256
A, C = 1664525, 1013904223          # tests/cuda/device_time.cu: spin's LCG


def spin_result(iters: int) -> bytes:
    """What spin(out, iters) leaves in out[0..255]: acc = tid, iters times acc = acc * A + C (mod 2**32)."""
    mul, add = 1, 0                  # the affine map x -> mul * x + add, raised to the iters-th power by squaring
    pa, pc = A, C
    n = iters
    while n:
        if n & 1:
            mul, add = (pa * mul) % (1 << 32), (pa * add + pc) % (1 << 32)
        pa, pc = (pa * pa) % (1 << 32), (pa * pc + pc) % (1 << 32)
        n >>= 1
    tid = np.arange(THREADS, dtype=np.uint64)
    return ((tid * mul + add) % (1 << 32)).astype("<u4").tobytes()


class Tenant:
    """A session with device_time.cu loaded and a 1 KiB output buffer."""

    def __init__(self, port: int, name: str, weight: float = 1.0) -> None:
        self.c = Client.connect("127.0.0.1", port, tls=None, client_text=name, hello={HELLO_WEIGHT: weight})
        info = self.c.check("MODULE_LOAD", 0, 1, payload=ptx_of("device_time.cu"))[0]
        self.k = {name: k["id"] for name, k in info["kernels"].items()}
        self.out = self.c.check("MALLOC", 0, 4 * THREADS)[0]

    def spin(self, iters: int) -> float:
        """Launch spin and wait for it; → seconds; its result checked."""
        t = time.perf_counter()
        self.c.call("LAUNCH", 0, self.k["spin"], [1, 1, 1], [THREADS, 1, 1], 0, 0,
                    payload=struct.pack("<QI4x", self.out, iters), reply=False)
        self.c.check("DEVICE_SYNC", 0)
        dt = time.perf_counter() - t
        assert self.c.check("MEMCPY_DTOH", 0, self.out, 4 * THREADS, 0)[1] == spin_result(iters)
        return dt

    def round_trip(self, data: bytes) -> float:
        """Allocate, copy in, launch add_one, copy out (checked), free; → seconds."""
        c = self.c
        t = time.perf_counter()
        p = c.check("MALLOC", 0, len(data))[0]
        c.check("MEMCPY_HTOD", 0, p, 0, payload=data)
        c.call("LAUNCH", 0, self.k["add_one"], [len(data) // 4 // 256, 1, 1], [256, 1, 1], 0, 0,
               payload=struct.pack("<QI4x", p, len(data) // 4), reply=False)
        got = c.check("MEMCPY_DTOH", 0, p, len(data), 0)[1]
        c.check("FREE", 0, p)
        dt = time.perf_counter() - t
        expect = (np.frombuffer(data, "<u4") + np.uint32(1)).astype("<u4").tobytes()
        assert got == expect
        return dt

    def device_seconds(self, monitor: Client) -> float:
        me = self.c.session
        for s in monitor.status()["sessions"]:
            if s["id"] == me:
                return s["devices"][0].get("device_seconds", 0.0)
        raise AssertionError(f"session {me} not in status")


# The daemons here build a kernel's native code at its first launch (PYVGPU_EMU_NATIVE=on): under "auto" it is built
# in the background, so on a loaded machine the calibrating spins could still run interpreted and the measured
# kernels, native, end seconds early (CI, 2026-11-27: one kernel ended inside the window, ratio 1.81).
# Native code runs spin's loop fast enough that seconds of it exceed the default instruction budget of a launch.
NATIVE_NOW = {"PYVGPU_EMU_NATIVE": "on", "PYVGPU_EMU_MAX_VECTOR_INSTRUCTIONS": str(10 ** 12)}


def iterations_for(t: Tenant, seconds: float) -> int:
    """Iterations of spin that take about `seconds` alone, scaled from a spin long enough (>= 0.25 s) that a round
    trip's latency on a loaded machine does not decide it (native code runs 20,000 iterations in milliseconds). Each
    length is timed as the shorter of two spins, as bench/device_time_bench.py does: a stall (the client or the daemon
    waiting for a core) only lengthens one, and a spin of 20 ms stalled past 0.25 s, taken as the calibration, made a
    4 s kernel last 0.3 s (0 round trips during it, under two busy processes)."""
    n = 20000
    t.spin(n)                                   # (the first launch builds the native code)
    while (dt := min(t.spin(n), t.spin(n))) < 0.25:
        n *= 4
    return max(n, int(n * seconds / dt))


def test_other_sessions_work_runs_during_a_long_kernel(daemon_factory):
    d = daemon_factory("--emu-devices", "1", env=NATIVE_NOW)
    a, b = Tenant(d.port, "long"), Tenant(d.port, "short")
    data = bytes(range(256)) * 256
    alone = min(b.round_trip(data) for _ in range(5))
    iters = iterations_for(a, 4.0)
    spun: dict[str, float] = {}
    th = threading.Thread(target=lambda: spun.setdefault("s", a.spin(iters)))   # (no "s": the spin failed)
    th.start()
    time.sleep(0.5)
    during = []
    while th.is_alive() and len(during) < 20:
        during.append(b.round_trip(data))
    th.join()
    assert "s" in spun, "the long kernel failed (its thread's exception is in the warnings)"
    # Before: the first round trip waited for the rest of the kernel, so at most two could start while it ran. Now
    # several complete while it runs. How long each takes is the bench's (bench/device_time_bench.py: 1.82x alone at
    # the median, p90 7.3x at load 3.5), not a timed test's: on CI's 2 cores single hand-overs have taken 2.0 s of a
    # 4 s kernel, and the median of four 1.5 s (2026-11-26).
    assert len(during) >= 3, (f"only {len(during)} round trips of the other session during a {spun['s']:.1f} s "
                              f"kernel", alone, during)


@pytest.mark.parametrize("weights", [(1.0, 3.0)])
def test_long_kernels_share_the_device_by_weight(daemon_factory, weights):
    """Two sessions each running long kernels at once get device time in proportion to their weights, and both
    kernels finish with the right result."""
    d = daemon_factory("--emu-devices", "1", "--max-weight", "4", env=NATIVE_NOW)
    t1, t2 = Tenant(d.port, "w1", weights[0]), Tenant(d.port, "w3", weights[1])
    iters = iterations_for(t1, 3.0)
    spun: dict[int, float] = {}
    threads = [threading.Thread(target=lambda i=i, t=t: spun.setdefault(i, t.spin(iters)))
               for i, t in enumerate((t1, t2))]
    with Client.connect("127.0.0.1", d.port, tls=None) as monitor:
        for th in threads:
            th.start()
        time.sleep(0.5)
        s0 = (t1.device_seconds(monitor), t2.device_seconds(monitor))
        time.sleep(1.5)
        s1 = (t1.device_seconds(monitor), t2.device_seconds(monitor))
        both_ran = all(th.is_alive() for th in threads)
        for th in threads:
            th.join()
    assert len(spun) == 2, f"a long kernel failed: only {list(spun)} ended (the exception is in the warnings)"
    got1, got2 = s1[0] - s0[0], s1[1] - s0[1]
    assert both_ran, f"a kernel calibrated to 3 s alone ended inside the 2 s window: {s0}, {s1}"
    assert got1 > 0.1 and got2 > 0.1, (s0, s1)
    ratio = got2 / got1
    assert 2.0 < ratio < 4.5, f"device time {got1:.2f} s : {got2:.2f} s, ratio {ratio:.2f}, weights {weights}"


# ---------------------------------------------------------------------------------------------- the turn itself
def test_preempt_hands_the_turn_to_a_waiter_and_takes_it_back():
    """Lane.preempt: a lane holding the turn inside a long job is poked when another starts waiting, hands over
    once it has run past the waiter's share, and continues when the waiter is done; the pause is not its device
    time."""
    from pyvgpu_daemon.scheduler import DeviceScheduler
    sched = DeviceScheduler(0, quantum=0.001)
    a, b = sched.lane(name="a"), sched.lane(name="b")
    a.begin()
    a.job_t0 = sched.clock()
    pokes = []
    a.on_waiter(lambda: pokes.append(time.perf_counter()))
    order = []

    def other():
        b.begin()                         # waits: a holds the turn
        order.append("b runs")
        time.sleep(0.05)
        b.device_seconds += 0.05
        b.idle()

    th = threading.Thread(target=other)
    th.start()
    while not pokes:
        time.sleep(0.001)
    time.sleep(0.02)                      # a "runs" 20 ms: past the waiter by more than the quantum
    t = time.perf_counter()
    a.preempt()                           # hands over, returns once b is done
    paused = time.perf_counter() - t
    order.append("a continues")
    th.join()
    assert order == ["b runs", "a continues"], order
    assert paused >= 0.04 and a.holding
    end = sched.clock()
    a.end(None, 0.0, a.job_t0, end)
    # The pause is not a's time: its device time is the job's span less a pause that held b's 50 ms and at most what
    # preempt() took here. (Compared with the pause itself, a's own run, the poll for the poke and the 20 ms, lost
    # on a loaded machine: 6 of 8 runs under two busy processes.)
    span = end - a.job_t0
    assert 0.015 < a.device_seconds and span - paused - 1e-4 <= a.device_seconds <= span - 0.05, \
        (a.device_seconds, span, paused)
    a.idle()


class _FakeTurn:
    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self.charged: list[float] = []
        self.preempts = 0

    def charge(self, seconds: float) -> None:
        self.charged.append(seconds)

    def preempt(self):
        self.preempts += 1
        return None


class _EventDriver:
    """Just the event calls of the CUDA driver; an event completes when the test says its kernel ended."""
    def __init__(self, ms: float) -> None:
        self.ms = ms
        self.next = 1
        self.done: set[int] = set()
        self.recorded: list[tuple[int, int]] = []
        self.synced: list[int] = []
        self.destroyed: list[int] = []

    def cuEventCreate(self, flags):
        self.next += 1
        return 0, self.next

    def cuEventRecord(self, e, s):
        self.recorded.append((e, s))
        return (0,)

    def cuEventQuery(self, e):
        return (0 if e in self.done else 600,)

    def cuEventSynchronize(self, e):
        self.synced.append(e)
        self.done.add(e)
        return (0,)

    def cuEventElapsedTime(self, a, b):
        return 0, self.ms

    def cuEventDestroy(self, e):
        self.destroyed.append(e)
        return (0,)


def test_real_gpu_kernels_are_timed_and_charged_while_shared():
    from contextlib import contextmanager

    from pyvgpu_daemon.backends.cuda_turns import GpuTime
    waits = []

    @contextmanager
    def wait_scope():
        waits.append(1)
        yield

    drv = _EventDriver(ms=250.0)
    g = GpuTime(drv)
    launched = []
    alone = _FakeTurn(shared=False)
    g.launch(alone, 7, lambda: launched.append(1), wait_scope)
    assert launched == [1] and not drv.recorded and not alone.charged      # alone on the device: not timed
    turn = _FakeTurn(shared=True)
    for _ in range(GpuTime.INFLIGHT):
        g.launch(turn, 7, lambda: launched.append(1), wait_scope)
    assert len(g.timed) == GpuTime.INFLIGHT and turn.preempts == GpuTime.INFLIGHT and not waits
    # one more: the oldest unfinished launch is waited for first (a host wait), then charged
    oldest = g.timed[0][1]
    g.launch(turn, 7, lambda: launched.append(1), wait_scope)
    assert waits == [1] and drv.synced == [oldest]
    assert turn.charged == [0.25]
    # the rest finish: the next launch charges each of them once
    for _, end in list(g.timed):
        drv.done.add(end)
    g.launch(turn, 7, lambda: launched.append(1), wait_scope)
    assert turn.charged == [0.25] * (GpuTime.INFLIGHT + 1) and len(g.timed) == 1
    assert all(s == 7 for _, s in drv.recorded)
    g.drop()
    assert not g.timed and len(drv.destroyed) >= 2


def test_fresh_waiter_is_served_at_once_backlogged_ones_by_the_quantum():
    from pyvgpu_daemon.scheduler import FairShare, Share
    fs = FairShare(quantum=0.002)
    a, b = Share(name="a"), Share(name="b")
    assert fs.request(a)
    fs.charge(a, 0.0005)
    assert not fs.request(b)              # b was idle: it enters at the system virtual time, behind a
    # inside a job a yields to a waiter that was idle at once, even within the quantum ...
    assert fs.finish(a, True, mid_job=True) == (False, b)
    fs.charge(b, 0.0001)
    # ... while b, now the holder, keeps the turn against a (backlogged: it queued behind b) within the quantum
    assert fs.finish(b, True, mid_job=True) == (True, None)
    fs.charge(b, 0.003)
    assert fs.finish(b, True, mid_job=True) == (False, a)
    # between jobs, the quantum holds for a fresh waiter too (a flooder's small jobs are batched)
    c = Share(name="c")
    assert not fs.request(c)
    assert fs.finish(a, True) == (True, None)


def test_hints_for_a_running_launch():
    """`shared`: another session ran work recently; `others_outside`: one of them is not queued for the turn (its
    requests need the interpreter, so the launch yields it); neither for a session alone."""
    from pyvgpu_daemon.scheduler import DeviceScheduler
    sched = DeviceScheduler(0)
    a, b = sched.lane(name="a"), sched.lane(name="b")
    assert not a.shared and not a.others_outside
    a.begin()
    b.last_active = sched.clock()
    a._hint_until = 0.0
    assert a.shared and a.others_outside
    th = threading.Thread(target=b.begin)          # b queues for the turn a holds
    th.start()
    while not sched._share._waiting:
        time.sleep(0.001)
    a._hint_until = 0.0
    assert a.shared and not a.others_outside
    a.idle()                                       # the turn goes to b
    th.join()
    b.idle()
