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
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from pyvgpu.protocol import DEFAULT_STREAM_HANDLES
from pyvgpu_daemon.backends.base import DEFAULT_STREAM, Backend, DeviceContext, KernelDesc, LoadedModule
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.event_times import EventTimes
from pyvgpu_daemon.executor import OrderedWorker
from pyvgpu_daemon.kinds import (ALLOCATION, ARRAY, BLAS_HANDLE, EVENT, FUNCTION, GRAPH, MODULE, STREAM, SURFACE,
                                 TEARDOWN_ORDER, TEXTURE, Live)
from pyvgpu_daemon.managed import ManagedTable
from pyvgpu_daemon.peer import PeerHub
from pyvgpu_daemon.scheduler import Lane
from pyvgpu_daemon.vmm import VmmTable

log = logging.getLogger("pyvgpu.daemon")

# cudaStreamLegacy and cudaStreamPerThread are sentinel pointer values; all three (protocol.DEFAULT_STREAM_HANDLES)
# mean "the default stream" here (one ordered queue per device makes per-thread default streams equivalent to the
# legacy one).
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
    allocations: Live = field(default_factory=lambda: Live(ALLOCATION))   # ptr -> size (cudaMalloc)
    variables: dict[int, int] = field(default_factory=dict)          # addr -> size (module globals)
    _starts: list[int] = field(default_factory=list)                  # sorted keys of allocations ∪ variables
    modules: Live = field(default_factory=lambda: Live(MODULE))      # client module id -> ModuleEntry
    functions: Live = field(default_factory=lambda: Live(FUNCTION))  # id -> (LoadedModule, KernelDesc)
    streams: Live = field(default_factory=lambda: Live(STREAM))      # handle -> backend stream
    events: Live = field(default_factory=lambda: Live(EVENT))        # handle -> backend event
    blas_handles: Live = field(default_factory=lambda: Live(BLAS_HANDLE))   # handle -> backend cuBLAS handle
    graphs: Live = field(default_factory=lambda: Live(GRAPH))        # handle -> handlers.graph.Graph
    graph_bytes: int = 0       # bytes of uploaded graphs held (bounded by protocol.MAX_GRAPH_BYTES)
    managed: ManagedTable = field(default_factory=ManagedTable)      # managed/mapped ranges (managed.py)
    vmm: VmmTable | None = None        # virtual memory management (vmm.py, handlers/vmm.py), on first use
    arrays: Live = field(default_factory=lambda: Live(ARRAY))        # handle -> handlers.array.ArrayEntry
    textures: Live = field(default_factory=lambda: Live(TEXTURE))    # texture object value -> (res type, array)
    surfaces: Live = field(default_factory=lambda: Live(SURFACE))    # surface object value -> array handle
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
    tag: str = ""              # "session N dev D", for log lines (Session.device sets it)
    _next_handle: int = FIRST_HANDLE
    _refused: set[str] = field(default_factory=set)                  # kinds whose bound was logged

    def __post_init__(self) -> None:
        self.tag = self.tag or f"dev {self.ordinal}"

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
    def charge(self, table: Live, n: int = 1) -> None:
        """Room for n more objects of table's kind, or cudaErrorMemoryAllocation (logged once per kind) naming the
        bound. Every handler that makes the daemon hold an object for the session calls this before creating it."""
        if table.room_for(n):
            return
        kind = table.kind
        if kind.name not in self._refused:
            self._refused.add(kind.name)
            log.warning("%s: %d live %ss: the bound per session and device (%d) is reached; more are refused",
                        self.tag, len(table), kind.name, kind.bound)
        raise CudaError("cudaErrorMemoryAllocation", f"{len(table)} live {kind.name}s on device {self.ordinal}: "
                                                     f"the daemon's bound per session and device is {kind.bound}")

    def new_handle(self) -> int:
        h = self._next_handle
        self._next_handle += 1
        return h

    def add(self, table: Live, make: Callable[[], Any]) -> int:
        """Charge one object of table's kind, make it, and give it a new handle."""
        self.charge(table)
        obj = make()
        h = self.new_handle()
        table[h] = obj
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

    def live_tables(self) -> tuple[Live, ...]:
        """The tables of every kind, in TEARDOWN_ORDER."""
        by_kind = {t.kind: t for t in (getattr(self, f.name) for f in fields(self)) if isinstance(t, Live)}
        return tuple(by_kind[k] for k in TEARDOWN_ORDER)      # (a kind missing from the order: KeyError)

    def teardown(self) -> None:
        """Destroy every live object of every kind (session end and device reset; runs on this device's worker).
        The context stays; a failure costs its object only and is logged once per kind."""
        ctx = self.ctx
        for table in self.live_tables():
            destroy = table.kind.destroy
            if ctx is not None and destroy is not None:
                failed, first = 0, None
                for key, obj in list(table.items()):
                    try:
                        destroy(ctx, key, obj)
                    except Exception as exc:  # noqa: BLE001 - teardown carries on
                        failed, first = failed + 1, first or exc
                if failed:
                    log.info("%s: %d of %d %ss could not be destroyed (their context goes with them): %s",
                             self.tag, failed, len(table), table.kind.name, first)
            table.clear()
        self.clear_tables()

    def clear_tables(self) -> None:
        """Forget everything (after the backend destroyed it, or with a context that is gone)."""
        for table in self.live_tables():
            table.clear()
        self.variables.clear()
        self._starts.clear()
        self.event_times.clear()
        self.stream_priority.clear()
        self.graph_bytes = 0
        self.managed.clear()
        self.vmm = None
        self.held = 0
        self.var_bytes = 0
        self.deferred = 0
        self.sticky = 0
        self._refused.clear()

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
    control_only: bool = False  # in one of Bounds.control_slots (HELLO_CONTROL): its device ops are refused
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
            st = DeviceState(ordinal, OrderedWorker(name, loop, lane), tag=self.tag(ordinal))
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


def release_device(session: Session, st: DeviceState) -> int:
    """Free everything a session holds on one device and close its context (runs on that device's worker).
    → bytes released."""
    held = st.held
    st.teardown()
    if st.ctx is not None:
        try:
            st.ctx.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: context close failed: %s", session.tag(st.ordinal), exc)
        st.ctx = None
    return held
