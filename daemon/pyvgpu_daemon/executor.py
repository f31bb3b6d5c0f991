"""One ordered worker thread per (session, device).

Device work (copies, kernels, waits) may take seconds; running it on the event loop would stall every other
client. Each (session, device) gets a thread that runs its jobs in submission order (that order *is* CUDA's
per-device ordering here: all streams of a device are serialized, which is legal), except that work of a stream with
a higher CUDA priority may overtake queued work of lower-priority streams (scheduler.pick says exactly when). Results
travel back to the loop with call_soon_threadsafe, where they complete an asyncio future.

With a `Lane` (scheduler.py) the worker runs each job only while holding its device's turn, so the sessions of one
device share it fairly; the lane also measures every job (device time, latency, sharing slowdown).
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Callable

from pyvgpu_daemon.scheduler import Lane, Tag, is_work, pick

log = logging.getLogger("pyvgpu.daemon")

_STOP: tuple[Any, ...] = (None, (), None, 0, 0.0, None)


class OrderedWorker:
    def __init__(self, name: str, loop: asyncio.AbstractEventLoop, lane: Lane | None = None) -> None:
        self.name = name
        self._loop = loop
        self.lane = lane
        # Set on the worker thread once the session creates a stream with a priority: wire stream handle -> its
        # CUDA priority (None: not a stream of this session). Until then jobs run strictly FIFO.
        self.priority_of: Callable[[int], int | None] | None = None
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        # Touched on the loop thread only: jobs submitted and not yet completed, and their payload bytes,
        # so the connection can stop reading when a client floods fire-and-forget work.
        self.pending = 0
        self.pending_bytes = 0
        self._stopped = False

    def submit(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0, tag: Tag | None = None) -> asyncio.Future[Any]:
        """Queue fn(*args) behind everything submitted before; the future gets its result or exception.
        `tag` (scheduler.Tag) names the op for the figures and says whether the job may move with its stream."""
        if self._stopped:
            raise RuntimeError(f"worker {self.name} is stopped")
        fut: asyncio.Future[Any] = self._loop.create_future()
        self.pending += 1
        self.pending_bytes += nbytes
        self._queue.put((fn, args, fut, nbytes, time.perf_counter(), tag))
        return fut

    def stop(self) -> None:
        """No more jobs; the thread exits after finishing what is queued."""
        if not self._stopped:
            self._stopped = True
            self._queue.put(_STOP)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _next(self, pending: deque[tuple[Any, ...]]) -> tuple[Any, ...]:
        """The next job to run (blocks while there is none)."""
        q = self._queue
        if not pending:
            if self.lane is not None and self.lane.holding and q.empty():
                self.lane.idle()          # nothing to do: let the device's other sessions run
            if self.priority_of is None:
                return q.get()
            pending.append(q.get())
        priority_of = self.priority_of
        if priority_of is None:
            return pending.popleft()
        while not q.empty():              # one consumer: empty() == False means get_nowait() succeeds
            pending.append(q.get_nowait())
        return pick(pending, priority_of)

    def _run(self) -> None:
        pending: deque[tuple[Any, ...]] = deque()
        q = self._queue
        lane = self.lane
        clock = time.perf_counter
        while True:
            item = self._next(pending)
            if item is _STOP:
                if lane is not None:
                    lane.idle()
                return
            fn, args, fut, nbytes, submitted, tag = item
            work = lane is not None and tag is not None and is_work(tag[0])
            if work:
                if not lane.holding:
                    lane.begin()          # device work runs in this session's turn
            elif lane is not None and lane.holding and lane.sched.contended:
                lane.idle()               # a control op needs no turn: others may use the device meanwhile
            t0 = clock()
            try:
                result, exc = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which decides
                result, exc = None, e
            t1 = clock()
            try:
                self._loop.call_soon_threadsafe(self._complete, fut, result, exc, nbytes)
            except RuntimeError:
                # The loop is gone (daemon shutting down): nobody is waiting for this result any more.
                pass
            if work:
                if lane.end(tag, submitted, t0, t1):
                    lane.pass_turn(bool(pending) or not q.empty())
            elif lane is not None and tag is not None:
                lane.record(tag, submitted, t1)

    def _complete(self, fut: asyncio.Future[Any], result: Any, exc: BaseException | None, nbytes: int) -> None:
        self.pending -= 1
        self.pending_bytes -= nbytes
        if fut.cancelled():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

