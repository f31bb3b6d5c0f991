"""Integer arithmetic: add sub mul mad mul24 mad24 div rem abs neg min max sad (integer types).

All arithmetic wraps modulo 2**width like the hardware (NumPy integer ufuncs wrap silently). Float types of
add/sub/mul/mad/abs/neg/min/max are routed to floating.py / half.py by the registry.

Division by zero never raises. PTX leaves the value unspecified; we return the value the divide sequence nvcc
emits produces (its final fix-up writes ~divisor = all ones when the divisor is 0): quotient = all ones
(0xFFFFFFFF for u32, -1 for s32), and the remainder is the dividend (a = q*0 + r). INT_MIN / -1 = INT_MIN,
INT_MIN % -1 = 0 (two's complement wrap, no trap).
"""
from __future__ import annotations

import numpy as np

from ..ptx.types import DTYPES, SIGNED, SIGNED_OF, UNSIGNED_OF, width
from .common import AluOp, Unsupported, one_of, split_mods

_ARITH_T = {"s16", "s32", "s64", "u16", "u32", "u64"}


def _itype(types, allowed=_ARITH_T):
    if len(types) != 1 or types[0] not in allowed:
        raise Unsupported("type")
    return types[0]


def build_add_sub(instr, is_sub):
    types, flags = split_mods(instr, {"sat"})
    t = _itype(types)
    uf = np.subtract if is_sub else np.add
    if "sat" in flags:
        if t != "s32":
            raise Unsupported(".sat needs .s32")

        def fn(a, b):
            r = uf(np.asarray(a, np.int64), np.asarray(b, np.int64))
            return np.clip(r, -2**31, 2**31 - 1).astype(np.int32)
        return AluOp(fn, (t, t), (t,))

    def fn(a, b):
        return uf(a, b)
    return AluOp(fn, (t, t), (t,))


def _mulhi_u64(a, b):
    """High 64 bits of the 128-bit product of two uint64 vectors, from 32-bit halves (exact)."""
    m = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    al = a & m
    ah = a >> s32
    bl = b & m
    bh = b >> s32
    t = al * bl
    u = ah * bl + (t >> s32)
    v = al * bh + (u & m)
    return ah * bh + (u >> s32) + (v >> s32)


def _mulhi_s64(a, b):
    ua = np.asarray(a).view(np.uint64) if np.ndim(a) else np.uint64(np.int64(a).view(np.uint64))
    ub = np.asarray(b).view(np.uint64) if np.ndim(b) else np.uint64(np.int64(b).view(np.uint64))
    hi = _mulhi_u64(ua, ub)
    # signed correction: hi_s = hi_u - (a<0 ? b : 0) - (b<0 ? a : 0)   (mod 2**64)
    hi = hi - np.where(np.asarray(a) < 0, ub, np.uint64(0)) - np.where(np.asarray(b) < 0, ua, np.uint64(0))
    return np.asarray(hi).view(np.int64)


def _mul_parts(t, mode):
    """Return (fn(a, b), dst type) for mul.{lo,hi,wide}.t."""
    w = width(t)
    dt = DTYPES[t]
    signed = t in SIGNED
    if mode == "lo":
        return (lambda a, b: np.multiply(a, b)), t
    if mode == "wide":
        if w == 64:
            raise Unsupported("mul.wide.64")
        wt = ("s" if signed else "u") + str(2 * w)
        wd = DTYPES[wt]
        return (lambda a, b: np.multiply(a, b, dtype=wd)), wt
    if mode == "hi":
        if w == 64:
            return (_mulhi_s64 if signed else _mulhi_u64), t
        wd = (SIGNED_OF if signed else UNSIGNED_OF)[2 * w]
        sh = wd.type(w)

        def hi(a, b):
            return np.right_shift(np.multiply(np.asarray(a, wd), np.asarray(b, wd)), sh).astype(dt)
        return hi, t
    raise Unsupported("mul mode")


def build_mul(instr):
    types, flags = split_mods(instr, {"lo", "hi", "wide"})
    t = _itype(types)
    mode = one_of(flags, ("lo", "hi", "wide"))
    if mode is None:
        raise Unsupported("mul needs .lo/.hi/.wide")
    f, dt = _mul_parts(t, mode)
    return AluOp(f, (t, t), (dt,))


def build_mad(instr):
    types, flags = split_mods(instr, {"lo", "hi", "wide", "sat"})
    t = _itype(types)
    mode = one_of(flags, ("lo", "hi", "wide"))
    if mode is None:
        raise Unsupported("mad needs .lo/.hi/.wide")
    f, dt = _mul_parts(t, mode)
    if "sat" in flags:
        if not (t == "s32" and mode == "hi"):
            raise Unsupported(".sat only with mad.hi.s32")

        def fn(a, b, c):
            r = f(a, b).astype(np.int64) + np.asarray(c, np.int64)
            return np.clip(r, -2**31, 2**31 - 1).astype(np.int32)
        return AluOp(fn, (t, t, t), (t,))

    def fn(a, b, c):
        return np.add(f(a, b), c)
    return AluOp(fn, (t, t, dt), (dt,))


def _mul24(t, mode):
    signed = t == "s32"
    if mode not in ("lo", "hi"):
        raise Unsupported("mul24 mode")

    def prod(a, b):
        a = np.asarray(a, np.int64) & 0xFFFFFF
        b = np.asarray(b, np.int64) & 0xFFFFFF
        if signed:
            a = (a ^ 0x800000) - 0x800000
            b = (b ^ 0x800000) - 0x800000
        p = a * b  # 48-bit product, exact in int64
        if mode == "hi":
            p = p >> 16
        return (p & 0xFFFFFFFF).astype(np.uint32).view(np.int32 if signed else np.uint32)
    return prod


def build_mul24(instr):
    types, flags = split_mods(instr, {"lo", "hi"})
    t = _itype(types, {"s32", "u32"})
    f = _mul24(t, one_of(flags, ("lo", "hi")))
    return AluOp(f, (t, t), (t,))


def build_mad24(instr):
    types, flags = split_mods(instr, {"lo", "hi"})
    t = _itype(types, {"s32", "u32"})
    f = _mul24(t, one_of(flags, ("lo", "hi")))
    return AluOp(lambda a, b, c: np.add(f(a, b), c), (t, t, t), (t,))


def _divrem(t, want_rem):
    dt = DTYPES[t]
    one = dt.type(1)
    ones = dt.type(-1) if t in SIGNED else dt.type(np.iinfo(dt).max)
    if t in SIGNED:
        mn = dt.type(np.iinfo(dt).min)
        neg1 = dt.type(-1)

        def fn(a, b):
            a = np.asarray(a, dt)
            b = np.asarray(b, dt)
            zero = b == 0
            bs = np.where(zero | ((a == mn) & (b == neg1)), one, b)
            r = np.fmod(a, bs)          # C remainder: sign of the dividend, truncating quotient
            if want_rem:
                return np.where(zero, a, r)
            q = np.floor_divide(a - r, bs)  # exact division
            return np.where(zero, ones, q)
    else:
        def fn(a, b):
            a = np.asarray(a, dt)
            b = np.asarray(b, dt)
            zero = b == 0
            bs = np.where(zero, one, b)
            if want_rem:
                return np.where(zero, a, np.remainder(a, bs))
            return np.where(zero, ones, np.floor_divide(a, bs))
    return fn


def build_div(instr):
    types, flags = split_mods(instr, ())
    t = _itype(types)
    return AluOp(_divrem(t, False), (t, t), (t,))


def build_rem(instr):
    types, flags = split_mods(instr, ())
    t = _itype(types)
    return AluOp(_divrem(t, True), (t, t), (t,))


def build_abs_neg(instr, is_neg):
    types, flags = split_mods(instr, ())
    t = _itype(types, {"s16", "s32", "s64"})
    return AluOp(np.negative if is_neg else np.abs, (t,), (t,))


def build_min_max(instr, is_max):
    """min/max{.relu}: integer types, .s32 with .relu (negative results become 0), and the packed
    .u16x2/.s16x2 (PTX ISA 8.0, sm_90: each 16-bit half separately, in a .b32 register)."""
    types, flags = split_mods(instr, {"relu", "u16x2", "s16x2"})
    uf = np.maximum if is_max else np.minimum
    packed = [f for f in flags if f in ("u16x2", "s16x2")]
    relu = "relu" in flags
    if packed:
        if types or len(packed) != 1 or (relu and packed[0] != "s16x2"):
            raise Unsupported("type")
        dt = np.dtype(np.int16 if packed[0] == "s16x2" else np.uint16)

        def fn(a, b):
            a = np.ascontiguousarray(np.broadcast_arrays(np.asarray(a, np.uint32), np.asarray(b, np.uint32))[0])
            b = np.ascontiguousarray(np.broadcast_to(np.asarray(b, np.uint32), a.shape))
            r = uf(a.reshape(a.shape + (1,)).view(dt), b.reshape(b.shape + (1,)).view(dt))
            if relu:
                r = np.maximum(r, dt.type(0))
            return r.view(np.uint32).reshape(a.shape)
        return AluOp(fn, ("b32", "b32"), ("b32",))
    t = _itype(types)
    if relu:
        if t != "s32":
            raise Unsupported(".relu needs .s32 or .s16x2")
        return AluOp(lambda a, b: np.maximum(uf(a, b), np.int32(0)), (t, t), (t,))
    return AluOp(uf, (t, t), (t,))


def build_sad(instr):
    types, flags = split_mods(instr, ())
    t = _itype(types)
    ut = UNSIGNED_OF[width(t)]
    dt = DTYPES[t]

    def fn(a, b, c):
        a = np.asarray(a, dt)
        b = np.asarray(b, dt)
        ua = a.view(ut)
        ub = b.view(ut)
        d = np.where(a < b, ub - ua, ua - ub)   # |a-b| modulo 2**w
        return np.add(d.view(dt), c)
    return AluOp(fn, (t, t, t), (t,))
