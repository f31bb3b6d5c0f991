"""Device ops: one handler per op of protocol.OPS, and the deferred/sticky error rules around them.

Everything here runs on the (session, device) ordered worker thread. `execute` is the job the server submits:
it type-checks the arguments against the op's spec, runs the handler, and applies the rules of protocol.py:

- an op sent fire-and-forget (req_id 0, only ASYNC ops) gets no reply; its first failure is latched per device;
- an op flagged SYNC returns the latched error (and clears it) and carries the device's printf output;
- a sticky error (memory fault, assert, …) makes every later op on the device fail with it until DEVICE_RESET.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from pyvgpu.protocol import LIMIT_NAMES, OPS, ERROR_CODES, ERROR_NAMES, OpFlag, OpSpec
from pyvgpu_daemon.backends.base import Backend
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.session import DeviceState, ModuleEntry, Session, release_device

log = logging.getLogger("pyvgpu.daemon")

U64 = (1 << 64) - 1
MAX_PARAM_BYTES = 1 << 20         # kernel parameter buffer (CUDA's own limit is 32 KiB)
MAX_MODULE_BYTES = 1 << 30
ERR_UNKNOWN = ERROR_CODES["cudaErrorUnknown"]


@dataclass(frozen=True)
class Outcome:
    """What a job hands back to the loop: None for fire-and-forget, else the reply fields."""
    err: int
    result: Any = None
    payload: bytes = b""
    stdout: bytes | None = None


# ---------------------------------------------------------------------------------------------- argument checks
def _u64(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= U64:
        raise CudaError("cudaErrorInvalidValue", f"argument {name}={v!r:.40} is not a u64")
    return v


def _int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v <= U64:
        raise CudaError("cudaErrorInvalidValue", f"argument {name}={v!r:.40} is not an integer")
    return v


def _dim3(name: str, v: Any) -> tuple[int, int, int]:
    if not isinstance(v, (list, tuple)) or len(v) != 3 or \
            not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < (1 << 32) for x in v):
        raise CudaError("cudaErrorInvalidValue", f"argument {name}={v!r:.60} is not a dim3 [x, y, z]")
    return int(v[0]), int(v[1]), int(v[2])


ARG_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "value": _int, "priority": _int, "grid": _dim3, "block": _dim3, "attr": _int, "limit": _int,
}


def check_args(spec: OpSpec, args: list[Any]) -> list[Any]:
    """Args after `dev`, converted; a wrong type is cudaErrorInvalidValue (arity was checked by the server)."""
    return [ARG_CHECKS.get(name, _u64)(name, v) for name, v in zip(spec.args[1:], args[1:])]


def _check_2d(pitch: int, width: int, height: int) -> int:
    """Bytes spanned by a pitched region; width > pitch is CUDA's cudaErrorInvalidPitchValue."""
    if height > 1 and width > pitch:
        raise CudaError("cudaErrorInvalidPitchValue", f"width {width} exceeds pitch {pitch}")
    return 0 if width == 0 or height == 0 else pitch * (height - 1) + width


# ---------------------------------------------------------------------------------------------- handlers
# Signature: (session, state, args-after-dev, payload) -> (result, out_payload)
Handler = Callable[[Session, DeviceState, list[Any], bytes], tuple[Any, bytes]]


def op_mem_get_info(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    free, total = st.ctx.mem_info()
    return [int(free), int(total)], b""


def op_malloc(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    (size,) = a
    if size == 0:
        return 0, b""                     # cudaMalloc(&p, 0) succeeds with a NULL pointer
    ptr = st.ctx.malloc(size)
    st.add_allocation(ptr, size)
    return ptr, b""


def op_free(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    (ptr,) = a
    if ptr == 0:
        return None, b""                  # cudaFree(NULL) is a no-op
    if ptr not in st.allocations:
        raise CudaError("cudaErrorInvalidValue", f"free of {ptr:#x}: not an allocation of this session")
    st.ctx.free(ptr)
    st.remove_allocation(ptr)
    return None, b""


def op_memcpy_htod(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    dst, stream = a
    stream_obj = st.stream(stream)
    if p:
        st.check_range(dst, len(p), "memcpy HtoD destination")
        st.ctx.memcpy_htod(dst, p, stream_obj)
    return None, b""


def op_memcpy_dtoh(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    src, size, stream = a
    stream_obj = st.stream(stream)
    if size == 0:
        return None, b""
    st.check_range(src, size, "memcpy DtoH source")
    return None, st.ctx.memcpy_dtoh(src, size, stream_obj)


def op_memcpy_dtod(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    dst, src, size, stream = a
    stream_obj = st.stream(stream)
    if size:
        st.check_range(src, size, "memcpy DtoD source")
        st.check_range(dst, size, "memcpy DtoD destination")
        st.ctx.memcpy_dtod(dst, src, size, stream_obj)
    return None, b""


def op_memcpy2d_htod(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    dst, dpitch, width, height, stream = a
    stream_obj = st.stream(stream)
    span = _check_2d(dpitch, width, height)
    if len(p) != width * height:
        raise CudaError("cudaErrorInvalidValue", f"2D payload of {len(p)} B, expected {width}x{height}")
    if span:
        st.check_range(dst, span, "memcpy2D HtoD destination")
        st.ctx.memcpy2d_htod(dst, dpitch, width, height, p, stream_obj)
    return None, b""


def op_memcpy2d_dtoh(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    src, spitch, width, height, stream = a
    stream_obj = st.stream(stream)
    span = _check_2d(spitch, width, height)
    if not span:
        return None, b""
    st.check_range(src, span, "memcpy2D DtoH source")
    return None, st.ctx.memcpy2d_dtoh(src, spitch, width, height, stream_obj)


def op_memcpy2d_dtod(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    dst, dpitch, src, spitch, width, height, stream = a
    stream_obj = st.stream(stream)
    dspan = _check_2d(dpitch, width, height)
    sspan = _check_2d(spitch, width, height)
    if dspan:
        st.check_range(src, sspan, "memcpy2D DtoD source")
        st.check_range(dst, dspan, "memcpy2D DtoD destination")
        st.ctx.memcpy2d_dtod(dst, dpitch, src, spitch, width, height, stream_obj)
    return None, b""


def op_memset(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    ptr, value, size, stream = a
    stream_obj = st.stream(stream)
    if size:
        st.check_range(ptr, size, "memset")
        st.ctx.memset(ptr, value & 0xFF, size, stream_obj)
    return None, b""


def op_memset2d(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    ptr, pitch, value, width, height, stream = a
    stream_obj = st.stream(stream)
    span = _check_2d(pitch, width, height)
    if span:
        st.check_range(ptr, span, "memset2D")
        st.ctx.memset2d(ptr, pitch, value & 0xFF, width, height, stream_obj)
    return None, b""


def op_module_load(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    (module_id,) = a
    entry = st.modules.get(module_id)
    if entry is not None:
        # A client may ship the same registration twice (e.g. after losing a reply); answer the same ids.
        return entry.reply, b""
    if not p:
        raise CudaError("cudaErrorInvalidValue", "module load without an image")
    if len(p) > MAX_MODULE_BYTES:
        raise CudaError("cudaErrorInvalidValue", f"module image of {len(p)} bytes is too large")
    loaded = st.ctx.module_load(p)
    kernels: dict[str, Any] = {}
    ids: list[int] = []
    for name, k in loaded.kernels.items():
        fid = st.new_handle()
        st.functions[fid] = (loaded, k)
        ids.append(fid)
        kernels[name] = {"id": fid, "params": [[int(o), int(sz)] for o, sz in k.params],
                         "attrs": {str(key): int(v) for key, v in k.attrs.items()}}
    for addr, size in loaded.variables.values():
        st.add_variable(int(addr), int(size))
    reply = {"kernels": kernels, "vars": {n: [int(addr), int(size)] for n, (addr, size) in loaded.variables.items()}}
    st.modules[module_id] = ModuleEntry(loaded, reply, ids)
    log.info("%s: module %d loaded: %d kernels, %d variables", s.tag(st.ordinal), module_id,
             len(kernels), len(loaded.variables))
    return reply, b""


def op_launch(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    func_id, grid, block, shmem, stream = a
    module, kernel = st.function(func_id)
    stream_obj = st.stream(stream)
    if len(p) > MAX_PARAM_BYTES:
        raise CudaError("cudaErrorInvalidValue", f"parameter buffer of {len(p)} bytes")
    need = max((o + sz for o, sz in kernel.params), default=0)
    if len(p) < need:
        raise CudaError("cudaErrorInvalidValue",
                        f"kernel {kernel.name}: parameter buffer has {len(p)} bytes, layout needs {need}")
    st.ctx.launch(module, kernel, grid, block, shmem, p, stream_obj)
    return None, b""


def op_func_set_attr(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    func_id, attr, value = a
    module, kernel = st.function(func_id)
    if not -(1 << 31) <= value < (1 << 31):
        raise CudaError("cudaErrorInvalidValue", f"{kernel.name}: attribute value {value} is not an int")
    st.ctx.func_set_attr(module, kernel, attr, value)
    return None, b""


def _add_handle(st: DeviceState, table: dict[int, Any], obj: Any) -> int:
    """A new handle for obj (a stream or event) in table."""
    h = st.new_handle()
    table[h] = obj
    return h


def _pop_handle(table: dict[int, Any], h: int, what: str) -> Any:
    """Remove and return the object of handle h; cudaErrorInvalidResourceHandle for an unknown handle."""
    obj = table.pop(h, None)
    if obj is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"destroy of unknown {what} {h:#x}")
    return obj


def op_stream_create(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    flags, priority = a
    return _add_handle(st, st.streams, st.ctx.stream_create(flags, priority)), b""


def op_stream_destroy(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    (h,) = a
    st.ctx.stream_destroy(_pop_handle(st.streams, h, "stream"))
    return None, b""


def op_stream_sync(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    st.ctx.stream_sync(st.stream(a[0]))
    return None, b""


def op_stream_query(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    if not st.ctx.stream_query(st.stream(a[0])):
        raise CudaError("cudaErrorNotReady")
    return None, b""


def op_stream_wait_event(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    stream, event, flags = a
    st.ctx.stream_wait_event(st.stream(stream), st.event(event), flags)
    return None, b""


def op_event_create(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    return _add_handle(st, st.events, st.ctx.event_create(a[0])), b""


def op_event_destroy(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    (h,) = a
    st.ctx.event_destroy(_pop_handle(st.events, h, "event"))
    return None, b""


def op_event_record(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    event, stream = a
    st.ctx.event_record(st.event(event), st.stream(stream))
    return None, b""


def op_event_sync(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    st.ctx.event_sync(st.event(a[0]))
    return None, b""


def op_event_query(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    if not st.ctx.event_query(st.event(a[0])):
        raise CudaError("cudaErrorNotReady")
    return None, b""


def op_event_elapsed(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    start, end = a
    return float(st.ctx.event_elapsed(st.event(start), st.event(end))), b""


def op_device_sync(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    st.ctx.synchronize()
    return None, b""


def op_device_reset(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    # cudaDeviceReset destroys every allocation, module, stream and event of the context and clears errors.
    for entry in list(st.modules.values()):
        try:
            st.ctx.module_unload(entry.loaded)
        except CudaError:
            pass
    st.ctx.reset()
    st.clear_tables()
    log.info("%s: device reset", s.tag(st.ordinal))
    return None, b""


def _limit(limit: int) -> int:
    if limit not in LIMIT_NAMES:
        raise CudaError("cudaErrorUnsupportedLimit", f"limit {limit} is not a cudaLimit")
    return limit


def op_device_set_limit(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    limit, value = a
    _limit(limit)
    if value < 0:
        raise CudaError("cudaErrorInvalidValue", f"{LIMIT_NAMES[limit]} = {value}")
    st.ctx.set_limit(limit, value)
    return None, b""


def op_device_get_limit(s: Session, st: DeviceState, a: list[Any], p: bytes) -> tuple[Any, bytes]:
    (limit,) = a
    return int(st.ctx.get_limit(_limit(limit))), b""


HANDLERS: dict[str, Handler] = {
    "MEM_GET_INFO": op_mem_get_info, "MALLOC": op_malloc, "FREE": op_free,
    "MEMCPY_HTOD": op_memcpy_htod, "MEMCPY_DTOH": op_memcpy_dtoh, "MEMCPY_DTOD": op_memcpy_dtod,
    "MEMCPY2D_HTOD": op_memcpy2d_htod, "MEMCPY2D_DTOH": op_memcpy2d_dtoh, "MEMCPY2D_DTOD": op_memcpy2d_dtod,
    "MEMSET": op_memset, "MEMSET2D": op_memset2d, "MODULE_LOAD": op_module_load, "LAUNCH": op_launch,
    "STREAM_CREATE": op_stream_create, "STREAM_DESTROY": op_stream_destroy, "STREAM_SYNC": op_stream_sync,
    "STREAM_QUERY": op_stream_query, "STREAM_WAIT_EVENT": op_stream_wait_event,
    "EVENT_CREATE": op_event_create, "EVENT_DESTROY": op_event_destroy, "EVENT_RECORD": op_event_record,
    "EVENT_SYNC": op_event_sync, "EVENT_QUERY": op_event_query, "EVENT_ELAPSED": op_event_elapsed,
    "DEVICE_SYNC": op_device_sync, "DEVICE_RESET": op_device_reset, "FUNC_SET_ATTR": op_func_set_attr,
    "DEVICE_SET_LIMIT": op_device_set_limit, "DEVICE_GET_LIMIT": op_device_get_limit,
}

# Every device op of the spec has exactly one handler (checked at import so a new op cannot be forgotten).
_device_ops = {op.name for op in OPS if not op.flags & OpFlag.NO_DEVICE}
assert _device_ops == set(HANDLERS), f"handler table out of step with protocol.OPS: {_device_ops ^ set(HANDLERS)}"


# ---------------------------------------------------------------------------------------------- the job
def execute(session: Session, st: DeviceState, backend: Backend, spec: OpSpec, args: list[Any], payload: bytes,
            fire_and_forget: bool) -> Outcome | None:
    """Run one device op on the worker thread and apply the deferred/sticky error rules."""
    if session.closing:
        return None                       # the client is gone: skip queued work, cleanup follows
    st.ops += 1
    result: Any = None
    out = b""
    err = 0
    if st.sticky and spec.name != "DEVICE_RESET":
        err = st.sticky
    else:
        try:
            if st.ctx is None:
                st.ctx = backend.open_context(st.ordinal, session.va_base, session.id)
            result, out = HANDLERS[spec.name](session, st, check_args(spec, args), payload)
        except CudaError as exc:
            err = exc.code
            if exc.sticky:
                st.sticky = exc.code
            level = logging.WARNING if exc.sticky else logging.INFO
            log.log(level, "%s: %s failed: %s%s", session.tag(st.ordinal), spec.name, exc,
                    " (sticky)" if exc.sticky else "")
        except Exception:  # noqa: BLE001 - a backend bug must cost one op, not the daemon
            err = ERR_UNKNOWN
            log.exception("%s: %s raised unexpectedly", session.tag(st.ordinal), spec.name)
    if fire_and_forget:
        if err and not st.deferred:
            st.deferred = err
        return None
    stdout = None
    if spec.flags & OpFlag.SYNC:
        if st.deferred:
            # The earlier asynchronous failure is what the synchronizing call reports, as on a real GPU.
            err = st.deferred
            st.deferred = 0
        if st.ctx is not None:
            stdout = st.ctx.take_stdout() or None
    if err:
        return Outcome(err, None, b"", stdout)
    return Outcome(0, result, out, stdout)


def cleanup(session: Session, st: DeviceState) -> int:
    """Worker job run when a session ends: free everything it holds on this device. → bytes released."""
    return release_device(session, st)


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, str(code))
