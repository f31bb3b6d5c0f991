"""Virtual memory management on the emulated device: the mechanics behind VMM_* (the rules are the daemon's,
pyvgpu_daemon/vmm.py, checked before anything gets here).

- A reservation is a VmmRange: a DeviceMemory over one anonymous host mapping of its size (MAP_NORESERVE: it costs
  nothing until pages are mapped), at whatever device address was reserved, the caller's hint when it is free. It is
  one of the device memory's `regions`, so every host-side access (copies, memsets, cuBLAS, textures) and every
  kernel access finds it by address, and its live "allocations" are its accessible mapped spans (adjacent ones
  joined), so DeviceMemory's bounds checks apply unchanged.
- A physical allocation is a memfd of its size (pages are allocated as they are touched, charged to the device's
  budget at creation).
- Mapping puts the memfd's pages over the reservation's (mmap MAP_FIXED | MAP_SHARED): two mappings of one allocation
  are the same bytes, as on a GPU. Unmapping puts fresh anonymous pages back.

Everything runs on the (session, device) worker; nothing else holds a view of a reservation's pages across ops
(reads return copies, and the loop's fast path is not offered there: EmuContext.host_view), so unmapping and
freeing are safe. Bounded: the reserved bytes of one (session, device) (MAX_RESERVED_FACTOR x the device's memory).
"""
from __future__ import annotations

import bisect
import ctypes
import mmap
import os

import numpy as np

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.errors import CudaError

GRANULARITY = 2 << 20              # as current GPUs': what cuMemGetAllocationGranularity answers
MAX_RESERVED_FACTOR = 16           # reserved address space per (session, device): this many times the device memory

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value
MAP_NORESERVE = 0x4000
MAP_FIXED = 0x10
PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE


def _mmap(addr: int, size: int, flags: int, fd: int = -1) -> int:
    out = _libc.mmap(addr or None, size, PROT_RW, flags, fd, 0)
    if out in (None, MAP_FAILED):
        err = ctypes.get_errno()
        raise CudaError("cudaErrorMemoryAllocation", f"host mapping of {size} B failed: {os.strerror(err)}")
    return int(out)


def _anonymous(addr: int, size: int) -> int:
    """Fresh zero pages (at addr exactly when addr is given)."""
    return _mmap(addr, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE | (MAP_FIXED if addr else 0))


class Physical:
    """A physical allocation: a memfd of `size` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.fd = os.memfd_create("pyvgpu-vmm", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:
            os.close(self.fd)
            raise CudaError("cudaErrorMemoryAllocation", f"physical allocation of {size} B: {exc}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)       # the pages go with the last mapping (the daemon unmaps before it releases)
            self.fd = -1


class VmmRange(DeviceMemory):
    """One reservation: device addresses [base, base+capacity) over a host mapping of its own."""

    def __init__(self, base: int, size: int) -> None:    # noqa: super().__init__ would map the pages differently
        self.base = base
        self.capacity = size
        self.used = 0
        self.max_allocations = 0
        self.regions = []
        self._region_bases = []
        self._host = _anonymous(0, size)
        self.heap = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(self._host))
        self._free = []
        self._starts: list[int] = []
        self._sizes: dict[int, int] = {}
        self._rounded: dict[int, int] = {}
        self._np_cache = None
        self._maps: dict[int, tuple[int, bool]] = {}      # mapped start -> (size, accessible)

    def alloc(self, size: int) -> int:
        raise CudaError("cudaErrorInvalidValue", "a reservation is not allocated from")

    def free(self, addr: int) -> None:
        raise CudaError("cudaErrorInvalidValue", f"free of {addr:#x}: memory of a reservation is unmapped, not freed")

    def map(self, addr: int, size: int, phys: Physical) -> None:
        _mmap(self._host + addr - self.base, size, mmap.MAP_SHARED | MAP_FIXED, phys.fd)
        self._maps[addr] = (size, False)
        self._spans()

    def unmap(self, addr: int) -> None:
        size, _ = self._maps.pop(addr)
        _anonymous(self._host + addr - self.base, size)
        self._spans()

    def set_access(self, addr: int, size: int, accessible: bool) -> None:
        for start, (length, _) in list(self._maps.items()):
            if addr <= start and start + length <= addr + size:
                self._maps[start] = (length, accessible)
        self._spans()

    def _spans(self) -> None:
        """The accessible mapped spans, adjacent ones joined: what the bounds checks see as live allocations."""
        self._starts, self._sizes = [], {}
        for start in sorted(self._maps):
            length, ok = self._maps[start]
            if not ok:
                continue
            if self._starts and self._starts[-1] + self._sizes[self._starts[-1]] == start:
                self._sizes[self._starts[-1]] += length
            else:
                self._starts.append(start)
                self._sizes[start] = length
        self._np_cache = None

    def read(self, addr: int, size: int) -> memoryview:
        return memoryview(bytes(super().read(addr, size)))     # a copy: the pages may be unmapped later

    def free_all(self) -> None:
        for addr in list(self._maps):
            self.unmap(addr)

    def close(self) -> None:
        self.heap = np.zeros(0, dtype=np.uint8)
        if self._host:
            _libc.munmap(self._host, self.capacity)
            self._host = 0


class EmuVmm:
    """The reservations and physical allocations of one (session, device) of the emulated backend."""

    def __init__(self, mem: DeviceMemory, window: int, heap_end: int, taken: list[tuple[int, int]],
                 max_reserved: int) -> None:
        self.mem = mem                     # the device's memory: reservations join its regions
        self.window = window               # this device's window (address, size): where unhinted ranges go
        self.heap_end = heap_end           # ... above its heap
        self.taken = taken                 # address ranges no reservation may overlap (the session's device heaps)
        self.max_reserved = max_reserved
        self.reserved = 0
        self.ranges: dict[int, VmmRange] = {}
        self._bases: list[int] = []         # sorted starts of `ranges`
        self._cursor = heap_end

    def _free_at(self, addr: int, size: int) -> bool:
        if addr <= 0 or addr + size > 1 << 64:
            return False
        if any(addr < s + n and s < addr + size for s, n in self.taken):
            return False
        i = bisect.bisect_left(self._bases, addr + size) - 1        # the last range starting below the end
        return i < 0 or self._bases[i] + self.ranges[self._bases[i]].capacity <= addr

    def reserve(self, size: int, align: int, hint: int) -> int:
        if self.reserved + size > self.max_reserved:
            raise CudaError("cudaErrorMemoryAllocation", f"reservation of {size} B: {self.reserved} B of the "
                                                         f"emulator's {self.max_reserved} B already reserved")
        addr = hint if hint and self._free_at(hint, size) else self._place(size, align)
        r = VmmRange(addr, size)
        self.ranges[addr] = r
        bisect.insort(self._bases, addr)
        self.reserved += size
        self.mem.add_region(r)
        return addr

    def _place(self, size: int, align: int) -> int:
        """A free aligned address above the heap in this device's window: past the highest one handed out, else the
        lowest free one."""
        start, wsize = self.window
        addr = -(-max(self.heap_end, self._cursor) // align) * align
        if addr + size > start + wsize or not self._free_at(addr, size):
            addr = -(-self.heap_end // align) * align
            for base in self._bases:
                if addr + size <= base:
                    break
                addr = max(addr, -(-(base + self.ranges[base].capacity) // align) * align)
        if addr + size > start + wsize:
            raise CudaError("cudaErrorMemoryAllocation", f"no room for a reservation of {size} B in the window")
        self._cursor = addr + size
        return addr

    def free(self, addr: int) -> None:
        r = self.ranges.pop(addr)
        self._bases.remove(addr)
        self.mem.remove_region(r)
        self.reserved -= r.capacity
        r.close()

    def range_of(self, addr: int) -> VmmRange:
        r = self.mem.region_at(addr)
        assert isinstance(r, VmmRange), f"{addr:#x} is not reserved"   # the daemon's table checked it
        return r

    def close(self) -> None:
        for addr in list(self.ranges):
            self.free(addr)
