"""Admission of connections that have not completed their handshake yet: what a slow or silent peer can hold.

A connection is *pending* from the moment it is accepted until its HELLO is answered (or it ends); pending
connections do not count against --max-sessions (only established sessions do). A new connection is never refused.
When its address already has Bounds.max_handshaking_per_peer pending connections, or all addresses together
Bounds.max_handshaking, the oldest pending connection of that address (of the address holding most, for the total)
is dropped -- if it has been waiting at least GRACE_S: a handshake takes milliseconds, so what waits that long is
silent or trickling, while a burst of clients starting together on one host (a job's processes) all get through.
Only at HARD_FACTOR times the total bound is a younger one dropped. So sockets a peer opens and leaves silent cost it
its own older ones, every one is gone after --handshake-timeout anyway, and a new client, from any address (the same
one included), gets its handshake window: `pyvgpu daemon status` and a new CUDA client keep working while hundreds
of such sockets are open (tests/security/test_admission.py). A peer that opens connections faster than a handshake
completes can still starve itself, not others from other addresses.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable

WARN_EVERY_S = 10.0                  # at most one log line per peer this often about dropped pending connections
GRACE_S = 1.0                        # a pending connection younger than this is dropped only at the hard bound
HARD_FACTOR = 4                      # the hard bound: this times the total bound


@dataclass
class Admission:
    total: int
    per_peer: int
    _pending: OrderedDict[Hashable, str] = field(default_factory=OrderedDict)   # connection -> peer, oldest first
    _count: dict[str, int] = field(default_factory=dict)                        # peer -> its pending connections
    _since: dict[Hashable, float] = field(default_factory=dict)                 # connection -> when it came
    _dropped: dict[str, int] = field(default_factory=dict)                      # peer -> dropped since last warned
    _warned: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total < 1 or self.per_peer < 1:
            raise ValueError("admission bounds must be at least 1")

    @property
    def pending(self) -> int:
        return len(self._pending)

    def admit(self, conn: Hashable, peer: str, now: float | None = None) -> list[Hashable]:
        """A new connection from `peer` (its address without the port): it is pending now. → the pending
        connections to drop to keep the bounds (the caller aborts them; each then calls done())."""
        now = time.monotonic() if now is None else now
        victim = None
        if self._count.get(peer, 0) >= self.per_peer:
            victim = self._oldest(peer)
        elif len(self._pending) >= self.total:
            victim = self._oldest(max(self._count, key=lambda p: self._count[p]))
        drop: list[Hashable] = []
        if victim is not None and (now - self._since[victim] >= GRACE_S
                                   or len(self._pending) >= HARD_FACTOR * self.total):
            drop.append(victim)
        for d in drop:
            who = self._pending[d]
            self.done(d)
            self._dropped[who] = self._dropped.get(who, 0) + 1
        self._pending[conn] = peer
        self._since[conn] = now
        self._count[peer] = self._count.get(peer, 0) + 1
        return drop

    def done(self, conn: Hashable) -> None:
        """The connection completed its handshake or ended: no longer pending (no-op if it was not)."""
        peer = self._pending.pop(conn, None)
        if peer is None:
            return
        del self._since[conn]
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
                f"address or {self.total} in all were waiting for theirs, these for {GRACE_S:.0f} s or more "
                f"(further drops: one line per {WARN_EVERY_S:.0f} s)")

    def _oldest(self, peer: str) -> Hashable:
        for conn, p in self._pending.items():
            if p == peer:
                return conn
        raise KeyError(peer)
