"""Tensor maps (TENSOR_MAP_ENCODE, TENSOR_MAP_REPLACE_ADDRESS): a request as both backends take it, the rules of the
driver API's documentation (cuda.h 13.0, cuTensorMapEncodeTiled/Im2col/Im2colWide; a broken one is
cudaErrorInvalidValue, CUDA_ERROR_INVALID_VALUE through libvcuda), and the emulated GPU's own descriptor.

A real GPU's driver encodes a tensor map in its private format, which only its TMA hardware reads: the cuda backend
hands the request to it (backends/cuda_tensor_map.py) and its answer, refusals included, is the truth there. The
emulated GPU cannot execute TMA instructions (sm_90 SASS, cp.async.bulk.tensor), so its descriptor only records the
arguments, checked here by the documented rules: 128 bytes, little-endian: "PVTM"; u8 kind, type, rank, interleave,
swizzle, L2 promotion, OOB fill, im2col-wide mode; u16 channels and pixels per column; u64 global address; five u64
sizes; five u64 byte strides (the first 0); five u8 element strides; then five u16 box sizes (tiled) or three i16
lower and three i16 upper corners (im2col; im2col-wide: the width in the first of each); zeros. A map of another
format handed to TENSOR_MAP_REPLACE_ADDRESS is cudaErrorInvalidValue.

The rules checked, as documented: the type is a CUtensorMapDataType (0..15); the rank 1..5 (im2col 3..5; with
interleave at least 3); the global address 16-byte aligned (32 with 32-byte interleave or a 16-byte-aligned packed
type); every size 1..2^32 (packed types: a multiple of 128, or 2 for 16U4_ALIGN8B); every stride a multiple of 16
(32 as for the address) below 2^40; box sizes 1..256, the inner one a multiple of 16 bytes without interleave (128
elements for the 16-byte packed types); element strides 1..8; the enumerations in range; the inner box within the
swizzle span without interleave; 32-byte interleave only with a swizzle of 32 bytes (or none, or 64 bytes: NVIDIA's
driver 580 accepts those, GPU runs 3 and 5); 16U6_ALIGN16B only without
interleave; the packed types' swizzle lists; NaN fill only for floating-point types; im2col corners in their
per-rank ranges, channels 1..256 and pixels 1..1024. Not checked: the non-zero area of an im2col box (the
documentation does not say which corner entry is which dimension)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from pyvgpu.protocol import TENSOR_MAP_BYTES, TENSOR_MAP_IM2COL, TENSOR_MAP_IM2COL_WIDE, TENSOR_MAP_TILED
from pyvgpu_daemon.errors import CudaError

# CUtensorMapDataType -> (bytes, per values) of one element: 16U4_ALIGN8B packs two values in a byte; the 16-byte
# aligned packed types take a byte each (16 values in 16 bytes, gaps included).
ELEMENT = {0: (1, 1), 1: (2, 1), 2: (4, 1), 3: (4, 1), 4: (8, 1), 5: (8, 1), 6: (2, 1), 7: (4, 1), 8: (8, 1),
           9: (2, 1), 10: (4, 1), 11: (4, 1), 12: (4, 1), 13: (1, 2), 14: (1, 1), 15: (1, 1)}
FLOATS = frozenset(range(6, 13))                 # FLOAT16 .. TFLOAT32_FTZ
U4_ALIGN8B, U4_ALIGN16B, U6_ALIGN16B = 13, 14, 15
PACKED16 = frozenset({U4_ALIGN16B, U6_ALIGN16B})
INTERLEAVE_NONE, INTERLEAVE_32B = 0, 2
SWIZZLE_NONE, SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B, SWIZZLE_128B_ATOM_32B = 0, 1, 2, 3, 4
SWIZZLE_128B_ATOM_64B = 6
SWIZZLE_SPAN = {1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}
PACKED_SWIZZLES = {U6_ALIGN16B: {SWIZZLE_NONE, SWIZZLE_128B, SWIZZLE_128B_ATOM_32B, SWIZZLE_128B_ATOM_64B},
                   U4_ALIGN16B: {SWIZZLE_NONE, SWIZZLE_128B, SWIZZLE_128B_ATOM_32B}}
WIDE_SWIZZLES = {SWIZZLE_64B, SWIZZLE_128B, SWIZZLE_128B_ATOM_32B}
WIDE_PACKED_SWIZZLES = {SWIZZLE_128B, SWIZZLE_128B_ATOM_32B}
CORNER_RANGE = {3: 1 << 15, 4: 1 << 7, 5: 1 << 4}     # rank -> bound b: offsets in [-b, b-1]
MAGIC = b"PVTM"
_HEAD = struct.Struct("<4s8BHHQ")                     # magic, kind ... mode (8 u8), channels, pixels, address
_DIMS = struct.Struct("<5Q5Q5B")                      # sizes, byte strides, element strides
_BOX = struct.Struct("<5H")
_CORNERS = struct.Struct("<3h3h")


@dataclass(frozen=True)
class Request:
    """TENSOR_MAP_ENCODE's arguments, the arrays decoded."""
    kind: int
    dtype: int
    rank: int
    addr: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    elem_strides: tuple[int, ...]
    lower: tuple[int, ...]
    upper: tuple[int, ...]
    channels: int
    pixels: int
    interleave: int
    mode: int
    swizzle: int
    l2: int
    oob: int


def _array(raw: bytes, fmt: str, count: int, what: str) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    if len(raw) != size * count:
        raise CudaError("cudaErrorInvalidValue", f"tensor map: {what} has {len(raw)} bytes, not {count} x {size}")
    return struct.unpack(f"<{count}{fmt}", raw)


def request(kind: int, dtype: int, rank: int, addr: int, dims: bytes, strides: bytes, box: bytes,
            elem_strides: bytes, lower: bytes, upper: bytes, channels: int, pixels: int, interleave: int, mode: int,
            swizzle: int, l2: int, oob: int) -> Request:
    """The wire's arguments as a Request (array lengths checked against the rank and kind)."""
    if kind not in (TENSOR_MAP_TILED, TENSOR_MAP_IM2COL, TENSOR_MAP_IM2COL_WIDE):
        raise CudaError("cudaErrorInvalidValue", f"tensor map: unknown kind {kind}")
    if not 1 <= rank <= 5:
        raise CudaError("cudaErrorInvalidValue", f"tensor map: tensorRank {rank} is not 1..5")
    corners = {TENSOR_MAP_TILED: 0, TENSOR_MAP_IM2COL: max(rank - 2, 0), TENSOR_MAP_IM2COL_WIDE: 1}[kind]
    return Request(kind, dtype, rank, addr, _array(dims, "Q", rank, "globalDim"),
                   _array(strides, "Q", rank - 1, "globalStrides"),
                   _array(box, "I", rank if kind == TENSOR_MAP_TILED else 0, "boxDim"),
                   _array(elem_strides, "I", rank, "elementStrides"), _array(lower, "i", corners, "lower corner"),
                   _array(upper, "i", corners, "upper corner"), channels, pixels, interleave, mode, swizzle, l2, oob)


def _inner_bytes(dtype: int, n: int) -> int:
    size, per = ELEMENT[dtype]
    return n * size // per


def refusal(r: Request) -> str | None:
    """Why the driver API's documentation refuses r (CUDA_ERROR_INVALID_VALUE), or None."""
    if r.dtype not in ELEMENT:
        return f"tensorDataType {r.dtype} is not a CUtensorMapDataType"
    low = 1 if r.kind == TENSOR_MAP_TILED else 3
    if not low <= r.rank <= 5:
        return f"tensorRank {r.rank} is not {low}..5"
    if r.interleave != INTERLEAVE_NONE and r.rank < 3:
        return "an interleaved layout needs tensorRank >= 3"
    wide32 = r.interleave == INTERLEAVE_32B or r.dtype in PACKED16
    if r.addr % (32 if wide32 else 16):
        return f"globalAddress {r.addr:#x} is not {32 if wide32 else 16}-byte aligned"
    if any(not 1 <= d <= 1 << 32 for d in r.dims):
        return f"globalDim {r.dims} has a size outside 1..2^32"
    if r.dtype in PACKED16 and r.dims[0] % 128 or r.dtype == U4_ALIGN8B and r.dims[0] % 2:
        return f"globalDim[0] {r.dims[0]} does not fit the packed type"
    if any(s % (32 if wide32 else 16) or s >= 1 << 40 for s in r.strides):
        return f"globalStrides {r.strides}: each a multiple of {32 if wide32 else 16} below 2^40"
    if any(not 1 <= e <= 8 for e in r.elem_strides):
        return f"elementStrides {r.elem_strides} has a step outside 1..8"
    if not 0 <= r.interleave <= 2 or not 0 <= r.swizzle <= 6 or not 0 <= r.l2 <= 3 or not 0 <= r.oob <= 1:
        return "interleave, swizzle, l2Promotion or oobFill is not of its enumeration"
    if r.interleave == INTERLEAVE_32B and r.swizzle not in (SWIZZLE_NONE, SWIZZLE_32B, SWIZZLE_64B):
        # cuda.h: "When interleave is CU_TENSOR_MAP_INTERLEAVE_32B, swizzle must be CU_TENSOR_MAP_SWIZZLE_32B"; NVIDIA's
        # driver 580.159 (CUDA 13.0) encodes it without a swizzle (H100, GPU run 3) and with the 64-byte one (H200, GPU
        # run 5) all the same: refusing what the GPU takes would fail a program only here. 128-byte swizzles, untried
        # on a GPU, stay refused as cuda.h says
        return "32-byte interleave needs CU_TENSOR_MAP_SWIZZLE_32B (or none or 64B, as NVIDIA's driver accepts)"
    if r.dtype == U6_ALIGN16B and r.interleave != INTERLEAVE_NONE:
        return "CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B needs CU_TENSOR_MAP_INTERLEAVE_NONE"
    if r.oob and r.dtype not in FLOATS:
        return "NaN fill of out-of-bound elements needs a floating-point type"
    return _tiled(r) if r.kind == TENSOR_MAP_TILED else _im2col(r)


def _swizzle_span(r: Request, inner: int) -> str | None:
    if r.interleave == INTERLEAVE_NONE and r.swizzle != SWIZZLE_NONE and inner > SWIZZLE_SPAN[r.swizzle]:
        return f"the inner box ({inner} bytes) exceeds the swizzle span ({SWIZZLE_SPAN[r.swizzle]} bytes)"
    return None


def _tiled(r: Request) -> str | None:
    if any(not 1 <= b <= 256 for b in r.box):
        return f"boxDim {r.box} has a size outside 1..256"
    inner = _inner_bytes(r.dtype, r.box[0])
    if r.interleave == INTERLEAVE_NONE and inner % 16:
        return f"the inner box ({inner} bytes) is not a multiple of 16 bytes"
    if r.dtype in PACKED16 and r.box[0] != 128:
        return "a 16-byte-aligned packed type needs boxDim[0] 128"
    if r.dtype in PACKED_SWIZZLES and r.swizzle not in PACKED_SWIZZLES[r.dtype]:
        return f"swizzle {r.swizzle} is not offered for the packed type"
    return _swizzle_span(r, inner)


def _im2col(r: Request) -> str | None:
    bound = 1 << 15 if r.kind == TENSOR_MAP_IM2COL_WIDE else CORNER_RANGE[r.rank]
    if any(not -bound <= c < bound for c in r.lower + r.upper):
        return f"pixel box corners {r.lower} {r.upper} outside [{-bound}, {bound - 1}]"
    if not 1 <= r.channels <= 256 or r.dtype in PACKED16 and r.channels != 128:
        return f"channelsPerPixel {r.channels} is not 1..256 (128 for a 16-byte-aligned packed type)"
    wide_w128 = r.kind == TENSOR_MAP_IM2COL_WIDE and r.mode == 1
    if not wide_w128 and not 1 <= r.pixels <= 1024:
        return f"pixelsPerColumn {r.pixels} is not 1..1024"
    if r.kind == TENSOR_MAP_IM2COL_WIDE:
        if r.mode not in (0, 1):
            return f"mode {r.mode} is not a CUtensorMapIm2ColWideMode"
        allowed = WIDE_PACKED_SWIZZLES if r.dtype in PACKED16 else WIDE_SWIZZLES
        if r.swizzle not in allowed:
            return f"swizzle {r.swizzle} is not offered for im2col-wide"
    elif r.dtype in PACKED_SWIZZLES and r.swizzle not in PACKED_SWIZZLES[r.dtype]:
        return f"swizzle {r.swizzle} is not offered for the packed type"
    return _swizzle_span(r, _inner_bytes(r.dtype, r.channels))


def check(r: Request) -> None:
    why = refusal(r)
    if why is not None:
        raise CudaError("cudaErrorInvalidValue", f"tensor map: {why}")


def emulated(r: Request) -> bytes:
    """The emulated GPU's descriptor of a checked request (the module docstring's layout)."""
    pad = (0,) * (5 - r.rank)
    head = _HEAD.pack(MAGIC, r.kind, r.dtype, r.rank, r.interleave, r.swizzle, r.l2, r.oob, r.mode, r.channels,
                      r.pixels, r.addr)
    dims = _DIMS.pack(*r.dims, *pad, 0, *r.strides, *pad, *r.elem_strides, *pad)
    if r.kind == TENSOR_MAP_TILED:
        tail = _BOX.pack(*r.box, *pad)
    else:
        fill = (0,) * (3 - len(r.lower))
        tail = _CORNERS.pack(*r.lower, *fill, *r.upper, *fill)
    return (head + dims + tail).ljust(TENSOR_MAP_BYTES, b"\0")


def emulated_replace_address(tmap: bytes, addr: int) -> bytes:
    """An emulated descriptor with its global address replaced, the address checked as at encoding."""
    if len(tmap) != TENSOR_MAP_BYTES or tmap[:4] != MAGIC:
        raise CudaError("cudaErrorInvalidValue", "tensor map: not a tensor map this daemon's emulated GPU encoded")
    fields = _HEAD.unpack_from(tmap)
    dtype, interleave = fields[2], fields[4]
    align = 32 if interleave == INTERLEAVE_32B or dtype in PACKED16 else 16
    if addr % align:
        raise CudaError("cudaErrorInvalidValue", f"tensor map: globalAddress {addr:#x} is not {align}-byte aligned")
    return _HEAD.pack(*fields[:-1], addr) + tmap[_HEAD.size:]
