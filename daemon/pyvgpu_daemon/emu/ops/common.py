"""Shared pieces of the ALU semantics: the AluOp record, modifier parsing and the floating-point helpers
(error-free transforms, round-to-odd, directed-rounding fix-ups, ftz, sat). The type tables (DTYPES, SIGNED,
width, ...) are ptx/types.py's.

Conventions used by every family module:
- A builder takes an `ir.Instr` and returns an `AluOp`, or raises `Unsupported` (turned into
  cudaErrorInvalidPtx by `build_alu`).
- `fn` never loops over lanes in Python. Floating-point fns are wrapped in `np.errstate(all="ignore")` so that
  inf - inf, 0/0, log(0)... give IEEE results without RuntimeWarnings whatever the caller's error state is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..ptx import ir
from ..ptx.types import TYPES


@dataclass(frozen=True)
class AluOp:
    fn: Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]
    src_types: tuple[str, ...]
    dst_types: tuple[str, ...]


class Unsupported(Exception):
    """Raised by a builder for an opcode/modifier combination it does not implement."""


def split_mods(instr: ir.Instr, allowed: Iterable[str] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(types, flags) of an instruction; a flag outside `allowed` or a repeated flag is Unsupported."""
    allowed = set(allowed)
    types = tuple(m for m in instr.mods if m in TYPES)
    flags = tuple(m for m in instr.mods if m not in TYPES)
    for f in flags:
        if f not in allowed:
            raise Unsupported(f"modifier .{f}")
    if len(set(flags)) != len(flags):
        raise Unsupported("repeated modifier")
    return types, flags


def one_of(flags: tuple[str, ...], choices: Iterable[str]) -> str | None:
    hit = [f for f in flags if f in choices]
    if len(hit) > 1:
        raise Unsupported("conflicting modifiers " + ".".join(hit))
    return hit[0] if hit else None


CHUNK = 16384


def chunked(fn, ch: int = CHUNK):
    """Run a multi-pass elementwise fn over cache-sized slices of 1-D lane vectors: its temporaries then stay
    in cache, which makes 10-40-pass fns (exact fma, directed rounding) 2-4x faster on large launches. Scalars
    (immediates) are passed through whole; single-output fns only."""
    def run(*args):
        arrs = [np.asarray(x) for x in args]
        n = 0
        for x in arrs:
            if x.ndim == 1:
                n = max(n, x.shape[0])
            elif x.ndim > 1:
                return fn(*args)
        if n <= 2 * ch:
            return fn(*args)
        parts = [fn(*[x[i:i + ch] if x.ndim else x for x in arrs]) for i in range(0, n, ch)]
        return np.concatenate(parts)
    run.__wrapped__ = fn
    return run


def quiet(fn):
    """Run `fn` with all floating-point warnings/exceptions ignored (IEEE default results). (A closure rather than
    np.errstate's decorator form, whose functools.wraps formats a ufunc's docstring: 0.5 ms per built op.)"""
    def run(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    run.__wrapped__ = fn
    run.quiet_inner = fn      # generated code runs under errstate(all="ignore") already and calls fn directly
    return run


_UINT_OF_SIZE = {4: np.uint32, 8: np.uint64}


def select(c, a, b):
    """Lane-wise c ? a : b. For 4- and 8-byte values a branch-free bit blend: np.where mispredicts on the
    random predicates data-dependent selects have (about 4x slower at 64K lanes)."""
    a = np.asarray(a)
    b = np.asarray(b)
    dt = np.result_type(a, b)
    ut = _UINT_OF_SIZE.get(dt.itemsize)
    c = np.asarray(c)
    if ut is None or c.ndim == 0 or dt.kind not in "uif":
        return np.where(c, a, b)
    ua = np.asarray(a, dt).view(ut)
    ub = np.asarray(b, dt).view(ut)
    mask = np.negative(c.view(np.uint8), dtype=ut)      # 0 or all ones per lane
    return (ub ^ ((ua ^ ub) & mask)).view(dt)


# ---------------------------------------------------------------------------------------------------------------
# Floating-point helpers
# ---------------------------------------------------------------------------------------------------------------

FINFO = {np.dtype(np.float32): np.finfo(np.float32), np.dtype(np.float64): np.finfo(np.float64),
         np.dtype(np.float16): np.finfo(np.float16)}
_BITS = {np.dtype(np.float16): (np.uint16, 0x8000, 0x7C00), np.dtype(np.float32): (np.uint32, 0x80000000, 0x7F800000),
         np.dtype(np.float64): (np.uint64, 0x8000000000000000, 0x7FF0000000000000)}


_TINY = {np.dtype(np.float16): np.float16(2.0 ** -14), np.dtype(np.float32): np.float32(2.0 ** -126),
         np.dtype(np.float64): np.float64(2.0 ** -1022)}


def ftz(x):
    """Flush subnormals to zero of the same sign (arrays and scalars of f16/f32/f64). x * (|x| >= tiny): a
    subnormal (or zero) times 0 is a zero of its own sign; NaN and inf pass through unchanged."""
    x = np.asarray(x)
    return np.multiply(x, np.greater_equal(np.abs(x), _TINY[x.dtype]), dtype=x.dtype)


def sat(x):
    """Clamp to [0, 1]; NaN -> +0; -0 -> +0."""
    x = np.fmin(np.fmax(x, x.dtype.type(0)), x.dtype.type(1))
    return np.add(x, x.dtype.type(0))


def two_sum(a, b):
    """s = fl(a+b) and the exact error e (a + b = s + e) for finite inputs without overflow."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def fast_two_sum(a, b):
    """Like two_sum but ordered by magnitude (Fast2Sum), so no intermediate can overflow when s is finite."""
    swap = np.abs(a) < np.abs(b)
    big = np.where(swap, b, a)
    small = np.where(swap, a, b)
    s = big + small
    e = small - (s - big)
    return s, e


_SPLIT = np.float64(134217729.0)  # 2**27 + 1


def two_prod64(a, b):
    """Dekker's TwoProduct in float64: p = fl(a*b), a*b = p + e exactly unless |a|,|b| > ~2**996 or the product
    lies in the subnormal range (then e is only approximately the error)."""
    p = a * b
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    c = _SPLIT * b
    bh = c - (c - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def round_odd(s, e):
    """Given s = RN(x) and e = x - s exactly, return RO(x): the neighbour of x with an odd last bit when x is
    inexact. Rounding RO(x) once more to a format with at least 2 fewer significand bits is correctly rounded."""
    s = np.asarray(s)
    ut = _BITS[s.dtype][0]
    even = (s.view(ut) & ut(1)) == 0
    fix = even & (e != 0) & np.isfinite(e)
    if not np.asarray(fix).any():
        return s
    return np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf).astype(s.dtype)), s)


def step_directed(r, resid, mode: str):
    """r is the round-to-nearest result (or any float adjacent to the exact value), resid has the sign of
    (exact - r). Move r one ulp where the directed mode ('rz', 'rm', 'rp') requires it. Works on the bit
    patterns (np.nextafter is ~20x slower); a NaN resid leaves r unchanged; +-inf steps back to +-MAX."""
    r = np.asarray(r)
    ut, sign, _ = _BITS[r.dtype]
    u = r.view(ut)
    if mode == "rz":
        down = ((resid < 0) & (r > 0)) | ((resid > 0) & (r < 0))
        return np.subtract(u, down, dtype=ut).view(r.dtype)
    if mode == "rm":
        mv = np.less(resid, 0)
        far = np.greater(r, 0)        # on the other side of zero: the magnitude shrinks
    elif mode == "rp":
        mv = np.greater(resid, 0)
        far = np.less(r, 0)
    else:
        return r
    down = mv & far
    up = mv ^ down
    zero = np.equal(r, 0)
    if zero.any():                    # a zero moving away from zero takes the direction's sign
        u = np.where(up & zero, ut(sign) if mode == "rm" else ut(0), u)
    out = np.add(u, up, dtype=ut)
    np.subtract(out, down, out=out, dtype=ut)
    return out.view(r.dtype)


def fix_overflow(r, finite_in, mode: str):
    """RN overflowed to +-inf from finite operands: directed modes clamp to +-MAX where required."""
    if mode == "rn":
        return r
    big = np.isinf(r) & finite_in
    if not np.asarray(big).any():
        return r
    mx = FINFO[r.dtype].max
    dt = r.dtype.type
    if mode == "rz":
        clamp = big
    elif mode == "rm":
        clamp = big & (r > 0)
    else:
        clamp = big & (r < 0)
    return np.where(clamp, np.copysign(dt(mx), r), r)


def narrow_directed(x64, target, mode: str):
    """Round float64 values to `target` (float32 or float16) with mode rn/rz/rm/rp. Exact: the residual
    x64 - r is computed in float64, where it is exact."""
    r = x64.astype(target)
    if mode == "rn":
        return r
    resid = x64 - r.astype(np.float64)
    r = step_directed(r, resid, mode)
    return fix_overflow(r, np.isfinite(x64), mode)


# NaN results as NVIDIA's GPUs give them (real-GPU run 1, tools/gpu_probes/gpu_diff_kernels.py, bit for bit):
# - f32 arithmetic (add sub mul fma div rcp sqrt and the .approx functions) returns the canonical NaN 0x7FFFFFFF
#   whatever the operands (CUDART_NAN_F), never a propagated payload;
# - f64 arithmetic returns its first NaN operand (in operand order a, b, c) quieted, else the default NaN
#   0xFFF8000000000000 (CUDART_NAN): fma.f64(0, inf, sNaN 0x7FF0000000000001) is 0x7FF8000000000001.
CANON_F32 = np.array(0x7FFFFFFF, np.uint32).view(np.float32)[()]
DEFAULT_NAN_F64 = np.array(0xFFF8000000000000, np.uint64).view(np.float64)[()]
_QUIET_F64 = np.uint64(1 << 51)


def _has_nan(r: np.ndarray) -> bool:
    # one reduction (maximum propagates NaN): cheaper than isnan(r).any(), which writes a mask first
    return bool(r.size) and bool(np.isnan(np.maximum.reduce(r, axis=None)))


def canon_nan32(r):
    """f32 results with every NaN replaced by the canonical 0x7FFFFFFF."""
    r = np.asarray(r)
    if _has_nan(r):
        return np.where(np.isnan(r), CANON_F32, r)
    return r


def nan_first64(r, *operands):
    """f64 results whose NaNs are the first NaN operand quieted, else the default NaN."""
    r = np.asarray(r)
    if not _has_nan(r):
        return r
    bad = np.isnan(r)
    out = np.where(bad, DEFAULT_NAN_F64, r)
    for o in reversed(operands):           # the first operand's NaN is written last: it wins
        o = np.asarray(o, np.float64)
        m = bad & np.isnan(o)
        if m.any():
            out = np.where(m, (o.view(np.uint64) | _QUIET_F64).view(np.float64), out)
    return out


def gpu_nans(fn, t: str):
    """fn (f32 or f64 operands in, one result of that type out) with the GPU's NaN results."""
    if t == "f32":
        def f32(*args):
            return canon_nan32(fn(*args))
        return f32

    def f64(*args):
        return nan_first64(fn(*args), *args)
    return f64


def finite_all(*xs):
    m = np.isfinite(xs[0])
    for x in xs[1:]:
        m = m & np.isfinite(x)
    return m
