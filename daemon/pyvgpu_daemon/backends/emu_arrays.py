"""The emulated GPU's CUDA arrays, 3D copies, texture and surface objects (a mixin of EmuContext).

An array is an allocation of the context's device memory (charged to the device's budget like any other) holding
its elements row after row; texture and surface objects are descriptions of where texels are and how to sample them
(emu/runtime/texture.py), kept by the value kernels receive. Values are unique per daemon, so a value from another
session or device names nothing here."""
from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np

from pyvgpu_daemon.backends.base import CopySide
from pyvgpu_daemon.emu.runtime.texture import EmuArray, EmuSurface, EmuTexture, Resources
from pyvgpu_daemon.errors import CudaError

_values = itertools.count(1)
_values_lock = threading.Lock()
TEX_VALUE_BASE = 0x7E00_0000_0000       # texture/surface object values are this plus a daemon-wide counter


def _next_value() -> int:
    with _values_lock:
        return TEX_VALUE_BASE + next(_values)


class EmuArrays:
    """Needs self.mem (DeviceMemory), self.malloc/self.free (charged allocations)."""

    def _resources(self) -> Resources:
        res = getattr(self, "_res", None)
        if res is None:
            res = self._res = Resources({}, {})
        return res

    @property
    def resources(self) -> Resources:
        return self._resources()

    # ------------------------------------------------------------------ arrays
    def array_create(self, spec: Any) -> EmuArray:
        addr = self.malloc(spec.nbytes)
        self.mem.fill(addr, 0, spec.nbytes)
        return EmuArray(addr, spec)

    def array_destroy(self, array: EmuArray) -> None:
        array.alive = False
        self.free(array.addr)

    def _block(self, side: CopySide, width: int, height: int, depth: int) -> np.ndarray:
        """The (depth, height, width) byte block of one side, as a view of the heap."""
        if side.array is not None:
            if not side.array.alive:
                raise CudaError("cudaErrorInvalidResourceHandle", "copy with a destroyed array")
            base, pitch, rows = side.array.addr, side.array.spec.pitch, side.array.spec.rows
        else:
            base, pitch, rows = side.ptr, side.pitch, side.rows or height
        start = base + (side.z * rows + side.y) * pitch + side.x
        span = ((depth - 1) * rows + height - 1) * pitch + width
        raw = self.mem.view(start, span)
        return np.lib.stride_tricks.as_strided(raw, shape=(depth, height, width), strides=(rows * pitch, pitch, 1))

    def copy3d(self, dst: CopySide | None, src: CopySide | None, width: int, height: int, depth: int, stream: Any,
               data: bytes | memoryview | None) -> bytes | None:
        if src is None:
            block = np.frombuffer(memoryview(data).cast("B"), np.uint8).reshape(depth, height, width)
        else:
            block = self._block(src, width, height, depth)
        if dst is None:
            return np.ascontiguousarray(block).tobytes()
        out = self._block(dst, width, height, depth)
        out[...] = block.copy() if src is not None else block      # a copy: the two sides may overlap
        return None

    # ------------------------------------------------------------------ textures, surfaces
    def tex_create_array(self, array: EmuArray, spec: Any, sampler: Any) -> int:
        v = _next_value()
        self._resources().textures[v] = EmuTexture(array.addr, spec.fmt, spec.width, spec.height, spec.depth,
                                                   spec.layered, spec.pitch, spec.rows, sampler, array=array)
        return v

    def tex_create_linear(self, ptr: int, fmt: Any, width: int, height: int, pitch: int, sampler: Any) -> int:
        v = _next_value()
        self._resources().textures[v] = EmuTexture(ptr, fmt, width, height, 0, False, pitch, max(height, 1), sampler,
                                                   fetch_by_index=height == 0)
        return v

    def tex_destroy(self, value: int) -> None:
        self._resources().textures.pop(value, None)

    def surf_create(self, array: EmuArray, spec: Any) -> int:
        v = _next_value()
        self._resources().surfaces[v] = EmuSurface(array)
        return v

    def surf_destroy(self, value: int) -> None:
        self._resources().surfaces.pop(value, None)

    def drop_resources(self) -> None:
        """Reset / close: every object goes."""
        res = self._resources()
        res.textures.clear()
        res.surfaces.clear()
