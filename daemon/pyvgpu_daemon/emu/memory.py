"""DeviceMemory: the global memory of one emulated device as seen by one session.

The heap is one anonymous mapping of `capacity` bytes seen as a uint8 array; the OS hands out zero pages lazily,
so a "4 GiB" device costs only what is touched, and the whole pages of a freed range go back to the OS at once
(madvise MADV_DONTNEED), so host memory follows the live allocations, not the high-water mark. Addresses are
`base + offset`. Allocations are 256-byte aligned (as cudaMalloc guarantees) and come from a first-fit free list
whose neighbours coalesce on free; a session holds at most `max_allocations` of them.

Kernel accesses are checked without 64-bit wrap-around: an address near 2**64 plus the access size never passes
for an address inside an allocation.

Bounds are kept at the *requested* size, not the rounded one, so an emulated kernel that reads one element past
its buffer faults like compute-sanitizer would report, instead of silently reading padding.

Virtual memory management adds `regions`: further address ranges of the device (reservations, emu/vmm.py), each a
DeviceMemory of its own. The host-side accessors (write, read, view, fill, copy) and `region_at` find the one that
holds an address; the bounds and kernel-access checks of one DeviceMemory (contains, check_access, allocation_at)
stay its own, and kernel accesses are split between the heap and the regions (emu/runtime/spaces.py).

Not thread-safe by design: each (session, device) has exactly one ordered worker thread that touches it.
"""
from __future__ import annotations

import bisect
import mmap

import numpy as np

from pyvgpu_daemon.errors import CudaError

ALIGN = 256
PAGE = mmap.PAGESIZE
MAX_ALLOCATIONS = 1 << 20     # per session and device: each costs host bookkeeping, not only device bytes


def _round_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


class DeviceMemory:
    def __init__(self, base: int, capacity: int, max_allocations: int = MAX_ALLOCATIONS) -> None:
        if base < 0 or capacity <= 0:
            raise ValueError(f"bad device memory window base={base:#x} capacity={capacity}")
        self.base = int(base)
        self.capacity = int(capacity)
        self.max_allocations = max_allocations
        self.used = 0  # bytes (rounded to ALIGN) held by live allocations
        self._map = mmap.mmap(-1, self.capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.heap: np.ndarray = np.frombuffer(self._map, dtype=np.uint8)
        # A base of 0 would make the first allocation the NULL pointer; keep that granule unusable.
        first = ALIGN if self.base == 0 else 0
        self._free: list[tuple[int, int]] = [(first, self.capacity - first)] if self.capacity > first else []
        self._starts: list[int] = []          # sorted absolute start addresses of live allocations
        self._sizes: dict[int, int] = {}      # start -> requested size
        self._rounded: dict[int, int] = {}    # start -> rounded size (what the free list gave out)
        self._np_cache: tuple[np.ndarray, np.ndarray] | None = None  # (starts, ends) for vectorised checks
        self.regions: list[DeviceMemory] = []   # further ranges of this device's addresses, sorted by base
        self._region_bases: list[int] = []

    # ----------------------------------------------------------------- regions
    def add_region(self, region: "DeviceMemory") -> None:
        i = bisect.bisect_left(self._region_bases, region.base)
        self._region_bases.insert(i, region.base)
        self.regions.insert(i, region)

    def remove_region(self, region: "DeviceMemory") -> None:
        i = self.regions.index(region)
        del self.regions[i]
        del self._region_bases[i]

    def regions_between(self, lo: int, hi: int) -> list["DeviceMemory"]:
        """The regions holding any address of [lo, hi]."""
        if not self.regions:
            return []
        i = max(bisect.bisect_right(self._region_bases, lo) - 1, 0)
        j = bisect.bisect_right(self._region_bases, hi)
        return [r for r in self.regions[i:j] if r.base + r.capacity > lo]

    def region_at(self, addr: int) -> "DeviceMemory":
        """The memory (this heap or one of `regions`) whose address range holds addr; this heap when none does (its
        checks then report the address)."""
        if not self.regions or self.base <= addr < self.base + self.capacity:
            return self
        i = bisect.bisect_right(self._region_bases, addr) - 1
        if i >= 0 and addr < self.regions[i].base + self.regions[i].capacity:
            return self.regions[i]
        return self

    # ----------------------------------------------------------------- allocator
    def alloc(self, size: int) -> int:
        size = int(size)
        if size < 0:
            raise CudaError("cudaErrorInvalidValue", f"negative allocation size {size}")
        if len(self._sizes) >= self.max_allocations:
            raise CudaError("cudaErrorMemoryAllocation",
                            f"{len(self._sizes)} live allocations: the emulator's bound per session and device")
        # cudaMalloc of 0 bytes is legal; hand out one granule so the pointer is unique and freeable.
        need = _round_up(max(size, 1))
        for i, (off, length) in enumerate(self._free):
            if length >= need:
                if length == need:
                    del self._free[i]
                else:
                    self._free[i] = (off + need, length - need)
                addr = self.base + off
                bisect.insort(self._starts, addr)
                self._sizes[addr] = size
                self._rounded[addr] = need
                self.used += need
                self._np_cache = None
                return addr
        free = self.capacity - self.used
        note = " (fragmented)" if free >= need else ""
        raise CudaError("cudaErrorMemoryAllocation",
                        f"out of emulated device memory: want {size} B, {free} B free{note}")

    def free(self, addr: int) -> None:
        addr = int(addr)
        need = self._rounded.get(addr)
        if need is None:
            raise CudaError("cudaErrorInvalidValue", f"free of {addr:#x}: not the start of a live allocation")
        del self._rounded[addr]
        del self._sizes[addr]
        self._starts.pop(bisect.bisect_left(self._starts, addr))
        self.used -= need
        self._np_cache = None
        self._release(addr - self.base, need)

    def _release(self, off: int, length: int) -> None:
        """Return [off, off+length) to the free list, merging with free neighbours."""
        i = bisect.bisect_left(self._free, (off, 0))
        if i > 0:
            poff, plen = self._free[i - 1]
            if poff + plen == off:
                off, length = poff, plen + length
                del self._free[i - 1]
                i -= 1
        if i < len(self._free):
            noff, nlen = self._free[i]
            if off + length == noff:
                length += nlen
                del self._free[i]
        self._free.insert(i, (off, length))
        self._give_back(off, length)

    def _give_back(self, off: int, length: int) -> None:
        """Return the whole pages of the free extent [off, off+length) to the OS (they read as zeros after)."""
        lo = (off + PAGE - 1) // PAGE * PAGE
        hi = (off + length) // PAGE * PAGE
        if hi > lo:
            self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def free_all(self) -> None:
        """Drop every allocation (device reset / session end). The heap is replaced so pages go back to the OS."""
        first = ALIGN if self.base == 0 else 0
        self._free = [(first, self.capacity - first)] if self.capacity > first else []
        self._starts.clear()
        self._sizes.clear()
        self._rounded.clear()
        self.used = 0
        self._np_cache = None
        self._give_back(0, self.capacity)

    def close(self) -> None:
        """Unmap the heap now (session end) rather than whenever the object is collected."""
        self.heap = np.zeros(0, dtype=np.uint8)
        try:
            self._map.close()
        except BufferError:          # a view of the heap is still alive somewhere: its owner's collection unmaps
            pass

    def allocations(self) -> dict[int, int]:
        """Live allocations: start -> requested size."""
        return dict(self._sizes)

    def allocation_at(self, addr: int) -> tuple[int, int] | None:
        addr = int(addr)
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        start = self._starts[i]
        size = self._sizes[start]
        # A zero-byte allocation still owns its address (so it can be freed), but contains no bytes.
        if addr < start + size or addr == start:
            return start, size
        return None

    # ----------------------------------------------------------------- host-side access
    def _offset(self, addr: int, size: int, what: str) -> int:
        """Offset of [addr, addr+size) in the heap; it must lie inside one live allocation."""
        addr, size = int(addr), int(size)
        if size < 0:
            raise CudaError("cudaErrorInvalidValue", f"{what}: negative size {size}")
        hit = self.allocation_at(addr)
        if hit is None or addr + size > hit[0] + hit[1]:
            raise CudaError("cudaErrorInvalidValue",
                            f"{what}: [{addr:#x}, +{size}) is not inside one live allocation")
        return addr - self.base

    def write(self, addr: int, data) -> None:
        if (m := self.region_at(addr)) is not self:
            return m.write(addr, data)
        src = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        if src.size == 0:
            return
        off = self._offset(addr, src.size, "write")
        self.heap[off:off + src.size] = src

    def read(self, addr: int, size: int) -> memoryview:
        """A zero-copy view; copy it before later device work can change the bytes."""
        if (m := self.region_at(addr)) is not self:
            return m.read(addr, size)
        if int(size) == 0:
            return memoryview(b"")
        off = self._offset(addr, size, "read")
        return memoryview(self.heap[off:off + int(size)])

    def copy(self, dst: int, src: int, size: int) -> None:
        if int(size) == 0:
            return
        if self.regions and (self.region_at(dst) is not self or self.region_at(src) is not self):
            # between regions, which may alias each other: through a temporary
            self.view(dst, size)[:] = self.view(src, size).copy()
            return
        s = self._offset(src, size, "copy source")
        d = self._offset(dst, size, "copy destination")
        size = int(size)
        # numpy detects overlapping slices of the same buffer and copies through a temporary (memmove semantics).
        self.heap[d:d + size] = self.heap[s:s + size]

    def fill(self, addr: int, value: int, size: int) -> None:
        if (m := self.region_at(addr)) is not self:
            return m.fill(addr, value, size)
        if int(size) == 0:
            return
        off = self._offset(addr, size, "fill")
        self.heap[off:off + int(size)] = int(value) & 0xFF

    # ----------------------------------------------------------------- kernel access checks
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the live allocations, sorted, as uint64 arrays: the same tuple object until an
        allocation or a free changes them (native loads check against it: translator/cgen.py)."""
        return self._bounds_arrays()

    def _bounds_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._np_cache is None:
            starts = np.fromiter(self._starts, dtype=np.uint64, count=len(self._starts))
            ends = starts + np.fromiter((self._sizes[s] for s in self._starts), dtype=np.uint64,
                                        count=len(self._starts))
            self._np_cache = (starts, ends)
        return self._np_cache

    def contains(self, addr: int, size: int) -> bool:
        """Whether [addr, addr + size) lies inside one live allocation."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return False
        start = self._starts[i]
        return addr + size <= start + self._sizes[start]

    def check_access(self, addrs: np.ndarray, size: int, write: bool) -> None:
        """Validate a warp/CTA-wide load or store of `size` bytes at each address in `addrs`.

        Misaligned → cudaErrorMisalignedAddress; any byte outside every live allocation → cudaErrorIllegalAddress.
        """
        a = np.asarray(addrs)
        if a.size == 0:
            return
        if a.dtype != np.uint64:
            a = a.astype(np.uint64)
        kind = "store" if write else "load"
        if size > 1 and int(np.bitwise_or.reduce(a & np.uint64(size - 1))):   # sizes are powers of two
            mis = (a & np.uint64(size - 1)) != 0
            if mis.any():
                bad = int(a[mis][0])
                raise CudaError("cudaErrorMisalignedAddress", f"misaligned {size}-byte {kind} at {bad:#x}")
        lo = int(a.min())
        hi = int(a.max()) + size
        # Fast path: the whole span sits in one allocation (the usual case: a warp touching one array).
        i = bisect.bisect_right(self._starts, lo) - 1
        if i >= 0:
            start = self._starts[i]
            if hi <= start + self._sizes[start]:
                return
        starts, ends = self._bounds_arrays()
        if starts.size:
            idx = np.searchsorted(starts, a, side="right").astype(np.int64) - 1
            ok = idx >= 0
            safe = np.where(ok, idx, 0)
            # starts[safe] <= a, so end - a cannot wrap where a < end; a + size could (an address near 2**64).
            end = ends[safe]
            ok &= (a < end) & (end - a >= np.uint64(size))
        else:
            ok = np.zeros(a.shape, dtype=bool)
        if not ok.all():
            bad = int(a[~ok][0])
            raise CudaError("cudaErrorIllegalAddress",
                            f"out-of-bounds {size}-byte {kind} at {bad:#x} (no live allocation holds it)")

    def view(self, addr: int, size: int) -> np.ndarray:
        """Writable uint8 view of [addr, addr+size) after the same checks as read (for the emulator's bulk ops)."""
        if (m := self.region_at(addr)) is not self:
            return m.view(addr, size)
        off = self._offset(addr, size, "view")
        return self.heap[off:off + int(size)]
