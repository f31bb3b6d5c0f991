"""Admission of connections that have not completed their handshake yet: what a slow or silent peer can hold.

A connection is *pending* from the moment it is accepted until its HELLO is answered (or it ends); pending
connections do not count against --max-sessions (only established sessions do). They are bounded per peer address
(Bounds.max_handshaking_per_peer) and in total (Bounds.max_handshaking), each for at most --handshake-timeout. A new
connection is never refused for want of room: when its peer is at its bound, that peer's oldest pending connection
is dropped; when the total is, the oldest pending connection of the peer holding the most is. So sockets a peer
opens and leaves silent (or trickles bytes into) cost it its own older ones, and a new client, from any address
(the same one included), gets its handshake window: `pyvgpu daemon status` and a new CUDA client keep working while
hundreds of such sockets are open (tests/security/test_admission.py). A peer that opens connections faster than a
handshake completes can still starve itself, not others from other addresses.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable

WARN_EVERY_S = 10.0                  # at most one log line per peer this often about dropped pending connections


@dataclass
class Admission:
    total: int
    per_peer: int
    _pending: OrderedDict[Hashable, str] = field(default_factory=OrderedDict)   # connection -> peer, oldest first
    _count: dict[str, int] = field(default_factory=dict)                        # peer -> its pending connections
    _dropped: dict[str, int] = field(default_factory=dict)                      # peer -> dropped since last warned
    _warned: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total < 1 or self.per_peer < 1:
            raise ValueError("admission bounds must be at least 1")

    @property
    def pending(self) -> int:
        return len(self._pending)

    def admit(self, conn: Hashable, peer: str) -> list[Hashable]:
        """A new connection from `peer` (its address without the port): it is pending now. → the pending
        connections to drop to keep the bounds (the caller aborts them; each then calls done())."""
        drop: list[Hashable] = []
        if self._count.get(peer, 0) >= self.per_peer:
            drop.append(self._oldest(peer))
        elif len(self._pending) >= self.total:
            drop.append(self._oldest(max(self._count, key=lambda p: self._count[p])))
        for d in drop:
            victim = self._pending[d]
            self.done(d)
            self._dropped[victim] = self._dropped.get(victim, 0) + 1
        self._pending[conn] = peer
        self._count[peer] = self._count.get(peer, 0) + 1
        return drop

    def done(self, conn: Hashable) -> None:
        """The connection completed its handshake or ended: no longer pending (no-op if it was not)."""
        peer = self._pending.pop(conn, None)
        if peer is None:
            return
        left = self._count[peer] - 1
        if left:
            self._count[peer] = left
        else:
            del self._count[peer]

    def warning(self, peer: str, now: float | None = None) -> str | None:
        """A line to log about the pending connections dropped for `peer`, at most once per WARN_EVERY_S."""
        n = self._dropped.get(peer, 0)
        now = time.monotonic() if now is None else now
        if not n or now - self._warned.get(peer, -WARN_EVERY_S) < WARN_EVERY_S:
            return None
        self._warned[peer] = now
        self._dropped[peer] = 0
        if len(self._warned) > 4 * self.total:             # forget peers warned about long ago (bounded memory)
            for p, t in list(self._warned.items()):
                if now - t >= WARN_EVERY_S:
                    del self._warned[p]
                    self._dropped.pop(p, None)
        return (f"{n} connection(s) from {peer} dropped before their handshake: more than {self.per_peer} from one "
                f"address or {self.total} in all were waiting for theirs (further drops: one line per "
                f"{WARN_EVERY_S:.0f} s)")

    def _oldest(self, peer: str) -> Hashable:
        for conn, p in self._pending.items():
            if p == peer:
                return conn
        raise KeyError(peer)
