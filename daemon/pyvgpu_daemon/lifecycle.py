"""A session's life: from an accepted connection through the handshake and its frame loop to its end, and the
heartbeats and the shutdown drain in between.

`run_session` is one connection: the handshake (handshake.py) within handshake_timeout_s, then the Connection's
frame loop (connection.py) until the client leaves or something ends the session; every way it can end is turned
into a one-line reason, told to the client when the daemon ends it. `end_session` is the one teardown: the
session's kernels are cancelled, each device's cleanup job frees what the session holds, its workers stop, its
leases and tickets go. `abort` ends a session from outside its frame loop (a worker found a request malformed).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable

from pyvgpu import wire
from pyvgpu.protocol import ERR_UNAVAILABLE
from pyvgpu_daemon.connection import Connection
from pyvgpu_daemon.errors import SessionEnd
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.handshake import handshake
from pyvgpu_daemon.link import Link
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.stream import ConnectionClosed, Draining, FrameStream, StreamTimeout

if TYPE_CHECKING:
    from pyvgpu_daemon.server import Server

log = logging.getLogger("pyvgpu.daemon")


async def run_session(server: Server, stream: FrameStream, sid: int) -> None:
    """One connection, from its handshake to its end."""
    peer = stream.peer
    session = Session(sid, peer, server.backend, server.ndevices, hub=server.hub)
    session.sharing = server.sharing
    assert server.oversize_slot is not None and server.admission is not None
    link = Link(session, stream, server.bounds, server.oversize_slot)
    bounds = server.bounds
    reason = "client closed the connection"
    notify = False                   # tell the client why the daemon ends its session
    established = False
    if server.capture_dir is not None:
        # a test and debugging switch: small synchronous writes to the page cache, the loop's to make
        stream.capture = open(server.capture_dir / f"session-{sid}.frames", "wb")  # noqa: SIM115 - closed below
    try:
        try:
            # one deadline from the accept on: a TLS handshake (tls_accept.py) spent part of it
            loop = asyncio.get_running_loop()
            left = bounds.handshake_timeout_s - (loop.time() - (stream.accepted_at or loop.time()))
            await asyncio.wait_for(handshake(server, session, stream), max(left, 0.0))
        except TimeoutError:
            raise SessionEnd(f"no hello within {bounds.handshake_timeout_s:.0f} s") from None
        established = True
        server.admission.done(stream)
        server.sessions[sid] = session
        server.links[sid] = link
        session.end_soon = lambda why: loop.call_soon_threadsafe(abort, link, why)
        log.info("%s: connected from %s (%s), va_base=%#x", session.tag(), peer, session.client, session.va_base)
        reason = await Connection(server, link).serve()
    except Draining:
        reason, notify = "daemon shutting down", True
        if established:
            await drain(link, server.drain_deadline)
    except SessionEnd as exc:
        reason, notify = str(exc), established
    except StreamTimeout as exc:
        reason, notify = f"timed out: {exc}", established
    except wire.ProtocolError as exc:
        reason, notify = f"protocol error: {exc}", established
    except ConnectionClosed as exc:
        reason = f"connection lost: {exc}"
    except (ConnectionError, OSError) as exc:
        reason = f"connection lost: {exc.__class__.__name__}: {exc}"
    except asyncio.CancelledError:
        reason, notify = "daemon shutting down", True
    except Exception as exc:  # noqa: BLE001 - a bug in one session must not take the daemon down
        if stream.is_closing():
            # Whatever a socket that closed under an operation raises (OSError, ValueError for its fd of -1,
            # an SSL error, ...): the client went away; the session ends with this one line.
            reason = f"connection lost: {exc.__class__.__name__}: {exc}"
        else:
            log.exception("%s: internal error", session.tag())
            reason, notify = "internal error (see traceback above)", established
    finally:
        if stream.capture is not None:
            stream.capture.close()
            stream.capture = None
        server.forget_stream(stream)
        quiet = server.was_dropped(stream)         # admission logged it (one line per peer, rate-limited)
        if quiet:
            reason = "dropped before its handshake: its address has too many connections waiting"
        await end_session(server, link, reason, notify, quiet)


async def heartbeats(links: Callable[[], Iterable[Link]], interval: float) -> None:
    """Every session with work in flight hears from the daemon at least every `interval` seconds (a periodic beat,
    not a wait on a condition: it is what the client's bounded wait counts on)."""
    beat = wire.encode_notice(0)
    while True:
        await asyncio.sleep(interval / 2)
        now = time.monotonic()
        for link in list(links()):
            s = link.stream
            try:
                if link.busy() and now - s.last_write >= interval and s.write_buffer_size() == 0:
                    s.writelines(beat)
            except Exception:  # noqa: BLE001 - one session's broken transport must not stop everyone's beat
                log.exception("%s: heartbeat failed", link.session.tag())


async def drain(link: Link, deadline: float | None) -> None:
    """Daemon shutdown: let the session's queued work finish and its replies go out, up to the deadline (loop
    time)."""
    loop = asyncio.get_running_loop()
    left = (deadline or loop.time()) - loop.time()
    try:
        await asyncio.wait_for(link.until(link.drained()), max(left, 0.0))
        left = (deadline or loop.time()) - loop.time()
        if left > 0:
            await asyncio.wait_for(link.until(link.stream.unsent_at_most(0)), left)
    except (TimeoutError, ConnectionError):
        pass


def abort(link: Link, why: str) -> None:
    """End a session from outside its frame loop (a worker found its request malformed: Session.end_soon): the
    client is told why and the connection closes, which ends the frame loop and runs the usual teardown."""
    stream = link.stream
    if link.session.closing or stream.is_closing():
        return
    log.warning("%s: ending the session: %s", link.session.tag(), why)
    stream.writelines(wire.encode_notice(ERR_UNAVAILABLE, why))
    stream.close()


async def end_session(server: Server, link: Link, reason: str, notify: bool, quiet: bool = False) -> None:
    """The one teardown of a session, however it ended."""
    session, stream = link.session, link.stream
    session.closing = True
    stream.on_data = None
    server.hub.drop_session(session.id)
    server.links.pop(session.id, None)
    if server.leases is not None:
        server.leases.session_ended(session)
    if notify and not stream.is_closing():
        stream.writelines(wire.encode_notice(ERR_UNAVAILABLE, reason))
    released = 0
    futures = []
    loop = asyncio.get_running_loop()
    busy = sum(1 for st in session.devices.values() if not st.worker.idle)
    for st in session.devices.values():
        if st.ctx is not None:
            st.ctx.cancel()          # an orphaned kernel stops at its next check instead of running on
        futures.append(st.worker.submit(dispatch.cleanup, session, st))
        st.worker.stop()
    for fut in futures:
        try:
            # Shielded: cleanup must finish even when the daemon is being cancelled.
            released += await asyncio.shield(fut)
        except asyncio.CancelledError:
            try:
                released += await fut
            except Exception:  # noqa: BLE001
                pass
        except Exception as exc:  # noqa: BLE001
            log.error("%s: cleanup failed: %r", session.tag(), exc)
    for st in session.devices.values():
        await loop.run_in_executor(None, st.worker.join, 5.0)
        if st.lane is not None:
            st.lane.sched.retire(st.lane)
    link.release_oversize()
    # Said before the session leaves the status and its connection closes: whoever sees either can read the line
    # (written after the close, a peer that saw its connection end and then read the log could miss it when the
    # daemon was preempted in between, as on a loaded 2-core CI machine).
    if session.va_base or session.devices:
        log.info("%s: ended (%s); %d ops (%d waited for); released %d bytes on %d device(s)%s", session.tag(),
                 reason, sum(st.ops for st in session.devices.values()),
                 sum(st.waited for st in session.devices.values()), released, len(session.devices),
                 f"; work in progress cancelled on {busy} device(s)" if busy else "")
    else:
        log.log(logging.DEBUG if quiet else logging.INFO,
                "%s: connection from %s ended before a session began (%s)", session.tag(), session.peer, reason)
    server.sessions.pop(session.id, None)
    if server.leases is not None and session.devices:
        server.leases.serve_waiters()      # the GPUs it used are free now: waiting lease requests may fit
    try:
        stream.close()
    except Exception:  # noqa: BLE001
        pass
