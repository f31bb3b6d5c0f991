"""Reply payloads lent by a backend (a view of a buffer it reuses, e.g. the cuda backend's pinned staging) and how
the server sends one: the buffer goes back once the transport holds none of its bytes.

The transport keeps unsent bytes by reference, so the last FrameStream.WRITE_HIGH bytes of a lent payload go out as
a copy: when at most that many bytes are unsent after the write (TLS slices not handed over included), every unsent
byte lies in that copy and the buffer goes back at once; else it goes back once the writer resumes with nothing
unsent or the connection is lost (FrameStream.when_sent; until then a later reply stages in another buffer or
through pageable memory).
"""
from __future__ import annotations

from typing import Any, Callable


class Lent:
    """A payload view and how to give its buffer back (once; later calls do nothing)."""
    __slots__ = ("view", "_release")

    def __init__(self, view: memoryview, release: Callable[[], None]) -> None:
        self.view = view
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


def send(stream: Any, parts: list[bytes | memoryview], lent: Lent) -> None:
    """Write a reply frame (wire.encode_reply: header, payload, then any printf output) whose payload is lent.view;
    give the buffer back when it is safe."""
    tail = type(stream).WRITE_HIGH
    payload = memoryview(parts[1]).cast("B")
    n = len(payload)
    if n <= tail:
        parts[1] = bytes(payload)
        stream.writelines(parts)
    else:
        stream.writelines([parts[0], payload[:n - tail], bytes(payload[n - tail:]), *parts[2:]])
        if stream.write_buffer_size() > tail:     # unsent bytes (TLS slices included) may be the buffer's
            stream.when_sent(lent.release)
            return
    lent.release()
