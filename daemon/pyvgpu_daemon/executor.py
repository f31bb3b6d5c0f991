"""One ordered worker thread per (session, device).

Device work (copies, kernels, waits) may take seconds; running it on the event loop would stall every other
client. Each (session, device) gets a thread that runs its jobs in submission order (that order *is* CUDA's
per-device ordering here: all streams of a device are serialized, which is legal), except that work of a stream with
a higher CUDA priority may overtake queued work of lower-priority streams (scheduler.pick says exactly when). Results
travel back to the loop with call_soon_threadsafe, where they complete an asyncio future or call a callback.

Hand-back in batches: each call_soon_threadsafe wakes the loop (a write to its wake-up pipe and a loop iteration),
which made the hand-back, not the work, the cost of a stream of small fire-and-forget ops (bench/README.md,
"where the time goes"). A job someone waits for (a future or a callback) is handed back at once; jobs nobody waits
for (`post`) are handed back together when the queue runs dry or every HANDBACK_BATCH jobs, so the loop's
flow-control counters (`pending`, `pending_bytes`) still move while a client floods the worker.

`idle` is set by the worker thread itself once it has handed everything back and finished its bookkeeping, just
before it blocks for the next job. With `pending == 0` (read on the loop, which alone submits) it means no job of
this (session, device) is queued or running: the loop may then answer a query that needs no ordering itself
(fastpath.route), without the two thread hops.

With a `Lane` (scheduler.py) the worker runs each job only while holding its device's turn, so the sessions of one
device share it fairly; the lane also measures every job (device time, latency, sharing slowdown).

A job's exception is its own: handed back with it (the server answers that request with an error). An exception
outside the jobs (the thread's own bookkeeping: the lane, the priority pick) would otherwise end the thread and
leave every waiter of this (session, device) hanging: the worker then fails the job it was on and every job queued or
submitted later with that exception (one log line with its traceback), so each request still gets its answer.
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
HANDBACK_BATCH = 256              # fire-and-forget completions handed back to the loop at once, at most
Done = Callable[[Any, "BaseException | None"], None]


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
        self.idle = False                 # written by the worker thread only (see the module docstring)

    def submit(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0, tag: Tag | None = None) -> asyncio.Future[Any]:
        """Queue fn(*args) behind everything submitted before; the future gets its result or exception.
        `tag` (scheduler.Tag) names the op for the figures and says whether the job may move with its stream."""
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._put(fn, args, fut, nbytes, tag)
        return fut

    def call(self, done: Done, fn: Callable[..., Any], *args: Any, nbytes: int = 0, tag: Tag | None = None) -> None:
        """As submit, but done(result, exception) is called on the loop as soon as the job is handed back (no future,
        no extra loop iteration for its callbacks: the reply path of a request)."""
        self._put(fn, args, done, nbytes, tag)

    def post(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0, tag: Tag | None = None) -> None:
        """Queue fn(*args) with nobody waiting for it (a fire-and-forget op): handed back in batches; an exception
        is logged."""
        self._put(fn, args, None, nbytes, tag)

    def _put(self, fn: Callable[..., Any], args: tuple[Any, ...], done: Any, nbytes: int, tag: Tag | None) -> None:
        if self._stopped:
            raise RuntimeError(f"worker {self.name} is stopped")
        self.pending += 1
        self.pending_bytes += nbytes
        self._queue.put((fn, args, done, nbytes, time.perf_counter(), tag))

    def stop(self) -> None:
        """No more jobs; the thread exits after finishing what is queued."""
        if not self._stopped:
            self._stopped = True
            self._queue.put(_STOP)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _next(self, pending: deque[tuple[Any, ...]], done: list[tuple[Any, ...]]) -> tuple[Any, ...]:
        """The next job to run (blocks while there is none, after handing back what is done)."""
        q = self._queue
        if not pending:
            if q.empty():
                if done:
                    self._hand_back(done)
                if self.lane is not None and self.lane.holding:
                    self.lane.idle()      # nothing to do: let the device's other sessions run
                self.idle = True
                item = q.get()
                self.idle = False
            else:
                item = q.get()
            if self.priority_of is None:
                return item
            pending.append(item)
        priority_of = self.priority_of
        if priority_of is None:
            return pending.popleft()
        while not q.empty():              # one consumer: empty() == False means get_nowait() succeeds
            pending.append(q.get_nowait())
        return pick(pending, priority_of)

    def _hand_back(self, done: list[tuple[Any, ...]]) -> None:
        batch = done[:]
        done.clear()
        try:
            self._loop.call_soon_threadsafe(self._complete, batch)
        except RuntimeError:
            # The loop is gone (daemon shutting down): nobody is waiting for these results any more.
            pass

    def _run(self) -> None:
        pending: deque[tuple[Any, ...]] = deque()
        done: list[tuple[Any, ...]] = []
        current: list[tuple[Any, ...]] = []          # the job taken and not yet in `done`
        try:
            self._serve(pending, done, current)
        except BaseException as exc:  # noqa: BLE001 - no waiter may be left hanging (module docstring)
            log.exception("%s: worker failed outside a job; its jobs fail from now on", self.name)
            self._fail_all(exc, [*current, *pending], done)

    def _fail_all(self, exc: BaseException, taken: list[tuple[Any, ...]], done: list[tuple[Any, ...]]) -> None:
        """Hand back every job taken, queued or submitted later with exc, until stopped."""
        self.idle = False
        lane = self.lane
        if lane is not None and lane.holding:
            try:
                lane.idle()               # the device's other sessions must not wait for this worker's turn
            except Exception:  # noqa: BLE001 - already failing; the jobs' answers matter more
                log.warning("%s: giving the device's turn back failed too", self.name)
        for item in taken:
            done.append((item[2], None, exc, item[3]))
        while True:
            if done and (self._queue.empty() or len(done) >= HANDBACK_BATCH):
                self._hand_back(done)
            item = self._queue.get()
            if item is _STOP:
                if done:
                    self._hand_back(done)
                return
            done.append((item[2], None, exc, item[3]))

    def _serve(self, pending: deque[tuple[Any, ...]], done: list[tuple[Any, ...]],
               current: list[tuple[Any, ...]]) -> None:
        q = self._queue
        lane = self.lane
        clock = time.perf_counter
        while True:
            item = self._next(pending, done)
            if item is _STOP:
                if done:
                    self._hand_back(done)
                if lane is not None:
                    lane.idle()
                return
            current.append(item)
            fn, args, waiter, nbytes, submitted, tag = item
            work = lane is not None and tag is not None and is_work(tag[0])
            if work:
                if not lane.holding:
                    lane.begin()          # device work runs in this session's turn
            elif lane is not None and lane.holding and lane.sched.contended:
                lane.idle()               # a HOST op needs no turn: others may use the device meanwhile
            t0 = clock()
            if work:
                lane.job_t0 = t0          # where Lane.preempt measures a paused job's device time from
            try:
                result, exc = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which decides
                result, exc = None, e
            t1 = clock()
            done.append((waiter, result, exc, nbytes))
            current.clear()
            if waiter is not None or len(done) >= HANDBACK_BATCH:
                self._hand_back(done)     # someone waits: before the bookkeeping below
            if work:
                if lane.end(tag, submitted, t0, t1):
                    lane.pass_turn(bool(pending) or not q.empty())
            elif lane is not None and tag is not None:
                lane.record(tag, submitted, t1)

    def _complete(self, batch: list[tuple[Any, ...]]) -> None:
        for waiter, result, exc, nbytes in batch:
            self.pending -= 1
            self.pending_bytes -= nbytes
            if waiter is None:
                if exc is not None:
                    log.error("%s: fire-and-forget job raised: %r", self.name, exc)
            elif isinstance(waiter, asyncio.Future):
                if waiter.cancelled():
                    continue
                if exc is not None:
                    waiter.set_exception(exc)
                else:
                    waiter.set_result(result)
            else:
                try:
                    waiter(result, exc)
                except Exception:  # noqa: BLE001 - one reply's failure must not lose the rest of the batch
                    log.exception("%s: completion callback failed", self.name)

