"""`pyvgpu top`: the pool, live. Polls every daemon's STATUS (the same figures as its metrics page) and prints,
each interval: per GPU memory in use, busy ratio, sharing slowdown and sessions; per session its client, weight,
memory used of its limit, share of device time, ops/s and bytes/s; per device op its rate and latency percentiles
(from the daemon's latency histograms, over the interval). Rates need two polls: the first frame shows totals."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from pyvgpu import config, hostmap, leasing
from pyvgpu.hostmap import Host, HostDevices
from pyvgpu.units import format_bytes

CLEAR = "\x1b[H\x1b[2J"
TOP_OPS = 6


@dataclass
class Frame:
    at: float
    reports: list[HostDevices]


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _index(frame: Frame | None) -> dict[tuple[Any, ...], Any]:
    """Counters of a frame by (daemon, kind, ...) for rates."""
    out: dict[tuple[Any, ...], Any] = {}
    if frame is None:
        return out
    for rep in frame.reports:
        st = rep.status or {}
        d = rep.host.daemon_key()
        for s in st.get("sessions") or []:
            for dev in s.get("devices") or []:
                out[(d, "s", s.get("id"), dev.get("device"))] = dev
        for u in st.get("device_usage") or []:
            for op, h in (u.get("op_latency") or {}).items():
                out[(d, "op", u.get("device"), op)] = h
    return out


def _percentile(counts: list[float], bounds: list[float], q: float) -> str:
    total = sum(counts)
    if total <= 0:
        return "-"
    acc = 0.0
    for i, c in enumerate(counts):
        acc += c
        if acc >= q * total:
            return _seconds(bounds[i]) if i < len(bounds) else f">{_seconds(bounds[-1])}"
    return "-"


def _seconds(s: float) -> str:
    return f"{s * 1e6:.0f}us" if s < 1e-3 else f"{s * 1e3:.1f}ms" if s < 1 else f"{s:.1f}s"


def _rate(now: float, before: float | None, dt: float) -> float | None:
    return None if before is None or dt <= 0 else max(0.0, (now - before) / dt)


def render(frame: Frame, prev: Frame | None, interval: float) -> str:
    """One screen of text."""
    dt = frame.at - prev.at if prev is not None else 0.0
    old = _index(prev)
    daemons = {r.host.daemon_key(): r for r in frame.reports}.values()
    up = sum(1 for r in daemons if r.error is None)
    lines = [f"pyvgpu top - {time.strftime('%H:%M:%S')} - {up} of {len(daemons)} daemon(s) answering, "
             f"every {interval:g} s" + ("" if prev is not None else " (rates from the next refresh)")]
    gpu_rows = [("HOST", "GPU", "NAME", "MEMORY USED", "BUSY", "SLOWDOWN", "SESSIONS", "LEASE")]
    sess_rows = [("SESSION", "HOST/GPU", "CLIENT", "PID", "WEIGHT", "MEMORY USED/LIMIT", "DEVICE%", "OPS/S",
                  "HTOD/S", "DTOH/S")]
    op_rows = [("HOST/GPU", "OP", "COUNT/S" if prev is not None else "COUNT", "P50", "P99")]
    errors = []
    for rep in daemons:
        if rep.error is not None:
            errors.append(f"{rep.host.daemon}: {rep.error}")
            continue
        st = rep.status or {}
        d = rep.host.daemon_key()
        where = str(rep.host.daemon)
        bounds = [float(b) for b in st.get("latency_buckets") or []]
        for u in st.get("device_usage") or []:
            r = u.get("device")
            slow = u.get("slowdown")
            devs = st.get("devices") or []
            name = devs[r].get("name", "?") if isinstance(r, int) and r < len(devs) else "?"
            gpu_rows.append((where, str(r), str(name),
                             f"{format_bytes(int(u.get('memory_used', 0)))} / "
                             f"{format_bytes(int(u.get('memory_total', 0)))}",
                             f"{float(u.get('busy_ratio', 0.0)):.2f}",
                             f"{slow:.2f}x" if isinstance(slow, (int, float)) else "-",
                             f"{u.get('active_sessions', 0)}/{u.get('sessions', 0)}",
                             leasing.summary(st, r, 40) if isinstance(r, int) else "-"))
            ops = []
            for op, h in (u.get("op_latency") or {}).items():
                counts = list(h.get("counts") or [])
                before = old.get((d, "op", r, op))
                if before is not None:
                    counts = [a - b for a, b in zip(counts, before.get("counts") or [])]
                n = sum(counts)
                if n > 0:
                    ops.append((n, op, counts))
            for n, op, counts in sorted(ops, reverse=True)[:TOP_OPS]:
                shown = f"{n / dt:.0f}" if prev is not None and dt > 0 else f"{n:.0f}"
                op_rows.append((f"{where}/{r}", op, shown, _percentile(counts, bounds, 0.5),
                                _percentile(counts, bounds, 0.99)))
        for s in st.get("sessions") or []:
            if s.get("self"):
                continue
            for dev in s.get("devices") or []:
                before = old.get((d, "s", s.get("id"), dev.get("device")), {})
                limit = dev.get("memory_limit")
                share = _rate(dev.get("device_seconds", 0.0), before.get("device_seconds"), dt)
                ops = _rate(dev.get("ops", 0), before.get("ops"), dt)
                htod = _rate(dev.get("bytes_htod", 0), before.get("bytes_htod"), dt)
                dtoh = _rate(dev.get("bytes_dtoh", 0), before.get("bytes_dtoh"), dt)
                sess_rows.append((
                    str(s.get("id")), f"{where}/{dev.get('device')}",
                    str(s.get("hostname") or s.get("peer") or "?"), str(s.get("pid") or "?"),
                    f"{float(s.get('weight', 1.0)):g}",
                    f"{format_bytes(int(dev.get('memory_used', 0)))} / "
                    + (format_bytes(int(limit)) if isinstance(limit, int) else "-"),
                    f"{100 * share:.0f}%" if share is not None else "-",
                    f"{ops:.0f}" if ops is not None else str(dev.get("ops", 0)),
                    f"{format_bytes(int(htod))}" if htod is not None else "-",
                    f"{format_bytes(int(dtoh))}" if dtoh is not None else "-"))
    lines += ["", *_table(gpu_rows)]
    lines += ["", *(_table(sess_rows) if len(sess_rows) > 1 else ["no sessions"])]
    if len(op_rows) > 1:
        lines += ["", *_table(op_rows)]
    lines += [f"error: {e}" for e in errors]
    return "\n".join(lines)


def poll(entries: list[Host], timeout: float) -> Frame:
    reports = hostmap.query_daemons(entries, config.load_token(), timeout, status=True)
    return Frame(time.perf_counter(), reports)


def run(entries: list[Host], interval: float, iterations: int, out: TextIO = sys.stdout, clear: bool = False,
        timeout: float = 5.0) -> int:
    """Refresh every `interval` seconds, `iterations` times (0: until Ctrl-C). → 1 when a daemon did not answer
    at the last refresh, else 0."""
    prev: Frame | None = None
    count = 0
    failed = False
    try:
        while True:
            started = time.monotonic()
            frame = poll(entries, timeout)
            failed = any(r.error is not None for r in frame.reports)
            text = render(frame, prev, interval)
            out.write((CLEAR if clear else ("\n" if count else "")) + text + "\n")
            out.flush()
            prev = frame
            count += 1
            if iterations and count >= iterations:
                break
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    return 1 if failed else 0
