"""Half precision: f16, bf16, f16x2, bf16x2 arithmetic (add sub mul fma neg abs min max) and the codecs shared
with cvt/setp/set.

Storage per the architecture contract: f16 = float16, bf16 = uint16 raw bits, f16x2/bf16x2 = uint32 raw bits with
element 0 in the low half. Every operation decodes exactly to float64, computes the exact result or its
round-to-odd approximation (TwoSum error), and rounds once to the target format: correctly rounded in every
rounding mode (53 >= 11 + 2 and 24 >= 8 + 2 bits). NaN results are the canonical NaN 0x7FFF.
"""
from __future__ import annotations

import numpy as np

from .common import AluOp, Unsupported, narrow_directed, one_of, quiet, round_odd, split_mods, two_sum

HALF_TYPES = ("f16", "bf16", "f16x2", "bf16x2")
CANON16 = np.uint16(0x7FFF)
_TINY = {"f16": 2.0 ** -14, "bf16": 2.0 ** -126}


# ------------------------------------------------------------------------------------------------ codecs

def f16_bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


def decode(bits, fmt):
    """uint16 raw bits of fmt ('f16' | 'bf16') -> float64 (exact)."""
    bits = np.asarray(bits, np.uint16)
    if fmt == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def bf16_from_f32(x32, mode="rn"):
    """float32 -> bf16 raw bits with rounding mode rn/rz/rm/rp; NaN stays NaN (quieted, sign and top payload
    bits kept)."""
    u = np.asarray(x32, np.float32).view(np.uint32)
    hi = (u >> np.uint32(16)).astype(np.uint32)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if mode == "rn":
        r = (u + np.uint32(0x7FFF) + (hi & np.uint32(1))) >> np.uint32(16)
    else:
        lost = (u & np.uint32(0xFFFF)) != 0
        neg = (u & np.uint32(0x80000000)) != 0
        if mode == "rz":
            up = np.zeros_like(lost)
        elif mode == "rm":
            up = lost & neg
        else:
            up = lost & ~neg
        r = hi + up.astype(np.uint32)
    r = np.where(nan, hi | np.uint32(0x40), r)
    return r.astype(np.uint16)


def encode(x64, fmt, mode="rn", canon_nan=True):
    """float64 -> uint16 raw bits of fmt, rounded once with mode. NaN -> canonical 0x7FFF (or, for bf16 with
    canon_nan=False, the quieted NaN keeping sign and top payload bits)."""
    x64 = np.asarray(x64, np.float64)
    if fmt == "f16":
        bits = narrow_directed(x64, np.float16, mode).view(np.uint16)
    else:
        r32 = x64.astype(np.float32)
        r32 = round_odd(r32, x64 - r32.astype(np.float64))
        # beyond the f32 range: +-FLT_MAX has an odd last bit and nonzero low bits, so bf16 rounding of it
        # gives inf or bf16's max exactly as rounding the true value would
        big = np.isinf(r32) & np.isfinite(x64)
        if np.asarray(big).any():
            r32 = np.where(big, np.copysign(np.float32(np.finfo(np.float32).max), r32), r32)
        bits = bf16_from_f32(r32, mode)
        if not canon_nan:
            return bits
    return np.where(np.isnan(x64), CANON16, bits)


def f32_to_f16_bits(x32, mode="rn"):
    return encode(np.asarray(x32, np.float32).astype(np.float64), "f16", mode)


def split2(u32):
    u = np.asarray(u32, np.uint32)
    return (u & np.uint32(0xFFFF)).astype(np.uint16), (u >> np.uint32(16)).astype(np.uint16)


def join2(lo, hi):
    return np.asarray(lo, np.uint32) | (np.asarray(hi, np.uint32) << np.uint32(16))


def lanes(t, x):
    """Raw uint16 bit lanes of a half-type operand: [bits] or [lo, hi]."""
    if t == "f16":
        return [f16_bits(x)]
    if t == "bf16":
        return [np.asarray(x, np.uint16)]
    return list(split2(x))


def unlanes(t, parts):
    if t == "f16":
        return parts[0].view(np.float16)
    if t == "bf16":
        return parts[0]
    return join2(parts[0], parts[1])


def base_fmt(t):
    return "bf16" if t.startswith("bf16") else "f16"


# ------------------------------------------------------------------------------------------------ arithmetic

def _ftz64(x, fmt):
    tiny = _TINY[fmt]
    return np.where(np.abs(x) < tiny, np.copysign(0.0, x), x)


def _sat64(x):
    x = np.fmin(np.fmax(x, 0.0), 1.0)
    return x + 0.0


def _rm_zero(r, x, y):
    z = r == 0
    if not np.asarray(z).any():
        return r
    return np.where(z & ~(~np.signbit(x) & ~np.signbit(y)), -0.0, r)


def _lanewise(t, core, nsrc, mode, do_ftz, do_sat, do_relu):
    fmt = base_fmt(t)

    def fn(*srcs):
        per = [lanes(t, s) for s in srcs]
        out = []
        for k in range(len(per[0])):
            xs = [decode(p[k], fmt) for p in per]
            if do_ftz:
                xs = [_ftz64(x, fmt) for x in xs]
            s, e, zx, zy = core(*xs)
            v = round_odd(s, e) if e is not None else s
            if mode == "rm" and zx is not None:
                v = _rm_zero(v, zx, zy)
            bits = encode(v, fmt, mode)
            if do_ftz or do_sat or do_relu:
                y = decode(bits, fmt)
                if do_ftz:
                    y = _ftz64(y, fmt)
                if do_sat:
                    y = _sat64(y)
                if do_relu:
                    y = np.where(y < 0, 0.0, y)
                bits = encode(y, fmt)
            out.append(bits)
        return unlanes(t, out)
    return fn


def _core(op):
    if op == "add":
        return lambda a, b: (*two_sum(a, b), a, b)
    if op == "sub":
        return lambda a, b: (*two_sum(a, -b), a, -b)
    if op == "mul":
        return lambda a, b: (a * b, None, None, None)       # exact in f64

    def fma(a, b, c):
        p = a * b                                           # exact in f64
        s, e = two_sum(p, c)
        s = np.where(np.isfinite(p) & np.isfinite(c), s, p + c)
        return s, e, p, c
    return fma


def build_half_arith(instr, op):
    """add sub mul fma (and mad) on f16/bf16/f16x2/bf16x2."""
    types, flags = split_mods(instr, {"rn", "rz", "rm", "rp", "ftz", "sat", "relu"})
    if len(types) != 1 or types[0] not in HALF_TYPES:
        raise Unsupported("type")
    t = types[0]
    mode = one_of(flags, ("rn", "rz", "rm", "rp"))
    if op == "fma" and mode is None:
        raise Unsupported("fma needs a rounding modifier")
    mode = mode or "rn"
    if "relu" in flags and op != "fma":
        raise Unsupported(".relu")
    if t.startswith("bf16") and ("ftz" in flags or "sat" in flags):
        raise Unsupported(".ftz/.sat with bf16")
    n = 3 if op == "fma" else 2
    f = _lanewise(t, _core(op), n, mode, "ftz" in flags, "sat" in flags, "relu" in flags)
    return AluOp(quiet(f), (t,) * n, (t,))


def build_half_neg_abs(instr, is_neg):
    types, flags = split_mods(instr, {"ftz"})
    if len(types) != 1 or types[0] not in HALF_TYPES:
        raise Unsupported("type")
    t = types[0]
    fmt = base_fmt(t)
    do_ftz = "ftz" in flags

    def fn(a):
        out = []
        for bits in lanes(t, a):
            if do_ftz:
                bits = encode(_ftz64(decode(bits, fmt), fmt), fmt) | (bits & np.uint16(0x8000))
            out.append(bits ^ np.uint16(0x8000) if is_neg else bits & np.uint16(0x7FFF))
        return unlanes(t, out)
    return AluOp(quiet(fn), (t,), (t,))


def build_half_min_max(instr, is_max):
    types, flags = split_mods(instr, {"ftz", "NaN"})
    if len(types) != 1 or types[0] not in HALF_TYPES:
        raise Unsupported("type")
    t = types[0]
    fmt = base_fmt(t)
    do_ftz = "ftz" in flags
    nan_prop = "NaN" in flags
    uf = (np.maximum if is_max else np.minimum) if nan_prop else (np.fmax if is_max else np.fmin)

    def fn(a, b):
        out = []
        for x, y in zip(lanes(t, a), lanes(t, b)):
            xa, ya = decode(x, fmt), decode(y, fmt)
            if do_ftz:
                xa, ya = _ftz64(xa, fmt), _ftz64(ya, fmt)
            r = uf(xa, ya)
            bits = encode(r, fmt)
            z = (xa == 0) & (ya == 0)
            zb = (x & y) if is_max else (x | y)
            bits = np.where(z, zb & np.uint16(0x8000), bits)
            out.append(bits)
        return unlanes(t, out)
    return AluOp(quiet(fn), (t, t), (t,))


_HALF_APPROX = {"ex2": np.exp2, "tanh": np.tanh}


def build_half_approx(instr):
    """ex2.approx{.ftz}.{f16,f16x2,bf16,bf16x2} and tanh.approx.{f16,f16x2,bf16,bf16x2}: computed in f64 and
    rounded once to the format (the hardware's are approximations within a few ulp of that)."""
    types, flags = split_mods(instr, {"approx", "ftz"})
    if len(types) != 1 or types[0] not in HALF_TYPES or "approx" not in flags:
        raise Unsupported("form")
    t = types[0]
    fmt = base_fmt(t)
    f = _HALF_APPROX[instr.opcode]
    do_ftz = "ftz" in flags

    def fn(a):
        out = []
        for bits in lanes(t, a):
            x = decode(bits, fmt)
            if do_ftz:
                x = _ftz64(x, fmt)
            y = f(x)
            if do_ftz:
                y = _ftz64(y, fmt)
            out.append(encode(y, fmt))
        return unlanes(t, out)
    return AluOp(quiet(fn), (t,), (t,))
