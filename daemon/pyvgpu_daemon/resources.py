"""CUDA arrays, texture and surface objects as the daemon describes them to a backend: checked descriptions built
from the typed arguments of ARRAY_CREATE / TEX_CREATE / SURF_CREATE (protocol.py), with CUDA's error codes for what
CUDA refuses. Backends turn them into their own objects (emu: memory + the sampler of emu/runtime/texture.py; cuda:
CUarray, CUtexObject, CUsurfObject)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyvgpu.cuda_enums import CUDA_ENUMS
from pyvgpu.protocol import ARRAY_FLAG_CUBEMAP, ARRAY_FLAG_GATHER, ARRAY_FLAG_LAYERED, ARRAY_FLAG_SURFACE
from pyvgpu_daemon.errors import CudaError

_KIND = CUDA_ENUMS["cudaChannelFormatKind"]
SIGNED, UNSIGNED, FLOAT = (_KIND["cudaChannelFormatKind" + k] for k in ("Signed", "Unsigned", "Float"))
_RES = CUDA_ENUMS["cudaResourceType"]
RES_ARRAY, RES_LINEAR, RES_PITCH2D = (_RES["cudaResourceType" + k] for k in ("Array", "Linear", "Pitch2D"))
_ADDR = CUDA_ENUMS["cudaTextureAddressMode"]
WRAP, CLAMP, MIRROR, BORDER = (_ADDR["cudaAddressMode" + k] for k in ("Wrap", "Clamp", "Mirror", "Border"))
POINT = CUDA_ENUMS["cudaTextureFilterMode"]["cudaFilterModePoint"]
LINEAR = CUDA_ENUMS["cudaTextureFilterMode"]["cudaFilterModeLinear"]
ELEMENT = CUDA_ENUMS["cudaTextureReadMode"]["cudaReadModeElementType"]
NORMALIZED = CUDA_ENUMS["cudaTextureReadMode"]["cudaReadModeNormalizedFloat"]
MAX_ARRAY_DIM = (1 << 17, 1 << 16, 1 << 14)      # width, height, depth/layers (sm_75's 2D/3D texture limits)


@dataclass(frozen=True)
class ChannelFormat:
    """cudaChannelFormatDesc: channel sizes in bits and the kind; 1, 2 or 4 channels of one size, as arrays need."""
    bits: tuple[int, int, int, int]
    kind: int

    @classmethod
    def of(cls, x: int, y: int, z: int, w: int, kind: int) -> "ChannelFormat":
        bits = (x, y, z, w)
        n = sum(1 for b in bits if b)
        if kind not in (SIGNED, UNSIGNED, FLOAT):
            raise CudaError("cudaErrorNotSupported", f"channel format kind {kind}")
        if (n not in (1, 2, 4) or any(b not in (0, 8, 16, 32) for b in bits) or any(b == 0 for b in bits[:n])
                or any(b != x for b in bits[:n]) or (kind == FLOAT and x == 8)):
            raise CudaError("cudaErrorInvalidChannelDescriptor", f"channel format {bits} kind {kind}")
        return cls(bits, kind)

    @property
    def channels(self) -> int:
        return sum(1 for b in self.bits if b)

    @property
    def channel_bytes(self) -> int:
        return self.bits[0] // 8

    @property
    def elem_size(self) -> int:
        return self.channels * self.channel_bytes

    @property
    def dtype(self) -> Any:
        """NumPy type of one channel."""
        b = self.bits[0]
        if self.kind == FLOAT:
            return np.float16 if b == 16 else np.float32
        return {(8, SIGNED): np.int8, (16, SIGNED): np.int16, (32, SIGNED): np.int32, (8, UNSIGNED): np.uint8,
                (16, UNSIGNED): np.uint16, (32, UNSIGNED): np.uint32}[(b, self.kind)]


@dataclass(frozen=True)
class ArraySpec:
    fmt: ChannelFormat
    width: int
    height: int                   # 0 for 1D
    depth: int                    # 0 for 2D; layers when layered
    flags: int

    @classmethod
    def of(cls, fmt: ChannelFormat, width: int, height: int, depth: int, flags: int) -> "ArraySpec":
        if flags & ARRAY_FLAG_CUBEMAP:
            raise CudaError("cudaErrorNotSupported", "cubemap arrays")
        if flags & ~(ARRAY_FLAG_LAYERED | ARRAY_FLAG_SURFACE | ARRAY_FLAG_GATHER):
            raise CudaError("cudaErrorInvalidValue", f"array flags {flags:#x}")
        if width == 0 or (height == 0 and depth and not flags & ARRAY_FLAG_LAYERED) \
                or (flags & ARRAY_FLAG_LAYERED and depth == 0):
            raise CudaError("cudaErrorInvalidValue", f"array extent {width}x{height}x{depth} flags {flags:#x}")
        if width > MAX_ARRAY_DIM[0] or height > MAX_ARRAY_DIM[1] or depth > MAX_ARRAY_DIM[2]:
            raise CudaError("cudaErrorInvalidValue", f"array extent {width}x{height}x{depth} is too large")
        return cls(fmt, width, height, depth, flags)

    @property
    def layered(self) -> bool:
        return bool(self.flags & ARRAY_FLAG_LAYERED)

    @property
    def rows(self) -> int:
        return max(self.height, 1)

    @property
    def slices(self) -> int:
        return max(self.depth, 1)

    @property
    def pitch(self) -> int:
        return self.width * self.fmt.elem_size

    @property
    def nbytes(self) -> int:
        return self.pitch * self.rows * self.slices

    @property
    def dims(self) -> int:
        """1, 2 or 3 sampled dimensions (layers are not one)."""
        if self.height == 0:
            return 1
        return 2 if self.depth == 0 or self.layered else 3


@dataclass(frozen=True)
class Sampler:
    """cudaTextureDesc as the sampling rules need it."""
    address: tuple[int, int, int]
    filter: int
    read_mode: int
    normalized: bool
    srgb: bool
    border: tuple[float, float, float, float]

    @classmethod
    def of(cls, addr: tuple[int, int, int], filt: int, read_mode: int, normalized: int, srgb: int,
           border: tuple[float, float, float, float]) -> "Sampler":
        if any(a not in (WRAP, CLAMP, MIRROR, BORDER) for a in addr) or filt not in (POINT, LINEAR) \
                or read_mode not in (ELEMENT, NORMALIZED):
            raise CudaError("cudaErrorInvalidValue", f"texture descriptor address {addr} filter {filt} "
                                                     f"read mode {read_mode}")
        return cls(tuple(addr), filt, read_mode, bool(normalized), bool(srgb), tuple(border))  # type: ignore[arg-type]


def check_sampler_for(fmt: ChannelFormat, s: Sampler) -> None:
    """CUDA's rule: linear filtering needs floating-point results (a float texture, or normalized float reads of
    8/16-bit integers); wrap and mirror addressing need normalized coordinates (otherwise clamp is used)."""
    float_result = fmt.kind == FLOAT or (s.read_mode == NORMALIZED and fmt.bits[0] in (8, 16))
    if s.filter == LINEAR and not float_result:
        raise CudaError("cudaErrorInvalidValue", "linear filtering of a texture that does not return floats")
    if s.read_mode == NORMALIZED and fmt.kind != FLOAT and fmt.bits[0] == 32:
        raise CudaError("cudaErrorInvalidValue", "normalized float reads of 32-bit integers")
