"""What the event loop does itself, without the hop to the (session, device) worker thread, when ordering allows it.

A job on the worker costs two thread hand-overs (loop → worker → loop), which on a loaded host dominate a small
synchronous call (bench/README.md, "where the time goes"). When a (session, device) has nothing queued or running
(`OrderedWorker.idle` with `pending == 0`, both read on the loop, which alone submits), every op before the next one
has completed, so the loop may act for the worker; nothing is submitted meanwhile because the loop is the only
submitter and it is busy doing exactly this. `route` makes that decision once per frame, before its payload is
read (the connection's frame loop then only carries it out), and picks one of three cases, each only where the
backend says it is safe, or the worker:

- Route.LOOP (`run_on_loop`; `answer` / `run_async` decide and run one op): an op flagged LOOP on its spec line,
  where the backend completes such ops at once (`DeviceContext.answers_on_loop`: state queries, synchronizations
  that have nothing to wait for, and small copies, memsets and event records: at most LOOP_BYTES by the spec's
  extent arguments, so the loop never stalls on one) runs through the same `dispatch.execute` as on the worker, so
  its checks, errors, latched errors and printf output are the same, and it is accounted to the session's lane as on
  the worker (device time, latency). A stream of small fire-and-forget ops then costs the loop's parsing and the op
  itself, without a hand-over per op to a thread that competes with the loop for the GIL. Kernel launches only when
  the backend knows the launch to be short whatever its parameters (`DeviceContext.tiny_launch`; the emulator:
  emu/runtime/launch.LaunchPlan.tiny, a kernel without loops, calls or barriers over at most ~1 K threads that has
  run before, its fastest run under 500 µs);
- Route.LAND (`landed` after the read): a host-to-device copy's payload is received straight into device memory
  (`DeviceContext.host_view`), instead of into a buffer that the worker copies later; the range is checked first
  exactly as the handler does, and anything unusual (a bad range or stream, a sticky error, a small copy) takes the
  ordinary path;
- Route.FROM_DEVICE (`reply_from_device`): a device-to-host copy's reply is written from device memory, not from a
  copy of it. The transport keeps a reference to unsent bytes, so the device bytes must not change until they are
  sent: the last FrameStream.WRITE_HIGH bytes go out as a copy, so "writer paused" means "bytes of device memory are
  unsent", and the connection then holds the session's next request until everything is sent
  (`Link.sending_device_memory`).
  Other sessions cannot reach this session's memory through the daemon (session.check_range).
"""
from __future__ import annotations

import enum
import operator
import time
from typing import Any

from pyvgpu import wire
from pyvgpu.protocol import DEFAULT_STREAM_HANDLES, OP_BY_NAME, OpSpec
from pyvgpu_daemon import compress, fastrun
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.backends.base import Backend, DeviceContext
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.session import DeviceState, Session
from pyvgpu_daemon.stream import FrameStream

OP_HTOD = OP_BY_NAME["MEMCPY_HTOD"].code
OP_DTOH = OP_BY_NAME["MEMCPY_DTOH"].code
# Where LAUNCH carries its function, grid, block and dynamic shared memory (from the spec, not restated here).
_LAUNCH_ARGS = tuple(OP_BY_NAME["LAUNCH"].arg_names.index(n) for n in ("func", "grid", "block", "shmem"))
launch_args = operator.itemgetter(*_LAUNCH_ARGS)
_HTOD_DST, _HTOD_STREAM = (OP_BY_NAME["MEMCPY_HTOD"].arg_names.index(n) for n in ("dst", "stream"))
_DTOH_SRC, _DTOH_SIZE, _DTOH_STREAM = (OP_BY_NAME["MEMCPY_DTOH"].arg_names.index(n) for n in ("src", "size", "stream"))
LANDING_MIN = FrameStream.DIRECT_MIN      # smaller payloads arrive with their header anyway: copied once, cheaply
SEND_MIN = 4 * FrameStream.WRITE_HIGH     # smaller replies are copied (the copied tail would be most of them)
LOOP_BYTES = 64 << 10                     # the most bytes an op run on the loop may copy or set (its extent: the
                                          # spec's extent arguments; its payload)


class Route(enum.Enum):
    WORKER = "worker"              # queued on the (session, device) worker, in order behind its work
    LOOP = "loop"                  # run now on the loop (run_on_loop)
    LAND = "land"                  # a host-to-device payload received straight into device memory (landed)
    FROM_DEVICE = "from_device"    # a device-to-host reply written from device memory (reply_from_device)


def route(session: Session, st: DeviceState, spec: OpSpec, args: list[Any], plen: int, compressed: bool,
          req_id: int, oversize: bool) -> tuple[Route, memoryview | None]:
    """Where a device op goes, decided once per frame before its payload (plen bytes as received) is read; for LAND
    and FROM_DEVICE the device bytes themselves. Only the worker takes a frame that holds the oversize slot (it is
    released when the job ran) or a compressed payload (decoded on the worker, never on the loop)."""
    w = st.worker
    if oversize or compressed or w.pending or not w.idle:
        return Route.WORKER, None
    code = spec.code
    if code == OP_HTOD and plen >= LANDING_MIN:
        view = _device_bytes(st, args[_HTOD_DST], plen, args[_HTOD_STREAM])
        if view is not None:
            return Route.LAND, view
    elif code == OP_DTOH and req_id:
        view = _reply_bytes(session, st, args)
        if view is not None:
            return Route.FROM_DEVICE, view
    if _loop_may_run(st, spec, args, plen):
        return Route.LOOP, None
    return Route.WORKER, None


def idle_context(st: DeviceState, work: bool = True) -> DeviceContext | None:
    """The device's context when the loop may act for its worker (nothing queued or running), else None. Device
    work (OpSpec.work: copies, memsets, event records) only while this session is alone on the device: on a
    shared device it runs in the session's turn on its worker, so the fair share and the sharing slowdown that
    placement reads stay measured (the loop takes no turn)."""
    w = st.worker
    if w.pending or not w.idle:
        return None
    if work:
        lane = w.lane
        if lane is not None and len(lane.sched.lanes) > 1:      # read without the lock: a hint, as `contended`
            return None
    return st.ctx


def _u64(v: Any) -> bool:
    return type(v) is int and 0 <= v < (1 << 64)       # type(): not bool, as dispatch.ARG_CHECKS


def _stream_ok(st: DeviceState, h: Any) -> bool:
    return _u64(h) and (h in DEFAULT_STREAM_HANDLES or h in st.streams)


def _range_view(st: DeviceState, ctx: DeviceContext, ptr: Any, size: int, stream: Any) -> memoryview | None:
    """Device bytes [ptr, ptr+size) of this session as host memory, when the handler would accept them."""
    if not _u64(ptr) or not _stream_ok(st, stream):
        return None
    try:
        st.check_range(ptr, size, "copy")
        return ctx.host_view(ptr, size)
    except CudaError:
        return None


def _tiny_launch(st: DeviceState, ctx: DeviceContext, args: list[Any]) -> bool:
    """Whether a LAUNCH is one the backend knows to be short whatever its parameters (DeviceContext.tiny_launch);
    anything unusual (an unknown function, a malformed argument) goes to the worker, which reports it."""
    fn, grid, block, shmem = launch_args(args)
    if type(fn) is not int or type(shmem) is not int or st.sticky:
        return False
    found = st.functions.get(fn)
    if found is None:
        return False
    try:
        grid = dispatch.ARG_CHECKS["dim3"]("grid", grid)
        block = dispatch.ARG_CHECKS["dim3"]("block", block)
    except CudaError:
        return False
    return ctx.tiny_launch(found[0], found[1], grid, block, shmem)


def _loop_may_run(st: DeviceState, spec: OpSpec, args: list[Any], nbytes: int) -> bool:
    """Whether the loop may run this op (payload: nbytes) now: the spec allows it (OpFlag.LOOP), the device is idle,
    the backend completes such ops at once, and what it moves is small (a kernel: the backend knows it tiny)."""
    if not spec.loop or nbytes > LOOP_BYTES:
        return False
    ctx = idle_context(st, spec.work)
    if ctx is None or not ctx.answers_on_loop or not _backend_allows(ctx, st, spec, args):
        return False
    if spec.func_arg is not None:
        return _tiny_launch(st, ctx, args)
    if spec.extent_args:
        n = spec.extent(args)
        return n is not None and n <= LOOP_BYTES
    return True


def _backend_allows(ctx: DeviceContext, st: DeviceState, spec: OpSpec, args: list[Any]) -> bool:
    """DeviceContext.loop_may_answer, with the op's arguments as its handler would get them."""
    try:
        return ctx.loop_may_answer(spec, lambda: dispatch.positional(spec, st, args))
    except CudaError:
        return False                 # not valid: the worker reports it


def run_on_loop(session: Session, st: DeviceState, backend: Backend, spec: OpSpec, args: list[Any], payload: Any,
                fire_and_forget: bool) -> dispatch.Outcome | None:
    """Run an op routed to the loop (Route.LOOP) through dispatch.execute, and account it to the session's lane as
    the worker would (device time for device work, latency for the rest)."""
    t0 = time.perf_counter()
    out = dispatch.execute(session, st, backend, spec, args, payload, fire_and_forget)
    _lane(st, spec, args, len(payload), t0, spec.work)
    return out


def run_group_on_loop(session: Session, st: DeviceState, backend: Backend, group: list[Any], nbytes: int) -> bool:
    """A run of FAST ops of one device (fastrun.RunOp) run here and now when the worker is idle and every op of it
    may run on the loop (as `run_on_loop` decides for one op), accounted to the lane as one job per op. → ran it.

    The decision is `_loop_may_run`'s for each op, made for the run: nothing runs before it is complete, so what
    it reads (the session's functions, the backend's plans) is the same for every op of the run; a launch's answer
    is kept for the run by its (function, grid, block, shmem), and a backend that does not narrow
    DeviceContext.loop_may_answer allows every op without being asked."""
    ctx = idle_context(st)                # FAST ops are device work: the same idle device for all of them
    if ctx is None or not ctx.answers_on_loop:
        return False
    ask = type(ctx).loop_may_answer is not DeviceContext.loop_may_answer
    tiny: dict[tuple[Any, ...], bool] = {}
    for spec, args, payload in group:     # the rest of _loop_may_run, op by op
        if not spec.loop or len(payload) > LOOP_BYTES or (ask and not _backend_allows(ctx, st, spec, args)):
            return False
        if spec.func_arg is not None:
            fn, grid, block, shmem = launch_args(args)
            shaped = type(grid) is list and type(block) is list and len(grid) == len(block) == 3
            key = (fn, shmem, *grid, *block) if shaped else None
            ok = tiny.get(key) if key is not None else None
            if ok is None:
                ok = _tiny_launch(st, ctx, args)
                if key is not None:
                    tiny[key] = ok
            if not ok:
                return False
        elif spec.extent_args:
            n = spec.extent(args)
            if n is None or n > LOOP_BYTES:
                return False
    t0 = time.perf_counter()
    fastrun.execute_run(session, st, backend, group)
    lane = st.lane
    if lane is not None:                  # each op accounted as run_on_loop accounts it (the run's time split evenly)
        lane.end_run([(spec.code, args, len(payload)) for spec, args, payload in group], t0, time.perf_counter())
    return True


def groups_on_worker(st: DeviceState, group: list[Any]) -> bool:
    """Whether a run of FAST ops may be one job of the device's worker: the session is alone on the device (a shared
    device's turn passes between jobs: each op is one, as on the Python path) and every op is small (its extent at
    most LOOP_BYTES: a flood of large memsets stays one job per op)."""
    lane = st.lane
    if lane is not None and len(lane.sched.lanes) > 1:      # read without the lock: a hint, as idle_context
        return False
    for spec, args, _ in group:
        if spec.extent_args:
            n = spec.extent(args)
            if n is None or n > LOOP_BYTES:
                return False
    return True


def _lane(st: DeviceState, spec: OpSpec, args: list[Any], nbytes: int, t0: float, work: bool) -> None:
    """The lane's part of accounting an op the loop ran (dispatch.account is the figures' part): what the worker
    records for a job (executor.py)."""
    lane = st.lane
    if lane is not None:
        tag = (spec.code, args, nbytes)
        if work:
            lane.end(tag, t0, t0, time.perf_counter())      # device time, as the worker accounts it
        else:
            lane.record(tag, t0, time.perf_counter())


def answer(session: Session, st: DeviceState, backend: Backend, spec: OpSpec, args: list[Any],
           payload: Any) -> dispatch.Outcome | None:
    """Decide and run one request on the loop when allowed (Route.LOOP); None when it must go to the worker."""
    if not _loop_may_run(st, spec, args, len(payload)):
        return None
    return run_on_loop(session, st, backend, spec, args, payload, False)


def run_async(session: Session, st: DeviceState, backend: Backend, spec: OpSpec, args: list[Any],
              payload: Any) -> bool:
    """Decide and run one fire-and-forget op on the loop when allowed (its failure is latched as on the worker).
    → ran it."""
    if not _loop_may_run(st, spec, args, len(payload)):
        return False
    run_on_loop(session, st, backend, spec, args, payload, True)
    return True


def landed(st: DeviceState, spec: OpSpec, args: list[Any], nbytes: int, started: float) -> None:
    """The bookkeeping dispatch.execute does for a copy, after its payload landed in device memory."""
    dispatch.account(st, False, nbytes, 0)
    _lane(st, spec, args, nbytes, started, False)


def _device_bytes(st: DeviceState, ptr: Any, size: int, stream: Any) -> memoryview | None:
    """A copy's device bytes as host memory, when the session is alone on an idle device and nothing unusual
    (a sticky error, a bad range or stream) needs the handler."""
    if st.sticky:
        return None
    ctx = idle_context(st)
    return _range_view(st, ctx, ptr, size, stream) if ctx is not None else None


def _reply_bytes(session: Session, st: DeviceState, args: list[Any]) -> memoryview | None:
    """The device bytes a MEMCPY_DTOH reply may be written from (see the module docstring), or None."""
    if st.deferred or session.compress_always or compress.may_pay(session.peer_rate, session.codecs):
        return None                               # latched errors, compression: the worker's (dispatch.execute)
    size = args[_DTOH_SIZE]
    if not _u64(size) or size < SEND_MIN:
        return None
    return _device_bytes(st, args[_DTOH_SRC], size, args[_DTOH_STREAM])


def reply_from_device(st: DeviceState, spec: OpSpec, req_id: int, args: list[Any], view: memoryview) -> list[Any]:
    """The reply frame of a device-to-host copy sent from `view`, its device bytes (Route.FROM_DEVICE)."""
    t0 = time.perf_counter()
    size = len(view)
    dispatch.account(st, True, 0, size)
    ctx = st.ctx
    assert ctx is not None
    stdout = ctx.take_stdout() or None            # MEMCPY_DTOH is SYNC: it carries the device's printf output
    times = st.event_times.report(ctx)            # ... and event times, as every reply (protocol v3)
    tail = FrameStream.WRITE_HIGH
    try:
        parts = wire.encode_reply(req_id, 0, None, stdout, view, times)
    except wire.ProtocolError:
        parts = wire.encode_reply(req_id, dispatch.ERR_UNKNOWN)
    else:
        parts[1:2] = [view[:size - tail], bytes(view[size - tail:])]
    _lane(st, spec, args, 0, t0, False)
    return parts
