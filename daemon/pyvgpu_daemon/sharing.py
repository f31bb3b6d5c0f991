"""Sharing the daemon's devices between sessions: memory quotas, weights, and the figures of each device.

Quotas: the operator sets a per-session memory limit for every device (`--session-memory 2G`) and per device
(`--session-memory 1=8G`); a client asks for less with the hello's `memory` (`pyvgpu run --memory 1G`). A session's
limit on a device is the smaller of the two (and of the device's memory). Allocations (and module globals) beyond it
fail with cudaErrorMemoryAllocation for that session only, and cudaMemGetInfo shows the session its limit as the
total (session.DeviceState.check_quota / mem_view).

Weights: the hello's `weight` (`pyvgpu run --weight 2`, default 1) is the session's share of each device's time
relative to the others there, capped by `--max-weight` so no client can claim a device by asking.

The figures (`device_figures`) are what `daemon status`, the metrics page, `pyvgpu devices`, `pyvgpu top` and
placement read: per device memory in use, busy ratio, sharing slowdown and sessions, and the op latency histograms.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from pyvgpu import protocol
from pyvgpu.protocol import HELLO_CLIENT, HELLO_HOSTNAME, HELLO_MEMORY, HELLO_PID, HELLO_WEIGHT, OP_BY_CODE
from pyvgpu.units import parse_size
from pyvgpu_daemon.scheduler import QUANTUM_S, WINDOWS, WINDOW_S, DeviceScheduler, Lane, SchedulerConfig, Schedulers

log = logging.getLogger("pyvgpu.daemon")

MAX_WEIGHT = 10.0


@dataclass
class SharingConfig:
    session_memory: int | None = None                     # per-session limit on every device; None: no limit
    device_session_memory: dict[int, int] = field(default_factory=dict)   # device ordinal -> per-session limit
    fair: bool = True                                     # --scheduling fair|off
    max_weight: float = MAX_WEIGHT
    time_slice: float = QUANTUM_S                         # --time-slice, seconds


def parse_session_memory(specs: list[str]) -> tuple[int | None, dict[int, int]]:
    """`--session-memory` values: 'SIZE' (every device) or 'DEVICE=SIZE'. ValueError naming a bad one."""
    default: int | None = None
    per_device: dict[int, int] = {}
    for spec in specs:
        dev, sep, size = spec.partition("=")
        try:
            if sep:
                if not dev.strip().isdigit():
                    raise ValueError
                per_device[int(dev)] = parse_size(size)
            else:
                default = parse_size(spec)
        except ValueError:
            raise ValueError(f"--session-memory {spec!r}: expected SIZE or DEVICE=SIZE, e.g. 2G or 1=512M") from None
    return default, per_device


class Sharing:
    """The daemon's quotas and device schedulers (one DeviceScheduler per device)."""

    def __init__(self, config: SharingConfig, devices: list[dict[str, Any]]) -> None:
        bad = [d for d in config.device_session_memory if not 0 <= d < len(devices)]
        if bad:
            raise ValueError(f"--session-memory names device {bad[0]}, the daemon has {len(devices)} device(s)")
        self.config = config
        self.totals = [int(d.get("total_mem", 0) or 0) for d in devices]
        self.schedulers = Schedulers(len(devices), SchedulerConfig(config.fair, config.max_weight, config.time_slice))

    def device_limit(self, ordinal: int) -> int:
        """The per-session limit the operator set on this device (the device's memory when none)."""
        lim = self.config.device_session_memory.get(ordinal, self.config.session_memory)
        total = self.totals[ordinal]
        return total if lim is None else min(lim, total)

    def limit(self, ordinal: int, request: int | None) -> int | None:
        """A session's limit on a device: its request within the operator's limit; None when neither is set."""
        if request is None and ordinal not in self.config.device_session_memory \
                and self.config.session_memory is None:
            return None
        lim = self.device_limit(ordinal)
        return lim if request is None else min(lim, request)

    def lane(self, ordinal: int, weight: float, name: str) -> Lane:
        return self.schedulers.devices[ordinal].lane(weight, name)

    def scheduler(self, ordinal: int) -> DeviceScheduler:
        return self.schedulers.devices[ordinal]

    # ------------------------------------------------------------------ hello
    def apply_hello(self, session: Any, hello: dict[Any, Any]) -> str | None:
        """Take the sharing keys of a client's hello into its session. → an error message for a bad value."""
        pid = hello.get(HELLO_PID)
        host = hello.get(HELLO_HOSTNAME)
        if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < (1 << 63):
            session.pid = pid
        if isinstance(host, str):
            session.hostname = host[:200]
        if session.pid is None or not session.hostname:
            # older clients: "pid@host argv0"
            text = hello.get(HELLO_CLIENT)
            who = text.split(" ", 1)[0] if isinstance(text, str) else ""
            p, at, h = who.partition("@")
            if at and p.isdigit():
                session.pid = session.pid or int(p)
                session.hostname = session.hostname or h[:200]
        memory = hello.get(HELLO_MEMORY)
        if memory is not None:
            if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0 or memory >= (1 << 64):
                return f"bad memory request {memory!r}: expected a positive number of bytes"
            session.memory_request = memory
        weight = hello.get(HELLO_WEIGHT)
        if weight is not None:
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                    or weight <= 0:
                return f"bad weight {weight!r}: expected a positive number"
            capped = self.schedulers.clamp_weight(float(weight))
            if capped != weight:
                log.info("%s: weight %g capped to %g (--max-weight)", session.tag(), weight, capped)
            session.weight = capped
        return None

    # ------------------------------------------------------------------ figures
    def device_figures(self, sessions: list[Any], now: float) -> list[dict[str, Any]]:
        """Per device: memory in use by sessions, limits, load, sharing slowdown, sessions, op latency histograms."""
        out = []
        for r, sched in enumerate(self.schedulers.devices):
            states = [s.devices[r] for s in sessions if r in s.devices]
            lanes = sched.live_lanes()
            active = sum(1 for lane in lanes if lane.last_active > now - WINDOWS * WINDOW_S)
            hist: dict[int, list[float]] = {op: list(c) for op, c in sched.stats.retired_ops.items()}
            for lane in lanes:
                for op, counts in list(lane.hist.items()):
                    mine = hist.setdefault(op, [0.0] * len(counts))
                    for i, v in enumerate(counts):
                        mine[i] += v
            slowdown = sched.slowdown(now)
            used = sum(st.held + st.var_bytes for st in states)
            out.append({
                protocol.USAGE_DEVICE: r,
                "memory": sum(st.held for st in states),
                protocol.USAGE_MEMORY_USED: used,
                protocol.USAGE_MEMORY_TOTAL: self.totals[r],
                protocol.USAGE_MEMORY_FREE: max(0, self.totals[r] - used),
                "session_memory_limit": self.device_limit(r),
                "sessions": len(states),
                "active_sessions": active,
                "busy_ratio": sched.busy_ratio(now),
                protocol.USAGE_BUSY_RATIO_1S: sched.busy_ratio(now, 1),
                "slowdown": slowdown,
                "device_seconds": sched.device_seconds(),
                "op_latency": {OP_BY_CODE[op].name: {"counts": [int(c) for c in v[:-1]], "sum": v[-1]}
                               for op, v in sorted(hist.items()) if op in OP_BY_CODE},
            })
        return out

