"""FlowControl: the one place that pauses and resumes a connection's transport, in both directions.

Reading. The receive buffer may hold at most `pause_at` unconsumed bytes before the socket stops being read, and
reading is on again as soon as either
- the consumer has taken the buffer down to `resume_at` bytes (hysteresis: a pipelining client would otherwise
  flip the socket's epoll registration once per frame), or
- someone waits for more bytes (a frame header longer than `pause_at`, a payload not yet complete, or simply the
  next frame): a reader that waits always finds reading on.
Every change of the buffer and every wait go through `reading()`, so reading cannot be left paused while the session
waits for input (issue 23: a burst of small frames crossed the mark, the data callback consumed all of it, and
nothing resumed reading: the session stalled until its idle timeout).

Writing. The transport calls pause_writing/resume_writing; `drain()` waits on an asyncio.Event (never polling)
until it resumed or the connection is lost. `unsent_at_most(n)` waits, on the same event, until at most n bytes
are unsent: the transport's marks move to n for the wait (so its resume_writing is the wake-up) and back after.
Modelled on uvicorn's protocols/http/flow_control.py.
"""
from __future__ import annotations

import asyncio
from typing import Callable


class FlowControl:
    def __init__(self, transport: asyncio.Transport, pause_at: int, resume_at: int, write_high: int) -> None:
        assert 0 <= resume_at < pause_at
        self._transport = transport
        self.pause_at = pause_at
        self.resume_at = resume_at
        self.write_high = write_high          # the writer pauses above this and resumes once everything is sent
        transport.set_write_buffer_limits(high=write_high, low=0)
        self.read_paused = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._on_sent: list[Callable[[], None]] = []     # run once everything written is sent (or lost)

    # -- reading
    def reading(self, buffered: int, waiting: bool) -> None:
        """The receive buffer now holds `buffered` unconsumed bytes; `waiting`: a reader waits for more."""
        if self.read_paused:
            if waiting or buffered <= self.resume_at:
                self.read_paused = False
                self._transport.resume_reading()
        elif buffered >= self.pause_at and not waiting:
            self.read_paused = True
            self._transport.pause_reading()

    # -- writing
    @property
    def write_paused(self) -> bool:
        return not self._writable.is_set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()
        if self._transport.get_write_buffer_size() == 0:     # not a resume at unsent_at_most's mark: all sent
            self._sent()

    def lost(self) -> None:
        """The connection is gone: nothing will be written, nobody may wait to write."""
        self._writable.set()
        self._sent()

    def when_sent(self, callback: Callable[[], None]) -> None:
        """callback() once the transport resumed writing with nothing unsent (the low-water mark is 0; a resume at
        unsent_at_most's mark keeps it for the next) or was lost; at once when writing is not paused."""
        if self._transport.get_write_buffer_size() == 0 and not self.write_paused:
            callback()
        else:
            self._on_sent.append(callback)

    def _sent(self) -> None:
        callbacks, self._on_sent = self._on_sent, []
        for cb in callbacks:
            cb()

    async def drain(self) -> None:
        """Until the transport resumed writing (or the connection was lost)."""
        await self._writable.wait()

    async def unsent_at_most(self, n: int) -> None:
        """Until at most n bytes are unsent (or the connection is lost). While it waits the transport pauses above
        n and resumes at n, which sets the event drain() waits on; then its marks are put back (a transport still
        holding more than write_high bytes pauses again at once, so write_paused keeps its meaning)."""
        t = self._transport
        if t.is_closing() or t.get_write_buffer_size() <= n:
            return
        t.set_write_buffer_limits(high=n, low=n)      # more than n unsent: pauses now (or stays paused)
        try:
            while t.get_write_buffer_size() > n and not t.is_closing():
                await self._writable.wait()
        finally:
            if not t.is_closing():
                t.set_write_buffer_limits(high=self.write_high, low=0)
