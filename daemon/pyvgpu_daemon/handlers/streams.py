"""Streams and events: creation (a handle of the session), destruction, synchronization, queries, event records
(their times travel with later replies: event_times.py) and elapsed times."""
from __future__ import annotations

from typing import Any

from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.backends.base import FastOp
from pyvgpu_daemon.handlers.registry import Call, fast_handler, handler, pop_handle
from pyvgpu_daemon.session import DeviceState


@handler("STREAM_CREATE")
def stream_create(c: Call, flags: int, priority: int) -> int:
    h = c.st.add(c.st.streams, lambda: c.ctx.stream_create(flags, priority))
    c.st.add_stream(h, priority)
    return h


@handler("STREAM_DESTROY")
def stream_destroy(c: Call, stream: int) -> None:
    c.ctx.stream_destroy(pop_handle(c.st.streams, stream, "stream"))
    c.st.stream_priority.pop(stream, None)


@handler("STREAM_SYNC")
def stream_sync(c: Call, stream: Any) -> None:
    c.ctx.stream_sync(stream)


@handler("STREAM_QUERY")
def stream_query(c: Call, stream: Any) -> None:
    if not c.ctx.stream_query(stream):
        raise CudaError("cudaErrorNotReady")


@fast_handler("STREAM_WAIT_EVENT")
def stream_wait_event(c: Call, stream: Any, event: Any, flags: int) -> FastOp:
    return FastOp("stream_wait_event", (stream, event, flags))


@handler("EVENT_CREATE")
def event_create(c: Call, flags: int) -> int:
    h = c.st.add(c.st.events, lambda: c.ctx.event_create(flags))
    c.st.event_times.created(h, c.st.events[h])
    return h


@handler("EVENT_DESTROY")
def event_destroy(c: Call, event: int) -> None:
    ev = pop_handle(c.st.events, event, "event")
    c.st.event_times.forget(event, ev)
    c.ctx.event_destroy(ev)


def _recorded(st: DeviceState, op: FastOp) -> None:
    st.event_times.recorded(op.args[0])      # its time travels with a later reply (event_times.py)


@fast_handler("EVENT_RECORD", after=_recorded)
def event_record(c: Call, event: Any, stream: Any) -> FastOp:
    return FastOp("event_record", (event, stream))


@handler("EVENT_SYNC")
def event_sync(c: Call, event: Any) -> None:
    c.ctx.event_sync(event)


@handler("EVENT_QUERY")
def event_query(c: Call, event: Any) -> None:
    if not c.ctx.event_query(event):
        raise CudaError("cudaErrorNotReady")


@handler("EVENT_ELAPSED")
def event_elapsed(c: Call, start: Any, end: Any) -> float:
    return float(c.ctx.event_elapsed(start, end))
