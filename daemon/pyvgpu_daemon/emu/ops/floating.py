"""f32/f64 arithmetic: add sub mul fma mad div rcp sqrt rsqrt ex2 lg2 sin cos tanh abs neg min max copysign
testp.

Rounding:
- .rn (and no rounding modifier) is IEEE round-to-nearest-even: NumPy's own f32/f64 add/sub/mul/div/sqrt.
- .rz/.rm/.rp are exact: the RN result is computed, the sign of (exact - RN) is found with an error-free
  transform (TwoSum, an exact f64 product for f32, Dekker's TwoProduct for f64, an exact residual for div and
  sqrt), and the result is moved one ulp where the mode requires. Overflow clamps to +-MAX where the mode says so.
- fma.rn.f32: the f64 product is exact; the f64 sum is converted to f32. Double rounding can only go wrong when
  the f64 sum lies exactly on an f32 midpoint (or the result is f32-subnormal): those lanes are recomputed with
  round-to-odd (TwoSum error), which is exact.
- fma.f64: Boldo & Melquiond's emulation (TwoProduct, TwoSum, round-to-odd of the low parts, then one RN add),
  exact in every mode; lanes outside its range (an operand above 2**995, a product that overflows, or one below
  2**-960 including products that underflow to zero) are evaluated with exact rationals one lane at a time.
- .ftz flushes subnormal inputs and results to zero of the same sign; .sat clamps to [0,1] with NaN -> +0.
- .approx functions: ex2 and lg2 (f32) are computed in double precision by basic operations (ex2_f32, lg2_f32:
  the correctly rounded result but for rare 1-ulp cases, the same bits in the native C); sin, cos, tanh and rsqrt
  (f32) use NumPy's float32 kernels (measured within 2 ulp of the exact value; sin/cos absolute error < 1e-7 on
  [-pi, pi]); rcp.approx, div.full and sqrt.approx return the correctly rounded IEEE result; div.approx.f32 is
  a * (1/b) as the ISA defines it, the reciprocal flushed when subnormal (so 2**126 < |b| < 2**128 gives a
  sign-preserving zero, NaN for an infinite a); rsqrt.approx.f64 is ptxas's sequence (a 20-bit seed and one
  fused correction: _rsqrt64, bit for bit with an H100 but where the seed differs); rcp.approx.ftz.f64 and
  rsqrt.approx.ftz.f64 use the operand's upper word and zero the result's lower word (ISA). The hardware's own
  results carry the errors the ISA allows (tools/gpu_probes/isa_bounds.py: 2 ulp for ex2 and div.approx, 1 ulp
  for rcp.approx, 2**-22 for lg2, 2**-20.5 absolute for sin/cos in [-2pi, 2pi], 2**-22.9 relative for rsqrt,
  2**-23 for sqrt.approx, 2**-11 for tanh), so results can differ from silicon within those bounds; special
  values, .ftz and NaNs are what the ISA and the GPU give.
- NaN results are the GPU's (ops/common.gpu_nans, measured on a real GPU): every f32 NaN is the canonical
  0x7FFFFFFF (abs and neg too); an f64 NaN is the first NaN operand quieted, else the default 0xFFF8000000000000.
- min/max ignore a NaN operand (both NaN -> canonical NaN 0x7FFFFFFF / 0x7FFFFFFFFFFFFFFF); -0 < +0.
  min/max.NaN propagate NaN (canonical).
"""
from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np

from .common import (AluOp, Unsupported, chunked, fast_two_sum, finite_all, fix_overflow, ftz, gpu_nans,
                     narrow_directed, one_of, quiet, round_odd, sat, split_mods, step_directed, two_prod64, two_sum)

def _mul_resid64(a, b, r):
    """A value with the sign of (a*b - r) for float64 a, b and r = RN(a*b), valid over the whole range
    (subnormal results included): the operands are scaled to [0.5, 1) so TwoProduct is exact."""
    ma, ea = np.frexp(a)
    mb, eb = np.frexp(b)
    p, e = two_prod64(ma, mb)
    rs = np.ldexp(r, -(ea + eb))
    return (p - rs) + e


def _div_resid64(a, b, r):
    """A value with the sign of (a - r*b) for r = RN(a/b), scaled like _mul_resid64."""
    ma, ea = np.frexp(a)
    mb, eb = np.frexp(b)
    rs = np.ldexp(r, eb - ea)
    p, e = two_prod64(rs, mb)
    return (ma - p) - e


def _sqrt_resid64(a, r):
    """A value with the sign of (a - r*r) for r = RN(sqrt(a)), a >= 0."""
    ma, ea = np.frexp(a)
    odd = (ea & 1) == 1
    ma = np.where(odd, ma * 2.0, ma)
    ea = np.where(odd, ea - 1, ea)
    rs = np.ldexp(r, -(ea // 2))
    p, e = two_prod64(rs, rs)
    return (ma - p) - e


F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
_FT = {"f32": F32, "f64": F64}
RND = ("rn", "rz", "rm", "rp")


def _ftype(types):
    if len(types) != 1 or types[0] not in _FT:
        raise Unsupported("type")
    return types[0]


def _operands(dt, do_ftz, *xs):
    """The operands as arrays of dt, subnormals flushed to zero of the same sign when do_ftz."""
    xs = tuple(np.asarray(x, dt) for x in xs)
    return tuple(ftz(x) for x in xs) if do_ftz else xs


def _post(r, do_ftz, do_sat):
    if do_ftz:
        r = ftz(r)
    if do_sat:
        r = sat(r)
    return r


def _rm_zero_sign(r, x, y):
    """Round toward -inf: an exact zero sum of x + y is -0 unless both are +0."""
    z = r == 0
    if not np.asarray(z).any():
        return r
    both_pos = ~np.signbit(x) & ~np.signbit(y)
    return np.where(z, np.where(both_pos, r.dtype.type(0), r.dtype.type(-0.0)), r)


def _addsub(t, mode, is_sub, do_ftz, do_sat):
    dt = _FT[t]

    def fn(a, b):
        a, b = _operands(dt, do_ftz, a, b)
        if is_sub:
            b = np.negative(b)
        if mode == "rn":
            r = np.add(a, b)
        else:
            r, e = fast_two_sum(a, b)
            r = step_directed(r, e, mode)
            r = fix_overflow(r, finite_all(a, b), mode)
            if mode == "rm":
                r = _rm_zero_sign(r, a, b)
        return _post(r, do_ftz, do_sat)
    if mode == "rn" and not do_ftz and not do_sat:
        fn = np.subtract if is_sub else np.add
    return fn


def _mul(t, mode, do_ftz, do_sat):
    dt = _FT[t]

    def fn(a, b):
        a, b = _operands(dt, do_ftz, a, b)
        r = np.multiply(a, b)
        if mode != "rn":
            if dt == F32:
                e = np.multiply(a, b, dtype=np.float64) - r.astype(np.float64)
            else:
                e = _mul_resid64(a, b, r)
            r = step_directed(r, e, mode)
            r = fix_overflow(r, finite_all(a, b), mode)
        return _post(r, do_ftz, do_sat)
    if mode == "rn" and not do_ftz and not do_sat:
        fn = np.multiply
    return fn


_LOW29 = np.uint32((1 << 29) - 1)
_HALF29 = np.uint32(1 << 28)
_LOW28 = np.uint32((1 << 28) - 1)
_EXP32 = np.uint32(0x7F800000)


def _fma32_exact(a, b, c, mode):
    """Correctly rounded f32 fma (any mode) via an exact f64 product, TwoSum and round-to-odd."""
    p = np.multiply(a, b, dtype=np.float64)
    c64 = np.asarray(c, np.float64)
    s, e = two_sum(p, c64)
    s = np.where(np.isfinite(p) & np.isfinite(c64), s, p + c64)
    r = narrow_directed(round_odd(s, e), np.float32, mode)
    if mode == "rm":
        r = _rm_zero_sign(r, p, c64)
    return r


def _redo(r, idx, a, b, c, mode):
    """Recompute the lanes at flat indices `idx` with the exact algorithm (they are rare)."""
    if r.ndim == 0:
        return np.asarray(_fma32_exact(a, b, c, mode), np.float32)
    ab, bb, cb = (x.reshape(-1) for x in np.broadcast_arrays(a, b, c))
    shape = r.shape
    r = r.reshape(-1)
    r[idx] = _fma32_exact(ab[idx], bb[idx], cb[idx], mode)
    return r.reshape(shape)


def _fma32(mode, do_ftz, do_sat):
    """f32 fma. The f64 product a*b is exact; s = RN64(a*b + c) and r = RN32(s).
    rn: r is wrong only when s is exactly an f32 midpoint (low 29 mantissa bits = 0x10000000) or the result is
        f32-subnormal/zero; those lanes are redone exactly.
    rz/rm/rp: d = s - r is exact, and whenever d != 0 it has the sign of (exact - r) (the TwoSum error of s is
        smaller than one f64 ulp of s); lanes with d == 0 are redone exactly. r then moves one ulp where the mode
        requires; r = +-inf from a finite s gets d = -+inf, which moves it back to +-MAX where required."""
    def fn(a, b, c):
        a, b, c = _operands(F32, do_ftz, a, b, c)
        s = np.multiply(a, b, dtype=np.float64)
        if s.ndim and (c.ndim == 0 or s.shape == c.shape):
            np.add(s, c, out=s)
        else:
            s = np.asarray(np.add(s, c, dtype=np.float64))
        r = s.astype(np.float32)
        if mode == "rn":
            lo = s.reshape(-1).view(np.uint32)[::2]            # low word of each f64 (little-endian)
            # stage 1 (one pass): every f32 midpoint, normal or subnormal, has its low 28 f64 mantissa bits
            # zero; stage 2 keeps the real midpoints (low 29 bits = 0x10000000) and the nonzero results in
            # the f32 subnormal range, where the midpoint sits lower
            m1 = np.equal(np.bitwise_and(lo, _LOW28), 0)
            if m1.any():
                sf = s.reshape(-1)
                rb = r.reshape(-1).view(np.uint32)
                idx = np.flatnonzero(m1)
                if idx.size * 8 > m1.size:        # many exact results (integer-valued data): stay vectorised
                    cand = np.equal(np.bitwise_and(lo, _LOW29), _HALF29)
                    cand |= np.equal(np.bitwise_and(rb, _EXP32), 0) & (sf != 0)
                    idx = np.flatnonzero(cand)
                else:
                    keep = np.equal(np.bitwise_and(lo[idx], _LOW29), _HALF29)
                    keep |= np.equal(np.bitwise_and(rb[idx], _EXP32), 0) & (sf[idx] != 0)
                    idx = idx[keep]
                if idx.size:
                    r = _redo(r, idx, a, b, c, mode)
        else:
            d = np.subtract(s, r, out=s) if s.ndim else s - np.float64(r)   # exact; s is not needed again
            exact = d == 0
            r = step_directed(r, d, mode)
            if exact.any():
                r = _redo(r, np.flatnonzero(exact), a, b, c, mode)
        return _post(r, do_ftz, do_sat)
    return fn


def _round_fraction64(q: Fraction, mode: str, zero_sign: float) -> float:
    """Round an exact rational to float64 with mode rn/rz/rm/rp (scalar; used for rare lanes)."""
    if q == 0:
        return zero_sign
    try:
        r = float(q)                      # correctly rounded to nearest
    except OverflowError:
        r = math.inf if q > 0 else -math.inf
    if mode == "rn":
        return r
    if math.isinf(r):
        keep_inf = (mode == "rm" and r < 0) or (mode == "rp" and r > 0)
        return r if keep_inf else math.copysign(sys.float_info.max, r)
    fr = Fraction(r)
    if mode == "rm" and fr > q:
        r = math.nextafter(r, -math.inf)
    elif mode == "rp" and fr < q:
        r = math.nextafter(r, math.inf)
    elif mode == "rz" and abs(fr) > abs(q):
        r = math.nextafter(r, 0.0)
    return r


def _fma64_scalar(a: float, b: float, c: float, mode: str) -> float:
    p = Fraction(a) * Fraction(b)
    q = p + Fraction(c)
    if q == 0:
        pneg = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
        cneg = math.copysign(1.0, c) < 0
        if p == 0 and c == 0 and pneg == cneg:
            zs = -0.0 if pneg else 0.0
        else:
            zs = -0.0 if mode == "rm" else 0.0
        return _round_fraction64(q, mode, zs)
    return _round_fraction64(q, mode, 0.0)


_BIG64 = 2.0 ** 995
_SMALL64 = 2.0 ** -960


def _fma64_rn_fast(a, b, c):
    """fma.rn.f64 on same-shape (broadcast) arrays with a handful of reused buffers: Dekker TwoProduct, two
    TwoSums, round-to-odd on the bit pattern, one final add. Returns (r, suspect) where suspect flags lanes whose
    result may be wrong (NaN from special operands or a split/product overflow; products below 2**-960)."""
    sp = np.float64(134217729.0)          # 2**27 + 1 (Veltkamp split)
    p = np.multiply(a, b)
    t = np.multiply(a, sp)
    ah = np.subtract(t, a)
    np.subtract(t, ah, out=ah)                 # ah = t - (t - a)
    al = np.subtract(a, ah)
    np.multiply(b, sp, out=t)
    bh = np.subtract(t, b)
    np.subtract(t, bh, out=bh)                 # bh = t - (t - b)
    bl = np.subtract(b, bh, out=t)
    e = np.multiply(ah, bh)                    # e = ((ah*bh - p) + ah*bl + al*bh) + al*bl
    np.subtract(e, p, out=e)
    np.multiply(ah, bl, out=ah)
    np.add(e, ah, out=e)
    np.multiply(al, bh, out=bh)
    np.add(e, bh, out=e)
    np.multiply(al, bl, out=al)
    np.add(e, al, out=e)                       # e: exact error of p (buffers ah, al, bh, t now free)
    th = np.add(c, p)                          # TwoSum(c, p) -> th, tl
    bb = np.subtract(th, c, out=t)
    tl = np.subtract(th, bb, out=ah)
    np.subtract(c, tl, out=tl)
    np.subtract(p, bb, out=bb)
    np.add(tl, bb, out=tl)
    w = np.add(tl, e, out=al)                  # TwoSum(tl, e) -> w, ew
    bb = np.subtract(w, tl, out=t)
    ew = np.subtract(w, bb, out=bh)
    np.subtract(tl, ew, out=ew)
    np.subtract(e, bb, out=bb)
    np.add(ew, bb, out=ew)
    # round w to odd: an inexact w with an even last bit moves one ulp toward the exact value
    u = w.view(np.uint64)
    pos, neg = ew > 0, ew < 0
    fix = (pos | neg) & ((u & np.uint64(1)) == 0)
    if fix.any():
        up = fix & (pos == (w > 0))
        np.add(u, up, out=u)
        np.subtract(u, fix ^ up, out=u)
    # r = th + w, except that a zero w must not turn th = -0 into +0
    zt = th == 0
    keep = None
    if zt.any():
        keep = zt & (w == 0)
        saved = th[keep]
    np.add(th, w, out=th)
    if keep is not None:
        th[keep] = saved
    suspect = np.isnan(th)
    np.abs(p, out=p)
    small = p < _SMALL64
    if small.any():
        suspect |= small & (a != 0) & (b != 0)
    return th, suspect


def fma64(a, b, c, mode="rn"):
    """f64 fused multiply-add, correctly rounded in every mode. Vectorised error-free transforms for the
    common range; lanes where they are not exact (an operand above 2**995, a product that overflows or lies
    below 2**-960) are evaluated exactly with rationals, one lane at a time (they are rare)."""
    a = np.asarray(a, F64)
    b = np.asarray(b, F64)
    c = np.asarray(c, F64)
    if mode == "rn" and (a.ndim or b.ndim or c.ndim):
        a, b, c = np.broadcast_arrays(a, b, c)
        r, suspect = _fma64_rn_fast(a, b, c)
        if suspect.any():
            idx = np.flatnonzero(suspect)
            ab, bb, cb, rf = a.reshape(-1), b.reshape(-1), c.reshape(-1), r.reshape(-1)
            for i in idx.tolist():
                x, y, z = float(ab[i]), float(bb[i]), float(cb[i])
                if math.isfinite(x) and math.isfinite(y) and math.isfinite(z):
                    rf[i] = _fma64_scalar(x, y, z, "rn")
                else:
                    rf[i] = x * y + z          # inf/NaN operands: IEEE evaluation is exact
        return r
    p, pe = two_prod64(a, b)
    th, tl = two_sum(c, p)
    w, ew = two_sum(tl, pe)
    if mode == "rn":
        v = round_odd(w, ew)
        r = th + v
        r = np.where(v == 0, th, r)
    else:
        r, e2 = two_sum(th, w)
        r = np.where(w == 0, th, r)
        resid = e2 + ew
        r = step_directed(r, resid, mode)
        if mode == "rm":
            r = _rm_zero_sign(r, p, c)
    fin = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    if not fin.all():                     # inf/NaN operands: plain IEEE evaluation is exact
        r = np.where(fin, r, a * b + c)
    ap = np.abs(p)
    # product tiny (including underflowed to zero from nonzero operands), huge, or overflowed
    tiny = (ap < _SMALL64) & (a != 0) & (b != 0)
    hard = fin & ((np.abs(a) > _BIG64) | (np.abs(b) > _BIG64) | ~(ap < np.inf) | tiny)
    if hard.any():
        r = np.array(r, F64, copy=True)
        ab, bb, cb = (x.reshape(-1) for x in np.broadcast_arrays(a, b, c))
        flat = r.reshape(-1)
        for i in np.flatnonzero(hard.reshape(-1)).tolist():
            flat[i] = _fma64_scalar(float(ab[i]), float(bb[i]), float(cb[i]), mode)
        r = flat.reshape(r.shape)
    return r


def _fma64(mode, do_ftz, do_sat):
    def fn(a, b, c):
        if do_ftz:
            a, b, c = ftz(np.asarray(a, F64)), ftz(np.asarray(b, F64)), ftz(np.asarray(c, F64))
        return _post(fma64(a, b, c, mode), do_ftz, do_sat)
    return fn


def _div(t, mode, do_ftz, do_sat, approx):
    dt = _FT[t]

    def fn(a, b):
        a, b = _operands(dt, do_ftz, a, b)
        r = np.divide(a, b)
        if mode not in ("rn", None):
            if dt == F32:
                rr = a.astype(np.float64) - r.astype(np.float64) * b.astype(np.float64)
            else:
                rr = _div_resid64(a, b, r)
            resid = np.where(b < 0, -rr, rr)
            r = step_directed(r, resid, mode)
            r = fix_overflow(r, finite_all(a) & (b != 0), mode)
        return _post(r, do_ftz, do_sat)
    return fn


def _div_approx(do_ftz):
    """div.approx.f32 as the ISA defines it: a * (1/b). The reciprocal is flushed to zero when it is subnormal, so
    for 2**126 < |b| < 2**128 the result is a sign-preserving zero, or NaN when a is infinite (ISA, "div")."""
    one = np.float32(1)

    def fn(a, b):
        a, b = _operands(F32, do_ftz, a, b)
        r = np.multiply(a, ftz(np.divide(one, b)))
        return ftz(r) if do_ftz else r
    return fn


def _sqrt(t, mode, do_ftz):
    dt = _FT[t]

    def fn(a):
        a = np.asarray(a, dt)
        if do_ftz:
            a = ftz(a)
        r = np.sqrt(a)
        if mode not in ("rn", None):
            if dt == F32:
                r64 = r.astype(np.float64)
                resid = a.astype(np.float64) - r64 * r64
            else:
                resid = _sqrt_resid64(a, r)
            r = step_directed(r, np.where(np.isfinite(r) & (r > 0), resid, 0), mode)
        return ftz(r) if do_ftz else r
    return fn


_HI_WORD = np.uint64(0xFFFFFFFF00000000)
_HI_NAN = np.array(0x7FFFFFFF00000000, np.uint64).view(F64)[()]


def _hi_word64(f):
    """rcp.approx.ftz.f64 / rsqrt.approx.ftz.f64 as the ISA defines them: f of the operand's upper 32 bits (a
    1.11.20 float; subnormals flushed to zero), the result's upper 32 bits (truncated) and a zero lower word; NaN
    results are the canonical 0x7FFFFFFF00000000."""
    def fn(a):
        x = ftz((np.asarray(a, F64).view(np.uint64) & _HI_WORD).view(F64))
        r = ftz(f(x))
        r = (r.view(np.uint64) & _HI_WORD).view(F64)
        return np.where(np.isnan(r), _HI_NAN, r)
    return fn


def _via64(f, dt, do_ftz):
    """Evaluate f in float64 and round once to dt (the .approx transcendental functions)."""
    def fn(a):
        a = np.asarray(a, dt)
        if do_ftz:
            a = ftz(a)
        r = f(a.astype(np.float64)).astype(dt)
        return ftz(r) if do_ftz else r
    return fn


def build_arith(instr, op):
    """add sub mul (float types)."""
    types, flags = split_mods(instr, {"rn", "rz", "rm", "rp", "ftz", "sat"})
    t = _ftype(types)
    mode = one_of(flags, RND) or "rn"
    do_ftz = "ftz" in flags
    do_sat = "sat" in flags
    if t == "f64" and (do_ftz or do_sat):
        raise Unsupported(".ftz/.sat with .f64")
    if op == "mul":
        f = _mul(t, mode, do_ftz, do_sat)
    else:
        f = _addsub(t, mode, op == "sub", do_ftz, do_sat)
    if mode != "rn":
        f = chunked(f, 16384)
    return AluOp(quiet(gpu_nans(f, t)), (t, t), (t,))


def build_fma(instr):
    """fma / mad (float types)."""
    types, flags = split_mods(instr, {"rn", "rz", "rm", "rp", "ftz", "sat"})
    t = _ftype(types)
    mode = one_of(flags, RND)
    if mode is None:
        if instr.opcode == "fma":
            raise Unsupported("fma needs a rounding modifier")
        mode = "rn"        # mad.f32 without rounding = fused multiply-add rounded to nearest
    do_ftz = "ftz" in flags
    do_sat = "sat" in flags
    if t == "f64":
        if do_sat or do_ftz:
            raise Unsupported(".ftz/.sat with .f64")
        f = chunked(_fma64(mode, False, False), 16384)
    else:
        f = chunked(_fma32(mode, do_ftz, do_sat), 32768)
    return AluOp(quiet(gpu_nans(f, t)), (t, t, t), (t,))


def build_div(instr):
    types, flags = split_mods(instr, {"rn", "rz", "rm", "rp", "ftz", "approx", "full"})
    t = _ftype(types)
    mode = one_of(flags, RND + ("approx", "full"))
    if mode is None:
        raise Unsupported("div.f needs .approx/.full/.rnd")
    if t == "f64" and (mode in ("approx", "full") or "ftz" in flags):
        raise Unsupported("div.f64 modifier")
    if mode == "approx":
        return AluOp(quiet(gpu_nans(_div_approx("ftz" in flags), t)), (t, t), (t,))
    rmode = mode if mode in RND else "rn"
    if rmode == "rn" and "ftz" not in flags:
        return AluOp(quiet(gpu_nans(np.divide, t)), (t, t), (t,))
    return AluOp(quiet(gpu_nans(chunked(_div(t, rmode, "ftz" in flags, False, mode == "full"), 16384), t)),
                 (t, t), (t,))


def _rnd_or_approx(instr, name: str):
    """(type, flags, mode) of rcp/sqrt: exactly one of .approx or a rounding modifier is required."""
    types, flags = split_mods(instr, {"rn", "rz", "rm", "rp", "ftz", "approx"})
    t = _ftype(types)
    mode = one_of(flags, RND + ("approx",))
    if mode is None:
        raise Unsupported(f"{name} needs .approx or .rnd")
    return t, flags, mode


def build_rcp(instr):
    t, flags, mode = _rnd_or_approx(instr, "rcp")
    if t == "f64" and mode == "approx" and "ftz" not in flags:
        raise Unsupported("rcp.approx.f64 needs .ftz")
    if t == "f64" and mode == "approx":
        return AluOp(quiet(_hi_word64(lambda x: np.float64(1.0) / x)), (t,), (t,))
    dt = _FT[t]
    one = dt.type(1)
    d = _div(t, mode if mode in RND else "rn", "ftz" in flags, False, mode == "approx")
    return AluOp(quiet(gpu_nans(lambda a: d(one, a), t)), (t,), (t,))


def build_sqrt(instr):
    t, flags, mode = _rnd_or_approx(instr, "sqrt")
    if t == "f64" and (mode == "approx" or "ftz" in flags):
        raise Unsupported("sqrt.f64 modifier")
    if mode in ("rn", "approx") and "ftz" not in flags:
        return AluOp(quiet(gpu_nans(np.sqrt, t)), (t,), (t,))
    return AluOp(quiet(gpu_nans(chunked(_sqrt(t, mode if mode in RND else "rn", "ftz" in flags), 16384), t)),
                 (t,), (t,))


def build_rsqrt(instr):
    types, flags = split_mods(instr, {"approx", "ftz"})
    t = _ftype(types)
    if "approx" not in flags:
        raise Unsupported("rsqrt needs .approx")
    if t == "f32":
        f = _approx32(lambda x: np.float32(1.0) / np.sqrt(x), "ftz" in flags, "rsqrt")
    elif "ftz" in flags:
        return AluOp(quiet(_hi_word64(lambda x: np.float64(1.0) / np.sqrt(x))), (t,), (t,))
    else:
        f = _rsqrt64
    return AluOp(quiet(gpu_nans(f, t)), (t,), (t,))


_RSQ_FAST_LO, _RSQ_FAST_SPAN = 0x00100000, 0x7FE00000     # upper words of positive normal finite doubles


def _rsqrt64(a):
    """rsqrt.approx.f64 as ptxas (nvcc 13.0, sm_90) compiles it: y0 = MUFU.RSQ64H of the operand (1/sqrt of its
    upper word, the upper word of the result: rsqrt.approx.ftz.f64, _hi_word64), then one correction in fused
    multiply-adds, e = fma(a, -(y0 y0), 1), y = fma(fma(e, 0.375, 0.5), y0 e, y0); an operand that is not a positive
    normal double takes the slow path, whose results are 1/sqrt(a) (zero, infinity, NaN; subnormals scaled). Real-GPU
    run 3 (an H100): with its own y0 this gives all 10431 normal results of diff_kernels.cu's f64_approx bit for bit,
    with the emulator's y0 all but 2 (MUFU.RSQ64H's own rounding: 9 of 10431 upper words of rsqrt.approx.ftz.f64
    differ), where 1/sqrt in f64 missed 2675."""
    a = np.asarray(a, F64)
    with np.errstate(all="ignore"):
        out = np.array(np.float64(1.0) / np.sqrt(a), F64)
        hi = (a.view(np.uint64) >> np.uint64(32)).astype(np.int64)
        fast = ((hi - _RSQ_FAST_LO) & 0xFFFFFFFF) < _RSQ_FAST_SPAN
        if fast.any():
            x = a[fast]
            out[fast] = rsqrt64_refine(x, _hi_word64(lambda v: np.float64(1.0) / np.sqrt(v))(x))
    return out


def rsqrt64_refine(x, y0):
    """ptxas's correction of a seed y0 of 1/sqrt(x) (positive normal x): y0 + (y0 e)(0.5 + 0.375 e), e = 1 - x y0²,
    as DMUL, DFMA, DFMA, DMUL, DFMA (nvdisasm of rsqrt.approx.f64 for sm_90)."""
    e = fma64(x, -(y0 * y0), np.ones_like(x))
    p = fma64(e, np.full_like(x, 0.375), np.full_like(x, 0.5))
    return fma64(p, y0 * e, y0)


# ex2/lg2.approx.f32 are computed in double precision by basic IEEE operations only (rint, +, -, *, /, integer bit
# operations), each in a fixed order: translator/cgen.py writes the same steps in C from these same constants, so
# the NumPy and the native path give identical bits by construction (library exp2/log2 kernels differ between
# NumPy's SIMD code and libm). The double result is within ~1e-13 relative of the exact value, so the float result
# is the correctly rounded one but for exact values within that distance of a rounding midpoint (at most 1 ulp off
# then; the ISA allows 2 ulp for ex2 and 2**-22.6 absolute for lg2). NaN in -> canonical NaN 0x7FFFFFFF.
EX2_COEFFS = tuple(math.log(2.0) ** k / math.factorial(k) for k in range(11))     # 2**f = sum c_k f**k, |f| <= 1/2
EX2_CLAMP = 200.0                           # 2**200 overflows f32, 2**-200 underflows it; keeps n + 1023 in range
LG2_COEFFS = tuple(1.0 / (2 * k + 1) for k in range(9))    # ln m = 2 s sum z**k / (2k+1), s = (m-1)/(m+1), z = s*s
LG2_SCALE = 2.0 / math.log(2.0)
SQRT2 = math.sqrt(2.0)


def ex2_f32(x):
    """2**x of float32 lanes (module comment above; cgen.EX2F is the same in C)."""
    x = np.asarray(x, F32)
    d = x.astype(F64)
    nan = d != d
    d = np.where(nan, 0.0, d)
    d = np.where(d < -EX2_CLAMP, -EX2_CLAMP, d)
    d = np.where(d > EX2_CLAMP, EX2_CLAMP, d)
    n = np.rint(d)
    f = d - n
    p = np.full(d.shape, EX2_COEFFS[10])
    for c in EX2_COEFFS[9::-1]:         # in place: the same roundings, no temporaries
        p *= f
        p += c
    scale = n.astype(np.int64)
    scale += 1023
    scale <<= 52
    p *= scale.view(F64)
    r = p.astype(F32)
    return np.where(nan, np.array(0x7FFFFFFF, np.uint32).view(F32), r)


def lg2_f32(x):
    """log2(x) of float32 lanes (module comment above; cgen.LG2F is the same in C)."""
    x = np.asarray(x, F32)
    d = x.astype(F64)
    bits = d.view(np.int64)
    e = ((bits >> 52) & 0x7FF) - 1023
    m = ((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000).view(F64)
    big = m > SQRT2
    m = np.where(big, m * 0.5, m)
    e = np.where(big, e + 1, e)
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    q = np.full(d.shape, LG2_COEFFS[8])
    for c in LG2_COEFFS[7::-1]:
        q *= z
        q += c
    q *= s
    q *= LG2_SCALE
    r = (e.astype(F64) + q).astype(F32)
    r = np.where(d == 0.0, np.float32(-np.inf), r)
    r = np.where(d == np.inf, np.float32(np.inf), r)
    return np.where((d < 0.0) | (d != d), np.array(0x7FFFFFFF, np.uint32).view(F32), r)


_TRANS = {"ex2": ex2_f32, "lg2": lg2_f32, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}
_TINY32 = np.float32(2.0 ** -126)


def _approx32(f, do_ftz, name):
    """.approx f32 functions: ex2_f32/lg2_f32, else NumPy's float32 kernels (measured <= 2 ulp from the exact value,
    inside the hardware's bounds). ex2 ignores input ftz (2**subnormal rounds to 1 either way)."""
    if not do_ftz:
        return lambda a: f(np.asarray(a, F32))

    def fn(a):
        x = np.asarray(a, F32)
        if name != "ex2":
            x = ftz(x)
        r = f(x)
        if name == "ex2":        # results are >= 0: flush only when something is below FLT_MIN
            small = r < _TINY32
            return np.where(small, np.float32(0), r) if small.any() else r
        return ftz(r)
    return fn


def build_transcendental(instr):
    types, flags = split_mods(instr, {"approx", "ftz"})
    if types != ("f32",):
        raise Unsupported("type")
    if "approx" not in flags:
        raise Unsupported(".approx required")
    f = _approx32(_TRANS[instr.opcode], "ftz" in flags, instr.opcode)
    if instr.opcode not in ("ex2", "lg2"):       # ex2_f32 and lg2_f32 give the canonical NaN already
        f = gpu_nans(f, "f32")
    return AluOp(quiet(f), ("f32",), ("f32",))


def build_abs_neg(instr, is_neg):
    types, flags = split_mods(instr, {"ftz"})
    t = _ftype(types)
    uf = np.negative if is_neg else np.abs
    f = (lambda a: uf(ftz(a))) if "ftz" in flags else uf
    # The GPU's negation and absolute value are arithmetic: f32, a NaN comes back canonical, as from add; f64 (ptxas:
    # DADD -RZ, -x / |x|), a NaN comes back quieted with its sign and payload, the sign not changed (an H100)
    if t == "f64":
        return AluOp(_f64_nan_passes(f), (t,), (t,))
    return AluOp(gpu_nans(f, t), (t,), (t,))


_QUIET64 = np.uint64(0x0008000000000000)


def _f64_nan_passes(f):
    def fn(a):
        a = np.asarray(a, F64)
        r = f(a)
        n = np.isnan(a)
        return np.where(n, (a.view(np.uint64) | _QUIET64).view(F64), r) if n.any() else r
    return fn


_CANON = {F32: np.uint32(0x7FFFFFFF), F64: np.uint64(0x7FFFFFFFFFFFFFFF)}
_UT = {F32: np.uint32, F64: np.uint64}


def _minmax(dt, is_max, nan_prop, do_ftz):
    uf = (np.maximum if is_max else np.minimum) if nan_prop else (np.fmax if is_max else np.fmin)
    ut = _UT[dt]
    canon = np.array(_CANON[dt]).view(dt)[()]

    def fn(a, b):
        a, b = _operands(dt, do_ftz, a, b)
        r = uf(a, b)
        if np.equal(r, 0).any():          # only a zero result can be a +0/-0 pair: -0 < +0
            z = (a == 0) & (b == 0)
            ua, ub = a.view(ut), b.view(ut)
            r = np.where(z, (ua & ub if is_max else ua | ub).view(dt), r)
        n = np.isnan(r)
        if n.any():
            r = np.where(n, canon, r)
        return r
    return fn


def build_min_max(instr, is_max):
    types, flags = split_mods(instr, {"ftz", "NaN"})
    t = _ftype(types)
    if t == "f64" and flags:
        raise Unsupported("modifier with .f64")
    return AluOp(quiet(_minmax(_FT[t], is_max, "NaN" in flags, "ftz" in flags)), (t, t), (t,))


def build_copysign(instr):
    types, flags = split_mods(instr, ())
    t = _ftype(types)
    # d = b with the sign of a
    return AluOp(lambda a, b: np.copysign(b, a), (t, t), (t,))


_TESTP = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")


def build_testp(instr):
    types, flags = split_mods(instr, _TESTP)
    t = _ftype(types)
    what = one_of(flags, _TESTP)
    if what is None:
        raise Unsupported("testp needs a test")
    tiny = np.finfo(_FT[t]).tiny

    def fn(a):
        if what == "finite":
            return np.isfinite(a)
        if what == "infinite":
            return np.isinf(a)
        if what == "number":
            return ~np.isnan(a)
        if what == "notanumber":
            return np.isnan(a)
        mag = np.abs(a)
        if what == "normal":
            return np.isfinite(a) & (mag >= tiny)
        return (mag < tiny) & (mag > 0)
    return AluOp(quiet(fn), (t,), ("pred",))
