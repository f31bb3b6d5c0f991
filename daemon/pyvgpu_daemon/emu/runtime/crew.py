"""Crew: helper threads of one thread (a stream's worker), kept from one launch to the next.

A launch whose chunks run at once (Launch._run_parallel) ran them on a ThreadPoolExecutor made for the launch: two
new threads a launch, a future and a wake-up per chunk, and the stream's thread asleep meanwhile. scan_batches'
3,300 launches of 26 chunks of about 1 ms each paid that in every launch (bench/README.md, "thirteenth step"). A
crew's helpers wait for the next launch instead, and the calling thread works beside them: one wake-up a helper a
launch.

The caller never waits for a helper to start: on a loaded machine a woken thread may wait many milliseconds for a
CPU, and by then the caller may have run every chunk itself. `offer` hands a job to the helpers and returns; the
job itself says what is left (Launch._run_parallel: the chunks not taken, and the caller waits only for chunks
that a helper took). A helper that starts late finds nothing left and waits again; a helper still busy when the
next job comes takes that one next (one slot: a job not started is replaced, never queued).

Each thread that launches has a crew of its own (`crew_of_this_thread`): a chunk may pause in the session's turn
(Launch.check_time) until another session's launch ran; helpers shared with that other session could all be
paused there, and neither launch would end. A crew's helpers are daemon threads that hold neither the crew nor a
launch between jobs; they end when the crew is dropped (its thread ended).
"""
from __future__ import annotations

import threading
from typing import Callable

_STOP = object()              # a helper's job: end the thread


class _Slot:
    """One helper's next job and the event that wakes it."""

    __slots__ = ("job", "event", "lock")

    def __init__(self) -> None:
        self.job: Callable[[], None] | object | None = None
        self.event = threading.Event()
        self.lock = threading.Lock()

    def put(self, job) -> None:
        with self.lock:
            if self.job is not _STOP:
                self.job = job
        self.event.set()

    def take(self):
        with self.lock:
            job, self.job = self.job, None
        return job


class Crew:
    """`offer(job, n)`: job() on n helpers, started as they get a CPU; job must catch its own exceptions (a helper
    drops one that escapes) and must be harmless when it starts after the caller is done with it."""

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self.threads: list[threading.Thread] = []

    def offer(self, job: Callable[[], None], n: int) -> None:
        while len(self._slots) < n:
            slot = _Slot()
            t = threading.Thread(target=_helper, args=(slot,), daemon=True,
                                 name=f"emu-chunk-{threading.current_thread().name}-{len(self._slots)}")
            t.start()
            self._slots.append(slot)
            self.threads.append(t)
        for slot in self._slots[:n]:
            slot.put(job)

    def __del__(self) -> None:
        for slot in self._slots:
            slot.put(_STOP)


def _helper(slot: _Slot) -> None:
    while True:
        slot.event.wait()
        slot.event.clear()
        job = slot.take()
        if job is _STOP:
            return
        if job is not None:
            try:
                job()
            except BaseException:  # noqa: BLE001, S110 - the job's to report (the contract above)
                pass
            job = None            # (holds the launch until the next job otherwise)


_local = threading.local()


def crew_of_this_thread() -> Crew:
    crew = getattr(_local, "crew", None)
    if crew is None:
        crew = _local.crew = Crew()
    return crew
