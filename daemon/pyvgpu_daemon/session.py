"""Per-connection state: the handle tables through which a client names anything on the daemon.

A client never hands the backend a raw handle or pointer: every stream, event, module and function id is looked up
in this session's tables, and every device pointer is checked against the allocations (and module variables)
this session owns. Garbage therefore becomes cudaErrorInvalidResourceHandle / cudaErrorInvalidValue here instead of
a crash in the driver, and one session can never reach another's memory.

Threading: a DeviceState is created on the loop but, from then on, mutated only by its own ordered worker thread.
The loop only reads counters from it for STATUS (plain ints / len() of dicts are safe to read under the GIL).
"""
from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pyvgpu_daemon.backends.base import DEFAULT_STREAM, Backend, DeviceContext, KernelDesc, LoadedModule
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.executor import OrderedWorker
from pyvgpu_daemon.managed import ManagedTable
from pyvgpu_daemon.peer import PeerHub

log = logging.getLogger("pyvgpu.daemon")

# cudaStreamLegacy and cudaStreamPerThread are sentinel pointer values; all three mean "the default stream" here
# (one ordered queue per device makes per-thread default streams equivalent to the legacy one).
DEFAULT_STREAM_HANDLES = frozenset({0, 1, 2})
FIRST_HANDLE = 0x1000


@dataclass
class ModuleEntry:
    loaded: LoadedModule
    reply: dict[str, Any]                 # MODULE_LOAD result, answered again if the client loads it twice
    function_ids: list[int]


@dataclass
class DeviceState:
    """One session's view of one device. Owned by `worker` after creation."""
    ordinal: int
    worker: OrderedWorker
    ctx: DeviceContext | None = None
    allocations: dict[int, int] = field(default_factory=dict)        # ptr -> size (cudaMalloc)
    variables: dict[int, int] = field(default_factory=dict)          # addr -> size (module globals)
    _starts: list[int] = field(default_factory=list)                  # sorted keys of allocations ∪ variables
    modules: dict[int, ModuleEntry] = field(default_factory=dict)    # client module id -> entry
    functions: dict[int, tuple[LoadedModule, KernelDesc]] = field(default_factory=dict)
    streams: dict[int, Any] = field(default_factory=dict)
    events: dict[int, Any] = field(default_factory=dict)
    blas_handles: dict[int, Any] = field(default_factory=dict)       # cuBLAS handles (backend objects)
    graphs: dict[int, Any] = field(default_factory=dict)             # handle -> handlers_graph.Graph
    graph_bytes: int = 0       # bytes of uploaded graphs held (bounded by protocol.MAX_GRAPH_BYTES)
    managed: ManagedTable = field(default_factory=ManagedTable)      # managed/mapped ranges (managed.py)
    arrays: dict[int, Any] = field(default_factory=dict)             # handle -> handlers_array.ArrayEntry
    textures: dict[int, Any] = field(default_factory=dict)           # texture object value -> (res type, array)
    surfaces: dict[int, int] = field(default_factory=dict)           # surface object value -> array handle
    deferred: int = 0          # first error of a fire-and-forget op, returned by the next SYNC op
    sticky: int = 0            # error that every op returns until DEVICE_RESET
    held: int = 0              # bytes of live allocations (STATUS)
    ops: int = 0
    waited: int = 0            # ops whose reply the client waited for
    _next_handle: int = FIRST_HANDLE

    # ------------------------------------------------------------------ handles
    def new_handle(self) -> int:
        h = self._next_handle
        self._next_handle += 1
        return h

    def stream(self, handle: int) -> Any:
        if handle in DEFAULT_STREAM_HANDLES:
            return DEFAULT_STREAM
        try:
            return self.streams[handle]
        except KeyError:
            raise CudaError("cudaErrorInvalidResourceHandle", f"unknown stream {handle:#x}") from None

    def event(self, handle: int) -> Any:
        try:
            return self.events[handle]
        except KeyError:
            raise CudaError("cudaErrorInvalidResourceHandle", f"unknown event {handle:#x}") from None

    def blas(self, handle: int) -> Any:
        try:
            return self.blas_handles[handle]
        except KeyError:
            raise CudaError("cudaErrorInvalidResourceHandle", f"unknown cuBLAS handle {handle:#x}") from None

    def function(self, handle: int) -> tuple[LoadedModule, KernelDesc]:
        try:
            return self.functions[handle]
        except KeyError:
            raise CudaError("cudaErrorInvalidDeviceFunction", f"unknown function id {handle:#x}") from None

    # ------------------------------------------------------------------ pointers
    def add_allocation(self, ptr: int, size: int) -> None:
        self.allocations[ptr] = size
        bisect.insort(self._starts, ptr)
        self.held += size

    def remove_allocation(self, ptr: int) -> None:
        size = self.allocations.pop(ptr)
        self._starts.pop(bisect.bisect_left(self._starts, ptr))
        self.held -= size

    def add_variable(self, addr: int, size: int) -> None:
        if addr in self.variables or addr in self.allocations:
            return
        self.variables[addr] = size
        bisect.insort(self._starts, addr)

    def remove_variable(self, addr: int) -> None:
        if self.variables.pop(addr, None) is not None:
            self._starts.pop(bisect.bisect_left(self._starts, addr))

    def check_range(self, ptr: int, size: int, what: str) -> None:
        """[ptr, ptr+size) must lie inside one allocation or module variable of this session."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i >= 0:
            start = self._starts[i]
            length = self.allocations.get(start, self.variables.get(start, 0))
            if ptr + size <= start + length and (ptr < start + length or size == 0):
                return
        raise CudaError("cudaErrorInvalidValue", f"{what}: [{ptr:#x}, +{size}) is not memory of this session")

    def clear_tables(self) -> None:
        self.allocations.clear()
        self.variables.clear()
        self._starts.clear()
        self.modules.clear()
        self.functions.clear()
        self.streams.clear()
        self.events.clear()
        self.blas_handles.clear()
        self.graphs.clear()
        self.graph_bytes = 0
        self.managed.clear()
        self.arrays.clear()
        self.textures.clear()
        self.surfaces.clear()
        self.held = 0
        self.deferred = 0
        self.sticky = 0

    def summary(self) -> dict[str, Any]:
        return {"device": self.ordinal, "memory": self.held, "allocations": len(self.allocations),
                "modules": len(self.modules), "streams": len(self.streams), "events": len(self.events),
                "blas_handles": len(self.blas_handles), "graphs": len(self.graphs), "managed": self.managed.nbytes,
                "arrays": len(self.arrays), "textures": len(self.textures) + len(self.surfaces),
                "ops": self.ops, "waited": self.waited, "sticky_error": self.sticky}


@dataclass
class Session:
    id: int
    peer: str
    backend: Backend
    ndevices: int
    client: str = ""
    va_base: int = 0
    started: float = field(default_factory=time.time)
    devices: dict[int, DeviceState] = field(default_factory=dict)
    closing: bool = False       # set when the connection ends: queued jobs are skipped, cleanup runs
    hub: PeerHub = field(default_factory=PeerHub)    # the daemon's peer-copy tickets (shared by its sessions)

    def tag(self, dev: int | None = None) -> str:
        return f"session {self.id}" + (f" dev {dev}" if dev is not None else "")

    def device(self, ordinal: int, loop: Any) -> DeviceState:
        """The state of device `ordinal` (validated by the caller), creating its worker on first use."""
        st = self.devices.get(ordinal)
        if st is None:
            st = DeviceState(ordinal, OrderedWorker(f"s{self.id}-d{ordinal}", loop))
            self.devices[ordinal] = st
        return st

    def summary(self) -> dict[str, Any]:
        devs = [st.summary() for st in sorted(self.devices.values(), key=lambda s: s.ordinal)]
        return {"id": self.id, "client": self.client, "peer": self.peer, "since": self.started,
                "va_base": self.va_base, "memory": sum(d["memory"] for d in devs), "devices": devs}


def _quietly(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - cleanup carries on
        pass


def release_device(session: Session, st: DeviceState) -> int:
    """Free everything a session holds on one device (runs on that device's worker). → bytes released."""
    held = st.held
    ctx = st.ctx
    if ctx is not None:
        destroy_blas_handles(st)
        for entry in list(st.modules.values()):
            try:
                ctx.module_unload(entry.loaded)
            except Exception as exc:  # noqa: BLE001 - cleanup carries on
                log.warning("%s: module unload during cleanup failed: %s", session.tag(st.ordinal), exc)
        for value in list(st.textures):
            _quietly(ctx.tex_destroy, value)
        for value in list(st.surfaces):
            _quietly(ctx.surf_destroy, value)
        for entry in list(st.arrays.values()):
            _quietly(ctx.array_destroy, entry.obj)
        for handle, ev in list(st.events.items()):
            try:
                ctx.event_destroy(ev)
            except Exception:  # noqa: BLE001
                pass
        for handle, s in list(st.streams.items()):
            try:
                ctx.stream_destroy(s)
            except Exception:  # noqa: BLE001
                pass
        for ptr in list(st.allocations):
            try:
                ctx.free(ptr)
            except Exception:  # noqa: BLE001
                pass
        try:
            ctx.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: context close failed: %s", session.tag(st.ordinal), exc)
        st.ctx = None
    st.clear_tables()
    return held


def destroy_blas_handles(st: DeviceState) -> None:
    """cuBLAS handles die with their session (and with a device reset): destroy them before the context goes."""
    assert st.ctx is not None
    for h in list(st.blas_handles.values()):
        try:
            st.ctx.blas_destroy(h)
        except Exception as exc:  # noqa: BLE001 - cleanup carries on
            log.warning("device %d: cuBLAS handle destroy failed: %s", st.ordinal, exc)
    st.blas_handles.clear()
