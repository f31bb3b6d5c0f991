"""Link: one connection's flow control (bounds.py), on the loop thread only.

Before a request's payload is read, the session's queue of received-but-unexecuted request bytes must have room
(`room`, else `admit` waits for its devices); a PAYLOAD_OUT request is admitted only while the reply bytes the
session is owed and has not read fit the reply bound (`wait_replies_read`); a frame larger than the queue bound is
admitted alone, one at a time daemon-wide (the oversize slot). Every wait wakes on an event (a job handed back, the
transport's writer resuming, the connection closing), never on a timer that polls, and every wait for the client has
a deadline: a client that reads none of its replies for frame_timeout_s is ended.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pyvgpu.protocol import OpSpec
from pyvgpu_daemon.bounds import Bounds
from pyvgpu_daemon.errors import SessionEnd
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.stream import FrameStream


def reply_bytes(spec: OpSpec, args: list[Any]) -> int:
    """Payload bytes a PAYLOAD_OUT request's reply will carry: the product of its extent arguments (none: a small
    result, a BLAS scalar or a peer ticket's bounded chunk; a bad argument: 0, the handler refuses it)."""
    if not spec.payload_out:
        return 0
    return spec.extent(args) or 0


@dataclass(eq=False)
class Link:
    """One connection's flow-control state and waits."""
    session: Session
    stream: FrameStream
    bounds: Bounds
    oversize_slot: asyncio.Lock      # daemon-wide: one frame above the session queue bound at a time
    outstanding: int = 0             # requests whose reply is not written yet
    reply_owed: int = 0              # payload bytes of those replies
    oversize: bool = False           # holds the oversize slot
    rx_rate: float = 0.0             # bytes/s bulk payloads arrive at (compress.py's link rate for the client)
    rx_reported: float = 0.0         # the rate last told to the client
    sending_device_memory: bool = False   # a reply sent from device memory may still be partly unsent (fastpath)
    _replied: asyncio.Event = field(default_factory=asyncio.Event)   # set when a reply is handed back

    def queued_jobs(self) -> int:
        return sum(st.worker.pending for st in self.session.devices.values())

    def queued_bytes(self) -> int:
        return sum(st.worker.pending_bytes for st in self.session.devices.values())

    def busy(self) -> bool:
        return self.outstanding > 0 or self.queued_jobs() > 0

    # ------------------------------------------------------------------ replies in flight
    def owe(self, need: int) -> None:
        """A request went to a worker: its reply (need payload bytes) is owed."""
        self.outstanding += 1
        self.reply_owed += need

    def replied(self, need: int) -> None:
        """The reply of a request owe()d is handed back (written, or dropped with the connection)."""
        self.outstanding -= 1
        self.reply_owed -= need
        self._replied.set()

    # ------------------------------------------------------------------ the request queue
    def room(self, nbytes: int) -> bool:
        """admit() would not wait (the usual case, tested without a coroutine)."""
        b = self.bounds
        if nbytes > b.session_queue_bytes:
            return False
        jobs = queued = 0
        for st in self.session.devices.values():
            w = st.worker
            jobs += w.pending
            queued += w.pending_bytes
        return not (queued + nbytes > b.session_queue_bytes and queued) and jobs < b.session_queue_jobs

    async def admit(self, nbytes: int) -> None:
        """Room in the session's request queue for nbytes more, waiting for its devices if needed. A frame larger
        than the whole queue bound waits for an empty queue and for the daemon-wide oversize slot."""
        b = self.bounds
        queued = self.queued_bytes()
        if queued + nbytes > b.session_queue_bytes and queued or self.queued_jobs() >= b.session_queue_jobs:
            await self.until(self.drained())
        if nbytes > b.session_queue_bytes:
            await self.until(self.oversize_slot.acquire())
            self.oversize = True

    def release_oversize(self) -> None:
        if self.oversize:
            self.oversize = False
            self.oversize_slot.release()

    async def drained(self) -> None:
        """Until every job queued on the session's devices so far has run."""
        waits = [st.worker.submit(lambda: None) for st in self.session.devices.values() if st.worker.pending]
        if waits:
            await asyncio.gather(*waits)

    async def until(self, aw: Any) -> Any:
        """Await aw, but give up (ConnectionError) as soon as the client's connection is gone."""
        task = asyncio.ensure_future(aw)
        closed = self.stream.closed
        assert closed is not None
        done, _ = await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            task.cancel()
            raise ConnectionError("client went away while its session waited for its device")
        return task.result()

    # ------------------------------------------------------------------ the reply bound
    def replies_fit(self, need: int) -> bool:
        """The reply bytes owed or unsent, plus need, fit the reply bound (or nothing is owed: a single larger
        reply is admitted alone)."""
        owed = self.reply_owed + self.stream.write_buffer_size()
        return owed == 0 or owed + need <= self.bounds.reply_queue_bytes

    async def wait_replies_read(self, need: int) -> None:
        """Until replies_fit(need). It wakes when a job hands a reply back or when the client has read enough of
        what is unsent; a client that read none of its reply bytes for frame_timeout_s is ended."""
        b = self.bounds
        stream = self.stream
        loop = stream.event_loop()
        best = -1
        deadline = 0.0
        while not self.replies_fit(need):
            if stream.is_closing():
                raise ConnectionError("connection closed")
            owed = self.reply_owed + stream.write_buffer_size()
            now = loop.time()
            if best < 0 or owed < best:                    # the client read some: a new frame_timeout_s
                best, deadline = owed, now + b.frame_timeout_s
            elif now >= deadline:
                raise SessionEnd(f"client read none of its {owed} reply bytes for {b.frame_timeout_s:.0f} s")
            # Unsent bytes that would let it pass with the replies still owed (negative: only those can help).
            target = b.reply_queue_bytes - need - self.reply_owed
            if target < 0 and not self.reply_owed:
                target = 0                                 # a single reply above the bound: once all is sent
            self._replied.clear()
            waits = [asyncio.ensure_future(self._replied.wait())]
            if target >= 0:
                waits.append(asyncio.ensure_future(stream.unsent_at_most(target)))
            assert stream.closed is not None
            try:
                await asyncio.wait([*waits, stream.closed], timeout=deadline - now,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    async def wait_sent(self) -> None:
        """Nothing of this session runs until the device bytes of a reply sent from device memory are on their way
        (fastpath.py); a client that reads none of them for frame_timeout_s is ended, as in wait_replies_read."""
        stream = self.stream
        last = stream.write_buffer_size()
        while stream.write_paused:
            try:
                await asyncio.wait_for(self.until(stream.drain()), self.bounds.frame_timeout_s)
            except TimeoutError:
                owed = stream.write_buffer_size()
                if owed >= last:
                    raise SessionEnd(f"client read none of its {owed} reply bytes for "
                                     f"{self.bounds.frame_timeout_s:.0f} s") from None
                last = owed
        self.sending_device_memory = False
