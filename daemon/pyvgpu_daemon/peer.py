"""Copies between GPUs of different daemons, daemon to daemon (the client never carries the bytes).

The source daemon snapshots the bytes behind a ticket (PEER_EXPORT, on the source device's worker, so earlier work
on that device has finished and later work cannot change the copy). The destination daemon, asked by the same client
(PEER_PULL), opens a session to the source daemon exactly as a client would (handshake, its own token when the source
requires one) and fetches the bytes with the ticket (PEER_FETCH). A ticket is 16 random bytes, is good once, names
at most MAX_PEER_CHUNK bytes and lives PEER_TICKET_TTL_S seconds; a session holds at most MAX_PEER_HELD bytes of
tickets, charged to it and dropped when it ends. So what a client can make a daemon hold, and for how long, is bounded;
and a fetching daemon can read nothing but what a client of the source explicitly exported, once.

The destination's connection to the source is bounded in time (PEER_CONNECT_TIMEOUT_S, PEER_FETCH_TIMEOUT_S) and
logged; it sends nothing but the handshake and the fetch.
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field

from pyvgpu.client import Client, ClientError
from pyvgpu.protocol import (MAX_PEER_CHUNK, MAX_PEER_HELD, PEER_CONNECT_TIMEOUT_S, PEER_FETCH_TIMEOUT_S,
                             PEER_TICKET_TTL_S)
from pyvgpu_daemon.errors import CudaError

log = logging.getLogger("pyvgpu.daemon")


@dataclass
class _Ticket:
    data: bytes
    session: int
    expires: float


@dataclass
class PeerHub:
    """The tickets of one daemon (shared by its sessions; thread-safe) and its way out to other daemons."""
    token: bytes | None = None
    _tickets: dict[bytes, _Ticket] = field(default_factory=dict)
    _held: dict[int, int] = field(default_factory=dict)          # session -> bytes of its live tickets
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _expire(self, now: float) -> None:
        for key in [k for k, t in self._tickets.items() if t.expires <= now]:
            self._drop(key)

    def _drop(self, key: bytes) -> _Ticket | None:
        t = self._tickets.pop(key, None)
        if t is not None:
            self._held[t.session] -= len(t.data)
        return t

    def export(self, session: int, data: bytes) -> bytes:
        """A ticket for `data`, charged to `session`."""
        if len(data) > MAX_PEER_CHUNK:
            raise CudaError("cudaErrorInvalidValue", f"peer export of {len(data)} B (limit {MAX_PEER_CHUNK} B)")
        with self._lock:
            self._expire(time.monotonic())
            held = self._held.get(session, 0)
            if held + len(data) > MAX_PEER_HELD:
                raise CudaError("cudaErrorMemoryAllocation",
                                f"peer exports of this session would hold {held + len(data)} B (limit {MAX_PEER_HELD} B)")
            key = secrets.token_bytes(16)
            self._tickets[key] = _Ticket(data, session, time.monotonic() + PEER_TICKET_TTL_S)
            self._held[session] = held + len(data)
            return key

    def take(self, key: object) -> bytes | None:
        """The bytes behind a ticket, once; None for an unknown, used or expired ticket."""
        if not isinstance(key, bytes):
            return None
        with self._lock:
            self._expire(time.monotonic())
            t = self._drop(key)
            return t.data if t is not None else None

    def drop_session(self, session: int) -> None:
        with self._lock:
            for key in [k for k, t in self._tickets.items() if t.session == session]:
                self._drop(key)
            self._held.pop(session, None)

    def fetch(self, host: str, port: int, key: bytes, size: int, who: str) -> bytes:
        """Fetches a ticket's `size` bytes from the daemon at host:port (blocking; runs on a device worker)."""
        t0 = time.monotonic()
        try:
            with Client.connect(host, port, token=self.token, timeout=PEER_CONNECT_TIMEOUT_S,
                                client_text=f"pyvgpu daemon peer copy for {who}") as c:
                c.sock.settimeout(PEER_FETCH_TIMEOUT_S)
                err, _, data = c.call("PEER_FETCH", key)
        except (OSError, ClientError) as exc:
            raise CudaError("cudaErrorDevicesUnavailable", f"peer daemon {host}:{port}: {exc}") from None
        if err:
            raise CudaError(err, f"peer daemon {host}:{port} refused the ticket")
        if len(data) != size:
            raise CudaError("cudaErrorInvalidValue", f"peer daemon {host}:{port} sent {len(data)} B, not {size} B")
        log.info("%s: fetched %d B from peer daemon %s:%d in %.3f s", who, size, host, port, time.monotonic() - t0)
        return bytes(data)
