"""Crew: helper threads of one thread (a stream's worker), kept from one launch to the next.

A launch whose chunks run at once (Launch._run_parallel) ran them on a ThreadPoolExecutor made for the launch: two
new threads a launch, a future and a wake-up per chunk, and the stream's thread asleep meanwhile. scan_batches'
5,000 launches of 26 chunks of about 1 ms each paid that in every launch (bench/README.md, "thirteenth step"). A
crew's helpers wait for the next launch instead, and the calling thread works beside them: one wake-up a helper a
launch.

Each thread that launches has a crew of its own (`crew_of_this_thread`): a launch waits on its chunks, and a
chunk may pause in the session's turn (Launch.check_time) until another session's launch ran; helpers shared with
that other session could all be paused there, and neither launch would end. A crew's helpers are daemon threads
that hold neither the crew nor a launch between jobs; they end when the crew is dropped (its thread ended).
"""
from __future__ import annotations

import queue
import threading
from typing import Callable

_STOP = None                  # a helper's queue item: end the thread


class Crew:
    """`run(job, n)`: job() on the calling thread and on n helpers at once; returns when every one returned. job
    must catch its own exceptions (a helper's escaping one is re-raised by run, after all finished)."""

    def __init__(self) -> None:
        self._queues: list[queue.SimpleQueue] = []
        self._done = threading.Semaphore(0)
        self._errors: list[BaseException] = []

    def run(self, job: Callable[[], None], n: int) -> None:
        while len(self._queues) < n:
            q: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_helper, args=(q, self._done, self._errors), daemon=True,
                             name=f"emu-chunk-{threading.current_thread().name}-{len(self._queues)}").start()
            self._queues.append(q)
        for q in self._queues[:n]:
            q.put(job)
        try:
            job()
        finally:
            for _ in range(n):
                self._done.acquire()
        if self._errors:
            e = self._errors[0]
            self._errors.clear()
            raise e

    def __del__(self) -> None:
        for q in self._queues:
            q.put(_STOP)


def _helper(q: queue.SimpleQueue, done: threading.Semaphore, errors: list) -> None:
    while True:
        job = q.get()
        if job is _STOP:
            return
        try:
            job()
        except BaseException as e:  # noqa: BLE001 - handed to the crew's caller
            errors.append(e)
        finally:
            job = None            # (holds the launch until the next job otherwise)
            done.release()


_local = threading.local()


def crew_of_this_thread() -> Crew:
    crew = getattr(_local, "crew", None)
    if crew is None:
        crew = _local.crew = Crew()
    return crew
