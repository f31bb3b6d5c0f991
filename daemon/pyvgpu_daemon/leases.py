"""Leases: a GPU of this daemon, or a share of one, held for a holder until a deadline.

The daemon that owns a GPU is the one party that can hand it out atomically: every grant, renewal, release and expiry
runs on the event loop, so two requests that arrive at the same moment never get the same exclusive GPU.

- A lease is exclusive (the whole GPU) or a share (a fraction f of it: its sessions get a memory quota, by default f of
  the GPU's memory, and a weight on the GPU's time, by default f). An exclusive lease needs the GPU entirely free: no
  lease and no session on it. A share needs f of it not yet shared out (and room for its quota) and no exclusive
  lease; sessions without a lease already there may stay (the shares' weights and quotas apply beside them), new
  ones are refused.
- A request asks for `count` GPUs of this daemon, all or none, chosen in the order of preference it gives. One that
  cannot be served at once may wait in line up to its `wait`: waiting requests are served first come first served
  (one that does not fit yet lets a later one that fits go ahead) whenever a lease ends or a session leaves a GPU.
- A lease lives `ttl` seconds unless its holder renews it (each renewal extends it by its ttl); one nobody renews
  expires on its own, so a lease whose holder vanished (a killed `pyvgpu run`, a Slurm job's lost node) comes back.
- Sessions present lease ids in their hello (HELLO_LEASES). On a leased GPU only the sessions of its leases may work
  (admit(): any other gets cudaErrorDevicesUnavailable with the reason, as CUDA's exclusive compute mode answers); a
  share's quota and weight apply to them. When a lease ends (released, expired) its sessions are ended, with a notice
  that says why: a GPU is never used by two holders at once.
- Durability (--lease-state PATH): the leases are written there (atomically, at every grant and end) and read back
  at start, each with one ttl to be renewed, so a restarted daemon keeps the GPUs of running jobs leased to them (the
  scheduler still counts them as taken) instead of handing them to the next comer. Renewals are not written: they
  only move deadlines, which a restart resets anyway. Without the option the leases live in memory.

Bounds: a share is at least MIN_LEASE_FRACTION of a GPU (so at most 1/MIN_LEASE_FRACTION leases per GPU), a ttl at
most MAX_LEASE_TTL_S, a wait at most MAX_LEASE_WAIT_S, one waiting request per session, holder and job texts
MAX_LEASE_TEXT characters, MAX_LEASE_IDS ids per request or hello.
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from pyvgpu import config
from pyvgpu.protocol import (ENV_LEASES, LEASE_COUNT, LEASE_DEVICE, LEASE_DEVICES, LEASE_EXCLUSIVE, LEASE_EXPIRES_IN,
                             LEASE_FRACTION, LEASE_GRANTED, LEASE_HOLDER, LEASE_ID, LEASE_IDS, LEASE_JOB,
                             LEASE_MEMORY, LEASE_SESSIONS, LEASE_TAG, LEASE_TTL, LEASE_WAIT, LEASE_WEIGHT,
                             MAX_LEASE_IDS, MAX_LEASE_TEXT, MAX_LEASE_TTL_S, MAX_LEASE_WAIT_S, MIN_LEASE_FRACTION)

log = logging.getLogger("pyvgpu.daemon")

ID_BYTES = 16
EPSILON = 1e-9                       # shares are floats: 4 x 0.25 fills a GPU


class LeaseRequestError(ValueError):
    """A malformed lease request (answered with cudaErrorInvalidValue and this text)."""


@dataclass
class LeaseConfig:
    state_path: str | None = None    # --lease-state: where leases survive a restart; None: in memory only


@dataclass
class Lease:
    id: str
    device: int
    holder: str
    job: str
    exclusive: bool
    fraction: float                  # 1.0 for an exclusive lease
    memory: int | None               # quota of each of its sessions on the device (None: the daemon's own limits)
    weight: float | None             # weight of its sessions (None: what their hello asks)
    ttl: float
    granted: float                   # Unix time
    deadline: float                  # loop time
    sessions: set[int] = field(default_factory=set)

    @property
    def tag(self) -> str:
        return self.id[:8]

    def describe(self) -> str:
        what = "exclusively" if self.exclusive else f"as a {self.fraction:.2f} share"
        return f"lease {self.tag} ({self.holder or 'unnamed holder'}) holds GPU {self.device} {what}"

    def view(self, now: float, with_id: bool) -> dict[str, Any]:
        out = {LEASE_TAG: self.tag, LEASE_DEVICE: self.device, LEASE_HOLDER: self.holder, LEASE_JOB: self.job,
               LEASE_EXCLUSIVE: self.exclusive, LEASE_FRACTION: self.fraction, LEASE_MEMORY: self.memory,
               LEASE_WEIGHT: self.weight, LEASE_TTL: self.ttl, LEASE_EXPIRES_IN: max(0.0, self.deadline - now),
               LEASE_GRANTED: self.granted, LEASE_SESSIONS: len(self.sessions)}
        if with_id:
            out[LEASE_ID] = self.id
        return out


@dataclass
class LeaseRequest:
    count: int
    devices: list[int]               # candidates, best first
    fraction: float | None           # None: exclusive
    memory: int | None
    weight: float | None
    ttl: float
    wait: float
    holder: str
    job: str


def _number(m: dict[Any, Any], key: str, default: float | None, low: float, high: float) -> float | None:
    v = m.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not low <= v <= high:
        raise LeaseRequestError(f"{key} {v!r:.40}: expected a number from {low:g} to {high:g}")
    return float(v)


def _text(m: dict[Any, Any], key: str) -> str:
    v = m.get(key, "")
    if not isinstance(v, str):
        raise LeaseRequestError(f"{key} {v!r:.40}: expected a string")
    return v[:MAX_LEASE_TEXT]


def parse_ids(m: dict[Any, Any]) -> list[str]:
    ids = m.get(LEASE_IDS)
    if not isinstance(ids, list) or len(ids) > MAX_LEASE_IDS or not all(isinstance(i, str) for i in ids):
        raise LeaseRequestError(f"{LEASE_IDS}: expected a list of at most {MAX_LEASE_IDS} lease ids")
    return ids


def parse_request(m: Any, ndevices: int, totals: list[int], clamp_weight: Callable[[float], float]) -> LeaseRequest:
    """A LEASE_ACQUIRE request map, every field checked; LeaseRequestError naming the bad one."""
    if not isinstance(m, dict):
        raise LeaseRequestError("the request is not a map")
    count = m.get(LEASE_COUNT, 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= max(ndevices, 1):
        raise LeaseRequestError(f"{LEASE_COUNT} {count!r:.40}: this daemon has {ndevices} GPU(s)")
    devices = m.get(LEASE_DEVICES)
    if devices is None:
        devices = list(range(ndevices))
    elif not isinstance(devices, list) or len(devices) > ndevices or \
            not all(type(d) is int and 0 <= d < ndevices for d in devices) or len(set(devices)) != len(devices):
        raise LeaseRequestError(f"{LEASE_DEVICES} {devices!r:.60}: expected distinct ordinals below {ndevices}")
    fraction = _number(m, LEASE_FRACTION, None, MIN_LEASE_FRACTION, 1.0)
    memory = m.get(LEASE_MEMORY)
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0):
        raise LeaseRequestError(f"{LEASE_MEMORY} {memory!r:.40}: expected a positive number of bytes")
    weight = _number(m, LEASE_WEIGHT, None, 1e-6, 1e6)
    if fraction is None and (memory is not None or weight is not None):
        raise LeaseRequestError(f"{LEASE_MEMORY} and {LEASE_WEIGHT} go with a share ({LEASE_FRACTION})")
    if fraction is not None:
        if memory is None:
            memory = min(int(fraction * totals[d]) for d in devices) if devices else 0
        weight = clamp_weight(weight if weight is not None else fraction)
    ttl = _number(m, LEASE_TTL, 30.0, 0.1, MAX_LEASE_TTL_S)
    wait = _number(m, LEASE_WAIT, 0.0, 0.0, MAX_LEASE_WAIT_S)
    assert ttl is not None and wait is not None
    return LeaseRequest(count, devices, fraction, memory, weight, ttl, wait, _text(m, LEASE_HOLDER), _text(m, LEASE_JOB))


@dataclass
class _Waiter:
    request: LeaseRequest
    session: int
    future: asyncio.Future[list[Lease]]


class LeaseTable:
    """Every lease of the daemon. Used on the event loop only.

    `sessions()` lists the live sessions (each with `.id`, `.devices` and `.leases`: device -> Lease);
    `end_session(session, why)` ends one whose lease is gone."""

    def __init__(self, totals: list[int], config: LeaseConfig, sessions: Callable[[], Iterable[Any]],
                 end_session: Callable[[Any, str], None], clamp_weight: Callable[[float], float]) -> None:
        self.totals = totals
        self.config = config
        self._sessions = sessions
        self._end_session = end_session
        self.clamp_weight = clamp_weight
        self.leases: dict[str, Lease] = {}
        self._waiters: list[_Waiter] = []
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.counts = {"granted": 0, "renewed": 0, "released": 0, "expired": 0}
        self._tasks: set[asyncio.Task[None]] = set()     # waiting requests (held: the loop keeps only weak refs)

    @property
    def ndevices(self) -> int:
        return len(self.totals)

    # ------------------------------------------------------------------ start / persistence
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        path = self.config.state_path
        if path is None or not Path(path).exists():
            return
        try:
            saved = json.loads(Path(path).read_text())
            assert isinstance(saved, list)
        except (OSError, ValueError, AssertionError) as exc:
            log.error("lease state %s unreadable (%s): starting without leases", path, exc)
            return
        now = loop.time()
        for item in saved:
            try:
                lease = Lease(str(item["id"]), int(item["device"]), str(item["holder"]), str(item["job"]),
                              bool(item["exclusive"]), float(item["fraction"]), item["memory"], item["weight"],
                              float(item["ttl"]), float(item["granted"]), now + float(item["ttl"]))
            except (KeyError, TypeError, ValueError):
                log.error("lease state %s: skipping a malformed entry", path)
                continue
            if not 0 <= lease.device < self.ndevices or \
                    not self._fits(lease.device, lease.fraction, lease.exclusive, lease.memory):
                log.warning("lease state: %s no longer fits this daemon's GPUs; dropped", lease.describe())
                continue
            self.leases[lease.id] = lease
            log.info("lease state: %s restored; its holder has %.0f s to renew it", lease.describe(), lease.ttl)
        self._arm()

    def _save(self) -> None:
        path = self.config.state_path
        if path is None:
            return
        items = [{"id": x.id, "device": x.device, "holder": x.holder, "job": x.job, "exclusive": x.exclusive,
                  "fraction": x.fraction, "memory": x.memory, "weight": x.weight, "ttl": x.ttl, "granted": x.granted}
                 for x in self.leases.values()]
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True, mode=config.PRIVATE_DIR)
            # the ids are capabilities: only the daemon's user may read them
            config.write_file(Path(path), json.dumps(items).encode(), config.PRIVATE_FILE)
        except OSError as exc:
            log.error("cannot write the lease state %s: %s (leases are kept in memory)", path, exc)

    # ------------------------------------------------------------------ capacity
    def on_device(self, device: int) -> list[Lease]:
        return [x for x in self.leases.values() if x.device == device]

    def unleased_sessions(self, device: int) -> int:
        return sum(1 for s in self._sessions() if device in s.devices and device not in s.leases)

    def free_fraction(self, device: int) -> float:
        """What of the GPU may still be shared out: 0 under an exclusive lease, else 1 minus its shares."""
        held = self.on_device(device)
        if any(x.exclusive for x in held):
            return 0.0
        return max(0.0, 1.0 - sum(x.fraction for x in held))

    def _fits(self, device: int, fraction: float, exclusive: bool, memory: int | None = None) -> bool:
        held = self.on_device(device)
        if exclusive:
            return not held and not self.unleased_sessions(device)
        quotas = sum(x.memory or 0 for x in held)
        return self.free_fraction(device) >= fraction - EPSILON and quotas + (memory or 0) <= self.totals[device]

    # ------------------------------------------------------------------ grant
    def try_grant(self, req: LeaseRequest) -> list[Lease] | None:
        """The request's GPUs, leased now, or None (nothing changes) when fewer than `count` are free."""
        exclusive = req.fraction is None
        fraction = 1.0 if exclusive else float(req.fraction or 0)
        chosen = [d for d in req.devices if self._fits(d, fraction, exclusive, req.memory)][:req.count]
        if len(chosen) < req.count:
            return None
        assert self._loop is not None
        now, wall = self._loop.time(), time.time()
        got = []
        for d in chosen:
            lease = Lease(secrets.token_hex(ID_BYTES), d, req.holder, req.job, exclusive, fraction, req.memory,
                          req.weight, req.ttl, wall, now + req.ttl)
            self.leases[lease.id] = lease
            got.append(lease)
            log.info("%s for %.0f s%s", lease.describe(), req.ttl, f" (job {req.job})" if req.job else "")
        self.counts["granted"] += len(got)
        self._save()
        self._arm()
        return got

    async def acquire(self, req: LeaseRequest, session: int) -> list[Lease] | None:
        """try_grant, else wait in line up to req.wait seconds (None when nothing was granted in time)."""
        got = self.try_grant(req)
        if got is not None or req.wait <= 0:
            return got
        if any(w.session == session for w in self._waiters):
            raise LeaseRequestError("this session already waits for a lease (one waiting request per session)")
        assert self._loop is not None
        waiter = _Waiter(req, session, self._loop.create_future())
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), req.wait)
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()      # granted in the same instant the wait ran out
            return None
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def serve_waiters(self) -> None:
        """Capacity came back: grant waiting requests in arrival order, each that fits now."""
        for w in list(self._waiters):
            if w.future.done():
                self._waiters.remove(w)
                continue
            got = self.try_grant(w.request)
            if got is not None:
                self._waiters.remove(w)
                w.future.set_result(got)

    def spawn(self, coro: Any) -> None:
        """Run a waiting request's coroutine as a task of its own."""
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ renew / end
    def renew(self, ids: list[str], ttl: float | None = None) -> tuple[list[str], list[str]]:
        assert self._loop is not None
        now = self._loop.time()
        renewed, unknown = [], []
        for i in ids:
            lease = self.leases.get(i)
            if lease is None:
                unknown.append(i)
                continue
            lease.deadline = now + (lease.ttl if ttl is None else min(ttl, MAX_LEASE_TTL_S))
            renewed.append(i)
        self.counts["renewed"] += len(renewed)
        self._arm()
        return renewed, unknown

    def release(self, ids: list[str] | None = None, job: str | None = None) -> list[str]:
        """End the leases named by id, or every lease of `job`. → the ids ended."""
        gone = [x for x in self.leases.values() if (ids is not None and x.id in ids) or (job and x.job == job)]
        for lease in gone:
            self._end(lease, "released by its holder")
        self.counts["released"] += len(gone)
        if gone:
            self._after_change()
        return [x.id for x in gone]

    def _end(self, lease: Lease, why: str) -> None:
        self.leases.pop(lease.id, None)
        log.info("%s: %s", lease.describe().replace(" holds ", " held "), why)
        if not lease.sessions:
            return
        for s in list(self._sessions()):
            if s.id in lease.sessions and s.leases.get(lease.device) is lease:
                del s.leases[lease.device]
                self._end_session(s, f"{lease.describe()}, which ended ({why})")

    def _after_change(self) -> None:
        self._save()
        self._arm()
        self.serve_waiters()

    def _arm(self) -> None:
        """One timer, at the earliest deadline (no polling)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.leases and self._loop is not None:
            self._timer = self._loop.call_at(min(x.deadline for x in self.leases.values()), self._expire_due)

    def _expire_due(self) -> None:
        self._timer = None
        assert self._loop is not None
        now = self._loop.time()
        due = [x for x in self.leases.values() if x.deadline <= now]
        for lease in due:
            self._end(lease, f"expired: not renewed within {lease.ttl:g} s")
        self.counts["expired"] += len(due)
        self._after_change()

    # ------------------------------------------------------------------ sessions
    def bind_hello(self, session: Any, text: Any) -> str | None:
        """The hello's HELLO_LEASES (ids, comma-separated): this daemon's among them become the session's leases
        (others are other daemons'). → an error message for a malformed value."""
        if text is None:
            return None
        if not isinstance(text, str) or len(text) > MAX_LEASE_IDS * (2 * ID_BYTES + 1):
            return f"bad leases {text!r:.40}: expected lease ids separated by commas"
        for i in filter(None, (t.strip() for t in text.split(","))):
            lease = self.leases.get(i)
            if lease is not None and lease.device not in session.leases:
                session.leases[lease.device] = lease
                lease.sessions.add(session.id)
        return None

    def admit(self, session: Any, device: int) -> str | None:
        """Whether the session may start using the device: None, or why not (it is leased to someone else)."""
        held = self.on_device(device)
        mine = session.leases.get(device)
        if mine is not None and self.leases.get(mine.id) is not mine:
            del session.leases[device]           # ended while the session was being set up
            mine = None
        if not held or mine is not None:
            return None
        whom = "; ".join(x.describe() for x in held)
        return (f"{whom}: a program uses a leased GPU only with its lease ({ENV_LEASES}, which `pyvgpu run -n` "
                f"and Slurm jobs that ask for pooled GPUs set)")

    def session_ended(self, session: Any) -> None:
        """The session is ending: its waiting request is withdrawn, it no longer uses its leases."""
        for lease in session.leases.values():
            lease.sessions.discard(session.id)
        for w in self._waiters:
            if w.session == session.id and not w.future.done():
                w.future.cancel()

    # ------------------------------------------------------------------ views
    def view(self, with_ids: bool = False, job: str | None = None) -> list[dict[str, Any]]:
        now = self._loop.time() if self._loop is not None else 0.0
        return [x.view(now, with_ids) for x in sorted(self.leases.values(), key=lambda x: (x.device, x.granted))
                if job is None or x.job == job]

    def device_figures(self, device: int) -> dict[str, Any]:
        held = self.on_device(device)
        return {"leases": len(held), "leased_fraction": min(1.0, sum(x.fraction for x in held)),
                "lease_exclusive": any(x.exclusive for x in held), "lease_free": self.free_fraction(device),
                "unleased_sessions": self.unleased_sessions(device)}

    def waiting(self) -> int:
        return len(self._waiters)
