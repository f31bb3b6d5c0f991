"""CUDA arrays, 3D copies, texture and surface objects on a real GPU (a mixin of CudaContext): cuArray3DCreate,
cuMemcpy3DAsync, cuTexObjectCreate, cuSurfObjectCreate. The runtime's descriptions (resources.py) are translated
to the driver's: a channel format of n channels of one size and kind becomes a CUarray_format and NumChannels; the
runtime's read mode becomes CU_TRSF_READ_AS_INTEGER (element-type reads of integer textures) and normalized
coordinates CU_TRSF_NORMALIZED_COORDINATES; address and filter modes share their numbers."""
from __future__ import annotations

from typing import Any

import numpy as np

from pyvgpu.protocol import ARRAY_FLAG_GATHER, ARRAY_FLAG_LAYERED, ARRAY_FLAG_SURFACE
from pyvgpu_daemon.backends.base import CopySide
from pyvgpu_daemon.resources import ELEMENT, FLOAT, SIGNED, UNSIGNED, ChannelFormat

# CUarray_format by (kind, bits): CUDA 13 cuda.h
_FORMATS = {(UNSIGNED, 8): 0x01, (UNSIGNED, 16): 0x02, (UNSIGNED, 32): 0x03, (SIGNED, 8): 0x08, (SIGNED, 16): 0x09,
            (SIGNED, 32): 0x0A, (FLOAT, 16): 0x10, (FLOAT, 32): 0x20}
CU_TRSF_READ_AS_INTEGER = 0x01
CU_TRSF_NORMALIZED_COORDINATES = 0x02
CU_TRSF_SRGB = 0x10
_ARRAY_FLAGS = {ARRAY_FLAG_LAYERED: 0x01, ARRAY_FLAG_SURFACE: 0x02, ARRAY_FLAG_GATHER: 0x08}   # CUDA_ARRAY3D_*


def array_format(drv: Any, fmt: ChannelFormat) -> Any:
    return drv.CUarray_format(_FORMATS[(fmt.kind, fmt.bits[0])])


class CudaArrays:
    """Needs self.drv, self._stream(stream), self._sync_stream(stream) and self._check(result, what) (cuda.check:
    the context provides it, so this module does not import cuda.py, which imports it)."""

    def _check(self, result: Any, what: str) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ arrays
    def array_create(self, spec: Any) -> Any:
        drv = self.drv
        d = drv.CUDA_ARRAY3D_DESCRIPTOR()
        d.Width, d.Height, d.Depth = spec.width, spec.height, spec.depth
        d.Format = array_format(drv, spec.fmt)
        d.NumChannels = spec.fmt.channels
        d.Flags = sum(cu for rt, cu in _ARRAY_FLAGS.items() if spec.flags & rt)
        return self._check(drv.cuArray3DCreate(d), "cuArray3DCreate")

    def array_destroy(self, array: Any) -> None:
        self._check(self.drv.cuArrayDestroy(array), "cuArrayDestroy")

    def _side(self, c: Any, prefix: str, side: CopySide | None, host: int) -> None:
        """Fills the src* or dst* fields of a CUDA_MEMCPY3D for one side (None: host memory at `host`)."""
        mt = self.drv.CUmemorytype
        if side is None:
            setattr(c, prefix + "MemoryType", mt.CU_MEMORYTYPE_HOST)
            setattr(c, prefix + "Host", host)
            return
        setattr(c, prefix + "XInBytes", side.x)
        setattr(c, prefix + "Y", side.y)
        setattr(c, prefix + "Z", side.z)
        if side.array is not None:
            setattr(c, prefix + "MemoryType", mt.CU_MEMORYTYPE_ARRAY)
            setattr(c, prefix + "Array", side.array)
        else:
            setattr(c, prefix + "MemoryType", mt.CU_MEMORYTYPE_DEVICE)
            setattr(c, prefix + "Device", side.ptr)
            setattr(c, prefix + "Pitch", side.pitch)
            setattr(c, prefix + "Height", side.rows)

    def copy3d(self, dst: CopySide | None, src: CopySide | None, width: int, height: int, depth: int, stream: Any,
               data: bytes | memoryview | None) -> bytes | None:
        drv = self.drv
        c = drv.CUDA_MEMCPY3D()
        host = np.frombuffer(memoryview(data).cast("B"), np.uint8) if src is None else np.empty(width * height * depth,
                                                                                              np.uint8)
        self._side(c, "src", src, host.ctypes.data)
        self._side(c, "dst", dst, host.ctypes.data)
        if src is None or dst is None:                   # the host side: rows packed
            p = "src" if src is None else "dst"
            setattr(c, p + "Pitch", width)
            setattr(c, p + "Height", height)
        c.WidthInBytes, c.Height, c.Depth = width, height, depth
        self._check(drv.cuMemcpy3DAsync(c, self._stream(stream)), "cuMemcpy3DAsync")
        if src is None or dst is None:
            self._sync_stream(stream)                    # the host buffer goes away after this call
        return host.tobytes() if dst is None else None

    # ------------------------------------------------------------------ textures, surfaces
    def _tex_desc(self, fmt: ChannelFormat, sampler: Any) -> Any:
        drv = self.drv
        t = drv.CUDA_TEXTURE_DESC()
        t.addressMode = [drv.CUaddress_mode(a) for a in sampler.address]
        t.filterMode = drv.CUfilter_mode(sampler.filter)
        flags = CU_TRSF_NORMALIZED_COORDINATES if sampler.normalized else 0
        if sampler.read_mode == ELEMENT and fmt.kind != FLOAT:
            flags |= CU_TRSF_READ_AS_INTEGER
        if sampler.srgb:
            flags |= CU_TRSF_SRGB
        t.flags = flags
        t.borderColor = list(sampler.border)
        return t

    def _tex_object(self, r: Any, fmt: ChannelFormat, sampler: Any) -> int:
        obj = self._check(self.drv.cuTexObjectCreate(r, self._tex_desc(fmt, sampler), None), "cuTexObjectCreate")
        return int(obj)

    def tex_create_array(self, array: Any, spec: Any, sampler: Any) -> int:
        drv = self.drv
        r = drv.CUDA_RESOURCE_DESC()
        r.resType = drv.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
        r.res.array.hArray = array
        return self._tex_object(r, spec.fmt, sampler)

    def tex_create_linear(self, ptr: int, fmt: ChannelFormat, width: int, height: int, pitch: int,
                          sampler: Any) -> int:
        drv = self.drv
        r = drv.CUDA_RESOURCE_DESC()
        if height == 0:
            r.resType = drv.CUresourcetype.CU_RESOURCE_TYPE_LINEAR
            r.res.linear.devPtr = ptr
            r.res.linear.format = array_format(drv, fmt)
            r.res.linear.numChannels = fmt.channels
            r.res.linear.sizeInBytes = width * fmt.elem_size
        else:
            r.resType = drv.CUresourcetype.CU_RESOURCE_TYPE_PITCH2D
            r.res.pitch2D.devPtr = ptr
            r.res.pitch2D.format = array_format(drv, fmt)
            r.res.pitch2D.numChannels = fmt.channels
            r.res.pitch2D.width = width
            r.res.pitch2D.height = height
            r.res.pitch2D.pitchInBytes = pitch
        return self._tex_object(r, fmt, sampler)

    def tex_destroy(self, value: int) -> None:
        self._check(self.drv.cuTexObjectDestroy(self.drv.CUtexObject(value)), "cuTexObjectDestroy")

    def surf_create(self, array: Any, spec: Any) -> int:
        drv = self.drv
        r = drv.CUDA_RESOURCE_DESC()
        r.resType = drv.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
        r.res.array.hArray = array
        return int(self._check(drv.cuSurfObjectCreate(r), "cuSurfObjectCreate"))

    def surf_destroy(self, value: int) -> None:
        self._check(self.drv.cuSurfObjectDestroy(self.drv.CUsurfObject(value)), "cuSurfObjectDestroy")
