"""cvt: every int<->int, float->int, int->float and float<->float conversion, and cvt.{rn,rz,..}.{f16x2,bf16x2}.f32.

- int -> int: sign/zero extension or truncation (two's complement wrap); .sat clamps to the destination range.
- float -> int: .rni/.rzi/.rmi/.rpi round to an integer, then the value saturates to the destination range; NaN
  gives 0, but as an H100 does (real-GPU run 2), 0x80000000 / 0x8000000000000000 from f64 to s32, u32 and s64 and
  from f32 to s64 (the ISA leaves it to the hardware). .ftz (f32 source) flushes subnormal inputs first.
- int -> float: rounded once (.rn default, .rz/.rm/.rp exact; 64-bit integers are split into two exact halves).
- float -> float: widening is exact; narrowing needs .rn/.rz/.rm/.rp and rounds once from the exact value;
  same-type .rni/.rzi/.rmi/.rpi round to an integral value. .sat clamps to [0,1] (NaN -> 0), .relu (f16/bf16
  destinations) clamps negatives to 0 (NaN -> canonical NaN). f16 NaN results are the canonical 0x7FFF; bf16
  keeps the NaN's sign and top payload bits (quieted).
- cvt.rn.f16x2.f32 d, a, b puts cvt(a) in the upper half of d and cvt(b) in the lower half (bf16x2 likewise).
"""
from __future__ import annotations

import numpy as np

from ..ptx.types import DTYPES, INTS, SIGNED, width
from .common import (AluOp, Unsupported, ftz, narrow_directed, one_of, quiet, round_odd, step_directed, split_mods,
                     two_sum)
from .half import decode, encode, join2

IRND = ("rni", "rzi", "rmi", "rpi")
FRND = ("rn", "rz", "rm", "rp")
FLOATS = ("f16", "bf16", "f32", "f64")
_ROUND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def _to_f64(x, t):
    if t == "bf16":
        return decode(x, "bf16")
    return np.asarray(x, DTYPES[t]).astype(np.float64)


def _int_to_int(dt_name, st_name, do_sat):
    dt = DTYPES[dt_name]
    if not do_sat:
        return lambda a: np.asarray(a).astype(dt)
    info = np.iinfo(dt)
    if st_name in ("u64", "b64"):
        hi = np.uint64(info.max)
        return lambda a: np.minimum(a, hi).astype(dt)
    lo = max(info.min, -2**63)
    hi = min(info.max, 2**63 - 1)
    return lambda a: np.clip(np.asarray(a, np.int64), lo, hi).astype(dt)


# (source, destination) whose NaN the GPU converts to the sign bit alone (F2I on an H100); 0 elsewhere. f64 -> u64 and
# f32 -> u64 were not measured.
_NAN_SIGN_BIT = {("f64", "s32"), ("f64", "u32"), ("f64", "s64"), ("f32", "s64")}


def _float_to_int(dt_name, st_name, irnd, do_ftz):
    dt = DTYPES[dt_name]
    info = np.iinfo(dt)
    rnd = _ROUND[irnd]
    w0 = width(dt_name)
    nan_int = np.array((1 << (w0 - 1)) if (st_name, dt_name) in _NAN_SIGN_BIT else 0,
                       np.uint64).astype(DTYPES["u" + str(w0)]).view(dt)[()]
    w = width(dt_name)
    lo = float(info.min)
    if w < 64:
        hi = float(info.max)
        big_at = None
    else:
        big_at = 2.0 ** 63 if dt_name in SIGNED else 2.0 ** 64
        hi = float(np.nextafter(big_at, 0))
    top = dt.type(info.max)
    if w <= 32 and st_name in ("f32", "f64"):
        # fast path in the source precision: clamp to the largest source value that converts without overflow,
        # let the cast truncate (rzi), then patch the lanes at/above 2**(w-1) (or 2**w) and NaN
        sd = DTYPES[st_name]
        lim = float(info.max) + 1.0                      # 2**(w-1) or 2**w: exact in f32 and f64
        hi_s = sd.type(np.nextafter(sd.type(lim), sd.type(0)))
        lo_s = sd.type(info.min)
        lim_s = sd.type(lim)
        zero = nan_int
        rnd1 = None if irnd == "rzi" else rnd

        def fast(a):
            x = np.asarray(a, sd)
            if do_ftz and st_name == "f32":
                x = ftz(x)
            if rnd1 is not None:
                x = rnd1(x)
            out = np.clip(x, lo_s, hi_s).astype(dt)
            odd = ~np.less(x, lim_s)              # one pass finds both x >= 2**(w-1) and NaN
            if odd.any():
                out = np.where(np.greater_equal(x, lim_s), top, out)
                out = np.where(np.isnan(x), zero, out)
            return out
        return fast

    def fn(a):
        x = _to_f64(a, st_name)
        if do_ftz and st_name == "f32":
            x = ftz(np.asarray(a, np.float32)).astype(np.float64)
        r = rnd(x)
        nan = np.isnan(r)
        r = np.where(nan, 0.0, r)
        out = np.clip(r, lo, hi).astype(dt)
        if big_at is not None:
            out = np.where(r >= big_at, top, out)
        return np.where(nan, nan_int, out) if nan_int else out
    return fn


def _int_exact_pair(a, st_name):
    """(s, e): float64 pair with s + e == a exactly and s == RN(a)."""
    if width(st_name) < 64:
        return np.asarray(a).astype(np.float64), None
    a = np.asarray(a)
    if st_name in SIGNED:
        hi = (a >> np.int64(32)).astype(np.float64) * 4294967296.0
    else:
        hi = (a >> np.uint64(32)).astype(np.float64) * 4294967296.0
    lo = (a & a.dtype.type(0xFFFFFFFF)).astype(np.float64)
    return two_sum(hi, lo)


def _int_to_float(dt_name, st_name, mode):
    def fn(a):
        if mode == "rn" and dt_name in ("f32", "f64"):
            return np.asarray(a).astype(DTYPES[dt_name])   # the C conversion rounds to nearest even
        s, e = _int_exact_pair(a, st_name)
        if dt_name == "f64":
            if e is None or mode == "rn":
                return s
            return step_directed(s, e, mode)
        x = s if e is None else round_odd(s, e)
        if dt_name == "f32":
            return narrow_directed(x, np.float32, mode)
        bits = encode(x, dt_name, mode)
        return bits.view(np.float16) if dt_name == "f16" else bits
    return fn


def _float_to_float(dt_name, st_name, mode, frnd, do_ftz, do_sat, do_relu):
    if dt_name == st_name and dt_name in ("f32", "f64") and not do_relu:
        # same type: round to integral / saturate / flush, all exact in the source precision
        rnd = _ROUND[frnd] if frnd else None
        sd = DTYPES[st_name]

        def same(a):
            x = np.asarray(a, sd)
            if do_ftz:
                x = ftz(x)
            if rnd is not None:
                x = rnd(x)
            if do_sat:
                x = np.add(np.fmin(np.fmax(x, sd.type(0)), sd.type(1)), sd.type(0))
            return ftz(x) if do_ftz else x
        return same
    if (mode == "rn" and frnd is None and not (do_ftz or do_sat or do_relu)
            and dt_name in ("f32", "f64") and st_name in ("f32", "f64", "f16")):
        dd = DTYPES[dt_name]
        return lambda a: np.asarray(a).astype(dd)       # widening is exact; f64 -> f32 is IEEE RN

    def fn(a):
        if do_ftz and st_name in ("f32", "f16"):
            x = ftz(np.asarray(a, DTYPES[st_name])).astype(np.float64)
        else:
            x = _to_f64(a, st_name)
        if frnd is not None:
            x = _ROUND[frnd](x)
        if do_sat:
            x = np.fmin(np.fmax(x, 0.0), 1.0) + 0.0
        if do_relu:
            x = np.where(x < 0, 0.0, x)
        if dt_name == "f64":
            return x
        if dt_name == "f32":
            r = narrow_directed(x, np.float32, mode)
            return ftz(r) if do_ftz else r
        bits = encode(x, dt_name, mode, canon_nan=(dt_name == "f16" or do_relu))
        if do_ftz and dt_name == "f16":
            bits = ftz(bits.view(np.float16)).view(np.uint16)
        return bits.view(np.float16) if dt_name == "f16" else bits
    return fn


def build_cvt(instr):
    types, flags = split_mods(instr, IRND + FRND + ("ftz", "sat", "relu"))
    if len(types) != 2:
        raise Unsupported("cvt needs .dtype.atype")
    dt_name, st_name = types
    irnd = one_of(flags, IRND)
    frnd = one_of(flags, FRND)
    if irnd and frnd:
        raise Unsupported("two rounding modifiers")
    do_ftz, do_sat, do_relu = "ftz" in flags, "sat" in flags, "relu" in flags
    if dt_name in ("f16x2", "bf16x2"):
        if st_name != "f32" or irnd or do_sat or do_ftz:
            raise Unsupported("packed cvt form")
        return _build_cvt_packed(dt_name, frnd or "rn", do_relu)
    d_int, s_int = dt_name in INTS, st_name in INTS
    d_flt, s_flt = dt_name in FLOATS, st_name in FLOATS
    if not ((d_int or d_flt) and (s_int or s_flt)):
        raise Unsupported("type")
    if do_relu and dt_name not in ("f16", "bf16"):
        raise Unsupported(".relu")
    if d_int and s_int:
        if irnd or frnd or do_ftz or do_relu:
            raise Unsupported("rounding on int->int")
        f = _int_to_int(dt_name, st_name, do_sat)
    elif d_int:
        if irnd is None or frnd:
            raise Unsupported("float->int needs .rni/.rzi/.rmi/.rpi")
        f = quiet(_float_to_int(dt_name, st_name, irnd, do_ftz))
    elif s_int:
        f = _cvt_int_to_float(dt_name, st_name, irnd, frnd, do_ftz, do_sat)
    else:
        f = _cvt_float_to_float(dt_name, st_name, irnd, frnd, do_ftz, do_sat, do_relu)
    return AluOp(f, (st_name,), (dt_name,))


def _build_cvt_packed(dt_name: str, mode: str, do_relu: bool) -> AluOp:
    """cvt.rn{.relu}.{f16x2,bf16x2}.f32 d, a, b: a in the upper half, b in the lower."""
    fmt = dt_name[:-2]
    one = _float_to_float(fmt, "f32", mode, None, False, False, do_relu)

    def pack(a, b):
        lo = one(b)
        hi = one(a)
        if fmt == "f16":
            lo, hi = lo.view(np.uint16), hi.view(np.uint16)
        return join2(lo, hi)
    return AluOp(quiet(pack), ("f32", "f32"), (dt_name,))


def _cvt_int_to_float(dt_name: str, st_name: str, irnd, frnd, do_ftz: bool, do_sat: bool):
    if irnd or do_ftz:
        raise Unsupported("int->float rounding")
    f = quiet(_int_to_float(dt_name, st_name, frnd or "rn"))
    if not do_sat:
        return f
    if dt_name not in ("f32", "f64"):
        raise Unsupported(".sat int->half")

    def saturated(a):
        r = f(a)
        return np.fmin(np.fmax(r, r.dtype.type(0)), r.dtype.type(1))
    return saturated


def _cvt_float_to_float(dt_name: str, st_name: str, irnd, frnd, do_ftz: bool, do_sat: bool, do_relu: bool):
    if irnd:
        if dt_name != st_name:
            raise Unsupported(".rni etc. need equal float types")
        return quiet(_float_to_float(dt_name, st_name, "rn", irnd, do_ftz, do_sat, do_relu))
    wd, ws = width(dt_name), width(st_name)
    narrowing = wd < ws or (dt_name != st_name and wd == ws)   # f16 <-> bf16 also rounds
    if narrowing and frnd is None:
        raise Unsupported("narrowing cvt needs .rn/.rz/.rm/.rp")
    return quiet(_float_to_float(dt_name, st_name, frnd or "rn", None, do_ftz, do_sat, do_relu))
