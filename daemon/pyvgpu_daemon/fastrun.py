"""A run of FAST ops: consecutive fire-and-forget ops flagged FAST of one (session, device), run as one job.

The compiled frame path decodes such runs from the bytes a connection received; `execute_run` gives
each op the result `dispatch.execute(..., fire_and_forget=True)` would give it, in turn, and hands the backend the
ops in as few `DeviceContext.run_fast` calls as their errors allow:

- the ops' arguments are as libpvframe decoded them, each of its wire kind and in range (framepath.py), so only
  their handles are resolved (registry.DECODED); each op's preparer (handlers' `@fast_handler`) makes the handler's
  checks, before the ops before it ran: they read only what FAST ops never change (the session's allocations,
  handles, kernels' parameter layouts: OpFlag.FAST's rule, enforced on the spec line by protocol.creates_or_frees),
  so checking ahead gives what checking in turn gives;
- an op whose checks failed first runs the ops prepared before it (so the device's sticky error is known), then
  fails with its error (or the sticky one), latched as a fire-and-forget failure is;
- an op that failed inside run_fast (the contract on DeviceContext.run_fast) is accounted and latched the same way;
  a sticky error fails every op after it without running it, as on the per-op path.
Accounting (dispatch.account) is per op, as execute's.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from pyvgpu.protocol import OPS, OpSpec
from pyvgpu_daemon.backends.base import Backend, FastOp
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.handlers.registry import DECODED, FAST, Call
from pyvgpu_daemon.session import DeviceState, Session

RunOp = tuple[OpSpec, list[Any], Any]          # (spec, the request's arguments, its payload)
# Per FAST op code, what a run does with it, looked up once per op: (its preparer, its decoded arguments'
# conversion), and the bookkeeping of its success (registry.FAST, registry.DECODED).
_STEPS = {code: (prepare, DECODED[code]) for code, (prepare, _) in FAST.items()}
_AFTER = {code: after for code, (_, after) in FAST.items()}
assert set(_STEPS) == {spec.code for spec in OPS if spec.fast}, "every FAST op has its preparer (handlers/)"


def execute_run(session: Session, st: DeviceState, backend: Backend, ops: Sequence[RunOp]) -> None:
    """Run fire-and-forget FAST ops in order (on the worker, or on the loop where fastpath allows each of them)."""
    if session.closing:
        return                            # the client is gone: skip queued work, cleanup follows
    if st.ctx is None:
        try:
            dispatch.open_context(session, st, backend)
        except Exception:  # noqa: BLE001 - each op then meets the failure as on the per-op path
            for spec, args, payload in ops:
                dispatch.execute(session, st, backend, spec, args, payload, True)
            return
    batch: list[tuple[OpSpec, FastOp, int]] = []
    steps = _STEPS
    for spec, args, payload in ops:
        if st.sticky:
            _fail(st, st.sticky, 0)
            continue
        prepare, decode = steps[spec.code]
        try:
            fop = prepare(Call(session, st, payload), *decode(st, args))
        except Exception as exc:  # noqa: BLE001 - the op's failure, as execute reports it
            _flush(session, st, batch)
            if st.sticky:
                _fail(st, st.sticky, 0)
            else:
                _fail(st, dispatch.failed(session, st, spec, exc), len(payload))
            continue
        if fop is None:                   # nothing to run (a zero-byte copy or memset): a success
            _flush(session, st, batch)
            if st.sticky:
                _fail(st, st.sticky, 0)
            else:
                dispatch.account(st, False, len(payload), 0)
            continue
        batch.append((spec, fop, len(payload)))
    _flush(session, st, batch)


def execute_job(session: Session, st: DeviceState, backend: Backend, ops: Sequence[RunOp], submitted: float) -> None:
    """execute_run as one worker job: the worker accounts the job to the lane under its tag (group_tag: the last
    op's); the other ops' latencies go into their ops' histograms here, so the lane counts every op as the Python
    path's one job per op does (their device time is the job's, counted once)."""
    execute_run(session, st, backend, ops)
    lane = st.lane
    if lane is not None:
        lane.record_run([(spec.code, args, len(payload)) for spec, args, payload in ops[:-1]], submitted,
                        time.perf_counter())


def group_tag(group: Sequence[RunOp], nbytes: int) -> tuple[int, Any, int]:
    """The scheduler's tag of a run as one worker job (scheduler.Tag): its last op's, which names the run's stream
    when every op of it is ordered on that stream alone; otherwise with the default stream, a barrier that the
    stream-priority pick never moves (a run of several streams must keep its place)."""
    spec, args, _ = group[-1]
    si = spec.ordered_on
    same = si is not None and all(s.ordered_on is not None and a[s.ordered_on] == args[si] for s, a, _ in group)
    if si is not None and not same:
        args = list(args)
        args[si] = 0
    return spec.code, args, nbytes


def _fail(st: DeviceState, err: int, nin: int) -> None:
    dispatch.account(st, False, nin, 0)
    if not st.deferred:
        st.deferred = err


def _flush(session: Session, st: DeviceState, batch: list[tuple[OpSpec, FastOp, int]]) -> None:
    """Run the prepared ops through the backend's run_fast, applying the per-op rules to each result; empties it."""
    if not batch:
        return
    ctx = st.ctx
    assert ctx is not None
    start = 0
    while start < len(batch):
        done, exc = ctx.run_fast([fop for _, fop, _ in batch[start:]])
        nin_done = 0
        for spec, fop, nin in batch[start:start + done]:
            after = _AFTER[spec.code]
            if after is not None:
                after(st, fop)
            nin_done += nin
        st.ops += done                    # dispatch.account(st, False, nin, 0) of each op done, summed
        st.bytes_htod += nin_done
        if exc is None:
            break
        k = start + done
        spec, _, nin = batch[k]
        _fail(st, dispatch.failed(session, st, spec, exc), nin)
        start = k + 1
        if st.sticky:
            for _ in batch[start:]:
                _fail(st, st.sticky, 0)
            break
    batch.clear()
