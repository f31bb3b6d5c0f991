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
from typing import Any, Callable

from pyvgpu.protocol import DEFAULT_STREAM_HANDLES
from pyvgpu_daemon.backends.base import DEFAULT_STREAM, Backend, DeviceContext, KernelDesc, LoadedModule
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.event_times import EventTimes
from pyvgpu_daemon.executor import OrderedWorker
from pyvgpu_daemon.managed import ManagedTable
from pyvgpu_daemon.peer import PeerHub
from pyvgpu_daemon.scheduler import Lane
from pyvgpu_daemon.vmm import VmmTable

log = logging.getLogger("pyvgpu.daemon")

# cudaStreamLegacy and cudaStreamPerThread are sentinel pointer values; all three (protocol.DEFAULT_STREAM_HANDLES)
# mean "the default stream" here (one ordered queue per device makes per-thread default streams equivalent to the
# legacy one).
FIRST_HANDLE = 0x1000
MAX_HANDLES = 1 << 18      # live streams + events + functions + cuBLAS handles per session and device


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
    graphs: dict[int, Any] = field(default_factory=dict)             # handle -> handlers.graph.Graph
    graph_bytes: int = 0       # bytes of uploaded graphs held (bounded by protocol.MAX_GRAPH_BYTES)
    managed: ManagedTable = field(default_factory=ManagedTable)      # managed/mapped ranges (managed.py)
    vmm: VmmTable | None = None        # virtual memory management (vmm.py, handlers/vmm.py), on first use
    arrays: dict[int, Any] = field(default_factory=dict)             # handle -> handlers.array.ArrayEntry
    textures: dict[int, Any] = field(default_factory=dict)           # texture object value -> (res type, array)
    surfaces: dict[int, int] = field(default_factory=dict)           # surface object value -> array handle
    event_times: EventTimes = field(default_factory=EventTimes)      # events to report with replies
    deferred: int = 0          # first error of a fire-and-forget op, returned by the next SYNC op
    sticky: int = 0            # error that every op returns until DEVICE_RESET
    held: int = 0              # bytes of live allocations (STATUS)
    var_bytes: int = 0         # bytes of module globals (counted against the limit with `held`)
    limit: int | None = None   # memory quota of this session on this device (sharing.py); None: none
    ops: int = 0
    waited: int = 0            # ops whose reply the client waited for
    bytes_htod: int = 0        # request payload bytes (copies, module images, kernel parameters)
    bytes_dtoh: int = 0        # reply payload bytes
    bytes_dtod: int = 0        # bytes copied on the device
    stream_priority: dict[int, int] = field(default_factory=dict)    # stream handle -> CUDA priority
    _next_handle: int = FIRST_HANDLE

    @property
    def lane(self) -> Lane | None:
        return self.worker.lane if self.worker is not None else None

    # ------------------------------------------------------------------ quota
    def check_quota(self, nbytes: int, what: str) -> None:
        """cudaErrorMemoryAllocation when `nbytes` more would exceed this session's limit on this device.
        Every op that makes the device hold memory for the session calls this first."""
        if self.limit is not None and self.held + self.var_bytes + nbytes > self.limit:
            raise CudaError("cudaErrorMemoryAllocation",
                            f"{what} of {nbytes} B exceeds the session's memory limit on device {self.ordinal}: "
                            f"{self.held + self.var_bytes} of {self.limit} B in use")

    def mem_view(self, free: int, total: int) -> tuple[int, int]:
        """cudaMemGetInfo as this session sees it: its limit as the total, what is left of it as free."""
        if self.limit is None or self.limit >= total:
            return free, total
        return min(free, max(0, self.limit - self.held - self.var_bytes)), self.limit

    def add_stream(self, handle: int, priority: int) -> None:
        """A created stream: its priority orders the session's queued work once any stream has a priority."""
        self.stream_priority[handle] = priority
        if priority and self.worker.priority_of is None:
            self.worker.priority_of = self.stream_priority.get

    # ------------------------------------------------------------------ handles
    def new_handle(self) -> int:
        if len(self.streams) + len(self.events) + len(self.functions) + len(self.blas_handles) >= MAX_HANDLES:
            raise CudaError("cudaErrorMemoryAllocation", f"{MAX_HANDLES} live streams, events, functions and cuBLAS "
                                                         f"handles: the daemon's bound per session and device")
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
        self.var_bytes += size
        bisect.insort(self._starts, addr)

    def remove_variable(self, addr: int) -> None:
        size = self.variables.pop(addr, None)
        if size is not None:
            self.var_bytes -= size
            self._starts.pop(bisect.bisect_left(self._starts, addr))

    def check_range(self, ptr: int, size: int, what: str) -> None:
        """[ptr, ptr+size) must lie inside one allocation or module variable of this session, or in accessible
        mapped memory (virtual memory management)."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i >= 0:
            start = self._starts[i]
            length = self.allocations.get(start, self.variables.get(start, 0))
            if ptr + size <= start + length and (ptr < start + length or size == 0):
                return
        if self.vmm is not None and self.vmm.contains(ptr, size, write=False):
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
        self.event_times.clear()
        self.stream_priority.clear()
        self.blas_handles.clear()
        self.graphs.clear()
        self.graph_bytes = 0
        self.managed.clear()
        self.vmm = None
        self.arrays.clear()
        self.textures.clear()
        self.surfaces.clear()
        self.held = 0
        self.var_bytes = 0
        self.deferred = 0
        self.sticky = 0

    def summary(self) -> dict[str, Any]:
        out = {"device": self.ordinal, "memory": self.held, "allocations": len(self.allocations),
               "modules": len(self.modules), "streams": len(self.streams), "events": len(self.events),
               "blas_handles": len(self.blas_handles), "graphs": len(self.graphs), "managed": self.managed.nbytes,
               "arrays": len(self.arrays), "textures": len(self.textures) + len(self.surfaces),
               "ops": self.ops, "waited": self.waited,
               "sticky_error": self.sticky, "memory_used": self.held + self.var_bytes, "memory_limit": self.limit,
               "bytes_htod": self.bytes_htod, "bytes_dtoh": self.bytes_dtoh, "bytes_dtod": self.bytes_dtod}
        lane = self.lane
        if lane is not None:
            out.update(weight=lane.weight, device_seconds=lane.device_seconds, work_ops=lane.jobs,
                       turn_wait_seconds=lane.turn_wait_seconds, slowdown=lane.slowdown())
        return out


@dataclass
class Session:
    id: int
    peer: str
    backend: Backend
    ndevices: int
    client: str = ""
    va_base: int = 0
    pid: int | None = None               # the client's, from the hello
    hostname: str = ""
    memory_request: int | None = None    # HELLO_MEMORY
    weight: float = 1.0                  # HELLO_WEIGHT, capped
    sharing: Any = None                  # sharing.Sharing: quotas and device schedulers (None: neither)
    started: float = field(default_factory=time.time)
    devices: dict[int, DeviceState] = field(default_factory=dict)
    closing: bool = False       # set when the connection ends: queued jobs are skipped, cleanup runs
    hub: PeerHub = field(default_factory=PeerHub)    # the daemon's peer-copy tickets (shared by its sessions)
    codecs: tuple[int, ...] = ()         # compression codecs the hello negotiated (compress.py)
    peer_rate: float = 0.0               # bytes/s the client receives at (LINK_RATE); 0: not reported
    compress_always: bool = False        # daemon --compress always: every bulk reply compressed (tests, benchmarks)
    end_soon: Callable[[str], None] | None = None   # any thread: end the session, why (lifecycle.py sets it)
    leases: dict[int, Any] = field(default_factory=dict)   # device -> the lease it uses there (leases.py)

    def tag(self, dev: int | None = None) -> str:
        return f"session {self.id}" + (f" dev {dev}" if dev is not None else "")

    def device(self, ordinal: int, loop: Any) -> DeviceState:
        """The state of device `ordinal` (validated by the caller), creating its worker on first use."""
        st = self.devices.get(ordinal)
        if st is None:
            name = f"s{self.id}-d{ordinal}"
            sharing = self.sharing
            lease = self.leases.get(ordinal)         # a share's weight and quota replace the hello's there
            weight = lease.weight if lease is not None and lease.weight is not None else self.weight
            lane = sharing.lane(ordinal, weight, name) if sharing is not None else None
            st = DeviceState(ordinal, OrderedWorker(name, loop, lane))
            if sharing is not None:
                st.limit = sharing.limit(ordinal, self.memory_request)
            if lease is not None and lease.memory is not None:
                st.limit = lease.memory if st.limit is None else min(st.limit, lease.memory)
            self.devices[ordinal] = st
        return st

    def summary(self) -> dict[str, Any]:
        devs = [st.summary() for st in sorted(self.devices.values(), key=lambda s: s.ordinal)]
        return {"id": self.id, "client": self.client, "peer": self.peer, "since": self.started,
                "va_base": self.va_base, "memory": sum(d["memory"] for d in devs), "devices": devs,
                "pid": self.pid, "hostname": self.hostname, "memory_request": self.memory_request,
                "weight": self.weight}


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
