"""Tensor maps on a real GPU (a mixin of CudaContext): the driver encodes them in its own private format, which only
its TMA hardware reads, so each request goes to the driver's cuTensorMapEncodeTiled / Im2col / Im2colWide /
ReplaceAddress as the program asked, and the driver's answer (refusals included) is the reply. The entry points are
taken through the driver's own cuGetProcAddress (cuda_driver.py): a driver without one answers
cudaErrorNotSupported naming it (Im2colWide came with CUDA 12.8, the others with 12.0)."""
from __future__ import annotations

import ctypes
from typing import Any

from pyvgpu.protocol import ERROR_NAMES, TENSOR_MAP_BYTES, TENSOR_MAP_IM2COL, TENSOR_MAP_TILED
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.tensor_map import Request

_I, _U, _P, _U64P, _U32P, _IP = (ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                                 ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_int))
# name -> its arguments' types (cuda.h 13.0; each returns a CUresult)
_ENTRY: dict[str, tuple[Any, ...]] = {
    "cuTensorMapEncodeTiled": (_P, _I, _U, _P, _U64P, _U64P, _U32P, _U32P, _I, _I, _I, _I),
    "cuTensorMapEncodeIm2col": (_P, _I, _U, _P, _U64P, _U64P, _IP, _IP, _U, _U, _U32P, _I, _I, _I, _I),
    "cuTensorMapEncodeIm2colWide": (_P, _I, _U, _P, _U64P, _U64P, _I, _I, _U, _U, _U32P, _I, _I, _I, _I, _I),
    "cuTensorMapReplaceAddress": (_P, _P),
}


def _arr(ctype: Any, values: tuple[int, ...]) -> Any:
    return (ctype * max(len(values), 1))(*values)


class CudaTensorMaps:
    """Needs self.api (cuda_driver.DriverEntryPoints) and self.drv (cuda-bindings' driver, for result names); runs
    on the context's worker thread, where the context is current (the driver answers CUDA_ERROR_INVALID_CONTEXT
    without one)."""
    api: Any
    drv: Any

    def _tensor_map_fn(self, name: str) -> Any:
        argtypes = _ENTRY[name]
        ptr = self.api.pointer(name, self.api.version) if self.api.has(name) else 0
        if not ptr:
            raise CudaError("cudaErrorNotSupported", f"{name}: the GPU host's driver has none")
        return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(ptr)

    def _tensor_map_check(self, err: int, name: str) -> None:
        if err:
            try:
                what = self.drv.CUresult(err).name
            except ValueError:
                what = f"CUresult {err}"
            raise CudaError(err if err in ERROR_NAMES else "cudaErrorUnknown", f"{name}: {what}")

    def tensor_map_encode(self, r: Request) -> bytes:
        out = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 64)
        tmap = ctypes.addressof(out) + (-ctypes.addressof(out)) % 64      # the driver wants 64-byte alignment
        dims, strides, steps = _arr(ctypes.c_uint64, r.dims), _arr(ctypes.c_uint64, r.strides), \
            _arr(ctypes.c_uint32, r.elem_strides)
        if r.kind == TENSOR_MAP_TILED:
            name = "cuTensorMapEncodeTiled"
            err = self._tensor_map_fn(name)(tmap, r.dtype, r.rank, r.addr, dims, strides,
                                            _arr(ctypes.c_uint32, r.box), steps, r.interleave, r.swizzle, r.l2,
                                            r.oob)
        elif r.kind == TENSOR_MAP_IM2COL:
            name = "cuTensorMapEncodeIm2col"
            err = self._tensor_map_fn(name)(tmap, r.dtype, r.rank, r.addr, dims, strides, _arr(ctypes.c_int, r.lower),
                                            _arr(ctypes.c_int, r.upper), r.channels, r.pixels, steps, r.interleave,
                                            r.swizzle, r.l2, r.oob)
        else:
            name = "cuTensorMapEncodeIm2colWide"
            err = self._tensor_map_fn(name)(tmap, r.dtype, r.rank, r.addr, dims, strides, r.lower[0], r.upper[0],
                                            r.channels, r.pixels, steps, r.interleave, r.mode, r.swizzle, r.l2,
                                            r.oob)
        self._tensor_map_check(err, name)
        return ctypes.string_at(tmap, TENSOR_MAP_BYTES)

    def tensor_map_replace_address(self, tmap: bytes, addr: int) -> bytes:
        if len(tmap) != TENSOR_MAP_BYTES:
            raise CudaError("cudaErrorInvalidValue", f"tensor map of {len(tmap)} bytes")
        buf = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 64)
        at = ctypes.addressof(buf) + (-ctypes.addressof(buf)) % 64
        ctypes.memmove(at, tmap, TENSOR_MAP_BYTES)
        name = "cuTensorMapReplaceAddress"
        self._tensor_map_check(self._tensor_map_fn(name)(at, addr), name)
        return ctypes.string_at(at, TENSOR_MAP_BYTES)
