"""The registry of device-op handlers: what a handler gets (Call), how its arguments arrive (each converted by its
wire type and, for handle types, resolved through the session's tables) and how it is registered.

A handler takes a `Call` and the op's arguments after `dev`, named exactly as the spec line names them; `@handler`
checks that at import. A handler generated from a table (the cuBLAS families, cuBLASLt) takes them all by keyword
and registers with `generated`. Conversion: a wrong type is cudaErrorInvalidValue; `stream`, `event`, `func` and
`blas` handles become backend objects (unknown: cudaErrorInvalidResourceHandle, or cudaErrorInvalidDeviceFunction).
The handlers themselves live in one module per feature (memory.py, modules.py, streams.py, device.py, array.py, ...);
the package imports them all and checks that every device op of the spec has exactly one.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from pyvgpu import protocol as P
from pyvgpu.protocol import OP_BY_NAME, OPS, OpSpec
from pyvgpu_daemon.backends.base import DeviceContext, FastOp
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.session import DeviceState, Session


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


def convert_args(spec: OpSpec, st: DeviceState, args: list[Any]) -> dict[str, Any]:
    """The arguments after `dev` by name, converted and resolved (arity was checked by the server)."""
    return dict(zip(spec.arg_names[1:], positional(spec, st, args)))


def positional(spec: OpSpec, st: DeviceState, args: list[Any]) -> list[Any]:
    """The arguments after `dev` in spec order, converted and resolved."""
    out = []
    for (name, check, resolve), v in zip(_CONVERSIONS[spec.code], args[1:]):
        if check is _u64 and type(v) is int and 0 <= v <= U64_MAX:
            pass                          # the common case without a call (type(): bool is not a u64)
        else:
            v = check(name, v)
        out.append(resolve(st, v) if resolve is not None else v)
    return out


def _decoded(spec: OpSpec) -> Callable[[DeviceState, list[Any]], list[Any]]:
    """positional(spec, st, args) for arguments the compiled frame path decoded (framepath.py): libpvframe gives
    each one only when it is of its wire kind and in range (tools/gen_frame_c.py's KINDS, each within what
    ARG_CHECKS accepts for its type), so what is left is making a dim3 the tuple _dim3 makes and resolving handles.
    One expression per op from its spec line, as framepath's record builders (a loop over the arguments costs more
    than the conversion)."""
    parts = []
    for i, a in enumerate(spec.args[1:], start=1):
        if a.type == "dim3":
            parts.append(f"tuple(a[{i}])")
        elif a.type in RESOLVE:
            parts.append(f"R[{a.type!r}](st, a[{i}])")
        else:
            parts.append(f"a[{i}]")
    return eval(f"lambda st, a: [{', '.join(parts)}]", {"R": RESOLVE})   # noqa: S307 - made from the spec alone


# Per FAST op: its decoded arguments' conversion (_decoded), computed once.
DECODED: dict[int, Callable[[DeviceState, list[Any]], list[Any]]] = {
    spec.code: _decoded(spec) for spec in OPS if spec.fast}


# ---------------------------------------------------------------------------------------------- registration
Handler = Callable[..., Any]
# op code -> (its handler, whether it takes its arguments by keyword)
_TABLE: dict[int, tuple[Handler, bool]] = {}


def _register(spec: OpSpec, fn: Handler, by_keyword: bool) -> None:
    if not spec.device:
        raise TypeError(f"{spec.name} is answered by the daemon itself: a @control, not a @handler")
    if spec.code in _TABLE:
        raise TypeError(f"two handlers for {spec.name}")
    _TABLE[spec.code] = (fn, by_keyword)


def handler(name: str) -> Callable[[Handler], Handler]:
    """Registers fn as the handler of op `name`; its parameters after the Call must be the spec's argument names."""
    spec = OP_BY_NAME[name]

    def register(fn: Handler) -> Handler:
        sig = inspect.signature(fn).parameters
        params = list(sig)[1:]
        if params != list(spec.arg_names[1:]):
            raise TypeError(f"handler {fn.__name__} of {name} takes {params}, the spec says {list(spec.arg_names[1:])}")
        _register(spec, fn, any(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.values()))
        return fn
    return register


Prepare = Callable[..., "FastOp | None"]
After = Callable[[DeviceState, FastOp], None]
# FAST op code -> (its preparer, what follows its success on the session's state or None): handlers/fast.py's run
# path and the per-op handler below share both, so a run's checks are the handler's.
FAST: dict[int, tuple[Prepare, After | None]] = {}


def fast_handler(name: str, after: After | None = None) -> Callable[[Prepare], Prepare]:
    """Registers prepare(c, *args) of an op flagged FAST: it makes the op's checks (ranges, parameter layout) and
    returns the FastOp the backend runs (None: nothing to run, e.g. a zero-byte memset); `after(st, op)` is the
    bookkeeping of a success. The op's per-op handler is made from them: prepare, the FastOp's method, after."""
    spec = OP_BY_NAME[name]
    if not spec.fast:
        raise TypeError(f"{name} is not flagged FAST on its spec line")

    def register(prepare: Prepare) -> Prepare:
        params = list(inspect.signature(prepare).parameters)[1:]
        if params != list(spec.arg_names[1:]):
            raise TypeError(f"preparer {prepare.__name__} of {name} takes {params}, the spec says "
                            f"{list(spec.arg_names[1:])}")

        def run(c: Call, *args: Any) -> None:
            op = prepare(c, *args)
            if op is not None:
                getattr(c.ctx, op.method)(*op.args)
                if after is not None:
                    after(c.st, op)
        run.__name__ = prepare.__name__
        _register(spec, run, False)
        FAST[spec.code] = (prepare, after)
        return prepare
    return register


def generated(name: str, fn: Handler) -> None:
    """Registers fn(call, **arguments), made from a table (the cuBLAS families, cuBLASLt), as the handler of op
    `name`: it takes every argument of the spec line by name."""
    _register(OP_BY_NAME[name], fn, True)


def registered() -> set[str]:
    """The device ops that have a handler."""
    return {spec.name for spec in OPS if spec.code in _TABLE}


def invoke(spec: OpSpec, call: Call, values: list[Any]) -> Any:
    """Run spec's handler on converted arguments (positional(): after `dev`, in spec order)."""
    fn, by_keyword = _TABLE[spec.code]
    if by_keyword:
        return fn(call, **dict(zip(spec.arg_names[1:], values)))
    return fn(call, *values)


# ---------------------------------------------------------------------------------------------- handles
def lookup_handle(table: dict[int, Any], h: int, what: str) -> Any:
    """The object of handle h; cudaErrorInvalidResourceHandle for an unknown handle."""
    obj = table.get(h)
    if obj is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"unknown {what} {h:#x}")
    return obj


def pop_handle(table: dict[int, Any], h: int, what: str) -> Any:
    """Remove and return the object of handle h; cudaErrorInvalidResourceHandle for an unknown handle."""
    obj = table.pop(h, None)
    if obj is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"destroy of unknown {what} {h:#x}")
    return obj

