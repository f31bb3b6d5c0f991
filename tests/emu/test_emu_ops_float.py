"""emu/ops: f32/f64 arithmetic, comparisons and selection. Expected values are exact rationals
(fractions.Fraction) rounded by the reference in test_emu_ops_ref.py, IEEE 754 special-value rules written out
here, and Python's math module for the .approx functions (with the ulp bounds the ops docstring states)."""
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
from test_emu_ops_ref import f32_bits, f32_from_bits, f64_bits, max_finite, round_frac

MODES = ["rn", "rz", "rm", "rp"]
NPT = {"f32": np.float32, "f64": np.float64}


def seed(key) -> int:
    """A per-case seed that does not depend on PYTHONHASHSEED."""
    return zlib.crc32(repr(key).encode())


def alu(spec, ndst=1, line=1):
    parts = spec.split(".")
    return build_alu(ir.Instr(parts[0], tuple(parts[1:]), [ir.Reg(f"%d{i}") for i in range(ndst)],
                              [ir.Reg("%a"), ir.Reg("%b"), ir.Reg("%c")], line=line))


def rand_vals(fmt, n, rng):
    """Finite values of fmt: random bit patterns (subnormals and huge values included), moderate values and a
    few exact specials."""
    out = []
    for _ in range(n):
        k = rng.random()
        if fmt == "f32":
            if k < 0.4:
                u = rng.getrandbits(32)
                if (u >> 23) & 0xFF == 0xFF:
                    u &= ~(1 << 30)
                out.append(f32_from_bits(u))
            elif k < 0.9:
                out.append(float(np.float32(rng.uniform(-1, 1) * 2.0 ** rng.randint(-30, 30))))
            else:
                out.append(rng.choice([0.0, -0.0, 1.0, -1.0, 3.0, 2.0 ** -149, -2.0 ** -126, float(max_finite("f32"))]))
        else:
            if k < 0.4:
                u = rng.getrandbits(64)
                if (u >> 52) & 0x7FF == 0x7FF:
                    u &= ~(1 << 62)
                out.append(struct.unpack("<d", struct.pack("<Q", u))[0])
            elif k < 0.9:
                out.append(rng.uniform(-1, 1) * 2.0 ** rng.randint(-60, 60))
            else:
                out.append(rng.choice([0.0, -0.0, 1.0, -1.0, 5e-324, -2.2250738585072014e-308]))
    return out


def same(got, want):
    """Bitwise equality, NaN matching any NaN."""
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return f64_bits(float(got)) == f64_bits(float(want))


def zero_sum_sign(sx_neg, sy_neg, mode):
    if sx_neg and sy_neg:
        return -0.0
    if not sx_neg and not sy_neg:
        return -0.0 if False else 0.0
    return -0.0 if mode == "rm" else 0.0


def ref_add(x, y, fmt, mode):
    if not (math.isfinite(x) and math.isfinite(y)):
        return x + y
    q = F(x) + F(y)
    if q == 0:
        if x == 0 and y == 0:
            return zero_sum_sign(math.copysign(1, x) < 0, math.copysign(1, y) < 0, mode)
        return -0.0 if mode == "rm" else 0.0
    return round_frac(q, fmt, mode)


def ref_mul(x, y, fmt, mode):
    if not (math.isfinite(x) and math.isfinite(y)):
        return x * y
    q = F(x) * F(y)
    if q == 0:
        return math.copysign(0.0, math.copysign(1, x) * math.copysign(1, y))
    r = round_frac(q, fmt, mode)
    return r


def ref_div(x, y, fmt, mode):
    if math.isnan(x) or math.isnan(y) or (x == 0 and y == 0) or (math.isinf(x) and math.isinf(y)):
        return math.nan
    s = math.copysign(1, x) * math.copysign(1, y)
    if y == 0 or math.isinf(x):
        return math.copysign(math.inf, s)
    if math.isinf(y) or x == 0:
        return math.copysign(0.0, s)
    return round_frac(F(x) / F(y), fmt, mode)


def ref_fma(x, y, z, fmt, mode):
    if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
        return float(np.float64(x) * np.float64(y) + np.float64(z))
    p = F(x) * F(y)
    q = p + F(z)
    if q == 0:
        pneg = (math.copysign(1, x) * math.copysign(1, y)) < 0
        if p == 0 and z == 0:
            return zero_sum_sign(pneg, math.copysign(1, z) < 0, mode)
        return -0.0 if mode == "rm" else 0.0
    return round_frac(q, fmt, mode)


def canon(vals, fmt):
    """The values as the format actually holds them."""
    return np.array(vals, NPT[fmt]).tolist()


def run(op, fmt, *cols):
    args = [np.array(c, NPT[fmt]) for c in cols]
    with np.errstate(all="raise"):   # ops must not depend on the caller's error state
        return op.fn(*args)


@pytest.mark.parametrize("fmt", ["f32", "f64"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("opc", ["add", "sub", "mul", "div"])
def test_basic_arith_all_rounding_modes(opc, mode, fmt):
    rng = random.Random(seed((opc, mode, fmt)))
    n = 1500
    a, b = rand_vals(fmt, n, rng), rand_vals(fmt, n, rng)
    # near-cancellation and exact-halfway material
    a += [1.0, 1.0, -0.0, 0.0, -0.0, 2.0 ** -149, 1e30]
    b += [-1.0, 2.0 ** -30, 0.0, -0.0, -0.0, 2.0 ** -149, 1e30]
    a, b = canon(a, fmt), canon(b, fmt)
    got = run(alu(f"{opc}.{mode}.{fmt}"), fmt, a, b)
    bad = []
    for x, y, g in zip(a, b, got):
        if opc == "add":
            w = ref_add(x, y, fmt, mode)
        elif opc == "sub":
            w = ref_add(x, -y, fmt, mode)
        elif opc == "mul":
            w = ref_mul(x, y, fmt, mode)
        else:
            w = ref_div(x, y, fmt, mode)
        if not same(g, w):
            bad.append((x, y, float(g), w))
    assert not bad, bad[:5]


def test_default_rounding_is_rn():
    a = np.array([1.0, 3.0], np.float32)
    b = np.array([2.0 ** -24, 2.0 ** -22 * 1.5], np.float32)
    assert alu("add.f32").fn(a, b).tolist() == alu("add.rn.f32").fn(a, b).tolist() == [1.0, 3.0 + 2.0 ** -21]


@pytest.mark.parametrize("mode", MODES)
def test_fma_f32_all_modes_random(mode):
    rng = random.Random(7 + MODES.index(mode))
    n = 3000
    a, b, c = (rand_vals("f32", n, rng) for _ in range(3))
    # products that cancel c, and the classic double-rounding trap (f64 sum lands on an f32 midpoint)
    t = 1 + 2.0 ** -12
    a += [t, t, t, 3.0, -1.5]
    b += [t, t, t, 1 / 3.0, 2.0]
    c += [2.0 ** -80, -2.0 ** -80, 0.0, -1.0, 3.0]
    a, b, c = canon(a, "f32"), canon(b, "f32"), canon(c, "f32")
    got = run(alu(f"fma.{mode}.f32"), "f32", a, b, c)
    bad = [(x, y, z, float(g), ref_fma(x, y, z, "f32", mode)) for x, y, z, g in zip(a, b, c, got)
           if not same(g, ref_fma(x, y, z, "f32", mode))]
    assert not bad, bad[:5]


def test_fma_rn_f32_double_rounding_case_explicit():
    t = np.float32(1 + 2.0 ** -12)
    # exact: 1 + 2^-11 + 2^-24 + 2^-80 (just above an f32 midpoint) -> rounds up
    up = alu("fma.rn.f32").fn(np.array([t]), np.array([t]), np.array([2.0 ** -80], np.float32))[0]
    assert f32_bits(float(up)) == f32_bits(1 + 2.0 ** -11) + 1
    down = alu("fma.rn.f32").fn(np.array([t]), np.array([t]), np.array([-2.0 ** -80], np.float32))[0]
    assert f32_bits(float(down)) == f32_bits(1 + 2.0 ** -11)


@pytest.mark.parametrize("mode", MODES)
def test_fma_f64_random(mode):
    rng = random.Random(70 + MODES.index(mode))
    n = 2000
    a, b, c = rand_vals("f64", n, rng), rand_vals("f64", n, rng), rand_vals("f64", n, rng)
    # the whole range: huge operands, products that overflow or underflow (to zero, too), subnormals
    a += [1e300, -1e300, 2.0 ** 1000, 1e-200, -2.2250738585072014e-308, 9.1e-297]
    b += [1e10, 1e10, 2.0 ** 30, 1e-200, -2.76e-17, -1.8e-91]
    c += [-1.7e308, 1.7e308, -1.0, 1e-320, 4.4e139, 0.0]
    # heavy cancellation: c = -(a*b) rounded, so the result is the product's rounding error
    for _ in range(300):
        x, y = rng.uniform(1, 2), rng.uniform(1, 2)
        a.append(x)
        b.append(y)
        c.append(-(x * y))
    t = 1 + 2.0 ** -27
    a += [t, t]
    b += [t, t]
    c += [2.0 ** -200, -2.0 ** -200]
    got = run(alu(f"fma.{mode}.f64"), "f64", a, b, c)
    bad = [(x, y, z, float(g)) for x, y, z, g in zip(a, b, c, got) if not same(g, ref_fma(x, y, z, "f64", mode))]
    assert not bad, bad[:5]


def test_expf_magic_number_pattern():
    """expf: t = cvt.sat.f32.f32(x * log2e/...), then fma.rm.f32 t, 252, 0f4B400001: a round-down whose low bits
    become the exponent field."""
    rng = random.Random(3)
    xs = [rng.uniform(-2, 2) for _ in range(2000)] + [math.nan, -0.0, 0.0, 1.0, 5.0, -5.0, 0.5]
    xs32 = np.array(xs, np.float32)
    satv = alu("cvt.sat.f32.f32").fn(xs32)
    magic = f32_from_bits(0x4B400001)
    got = alu("fma.rm.f32").fn(satv, np.float32(252.0), np.float32(magic))
    for x, s, g in zip(xs32.tolist(), satv.tolist(), got.tolist()):
        ws = 0.0 if math.isnan(x) else min(max(x, 0.0), 1.0)
        assert f64_bits(s) == f64_bits(ws + 0.0), (x, s)
        assert g == round_frac(F(ws) * 252 + F(magic), "f32", "rm"), (x, s, g)


def test_add_rz_roundf_pattern():
    # roundf adds 0.5 with .rz then truncates: 0.49999997 + 0.5 must stay below 1
    x = np.float32(0.49999997)
    r = alu("add.rz.f32").fn(np.array([x]), np.float32(0.5))[0]
    assert r < 1.0 and r == round_frac(F(float(x)) + F(1, 2), "f32", "rz")
    assert alu("add.rn.f32").fn(np.array([x]), np.float32(0.5))[0] == 1.0


def test_directed_overflow_clamps():
    big = np.array([3e38, -3e38], np.float32)
    mx = float(max_finite("f32"))
    assert alu("add.rz.f32").fn(big, big).tolist() == [mx, -mx]
    assert alu("add.rm.f32").fn(big, big).tolist() == [mx, -math.inf]
    assert alu("add.rp.f32").fn(big, big).tolist() == [math.inf, -mx]
    assert alu("mul.rn.f32").fn(big, big).tolist() == [math.inf, math.inf]
    assert alu("mul.rz.f32").fn(big, big).tolist() == [mx, mx]


def test_specials_inf_nan_zero():
    inf, nan = math.inf, math.nan
    a = np.array([inf, inf, 0.0, -0.0, nan, 1.0], np.float32)
    b = np.array([-inf, 1.0, -0.0, -0.0, 1.0, -1.0], np.float32)
    r = alu("add.f32").fn(a, b)
    assert math.isnan(r[0]) and r[1] == inf and math.isnan(r[4])
    assert f32_bits(float(r[2])) == 0 and f32_bits(float(r[3])) == 0x80000000 and f32_bits(float(r[5])) == 0
    rm = alu("add.rm.f32").fn(a, b)
    assert f32_bits(float(rm[2])) == 0x80000000 and f32_bits(float(rm[5])) == 0x80000000
    m = alu("mul.f32").fn(np.array([inf, -0.0], np.float32), np.array([0.0, 5.0], np.float32))
    assert math.isnan(m[0]) and f32_bits(float(m[1])) == 0x80000000
    d = alu("div.rn.f32").fn(np.array([1.0, -1.0, 0.0], np.float32), np.array([0.0, 0.0, 0.0], np.float32))
    assert d[0] == inf and d[1] == -inf and math.isnan(d[2])


def test_ftz_and_sat():
    sub = 2.0 ** -130
    a = np.array([sub, -sub, 1.0, 2.0 ** -100], np.float32)
    b = np.array([0.0, -0.0, -1.0, 2.0 ** -40], np.float32)
    r = alu("add.ftz.f32").fn(a, b)
    assert [f32_bits(float(v)) for v in r[:2]] == [0, 0x80000000]
    # subnormal result flushed, sign kept
    m = alu("mul.ftz.f32").fn(np.array([2.0 ** -100, -2.0 ** -100], np.float32), np.float32(2.0 ** -40))
    assert [f32_bits(float(v)) for v in m] == [0, 0x80000000]
    assert alu("mul.f32").fn(np.array([2.0 ** -100], np.float32), np.float32(2.0 ** -40))[0] == 2.0 ** -140
    s = alu("add.sat.f32").fn(np.array([math.nan, 2.0, -3.0, -0.0, 0.25], np.float32), np.float32(0.0))
    assert [f32_bits(float(v)) for v in s] == [0, f32_bits(1.0), 0, 0, f32_bits(0.25)]
    f = alu("fma.rn.ftz.f32").fn(np.array([sub], np.float32), np.float32(2.0 ** 100), np.float32(1.0))
    assert f[0] == 1.0   # subnormal input flushed before the multiply


def test_div_approx_full_rcp_sqrt():
    rng = random.Random(11)
    xs = [v for v in rand_vals("f32", 2000, rng) if v != 0 and abs(v) > 1e-37 and abs(v) < 1e37]
    X = np.array(xs, np.float32)
    for mode in MODES:
        r = alu(f"rcp.{mode}.f32").fn(X)
        assert all(same(g, round_frac(1 / F(x), "f32", mode)) for x, g in zip(xs, r.tolist())), mode
        s = alu(f"sqrt.{mode}.f32").fn(np.abs(X))
        assert all(same(g, ref_sqrt(abs(x), "f32", mode)) for x, g in zip(xs, s.tolist())), mode
    for spec in ("div.approx.f32", "div.full.f32", "div.approx.ftz.f32"):
        q = alu(spec).fn(X, np.float32(3.0))
        assert all(abs(g - x / 3) <= 2 * float(np.spacing(np.float32(abs(x / 3)))) for x, g in zip(xs, q.tolist()))
    X64 = np.array(rand_vals("f64", 500, rng), np.float64)
    X64 = X64[(X64 != 0) & (np.abs(X64) < 1e300) & (np.abs(X64) > 1e-300)]
    r = alu("rcp.rn.f64").fn(X64)
    assert all(same(g, round_frac(1 / F(float(x)), "f64", "rn")) for x, g in zip(X64.tolist(), r.tolist()))
    for op, f in (("rcp", lambda x: 1 / x), ("rsqrt", lambda x: 1 / np.sqrt(x))):
        # the ISA's "gross approximation": the operand's upper word (20 mantissa bits), a zero lower word
        xs = np.abs(X64) if op == "rsqrt" else X64
        r = alu(f"{op}.approx.ftz.f64").fn(xs)
        assert not (r.view(np.uint64) & np.uint64(0xFFFFFFFF)).any(), op
        assert np.all(np.abs(r - f(xs)) <= np.abs(f(xs)) * 2.0 ** -19), op
        sp = alu(f"{op}.approx.ftz.f64").fn(np.array([-math.inf, -1e-310, -0.0, 0.0, 1e-310, math.inf, math.nan]))
        want = [-0.0, -math.inf, -math.inf, math.inf, math.inf, 0.0] if op == "rcp" else \
            [None, -math.inf, -math.inf, math.inf, math.inf, 0.0]
        for g, w in zip(sp.tolist(), want):
            assert w is None or (g == w and math.copysign(1, g) == math.copysign(1, w)), (op, sp)
        nans = sp.view(np.uint64)[[0, 6] if op == "rsqrt" else [6]]
        assert (nans == np.uint64(0x7FFFFFFF00000000)).all(), op      # the canonical NaN of the ISA
    s = alu("sqrt.rn.f64").fn(np.abs(X64))
    assert all(same(g, ref_sqrt(abs(x), "f64", "rn")) for x, g in zip(X64.tolist(), s.tolist()))
    sp = alu("sqrt.rn.f32").fn(np.array([-1.0, -0.0, math.inf], np.float32))
    assert math.isnan(sp[0]) and f32_bits(float(sp[1])) == 0x80000000 and sp[2] == math.inf


def ref_sqrt(x, fmt, mode):
    if x == 0:
        return x
    q = F(x)
    lg = q.numerator.bit_length() - q.denominator.bit_length()
    k = max(0, (240 - lg) // 2 + 1)     # at least ~120 significant bits of the root
    n = q.numerator * 4 ** k // q.denominator
    s = math.isqrt(n)
    exact = s * s == n and q.numerator * 4 ** k % q.denominator == 0
    v = F(s, 2 ** k)
    if not exact:
        v += F(1, 2 ** (k + 1))   # strictly between s and s+1: keeps the rounding direction
    return round_frac(v, fmt, mode)


def ulp_err(got, want, fmt="f32"):
    if want == 0:
        return abs(got)
    return abs(float(got) - want) / float(np.spacing(np.float32(abs(want))))


def test_approx_functions_within_bounds():
    rng = random.Random(5)
    xs = np.array([rng.uniform(-20, 20) for _ in range(2000)], np.float32)
    e = alu("ex2.approx.ftz.f32").fn(xs)
    assert max(ulp_err(g, 2.0 ** float(x)) for x, g in zip(xs, e)) <= 2
    e2 = alu("ex2.approx.f32").fn(np.array([-math.inf, math.inf, 0.0, -200.0], np.float32))
    assert e2.tolist()[:3] == [0.0, math.inf, 1.0] and e2[3] == np.float32(2.0 ** -200)
    assert alu("ex2.approx.ftz.f32").fn(np.array([-140.0], np.float32))[0] == 0.0   # subnormal result flushed
    pos = np.abs(xs) + np.float32(1e-3)
    lg = alu("lg2.approx.ftz.f32").fn(pos)
    assert max(abs(g - math.log2(float(x))) for x, g in zip(pos, lg)) <= 2.0 ** -22.6 * 4
    lg0 = alu("lg2.approx.ftz.f32").fn(np.array([0.0, -1.0, 2.0 ** -130], np.float32))
    assert lg0[0] == -math.inf and math.isnan(lg0[1]) and lg0[2] == -math.inf
    ang = np.array([rng.uniform(-math.pi, math.pi) for _ in range(1000)], np.float32)
    assert max(abs(g - math.sin(float(x))) for x, g in zip(ang, alu("sin.approx.ftz.f32").fn(ang))) <= 2.0 ** -20.5
    assert max(abs(g - math.cos(float(x))) for x, g in zip(ang, alu("cos.approx.f32").fn(ang))) <= 2.0 ** -20.5
    th = alu("tanh.approx.f32").fn(xs)
    assert max(abs(g - math.tanh(float(x))) / max(abs(math.tanh(float(x))), 1e-30) for x, g in zip(xs, th)) <= 2.0 ** -10.9
    rs = alu("rsqrt.approx.f32").fn(pos)
    assert max(ulp_err(g, 1 / math.sqrt(float(x))) for x, g in zip(pos, rs)) <= 2


def test_min_max_nan_and_signed_zero():
    nan = math.nan
    a = np.array([nan, 1.0, nan, -0.0, 0.0, -3.0], np.float32)
    b = np.array([2.0, nan, nan, 0.0, -0.0, 4.0], np.float32)
    mn = alu("min.f32").fn(a, b)
    mx = alu("max.f32").fn(a, b)
    assert mn[0] == 2.0 and mn[1] == 1.0 and f32_bits(float(mn[2])) == 0x7FFFFFFF
    assert f32_bits(float(mn[3])) == 0x80000000 and f32_bits(float(mn[4])) == 0x80000000 and mn[5] == -3.0
    assert mx[0] == 2.0 and mx[1] == 1.0 and f32_bits(float(mx[2])) == 0x7FFFFFFF
    assert f32_bits(float(mx[3])) == 0 and f32_bits(float(mx[4])) == 0 and mx[5] == 4.0
    nn = alu("min.NaN.f32").fn(a, b)
    assert [f32_bits(float(v)) for v in nn[:3]] == [0x7FFFFFFF] * 3
    d = alu("max.f64").fn(np.array([nan, -1.0]), np.array([-7.0, nan]))
    assert d.tolist() == [-7.0, -1.0]


def test_abs_neg_copysign_testp():
    a = np.array([-0.0, 1.5, -math.inf, f32_from_bits(0xFFC00001)], np.float32)
    # f32: a NaN comes back as the canonical NaN, as from the GPU's add; f64: the NaN quieted, its sign unchanged (an
    # H100: -x of 0x7FF8000000000000 and 0x7FF0000000000001, |x| of the latter; ptxas: DADD -RZ, -x / |x|)
    assert [f32_bits(float(v)) for v in alu("abs.f32").fn(a)] == [0, f32_bits(1.5), 0x7F800000, 0x7FFFFFFF]
    assert [f32_bits(float(v)) for v in alu("neg.f32").fn(a)] == [0, f32_bits(-1.5), 0x7F800000, 0x7FFFFFFF]
    d = np.array([0xBFF0000000000000, 0xFFF0000000000001, 0x7FF8000000000000, 0x7FF0000000000001],
                 np.uint64).view(np.float64)       # -1.0 and three NaNs
    assert alu("abs.f64").fn(d).view(np.uint64).tolist() == [0x3FF0000000000000, 0xFFF8000000000001,
                                                             0x7FF8000000000000, 0x7FF8000000000001]
    assert alu("neg.f64").fn(d).view(np.uint64).tolist() == [0x3FF0000000000000, 0xFFF8000000000001,
                                                             0x7FF8000000000000, 0x7FF8000000000001]
    # copysign.f32 d, a, b: the sign comes from a, the magnitude from b
    cs = alu("copysign.f32").fn(np.array([-1.0, 1.0, -0.0], np.float32), np.array([2.0, -3.0, 5.0], np.float32))
    assert cs.tolist() == [-2.0, 3.0, -5.0]
    v = np.array([0.0, 2.0 ** -130, 1.0, math.inf, math.nan], np.float32)
    exp = {"finite": [1, 1, 1, 0, 0], "infinite": [0, 0, 0, 1, 0], "number": [1, 1, 1, 1, 0],
           "notanumber": [0, 0, 0, 0, 1], "normal": [0, 0, 1, 0, 0], "subnormal": [0, 1, 0, 0, 0]}
    for k, want in exp.items():
        assert alu(f"testp.{k}.f32").fn(v).astype(int).tolist() == want, k


# ------------------------------------------------------------------------------------------------ setp / set / selp

def cmp_ref(op, x, y):
    un = math.isnan(x) or math.isnan(y)
    base = {"eq": x == y, "ne": x != y and not un, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}
    if op in base:
        return base[op] and not un
    if op in ("equ", "neu", "ltu", "leu", "gtu", "geu"):
        return un or {"equ": x == y, "neu": x != y, "ltu": x < y, "leu": x <= y, "gtu": x > y, "geu": x >= y}[op]
    if op == "num":
        return not un
    return un


FCMP = ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"]
PAIRS = [(1.0, 2.0), (2.0, 1.0), (1.0, 1.0), (math.nan, 1.0), (1.0, math.nan), (math.nan, math.nan),
         (-0.0, 0.0), (math.inf, math.inf), (-math.inf, 3.0)]


@pytest.mark.parametrize("fmt", ["f32", "f64", "f16"])
@pytest.mark.parametrize("op", FCMP)
def test_setp_float_all_comparisons(op, fmt):
    dt = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[fmt]
    a = np.array([p[0] for p in PAIRS], dt)
    b = np.array([p[1] for p in PAIRS], dt)
    want = [cmp_ref(op, x, y) for x, y in PAIRS]
    got = alu(f"setp.{op}.{fmt}").fn(a, b)
    assert got.dtype == np.bool_ and got.tolist() == want
    p, q = alu(f"setp.{op}.{fmt}", ndst=2).fn(a, b)
    assert p.tolist() == want and q.tolist() == [not w for w in want]


def test_setp_int_and_boolops():
    a = np.array([-1, 0, 5], np.int32)
    b = np.array([0, 0, 3], np.int32)
    assert alu("setp.lt.s32").fn(a, b).tolist() == [True, False, False]
    ua, ub = a.view(np.uint32), b.view(np.uint32)
    assert alu("setp.lt.u32").fn(ua, ub).tolist() == [False, False, False]
    assert alu("setp.hi.u32").fn(ua, ub).tolist() == [True, False, True]
    c = np.array([True, False, True])
    op = alu("setp.ge.and.s32", ndst=2)
    assert op.src_types == ("s32", "s32", "pred")
    p, q = op.fn(a, b, c)
    assert p.tolist() == [False, False, True] and q.tolist() == [True, False, False]
    assert alu("setp.eq.or.s32").fn(a, b, c).tolist() == [True, True, True]
    assert alu("setp.eq.xor.s32").fn(a, b, c).tolist() == [True, True, True]
    assert alu("setp.ne.s16").fn(np.array([1, 2], np.int16), np.int16(2)).tolist() == [True, False]


def test_setp_ftz():
    sub = np.float32(2.0 ** -130)
    assert alu("setp.eq.ftz.f32").fn(np.array([sub]), np.float32(0.0)).tolist() == [True]
    assert alu("setp.eq.f32").fn(np.array([sub]), np.float32(0.0)).tolist() == [False]


def test_set_forms():
    a = np.array([1.0, 2.0, math.nan], np.float16)
    b = np.array([1.0, 3.0, math.nan], np.float16)
    r = alu("set.eq.f16.f16").fn(a, b)
    assert r.dtype == np.float16 and r.view(np.uint16).tolist() == [0x3C00, 0, 0]
    r = alu("set.lt.u32.f32").fn(np.array([1.0, 2.0], np.float32), np.float32(1.5))
    assert r.tolist() == [0xFFFFFFFF, 0]
    r = alu("set.lt.f32.s32").fn(np.array([1, 2], np.int32), np.int32(2))
    assert r.tolist() == [1.0, 0.0]
    r = alu("set.gtu.s32.f64").fn(np.array([math.nan, 0.0]), np.float64(1.0))
    assert r.tolist() == [-1, 0]
    # f16x2: per 16-bit half
    lo = np.float16(1.0).view(np.uint16)
    hi = np.float16(5.0).view(np.uint16)
    x = np.array([int(lo) | int(hi) << 16], np.uint32)
    y = np.array([int(lo) | int(lo) << 16], np.uint32)
    assert alu("set.eq.u32.f16x2").fn(x, y).tolist() == [0x0000FFFF]
    assert alu("set.eq.f16x2.f16x2").fn(x, y).tolist() == [0x3C00]
    p, q = alu("setp.gt.f16x2", ndst=2).fn(x, y)
    assert p.tolist() == [False] and q.tolist() == [True]


def test_selp():
    c = np.array([True, False])
    assert alu("selp.f32").fn(np.float32(1.5), np.array([2.5, 3.5], np.float32), c).tolist() == [1.5, 3.5]
    r = alu("selp.u16").fn(np.uint16(1), np.uint16(0), c)
    assert r.dtype == np.uint16 and r.tolist() == [1, 0]
    r = alu("selp.b64").fn(np.array([2**64 - 1] * 2, np.uint64), np.array([5, 6], np.uint64), c)
    assert r.tolist() == [2**64 - 1, 6]


def test_fma_rn_f32_double_rounding_in_subnormal_range():
    # exact = 2^-127 + 2^-149 + 2^-150 - 2^-196: just below an f32-subnormal midpoint. RN64 of the sum lands on
    # the midpoint, and ties-to-even from there would round up; the correct result rounds down.
    a = np.float32(2.0 ** -75 * (1 + 2.0 ** -23))
    b = np.float32(2.0 ** -75 * (1 - 2.0 ** -23))
    c = np.float32(2.0 ** -127 + 2.0 ** -149)
    want = round_frac(F(float(a)) * F(float(b)) + F(float(c)), "f32", "rn")
    assert want == 2.0 ** -127 + 2.0 ** -149
    got = alu("fma.rn.f32").fn(np.array([a, a]), np.array([b, b]), np.array([c, c]))
    assert got.tolist() == [want, want]
    assert float(alu("fma.rn.f32").fn(a, b, c)) == want          # scalar operands too


def test_fma_rn_f32_with_immediate_operands_broadcasts():
    t = np.float32(1 + 2.0 ** -12)
    got = alu("fma.rn.f32").fn(np.array([t, t, np.float32(2.0)]), t, np.float32(2.0 ** -80))
    want_mid = f32_from_bits(f32_bits(1 + 2.0 ** -11) + 1)
    assert got.tolist() == [want_mid, want_mid, round_frac(F(2) * F(float(t)) + F(2) ** -80, "f32", "rn")]
    got = alu("fma.rm.f32").fn(np.array([t, -t]), t, np.float32(-2.0 ** -80))
    assert got.tolist() == [round_frac(F(float(t)) ** 2 - F(2) ** -80, "f32", "rm"),
                            round_frac(-F(float(t)) ** 2 - F(2) ** -80, "f32", "rm")]


@pytest.mark.parametrize("fmt", ["f32", "f64"])
@pytest.mark.parametrize("mode", MODES)
def test_sqrt_rcp_directed_full_range(fmt, mode):
    rng = random.Random(900 + MODES.index(mode) + (fmt == "f64") * 10)
    xs = [abs(v) for v in rand_vals(fmt, 1500, rng)]
    xs += [0.0, -0.0, 2.0 ** -149 if fmt == "f32" else 5e-324, 4.0, 2.0]
    xs = canon(xs, fmt)
    s = run(alu(f"sqrt.{mode}.{fmt}"), fmt, xs)
    bad = [(x, float(g)) for x, g in zip(xs, s) if not same(g, ref_sqrt(x, fmt, mode))]
    assert not bad, bad[:5]
    nz = [x for x in xs if x != 0]
    r = run(alu(f"rcp.{mode}.{fmt}"), fmt, nz)
    bad = [(x, float(g)) for x, g in zip(nz, r) if not same(g, round_frac(1 / F(x), fmt, mode))]
    assert not bad, bad[:5]


def test_fma_rn_f32_integer_valued_data_and_midpoints():
    """Many exact results (integer-valued data) take the vectorised candidate path; midpoint traps mixed in."""
    rng = random.Random(77)
    n = 4000
    a = [float(rng.randint(-1000, 1000)) for _ in range(n)]
    b = [float(rng.randint(-1000, 1000)) for _ in range(n)]
    c = [float(rng.randint(-10**6, 10**6)) for _ in range(n)]
    t = float(np.float32(1 + 2.0 ** -12))
    for i in range(0, n, 97):
        a[i], b[i], c[i] = t, t, rng.choice([2.0 ** -80, -2.0 ** -80])
    # (2^12+1)^2 = 2^24 + 2^13 + 1: an odd integer above 2^24, i.e. an f32 midpoint; c = -+2^-40 decides
    m = float(2 ** 12 + 1)
    a += [m, m]
    b += [m, m]
    c += [2.0 ** -40, -2.0 ** -40]
    got = run(alu("fma.rn.f32"), "f32", a, b, c)
    bad = [(x, y, z, float(g)) for x, y, z, g in zip(a, b, c, got) if not same(g, ref_fma(x, y, z, "f32", "rn"))]
    assert not bad, bad[:5]


@pytest.mark.parametrize("spec", ["fma.rn.f32", "fma.rm.f32", "fma.rn.f64", "fma.rz.f64", "add.rp.f32",
                                  "div.rz.f64", "sqrt.rm.f32"])
def test_large_vectors_processed_in_chunks_match_reference(spec):
    """Launch-sized vectors (the multi-pass fns work on cache-sized slices): trap values placed at slice
    boundaries and a random sample are checked against the exact reference."""
    fmt = spec.split(".")[-1]
    dt = NPT[fmt]
    n = 200_003
    rng = np.random.default_rng(5)
    cols = [rng.standard_normal(n).astype(dt) for _ in range(3)]
    if spec.startswith("sqrt"):
        cols[0] = np.abs(cols[0])
    t = dt(1 + 2.0 ** -12) if fmt == "f32" else dt(1 + 2.0 ** -27)
    tiny = dt(2.0 ** -80) if fmt == "f32" else dt(2.0 ** -200)
    traps = [0, 1, 16383, 16384, 32767, 32768, 65535, 65536, 131072, n - 1]
    for i in traps:
        cols[0][i], cols[1][i], cols[2][i] = t, t, tiny if i % 2 else -tiny
    op = alu(spec)
    k = len(op.src_types)
    with np.errstate(all="raise"):
        got = op.fn(*cols[:k])
    assert got.shape == (n,) and got.dtype == dt
    mode = spec.split(".")[1]
    check = traps + rng.integers(0, n, 300).tolist()
    for i in check:
        x = [float(cols[j][i]) for j in range(k)]
        if spec.startswith("fma"):
            w = ref_fma(*x, fmt, mode)
        elif spec.startswith("add"):
            w = ref_add(x[0], x[1], fmt, mode)
        elif spec.startswith("div"):
            w = ref_div(x[0], x[1], fmt, mode)
        else:
            w = ref_sqrt(x[0], fmt, mode)
        assert same(got[i], w), (i, x, float(got[i]), w)


def test_ex2_lg2_approx_are_correctly_rounded_but_for_rare_lanes():
    """ex2/lg2.approx.f32 are computed in double precision (ops/floating.ex2_f32, lg2_f32): against float64 references
    (~1e-16 relative) every lane is within 1 ulp and all but a handful of 20000 are the correctly rounded value;
    NaN, infinities, zeros and negative inputs follow the ISA."""
    rng = np.random.default_rng(11)
    xs = np.concatenate([rng.uniform(-149, 128, 10000), rng.uniform(-2, 2, 10000)]).astype(np.float32)
    got = alu("ex2.approx.f32").fn(xs)
    want = np.exp2(xs.astype(np.float64))
    err = np.abs(got.astype(np.float64) - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    assert err[np.isfinite(want) & (want < 3e38)].max() <= 1.0
    assert (got != want.astype(np.float32)).sum() <= 5
    pos = np.abs(rng.standard_normal(20000) * 10.0 ** rng.uniform(-40, 38, 20000)).astype(np.float32)
    pos = pos[pos > 0]
    lg = alu("lg2.approx.f32").fn(pos)
    want = np.log2(pos.astype(np.float64))
    assert (lg != want.astype(np.float32)).sum() <= 5
    assert np.abs(lg - want).max() <= np.spacing(np.float32(128))
    lg = alu("lg2.approx.f32").fn(np.array([np.nan, -1.0, -np.inf, -0.0, 0.0, np.inf, 2.0 ** -149, 1.0], np.float32))
    assert lg[:3].view(np.uint32).tolist() == [0x7FFFFFFF] * 3                  # canonical NaN
    assert lg[3:].tolist() == [-math.inf, -math.inf, math.inf, -149.0, 0.0]
    e = alu("ex2.approx.f32").fn(np.array([np.nan, -np.inf, np.inf, 128.0, -149.0, -150.5, 0.0], np.float32))
    assert e.view(np.uint32)[0] == 0x7FFFFFFF
    assert e.tolist()[1:] == [0.0, math.inf, math.inf, 2.0 ** -149, 0.0, 1.0]
