"""Taking, keeping and giving back leases on the pool's GPUs: the client side of the LEASE_* ops (the daemon side is
daemon/pyvgpu_daemon/leases.py). Used by `pyvgpu run -n` (pyvgpu/cli.py) and by the Slurm hooks (pyvgpu/slurm.py).

Taking N GPUs of a pool of daemons (`acquire`), one round:
  1. every daemon's status says which of its GPUs may be leased now (`lease_free`) and how loaded they are;
  2. placement ranks the free GPUs (pyvgpu/placement.py: least predicted slowdown first);
  3. each daemon, best first, is asked for as many of the N as it has free, naming all of its free GPUs in ranked
     order: the daemon grants atomically, so clients racing for the same GPU each get a different one of the list,
     or a refusal;
  4. fewer than N granted: the ones granted are given back (no client holds part of a request while it waits, so
     two requests never wait for each other's GPUs).
Waiting (wait > 0): a request one daemon could serve alone waits in that daemon's line (LEASE_ACQUIRE with a wait,
served first come first served as GPUs come back), rotating over such daemons a slice at a time; one that needs GPUs
of several daemons retries rounds with a growing pause. Every wait for a daemon is bounded by `timeout`.

Keeping: a Keeper thread renews the leases every ttl/3 while the program (or the Slurm job) lives; a lease reported
unknown was lost (expired while unreachable, or released by an operator): said once, on stderr.
"""
from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pyvgpu import hostmap, placement
from pyvgpu.hostmap import Host, format_bytes
from pyvgpu.protocol import (ERROR_CODES, LEASE_COUNT, LEASE_DEVICE, LEASE_DEVICES, LEASE_EXCLUSIVE, LEASE_FRACTION,
                             LEASE_HOLDER, LEASE_ID, LEASE_IDS, LEASE_JOB, LEASE_LEASES, LEASE_MEMORY,
                             LEASE_RELEASED, LEASE_TTL, LEASE_UNKNOWN, LEASE_WAIT, LEASE_WEIGHT, MAX_LEASE_WAIT_S,
                             STATUS_LEASES)

ERR_UNAVAILABLE = ERROR_CODES["cudaErrorDevicesUnavailable"]
WAIT_SLICE_S = 5.0                   # a wait in one daemon's line, before looking at the whole pool again
RETRY_S = (0.2, 2.0)                 # pause between rounds of a request spanning daemons: first, largest


class LeaseError(Exception):
    """No lease: a malformed request, no daemon reachable, or (not waiting) no GPU free; the message says which."""


@dataclass(frozen=True)
class Terms:
    """What each lease of a request is."""
    holder: str                      # for people: `pyvgpu run (pid 12 on node3): ./app`, `slurm job 7 (alice)`
    job: str = ""                    # to find or release them all: `slurm:cluster:7`
    ttl: float = 30.0
    fraction: float | None = None    # None: exclusive GPUs; f: a share of f of each
    memory: int | None = None        # a share's quota per session (default: f of the GPU's memory)
    weight: float | None = None      # a share's weight (default f)

    def request(self, count: int, devices: list[int], wait: float) -> dict[str, Any]:
        req: dict[str, Any] = {LEASE_COUNT: count, LEASE_DEVICES: devices, LEASE_TTL: self.ttl, LEASE_WAIT: wait,
                               LEASE_HOLDER: self.holder, LEASE_JOB: self.job}
        if self.fraction is not None:
            req[LEASE_FRACTION] = self.fraction
            if self.memory is not None:
                req[LEASE_MEMORY] = self.memory
            if self.weight is not None:
                req[LEASE_WEIGHT] = self.weight
        return req


@dataclass
class Held:
    """Leases granted to one request: (daemon, lease map with its id), best GPU first."""
    leases: list[tuple[Host, dict[str, Any]]] = field(default_factory=list)

    def hosts(self) -> list[Host]:
        """As host map entries (`host:port/ordinal`), the program's GPU0 first."""
        return [Host(d.host, d.port, int(x[LEASE_DEVICE])) for d, x in self.leases]

    def ids(self) -> list[str]:
        return [str(x[LEASE_ID]) for _, x in self.leases]

    def by_daemon(self) -> dict[Host, list[str]]:
        out: dict[Host, list[str]] = {}
        for d, x in self.leases:
            out.setdefault(d, []).append(str(x[LEASE_ID]))
        return out

    def __len__(self) -> int:
        return len(self.leases)


Connect = Callable[..., Any]


def _client(connect: Connect, daemon: Host, token: bytes | None, timeout: float) -> Any:
    return connect(daemon.host, daemon.port, token=token, timeout=timeout)


def _call(connect: Connect, daemon: Host, token: bytes | None, timeout: float, op: str,
          request: dict[str, Any]) -> tuple[int, Any]:
    """One LEASE_* request on a connection of its own; → (err, result)."""
    client = _client(connect, daemon, token, timeout)
    try:
        err, result, _ = client.call(op, request)
        return err, result
    finally:
        client.close()


def _grant(connect: Connect, daemon: Host, token: bytes | None, timeout: float, terms: Terms, count: int,
           devices: list[int], wait: float) -> list[dict[str, Any]] | None:
    """Ask one daemon for `count` of `devices`; → the leases, or None when it had not that many free (in time).
    LeaseError for a refusal that asking again cannot cure."""
    from pyvgpu.client import ClientError
    try:
        err, result = _call(connect, daemon, token, timeout + wait, "LEASE_ACQUIRE",
                            terms.request(count, devices, wait))
    except ClientError as exc:                   # refused the session or the op (not a network failure)
        raise LeaseError(f"{daemon}: {exc}") from None
    if err == 0:
        return list(result.get(LEASE_LEASES) or [])
    if err == ERR_UNAVAILABLE:
        return None
    raise LeaseError(f"{daemon}: {result if isinstance(result, str) else f'error {err}'}")


def release(held: Held, token: bytes | None, timeout: float = 5.0, connect: Connect | None = None) -> list[str]:
    """Give the leases back; → one line per daemon that could not be told (its leases then expire by themselves)."""
    connect = connect or _default_connect()
    problems = []
    for daemon, ids in held.by_daemon().items():
        try:
            err, result = _call(connect, daemon, token, timeout, "LEASE_RELEASE", {LEASE_IDS: ids})
            if err:
                problems.append(f"{daemon}: release refused ({result})")
        except Exception as exc:  # noqa: BLE001 - reported, the leases expire on their own
            problems.append(f"{daemon}: {hostmap.describe_error(exc)}")
    return problems


def _each(daemons: list[Host], op: str, request: dict[str, Any], token: bytes | None, timeout: float,
          connect: Connect | None) -> list[tuple[Host, int, Any]]:
    """One request to every distinct daemon, concurrently; → (daemon, err, result), with err -1 and the reason as
    result for a daemon that could not be asked."""
    import concurrent.futures
    connect = connect or _default_connect()
    distinct = list({d.daemon_key(): d.daemon for d in daemons if not d.is_auto}.values())

    def ask(daemon: Host) -> tuple[Host, int, Any]:
        try:
            return (daemon, *_call(connect, daemon, token, timeout, op, request))
        except Exception as exc:  # noqa: BLE001 - reported per daemon
            return daemon, -1, hostmap.describe_error(exc)

    if not distinct:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(distinct))) as pool:
        return list(pool.map(ask, distinct))


def release_job(daemons: list[Host], job: str, token: bytes | None, timeout: float = 5.0,
                connect: Connect | None = None) -> tuple[int, list[str]]:
    """Give back every lease of `job` on these daemons; → (how many were ended, problems)."""
    ended, problems = 0, []
    for daemon, err, result in _each(daemons, "LEASE_RELEASE", {LEASE_JOB: job}, token, timeout, connect):
        if err:
            problems.append(f"{daemon}: {result}")
        else:
            ended += len(result.get(LEASE_RELEASED) or [])
    return ended, problems


def find_job(daemons: list[Host], job: str, token: bytes | None, timeout: float = 5.0,
             connect: Connect | None = None) -> tuple[Held, list[str]]:
    """The leases `job` holds on these daemons (with their ids), and the daemons that could not be asked."""
    held, problems = Held(), []
    for daemon, err, result in _each(daemons, "LEASE_LIST", {LEASE_JOB: job}, token, timeout, connect):
        if err:
            problems.append(f"{daemon}: {result}")
        else:
            held.leases += [(daemon, x) for x in result.get(LEASE_LEASES) or []]
    return held, problems


def _default_connect() -> Connect:
    from pyvgpu.client import Client
    return Client.connect


# ---------------------------------------------------------------------------------------------- acquiring
@dataclass
class Round:
    """One look at the pool: every GPU's placement choice (in pool order) and what the daemons said."""
    every: list[placement.Choice]
    errors: list[str]
    devices: dict[Host, int]             # daemon -> its number of GPUs
    holders: dict[tuple[Host, int], list[str]] = field(default_factory=dict)   # (daemon, ordinal) -> lease holders


def survey(pool: list[Host], terms: Terms, memory: int, token: bytes | None, timeout: float,
           connect: Connect) -> Round:
    reports = hostmap.query_daemons(pool, token, timeout, connect, status=True)
    candidates: list[placement.Candidate] = []
    errors, devices, holders = [], {}, {}
    for r in reports:
        if r.error is not None:
            errors.append(f"{r.host}: {r.error}")
            continue
        devices[r.host.daemon] = len(r.devices or [])
        for x in (r.status or {}).get(STATUS_LEASES) or []:
            if isinstance(x, dict):
                holders.setdefault((r.host.daemon, x.get(LEASE_DEVICE)), []).append(str(x.get(LEASE_HOLDER) or "?"))
        candidates += placement.candidates_from_status(r.host, r.status or {"devices": r.devices},
                                                       len(candidates), only=r.host.device)
    _, every = placement.rank(candidates, len(candidates), memory, (terms.fraction,))
    return Round(every, errors, devices, holders)


def _ranked(every: list[placement.Choice]) -> list[placement.Choice]:
    return sorted((ch for ch in every if ch.fits),
                  key=lambda ch: (round(ch.score, 6), -ch.candidate.free, ch.candidate.order))


def try_round(rnd: Round, n: int, terms: Terms, token: bytes | None, timeout: float,
              connect: Connect) -> Held | None:
    """Ask the daemons for n free GPUs, best first; all n or None (what was granted is given back)."""
    free: dict[Host, list[int]] = {}
    for ch in _ranked(rnd.every):
        free.setdefault(ch.candidate.host, []).append(ch.candidate.ordinal)
    held = Held()
    for daemon, ordinals in free.items():
        k = min(n - len(held), len(ordinals))
        if k <= 0:
            break
        try:
            got = _grant(connect, daemon, token, timeout, terms, k, ordinals, 0.0)
        except LeaseError:
            release(held, token, timeout, connect)
            raise
        except Exception:  # noqa: BLE001 - gone since the survey: the next daemon
            continue
        held.leases += [(daemon, x) for x in got or []]
    if len(held) == n:
        rank = {(ch.candidate.host, ch.candidate.ordinal): i for i, ch in enumerate(_ranked(rnd.every))}
        held.leases.sort(key=lambda dx: rank.get((dx[0], int(dx[1][LEASE_DEVICE])), len(rank)))
        return held
    release(held, token, timeout, connect)
    return None


def describe_pool(rnd: Round, n: int, terms: Terms, memory: int) -> str:
    """Why a request cannot be served now: what holds the pool's GPUs."""
    busy = []
    for ch in rnd.every:
        c = ch.candidate
        if ch.fits:
            continue
        if not placement.leasable(c, terms.fraction) and c.free >= memory:
            whom = rnd.holders.get((c.host, c.ordinal))
            busy.append(f"{c.label} ({'leased to ' + ', '.join(whom) if whom else 'used without a lease'})")
        else:
            busy.append(f"{c.label} (too little memory)")
    what = "GPU(s)" if terms.fraction is None else f"share(s) of {terms.fraction:g} GPU"
    mem = f" with {format_bytes(memory)} free" if memory else ""
    free = sum(1 for ch in rnd.every if ch.fits)
    taken = " (taken by other requests since)" if free >= n else ""
    return (f"{n} {what}{mem} asked, {free} of the pool's {len(rnd.every)} GPU(s) free a moment ago{taken}"
            + (f"; taken: {', '.join(busy)}" if busy else "")
            + (f"; unreachable: {'; '.join(rnd.errors)}" if rnd.errors else ""))


def acquire(pool: list[Host], n: int, terms: Terms, *, memory: int = 0, wait: float | None = None,
            token: bytes | None = None, timeout: float = 5.0, connect: Connect | None = None,
            on_round: Callable[[Round], None] | None = None,
            on_wait: Callable[[str], None] | None = None) -> Held:
    """n leases on GPUs of the pool, best first (see the module docstring). wait: seconds to wait for them (None:
    as long as it takes, 0: not at all). on_round sees the first look at the pool (--explain); on_wait is told,
    once, why the request waits. LeaseError when there are none (in time)."""
    connect = connect or _default_connect()
    if not pool:
        raise LeaseError("the pool is empty: no daemons to lease GPUs from")
    deadline = None if wait is None else time.monotonic() + wait
    pause, turn, told = RETRY_S[0], random.randrange(1 << 16), False
    first = True
    while True:
        rnd = survey(pool, terms, memory, token, timeout, connect)
        if first and on_round is not None:
            on_round(rnd)
        first = False
        if not rnd.devices:
            raise LeaseError("no daemon of the pool answered: " + "; ".join(rnd.errors))
        got = try_round(rnd, n, terms, token, timeout, connect)
        if got is not None:
            return got
        left = None if deadline is None else deadline - time.monotonic()
        why = describe_pool(rnd, n, terms, memory)
        if left is not None and left <= 0:
            raise LeaseError(why)
        if not told and on_wait is not None:
            on_wait(why)
            told = True
        alone = [d for d, count in rnd.devices.items()
                 if len(_fitting(rnd.every, d, memory)) >= n]
        if alone:                                # wait in one daemon's line (rotating), served as GPUs come back
            daemon = alone[turn % len(alone)]
            turn += 1
            slice_s = min(WAIT_SLICE_S, MAX_LEASE_WAIT_S, left if left is not None else WAIT_SLICE_S)
            try:
                got_one = _grant(connect, daemon, token, timeout, terms, n, _fitting(rnd.every, daemon, memory),
                                 max(slice_s, 0.0))
            except LeaseError:
                raise                            # refused for good (a malformed request)
            except Exception:  # noqa: BLE001 - unreachable now: the next round looks at the pool again
                got_one = None
                time.sleep(min(pause, left if left is not None else pause))
            if got_one:
                return Held([(daemon, x) for x in got_one])
        else:                                    # spans daemons (or none could ever serve it alone): retry
            if not any(_fitting(rnd.every, d, memory) for d in rnd.devices):
                raise LeaseError(why + " (no GPU of the pool has enough memory)")
            time.sleep(min(pause * (0.5 + random.random()), left if left is not None else pause))
            pause = min(pause * 2, RETRY_S[1])


def _fitting(every: list[placement.Choice], daemon: Host, memory: int) -> list[int]:
    """The GPUs of one daemon big enough for the request, leased or not, in ranked order (what a wait names)."""
    mine = [ch for ch in every if ch.candidate.host == daemon and ch.candidate.total >= memory
            and ch.candidate.session_limit >= memory]
    return [ch.candidate.ordinal for ch in sorted(mine, key=lambda ch: (round(ch.score, 6), ch.candidate.order))]


# ---------------------------------------------------------------------------------------------- keeping
class Keeper:
    """Renews leases every ttl/3 on a thread of its own until stop() or until none is left; on_lost(ids, why) hears
    of leases that were lost (once each). renew_ttl: what each renewal extends them by (None: their own ttl)."""

    def __init__(self, held: Held, ttl: float, token: bytes | None, timeout: float = 5.0,
                 connect: Connect | None = None, on_lost: Callable[[list[str], str], None] | None = None,
                 renew_ttl: float | None = None) -> None:
        self.held = held
        self.ttl = ttl
        self.renew_ttl = renew_ttl
        self.token = token
        self.timeout = min(timeout, max(ttl / 3, 0.5))
        self.connect = connect or _default_connect()
        self.on_lost = on_lost or (lambda ids, why: print(f"pyvgpu: {why}", file=sys.stderr, flush=True))
        self.lost: set[str] = set()
        self._stop = threading.Event()
        self._clients: dict[Host, Any] = {}
        self._thread = threading.Thread(target=self._run, name="pyvgpu-lease-keeper", daemon=True)

    def start(self) -> "Keeper":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def wait(self) -> None:
        """Until the thread ends (no lease left, or stop())."""
        self._thread.join()

    def alive(self) -> bool:
        """Whether some lease is still held."""
        return len(self.lost) < len(self.held)

    def renew_once(self) -> None:
        for daemon, ids in self.held.by_daemon().items():
            ids = [i for i in ids if i not in self.lost]
            if not ids:
                continue
            try:
                client = self._clients.get(daemon)
                if client is None:
                    client = self._clients[daemon] = _client(self.connect, daemon, self.token, self.timeout)
                request: dict[str, Any] = {LEASE_IDS: ids}
                if self.renew_ttl is not None:
                    request[LEASE_TTL] = self.renew_ttl
                err, result, _ = client.call("LEASE_RENEW", request)
            except Exception:  # noqa: BLE001 - unreachable for now: the lease lives on until its deadline
                self._drop(daemon)
                continue
            gone = [i for i in (result.get(LEASE_UNKNOWN) or [] if err == 0 else []) if i not in self.lost]
            if gone:
                self.lost.update(gone)
                hosts = [str(h) for h, i in zip(self.held.hosts(), self.held.ids()) if i in gone]
                self.on_lost(gone, f"lease of {', '.join(hosts)} lost (expired or released by an operator); "
                                   f"the program's sessions there were ended")

    def _drop(self, daemon: Host) -> None:
        client = self._clients.pop(daemon, None)
        if client is not None:
            try:
                client.close(goodbye=False)
            except Exception:  # noqa: BLE001
                pass

    def _run(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            self.renew_once()
            if not self.alive():
                break
        for daemon in list(self._clients):
            self._drop(daemon)


def summary(status: dict[str, Any], device: int, width: int = 0) -> str:
    """What leases hold one device of a daemon's status (`pyvgpu devices`, `daemon status`, `top`): `-`,
    `excl <holder>` or `3 share(s) (0.75)`."""
    held = [x for x in (status or {}).get(STATUS_LEASES) or [] if isinstance(x, dict) and x.get(LEASE_DEVICE) == device]
    if not held:
        return "-"
    if any(x.get(LEASE_EXCLUSIVE) for x in held):
        text = f"excl {held[0].get(LEASE_HOLDER) or '?'}"
    else:
        text = f"{len(held)} share(s) ({sum(float(x.get(LEASE_FRACTION, 0)) for x in held):.2f})"
    return text if not width or len(text) <= width else text[:width - 1] + "…"


def shares(held: Held) -> str:
    """One line on what was leased, for --explain and logs."""
    parts = []
    for host, (_, x) in zip(held.hosts(), held.leases):
        kind = "exclusive" if x.get(LEASE_EXCLUSIVE) else f"share {float(x.get(LEASE_FRACTION, 0)):g}"
        parts.append(f"{host} ({kind}, lease {str(x[LEASE_ID])[:8]})")
    return ", ".join(parts)
