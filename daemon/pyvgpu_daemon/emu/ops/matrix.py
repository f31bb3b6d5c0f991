"""Warp matrix operations: what each lane's fragment registers hold, and the product (runtime/matrix.py moves the
values; translator/matrix.py parses the instructions).

A fragment is a matrix of `rows` x `cols` elements of one type spread over `nregs` 32-bit registers per lane
(f16 and 8-bit elements packed from the low bits up). Where each element lives:

- wmma (PTX ISA "Warp Level Matrix Multiply-Accumulate Instructions"): the ISA leaves the mapping unspecified
  (programs may only load, store, multiply and apply one operation to every element, e.g. fill or scale), so the
  emulator picks one: slot s of lane l holds element (l * S + s) mod (rows * cols) in row-major order, S being the
  slots per lane (fragments with more slots than elements hold each element several times, as the GPU's do).
  Loads and stores map elements to memory by the instruction's layout and stride, so the fragments of one program
  are the same whichever layout it loads with. Shapes and types of sm_75: m16n16k16, m32n8k16, m8n32k16 with
  f16 A/B and f16 or f32 C/D, or s8/u8 A/B and s32 C/D (.satfinite).
- mma.sync: the ISA specifies every lane's elements ("Matrix Fragments for mma.m16n8k8" and "mma.m8n8k16"), as
  used here: m16n8k8 .row.col f16 x f16 -> f16/f32, m8n8k16 .row.col s8/u8 -> s32 (.satfinite).

The product: f16 x f16 products are exact in f64 and their K-term sums nearly so, and D = A B + C is rounded once to
the D type (f32 or f16, to nearest even; NaN results the GPU's canonical NaN): the tensor cores' own order of
additions may differ from it in the last bit. Integers: exact, wrapped to 32 bits, or clamped by .satfinite.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

ELEM_BITS = {"f16": 16, "f32": 32, "s8": 8, "u8": 8, "s32": 32}
ELEM_DTYPE = {"f16": np.float16, "f32": np.float32, "s8": np.int8, "u8": np.uint8, "s32": np.int32}
WMMA_SHAPES = {"m16n16k16": (16, 16, 16), "m32n8k16": (32, 8, 16), "m8n32k16": (8, 32, 16)}
MMA_SHAPES = {"m16n8k8": (16, 8, 8), "m8n8k16": (8, 8, 16)}
CANONICAL_NAN = {"f32": 0x7FFFFFFF, "f16": 0x7FFF}          # the GPU's NaN results (ops/floating.py)


@dataclass(frozen=True)
class Fragment:
    """One operand's fragment: `rows` x `cols` of `etype` in `nregs` registers per lane; `where[l, s]` is the
    row-major element index slot s of lane l holds (slot s: register s // per_reg, bits (s % per_reg) * bits)."""
    rows: int
    cols: int
    etype: str
    nregs: int
    where: np.ndarray

    @property
    def per_reg(self) -> int:
        return 32 // ELEM_BITS[self.etype]

    @property
    def slots(self) -> int:
        return self.nregs * self.per_reg


def _dims(shape: tuple[int, int, int], which: str) -> tuple[int, int]:
    m, n, k = shape
    return {"a": (m, k), "b": (k, n)}.get(which, (m, n))


@lru_cache(maxsize=None)
def wmma_fragment(shape: str, which: str, etype: str) -> Fragment:
    """The fragment of matrix `which` ('a', 'b', 'c' or 'd') of a wmma shape with elements of etype."""
    rows, cols = _dims(WMMA_SHAPES[shape], which)
    if etype == "f16" and which in "ab":
        nregs = 8                                  # always 8 f16x2 registers (elements held 1, 2 or 4 times)
    else:
        nregs = rows * cols * ELEM_BITS[etype] // (32 * 32)
    slots = nregs * 32 // ELEM_BITS[etype]
    where = (np.arange(32)[:, None] * slots + np.arange(slots)[None, :]) % (rows * cols)
    return Fragment(rows, cols, etype, nregs, where)


@lru_cache(maxsize=None)
def mma_fragment(shape: str, which: str, etype: str) -> Fragment:
    """The ISA's fragment layouts of mma.sync (.row A, .col B) for the shapes of sm_75 this module offers."""
    lane = np.arange(32)[:, None]
    group, tig = lane >> 2, lane & 3
    rows, cols = _dims(MMA_SHAPES[shape], which)
    if shape == "m16n8k8":
        if which == "a":                           # a0..a3: rows group / group + 8, columns tig * 2 + (i & 1)
            i = np.arange(4)[None, :]
            r, c = group + 8 * (i >> 1), tig * 2 + (i & 1)
        elif which == "b":                         # b0, b1: rows (k) tig * 2 + i, column group
            i = np.arange(2)[None, :]
            r, c = tig * 2 + i, group + 0 * i
        else:                                      # c0..c3 as A's
            i = np.arange(4)[None, :]
            r, c = group + 8 * (i >> 1), tig * 2 + (i & 1)
    else:                                          # m8n8k16
        if which == "a":                           # a0..a3: row group, columns tig * 4 + i
            i = np.arange(4)[None, :]
            r, c = group + 0 * i, tig * 4 + i
        elif which == "b":                         # b0..b3: rows (k) tig * 4 + i, column group
            i = np.arange(4)[None, :]
            r, c = tig * 4 + i, group + 0 * i
        else:                                      # c0, c1: row group, columns tig * 2 + i
            i = np.arange(2)[None, :]
            r, c = group + 0 * i, tig * 2 + i
    where = r * cols + c
    nregs = where.shape[1] * ELEM_BITS[etype] // 32
    return Fragment(rows, cols, etype, nregs, where)


# ---------------------------------------------------------------------------------------------- registers <-> slots
def unpack(frag: Fragment, regs: list[np.ndarray]) -> np.ndarray:
    """Registers (uint32 per lane, nregs of them) -> the slots as elements, shape (lanes, slots)."""
    r = np.stack([np.asarray(x, np.uint32) for x in regs], axis=1)        # (lanes, nregs)
    bits = ELEM_BITS[frag.etype]
    if bits == 32:
        return r.view(ELEM_DTYPE[frag.etype])
    per = frag.per_reg
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
    parts = (r[:, :, None] >> shifts) & np.uint32((1 << bits) - 1)       # (lanes, nregs, per)
    small = parts.reshape(len(r), -1).astype(np.uint16 if bits == 16 else np.uint8)
    return small.view(ELEM_DTYPE[frag.etype])


def pack(frag: Fragment, slots: np.ndarray) -> list[np.ndarray]:
    """The inverse of unpack: (lanes, slots) elements -> nregs uint32 arrays."""
    bits = ELEM_BITS[frag.etype]
    v = np.ascontiguousarray(slots.astype(ELEM_DTYPE[frag.etype]))
    if bits == 32:
        u = v.view(np.uint32)
        return [u[:, j].copy() for j in range(frag.nregs)]
    per = frag.per_reg
    u = v.view(np.uint16 if bits == 16 else np.uint8).astype(np.uint32).reshape(len(v), frag.nregs, per)
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
    r = np.bitwise_or.reduce(u << shifts, axis=2)
    return [r[:, j].copy() for j in range(frag.nregs)]


def gather(frag: Fragment, slots: np.ndarray) -> np.ndarray:
    """Warps' slots (warps, 32, slots) -> their matrices (warps, rows, cols); an element several slots hold comes
    from one of them (a program can only have given them all the same value)."""
    nw = slots.shape[0]
    flat = np.empty((nw, frag.rows * frag.cols), slots.dtype)
    flat[:, frag.where.ravel()] = slots.reshape(nw, -1)
    return flat.reshape(nw, frag.rows, frag.cols)


def scatter(frag: Fragment, mat: np.ndarray) -> np.ndarray:
    """Matrices (warps, rows, cols) -> the warps' slots (warps, 32, slots)."""
    return mat.reshape(len(mat), -1)[:, frag.where]


# ---------------------------------------------------------------------------------------------- the product
def product(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: str, satfinite: bool) -> np.ndarray:
    """D = A B + C for one warp (a: M x K, b: K x N, c: M x N), in the D type `dtype`."""
    if dtype == "s32":
        d = a.astype(np.int64) @ b.astype(np.int64) + c.astype(np.int64)
        if satfinite:
            return np.clip(d, -(1 << 31), (1 << 31) - 1).astype(np.int32)
        return d.astype(np.uint64).astype(np.uint32).view(np.int32)        # wraps, as 32-bit addition does
    ft = ELEM_DTYPE[dtype]
    with np.errstate(all="ignore"):
        d = a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)
        out = d.astype(ft)
        if satfinite:                              # ±MAX of the type instead of ±inf (NaN stays NaN)
            out = np.where(np.isinf(out), np.copysign(np.finfo(ft).max, out), out).astype(ft)
    bits = out.view(np.uint32 if dtype == "f32" else np.uint16)
    return np.where(np.isnan(out), CANONICAL_NAN[dtype], bits).astype(bits.dtype).view(ft)
