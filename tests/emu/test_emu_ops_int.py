"""emu/ops: integer and bit instructions, and the registry. Expected values come from Python's unbounded
integers following the PTX ISA's definitions (truncating division, clamped shift counts, the bfe/bfi/bfind/prmt
pseudo-code), never from the implementation."""
from __future__ import annotations

import random

import numpy as np
import pytest

from pyvgpu.protocol import ERROR_CODES
from pyvgpu_daemon.emu.ops import ALU_OPCODES, build_alu, is_alu
from pyvgpu_daemon.emu.ptx import ir
from pyvgpu_daemon.errors import CudaError

RNG = random.Random(1234)
NP = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u16": np.uint16,
      "u32": np.uint32, "u64": np.uint64, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64}


def alu(spec: str, ndst: int = 1, srcs=None, line: int = 3):
    parts = spec.split(".")
    instr = ir.Instr(parts[0], tuple(parts[1:]), [ir.Reg(f"%d{i}") for i in range(ndst)],
                     srcs if srcs is not None else [ir.Reg("%a"), ir.Reg("%b"), ir.Reg("%c"), ir.Reg("%e")],
                     line=line)
    return build_alu(instr)


def wrap(v: int, t: str) -> int:
    w = int(t[1:])
    v &= (1 << w) - 1
    if t[0] == "s" and v >= 1 << (w - 1):
        v -= 1 << w
    return v


def rand_int(t: str, n: int) -> list[int]:
    w = int(t[1:])
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if t[0] == "s" else (0, (1 << w) - 1)
    edge = [lo, hi, 0, 1, -1 if t[0] == "s" else 2, lo + 1, hi - 1]
    return [RNG.choice(edge) if RNG.random() < 0.2 else RNG.randint(lo, hi) for _ in range(n)]


def arr(vals, t):
    return np.array(vals, dtype=NP[t]) if t[0] == "s" else np.array([v & ((1 << int(t[1:])) - 1) for v in vals],
                                                                    dtype=NP[t])


def as_list(x):
    return [int(v) for v in np.asarray(x).ravel()]


# ------------------------------------------------------------------------------------------------ registry

CORPUS_ALU = """abs.f32 abs.f64 add.f32 add.s32 add.s64 add.f64 add.rn.f32 add.ftz.f32 add.u64 add.rn.f64 add.f16
add.rz.f32 and.b32 and.b64 and.pred and.b16 bfi.b64 bfind.shiftamt.u32 brev.b32 clz.b32 copysign.f32 copysign.f64
cvt.rn.f32.s32 cvt.u64.u32 cvt.s64.s32 cvt.rn.f32.f64 cvt.f64.f32 cvt.rzi.s32.f32 cvt.rn.f16.f32 cvt.rni.f32.f32
cvt.rzi.f32.f32 cvt.f32.f16 cvt.rmi.f32.f32 cvt.u32.u64 cvt.rn.f64.s64 cvt.rzi.s32.f64 cvt.sat.f32.f32
cvt.rn.f32.s64 cvt.rni.f64.f64 cvt.rni.s32.f32 cvt.rni.s32.f64 cvt.rpi.f32.f32 cvt.rzi.f64.f64 cvt.rzi.s64.f64
cvt.u16.u32 div.rn.f32 div.s32 div.u32 div.approx.ftz.f32 div.s64 ex2.approx.ftz.f32 ex2.approx.f32 fma.rn.f32
fma.rn.f64 fma.rn.f16 fma.rm.f32 fma.rn.f16x2 fma.rn.ftz.f32 lg2.approx.ftz.f32 mad.lo.s32 mad.wide.u32 max.f32
max.s32 min.f32 min.s32 min.u32 mul.f32 mul.wide.s32 mul.f64 mul.rn.f32 mul.lo.s32 mul.wide.u32 mul.rn.f64
mul.hi.s32 mul.lo.s64 mul.ftz.f32 mul.f16 mul.hi.u32 mul.hi.u64 neg.f32 neg.f64 neg.s32 not.b32 or.pred or.b32
or.b64 popc.b32 prmt.b32 rcp.approx.ftz.f32 rcp.approx.ftz.f64 rcp.rn.f32 rcp.rn.f64 rem.u32 rsqrt.approx.f32
sad.s32 selp.f32 selp.b32 selp.f64 selp.u32 selp.u16 set.eq.f16.f16 setp.ge.s32 setp.eq.f32 setp.ne.s32
setp.eq.s32 setp.lt.s32 setp.lt.f32 setp.gt.f32 setp.ge.u32 setp.gt.s32 setp.ge.f32 setp.geu.f32 setp.gtu.f32
setp.eq.f64 setp.gt.u32 setp.lt.u32 setp.eq.s16 setp.lt.f64 setp.ltu.f32 setp.ne.u32 setp.neu.f32 setp.eq.s64
setp.ge.u64 setp.gt.f16 setp.gtu.f64 setp.leu.f32 setp.lt.u64 setp.ltu.f64 setp.ne.s16 setp.neu.f64
shf.l.wrap.b32 shl.b32 shl.b64 shr.u32 shr.s32 shr.u64 sin.approx.ftz.f32 sqrt.rn.f32 sqrt.approx.ftz.f32
sqrt.rn.f64 sub.s32 sub.f32 sub.f64 sub.s64 tanh.approx.f32 xor.b32 cvt.rn.f16x2.f32""".split()


@pytest.mark.parametrize("spec", CORPUS_ALU)
def test_every_corpus_alu_combination_builds(spec):
    assert is_alu(spec.split(".")[0])
    op = alu(spec)
    assert callable(op.fn) and op.src_types and op.dst_types


def test_non_alu_opcodes_are_not_claimed():
    for opc in ("mov", "ld", "st", "atom", "bra", "shfl", "vote", "bar", "cvta", "call", "ret", "redux"):
        assert not is_alu(opc)
    assert {"add", "setp", "cvt", "selp", "prmt"} <= ALU_OPCODES


@pytest.mark.parametrize("spec", ["add.sat.s64", "add.cc.s32", "mul.wide.s64", "div.f32", "fma.f32",
                                  "cvt.f16.f32", "cvt.rn.s32.f32", "shl.s32", "prmt.b32.f4e", "rcp.approx.f64",
                                  "setp.lt.and.pred", "ex2.f32", "add.rn.bogus.f32", "sqrt.f32"])
def test_unsupported_is_invalid_ptx_naming_instruction_and_line(spec):
    with pytest.raises(CudaError) as ei:
        alu(spec, line=17)
    assert ei.value.code == ERROR_CODES["cudaErrorInvalidPtx"]
    assert spec in ei.value.message and "line 17" in ei.value.message


def test_unknown_opcode_is_invalid_ptx():
    with pytest.raises(CudaError) as ei:
        build_alu(ir.Instr("frobnicate", ("b32",), [ir.Reg("%r1")], [ir.Reg("%r2")], line=9))
    assert ei.value.code == ERROR_CODES["cudaErrorInvalidPtx"] and "line 9" in ei.value.message


# ------------------------------------------------------------------------------------------------ add/sub/mul

@pytest.mark.parametrize("t", ["s16", "s32", "s64", "u16", "u32", "u64"])
@pytest.mark.parametrize("opc", ["add", "sub"])
def test_add_sub_wrap(opc, t):
    a, b = rand_int(t, 300), rand_int(t, 300)
    op = alu(f"{opc}.{t}")
    assert op.src_types == (t, t) and op.dst_types == (t,)
    got = as_list(op.fn(arr(a, t), arr(b, t)))
    want = [wrap(x + y if opc == "add" else x - y, t) & ((1 << int(t[1:])) - 1) for x, y in zip(a, b)]
    assert [g & ((1 << int(t[1:])) - 1) for g in got] == want


def test_add_sub_sat_s32_clamps():
    a = [2**31 - 1, -2**31, 5, -2**31, 2**31 - 1]
    b = [1, -1, -7, 2**31 - 1, -(2**31)]
    add = alu("add.sat.s32").fn(arr(a, "s32"), arr(b, "s32"))
    assert as_list(add) == [max(-2**31, min(2**31 - 1, x + y)) for x, y in zip(a, b)]
    sub = alu("sub.sat.s32").fn(arr(a, "s32"), arr(b, "s32"))
    assert as_list(sub) == [max(-2**31, min(2**31 - 1, x - y)) for x, y in zip(a, b)]


@pytest.mark.parametrize("t", ["s16", "s32", "s64", "u16", "u32", "u64"])
def test_mul_lo_hi_wide(t):
    w = int(t[1:])
    a, b = rand_int(t, 400), rand_int(t, 400)
    A, B = arr(a, t), arr(b, t)
    lo = alu(f"mul.lo.{t}").fn(A, B)
    assert [v & ((1 << w) - 1) for v in as_list(lo)] == [(x * y) & ((1 << w) - 1) for x, y in zip(a, b)]
    hi = alu(f"mul.hi.{t}")
    assert hi.dst_types == (t,)
    assert as_list(hi.fn(A, B)) == [wrap((x * y) >> w, t) for x, y in zip(a, b)]
    if w < 64:
        wide = alu(f"mul.wide.{t}")
        wt = t[0] + str(2 * w)
        assert wide.dst_types == (wt,)
        got = wide.fn(A, B)
        assert got.dtype == NP[wt]
        assert as_list(got) == [x * y for x, y in zip(a, b)]   # exact product: sign extension checked


def test_mul_hi_u64_random_against_python():
    rng = random.Random(99)
    a = [rng.getrandbits(64) for _ in range(5000)] + [2**64 - 1, 2**63, 0, 1]
    b = [rng.getrandbits(64) for _ in range(5000)] + [2**64 - 1, 2**63, 2**64 - 1, 2**64 - 1]
    got = alu("mul.hi.u64").fn(np.array(a, np.uint64), np.array(b, np.uint64))
    assert as_list(got) == [(x * y) >> 64 for x, y in zip(a, b)]


def test_mul_wide_s32_sign_extends():
    got = alu("mul.wide.s32").fn(np.array([-1, -2**31, 3], np.int32), np.array([1, -2**31, -5], np.int32))
    assert got.dtype == np.int64 and as_list(got) == [-1, 2**62, -15]
    got = alu("mul.wide.u32").fn(np.array([0xFFFFFFFF], np.uint32), np.array([0xFFFFFFFF], np.uint32))
    assert as_list(got) == [0xFFFFFFFF * 0xFFFFFFFF]


def test_mad_forms():
    a, b, c = rand_int("s32", 200), rand_int("s32", 200), rand_int("s32", 200)
    got = alu("mad.lo.s32").fn(arr(a, "s32"), arr(b, "s32"), arr(c, "s32"))
    assert as_list(got) == [wrap(x * y + z, "s32") for x, y, z in zip(a, b, c)]
    got = alu("mad.hi.s32").fn(arr(a, "s32"), arr(b, "s32"), arr(c, "s32"))
    assert as_list(got) == [wrap(((x * y) >> 32) + z, "s32") for x, y, z in zip(a, b, c)]
    ua, ub = rand_int("u32", 200), rand_int("u32", 200)
    uc = rand_int("u64", 200)
    op = alu("mad.wide.u32")
    assert op.src_types == ("u32", "u32", "u64") and op.dst_types == ("u64",)
    got = op.fn(arr(ua, "u32"), arr(ub, "u32"), arr(uc, "u64"))
    assert as_list(got) == [(x * y + z) % 2**64 for x, y, z in zip(ua, ub, uc)]


def test_mul24():
    a = [0x7FFFFF, 0x800000, 0x1234567, -1, 0xFFFFFF]
    b = [0x7FFFFF, 2, 0x89ABCD, -1, 0xFFFFFF]

    def s24(v):
        v &= 0xFFFFFF
        return v - (1 << 24) if v & 0x800000 else v
    lo = alu("mul24.lo.s32").fn(arr(a, "s32"), arr(b, "s32"))
    assert as_list(lo) == [wrap(s24(x) * s24(y), "s32") for x, y in zip(a, b)]
    hi = alu("mul24.hi.u32").fn(arr(a, "u32"), arr(b, "u32"))
    assert as_list(hi) == [(((x & 0xFFFFFF) * (y & 0xFFFFFF)) >> 16) & 0xFFFFFFFF for x, y in zip(a, b)]


# ------------------------------------------------------------------------------------------------ div/rem

def tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("t", ["s16", "s32", "s64", "u16", "u32", "u64"])
def test_div_rem_truncate_toward_zero(t):
    a = rand_int(t, 500) + [-7, 7, -7, 7] * (t[0] == "s")
    b = [x if x != 0 else 3 for x in rand_int(t, 500)] + [2, -2, -2, 2] * (t[0] == "s")
    b = [x if x != 0 else 3 for x in b]
    q = as_list(alu(f"div.{t}").fn(arr(a, t), arr(b, t)))
    r = as_list(alu(f"rem.{t}").fn(arr(a, t), arr(b, t)))
    assert q == [wrap(tdiv(x, y), t) for x, y in zip(a, b)]
    assert r == [wrap(x - tdiv(x, y) * y, t) for x, y in zip(a, b)]


def test_div_rem_negative_examples():
    q = alu("div.s32").fn(np.array([-7, 7, -7, -1], np.int32), np.array([2, -2, -2, 2], np.int32))
    r = alu("rem.s32").fn(np.array([-7, 7, -7, -1], np.int32), np.array([2, -2, -2, 2], np.int32))
    assert as_list(q) == [-3, -3, 3, 0] and as_list(r) == [-1, 1, -1, -1]


@pytest.mark.parametrize("t", ["s32", "s64"])
def test_int_min_div_minus_one_wraps(t):
    mn = -(1 << (int(t[1:]) - 1))
    q = alu(f"div.{t}").fn(arr([mn], t), arr([-1], t))
    r = alu(f"rem.{t}").fn(arr([mn], t), arr([-1], t))
    assert as_list(q) == [mn] and as_list(r) == [0]


@pytest.mark.parametrize("t", ["s32", "u32", "s64", "u64"])
def test_division_by_zero_does_not_raise_and_is_documented_value(t):
    with np.errstate(all="raise"):
        q = alu(f"div.{t}").fn(arr([5, 0, -9 if t[0] == "s" else 9], t), arr([0, 0, 0], t))
        r = alu(f"rem.{t}").fn(arr([5, 0, -9 if t[0] == "s" else 9], t), arr([0, 0, 0], t))
    allones = -1 if t[0] == "s" else (1 << int(t[1:])) - 1
    assert as_list(q) == [allones] * 3
    assert as_list(r) == [5, 0, -9 if t[0] == "s" else 9]


# ------------------------------------------------------------------------------------------------ misc arith

def test_abs_neg_min_max_sad():
    a = [-2**31, -5, 0, 7, 2**31 - 1]
    assert as_list(alu("abs.s32").fn(arr(a, "s32"))) == [wrap(abs(x), "s32") for x in a]
    assert as_list(alu("neg.s32").fn(arr(a, "s32"))) == [wrap(-x, "s32") for x in a]
    b = [3, -6, 0, 8, -1]
    assert as_list(alu("min.s32").fn(arr(a, "s32"), arr(b, "s32"))) == [min(x, y) for x, y in zip(a, b)]
    assert as_list(alu("max.s32").fn(arr(a, "s32"), arr(b, "s32"))) == [max(x, y) for x, y in zip(a, b)]
    ua, ub = [0xFFFFFFFF, 1], [1, 0xFFFFFFFF]
    assert as_list(alu("min.u32").fn(arr(ua, "u32"), arr(ub, "u32"))) == [1, 1]
    c = [10, 20, 30, 40, 50]
    got = alu("sad.s32").fn(arr(a, "s32"), arr(b, "s32"), arr(c, "s32"))
    assert as_list(got) == [wrap(z + abs(x - y), "s32") for x, y, z in zip(a, b, c)]
    got = alu("sad.u32").fn(arr([3, 10], "u32"), arr([10, 3], "u32"), arr([1, 1], "u32"))
    assert as_list(got) == [8, 8]


# ------------------------------------------------------------------------------------------------ logic / shifts

def test_logic_ops():
    a, b = rand_int("u64", 100), rand_int("u64", 100)
    A, B = arr(a, "b64"), arr(b, "b64")
    assert as_list(alu("and.b64").fn(A, B)) == [x & y for x, y in zip(a, b)]
    assert as_list(alu("or.b64").fn(A, B)) == [x | y for x, y in zip(a, b)]
    assert as_list(alu("xor.b64").fn(A, B)) == [x ^ y for x, y in zip(a, b)]
    assert as_list(alu("not.b64").fn(A)) == [x ^ (2**64 - 1) for x in a]
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert list(alu("and.pred").fn(p, q)) == [True, False, False, False]
    assert list(alu("or.pred").fn(p, q)) == [True, True, True, False]
    assert list(alu("xor.pred").fn(p, q)) == [False, True, True, False]
    assert list(alu("not.pred").fn(p)) == [False, False, True, True]
    assert as_list(alu("cnot.b32").fn(arr([0, 1, 0xFFFFFFFF], "b32"))) == [1, 0, 0]
    assert as_list(alu("and.b16").fn(arr([0xF0F0], "b16"), arr([0x3C3C], "b16"))) == [0x3030]


COUNTS = [0, 1, 5, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 255, 256, 2**31, 2**32 - 1]


@pytest.mark.parametrize("t", ["b16", "b32", "b64"])
def test_shl_counts_clamped(t):
    w = int(t[1:])
    a = rand_int("u" + str(w), len(COUNTS))
    got = alu(f"shl.{t}").fn(arr(a, t), np.array(COUNTS, np.uint32))
    assert as_list(got) == [(x << c) & ((1 << w) - 1) if c < w else 0 for x, c in zip(a, COUNTS)]


@pytest.mark.parametrize("t", ["u16", "s16", "u32", "s32", "u64", "s64", "b32"])
def test_shr_counts_clamped_sign_fill(t):
    w = int(t[1:])
    a = rand_int(t if t[0] != "b" else "u32", len(COUNTS))
    got = alu(f"shr.{t}").fn(arr(a, t), np.array(COUNTS, np.uint32))
    if t[0] == "s":
        want = [x >> min(c, w) for x, c in zip(a, COUNTS)]      # Python >> is arithmetic
    else:
        want = [(x >> c) if c < w else 0 for x, c in zip(a, COUNTS)]
    assert as_list(got) == want


def test_shift_by_immediate_folded():
    src = [ir.Reg("%r1"), ir.Imm(40)]
    op = build_alu(ir.Instr("shr", ("s32",), [ir.Reg("%r0")], src))
    assert as_list(op.fn(np.array([-5, 5], np.int32), np.uint32(40))) == [-1, 0]
    op = build_alu(ir.Instr("shl", ("b32",), [ir.Reg("%r0")], [ir.Reg("%r1"), ir.Imm(3)]))
    assert as_list(op.fn(np.array([0x30000001], np.uint32), np.uint32(3))) == [0x80000008]


def shf_ref(a, b, c, left, clamp):
    n = min(c, 32) if clamp else c & 31
    v = (b << 32) | a
    return ((v << n) >> 32) & 0xFFFFFFFF if left else (v >> n) & 0xFFFFFFFF


@pytest.mark.parametrize("d", ["l", "r"])
@pytest.mark.parametrize("mode", ["wrap", "clamp"])
def test_shf(d, mode):
    n = 200
    a, b = rand_int("u32", n), rand_int("u32", n)
    c = [RNG.choice([0, 1, 31, 32, 33, 63, 64, 2**32 - 1, RNG.randint(0, 100)]) for _ in range(n)]
    got = alu(f"shf.{d}.{mode}.b32").fn(arr(a, "u32"), arr(b, "u32"), arr(c, "u32"))
    assert as_list(got) == [shf_ref(x, y, z, d == "l", mode == "clamp") for x, y, z in zip(a, b, c)]


# ------------------------------------------------------------------------------------------------ bit ops

@pytest.mark.parametrize("w", [32, 64])
def test_popc_clz_brev(w):
    t = f"b{w}"
    a = rand_int(f"u{w}", 300) + [0, 1, 1 << (w - 1), (1 << w) - 1]
    A = arr(a, t)
    pc = alu(f"popc.{t}")
    assert pc.dst_types == ("u32",)
    assert as_list(pc.fn(A)) == [bin(x).count("1") for x in a]
    assert as_list(alu(f"clz.{t}").fn(A)) == [w - x.bit_length() for x in a]
    assert as_list(alu(f"brev.{t}").fn(A)) == [int(format(x, f"0{w}b")[::-1], 2) for x in a]


def bfind_ref(x, t, shiftamt):
    w = int(t[1:])
    msb = w - 1
    if t[0] == "s" and x < 0:
        x = ~x
    x &= (1 << w) - 1
    d = 0xFFFFFFFF
    for i in range(msb, -1, -1):
        if x >> i & 1:
            d = i
            break
    if shiftamt and d != 0xFFFFFFFF:
        d = msb - d
    return d


@pytest.mark.parametrize("t", ["u32", "s32", "u64", "s64"])
@pytest.mark.parametrize("shiftamt", [False, True])
def test_bfind(t, shiftamt):
    a = rand_int(t, 300) + [0, -1 if t[0] == "s" else 1, 1]
    spec = f"bfind.shiftamt.{t}" if shiftamt else f"bfind.{t}"
    assert as_list(alu(spec).fn(arr(a, t))) == [bfind_ref(x, t, shiftamt) for x in a]


def bfe_ref(a, pos, ln, t):
    w = int(t[1:])
    msb = w - 1
    pos &= 0xFF
    ln &= 0xFF
    ua = a & ((1 << w) - 1)
    sbit = 0 if (t[0] == "u" or ln == 0) else (ua >> min(pos + ln - 1, msb)) & 1
    d = 0
    for i in range(w):
        bit = (ua >> (pos + i)) & 1 if (i < ln and pos + i <= msb) else sbit
        d |= bit << i
    return wrap(d, t)


@pytest.mark.parametrize("t", ["u32", "s32", "u64", "s64"])
def test_bfe(t):
    n = 300
    a = rand_int(t, n)
    pos = [RNG.choice([0, 1, 7, 31, 32, 40, 63, 64, 200, 255, 256 + 3, RNG.randint(0, 70)]) for _ in range(n)]
    ln = [RNG.choice([0, 1, 8, 31, 32, 33, 64, 65, 255, 256 + 5, RNG.randint(0, 70)]) for _ in range(n)]
    got = alu(f"bfe.{t}").fn(arr(a, t), arr(pos, "u32"), arr(ln, "u32"))
    assert as_list(got) == [bfe_ref(x, p, l, t) for x, p, l in zip(a, pos, ln)]


def bfi_ref(a, b, pos, ln, w):
    pos &= 0xFF
    ln &= 0xFF
    f = b
    i = 0
    while i < ln and pos + i <= w - 1:
        bit = (a >> i) & 1
        f = (f & ~(1 << (pos + i))) | (bit << (pos + i))
        i += 1
    return f


@pytest.mark.parametrize("w", [32, 64])
def test_bfi(w):
    n = 300
    a, b = rand_int(f"u{w}", n), rand_int(f"u{w}", n)
    pos = [RNG.choice([0, 1, 7, 31, 32, 63, 64, 255, RNG.randint(0, 70)]) for _ in range(n)]
    ln = [RNG.choice([0, 1, 8, 32, 64, 65, 255, RNG.randint(0, 70)]) for _ in range(n)]
    got = alu(f"bfi.b{w}").fn(arr(a, f"b{w}"), arr(b, f"b{w}"), arr(pos, "u32"), arr(ln, "u32"))
    assert as_list(got) == [bfi_ref(x, y, p, l, w) for x, y, p, l in zip(a, b, pos, ln)]


def prmt_ref(a, b, c):
    src = (b << 32) | a
    d = 0
    for i in range(4):
        ctl = (c >> (4 * i)) & 0xF
        byte = (src >> (8 * (ctl & 7))) & 0xFF
        if ctl & 8:
            byte = 0xFF if byte & 0x80 else 0
        d |= byte << (8 * i)
    return d


def test_prmt_default_mode():
    n = 300
    a, b, c = rand_int("u32", n), rand_int("u32", n), rand_int("u32", n)
    got = alu("prmt.b32").fn(arr(a, "b32"), arr(b, "b32"), arr(c, "b32"))
    assert as_list(got) == [prmt_ref(x, y, z) for x, y, z in zip(a, b, c)]
    # byte swap and sign replication examples
    assert as_list(alu("prmt.b32").fn(np.uint32(0x11223344), np.uint32(0), np.uint32(0x0123))) == [0x44332211]
    assert as_list(alu("prmt.b32").fn(np.uint32(0x80), np.uint32(0), np.uint32(0x8888))) == [0xFFFFFFFF]


def test_scalar_immediates_work():
    op = alu("add.s32")
    assert int(op.fn(np.int32(2**31 - 1), np.int32(1))) == -2**31
    assert as_list(alu("mul.hi.u64").fn(np.uint64(2**64 - 1), np.uint64(2**64 - 1))) == [2**64 - 2]
    assert as_list(alu("div.s32").fn(np.array([9], np.int32), np.int32(-2))) == [-4]


# ------------------------------------------------------------------------------------------------ lop3 dp4a dp2a slct

@pytest.mark.parametrize("lut", [0x00, 0xFF, 0x96, 0xE8, 0xF0, 0xCC, 0xAA, 0x80, 0x1E, 0x6A])
def test_lop3_truth_table(lut):
    n = 100
    a, b, c = rand_int("u32", n), rand_int("u32", n), rand_int("u32", n)
    op = build_alu(ir.Instr("lop3", ("b32",), [ir.Reg("%r0")],
                            [ir.Reg("%r1"), ir.Reg("%r2"), ir.Reg("%r3"), ir.Imm(lut)]))
    got = op.fn(arr(a, "u32"), arr(b, "u32"), arr(c, "u32"), np.uint32(lut))

    def ref(x, y, z):
        d = 0
        for i in range(32):
            idx = ((x >> i & 1) << 2) | ((y >> i & 1) << 1) | (z >> i & 1)
            d |= ((lut >> idx) & 1) << i
        return d
    assert as_list(got) == [ref(x, y, z) for x, y, z in zip(a, b, c)]


def test_lop3_register_lut_refused():
    with pytest.raises(CudaError):
        build_alu(ir.Instr("lop3", ("b32",), [ir.Reg("%r0")], [ir.Reg("%r1")] * 4))


def _sbyte(v, i, signed):
    x = (v >> (8 * i)) & 0xFF
    return x - 256 if signed and x >= 128 else x


def _shalf(v, i, signed):
    x = (v >> (16 * i)) & 0xFFFF
    return x - 65536 if signed and x >= 32768 else x


@pytest.mark.parametrize("at", ["u32", "s32"])
@pytest.mark.parametrize("bt", ["u32", "s32"])
def test_dp4a_dp2a(at, bt):
    n = 200
    a, b = rand_int("u32", n), rand_int("u32", n)
    ct = "u32" if at == bt == "u32" else "s32"
    c = rand_int(ct, n)
    op = alu(f"dp4a.{at}.{bt}")
    assert op.src_types == (at, bt, ct) and op.dst_types == (ct,)
    got = op.fn(arr(a, "u32").view(NP[at]), arr(b, "u32").view(NP[bt]), arr(c, ct))
    want = [wrap(z + sum(_sbyte(x, i, at == "s32") * _sbyte(y, i, bt == "s32") for i in range(4)), ct)
            for x, y, z in zip(a, b, c)]
    assert as_list(got) == want
    for part, k in (("lo", 0), ("hi", 2)):
        got = alu(f"dp2a.{part}.{at}.{bt}").fn(arr(a, "u32").view(NP[at]), arr(b, "u32").view(NP[bt]), arr(c, ct))
        want = [wrap(z + _shalf(x, 0, at == "s32") * _sbyte(y, k, bt == "s32")
                     + _shalf(x, 1, at == "s32") * _sbyte(y, k + 1, bt == "s32"), ct) for x, y, z in zip(a, b, c)]
        assert as_list(got) == want


def test_slct():
    c = np.array([-1, 0, 5, -2**31], np.int32)
    got = alu("slct.u32.s32").fn(np.uint32(1), np.uint32(2), c)
    assert as_list(got) == [2, 1, 1, 2]
    cf = np.array([-0.0, -1e-40, 3.0, np.nan, -np.inf], np.float32)
    got = alu("slct.f32.f32").fn(np.float32(1.5), np.float32(-2.5), cf)
    assert got.tolist() == [1.5, -2.5, 1.5, -2.5, -2.5]


@pytest.mark.parametrize("spec", ["min.u16x2", "max.u16x2", "min.s16x2", "max.s16x2", "min.relu.s16x2",
                                  "max.relu.s16x2", "min.relu.s32", "max.relu.s32"])
def test_packed_and_relu_min_max(spec):
    # PTX ISA 8.0 (sm_90, in CuPy's compute_120 CUB kernels): each 16-bit half on its own; .relu clamps at 0
    op = alu(spec)
    is_max, relu = spec.startswith("max"), ".relu" in spec
    pick = max if is_max else min
    halves = spec.endswith("16x2")
    t = "s16" if "s16" in spec or not halves else "u16"
    a = [RNG.getrandbits(32) for _ in range(200)] + [0x8000FFFF, 0x7FFF0000, 0]
    b = [RNG.getrandbits(32) for _ in range(200)] + [0xFFFF8000, 0x00007FFF, 0xFFFFFFFF]
    if halves:
        exp = []
        for x, y in zip(a, b):
            r = 0
            for sh in (0, 16):
                v = pick(wrap(x >> sh, t), wrap(y >> sh, t))
                r |= ((max(v, 0) if relu else v) & 0xFFFF) << sh
            exp.append(r)
        got = op.fn(np.array(a, np.uint32), np.array(b, np.uint32))
    else:
        exp = [max(pick(wrap(x, "s32"), wrap(y, "s32")), 0) for x, y in zip(a, b)]
        got = op.fn(np.array(a, np.uint32).view(np.int32), np.array(b, np.uint32).view(np.int32))
    assert [int(v) for v in np.asarray(got)] == exp
