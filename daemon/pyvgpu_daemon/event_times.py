"""Event times that travel with replies (protocol v3, a reply header's sixth field).

cudaEventElapsedTime is a question the client would otherwise have to send and wait for. Instead, every reply of a
(session, device) carries the times of the events whose latest record has completed since the last report, so a
program that times its steps with events (examples/dp_train) reads its elapsed times locally after the step's
synchronizing copy. Each entry says how many records of the event the daemon has executed: the client uses a time
only while it has sent exactly that many records, so a stale time is never taken for a fresh one.

Owned by the (session, device) worker thread, like the rest of DeviceState. Bounded: one entry per live event.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyvgpu.protocol import MAX_EVENT_TIMES
from pyvgpu_daemon.backends.base import DeviceContext
from pyvgpu_daemon.errors import CudaError


@dataclass
class EventTimes:
    handles: dict[int, int] = field(default_factory=dict)        # id(backend event) -> its handle (live events)
    records: dict[int, int] = field(default_factory=dict)        # event handle -> records executed
    unreported: dict[int, Any] = field(default_factory=dict)     # handle -> backend event, in record order

    def created(self, handle: int, event: Any) -> None:
        self.handles[id(event)] = handle          # the session's event table keeps `event` alive until forget()

    def recorded(self, event: Any) -> None:
        handle = self.handles.get(id(event))
        if handle is None:
            return
        self.records[handle] = self.records.get(handle, 0) + 1
        self.unreported.pop(handle, None)          # re-inserted at the end: reports go in record order
        self.unreported[handle] = event

    def forget(self, handle: int, event: Any) -> None:
        self.handles.pop(id(event), None)
        self.records.pop(handle, None)
        self.unreported.pop(handle, None)

    def clear(self) -> None:
        self.handles.clear()
        self.records.clear()
        self.unreported.clear()

    def report(self, ctx: DeviceContext | None) -> list[float] | None:
        """[handle, records, ms, ...] for completed records not reported yet (None when there is nothing).
        A record not complete yet stays for a later reply; one the backend cannot time (cudaEventDisableTiming, a
        real GPU's clock out of reach) is dropped: the client asks EVENT_ELAPSED for it."""
        if not self.unreported or ctx is None:
            return None
        out: list[float] = []
        done: list[int] = []
        for handle, event in self.unreported.items():
            if len(done) >= MAX_EVENT_TIMES:
                break
            try:
                if not ctx.event_query(event):
                    continue
                ms = ctx.event_time(event)
            except CudaError:
                ms = None                    # the client asks, and hears the error from EVENT_ELAPSED
            done.append(handle)
            if ms is not None:
                out += [handle, self.records[handle], ms]
        for handle in done:
            del self.unreported[handle]
        return out or None
