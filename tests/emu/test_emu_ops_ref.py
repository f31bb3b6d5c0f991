"""Independent reference arithmetic for the emulator's instruction tests: exact rationals (fractions.Fraction)
rounded to IEEE binary formats by the textbook rule, and bit-pattern helpers (struct). Nothing here uses the
code under test."""
from __future__ import annotations

import math
import struct
from fractions import Fraction

# (precision p incl. hidden bit, emin, emax)
FORMATS = {"f64": (53, -1022, 1023), "f32": (24, -126, 127), "f16": (11, -14, 15), "bf16": (8, -126, 127)}


def max_finite(fmt):
    p, emin, emax = FORMATS[fmt]
    return Fraction(2 ** p - 1, 1) * Fraction(2) ** (emax - p + 1)


def round_frac(q: Fraction, fmt: str, mode: str = "rn") -> float:
    """Correctly round the exact rational q to fmt with mode rn/rz/rm/rp. Returns a Python float (every value of
    these formats is a float64) or +-inf. A zero result carries q's sign (callers handle exact zeros)."""
    p, emin, emax = FORMATS[fmt]
    if q == 0:
        return 0.0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, emin)
    ulp = Fraction(2) ** (e - p + 1)
    m = a / ulp
    n = m.numerator // m.denominator
    rem = m - n
    if mode == "rn":
        if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
            n += 1
    elif mode == "rz":
        pass
    elif mode == "rm":
        if neg and rem > 0:
            n += 1
    elif mode == "rp":
        if not neg and rem > 0:
            n += 1
    v = n * ulp
    if v > max_finite(fmt):
        to_inf = mode == "rn" or (mode == "rm" and neg) or (mode == "rp" and not neg)
        v = None if to_inf else max_finite(fmt)
    if v is None:
        return -math.inf if neg else math.inf
    f = float(v)
    return -f if neg else f


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(u: int) -> float:
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


def f64_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def f16_bits(x: float) -> int:
    return struct.unpack("<H", struct.pack("<e", x))[0]


def f16_from_bits(u: int) -> float:
    return struct.unpack("<e", struct.pack("<H", u & 0xFFFF))[0]


def bf16_from_bits(u: int) -> float:
    return f32_from_bits((u & 0xFFFF) << 16)


def bf16_bits_of(x: float) -> int:
    """Bits of a value already representable in bf16."""
    u = f32_bits(x)
    assert u & 0xFFFF == 0, x
    return u >> 16


# ---- self-checks of the reference (against struct's own IEEE conversions) ----

def test_round_frac_matches_struct_rn():
    import random
    rng = random.Random(5)
    for _ in range(2000):
        x = rng.uniform(-1, 1) * 2.0 ** rng.randint(-160, 130)
        want = struct.unpack("<f", struct.pack("<f", x))[0] if abs(x) < 3.4028235677973366e38 else None
        if want is None:
            continue
        assert round_frac(Fraction(x), "f32") == want
        h = x * 2.0 ** -100
        if abs(h) < 65504:
            assert round_frac(Fraction(h), "f16") == struct.unpack("<e", struct.pack("<e", h))[0]


def test_round_frac_directed_brackets():
    q = Fraction(1, 3)
    lo, hi = round_frac(q, "f32", "rm"), round_frac(q, "f32", "rp")
    assert lo < q < hi and round_frac(q, "f32", "rz") == lo
    assert round_frac(-q, "f32", "rz") == -lo and round_frac(-q, "f32", "rm") == -hi
    assert round_frac(Fraction(2) ** 200, "f32", "rz") == float(max_finite("f32"))
    assert round_frac(Fraction(2) ** 200, "f32", "rn") == math.inf
