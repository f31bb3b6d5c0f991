"""CUDA arrays, 3D copies (arrays and linear memory, any direction), texture and surface objects.

The handlers check everything a backend would otherwise trust: formats and extents (resources.py), that each side of
a copy lies inside its array or inside one allocation of this session, that a texture's memory is this session's.
Backends get checked descriptions (resources.py) and their own array objects."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyvgpu.protocol import ARRAY_FLAG_SURFACE
from pyvgpu_daemon.backends.base import CopySide
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, handler, lookup_handle
from pyvgpu_daemon.resources import (RES_ARRAY, RES_LINEAR, RES_PITCH2D, ArraySpec, ChannelFormat, Sampler,
                                     check_sampler_for)


@dataclass
class ArrayEntry:
    spec: ArraySpec
    obj: Any                         # the backend's array


def _array(c: Call, h: int) -> ArrayEntry:
    return lookup_handle(c.st.arrays, h, "array")


@handler("ARRAY_CREATE")
def array_create(c: Call, bits_x: int, bits_y: int, bits_z: int, bits_w: int, kind: int, width: int, height: int,
                 depth: int, flags: int) -> int:
    spec = ArraySpec.of(ChannelFormat.of(bits_x, bits_y, bits_z, bits_w, kind), width, height, depth, flags)
    c.st.check_quota(spec.nbytes, "cudaMallocArray")
    h = c.st.add(c.st.arrays, lambda: ArrayEntry(spec, c.ctx.array_create(spec)))
    c.st.held += spec.nbytes
    return h


@handler("ARRAY_DESTROY")
def array_destroy(c: Call, array: int) -> None:
    a = _array(c, array)
    c.ctx.array_destroy(a.obj)           # textures over it fail cleanly from now on (CUDA: undefined)
    del c.st.arrays[array]
    c.st.held -= a.spec.nbytes


def _side(c: Call, array: int, ptr: int, pitch: int, rows: int, x: int, y: int, z: int, w: int, h: int, d: int,
          what: str) -> CopySide:
    """One side of a 3D copy, checked: inside its array, or inside one allocation of this session."""
    if array:
        a = _array(c, array)
        s = a.spec
        if x + w > s.pitch or y + h > s.rows or z + d > s.slices:
            raise CudaError("cudaErrorInvalidValue",
                            f"{what}: {w}x{h}x{d} at ({x}, {y}, {z}) outside a {s.pitch} B x {s.rows} x {s.slices} array")
        return CopySide(a.obj, s.pitch, s.rows, x, y, z, 0)
    if (h > 1 or d > 1) and x + w > pitch:
        raise CudaError("cudaErrorInvalidPitchValue", f"{what}: {x} + {w} B rows in a {pitch} B pitch")
    if d > 1 and y + h > rows:
        raise CudaError("cudaErrorInvalidValue", f"{what}: {y} + {h} rows in {rows}-row slices")
    first = (z * rows + y) * pitch + x
    last = ((z + d - 1) * rows + y + h - 1) * pitch + x + w
    c.st.check_range(ptr + first, last - first, what)
    return CopySide(None, pitch, rows, x, y, z, ptr)


@handler("MEMCPY3D_HTOD")
def memcpy3d_htod(c: Call, array: int, ptr: int, pitch: int, rows: int, x: int, y: int, z: int, width: int,
                  height: int, depth: int, stream: Any) -> None:
    if len(c.payload) != width * height * depth:
        raise CudaError("cudaErrorInvalidValue", f"3D payload of {len(c.payload)} B, expected {width}x{height}x{depth}")
    if c.payload:
        dst = _side(c, array, ptr, pitch, rows, x, y, z, width, height, depth, "3D copy destination")
        c.ctx.copy3d(dst, None, width, height, depth, stream, c.payload)


@handler("MEMCPY3D_DTOH")
def memcpy3d_dtoh(c: Call, array: int, ptr: int, pitch: int, rows: int, x: int, y: int, z: int, width: int,
                  height: int, depth: int, stream: Any) -> bytes:
    if not width * height * depth:
        return b""
    src = _side(c, array, ptr, pitch, rows, x, y, z, width, height, depth, "3D copy source")
    out = c.ctx.copy3d(None, src, width, height, depth, stream, None)
    assert out is not None
    return out


@handler("MEMCPY3D_DTOD")
def memcpy3d_dtod(c: Call, dst_array: int, dst: int, dpitch: int, drows: int, dx: int, dy: int, dz: int,
                  src_array: int, src: int, spitch: int, srows: int, sx: int, sy: int, sz: int, width: int,
                  height: int, depth: int, stream: Any) -> None:
    if width * height * depth:
        d = _side(c, dst_array, dst, dpitch, drows, dx, dy, dz, width, height, depth, "3D copy destination")
        s = _side(c, src_array, src, spitch, srows, sx, sy, sz, width, height, depth, "3D copy source")
        c.ctx.copy3d(d, s, width, height, depth, stream, None)


@handler("TEX_CREATE")
def tex_create(c: Call, res_type: int, array: int, ptr: int, bits_x: int, bits_y: int, bits_z: int, bits_w: int,
               kind: int, width: int, height: int, pitch: int, addr_x: int, addr_y: int, addr_z: int, filter: int,
               read_mode: int, normalized: int, srgb: int, border_r: float, border_g: float, border_b: float,
               border_a: float) -> int:
    c.st.charge(c.st.textures)
    sampler = Sampler.of((addr_x, addr_y, addr_z), filter, read_mode, normalized, srgb,
                         (border_r, border_g, border_b, border_a))
    if res_type == RES_ARRAY:
        a = _array(c, array)
        check_sampler_for(a.spec.fmt, sampler)
        value = c.ctx.tex_create_array(a.obj, a.spec, sampler)
    elif res_type in (RES_LINEAR, RES_PITCH2D):
        fmt = ChannelFormat.of(bits_x, bits_y, bits_z, bits_w, kind)
        check_sampler_for(fmt, sampler)
        rows = height if res_type == RES_PITCH2D else 1
        if width == 0 or rows == 0 or (res_type == RES_PITCH2D and (pitch < width * fmt.elem_size or pitch % 32)):
            raise CudaError("cudaErrorInvalidValue", f"texture over {width}x{rows} elements, pitch {pitch}")
        row = pitch if res_type == RES_PITCH2D else width * fmt.elem_size
        if ptr % 256 if res_type == RES_LINEAR else ptr % 32:
            raise CudaError("cudaErrorInvalidValue", f"texture memory at {ptr:#x} is not aligned")
        c.st.check_range(ptr, row * (rows - 1) + width * fmt.elem_size, "texture memory")
        value = c.ctx.tex_create_linear(ptr, fmt, width, rows if res_type == RES_PITCH2D else 0, row, sampler)
    else:
        raise CudaError("cudaErrorNotSupported", f"texture resource type {res_type}")
    c.st.textures[value] = (res_type, array)
    return int(value)


@handler("TEX_DESTROY")
def tex_destroy(c: Call, tex: int) -> None:
    if c.st.textures.pop(tex, None) is None:
        raise CudaError("cudaErrorInvalidValue", f"unknown texture object {tex:#x}")
    c.ctx.tex_destroy(tex)


@handler("SURF_CREATE")
def surf_create(c: Call, array: int) -> int:
    c.st.charge(c.st.surfaces)
    a = _array(c, array)
    if not a.spec.flags & ARRAY_FLAG_SURFACE:
        raise CudaError("cudaErrorInvalidValue", "surface over an array made without cudaArraySurfaceLoadStore")
    value = c.ctx.surf_create(a.obj, a.spec)
    c.st.surfaces[value] = array
    return int(value)


@handler("SURF_DESTROY")
def surf_destroy(c: Call, surf: int) -> None:
    if c.st.surfaces.pop(surf, None) is None:
        raise CudaError("cudaErrorInvalidValue", f"unknown surface object {surf:#x}")
    c.ctx.surf_destroy(surf)
