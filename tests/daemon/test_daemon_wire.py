"""The daemon's side of fewer blocking round trips (issue 10, P4): event times in replies (event_times.py), the
detached device-to-host copy (MEMCPY_DTOH_ASYNC), and the real-GPU event clock (backends/cuda_clock.py) against a
stand-in driver."""
from __future__ import annotations

import numpy as np

from pyvgpu.protocol import ERROR_CODES, MAX_EVENT_TIMES
from pyvgpu_daemon.backends.cuda_clock import EventClock

INVALID_VALUE = ERROR_CODES["cudaErrorInvalidValue"]


def test_replies_carry_event_times_with_record_counts(client):
    e0, _ = client.check("EVENT_CREATE", 0, 0)
    e1, _ = client.check("EVENT_CREATE", 0, 0)
    untimed, _ = client.check("EVENT_CREATE", 0, 2)                      # cudaEventDisableTiming
    for e in (e0, e1, e1, untimed):
        client.call("EVENT_RECORD", 0, e, 0, reply=False)
    client.check("DEVICE_SYNC", 0)
    assert set(client.event_times) == {e0, e1}                           # an untimed event is never reported
    (n0, t0), (n1, t1) = client.event_times[e0], client.event_times[e1]
    assert (n0, n1) == (1, 2) and t1 >= t0
    ms, _ = client.check("EVENT_ELAPSED", 0, e0, e1)
    assert abs(ms - (t1 - t0)) < 1e-6                                    # the same clock as EVENT_ELAPSED
    client.event_times.clear()
    client.check("DEVICE_SYNC", 0)
    assert client.event_times == {}                                      # reported once per record
    client.call("EVENT_DESTROY", 0, e1, reply=False)
    client.call("EVENT_RECORD", 0, e0, 0, reply=False)
    client.check("MEM_GET_INFO", 0)                                      # any reply of the device carries them
    assert list(client.event_times) == [e0] and client.event_times[e0][0] == 2


def test_event_times_per_reply_are_bounded(client):
    events = [client.check("EVENT_CREATE", 0, 0)[0] for _ in range(MAX_EVENT_TIMES + 5)]
    for e in events:
        client.call("EVENT_RECORD", 0, e, 0, reply=False)
    client.check("DEVICE_SYNC", 0)
    assert len(client.event_times) == MAX_EVENT_TIMES
    client.check("DEVICE_SYNC", 0)
    assert len(client.event_times) == MAX_EVENT_TIMES + 5


def test_detached_copy_answers_its_bytes_and_latches_its_failure(client):
    p, _ = client.check("MALLOC", 0, 4096)
    data = np.arange(1024, dtype=np.uint32).tobytes()
    client.call("MEMCPY_HTOD", 0, p, 0, payload=data, reply=False)
    err, _, out = client.call("MEMCPY_DTOH_ASYNC", 0, p, 4096, 0)
    assert err == 0 and out == data
    err, _, out = client.call("MEMCPY_DTOH_ASYNC", 0, p + 4096, 16, 0)   # outside the allocation
    assert err == INVALID_VALUE and out == b""
    assert client.call("MEM_GET_INFO", 0)[0] == 0                        # not a synchronizing op: not its business
    assert client.call("DEVICE_SYNC", 0)[0] == INVALID_VALUE             # the next synchronizing call reports it
    assert client.call("DEVICE_SYNC", 0)[0] == 0
    status = client.status()
    (me,) = [s for s in status["sessions"] if s["self"]]
    # the client waits for neither detached copy: not counted as blocking round trips
    assert me["devices"][0]["waited"] == me["devices"][0]["ops"] - 3


class ClockDriver:
    """Events with settable timestamps; elapsed in float32 like cuEventElapsedTime; NOT_READY until done."""

    def __init__(self) -> None:
        self.now = 0.0
        self.stamp: dict[int, float | None] = {}
        self.ready: set[int] = set()
        self.destroyed: list[int] = []
        self._next = 1

    def cuEventCreate(self, flags):
        h = self._next
        self._next += 1
        self.stamp[h] = None
        return 0, h

    def cuEventRecord(self, h, stream):
        self.stamp[h] = self.now
        self.ready.add(h)
        return (0,)

    def cuEventDestroy(self, h):
        self.destroyed.append(h)
        return (0,)

    def cuEventElapsedTime(self, a, b):
        if a not in self.ready or b not in self.ready:
            return 600, 0.0
        return 0, float(np.float32(self.stamp[b] - self.stamp[a]))


def test_cuda_event_clock_keeps_precision_over_a_long_run(monkeypatch):
    import pyvgpu_daemon.backends.cuda_clock as cc

    drv = ClockDriver()
    clock = EventClock(drv)
    host = [0.0]
    monkeypatch.setattr(cc.time, "monotonic", lambda: host[0])
    user = 1000
    times = []
    for step in range(200):                     # 200 s of device time, an event every 0.25 s
        for _ in range(4):
            drv.now = step * 1000.0 + _ * 250.0 + 0.123456
            host[0] = drv.now / 1000.0
            anchor = clock.before_record(None)
            drv.stamp[user] = drv.now
            drv.ready.add(user)
            times.append((drv.now, clock.time(anchor, user)))
    assert len(clock.anchors) <= EventClock.MAX_ANCHORS
    base_true, base = times[0]
    for true, got in times:
        assert got is not None
        assert abs((got - base) - (true - base_true)) < 1e-3       # one event clock per context: float64 ms
    assert drv.destroyed                                            # old anchors are given back


def test_cuda_event_clock_unmeasurable_anchor_gives_no_time(monkeypatch):
    import pyvgpu_daemon.backends.cuda_clock as cc

    drv = ClockDriver()
    clock = EventClock(drv)
    monkeypatch.setattr(cc.time, "monotonic", lambda: 0.0)
    first = clock.before_record(None)
    monkeypatch.setattr(cc.time, "monotonic", lambda: 5.0)
    second = clock.before_record(None)
    drv.ready.discard(first.handle)            # the first anchor is not complete: the second cannot be placed
    drv.stamp[99] = 7.0
    drv.ready.add(99)
    assert clock.time(second, 99) is None
    assert clock.time(None, 99) is None
    drv.ready.add(first.handle)
    assert clock.time(second, 99) is not None
