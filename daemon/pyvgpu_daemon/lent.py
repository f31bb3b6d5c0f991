"""Reply payloads lent by a backend (a view of a buffer it reuses, e.g. the cuda backend's pinned staging) and how
the server sends one: the buffer goes back once the transport holds none of its bytes.

The transport keeps unsent bytes by reference, so the last FrameStream.WRITE_HIGH bytes of a lent payload go out as
a copy: when the writer is not paused after the write, every unsent byte lies in that copy and the buffer goes back
at once; when it is paused, it goes back when the writer drains (FrameStream's low-water mark is 0: everything sent)
or the connection is lost (FrameStream.when_sent).
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
        stream.when_sent(lent.release)     # at once unless the writer is paused: then every unsent byte may be ours
        return
    lent.release()
