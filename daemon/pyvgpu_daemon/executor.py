"""One ordered worker thread per (session, device).

Device work (copies, kernels, waits) may take seconds; running it on the event loop would stall every other
client. Each (session, device) gets a thread that runs its jobs strictly in submission order (that order *is* CUDA's
per-device ordering here: all streams of a device are serialized, which is legal). Results travel back to the
loop with call_soon_threadsafe, where they complete an asyncio future.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any, Callable

log = logging.getLogger("pyvgpu.daemon")

_STOP = object()


class OrderedWorker:
    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self._loop = loop
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        # Touched on the loop thread only: jobs submitted and not yet completed, and their payload bytes,
        # so the connection can stop reading when a client floods fire-and-forget work.
        self.pending = 0
        self.pending_bytes = 0
        self._stopped = False

    def submit(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0) -> asyncio.Future[Any]:
        """Queue fn(*args) behind everything submitted before; the future gets its result or exception."""
        if self._stopped:
            raise RuntimeError(f"worker {self.name} is stopped")
        fut: asyncio.Future[Any] = self._loop.create_future()
        self.pending += 1
        self.pending_bytes += nbytes
        self._queue.put((fn, args, fut, nbytes))
        return fut

    def stop(self) -> None:
        """No more jobs; the thread exits after finishing what is queued."""
        if not self._stopped:
            self._stopped = True
            self._queue.put(_STOP)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fn, args, fut, nbytes = item
            try:
                result, exc = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which decides
                result, exc = None, e
            try:
                self._loop.call_soon_threadsafe(self._complete, fut, result, exc, nbytes)
            except RuntimeError:
                # The loop is gone (daemon shutting down): nobody is waiting for this result any more.
                pass

    def _complete(self, fut: asyncio.Future[Any], result: Any, exc: BaseException | None, nbytes: int) -> None:
        self.pending -= 1
        self.pending_bytes -= nbytes
        if fut.cancelled():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
