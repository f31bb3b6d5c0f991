"""emu/ops: cvt in every direction, and f16/bf16/f16x2/bf16x2 arithmetic. References: exact rationals rounded
by test_emu_ops_ref.round_frac, bit patterns via struct, the PTX rules for saturation and NaN written out here."""
from __future__ import annotations

import math
import random
import zlib
import struct
from fractions import Fraction as F

import numpy as np
import pytest

from pyvgpu_daemon.emu.ops import build_alu
from pyvgpu_daemon.emu.ptx import ir
from test_emu_ops_ref import (bf16_bits_of, bf16_from_bits, f16_bits, f16_from_bits, f32_bits, f32_from_bits,
                              f64_bits, round_frac)

MODES = ["rn", "rz", "rm", "rp"]
INT_RANGE = {"s8": (-2**7, 2**7 - 1), "s16": (-2**15, 2**15 - 1), "s32": (-2**31, 2**31 - 1),
             "s64": (-2**63, 2**63 - 1), "u8": (0, 2**8 - 1), "u16": (0, 2**16 - 1), "u32": (0, 2**32 - 1),
             "u64": (0, 2**64 - 1)}
NP = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u16": np.uint16,
      "u32": np.uint32, "u64": np.uint64, "f32": np.float32, "f64": np.float64, "f16": np.float16}


def seed(key) -> int:
    """A per-case seed that does not depend on PYTHONHASHSEED."""
    return zlib.crc32(repr(key).encode())


def alu(spec, nsrc=1):
    parts = spec.split(".")
    return build_alu(ir.Instr(parts[0], tuple(parts[1:]), [ir.Reg("%d")],
                              [ir.Reg(f"%s{i}") for i in range(nsrc)], line=2))


def ints(x):
    return [int(v) for v in np.asarray(x).ravel()]


# ------------------------------------------------------------------------------------------------ int <-> int

@pytest.mark.parametrize("dt", list(INT_RANGE))
@pytest.mark.parametrize("st", ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"])
def test_cvt_int_int_wrap_and_sat(dt, st):
    rng = random.Random(seed((dt, st)))
    lo, hi = INT_RANGE[st]
    vals = [lo, hi, 0, 1, -1 if lo < 0 else 2] + [rng.randint(lo, hi) for _ in range(100)]
    a = np.array(vals, NP[st])
    op = alu(f"cvt.{dt}.{st}")
    assert op.src_types == (st,) and op.dst_types == (dt,)
    w = int(dt[1:])
    got = op.fn(a)
    assert got.dtype == NP[dt]
    want = []
    for v in vals:
        m = v & ((1 << w) - 1)
        if dt[0] == "s" and m >= 1 << (w - 1):
            m -= 1 << w
        want.append(m)
    assert ints(got) == want
    dlo, dhi = INT_RANGE[dt]
    assert ints(alu(f"cvt.sat.{dt}.{st}").fn(a)) == [min(max(v, dlo), dhi) for v in vals]


def test_cvt_corpus_int_forms():
    assert ints(alu("cvt.u64.u32").fn(np.array([0xFFFFFFFF], np.uint32))) == [0xFFFFFFFF]
    assert ints(alu("cvt.s64.s32").fn(np.array([-5], np.int32))) == [-5]
    assert ints(alu("cvt.u32.u64").fn(np.array([0x123456789], np.uint64))) == [0x23456789]
    assert ints(alu("cvt.u16.u32").fn(np.array([0x12345], np.uint32))) == [0x2345]


# ------------------------------------------------------------------------------------------------ float -> int

# NaN gives 0, but the sign bit alone from f64 to s32/u32/s64 and f32 to s64 (an H100, real-GPU run 2)
NAN_SIGN_BIT = {("f64", "s32"): -2 ** 31, ("f64", "u32"): 2 ** 31, ("f64", "s64"): -2 ** 63, ("f32", "s64"): -2 ** 63}


def f2i_ref(x, irnd, dt, st=None):
    if math.isnan(x):
        return NAN_SIGN_BIT.get((st, dt), 0)
    lo, hi = INT_RANGE[dt]
    if math.isinf(x):
        return hi if x > 0 else lo
    q = F(x)
    if irnd == "rzi":
        n = int(q)
    elif irnd == "rmi":
        n = math.floor(q)
    elif irnd == "rpi":
        n = math.ceil(q)
    else:
        fl = math.floor(q)
        d = q - fl
        n = fl + 1 if d > F(1, 2) or (d == F(1, 2) and fl % 2 == 1) else fl
    return min(max(n, lo), hi)


@pytest.mark.parametrize("irnd", ["rni", "rzi", "rmi", "rpi"])
@pytest.mark.parametrize("dt", ["s32", "u32", "s64", "u64", "s16", "u8"])
@pytest.mark.parametrize("st", ["f32", "f64", "f16"])
def test_cvt_float_to_int_saturates_nan_zero(irnd, dt, st):
    rng = random.Random(seed((irnd, dt, st)))
    vals = [math.nan, math.inf, -math.inf, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1e30, -1e30,
            2.0 ** 31, 2.0 ** 31 - 128, -2.0 ** 31, 2.0 ** 32, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 2.0 ** 64 * 3,
            9.2233720368547748e18, 1.8446744073709550e19, 65504.0, -65504.0, 300.7, -300.7]
    vals += [rng.uniform(-1, 1) * 2.0 ** rng.randint(-5, 70) for _ in range(200)]
    with np.errstate(over="ignore"):
        a = np.array(vals, NP[st])
    vals = [float(v) for v in a]                 # as the source format holds them
    got = alu(f"cvt.{irnd}.{dt}.{st}").fn(a)
    assert got.dtype == NP[dt]
    assert ints(got) == [f2i_ref(v, irnd, dt, st) for v in vals]


def test_cvt_rzi_ftz_flushes_subnormal_input():
    sub = np.array([-2.0 ** -140], np.float32)
    assert ints(alu("cvt.rmi.s32.f32").fn(sub)) == [-1]
    assert ints(alu("cvt.rmi.ftz.s32.f32").fn(sub)) == [0]


# ------------------------------------------------------------------------------------------------ int -> float

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("st", ["s32", "u32", "s64", "u64", "s16"])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16"])
def test_cvt_int_to_float_rounding(mode, st, dt):
    rng = random.Random(seed((mode, st, dt)))
    lo, hi = INT_RANGE[st]
    vals = [lo, hi, 0, 1, hi - 1, 2**24 + 1, 2**53 + 1, 65519, 65520, 2049] + \
           [rng.randint(lo, hi) for _ in range(300)] + [rng.randint(-2**30, 2**30) for _ in range(50)]
    vals = [v for v in vals if lo <= v <= hi]
    got = alu(f"cvt.{mode}.{dt}.{st}").fn(np.array(vals, NP[st]))
    fmt = dt
    want = [round_frac(F(v), fmt, mode) if v != 0 else 0.0 for v in vals]
    assert [f64_bits(float(g)) for g in got] == [f64_bits(w) for w in want]


def test_cvt_int_to_float_corpus_forms():
    assert alu("cvt.rn.f32.s32").fn(np.array([16777217, -16777219], np.int32)).tolist() == [16777216.0, -16777220.0]
    assert alu("cvt.rn.f64.s64").fn(np.array([2**53 + 1], np.int64)).tolist() == [2.0 ** 53]
    assert alu("cvt.rn.f32.s64").fn(np.array([2**63 - 1], np.int64)).tolist() == [2.0 ** 63]


# ------------------------------------------------------------------------------------------------ float <-> float

def rand_finite(rng, n, bits: int, mant: int, from_bits):
    """n random finite values from uniformly random bit patterns (an all-ones exponent loses its top bit)."""
    exp_mask = (1 << (bits - 1 - mant)) - 1
    out = []
    for _ in range(n):
        u = rng.getrandbits(bits)
        if (u >> mant) & exp_mask == exp_mask:
            u &= ~(1 << (bits - 2))
        out.append(from_bits(u))
    return out


def rand_f32(rng, n):
    return rand_finite(rng, n, 32, 23, f32_from_bits)


@pytest.mark.parametrize("mode", MODES)
def test_cvt_f64_to_f32_and_f16_and_bf16(mode):
    rng = random.Random(MODES.index(mode))
    vals = [rng.uniform(-1, 1) * 2.0 ** rng.randint(-160, 140) for _ in range(1500)]
    vals += [1 + 2.0 ** -24, 1 + 3 * 2.0 ** -24, 3.4028235e38 * 1.0000001, 2.0 ** -150, -(2.0 ** -150) * 1.5,
             65520.0, 65519.99, 2.0 ** -25, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8]
    a = np.array(vals, np.float64)
    got32 = alu(f"cvt.{mode}.f32.f64").fn(a)
    assert got32.dtype == np.float32
    assert [f64_bits(float(g)) for g in got32] == [f64_bits(round_frac(F(v), "f32", mode)) for v in vals]
    got16 = alu(f"cvt.{mode}.f16.f64").fn(a)
    assert got16.dtype == np.float16
    assert [f64_bits(float(g)) for g in got16] == [f64_bits(round_frac(F(v), "f16", mode)) for v in vals]
    gotb = alu(f"cvt.{mode}.bf16.f64").fn(a)
    assert gotb.dtype == np.uint16
    assert [f64_bits(bf16_from_bits(int(g))) for g in gotb] == [f64_bits(round_frac(F(v), "bf16", mode)) for v in vals]


@pytest.mark.parametrize("mode", MODES)
def test_cvt_f32_to_f16_bf16_random_bits(mode):
    rng = random.Random(40 + MODES.index(mode))
    vals = rand_f32(rng, 3000)
    a = np.array(vals, np.float32)
    got16 = alu(f"cvt.{mode}.f16.f32").fn(a)
    assert [f16_bits(float(g)) for g in got16] == [f16_bits(round_frac(F(v), "f16", mode)) if v != 0
                                                   else f16_bits(v) for v in vals]
    gotb = alu(f"cvt.{mode}.bf16.f32").fn(a)
    assert [int(g) for g in gotb] == [bf16_bits_of(round_frac(F(v), "bf16", mode)) if v != 0
                                      else f32_bits(v) >> 16 for v in vals]


def test_f16_bf16_ties_to_even():
    # f16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> 1 (even); 1 + 3*2^-11 -> 1 + 2^-9 (even)
    a = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -(1 + 2.0 ** -11), 65520.0, 65519.0], np.float32)
    r = alu("cvt.rn.f16.f32").fn(a).view(np.uint16).tolist()
    assert r == [0x3C00, 0x3C02, 0xBC00, 0x7C00, 0x7BFF]
    # bf16: 1 + 2^-8 halfway -> 1.0 (0x3F80); 1 + 3*2^-8 -> 1 + 2^-6 (0x3F82)
    b = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20], np.float32)
    assert alu("cvt.rn.bf16.f32").fn(b).tolist() == [0x3F80, 0x3F82, 0x3F81]


def test_cvt_nan_rules():
    nan32 = np.array([f32_from_bits(0x7FC12345), f32_from_bits(0xFFA00000)], np.float32)
    h = alu("cvt.rn.f16.f32").fn(nan32)
    assert all(math.isnan(float(v)) for v in h)
    b = alu("cvt.rn.bf16.f32").fn(nan32).tolist()
    assert b == [0x7FC1, 0xFFE0]        # NaN kept: sign and top payload bits, quieted
    assert math.isnan(alu("cvt.f32.f16").fn(np.array([math.nan], np.float16))[0])
    s = alu("cvt.sat.f32.f32").fn(np.array([math.nan, -0.0, -5.0, 0.75, 7.0, math.inf], np.float32))
    assert [f32_bits(float(v)) for v in s] == [0, 0, 0, f32_bits(0.75), f32_bits(1.0), f32_bits(1.0)]


def test_cvt_widening_exact_and_ftz():
    vals = [2.0 ** -149, -2.0 ** -140, 1.1, math.inf, -0.0]
    got = alu("cvt.f64.f32").fn(np.array(vals, np.float32))
    assert [f64_bits(float(g)) for g in got] == [f64_bits(float(np.float32(v))) for v in vals]
    got = alu("cvt.ftz.f64.f32").fn(np.array(vals, np.float32))
    assert f64_bits(float(got[0])) == 0 and f64_bits(float(got[1])) == f64_bits(-0.0)
    h = np.array([f16_from_bits(0x0001), f16_from_bits(0xFBFF)], np.float16)
    assert alu("cvt.f32.f16").fn(h).tolist() == [2.0 ** -24, -65504.0]
    assert alu("cvt.f32.bf16").fn(np.array([0x3FC0, 0xFF80], np.uint16)).tolist() == [1.5, -math.inf]


@pytest.mark.parametrize("frnd,fn", [("rni", None), ("rzi", math.trunc), ("rmi", math.floor), ("rpi", math.ceil)])
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_cvt_round_to_integral_same_type(frnd, fn, t):
    vals = [0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 3.3, 1e20, -0.0, math.inf, 8388609.5, -7.5]
    got = alu(f"cvt.{frnd}.{t}.{t}").fn(np.array(vals, NP[t]))
    for v, g in zip([float(x) for x in np.array(vals, NP[t])], got):
        if fn is None:
            w = float(round(v)) if math.isfinite(v) else v         # Python round(): ties to even
        else:
            w = float(fn(v)) if math.isfinite(v) else v
        w = math.copysign(w, v) if w == 0 else w
        assert f64_bits(float(g)) == f64_bits(w), (v, g, w)
    assert math.isnan(alu(f"cvt.{frnd}.{t}.{t}").fn(np.array([math.nan], NP[t]))[0])


def test_cvt_rn_f16x2_f32_packs_a_high_b_low():
    op = alu("cvt.rn.f16x2.f32", nsrc=2)
    assert op.src_types == ("f32", "f32") and op.dst_types == ("f16x2",)
    r = op.fn(np.array([1.0, -2.0], np.float32), np.array([0.5, 65520.0], np.float32))
    assert r.tolist() == [(0x3C00 << 16) | 0x3800, (0xC000 << 16) | 0x7C00]
    rb = alu("cvt.rn.bf16x2.f32", nsrc=2).fn(np.float32(1.0), np.float32(-1.5))
    assert int(rb) == (0x3F80 << 16) | 0xBFC0
    rr = alu("cvt.rn.relu.f16x2.f32", nsrc=2).fn(np.float32(-1.0), np.float32(2.0))
    assert int(rr) == 0x4000


def test_cvt_relu_f16():
    r = alu("cvt.rn.relu.f16.f32").fn(np.array([-3.0, 2.0, math.nan, -0.0], np.float32)).view(np.uint16).tolist()
    assert r[0] == 0 and r[1] == 0x4000 and r[2] == 0x7FFF and r[3] in (0, 0x8000)


# ------------------------------------------------------------------------------------------------ half arithmetic

def rand_f16(rng, n):
    return rand_finite(rng, n, 16, 10, f16_from_bits)


def rand_bf16(rng, n):
    out = []
    for _ in range(n):
        u = rng.getrandbits(16)
        if (u >> 7) & 0xFF == 0xFF:
            u &= ~(1 << 14)
        out.append(bf16_from_bits(u))
    return out


def half_ref(op, xs, fmt, mode="rn"):
    if not all(math.isfinite(x) for x in xs):
        return None
    q = {"add": lambda a, b: F(a) + F(b), "sub": lambda a, b: F(a) - F(b), "mul": lambda a, b: F(a) * F(b),
         "fma": lambda a, b, c: F(a) * F(b) + F(c)}[op](*xs)
    if q == 0:
        return None          # zero signs are checked separately
    return round_frac(q, fmt, mode)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "fma"])
def test_f16_arith_random(op):
    rng = random.Random(seed(op))
    n = 2000
    cols = [rand_f16(rng, n) for _ in range(3 if op == "fma" else 2)]
    spec = f"{op}.rn.f16"
    got = alu(spec, nsrc=len(cols)).fn(*[np.array(c, np.float16) for c in cols])
    assert got.dtype == np.float16
    for i, g in enumerate(got):
        w = half_ref(op, [c[i] for c in cols], "f16")
        if w is not None:
            assert f16_bits(float(g)) == f16_bits(w), ([c[i] for c in cols], float(g), w)


@pytest.mark.parametrize("op", ["add", "mul", "fma"])
def test_bf16_arith_random(op):
    rng = random.Random(seed(op))
    n = 2000
    cols = [rand_bf16(rng, n) for _ in range(3 if op == "fma" else 2)]
    got = alu(f"{op}.rn.bf16", nsrc=len(cols)).fn(*[np.array([bf16_bits_of(v) for v in c], np.uint16) for c in cols])
    assert got.dtype == np.uint16
    for i, g in enumerate(got):
        w = half_ref(op, [c[i] for c in cols], "bf16")
        if w is not None:
            assert int(g) == bf16_bits_of(w), ([c[i] for c in cols], bf16_from_bits(int(g)), w)


def test_f16x2_fma_lanes_and_specials():
    def pack(lo, hi):
        return (f16_bits(hi) << 16) | f16_bits(lo)
    a = np.array([pack(1.5, -2.0), pack(65504.0, 1.0)], np.uint32)
    b = np.array([pack(2.0, 3.0), pack(2.0, 0.0)], np.uint32)
    c = np.array([pack(0.25, 1.0), pack(0.0, math.inf)], np.uint32)
    r = alu("fma.rn.f16x2", nsrc=3).fn(a, b, c).tolist()
    assert r[0] == pack(3.25, -5.0)
    assert r[1] == (0x7C00 << 16 | 0x7C00)      # lo overflows to inf, hi = 0*1+inf
    # (1+2^-5)(1+2^-6) = 1 + 2^-5 + 2^-6 + 2^-11: exactly an f16 midpoint; a tiny c decides the rounding
    x, y = np.float16(1 + 2.0 ** -5), np.float16(1 + 2.0 ** -6)
    base = f16_bits(1 + 2.0 ** -5 + 2.0 ** -6)
    fma = alu("fma.rn.f16", nsrc=3)
    assert f16_bits(float(fma.fn(x, y, np.float16(2.0 ** -24)))) == base + 1
    assert f16_bits(float(fma.fn(x, y, np.float16(-2.0 ** -24)))) == base
    assert base % 2 == 0 and f16_bits(float(fma.fn(x, y, np.float16(0.0)))) == base   # tie -> even


def test_half_neg_abs_min_max_setp():
    h = np.array([1.5, -0.0, math.nan, -3.0], np.float16)
    assert alu("neg.f16").fn(h).view(np.uint16).tolist()[:2] == [f16_bits(-1.5), 0]
    assert alu("abs.f16").fn(h).view(np.uint16).tolist()[3] == f16_bits(3.0)
    x = np.array([1.0, math.nan, -0.0], np.float16)
    y = np.array([2.0, 5.0, 0.0], np.float16)
    assert alu("min.f16", nsrc=2).fn(x, y).view(np.uint16).tolist() == [f16_bits(1.0), f16_bits(5.0), 0x8000]
    assert alu("max.f16", nsrc=2).fn(x, y).view(np.uint16).tolist() == [f16_bits(2.0), f16_bits(5.0), 0]
    assert alu("setp.gt.f16", nsrc=2).fn(x, y).tolist() == [False, False, False]
    bx = np.array([0x3F80, 0xFFC0], np.uint16)   # 1.0, NaN
    assert alu("neg.bf16").fn(bx).tolist() == [0xBF80, 0x7FC0]
    assert alu("setp.lt.bf16", nsrc=2).fn(bx, np.uint16(0x4000)).tolist() == [True, False]


def test_half_sat_ftz():
    r = alu("add.rn.sat.f16", nsrc=2).fn(np.array([0.75, math.nan, -1.0], np.float16), np.float16(0.5))
    assert r.view(np.uint16).tolist() == [f16_bits(1.0), 0, 0]
    sub = f16_from_bits(0x0003)
    r = alu("mul.rn.ftz.f16", nsrc=2).fn(np.array([sub, 2.0 ** -10], np.float16), np.float16(2.0 ** -5))
    assert r.view(np.uint16).tolist() == [0, 0]


def test_half_ex2_tanh_approx():
    xs = [-3.0, -0.5, 0.0, 0.75, 4.0, 15.5, 16.0]
    got = alu("ex2.approx.f16").fn(np.array(xs, np.float16))
    for x, g in zip(xs, got.tolist()):
        w = 2.0 ** x
        assert (w > 65504 and g == math.inf) or abs(g - w) <= float(np.spacing(np.float16(w)))
    th = alu("tanh.approx.bf16").fn(np.array([bf16_bits_of(v) for v in (0.5, -2.0, 0.0)], np.uint16))
    assert [bf16_from_bits(int(v)) for v in th] == [round_frac(F(math.tanh(v)), "bf16") if v else 0.0
                                                    for v in (0.5, -2.0, 0.0)]
