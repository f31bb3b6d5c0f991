"""The LEASE_* ops (420-439), control ops (control.py): each request map checked, then answered on the event loop
from the lease table (leases.py).

A LEASE_ACQUIRE that must wait in line runs as a task of its own, so the session is served meanwhile (it may renew or
release other leases); while it waits the session counts as busy, so the daemon sends heartbeats and the client's
bounded wait holds. Leases granted to a client that went away before the answer reached it are given back at once.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from pyvgpu import wire
from pyvgpu.protocol import (ERROR_CODES, LEASE_JOB, LEASE_LEASES, LEASE_RELEASED, LEASE_RENEWED,
                             LEASE_TTL, LEASE_UNKNOWN, MAX_LEASE_TTL_S)
from pyvgpu_daemon.handlers.control import control
from pyvgpu_daemon.leases import Lease, LeaseRequestError, LeaseTable, parse_ids, parse_request

log = logging.getLogger("pyvgpu.daemon")

ERR_INVALID_VALUE = ERROR_CODES["cudaErrorInvalidValue"]
ERR_UNAVAILABLE = ERROR_CODES["cudaErrorDevicesUnavailable"]
LeaseHandler = Callable[[LeaseTable, Any, wire.Request, dict[str, Any]], None]


def lease_op(name: str) -> Callable[[LeaseHandler], LeaseHandler]:
    """A LEASE_* op's control handler (control.py): the request map checked to be a map, a refusal (a
    LeaseRequestError) answered cudaErrorInvalidValue with its reason."""
    def register(fn: LeaseHandler) -> LeaseHandler:
        def run(server: Any, link: Any, req: wire.Request) -> None:
            request = req.args[0]
            try:
                if not isinstance(request, dict):
                    raise LeaseRequestError("the request is not a map")
                fn(server.leases, link, req, request)
            except LeaseRequestError as exc:
                log.info("%s: %s refused: %s", link.session.tag(), name, exc)
                _reply(link, req.req_id, ERR_INVALID_VALUE, str(exc))
        control(name)(run)
        return fn
    return register


@lease_op("LEASE_ACQUIRE")
def acquire(table: LeaseTable, link: Any, req: wire.Request, request: dict[str, Any]) -> None:
    parsed = parse_request(request, table.ndevices, table.totals, table.clamp_weight)
    got = table.try_grant(parsed)
    if got is None and parsed.wait > 0:
        table.spawn(_wait(table, link, req.req_id, parsed))
        return
    _answer_grant(table, link, req.req_id, got, parsed.count)


@lease_op("LEASE_RENEW")
def renew(table: LeaseTable, link: Any, req: wire.Request, request: dict[str, Any]) -> None:
    ttl = request.get(LEASE_TTL)
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))
                            or not 0.1 <= ttl <= MAX_LEASE_TTL_S):
        raise LeaseRequestError(f"{LEASE_TTL} {ttl!r:.40}: expected 0.1 to {MAX_LEASE_TTL_S:g} s")
    renewed, unknown = table.renew(parse_ids(request), None if ttl is None else float(ttl))
    _reply(link, req.req_id, 0, {LEASE_RENEWED: renewed, LEASE_UNKNOWN: unknown})


@lease_op("LEASE_RELEASE")
def release(table: LeaseTable, link: Any, req: wire.Request, request: dict[str, Any]) -> None:
    job = request.get(LEASE_JOB)
    if job is not None:
        if not isinstance(job, str) or not job:
            raise LeaseRequestError(f"{LEASE_JOB} {job!r:.40}: expected a job name")
        released = table.release(job=job)
    else:
        released = table.release(ids=parse_ids(request))
    _reply(link, req.req_id, 0, {LEASE_RELEASED: released})


@lease_op("LEASE_LIST")
def list_leases(table: LeaseTable, link: Any, req: wire.Request, request: dict[str, Any]) -> None:
    job = request.get(LEASE_JOB)
    if job is not None and not isinstance(job, str):
        raise LeaseRequestError(f"{LEASE_JOB} {job!r:.40}: expected a job name")
    _reply(link, req.req_id, 0, {LEASE_LEASES: table.view(with_ids=job is not None, job=job)})


async def _wait(table: LeaseTable, link: Any, req_id: int, parsed: Any) -> None:
    link.outstanding += 1                 # heartbeats while it waits
    try:
        got = await table.acquire(parsed, link.session.id)
    except asyncio.CancelledError:        # the session ended
        return
    except LeaseRequestError as exc:
        _reply(link, req_id, ERR_INVALID_VALUE, str(exc))
        return
    finally:
        link.outstanding -= 1
    _answer_grant(table, link, req_id, got, parsed.count)


def _answer_grant(table: LeaseTable, link: Any, req_id: int, got: list[Lease] | None, count: int) -> None:
    if got is None:
        busy = "; ".join(x.describe() for x in table.leases.values()) or "GPUs in use by sessions without a lease"
        _reply(link, req_id, ERR_UNAVAILABLE, f"{count} GPU(s) of this daemon asked, not free: {busy}")
        return
    if link.stream.is_closing():
        table.release(ids=[x.id for x in got])     # nobody will hear of them
        return
    now = asyncio.get_running_loop().time()
    _reply(link, req_id, 0, {LEASE_LEASES: [x.view(now, with_id=True) for x in got]})
    log.info("%s: leased %s", link.session.tag(), ", ".join(f"GPU {x.device} ({x.tag})" for x in got))


def _reply(link: Any, req_id: int, err: int, result: Any) -> None:
    if not link.stream.is_closing():
        link.stream.writelines(wire.encode_reply(req_id, err, result))

