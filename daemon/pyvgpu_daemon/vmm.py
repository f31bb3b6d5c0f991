"""Virtual memory management of one session on one device (the VMM_* ops, handlers/vmm.py): the rules of CUDA's
cuMemAddressReserve/Free, cuMemCreate/Release, cuMemMap/Unmap and cuMemSetAccess, checked here once for every
backend; the backend does only the mechanics (DeviceContext.vmm_*).

- Reservations (start -> size): sizes and addresses are multiples of the device's granularity; a reservation is
  freed whole (start and size as reserved), with nothing mapped in it.
- Physical allocations (handle -> Allocation): a multiple of the granularity; VMM_RELEASE drops the handle, and the
  memory goes when no mapping of it is left (as cuMemRelease's).
- Mappings (start -> Mapping): lie inside one reservation, over nothing mapped, offset 0 (cuMemMap's current rule);
  VMM_UNMAP takes whole mappings that exactly cover its range. A new mapping is not accessible until
  VMM_SET_ACCESS, which needs its range fully mapped.
- Every failure is CUDA's: cudaErrorInvalidValue (CUDA_ERROR_INVALID_VALUE), cudaErrorMemoryAllocation.

The session pays for physical bytes (held, checked against its quota at VMM_CREATE); `contains` tells copies and
memsets which ranges are this session's memory (accessible mappings, adjacent ones joined). At most MAX_VMM_OBJECTS
reservations + allocations + mappings. Reset and session end release everything through the backend's context.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from pyvgpu.protocol import MAX_VMM_OBJECTS, VMM_ACCESS_NONE, VMM_ACCESS_READ, VMM_ACCESS_READWRITE
from pyvgpu_daemon.errors import CudaError


def _bad(what: str) -> CudaError:
    return CudaError("cudaErrorInvalidValue", what)


@dataclass
class Allocation:
    obj: Any                  # the backend's
    size: int
    released: bool = False    # VMM_RELEASE came; freed once `mappings` is 0
    mappings: int = 0


@dataclass
class Mapping:
    size: int
    handle: int
    access: int = VMM_ACCESS_NONE


@dataclass
class VmmTable:
    granularity: int
    reservations: dict[int, int] = field(default_factory=dict)          # start -> size
    allocations: dict[int, Allocation] = field(default_factory=dict)    # handle -> allocation
    mappings: dict[int, Mapping] = field(default_factory=dict)           # start -> mapping
    _res_starts: list[int] = field(default_factory=list)
    _map_starts: list[int] = field(default_factory=list)
    _next: int = 1
    physical: int = 0          # bytes of physical allocations not yet freed

    # ------------------------------------------------------------------ checks
    def _aligned(self, value: int, what: str) -> None:
        if value % self.granularity:
            raise _bad(f"{what} {value:#x} is not a multiple of the granularity ({self.granularity} B)")

    def _room(self) -> None:
        if len(self.reservations) + len(self.allocations) + len(self.mappings) >= MAX_VMM_OBJECTS:
            raise CudaError("cudaErrorMemoryAllocation", f"{MAX_VMM_OBJECTS} reservations, allocations and mappings: "
                                                         "the daemon's bound per session and device")

    def reservation_of(self, addr: int, size: int) -> int | None:
        """The start of the reservation holding [addr, addr+size), or None."""
        i = bisect.bisect_right(self._res_starts, addr) - 1
        if i >= 0:
            start = self._res_starts[i]
            if addr + size <= start + self.reservations[start]:
                return start
        return None

    def overlaps_reservation(self, addr: int, size: int) -> bool:
        i = bisect.bisect_right(self._res_starts, addr + size - 1) - 1
        return i >= 0 and self._res_starts[i] + self.reservations[self._res_starts[i]] > addr

    def _mapped_in(self, addr: int, size: int) -> list[int]:
        """Starts of the mappings that overlap [addr, addr+size)."""
        i = bisect.bisect_right(self._map_starts, addr) - 1
        i = max(i, 0)
        out = []
        while i < len(self._map_starts) and self._map_starts[i] < addr + size:
            s = self._map_starts[i]
            if s + self.mappings[s].size > addr:
                out.append(s)
            i += 1
        return out

    def _covering(self, addr: int, size: int, what: str) -> list[int]:
        """Mappings that cover [addr, addr+size) exactly, back to back (else cudaErrorInvalidValue)."""
        starts = self._mapped_in(addr, size)
        pos = addr
        for s in starts:
            if s != pos:
                break
            pos = s + self.mappings[s].size
        if not starts or pos != addr + size:
            raise _bad(f"{what}: [{addr:#x}, +{size:#x}) is not exactly covered by mappings")
        return starts

    # ------------------------------------------------------------------ reserve / free
    def check_reserve(self, size: int, align: int) -> int:
        """The alignment to reserve with (0: the granularity), after cuMemAddressReserve's checks."""
        if size <= 0:
            raise _bad("reservation of 0 bytes")
        self._aligned(size, "reservation size")
        if align and align & (align - 1):
            raise _bad(f"alignment {align} is not a power of two")
        self._room()
        return max(align, self.granularity)

    def hint_free(self, addr: int, size: int, align: int) -> bool:
        return addr != 0 and addr % align == 0 and not self.overlaps_reservation(addr, size)

    def add_reservation(self, start: int, size: int) -> None:
        self.reservations[start] = size
        bisect.insort(self._res_starts, start)

    def check_free(self, addr: int, size: int) -> None:
        if self.reservations.get(addr) != size:
            raise _bad(f"free of [{addr:#x}, +{size:#x}): not a reservation as reserved")
        if self._mapped_in(addr, size):
            raise _bad(f"free of the reservation at {addr:#x}: it still holds mappings")

    def remove_reservation(self, addr: int) -> None:
        del self.reservations[addr]
        self._res_starts.pop(bisect.bisect_left(self._res_starts, addr))

    # ------------------------------------------------------------------ create / release
    def check_create(self, size: int) -> None:
        if size <= 0:
            raise _bad("physical allocation of 0 bytes")
        self._aligned(size, "allocation size")
        self._room()

    def add_allocation(self, obj: Any, size: int) -> int:
        handle = self._next
        self._next += 1
        self.allocations[handle] = Allocation(obj, size)
        self.physical += size
        return handle

    def allocation(self, handle: int) -> Allocation:
        a = self.allocations.get(handle)
        if a is None or a.released:
            raise _bad(f"{handle:#x} is not a physical allocation handle of this session")
        return a

    def release(self, handle: int) -> Allocation | None:
        """Drops the handle; → the allocation to free now (no mapping left), else None."""
        a = self.allocation(handle)
        a.released = True
        return self._drop_if_unused(handle)

    def _drop_if_unused(self, handle: int) -> Allocation | None:
        a = self.allocations[handle]
        if not a.released or a.mappings:
            return None
        del self.allocations[handle]
        self.physical -= a.size
        return a

    # ------------------------------------------------------------------ map / unmap
    def check_map(self, addr: int, size: int, offset: int, handle: int) -> Allocation:
        a = self.allocation(handle)
        for value, what in ((addr, "address"), (size, "size"), (offset, "offset")):
            self._aligned(value, f"mapping {what}")
        if size <= 0 or offset != 0 or size > a.size:
            raise _bad(f"mapping of {size:#x} B at offset {offset:#x} of a {a.size:#x}-byte allocation")
        if self.reservation_of(addr, size) is None:
            raise _bad(f"mapping at [{addr:#x}, +{size:#x}): not inside one reservation")
        if self._mapped_in(addr, size):
            raise _bad(f"mapping at [{addr:#x}, +{size:#x}): already mapped")
        self._room()
        return a

    def add_mapping(self, addr: int, size: int, handle: int) -> None:
        self.mappings[addr] = Mapping(size, handle)
        bisect.insort(self._map_starts, addr)
        self.allocations[handle].mappings += 1

    def check_unmap(self, addr: int, size: int) -> list[int]:
        return self._covering(addr, size, "unmap")

    def remove_mapping(self, addr: int) -> Allocation | None:
        """Forgets one mapping; → its allocation when that is now to be freed."""
        m = self.mappings.pop(addr)
        self._map_starts.pop(bisect.bisect_left(self._map_starts, addr))
        self.allocations[m.handle].mappings -= 1
        return self._drop_if_unused(m.handle)

    def handle_at(self, addr: int) -> int:
        starts = self._mapped_in(addr, 1)
        if not starts:
            raise _bad(f"{addr:#x} is not mapped")
        return self.mappings[starts[0]].handle

    # ------------------------------------------------------------------ access
    def check_access(self, addr: int, size: int, flags: int) -> list[int]:
        if flags not in (VMM_ACCESS_NONE, VMM_ACCESS_READ, VMM_ACCESS_READWRITE):
            raise _bad(f"access flags {flags}")
        if size <= 0:
            raise _bad("access to 0 bytes")
        return self._covering(addr, size, "set access")

    def set_access(self, starts: list[int], flags: int) -> None:
        for s in starts:
            self.mappings[s].access = flags

    def contains(self, ptr: int, size: int, write: bool = True) -> bool:
        """[ptr, ptr+size) lies in accessible mappings (read-write ones when `write`), adjacent ones joined."""
        need = VMM_ACCESS_READWRITE if write else VMM_ACCESS_READ
        starts = self._mapped_in(ptr, max(size, 1))
        pos = ptr
        for s in starts:
            m = self.mappings[s]
            if s > pos or m.access & need != need:
                return False
            pos = s + m.size
        return bool(starts) and pos >= ptr + size

    def clear(self) -> None:
        self.reservations.clear()
        self.allocations.clear()
        self.mappings.clear()
        self._res_starts.clear()
        self._map_starts.clear()
        self.physical = 0
