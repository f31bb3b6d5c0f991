"""Texture and surface objects on the emulated GPU: where their texels are and how a fetch samples them.

The sampling follows the CUDA C++ Programming Guide, appendix "Texture Fetching": coordinates are unnormalized
([0, N)) or normalized ([0, 1) scaled by N); addressing clamp, wrap, mirror or border (wrap and mirror only with
normalized coordinates; CUDA falls back to clamp otherwise); point filtering takes texel floor(x); linear filtering
takes x_B = x - 0.5, i = floor(x_B), alpha = frac(x_B) held in 9-bit fixed point (8 fraction bits, rounded to
nearest, a tie up), and blends T[i] and T[i+1] per dimension (trilinear in 3D; layers are never blended).
What the Guide leaves out is taken from real GPUs (tools/gpu_probes/diff_kernels.cu; its recorded H100 results are
replayed by tests/emu/test_emu_diff_kernels.py, from tests/differential/gpu_textures_run3.npz):
- A normalized coordinate is held in fixed point with 21 fraction bits (rounded toward -inf) before it is scaled by
  N; under linear filtering wrap and mirror then act on the texel indices i and i + 1, not on the coordinate, so a
  mirrored fetch's alpha is the unmirrored one's (this decides a tie's rounding below). Run 3's tex_2d_coords:
  float64 coordinates wrapped first gave 8 of 16384 results the H100 did not.
- Clamp addressing under linear filtering clamps the coordinate to [0.5, N - 0.5] (alpha 0 at the edges), not only
  the texel indices: invisible in 1D and 2D, where the weights of two texels clamped together sum to their pair's
  weight, but not in 3D (run 3: api_texture's 3D fetches, 40 recorded H100 results). tld4 is left as it was.
- Each texel's weight is held in 9-bit fixed point too, rounded to nearest per product, with factors f = alpha or
  1 - alpha per dimension in 1/256 units: in 2D w = round(fx fy), a tie up when x and y are both alpha or both
  1 - alpha (so w11 = round(alpha beta) and the other three are its differences, summing to 1); in 3D in two stages,
  v = round(fx fz) with a tie up when fx is alpha, then w = round(v fy) with a tie as in 2D. Runs 1-3 (an H200, two
  H100s): api_texture's (27 T00 + 6 T10 + 180 T01 + 43 T11) / 256, every tex_2d and tex_3d result, and run 3's
  tex_3d_fine (alphas in 1/256 steps, where five other 3D rules each miss hundreds to thousands of 16384 results).
Read modes: element type, or normalized float for 8/16-bit integers (unsigned to [0, 1], signed to [-1, 1]). Border
addressing returns the border color for texels outside (for integer results, its value converted). A 1D texture over
linear memory is fetched by integer index (tex1Dfetch): no filtering, 0 outside. tld4 (tex2Dgather) returns one
component of the four texels of the bilinear footprint. Surfaces are addressed in bytes along x (suld.b/sust.b) with
trap/clamp/zero boundary handling.

Everything works on lane vectors (one element per thread) and reads the device's heap through `mem.view`, so a
texture over freed memory faults (cudaErrorIllegalAddress) instead of reading garbage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.resources import (BORDER, CLAMP, FLOAT, LINEAR, MIRROR, NORMALIZED, SIGNED, WRAP, ChannelFormat,
                                     Sampler)


@dataclass
class EmuArray:
    addr: int                      # its bytes in the device heap: rows of spec.pitch, spec.rows rows per slice
    spec: Any                      # resources.ArraySpec
    alive: bool = True


@dataclass
class EmuTexture:
    base: int                      # device address of texel (0, 0, 0)
    fmt: ChannelFormat
    width: int
    height: int                    # 0: 1D
    depth: int                     # 0: 2D (layers when layered)
    layered: bool
    pitch: int                     # bytes per row
    rows: int                      # rows per slice
    sampler: Sampler
    fetch_by_index: bool = False   # a cudaResourceTypeLinear texture: tex1Dfetch
    array: EmuArray | None = None  # the array it reads, to notice that it was freed


@dataclass
class EmuSurface:
    array: EmuArray


@dataclass
class Resources:
    """The texture and surface objects of one (session, device), by the value kernels hold."""
    textures: dict[int, EmuTexture]
    surfaces: dict[int, EmuSurface]

    def texture(self, handle: np.ndarray) -> EmuTexture:
        return _one(self.textures, handle, "texture")

    def surface(self, handle: np.ndarray) -> EmuSurface:
        return _one(self.surfaces, handle, "surface")


def _one(table: dict, handle: Any, what: str) -> Any:
    """The object all selected lanes name (per-lane different objects are refused: no real program does that)."""
    h = np.asarray(handle)
    v = int(h.flat[0]) if h.size else 0
    if h.size and (h != h.flat[0]).any():
        raise CudaError("cudaErrorInvalidPtx", f"lanes of one {what} instruction name different {what} objects")
    obj = table.get(v)
    if obj is None or (getattr(obj, "array", None) is not None and not obj.array.alive):
        raise CudaError("cudaErrorIllegalAddress", f"{what} object {v:#x} is not live on this device")
    return obj


# ---------------------------------------------------------------------------------------------- texel reads
def _texels(mem: Any, tex: EmuTexture) -> np.ndarray:
    """The texels as a (slices, rows, width, channels) array view of the heap."""
    f = tex.fmt
    rows = max(tex.rows, 1)
    slices = max(tex.depth, 1)
    span = tex.pitch * (rows * slices - 1) + tex.width * f.elem_size
    raw = mem.view(tex.base, span)
    full = np.lib.stride_tricks.as_strided(raw, shape=(slices, rows, tex.width * f.elem_size),
                                           strides=(tex.pitch * rows, tex.pitch, 1), writeable=False)
    return full.view(f.dtype).reshape(slices, rows, tex.width, f.channels)


def _to_float(vals: np.ndarray, fmt: ChannelFormat, mode: int) -> np.ndarray:
    """Texel values as the fetch returns them when the result is float."""
    if fmt.kind == FLOAT:
        return vals.astype(np.float32)
    if mode == NORMALIZED:
        if fmt.kind == SIGNED:
            top = float(np.iinfo(fmt.dtype).max)
            return np.maximum(vals.astype(np.float32) / top, -1.0).astype(np.float32)
        return (vals.astype(np.float32) / float(np.iinfo(fmt.dtype).max)).astype(np.float32)
    return vals.astype(np.float32)


def _address(i: np.ndarray, n: int, mode: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer texel index i (any int) → (index in [0, n), inside mask) under an address mode."""
    if mode == WRAP:
        return np.mod(i, n), np.ones(i.shape, bool)
    if mode == MIRROR:
        m = np.mod(i, 2 * n)
        return np.where(m < n, m, 2 * n - 1 - m), np.ones(i.shape, bool)
    inside = (i >= 0) & (i < n)
    return np.clip(i, 0, n - 1), (inside if mode == BORDER else np.ones(i.shape, bool))


NORM_FRACTION_BITS = 21           # a normalized coordinate's fixed point (real-GPU run 3, tex_2d_coords)


def _coord(x: np.ndarray, n: int, sampler: Sampler, mode: int, linear: bool) -> np.ndarray:
    """A coordinate in texel units (float64). Normalized: held in fixed point (NORM_FRACTION_BITS, toward -inf),
    then scaled by n; point filtering wraps or mirrors the coordinate, linear filtering leaves that to the texel
    indices (_address) and only moves the coordinate by whole periods, so huge coordinates stay exact."""
    x = x.astype(np.float64)
    if sampler.normalized:
        x = np.floor(x * 2.0 ** NORM_FRACTION_BITS) / 2.0 ** NORM_FRACTION_BITS
        if mode in (WRAP, MIRROR):
            period = 1.0 if mode == WRAP else 2.0
            t = x - np.floor(x / period) * period                  # exact: a whole number of periods
            if not linear and mode == MIRROR:
                t = np.where(t < 1.0, t, 2.0 - t)
            x = t
        x = x * n
    return x


def fetch(mem: Any, tex: EmuTexture, coords: list[np.ndarray], layer: np.ndarray | None, float_result: bool,
          gather: int | None = None) -> list[np.ndarray]:
    """The four components per lane: float32 when float_result (float textures, normalized reads), else the
    channels' integers as int64 (the caller casts). `coords`: x[, y[, z]] per lane (floats, or ints for
    tex1Dfetch); `layer`: the layer index of layered textures; gather: tld4's component (0..3)."""
    s = tex.sampler
    f = tex.fmt
    lanes = coords[0].shape[0]
    texels = _texels(mem, tex)
    if tex.fetch_by_index:                                 # tex1Dfetch: integer index, 0 outside
        i = np.asarray(coords[0]).astype(np.int64)
        ok = (i >= 0) & (i < tex.width)
        v = texels[0, 0, np.clip(i, 0, tex.width - 1)]
        v = np.where(ok[:, None], v, 0)
        return _components(v, f, s, float_result)
    dims = 1 if tex.height == 0 else (2 if tex.depth == 0 or tex.layered else 3)
    sizes = [tex.width, max(tex.height, 1), max(tex.depth, 1)][:dims]
    modes = [s.address[k] if s.normalized or s.address[k] in (CLAMP, BORDER) else CLAMP for k in range(dims)]
    linear = (s.filter == LINEAR and float_result) or gather is not None
    # tld4 keeps wrapping/mirroring the coordinate (which texel is its i decides its order; no GPU data on it)
    xs = [_coord(np.asarray(coords[k]), sizes[k], s, modes[k], linear and gather is None) for k in range(dims)]
    sl = np.zeros(lanes, np.int64)
    if tex.layered:
        sl = np.clip(np.asarray(layer).astype(np.int64), 0, max(tex.depth, 1) - 1)
    border = np.array(s.border, np.float64)
    if not linear:
        idx, inside = [], np.ones(lanes, bool)
        for k in range(dims):
            i, ok = _address(np.floor(xs[k]).astype(np.int64), sizes[k], modes[k])
            idx.append(i)
            inside &= ok
        v = _gather_texels(texels, idx, sl, dims)
        out = _components(v, f, s, float_result)
        return [np.where(inside, o, _border_value(border[c], o.dtype)) for c, o in enumerate(out)]
    # linear filtering: alphas and weights in 9-bit fixed point (integers in 1/256 units), as the hardware keeps them
    base, alpha = [], []
    for k in range(dims):
        # clamp: the coordinate (gathers keep their footprint: no GPU data on them)
        x = np.clip(xs[k], 0.5, sizes[k] - 0.5) if modes[k] == CLAMP and gather is None else xs[k]
        xb = x - 0.5
        i0 = np.floor(xb)
        base.append(i0.astype(np.int64))
        a = np.floor((xb - i0) * 256.0 + 0.5)
        alpha.append(np.where(np.isfinite(a), a, 0).astype(np.int64))
    corners = [[]]
    for k in range(dims):
        corners = [c + [b] for c in corners for b in (0, 1)]
    acc = [np.zeros(lanes, np.float64) for _ in range(4)]
    picked = []
    for c in corners:
        idx, inside = [], np.ones(lanes, bool)
        for k in range(dims):
            i, ok = _address(base[k] + c[k], sizes[k], modes[k])
            idx.append(i)
            inside &= ok
        w = _weight([alpha[k] if c[k] else 256 - alpha[k] for k in range(dims)], c) / 256.0
        vals = _components(_gather_texels(texels, idx, sl, dims), f, s, True)
        vals = [np.where(inside, v.astype(np.float64), border[ch]) for ch, v in enumerate(vals)]
        picked.append(vals)
        for ch in range(4):
            acc[ch] += w * vals[ch]
    if gather is not None:
        # tld4 order (PTX ISA): (i, j+1), (i+1, j+1), (i+1, j), (i, j); corners are [di, dj] in 2D
        order = [[0, 1], [1, 1], [1, 0], [0, 0]]
        res = [picked[corners.index(o)][gather].astype(np.float32) for o in order]
        return res if float_result else [r.astype(np.int64) for r in res]
    return [a.astype(np.float32) for a in acc]


def _round256(p: np.ndarray, tie_up: bool) -> np.ndarray:
    """p / 256 to the nearest integer, a tie up or down."""
    q, r = np.divmod(p, 256)
    return q + (r > 128) + ((r == 128) & tie_up)


def _weight(f: list[np.ndarray], upper: list[int]) -> np.ndarray:
    """A texel's weight in 1/256 units from its factors f (alpha or 1 - alpha per dimension, in 1/256 units; upper:
    which are alpha), rounded as the GPU does (module docstring): 2D one rounding, 3D (x z) then y."""
    if len(f) == 1:
        return f[0]
    if len(f) == 2:
        return _round256(f[0] * f[1], upper[0] == upper[1])
    v = _round256(f[0] * f[2], upper[0] == 1)
    return _round256(v * f[1], upper[0] == upper[1])


def _gather_texels(texels: np.ndarray, idx: list[np.ndarray], sl: np.ndarray, dims: int) -> np.ndarray:
    if dims == 1:
        return texels[sl, 0, idx[0]]
    if dims == 2:
        return texels[sl, idx[1], idx[0]]
    return texels[idx[2], idx[1], idx[0]]


def _components(v: np.ndarray, fmt: ChannelFormat, s: Sampler, float_result: bool) -> list[np.ndarray]:
    """(lanes, channels) texels → four component vectors; missing channels are 0 (w: 1 for float results)."""
    out = []
    for c in range(4):
        if c < fmt.channels:
            col = v[:, c]
            out.append(_to_float(col, fmt, s.read_mode) if float_result else col.astype(np.int64))
        else:
            fill = 1 if c == 3 else 0
            out.append(np.full(v.shape[0], fill, np.float32 if float_result else np.int64))
    return out


def _border_value(b: float, dtype: Any) -> Any:
    return np.float32(b) if np.dtype(dtype).kind == "f" else np.int64(int(b))


# ---------------------------------------------------------------------------------------------- queries
def query(obj: EmuTexture | EmuSurface, what: str) -> int:
    """txq / suq: width, height, depth, channel data type / order, normalized coordinates, filter, address modes."""
    if isinstance(obj, EmuSurface):
        sp = obj.array.spec
        vals = {"width": sp.width, "height": max(sp.height, 1), "depth": max(sp.depth, 1),
                "array_size": sp.depth if sp.layered else 1}
    else:
        vals = {"width": obj.width, "height": max(obj.height, 1), "depth": max(obj.depth, 1),
                "array_size": obj.depth if obj.layered else 1, "normalized_coords": int(obj.sampler.normalized),
                "filter_mode": obj.sampler.filter, "addr_mode_0": obj.sampler.address[0],
                "addr_mode_1": obj.sampler.address[1], "addr_mode_2": obj.sampler.address[2],
                "num_mipmap_levels": 1, "num_samples": 0, "channel_order": obj.fmt.channels,
                "channel_data_type": obj.fmt.kind}
    if what not in vals:
        raise CudaError("cudaErrorInvalidPtx", f"texture/surface query .{what}")
    return int(vals[what])


# ---------------------------------------------------------------------------------------------- surfaces
def surface_index(mem: Any, surf: EmuSurface, xb: np.ndarray, y: np.ndarray | None, z: np.ndarray | None,
                  nbytes: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(absolute byte addresses, in-range mask) of an nbytes access at byte x, row y, slice z; mode 'trap' raises
    cudaErrorIllegalAddress for an access outside, 'clamp' clamps, 'zero' reports it (loads read 0, stores drop)."""
    sp = surf.array.spec
    rows, slices = max(sp.height, 1), max(sp.depth, 1)
    xb = np.asarray(xb).astype(np.int64)
    yy = np.zeros_like(xb) if y is None else np.asarray(y).astype(np.int64)
    zz = np.zeros_like(xb) if z is None else np.asarray(z).astype(np.int64)
    ok = (xb >= 0) & (xb + nbytes <= sp.pitch) & (yy >= 0) & (yy < rows) & (zz >= 0) & (zz < slices)
    if mode == "trap" and not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        raise CudaError("cudaErrorIllegalAddress",
                        f"surface access of {nbytes} B at ({int(xb[bad])}, {int(yy[bad])}, {int(zz[bad])}) outside a "
                        f"{sp.pitch} B x {rows} x {slices} surface")
    if mode == "clamp":
        xb = np.clip(xb, 0, sp.pitch - nbytes)
        yy = np.clip(yy, 0, rows - 1)
        zz = np.clip(zz, 0, slices - 1)
        ok = np.ones_like(ok)
    if (xb % nbytes).any():
        raise CudaError("cudaErrorMisalignedAddress", f"surface access of {nbytes} B at a misaligned x")
    addr = surf.array.addr + (zz * rows + yy) * sp.pitch + np.where(ok, xb, 0)
    mem.view(surf.array.addr, sp.nbytes)                   # the array is live memory of this device
    return addr.astype(np.uint64), ok
