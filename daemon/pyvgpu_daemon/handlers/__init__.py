"""Device ops: one handler per device op of protocol.OPS, and the deferred/sticky error rules around them.

A handler takes a `Call` and the op's arguments by name, exactly as the spec lists them after `dev`; the
`@handler` decorator checks that at import, and that every device op has one. Before a handler runs, `execute`
converts every argument by its wire type (a wrong type is cudaErrorInvalidValue) and resolves `stream`, `event` and
`func` handles to backend objects through the session's tables. A handler returns the op's result, or for a
PAYLOAD_OUT op the payload bytes.

Everything here runs on the (session, device) ordered worker thread. `execute` applies the rules of protocol.py:
- an op sent fire-and-forget (req_id 0, only ASYNC ops) gets no reply; its first failure is latched per device;
- an op flagged SYNC returns the latched error (and clears it) and carries the device's printf output;
- a sticky error (memory fault, assert, …) makes every later op on the device fail with it until DEVICE_RESET.
"""
from __future__ import annotations

import inspect
import logging
from typing import Any, Callable

from pyvgpu import protocol as P
from pyvgpu.protocol import LIMIT_NAMES, OPS, OP_BY_NAME, ERROR_CODES, ERROR_NAMES, OpSpec
from pyvgpu_daemon.backends.base import Backend, DeviceContext
from pyvgpu_daemon.compress import Compressed, CorruptPayload, compress_reply
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.session import DeviceState, ModuleEntry, Session, destroy_blas_handles, release_device

log = logging.getLogger("pyvgpu.daemon")

MAX_PARAM_BYTES = 1 << 20         # kernel parameter buffer (CUDA's own limit is 32 KiB)
MAX_MODULE_BYTES = 1 << 30
ERR_UNKNOWN = ERROR_CODES["cudaErrorUnknown"]
KERNEL_ATTR_SET = frozenset(P.KERNEL_ATTR_KEYS)


class Outcome:
    """What a job hands back to the loop: None for fire-and-forget, else the reply fields. (Slotted, not a frozen
    dataclass: one is made per request.) event_times: the reply's sixth field (event_times.py); a payload compressed
    by `codec` (compress.py) has raw_len bytes once decoded."""
    __slots__ = ("err", "result", "payload", "stdout", "event_times", "raw_len", "codec")

    def __init__(self, err: int, result: Any = None, payload: bytes = b"", stdout: bytes | None = None,
                 event_times: list[float] | None = None, raw_len: int = 0, codec: int = 0) -> None:
        self.err = err
        self.result = result
        self.payload = payload
        self.stdout = stdout
        self.event_times = event_times
        self.raw_len = raw_len
        self.codec = codec


class Call:
    """What a handler gets besides its arguments: the session, its state of this device, the request payload.
    (A slotted class, not a frozen dataclass: one is made per op, and a frozen dataclass's __init__ costs ~1 µs.)"""
    __slots__ = ("session", "st", "payload")

    def __init__(self, session: Session, st: DeviceState, payload: bytes | bytearray | memoryview) -> None:
        self.session = session
        self.st = st
        self.payload = payload

    @property
    def ctx(self) -> DeviceContext:
        assert self.st.ctx is not None
        return self.st.ctx


# ---------------------------------------------------------------------------------------------- argument types
def _int_in(lo: int, hi: int, what: str) -> Callable[[str, Any], int]:
    def check(name: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise CudaError("cudaErrorInvalidValue", f"argument {name}={v!r:.40} is not {what}")
        return v
    return check


def _f64(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CudaError("cudaErrorInvalidValue", f"argument {name}={v!r:.40} is not a number")
    return float(v)


def _dim3(name: str, v: Any) -> tuple[int, int, int]:
    if type(v) is list and len(v) == 3:      # what msgpack decodes: checked without a generator (one per launch)
        x, y, z = v
        if type(x) is int and type(y) is int and type(z) is int and 0 <= x <= U32_MAX and 0 <= y <= U32_MAX \
                and 0 <= z <= U32_MAX:
            return x, y, z
    if not isinstance(v, (list, tuple)) or len(v) != 3 or \
            not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < (1 << 32) for x in v):
        raise CudaError("cudaErrorInvalidValue", f"argument {name}={v!r:.60} is not a dim3 [x, y, z]")
    return int(v[0]), int(v[1]), int(v[2])


def _of(kind: type, what: str) -> Callable[[str, Any], Any]:
    def check(name: str, v: Any) -> Any:
        if not isinstance(v, kind):
            raise CudaError("cudaErrorInvalidValue", f"argument {name}={v!r:.40} is not {what}")
        return v
    return check


U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
_u64 = _int_in(0, U64_MAX, "a u64")
# Wire type -> conversion of the received value (protocol.ARG_TYPES; dev is the server's, map HELLO's).
ARG_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "u64": _u64, "ptr": _u64, "size": _u64, "handle": _u64, "stream": _u64, "event": _u64, "func": _u64,
    "blas": _u64,
    "i64": _int_in(-(1 << 63), (1 << 63) - 1, "an i64"), "u32": _int_in(0, (1 << 32) - 1, "a u32"),
    "i32": _int_in(-(1 << 31), (1 << 31) - 1, "an i32"), "f64": _f64, "dim3": _dim3,
    "bytes": _of(bytes, "bytes"), "str": _of(str, "a string"),
}
# Handle kinds resolved through the session's tables before the handler sees them.
RESOLVE: dict[str, Callable[[DeviceState, int], Any]] = {
    "stream": DeviceState.stream, "event": DeviceState.event, "func": DeviceState.function,
    "blas": DeviceState.blas,
}
assert set(ARG_CHECKS) | {"dev", "map"} == P.ARG_TYPES, "a wire type without a conversion"
# Per device op: (name, conversion, resolver or None) of each argument after `dev`, computed once.
_CONVERSIONS: dict[int, tuple[tuple[str, Callable[[str, Any], Any], Any], ...]] = {
    spec.code: tuple((a.name, ARG_CHECKS[a.type], RESOLVE.get(a.type)) for a in spec.args[1:])
    for spec in OPS if spec.device}
_DEVICE_RESET = OP_BY_NAME["DEVICE_RESET"].code


def convert_args(spec: OpSpec, st: DeviceState, args: list[Any]) -> dict[str, Any]:
    """The arguments after `dev` by name, converted and resolved (arity was checked by the server)."""
    return dict(zip(spec.arg_names[1:], _positional(spec, st, args)))


def _positional(spec: OpSpec, st: DeviceState, args: list[Any]) -> list[Any]:
    """The arguments after `dev` in spec order, converted and resolved."""
    out = []
    for (name, check, resolve), v in zip(_CONVERSIONS[spec.code], args[1:]):
        if check is _u64 and type(v) is int and 0 <= v <= U64_MAX:
            pass                          # the common case without a call (type(): bool is not a u64)
        else:
            v = check(name, v)
        out.append(resolve(st, v) if resolve is not None else v)
    return out


# ---------------------------------------------------------------------------------------------- registration
HANDLERS: dict[str, Callable[..., Any]] = {}
BY_KEYWORD: set[str] = set()     # handlers whose arguments are keyword-only (generated ones, e.g. cuBLAS families)


def handler(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers fn as the handler of op `name`; its parameters after the Call must be the spec's argument names."""
    spec = OP_BY_NAME[name]

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn).parameters
        params = list(sig)[1:]
        if any(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.values()):
            BY_KEYWORD.add(name)
        if params != list(spec.arg_names[1:]):
            raise TypeError(f"handler {fn.__name__} of {name} takes {params}, the spec says {list(spec.arg_names[1:])}")
        if name in HANDLERS:
            raise TypeError(f"two handlers for {name}")
        HANDLERS[name] = fn
        return fn
    return register


def _check_2d(pitch: int, width: int, height: int) -> int:
    """Bytes spanned by a pitched region; width > pitch is CUDA's cudaErrorInvalidPitchValue."""
    if height > 1 and width > pitch:
        raise CudaError("cudaErrorInvalidPitchValue", f"width {width} exceeds pitch {pitch}")
    return 0 if width == 0 or height == 0 else pitch * (height - 1) + width


# ---------------------------------------------------------------------------------------------- memory
@handler("MEM_GET_INFO")
def mem_get_info(c: Call) -> list[int]:
    free, total = c.st.mem_view(*c.ctx.mem_info())     # a session with a memory limit sees it as the total
    return [int(free), int(total)]


@handler("MALLOC")
def malloc(c: Call, size: int) -> int:
    if size == 0:
        return 0                          # cudaMalloc(&p, 0) succeeds with a NULL pointer
    c.st.check_quota(size, "cudaMalloc")
    ptr = c.ctx.malloc(size)
    c.st.add_allocation(ptr, size)
    return ptr


@handler("FREE")
def free(c: Call, ptr: int) -> None:
    if ptr == 0:
        return                            # cudaFree(NULL) is a no-op
    if ptr not in c.st.allocations:
        raise CudaError("cudaErrorInvalidValue", f"free of {ptr:#x}: not an allocation of this session")
    c.ctx.free(ptr)
    c.st.remove_allocation(ptr)
    c.st.managed.remove(ptr)


@handler("MEMCPY_HTOD")
def memcpy_htod(c: Call, dst: int, stream: Any) -> None:
    if c.payload:
        c.st.check_range(dst, len(c.payload), "memcpy HtoD destination")
        c.ctx.memcpy_htod(dst, c.payload, stream)


@handler("MEMCPY_DTOH")
def memcpy_dtoh(c: Call, src: int, size: int, stream: Any) -> bytes:
    if size == 0:
        return b""
    c.st.check_range(src, size, "memcpy DtoH source")
    return c.ctx.memcpy_dtoh(src, size, stream)


@handler("MEMCPY_DTOH_ASYNC")
def memcpy_dtoh_async(c: Call, src: int, size: int, stream: Any) -> bytes:
    # DETACHED: the same copy, but the client does not wait; a failure is latched for its next synchronizing call
    return memcpy_dtoh(c, src, size, stream)


@handler("MEMCPY_DTOD")
def memcpy_dtod(c: Call, dst: int, src: int, size: int, stream: Any) -> None:
    if size:
        c.st.check_range(src, size, "memcpy DtoD source")
        c.st.check_range(dst, size, "memcpy DtoD destination")
        c.ctx.memcpy_dtod(dst, src, size, stream)
        c.st.bytes_dtod += size


@handler("MEMCPY2D_HTOD")
def memcpy2d_htod(c: Call, dst: int, dpitch: int, width: int, height: int, stream: Any) -> None:
    span = _check_2d(dpitch, width, height)
    if len(c.payload) != width * height:
        raise CudaError("cudaErrorInvalidValue", f"2D payload of {len(c.payload)} B, expected {width}x{height}")
    if span:
        c.st.check_range(dst, span, "memcpy2D HtoD destination")
        c.ctx.memcpy2d_htod(dst, dpitch, width, height, c.payload, stream)


@handler("MEMCPY2D_DTOH")
def memcpy2d_dtoh(c: Call, src: int, spitch: int, width: int, height: int, stream: Any) -> bytes:
    span = _check_2d(spitch, width, height)
    if not span:
        return b""
    c.st.check_range(src, span, "memcpy2D DtoH source")
    return c.ctx.memcpy2d_dtoh(src, spitch, width, height, stream)


@handler("MEMCPY2D_DTOD")
def memcpy2d_dtod(c: Call, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                  stream: Any) -> None:
    dspan = _check_2d(dpitch, width, height)
    sspan = _check_2d(spitch, width, height)
    if dspan:
        c.st.check_range(src, sspan, "memcpy2D DtoD source")
        c.st.check_range(dst, dspan, "memcpy2D DtoD destination")
        c.ctx.memcpy2d_dtod(dst, dpitch, src, spitch, width, height, stream)
        c.st.bytes_dtod += width * height


@handler("MEMSET")
def memset(c: Call, ptr: int, value: int, size: int, stream: Any) -> None:
    if size:
        c.st.check_range(ptr, size, "memset")
        c.ctx.memset(ptr, value & 0xFF, size, stream)


@handler("MEMSET2D")
def memset2d(c: Call, ptr: int, pitch: int, value: int, width: int, height: int, stream: Any) -> None:
    span = _check_2d(pitch, width, height)
    if span:
        c.st.check_range(ptr, span, "memset2D")
        c.ctx.memset2d(ptr, pitch, value & 0xFF, width, height, stream)


@handler("MEMSET_ELEMS")
def memset_elems(c: Call, ptr: int, pitch: int, value: int, elem: int, width: int, height: int,
                 stream: Any) -> None:
    if elem not in (1, 2, 4):
        raise CudaError("cudaErrorInvalidValue", f"memset element of {elem} bytes")
    if value >> (8 * elem):
        raise CudaError("cudaErrorInvalidValue", f"memset value {value:#x} does not fit {elem} bytes")
    if height > 1 and pitch % elem:
        raise CudaError("cudaErrorInvalidValue", f"pitch {pitch} is not a multiple of the {elem}-byte element")
    span = _check_2d(pitch, width * elem, height)
    if span:
        c.st.check_range(ptr, span, "memset")
        c.ctx.memset_elems(ptr, pitch, value, elem, width, height, stream)


# ---------------------------------------------------------------------------------------------- modules, launches
@handler("MODULE_LOAD")
def module_load(c: Call, module_id: int) -> dict[str, Any]:
    st = c.st
    entry = st.modules.get(module_id)
    if entry is not None:
        # A client may ship the same registration twice (e.g. after losing a reply); answer the same ids.
        return entry.reply
    if not c.payload:
        raise CudaError("cudaErrorInvalidValue", "module load without an image")
    if len(c.payload) > MAX_MODULE_BYTES:
        raise CudaError("cudaErrorInvalidValue", f"module image of {len(c.payload)} bytes is too large")
    loaded = c.ctx.module_load(c.payload)
    new_vars = sum(int(size) for addr, size in loaded.variables.values()
                   if int(addr) not in st.variables and int(addr) not in st.allocations)
    try:
        st.check_quota(new_vars, f"module {module_id} globals")
    except CudaError:
        c.ctx.module_unload(loaded)
        raise
    kernels: dict[str, Any] = {}
    ids: list[int] = []
    for name, k in loaded.kernels.items():
        unknown = set(k.attrs) - KERNEL_ATTR_SET
        if unknown:   # a backend bug: the client would not understand these keys
            raise CudaError("cudaErrorUnknown", f"kernel {name}: attributes {sorted(unknown)} are not in the spec")
        fid = st.new_handle()
        st.functions[fid] = (loaded, k)
        ids.append(fid)
        kernels[name] = {P.KERNEL_ID: fid, P.KERNEL_PARAMS: [[int(o), int(sz)] for o, sz in k.params],
                         P.KERNEL_ATTRS: {str(key): int(v) for key, v in k.attrs.items()}}
    for addr, size in loaded.variables.values():
        st.add_variable(int(addr), int(size))
    reply = {P.MODULE_KERNELS: kernels,
             P.MODULE_VARS: {n: [int(addr), int(size)] for n, (addr, size) in loaded.variables.items()}}
    st.modules[module_id] = ModuleEntry(loaded, reply, ids)
    log.info("%s: module %d loaded: %d kernels, %d variables", c.session.tag(st.ordinal), module_id,
             len(kernels), len(loaded.variables))
    return reply


@handler("MODULE_UNLOAD")
def module_unload(c: Call, module_id: int) -> None:
    st = c.st
    entry = st.modules.pop(module_id, None)
    if entry is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"unload of unknown module {module_id}")
    for fid in entry.function_ids:
        st.functions.pop(fid, None)
    for addr, _ in entry.loaded.variables.values():
        st.remove_variable(int(addr))
    c.ctx.module_unload(entry.loaded)
    log.info("%s: module %d unloaded", c.session.tag(st.ordinal), module_id)


def check_params(c: Call, kernel: Any) -> None:
    """A launch's parameter buffer (the payload): at most MAX_PARAM_BYTES, at least what the layout needs."""
    if len(c.payload) > MAX_PARAM_BYTES:
        raise CudaError("cudaErrorInvalidValue", f"parameter buffer of {len(c.payload)} bytes")
    need = kernel.param_bytes
    if len(c.payload) < need:
        raise CudaError("cudaErrorInvalidValue",
                        f"kernel {kernel.name}: parameter buffer has {len(c.payload)} bytes, layout needs {need}")


@handler("LAUNCH")
def launch(c: Call, func: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shmem: int,
           stream: Any) -> None:
    module, kernel = func
    check_params(c, kernel)
    c.ctx.launch(module, kernel, grid, block, shmem, c.payload, stream)


@handler("FUNC_SET_ATTR")
def func_set_attr(c: Call, func: Any, attr: int, value: int) -> None:
    module, kernel = func
    if not -(1 << 31) <= value < (1 << 31):
        raise CudaError("cudaErrorInvalidValue", f"{kernel.name}: attribute value {value} is not an int")
    c.ctx.func_set_attr(module, kernel, attr, value)


# ---------------------------------------------------------------------------------------------- streams, events
def _add_handle(st: DeviceState, table: dict[int, Any], obj: Any) -> int:
    """A new handle for obj (a stream or event) in table."""
    h = st.new_handle()
    table[h] = obj
    return h


def lookup_handle(table: dict[int, Any], h: int, what: str) -> Any:
    """The object of handle h; cudaErrorInvalidResourceHandle for an unknown handle."""
    obj = table.get(h)
    if obj is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"unknown {what} {h:#x}")
    return obj


def _pop_handle(table: dict[int, Any], h: int, what: str) -> Any:
    """Remove and return the object of handle h; cudaErrorInvalidResourceHandle for an unknown handle."""
    obj = table.pop(h, None)
    if obj is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"destroy of unknown {what} {h:#x}")
    return obj


@handler("STREAM_CREATE")
def stream_create(c: Call, flags: int, priority: int) -> int:
    h = _add_handle(c.st, c.st.streams, c.ctx.stream_create(flags, priority))
    c.st.add_stream(h, priority)
    return h


@handler("STREAM_DESTROY")
def stream_destroy(c: Call, stream: int) -> None:
    c.ctx.stream_destroy(_pop_handle(c.st.streams, stream, "stream"))
    c.st.stream_priority.pop(stream, None)


@handler("STREAM_SYNC")
def stream_sync(c: Call, stream: Any) -> None:
    c.ctx.stream_sync(stream)


@handler("STREAM_QUERY")
def stream_query(c: Call, stream: Any) -> None:
    if not c.ctx.stream_query(stream):
        raise CudaError("cudaErrorNotReady")


@handler("STREAM_WAIT_EVENT")
def stream_wait_event(c: Call, stream: Any, event: Any, flags: int) -> None:
    c.ctx.stream_wait_event(stream, event, flags)


@handler("EVENT_CREATE")
def event_create(c: Call, flags: int) -> int:
    ev = c.ctx.event_create(flags)
    h = _add_handle(c.st, c.st.events, ev)
    c.st.event_times.created(h, ev)
    return h


@handler("EVENT_DESTROY")
def event_destroy(c: Call, event: int) -> None:
    ev = _pop_handle(c.st.events, event, "event")
    c.st.event_times.forget(event, ev)
    c.ctx.event_destroy(ev)


@handler("EVENT_RECORD")
def event_record(c: Call, event: Any, stream: Any) -> None:
    c.ctx.event_record(event, stream)
    c.st.event_times.recorded(event)         # its time travels with a later reply (event_times.py)


@handler("EVENT_SYNC")
def event_sync(c: Call, event: Any) -> None:
    c.ctx.event_sync(event)


@handler("EVENT_QUERY")
def event_query(c: Call, event: Any) -> None:
    if not c.ctx.event_query(event):
        raise CudaError("cudaErrorNotReady")


@handler("EVENT_ELAPSED")
def event_elapsed(c: Call, start: Any, end: Any) -> float:
    return float(c.ctx.event_elapsed(start, end))


# ---------------------------------------------------------------------------------------------- device
@handler("DEVICE_SYNC")
def device_sync(c: Call) -> None:
    c.ctx.synchronize()


@handler("DEVICE_RESET")
def device_reset(c: Call) -> None:
    # cudaDeviceReset destroys every allocation, module, stream, event and cuBLAS handle of the context and clears
    # errors. Like the runtime's, which makes the next primary context only when a call needs one, the reset succeeds
    # once the old context is gone: a backend that cannot make a new one now (a real driver refusing new contexts
    # of a process after a kernel fault) leaves none, and the next op opens one and answers what the backend says.
    st = c.st
    try:
        if st.ctx is not None:
            destroy_blas_handles(st)
            for entry in list(st.modules.values()):
                try:
                    st.ctx.module_unload(entry.loaded)
                except CudaError:
                    pass
            st.ctx.reset()
    except CudaError as exc:
        if not exc.sticky:
            raise
        st.ctx = None
        log.warning("%s: device reset: no new context now (%s); the next op tries again", c.session.tag(st.ordinal),
                    exc)
    finally:
        st.clear_tables()                       # nothing of the tables refers to anything alive
    log.info("%s: device reset", c.session.tag(st.ordinal))


def _limit(limit: int) -> int:
    if limit not in LIMIT_NAMES:
        raise CudaError("cudaErrorUnsupportedLimit", f"limit {limit} is not a cudaLimit")
    return limit


@handler("DEVICE_SET_LIMIT")
def device_set_limit(c: Call, limit: int, value: int) -> None:
    _limit(limit)
    if value < 0:
        raise CudaError("cudaErrorInvalidValue", f"{LIMIT_NAMES[limit]} = {value}")
    c.ctx.set_limit(limit, value)


@handler("DEVICE_GET_LIMIT")
def device_get_limit(c: Call, limit: int) -> int:
    return int(c.ctx.get_limit(_limit(limit)))


from pyvgpu_daemon.handlers import blas  # noqa: E402,F401  (registers the cuBLAS ops' handlers)
from pyvgpu_daemon.handlers import blaslt  # noqa: E402,F401  (registers cuBLASLt's LT_MATMUL)
# The handlers of the runtime-feature ops (300-399) live in their own modules; importing them registers them.
from pyvgpu_daemon.handlers import array, coherence, graph, managed, peer  # noqa: E402,F401
from pyvgpu_daemon.handlers import vmm  # noqa: E402,F401  (registers the virtual memory management ops)
from pyvgpu_daemon.handlers import emufeat  # noqa: E402,F401  (the emulator features' ops, 380-399)

# Every device op of the spec has exactly one handler (checked at import so a new op cannot be forgotten).
_device_ops = {op.name for op in OPS if op.device}
assert _device_ops == set(HANDLERS), f"handler table out of step with protocol.OPS: {_device_ops ^ set(HANDLERS)}"


# ---------------------------------------------------------------------------------------------- the job
def execute(session: Session, st: DeviceState, backend: Backend, spec: OpSpec, args: list[Any], payload: bytes,
            fire_and_forget: bool) -> Outcome | None:
    """Run one device op on the worker thread and apply the deferred/sticky error rules."""
    if session.closing:
        return None                       # the client is gone: skip queued work, cleanup follows
    st.ops += 1
    detached = spec.detached
    if not fire_and_forget and not detached:
        st.waited += 1                    # the client waits for this one's reply (a blocking round trip)
    result: Any = None
    out = b""
    err = 0
    if st.sticky and spec.code != _DEVICE_RESET:
        err = st.sticky
    else:
        try:
            if st.ctx is None and spec.code != _DEVICE_RESET:     # (a reset of no context has nothing to do)
                st.ctx = backend.open_context(st.ordinal, session.va_base, session.id)
                if st.lane is not None:
                    st.ctx.wait_scope = st.lane.waiting     # host waits give the device's turn away
                    st.ctx.turn = st.lane                   # long kernels pause for others' turns (emulator)
            if isinstance(payload, Compressed):
                payload = payload.decode()            # on this worker, never on the loop (compress.py)
            st.bytes_htod += len(payload)
            # positional where @handler found the spec's arguments in order as ordinary parameters
            if spec.name in BY_KEYWORD:
                ret = HANDLERS[spec.name](Call(session, st, payload), **convert_args(spec, st, args))
            else:
                ret = HANDLERS[spec.name](Call(session, st, payload), *_positional(spec, st, args))
            if spec.payload_out:
                out = ret or b""
                st.bytes_dtoh += len(out)
            else:
                result = ret
        except CorruptPayload as exc:
            err = ERROR_CODES["cudaErrorInvalidValue"]
            log.warning("%s: %s: %s; ending the session", session.tag(st.ordinal), spec.name, exc)
            if session.end_soon is not None:
                session.end_soon(str(exc))
        except CudaError as exc:
            err = exc.code
            if exc.sticky:
                st.sticky = exc.code
            # a session whose client is gone (its kernel cancelled): nobody to tell; its end is logged once
            level = logging.DEBUG if session.closing else logging.WARNING if exc.sticky else logging.INFO
            log.log(level, "%s: %s failed: %s%s", session.tag(st.ordinal), spec.name, exc,
                    " (sticky)" if exc.sticky else "")
        except Exception:  # noqa: BLE001 - a backend bug must cost one op, not the daemon
            err = ERR_UNKNOWN
            log.exception("%s: %s raised unexpectedly", session.tag(st.ordinal), spec.name)
    if fire_and_forget or detached:
        if err and not st.deferred:
            st.deferred = err             # a detached op's failure, too, is the next synchronizing call's
        if not detached:
            return None
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
        return Outcome(err, None, b"", stdout, times)
    if session.codecs and spec.compressible and len(out):
        wire_out, codec = compress_reply(out, session.peer_rate, session.codecs, session.compress_always)
        if codec:
            return Outcome(0, result, wire_out, stdout, times, len(out), codec)
    return Outcome(0, result, out, stdout, times)


def cleanup(session: Session, st: DeviceState) -> int:
    """Worker job run when a session ends: free everything it holds on this device. → bytes released."""
    return release_device(session, st)


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, str(code))
