"""The real-GPU backend's runtime-feature paths (issue 13) driven against the fake `driver` of test_daemon_cuda.py,
extended with what these paths call: managed/mapped memory through virtual memory management at an address of the
session's window (reserve at a hint, create, map, grant access; released on free, reset and close), with the
coherence digests working on it, and 2/4-byte memsets (cuMemsetD2D16/32Async)."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

from pyvgpu.protocol import VA_WINDOW_BYTES
from pyvgpu_daemon import managed
from pyvgpu_daemon.backends.cuda import CudaBackend
from test_daemon_cuda import OK, CUresult, FakeDriver

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MAP_FIXED_NOREPLACE = 0x100000
MAP_NORESERVE = 0x4000
PROT_NONE = 0
GRAN = 1 << 16


class _Loc:
    def __init__(self) -> None:
        self.type = None
        self.id = None


class CUmemAllocationProp:
    def __init__(self) -> None:
        self.type = None
        self.location = _Loc()


class CUmemAccessDesc:
    def __init__(self) -> None:
        self.location = _Loc()
        self.flags = None


class _Enum:
    def __init__(self, **kv) -> None:
        self.__dict__.update(kv)


class VmmFakeDriver(FakeDriver):
    """FakeDriver plus virtual memory management backed by real mappings of this process."""
    CUmemAllocationProp = CUmemAllocationProp
    CUmemAccessDesc = CUmemAccessDesc
    CUmemLocationType = _Enum(CU_MEM_LOCATION_TYPE_DEVICE=1)
    CUmemAllocationType = _Enum(CU_MEM_ALLOCATION_TYPE_PINNED=1)
    CUmemAllocationGranularity_flags = _Enum(CU_MEM_ALLOC_GRANULARITY_MINIMUM=0)
    CUmemAccess_flags = _Enum(CU_MEM_ACCESS_FLAGS_PROT_READWRITE=3)

    def __init__(self, honour_hints: bool = True) -> None:
        super().__init__()
        self.honour = honour_hints
        self.reserved: dict[int, int] = {}
        self.physical: dict[int, int] = {}
        self.mapped: dict[int, int] = {}
        self.access: list[tuple] = []

    def cuMemGetAllocationGranularity(self, prop, flags):
        assert prop.location.type == 1 and prop.type == 1
        return OK, GRAN

    def cuMemAddressReserve(self, size, align, addr, flags):
        assert size % GRAN == 0 and align % GRAN == 0
        p = libc.mmap(addr if self.honour else None, size, PROT_NONE,
                      mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE | (MAP_FIXED_NOREPLACE if addr and
                                                                                self.honour else 0), -1, 0)
        if p in (None, ctypes.c_void_p(-1).value):
            return CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0
        self.reserved[p] = size
        return OK, p

    def cuMemCreate(self, size, prop, flags):
        h = self._id()
        self.physical[h] = size
        return OK, h

    def cuMemMap(self, ptr, size, offset, handle, flags):
        assert self.physical[handle] == size and self.reserved[ptr] >= size
        assert libc.mprotect(ptr, size, mmap.PROT_READ | mmap.PROT_WRITE) == 0
        self.mapped[ptr] = handle
        self.blocks[ptr] = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(ptr))   # launches may use it
        return (OK,)

    def cuMemSetAccess(self, ptr, size, descs, count):
        self.access.append((ptr, size, descs[0].location.id, descs[0].flags))
        return (OK,)

    def cuMemUnmap(self, ptr, size):
        assert ptr in self.mapped
        del self.mapped[ptr]
        self.blocks.pop(ptr, None)
        libc.mprotect(ptr, size, PROT_NONE)
        return (OK,)

    def cuMemRelease(self, h):
        return (OK,) if self.physical.pop(h, None) is not None else (CUresult.CUDA_ERROR_INVALID_VALUE,)

    def cuMemAddressFree(self, ptr, size):
        assert self.reserved.pop(ptr) == size
        libc.munmap(ptr, size)
        return (OK,)

    def _memset2d(self, elem, ptr, pitch, value, w, h, stream):
        dt = {2: np.uint16, 4: np.uint32}[elem]
        for r in range(h):
            np.ctypeslib.as_array((ctypes.c_uint8 * (w * elem)).from_address(ptr + r * pitch)).view(dt)[:] = value
        return (OK,)

    def cuMemsetD2D16Async(self, ptr, pitch, value, w, h, stream):
        return self._memset2d(2, ptr, pitch, value, w, h, stream)

    def cuMemsetD2D32Async(self, ptr, pitch, value, w, h, stream):
        return self._memset2d(4, ptr, pitch, value, w, h, stream)


VA_BASE = 9 * VA_WINDOW_BYTES          # a window nothing else in this process uses


def test_managed_memory_is_placed_in_the_session_window_and_released():
    drv = VmmFakeDriver()
    ctx = CudaBackend(driver=drv).open_context(0, VA_BASE, 1)
    p = ctx.malloc_managed(100_000, 4096)
    assert p == VA_BASE                                       # device 0's window, granularity-aligned
    assert drv.access == [(p, 2 * GRAN, 0, 3)]               # rounded to the granularity, read/write for the device
    q = ctx.malloc_managed(10, 4096)
    assert q == VA_BASE + 2 * GRAN                            # the next hint follows the first allocation
    data = bytes(range(256)) * 400
    ctx.memcpy_htod(p, data, None)
    assert ctx.memcpy_dtoh(p, len(data), None) == data
    # the coherence digests on top of it: a device-side change is found, nothing else
    table = managed.ManagedTable()
    table.add(p, 100_000, managed.digest_pages(ctx.memcpy_dtoh(p, 100_000, None)))
    read = lambda a, n: ctx.memcpy_dtoh(a, n, None)           # noqa: E731
    assert managed.dirty(table, read) == []
    ctypes.memset(p + 50_000, 0x77, 3)                        # "a kernel" writes
    assert managed.dirty(table, read) == [[p + 12 * managed.PAGE, managed.PAGE]]
    ctx.free(p)
    assert p not in drv.reserved and len(drv.physical) == 1
    ctx.reset()                                               # a reset gives back what the session still held
    assert drv.reserved == {} and drv.physical == {}
    r = ctx.malloc_managed(4096, 4096)
    ctx.close()
    assert drv.reserved == {} and drv.physical == {} and r >= VA_BASE


def test_managed_memory_where_the_driver_ignores_the_hint():
    drv = VmmFakeDriver(honour_hints=False)
    ctx = CudaBackend(driver=drv).open_context(0, VA_BASE, 1)
    p = ctx.malloc_managed(5000, 4096)
    assert p != VA_BASE and p in drv.mapped                   # still usable: the client maps wherever it is
    ctx.memcpy_htod(p, b"x" * 5000, None)
    assert ctx.memcpy_dtoh(p, 5000, None) == b"x" * 5000
    ctx.close()
    assert drv.reserved == {}


@pytest.mark.parametrize("elem", [1, 2, 4])
def test_memset_elements(elem):
    drv = VmmFakeDriver()
    ctx = CudaBackend(driver=drv).open_context(0, VA_BASE, 1)
    p = ctx.malloc(1024)
    ctx.memset(p, 0, 1024, None)
    ctx.memset_elem(p + 64, 128, 0xA1B2C3D4 & ((1 << (8 * elem)) - 1), elem, 5, 3, None)
    mem = np.frombuffer(ctx.memcpy_dtoh(p, 1024, None), np.uint8)
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32}[elem]
    for r in range(3):
        row = mem[64 + 128 * r:64 + 128 * r + 8 * elem].view(dt)
        assert (row[:5] == 0xA1B2C3D4 & ((1 << (8 * elem)) - 1)).all() and (row[5:] == 0).all()
    assert mem[:64].sum() == 0
    ctx.close()


class PeerFakeDriver(VmmFakeDriver):
    """Two devices that can reach each other's memory."""

    def __init__(self) -> None:
        super().__init__()
        self.peer_on: set[tuple] = set()
        self.peer_copies: list[tuple] = []

    def cuDeviceGetCount(self):
        return OK, 2

    def cuDeviceGet(self, i):
        return (OK, i) if i in (0, 1) else (CUresult.CUDA_ERROR_INVALID_VALUE, None)

    def cuDeviceCanAccessPeer(self, dev, peer):
        return OK, int(dev != peer)

    def cuCtxEnablePeerAccess(self, ctx, flags):
        if (self.current, ctx) in self.peer_on:
            return (704,)                                     # CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        self.peer_on.add((self.current, ctx))
        return (OK,)

    def cuCtxDisablePeerAccess(self, ctx):
        if (self.current, ctx) not in self.peer_on:
            return (705,)                                     # CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
        self.peer_on.discard((self.current, ctx))
        return (OK,)

    def cuMemcpyPeerAsync(self, dst, dctx, src, sctx, n, stream):
        self.peer_copies.append((dctx, sctx, n))
        ctypes.memmove(dst, src, n)
        return (OK,)


def test_peer_access_and_copies_on_the_driver():
    from pyvgpu.protocol import ERROR_CODES
    from pyvgpu_daemon.errors import CudaError

    drv = PeerFakeDriver()
    be = CudaBackend(driver=drv)
    assert [d["peers"] for d in be.devices()] == [[1], [0]]
    c1 = be.open_context(1, VA_BASE, 1)
    c0 = be.open_context(0, VA_BASE, 1)                       # created last: current on this thread
    c0.enable_peer(c1)
    assert drv.peer_on == {(c0.ctx, c1.ctx)}
    with pytest.raises(CudaError) as e:
        c0.enable_peer(c1)
    assert e.value.code == ERROR_CODES["cudaErrorPeerAccessAlreadyEnabled"]
    a, b = c0.malloc(64), c1.malloc(64)
    c1.memcpy_htod(b, bytes(range(64)), None)
    c0.copy_from_peer(a, c1, b + 8, 32, None)
    assert c0.memcpy_dtoh(a, 32, None) == bytes(range(8, 40)) and drv.peer_copies == [(c0.ctx, c1.ctx, 32)]
    c0.disable_peer(c1)
    with pytest.raises(CudaError) as e:
        c0.disable_peer(c1)
    assert e.value.code == ERROR_CODES["cudaErrorPeerAccessNotEnabled"]
    c0.close()
    c1.close()
