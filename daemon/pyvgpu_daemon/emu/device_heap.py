"""DeviceHeap: the heap of device-side malloc/free/new/delete (and __nv_aligned_device_malloc) of one emulated
(session, device), as the CUDA C Programming Guide describes it ("Dynamic Global Memory Allocation"):

- a fixed size, cudaLimitMallocHeapSize (8 MiB by default), taken from device memory by the first launch of a kernel
  that calls malloc or free and kept for the context's life; the limit cannot change after that
  (cudaErrorInvalidValue, as cudaDeviceSetLimit documents);
- malloc returns a 16-byte aligned pointer (the aligned form: a multiple of its power-of-two alignment), or NULL
  when the heap has no room; free(NULL) does nothing; memory stays allocated across launches until freed, by any
  thread of any later launch;
- the pointers are not cudaMalloc's: cudaFree refuses them (the heap is one cudaMalloc-like allocation whose start
  is a guard granule malloc never hands out).

Blocks come from a first-fit free list (address order, neighbours coalesce on free), hand-written because the
sub-allocation of one already-allocated range is a dozen lines that no library offers in this form. Chunks of one
launch run on several threads (runtime/launch.py), so every call holds the heap's lock. A free of a pointer malloc
did not return (or a second free) is cudaErrorIllegalAddress: on a GPU it is undefined and usually corrupts the
heap; here it stops the launch with the pointer named instead.
"""
from __future__ import annotations

import bisect
import threading
from typing import Callable

from pyvgpu_daemon.errors import CudaError

GRAIN = 16                       # malloc's guaranteed alignment, and the heap's unit
GUARD = 256                      # the first granule of the backing allocation (cudaFree must not find a pointer)


def _up(n: int, a: int = GRAIN) -> int:
    return (n + a - 1) // a * a


class DeviceHeap:
    def __init__(self, reserve: Callable[[int], int]) -> None:
        """`reserve(nbytes) -> address`: take the backing from device memory (charged to the session)."""
        self._reserve = reserve
        self.base = 0                 # the backing allocation's address; 0 until the first malloc kernel
        self.size = 0
        self._free: list[tuple[int, int]] = []     # (offset, length), sorted by offset, never adjacent
        self._live: dict[int, int] = {}            # offset -> length of each block malloc handed out
        self._lock = threading.Lock()

    @property
    def reserved(self) -> bool:
        return self.base != 0

    def ensure(self, size: int) -> None:
        """Before a launch of a kernel that calls malloc/free: the heap, of `size` bytes (cudaLimitMallocHeapSize),
        exists. Raises the reservation's error (cudaErrorMemoryAllocation) when device memory has no room."""
        if self.base:
            return
        size = _up(max(size, GRAIN))
        self.base = self._reserve(GUARD + size)
        self.size = size
        self._free = [(0, size)]

    def malloc(self, nbytes: int, align: int = GRAIN) -> int:
        """A block of at least nbytes at a multiple of align (a power of two), or 0 when none fits."""
        if not self.base or align <= 0 or align & (align - 1):
            return 0
        length = _up(max(nbytes, 1))
        align = max(align, GRAIN)
        start0 = self.base + GUARD
        with self._lock:
            for i, (off, free_len) in enumerate(self._free):
                pad = -(start0 + off) % align
                if pad + length > free_len:
                    continue
                rest = [(off, pad)] if pad else []
                if free_len > pad + length:
                    rest.append((off + pad + length, free_len - pad - length))
                self._free[i:i + 1] = rest
                self._live[off + pad] = length
                return start0 + off + pad
        return 0

    def free(self, addr: int) -> None:
        if addr == 0:
            return
        off = addr - self.base - GUARD
        with self._lock:
            length = self._live.pop(off, None)
            if length is None:
                raise CudaError("cudaErrorIllegalAddress",
                                f"device free({addr:#x}): not a pointer device malloc returned, or freed already")
            i = bisect.bisect_left(self._free, (off, 0))
            if i < len(self._free) and self._free[i][0] == off + length:         # join the next free range
                length += self._free.pop(i)[1]
            if i > 0 and sum(self._free[i - 1]) == off:                         # and the previous one
                off, length = self._free[i - 1][0], self._free[i - 1][1] + length
                i -= 1
                del self._free[i]
            self._free.insert(i, (off, length))

    def live_bytes(self) -> int:
        with self._lock:
            return sum(self._live.values())

    def drop(self) -> None:
        """The context's memory is gone (cudaDeviceReset): the next malloc kernel reserves a new heap."""
        self.base = self.size = 0
        self._free, self._live = [], {}
