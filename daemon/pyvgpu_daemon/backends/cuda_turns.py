"""A real GPU's kernel time, measured and charged to the session's turn, so fair sharing holds for kernels too.

A launch on a real GPU returns at once; the kernel runs later, for however long, and cannot be preempted by the
daemon. Without this, the scheduler saw only the microseconds of the launch call, so one session could keep a GPU
busy with long kernels at no cost to its share. While the device is shared (another session uses it), each launch
is bracketed by two timing events on its stream; once the end event has completed, cuEventElapsedTime (the kernel's
run, time-sliced with other contexts included) is charged to the session's turn (DeviceTurn.charge). Before the next
launch the session offers the turn (DeviceTurn.preempt): a session over its share waits while others with work go
first. At most INFLIGHT timed launches of a session are unfinished at once: the next one first waits for the oldest
(a host wait, which gives the turn away), so what a session has queued on the GPU is measured before it queues much
more. A session alone on its device is not timed (no events, nothing held back).

What this cannot do (docs/operations.md): stop a kernel that is already running; the GPU's own time-slicing between
contexts decides how the kernels of different sessions overlap.

The driver module is injectable like the backend's (tests/daemon/test_device_time.py uses a fake one).
"""
from __future__ import annotations

import logging
from collections import deque
from contextlib import AbstractContextManager
from typing import Any, Callable

log = logging.getLogger("pyvgpu.daemon")

NOT_READY = 600                      # CUDA_ERROR_NOT_READY


class GpuTime:
    INFLIGHT = 4                     # timed launches of one session unfinished at once, at most
    POOL = 16                        # idle timing events kept for reuse

    def __init__(self, drv: Any, elapsed: Callable[[Any, Any], float] | None = None) -> None:
        self.drv = drv
        # elapsed(start, end) in ms, raising on a driver error (the context's: it knows which ABI the driver has)
        self.elapsed = elapsed or self._elapsed
        self.timed: deque[tuple[Any, Any]] = deque()     # (start, end) events of launches not charged yet
        self._pool: list[Any] = []
        self.charged = 0.0                               # seconds charged so far (status, tests)

    def launch(self, turn: Any, stream: Any, launch: Callable[[], None],
               wait_scope: Callable[[], AbstractContextManager[None]]) -> None:
        """Run launch() (which enqueues one kernel on `stream`), timed while the device is shared."""
        if turn is None or not turn.shared:
            self.settle(turn)
            launch()
            return
        self.settle(turn)
        if len(self.timed) >= self.INFLIGHT:
            with wait_scope():                           # a host wait: other sessions may run meanwhile
                self.drv.cuEventSynchronize(self.timed[0][1])
            self.settle(turn)
        turn.preempt()                                   # over its share while others wait: they go first
        start, end = self._event(), self._event()
        if start is None or end is None or int(self.drv.cuEventRecord(start, stream)[0]) != 0:
            self._recycle(start, end)
            launch()
            return
        launch()
        if int(self.drv.cuEventRecord(end, stream)[0]) != 0:
            self._recycle(start, end)
            return
        self.timed.append((start, end))

    def settle(self, turn: Any) -> None:
        """Charge every timed launch that has finished, oldest first."""
        drv = self.drv
        while self.timed:
            start, end = self.timed[0]
            (err,) = drv.cuEventQuery(end)
            if int(err) == NOT_READY:
                return
            self.timed.popleft()
            if int(err) == 0:
                try:
                    ms = self.elapsed(start, end)
                except Exception:  # noqa: BLE001 - an unmeasurable launch is not charged, nothing else changes
                    ms = 0.0
                if ms > 0:
                    seconds = float(ms) / 1000.0
                    self.charged += seconds
                    if turn is not None:
                        turn.charge(seconds)
            self._recycle(start, end)

    def _elapsed(self, start: Any, end: Any) -> float:
        err, ms = self.drv.cuEventElapsedTime(start, end)
        if int(err) != 0:
            raise RuntimeError(f"cuEventElapsedTime: {err}")
        return float(ms)

    def _event(self) -> Any:
        if self._pool:
            return self._pool.pop()
        err, handle = self.drv.cuEventCreate(0)          # timing enabled (flags 0)
        return handle if int(err) == 0 else None

    def _recycle(self, *events: Any) -> None:
        for e in events:
            if e is None:
                continue
            if len(self._pool) < self.POOL:
                self._pool.append(e)
            else:
                self.drv.cuEventDestroy(e)

    def drop(self) -> None:
        """The context goes (reset or close): its events with it."""
        for start, end in self.timed:
            self._pool += [start, end]
        self.timed.clear()
        for e in self._pool:
            try:
                self.drv.cuEventDestroy(e)
            except Exception:  # noqa: BLE001 - the context may already be gone
                pass
        self._pool.clear()
