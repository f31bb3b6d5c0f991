"""The kinds of object a session makes the daemon hold on a device, each with its bound and its way to go.

Every table of a DeviceState that a peer can grow is a `Live` table of one `Kind`: creating an object is charged to
the table first (`DeviceState.charge`: past the kind's bound it is cudaErrorMemoryAllocation, CUDA's error for
running out of a resource, logged once naming the session, device, kind and bound), and tearing a session's device
down (session end or cudaDeviceReset: `DeviceState.teardown`, one path for both) destroys every live object kind by
kind, in `TEARDOWN_ORDER`. docs/security.md lists each kind with its bound and the daemon's memory at the bound
(`python bench/kinds_bench.py`).

Objects of other tables are bounded where they live: VMM reservations, allocations and mappings
(protocol.MAX_VMM_OBJECTS, vmm.py), managed ranges (protocol.MAX_MANAGED_RUNS, managed.py), peer-copy tickets
(protocol.MAX_PEER_HELD), bytes of uploaded graphs (protocol.MAX_GRAPH_BYTES); cuBLASLt keeps no object per session.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pyvgpu import cublas_spec
from pyvgpu_daemon.backends.base import DeviceContext

# destroy(ctx, key, object): frees what the device holds for one live object; None: nothing beyond the table entry.
Destroy = Callable[[DeviceContext, int, Any], None]


@dataclass(frozen=True)
class Kind:
    name: str              # as errors and logs name it ("CUDA array")
    bound: int             # live objects per session and device
    destroy: Destroy | None


class Live(dict):  # type: ignore[type-arg]
    """The live objects of one kind (key: handle, object value or address), in a session's state of one device."""
    __slots__ = ("kind",)

    def __init__(self, kind: Kind) -> None:
        super().__init__()
        self.kind = kind

    def room_for(self, n: int) -> bool:
        return len(self) + n <= self.kind.bound


ALLOCATION = Kind("allocation", 1 << 18, lambda ctx, ptr, size: ctx.free(ptr))
STREAM = Kind("stream", 1 << 14, lambda ctx, h, stream: ctx.stream_destroy(stream))
EVENT = Kind("event", 1 << 16, lambda ctx, h, event: ctx.event_destroy(event))
MODULE = Kind("module", 1 << 10, lambda ctx, mid, entry: ctx.module_unload(entry.loaded))
FUNCTION = Kind("function", 1 << 18, None)                 # goes with its module
ARRAY = Kind("CUDA array", 1 << 13, lambda ctx, h, entry: ctx.array_destroy(entry.obj))
TEXTURE = Kind("texture object", 1 << 13, lambda ctx, value, _: ctx.tex_destroy(value))
SURFACE = Kind("surface object", 1 << 13, lambda ctx, value, _: ctx.surf_destroy(value))
GRAPH = Kind("graph", 1 << 13, None)                       # host-side replay lists (handlers/graph.py)
BLAS_HANDLE = Kind("cuBLAS handle", cublas_spec.MAX_HANDLES_PER_DEVICE, lambda ctx, h, obj: ctx.blas_destroy(obj))

# Users before what they use: cuBLAS handles (their workspaces), texture and surface objects before their arrays and
# memory, modules before the allocations (module globals are not in `allocations`), streams last but memory.
TEARDOWN_ORDER = (BLAS_HANDLE, GRAPH, TEXTURE, SURFACE, MODULE, FUNCTION, ARRAY, EVENT, STREAM, ALLOCATION)
