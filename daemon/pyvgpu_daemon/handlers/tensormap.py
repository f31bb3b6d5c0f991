"""The ops of tensor maps (issue 18, 150-179): TENSOR_MAP_ENCODE and TENSOR_MAP_REPLACE_ADDRESS answer the 128-byte
CUtensorMap the backend encodes (a real GPU's driver, in its private format; the emulated GPU, its own descriptor
after the documented checks: daemon/pyvgpu_daemon/tensor_map.py)."""
from __future__ import annotations

from pyvgpu.protocol import TENSOR_MAP_BYTES
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, handler
from pyvgpu_daemon.tensor_map import request


@handler("TENSOR_MAP_ENCODE")
def tensor_map_encode(c: Call, kind: int, dtype: int, rank: int, addr: int, dims: bytes, strides: bytes, box: bytes,
                      elem_strides: bytes, lower: bytes, upper: bytes, channels: int, pixels: int, interleave: int,
                      mode: int, swizzle: int, l2: int, oob: int) -> bytes:
    r = request(kind, dtype, rank, addr, dims, strides, box, elem_strides, lower, upper, channels, pixels,
                interleave, mode, swizzle, l2, oob)
    out = c.ctx.tensor_map_encode(r)
    if len(out) != TENSOR_MAP_BYTES:
        raise CudaError("cudaErrorUnknown", f"the backend encoded a tensor map of {len(out)} bytes")
    return out


@handler("TENSOR_MAP_REPLACE_ADDRESS")
def tensor_map_replace_address(c: Call, tmap: bytes, addr: int) -> bytes:
    if len(tmap) != TENSOR_MAP_BYTES:
        raise CudaError("cudaErrorInvalidValue", f"a tensor map of {len(tmap)} bytes, not {TENSOR_MAP_BYTES}")
    return c.ctx.tensor_map_replace_address(tmap, addr)
