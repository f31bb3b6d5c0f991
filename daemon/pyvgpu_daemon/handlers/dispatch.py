"""The job of one device op: `execute` runs its handler and applies the deferred/sticky error rules of protocol.py.

It runs on the (session, device) ordered worker thread, or on the loop for what fastpath.py allows (the same code, so
checks, errors, latched errors and printf output are the same either way):
- an op sent fire-and-forget (req_id 0, only ASYNC ops) gets no reply; its first failure is latched per device;
- an op flagged SYNC returns the latched error (and clears it) and carries the device's printf output;
- a sticky error (memory fault, assert, ...) makes every later op on the device fail with it until DEVICE_RESET.
`account` counts an op in the session's figures (STATUS, metrics), wherever it ran. Importing this module
registers every handler (one module per feature) and checks that each device op has one.
"""
from __future__ import annotations

import logging
from typing import Any

from pyvgpu.protocol import ERROR_CODES, ERROR_NAMES, OP_BY_NAME, OPS, OpSpec
from pyvgpu_daemon.backends.base import Backend
from pyvgpu_daemon.compress import Compressed, CorruptPayload, compress_reply
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.lent import Lent
from pyvgpu_daemon.handlers import (array, blas, blaslt, coherence, device, emufeat, graph, managed,  # noqa: F401
                                    memory, modules, peer, streams, tensormap, vmm)
from pyvgpu_daemon.handlers.registry import ARG_CHECKS, Call, invoke, positional, registered  # noqa: F401
from pyvgpu_daemon.session import DeviceState, Session, release_device

log = logging.getLogger("pyvgpu.daemon")

ERR_UNKNOWN = ERROR_CODES["cudaErrorUnknown"]
_DEVICE_RESET = OP_BY_NAME["DEVICE_RESET"].code
# Every device op of the spec has exactly one handler (checked at import so a new op cannot be forgotten).
_device_ops = {op.name for op in OPS if op.device}
assert _device_ops == registered(), f"handler table out of step with protocol.OPS: {_device_ops ^ registered()}"


class Outcome:
    """What a job hands back to the loop: None for fire-and-forget, else the reply fields. (Slotted, not a frozen
    dataclass: one is made per request.) event_times: the reply's sixth field (event_times.py); a payload compressed
    by `codec` (compress.py) has raw_len bytes once decoded; lent: the payload is a backend's buffer, given back
    once sent (lent.py)."""
    __slots__ = ("err", "result", "payload", "stdout", "event_times", "raw_len", "codec", "lent")

    def __init__(self, err: int, result: Any = None, payload: bytes | memoryview = b"", stdout: bytes | None = None,
                 event_times: list[float] | None = None, raw_len: int = 0, codec: int = 0,
                 lent: Lent | None = None) -> None:
        self.err = err
        self.result = result
        self.payload = payload
        self.stdout = stdout
        self.event_times = event_times
        self.raw_len = raw_len
        self.codec = codec
        self.lent = lent



def account(st: DeviceState, waited: bool, nin: int, nout: int) -> None:
    """One op in the figures of its (session, device): ops, those the client waited for (a blocking round trip), its
    payload bytes in and out. Wherever it ran: execute (the worker or the loop), or fastpath's copies that land in or
    are sent from device memory."""
    st.ops += 1
    if waited:
        st.waited += 1
    st.bytes_htod += nin
    st.bytes_dtoh += nout


def execute(session: Session, st: DeviceState, backend: Backend, spec: OpSpec, args: list[Any], payload: bytes,
            fire_and_forget: bool) -> Outcome | None:
    """Run one device op on the worker thread and apply the deferred/sticky error rules."""
    if session.closing:
        return None                       # the client is gone: skip queued work, cleanup follows
    detached = spec.detached
    result: Any = None
    out: bytes | memoryview = b""
    lent: Lent | None = None
    nin = err = 0
    if st.sticky and spec.code != _DEVICE_RESET:
        err = st.sticky
    else:
        try:
            if st.ctx is None and spec.code != _DEVICE_RESET:     # (a reset of no context has nothing to do)
                open_context(session, st, backend)
            if isinstance(payload, Compressed):
                payload = payload.decode()            # on this worker, never on the loop (compress.py)
            nin = len(payload)
            ret = invoke(spec, Call(session, st, payload), positional(spec, st, args))
            if spec.payload_out:
                if isinstance(ret, Lent):
                    lent, ret = ret, ret.view
                out = ret or b""
            else:
                result = ret
        except CorruptPayload as exc:
            err = ERROR_CODES["cudaErrorInvalidValue"]
            log.warning("%s: %s: %s; ending the session", session.tag(st.ordinal), spec.name, exc)
            if session.end_soon is not None:
                session.end_soon(str(exc))
        except Exception as exc:  # noqa: BLE001 - a backend bug must cost one op, not the daemon
            err = failed(session, st, spec, exc)
    account(st, not fire_and_forget and not detached, nin, len(out))
    if fire_and_forget or detached:
        if err and not st.deferred:
            st.deferred = err             # a detached op's failure, too, is the next synchronizing call's
        if not detached:
            if lent is not None:
                lent.release()
            return None
    try:
        return _reply(session, st, spec, err, result, out, lent)
    except Exception:  # noqa: BLE001 - the request ends with an error, never without an answer
        log.exception("%s: %s: its reply failed", session.tag(st.ordinal), spec.name)
        if lent is not None:
            lent.release()
        return Outcome(ERR_UNKNOWN)


def open_context(session: Session, st: DeviceState, backend: Backend) -> None:
    """The (session, device)'s context, opened at its first op."""
    st.ctx = backend.open_context(st.ordinal, session.va_base, session.id)
    if st.lane is not None:
        st.ctx.wait_scope = st.lane.waiting     # host waits give the device's turn away
        st.ctx.turn = st.lane                   # long kernels pause for others' turns (emulator)


def failed(session: Session, st: DeviceState, spec: OpSpec, exc: BaseException) -> int:
    """The error code an op that raised exc answers (a CudaError's own, else cudaErrorUnknown), its sticky error
    latched on the device, logged once."""
    if not isinstance(exc, CudaError):
        log.error("%s: %s raised unexpectedly", session.tag(st.ordinal), spec.name, exc_info=exc)
        return ERR_UNKNOWN
    if exc.sticky:
        st.sticky = exc.code
    # a session whose client is gone (its kernel cancelled): nobody to tell; its end is logged once
    level = logging.DEBUG if session.closing else logging.WARNING if exc.sticky else logging.INFO
    log.log(level, "%s: %s failed: %s%s", session.tag(st.ordinal), spec.name, exc, " (sticky)" if exc.sticky else "")
    return exc.code


def _reply(session: Session, st: DeviceState, spec: OpSpec, err: int, result: Any, out: bytes | memoryview,
           lent: Lent | None) -> Outcome:
    stdout = None
    if spec.sync:
        if st.deferred:
            # The earlier asynchronous failure is what the synchronizing call reports, as on a real GPU.
            err = st.deferred
            st.deferred = 0
        if st.ctx is not None:
            stdout = st.ctx.take_stdout() or None
    times = st.event_times.report(st.ctx)
    if err:
        if lent is not None:
            lent.release()
        return Outcome(err, None, b"", stdout, times)
    if session.codecs and spec.compressible and len(out):
        wire_out, codec = compress_reply(out, session.peer_rate, session.codecs, session.compress_always)
        if codec:
            if lent is not None:
                lent.release()            # the compressed bytes are a copy
            return Outcome(0, result, wire_out, stdout, times, len(out), codec)
    return Outcome(0, result, out, stdout, times, lent=lent)


def cleanup(session: Session, st: DeviceState) -> int:
    """Worker job run when a session ends: free everything it holds on this device. → bytes released."""
    return release_device(session, st)


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, str(code))

