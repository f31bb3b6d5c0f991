"""Interference-aware placement: which N GPUs of the pool a program should get (`pyvgpu run -n N`, `auto`).

Each daemon reports per device (its status' device_usage, kept by daemon/pyvgpu_daemon/scheduler.py): the busy
ratio over the last 10 s, the sessions active there, the slowdown those sessions' own device work saw while sharing
the device compared with running alone (None when nothing was shared), and the memory held. From that, for a new
program on GPU g (the model is deliberately simple, so that `--explain` can show every number it used):

    n = active sessions on g, b = its busy ratio, S = its measured sharing slowdown
    slowdown of the program   P = 1                                  if n == 0 or b == 0 (an idle GPU)
                                  max(1 + b*n, S*(n+1)/n)            otherwise
    slowdown it adds to the residents   R = b * S, with S = 1 + b*(n-1) when nothing was measured
    score = (P - 1) + R        (lower is better)

Under fair sharing a program that keeps the device busy gets 1/(n+1) of a device that n busy residents share, hence
1 + b*n; where the residents measurably slow each other down more than their number says (long kernels, large
copies), one more co-runner scales what they see, hence S*(n+1)/n. Each resident loses about 1/n of its share more:
summed over the n of them, about b times their slowdown. A GPU whose free memory (and per-session limit) is below the
program's request is never chosen. Ties go to more free memory, then to host-map order.

With leases (`pyvgpu run -n`, pyvgpu/leasing.py), a GPU is a candidate only while it may be leased as asked: for an
exclusive lease it must be entirely free (no lease, no session), for a share of f, f of it must not be shared out yet
(`lease_free` from its daemon). The ranking then says which of the free GPUs to ask for first; the daemons grant them
atomically.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyvgpu.hostmap import Host, format_bytes


@dataclass(frozen=True)
class Candidate:
    host: Host                    # the daemon (no device selection)
    ordinal: int
    order: int                    # position in the pool (host map order, then ordinal): the last tie-break
    name: str
    total: int                    # bytes
    free: int                     # bytes not held by sessions
    session_limit: int            # the most one session may hold there (operator's --session-memory)
    busy: float                   # busy ratio over the last 10 s
    active: int                   # sessions that ran work there in the last 10 s
    sessions: int
    slowdown: float | None        # measured sharing slowdown; None: nothing shared recently
    lease_free: float = 1.0       # what of it may still be shared out by leases (0 under an exclusive lease)
    leases: int = 0               # leases held on it
    unleased: int = 0             # sessions using it without a lease

    @property
    def label(self) -> str:
        return f"{self.host}/{self.ordinal}"


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    fits: bool
    predicted: float              # P: the program's predicted slowdown
    inflicted: float              # R: the slowdown it adds to the residents, summed
    rank: int | None = None       # 1.. for chosen GPUs

    @property
    def score(self) -> float:
        return (self.predicted - 1.0) + self.inflicted


def predict(c: Candidate) -> tuple[float, float]:
    """(the program's predicted slowdown on c, the slowdown it adds to c's residents) — see the module docstring."""
    n, b = c.active, c.busy
    if n == 0 or b <= 0.0:
        return 1.0, 0.0
    s_measured = c.slowdown if c.slowdown is not None and c.slowdown >= 1.0 else None
    own = 1.0 + b * n
    if s_measured is not None:
        own = max(own, s_measured * (n + 1) / n)
    residents = b * (s_measured if s_measured is not None else 1.0 + b * (n - 1))
    return own, residents


def leasable(c: Candidate, share: float | None) -> bool:
    """Whether a lease may be had on c now: exclusive (share None) or a share of `share`."""
    if share is None:
        return c.leases == 0 and c.unleased == 0 and c.sessions == 0
    return c.lease_free >= share - 1e-9


def rank(candidates: list[Candidate], n: int, memory: int = 0,
         lease: tuple[float | None] | None = None) -> tuple[list[Choice], list[Choice]]:
    """(the n chosen GPUs best first, every candidate's Choice in pool order). Fewer than n chosen when fewer fit.
    lease: (share,) when the GPUs are to be leased (share None: exclusively), None when not."""
    choices = []
    for c in candidates:
        own, residents = predict(c)
        fits = c.free >= memory and c.session_limit >= memory and (lease is None or leasable(c, lease[0]))
        choices.append(Choice(c, fits, own, residents))
    eligible = sorted((ch for ch in choices if ch.fits),
                      key=lambda ch: (round(ch.score, 6), -ch.candidate.free, ch.candidate.order))
    chosen = [Choice(ch.candidate, True, ch.predicted, ch.inflicted, i + 1) for i, ch in enumerate(eligible[:n])]
    by_label = {ch.candidate.label: ch for ch in chosen}
    return chosen, [by_label.get(ch.candidate.label, ch) for ch in choices]


def explain(ch: Choice, memory: int = 0) -> str:
    """One line: what was measured on the GPU, what the model predicts, and the decision."""
    c = ch.candidate
    measured = f"{c.slowdown:.2f}x" if c.slowdown is not None else "none"
    head = (f"{c.label} ({c.name}): busy {c.busy:.2f}, {c.active} active of {c.sessions} session(s), "
            f"measured sharing slowdown {measured}, free {format_bytes(c.free)}")
    if not ch.fits:
        if c.free >= memory and c.session_limit >= memory:
            held = f"{c.leases} lease(s) hold it" if c.leases else "programs without a lease use it"
            return f"{head}: not free for the lease asked ({held})"
        short = "free memory" if c.free < memory else "the per-session limit"
        return f"{head}: not eligible ({short} below the {format_bytes(memory)} asked)"
    verdict = f"chosen as GPU{ch.rank - 1}" if ch.rank is not None else "not chosen"
    return (f"{head} -> predicted {ch.predicted:.2f}x for this program, +{ch.inflicted:.2f} for the residents, "
            f"score {ch.score:.2f}: {verdict}")


def candidates_from_status(host: Host, status: dict[str, Any], start: int = 0,
                           only: int | None = None) -> list[Candidate]:
    """The devices of one daemon's status (`only`: just that ordinal) as candidates numbered from `start`."""
    devices = status.get("devices") or []
    usage = {u.get("device"): u for u in status.get("device_usage") or [] if isinstance(u, dict)}
    out = []
    for r, dev in enumerate(devices):
        if only is not None and r != only:
            continue
        u = usage.get(r, {})
        total = int(dev.get("total_mem", 0) or 0)
        free = int(u.get("memory_free", total - int(u.get("memory", 0) or 0)))
        slowdown = u.get("slowdown")
        out.append(Candidate(host=host.daemon, ordinal=r, order=start + len(out), name=str(dev.get("name", "?")),
                             total=total, free=free, session_limit=int(u.get("session_memory_limit", total) or 0),
                             busy=float(u.get("busy_ratio", 0.0) or 0.0), active=int(u.get("active_sessions", 0)),
                             sessions=int(u.get("sessions", 0)),
                             slowdown=float(slowdown) if isinstance(slowdown, (int, float)) else None,
                             lease_free=float(u.get("lease_free", 1.0)), leases=int(u.get("leases", 0)),
                             unleased=int(u.get("unleased_sessions", 0))))
    return out
