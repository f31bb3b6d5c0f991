"""Times of one CUDA context's events on a clock of its own, for the event times replies carry (event_times.py).

cuEventElapsedTime answers float32 milliseconds between two events of a context. Measured against one fixed event
an event's time would lose precision as the run grows (float32's step at one hour is 0.2 ms), so the clock keeps a
chain of its own anchor events: a new anchor at most every REBASE_S seconds, recorded on the program's stream just
before the program's event. An event's time is its anchor's time plus elapsed(anchor, event); an anchor's time is
the previous anchor's plus elapsed(previous, anchor), each hop about a second (float32 step ~1e-4 ms), and the
timer's own quantization cancels along the chain. At most MAX_ANCHORS anchors live. An event whose anchor is gone or
not measurable yet, and any driver error, gives no time: the client then asks EVENT_ELAPSED, as before.

The driver module is injectable like the backend's (tests/daemon/test_daemon_wire.py uses a fake one).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from pyvgpu_daemon.errors import CudaError

log = logging.getLogger("pyvgpu.daemon")


@dataclass(eq=False)
class Anchor:
    handle: Any
    prev: "Anchor | None"
    ms: float | None               # time on the clock; None until measured against prev
    alive: bool = True


class EventClock:
    REBASE_S = 1.0
    MAX_ANCHORS = 64

    def __init__(self, drv: Any, elapsed: Callable[[Any, Any], float] | None = None) -> None:
        self.drv = drv
        # elapsed(a, b) in ms, raising on a driver error (the context's: it knows which ABI the driver has)
        self.elapsed = elapsed
        self.anchors: deque[Anchor] = deque()
        self._last = float("-inf")
        self._broken_logged = False

    def rebase_due(self) -> bool:
        """Whether the next before_record records a new anchor (a driver call of its own, on the stream)."""
        return not self.anchors or time.monotonic() - self._last >= self.REBASE_S

    def before_record(self, stream: Any) -> Anchor | None:
        """The anchor for an event about to be recorded on `stream` (a new one, recorded there first, when the
        latest is older than REBASE_S); None when no anchor could be made."""
        now = time.monotonic()
        if self.anchors and now - self._last < self.REBASE_S:
            return self.anchors[-1]
        err, handle = self.drv.cuEventCreate(0)
        if int(err) != 0:
            return self.anchors[-1] if self.anchors else None
        (err,) = self.drv.cuEventRecord(handle, stream)
        if int(err) != 0:
            self.drv.cuEventDestroy(handle)
            return self.anchors[-1] if self.anchors else None
        prev = self.anchors[-1] if self.anchors else None
        anchor = Anchor(handle, prev, 0.0 if prev is None else None)
        self.anchors.append(anchor)
        self._last = now
        if len(self.anchors) > self.MAX_ANCHORS:
            self._evict()
        return anchor

    def _evict(self) -> None:
        oldest = self.anchors.popleft()
        nxt = self.anchors[0]
        if self._ms(nxt) is None and not self._broken_logged:
            self._broken_logged = True
            log.info("event clock: anchor not measurable when evicted; later events are timed by EVENT_ELAPSED")
        nxt.prev = None
        oldest.alive = False
        self.drv.cuEventDestroy(oldest.handle)

    def _elapsed(self, a: Any, b: Any) -> float | None:
        if self.elapsed is not None:
            try:
                return self.elapsed(a, b)
            except CudaError:
                return None
        err, ms = self.drv.cuEventElapsedTime(a, b)
        return float(ms) if int(err) == 0 else None

    def _ms(self, anchor: Anchor) -> float | None:
        chain = []
        a: Anchor | None = anchor
        while a is not None and a.ms is None:     # walk back to a measured anchor (at most MAX_ANCHORS hops)
            chain.append(a)
            a = a.prev
        if a is None or not a.alive:
            return None
        for b in reversed(chain):
            assert b.prev is not None
            d = self._elapsed(b.prev.handle, b.handle)
            if d is None:
                return None
            b.ms = b.prev.ms + d           # type: ignore[operator]
        return anchor.ms

    def time(self, anchor: Anchor | None, event: Any) -> float | None:
        """The completed event's time in ms (recorded after `anchor`), or None."""
        if anchor is None or not anchor.alive:
            return None
        base = self._ms(anchor)
        if base is None:
            return None
        d = self._elapsed(anchor.handle, event)
        return None if d is None else base + d

    def close(self) -> None:
        """Destroys the anchors (a context being destroyed takes them with it: drop() instead)."""
        for a in self.anchors:
            self.drv.cuEventDestroy(a.handle)
        self.drop()

    def drop(self) -> None:
        for a in self.anchors:
            a.alive = False
        self.anchors.clear()
        self._last = float("-inf")
