"""What one peer can make the daemon spend, and for how long: the server's bounds in one place.

Every field is a daemon option (`python -m pyvgpu_daemon --help`); docs/security.md has the table with the
reasoning. The emulator's own bounds (PTX sizes, decompressed images, launch time) live in emu/limits.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyvgpu.protocol import HEARTBEAT_INTERVAL_S


@dataclass(frozen=True)
class Bounds:
    max_sessions: int = 64                 # sessions at once; one more is refused at its HELLO
    control_slots: int = 4                 # more sessions for HELLO_CONTROL clients (`pyvgpu daemon status`) while
                                           # max_sessions are open; such a session's device ops are refused
    max_handshaking: int = 64              # connections that have not finished the handshake yet (admission.py:
    max_handshaking_per_peer: int = 8      # ... in all, and per peer address; past them a new one drops the oldest
                                           # that has waited 1 s; 4 x max_handshaking whatever their age)
    handshake_timeout_s: float = 10.0      # TLS + greeting + HELLO
    idle_timeout_s: float = 60.0           # no frame started for this long ends the session (clients PING at 15 s)
    frame_timeout_s: float = 30.0          # a started frame's header must arrive within this; its payload within
    min_rate: int = 256 << 10              # ... this plus payload_len / min_rate (bytes/s): trickling ends
    session_queue_bytes: int = 64 << 20    # request bytes received and not yet executed, per session (a larger
                                           # single frame is admitted alone, one at a time daemon-wide)
    session_queue_jobs: int = 4096         # requests queued and not yet executed, per session
    reply_queue_bytes: int = 64 << 20      # reply payload bytes owed and not yet sent, per session
    drain_timeout_s: float = 10.0          # SIGTERM: queued work may finish for this long before it is cancelled
    heartbeat_s: float = HEARTBEAT_INTERVAL_S

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"{name.replace('_', '-')} must be positive, got {value!r}")

    def payload_deadline_s(self, nbytes: int) -> float:
        """Seconds a payload of nbytes may take to arrive."""
        return self.frame_timeout_s + nbytes / self.min_rate
