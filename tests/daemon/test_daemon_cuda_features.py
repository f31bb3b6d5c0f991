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
    ctx.memset_elems(p + 64, 128, 0xA1B2C3D4 & ((1 << (8 * elem)) - 1), elem, 5, 3, None)
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


class _NS:
    """An attribute bag (the driver's nested descriptor structs)."""

    def __init__(self, **kv) -> None:
        self.__dict__.update(kv)


class CUDA_ARRAY3D_DESCRIPTOR(_NS):
    pass


class CUDA_MEMCPY3D(_NS):
    def __init__(self) -> None:
        super().__init__(srcXInBytes=0, srcY=0, srcZ=0, srcPitch=0, srcHeight=0, srcHost=0, srcDevice=0, srcArray=None,
                         dstXInBytes=0, dstY=0, dstZ=0, dstPitch=0, dstHeight=0, dstHost=0, dstDevice=0, dstArray=None)


class CUDA_RESOURCE_DESC(_NS):
    def __init__(self) -> None:
        super().__init__(res=_NS(array=_NS(), linear=_NS(), pitch2D=_NS()))


class CUDA_TEXTURE_DESC(_NS):
    pass


class ArrayFakeDriver(VmmFakeDriver):
    """Arrays as host buffers (rows of Width * channels * bytes), 3D copies between host, device and arrays, texture
    and surface objects as records."""
    CUDA_ARRAY3D_DESCRIPTOR = CUDA_ARRAY3D_DESCRIPTOR
    CUDA_MEMCPY3D = CUDA_MEMCPY3D
    CUDA_RESOURCE_DESC = CUDA_RESOURCE_DESC
    CUDA_TEXTURE_DESC = CUDA_TEXTURE_DESC
    CUmemorytype = _Enum(CU_MEMORYTYPE_HOST=1, CU_MEMORYTYPE_DEVICE=2, CU_MEMORYTYPE_ARRAY=3)
    CUresourcetype = _Enum(CU_RESOURCE_TYPE_ARRAY=0, CU_RESOURCE_TYPE_LINEAR=2, CU_RESOURCE_TYPE_PITCH2D=3)
    ELEM = {0x01: 1, 0x02: 2, 0x03: 4, 0x08: 1, 0x09: 2, 0x0A: 4, 0x10: 2, 0x20: 4}

    def __init__(self) -> None:
        super().__init__()
        self.arrays: dict[int, tuple] = {}
        self.objects: dict[int, tuple] = {}

    CUarray_format = staticmethod(lambda v: v)
    CUaddress_mode = staticmethod(lambda v: ("addr", v))
    CUfilter_mode = staticmethod(lambda v: ("filter", v))
    CUtexObject = staticmethod(lambda v: v)
    CUsurfObject = staticmethod(lambda v: v)

    def cuArray3DCreate(self, d):
        pitch = d.Width * d.NumChannels * self.ELEM[d.Format]
        buf = np.zeros(pitch * max(d.Height, 1) * max(d.Depth, 1), np.uint8)
        h = ("array", self._id())
        self.arrays[h] = (d, pitch, max(d.Height, 1), buf)
        return OK, h

    def cuArrayDestroy(self, h):
        return (OK,) if self.arrays.pop(h, None) is not None else (CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def _rows(self, c, p, w, h, d):
        """(address of row r of slice k) for one side."""
        mt = getattr(c, p + "MemoryType")
        x, y, z = getattr(c, p + "XInBytes"), getattr(c, p + "Y"), getattr(c, p + "Z")
        if mt == 3:
            _, pitch, rows, buf = self.arrays[getattr(c, p + "Array")]
            base = buf.ctypes.data
        else:
            base = getattr(c, p + ("Host" if mt == 1 else "Device"))
            pitch, rows = getattr(c, p + "Pitch"), getattr(c, p + "Height")
        return lambda k, r: base + ((z + k) * rows + y + r) * pitch + x

    def cuMemcpy3DAsync(self, c, stream):
        w, h, d = c.WidthInBytes, c.Height, c.Depth
        src, dst = self._rows(c, "src", w, h, d), self._rows(c, "dst", w, h, d)
        for k in range(d):
            for r in range(h):
                ctypes.memmove(dst(k, r), src(k, r), w)
        return (OK,)

    def cuTexObjectCreate(self, r, t, view):
        v = 0x55000 + self._id()
        self.objects[v] = ("tex", r, t)
        return OK, v

    def cuTexObjectDestroy(self, v):
        return (OK,) if self.objects.pop(v, None) else (CUresult.CUDA_ERROR_INVALID_VALUE,)

    def cuSurfObjectCreate(self, r):
        v = 0x66000 + self._id()
        self.objects[v] = ("surf", r)
        return OK, v

    def cuSurfObjectDestroy(self, v):
        return (OK,) if self.objects.pop(v, None) else (CUresult.CUDA_ERROR_INVALID_VALUE,)


def test_arrays_copies_textures_surfaces_on_the_driver():
    from pyvgpu_daemon.backends.base import CopySide
    from pyvgpu_daemon.resources import ArraySpec, ChannelFormat, Sampler

    drv = ArrayFakeDriver()
    ctx = CudaBackend(driver=drv).open_context(0, VA_BASE, 1)
    u4 = ChannelFormat.of(8, 8, 8, 8, 1)
    spec = ArraySpec.of(u4, 6, 3, 0, 2 | 8)                   # surface load/store, gather
    arr = ctx.array_create(spec)
    desc, pitch, rows, buf = drv.arrays[arr]
    assert (desc.Width, desc.Height, desc.Depth, desc.Format, desc.NumChannels, desc.Flags) == (6, 3, 0, 0x01, 4, 2 | 8)
    rows_in = bytes(range(72))                                  # 3 rows of 24 bytes
    ctx.copy3d(CopySide(arr, 24, 3, 0, 0, 0, 0), None, 24, 3, 1, None, rows_in)
    assert buf.tobytes() == rows_in
    assert ctx.copy3d(None, CopySide(arr, 24, 3, 4, 1, 0, 0), 8, 2, 1, None, None) == rows_in[28:36] + rows_in[52:60]
    p = ctx.malloc(256)
    ctx.copy3d(CopySide(None, 32, 3, 0, 0, 0, p), CopySide(arr, 24, 3, 0, 0, 0, 0), 24, 3, 1, None, None)
    dev = ctx.memcpy_dtoh(p, 96, None)
    assert [dev[32 * r:32 * r + 24] for r in range(3)] == [rows_in[24 * r:24 * r + 24] for r in range(3)]
    # the sampler as the driver wants it: element reads of an integer array read as integers
    s = Sampler.of((1, 0, 3), 0, 0, 1, 0, (0.0, 0.0, 0.0, 1.0))
    v = ctx.tex_create_array(arr, spec, s)
    kind, r, t = drv.objects[v]
    assert r.resType == 0 and r.res.array.hArray == arr
    assert t.addressMode == [("addr", 1), ("addr", 0), ("addr", 3)] and t.filterMode == ("filter", 0)
    assert t.flags == 0x01 | 0x02 and t.borderColor == [0.0, 0.0, 0.0, 1.0]
    f1 = ChannelFormat.of(32, 0, 0, 0, 2)
    lv = ctx.tex_create_linear(p, f1, 64, 0, 0, Sampler.of((1, 1, 1), 1, 1, 0, 0, (0.0,) * 4))
    _, lr, lt = drv.objects[lv]
    assert (lr.resType, lr.res.linear.devPtr, lr.res.linear.format, lr.res.linear.numChannels,
            lr.res.linear.sizeInBytes, lt.flags) == (2, p, 0x20, 1, 256, 0)
    pv = ctx.tex_create_linear(p, f1, 8, 2, 64, Sampler.of((1, 1, 1), 0, 0, 0, 0, (0.0,) * 4))
    _, pr, _ = drv.objects[pv]
    assert (pr.resType, pr.res.pitch2D.width, pr.res.pitch2D.height, pr.res.pitch2D.pitchInBytes) == (3, 8, 2, 64)
    sv = ctx.surf_create(arr, spec)
    assert drv.objects[sv][0] == "surf"
    for obj in (v, lv, pv):
        ctx.tex_destroy(obj)
    ctx.surf_destroy(sv)
    assert drv.objects == {}
    ctx.array_destroy(arr)
    assert drv.arrays == {}
    ctx.close()
