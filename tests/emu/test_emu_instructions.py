"""Instruction tests through the whole emulator: small hand-written PTX kernels (in the style of ZLUDA's spirv_run
tests) loaded with EmuModule into a DeviceMemory, launched, and checked against expectations derived here from the
PTX ISA and IEEE 754 (Python integers, fractions.Fraction, struct), not from the implementation."""
from __future__ import annotations

import math
import random
import struct
from fractions import Fraction as F

import numpy as np
import pytest

from pyvgpu.protocol import ERROR_CODES
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.errors import CudaError
from test_emu_ops_ref import f16_bits, f32_bits, f32_from_bits, f64_bits, round_frac

# PTX type -> (numpy dtype, register class used to hold it)
TYPES = {"u32": (np.uint32, "b32"), "s32": (np.int32, "b32"), "b32": (np.uint32, "b32"), "f32": (np.float32, "f32"),
         "u64": (np.uint64, "b64"), "s64": (np.int64, "b64"), "b64": (np.uint64, "b64"), "f64": (np.float64, "f64"),
         "u16": (np.uint16, "b16"), "b16": (np.uint16, "b16"), "s16": (np.int16, "b16"), "u8": (np.uint8, "b16")}


def kernel_ptx(ins: list[str], outs: list[str], body: str, extra_regs: str = "") -> str:
    """An entry `k(n, in0.., out0..)`: thread i (< n) loads element i of every input into %a<k>, runs `body`,
    and stores %o<k> to element i of every output."""
    params = [".param .u32 n"] + [f".param .u64 pin{i}" for i in range(len(ins))] + \
             [f".param .u64 pout{i}" for i in range(len(outs))]
    lines = [".version 8.0", ".target sm_75", ".address_size 64", "",
             f".visible .entry k({', '.join(params)})", "{",
             "  .reg .b32 %r<8>;", "  .reg .b64 %rd<8>;", "  .reg .pred %done;",
             "  .reg .pred %p<8>;", "  .reg .b32 %t<16>;", "  .reg .b64 %u<16>;", "  .reg .f32 %f<16>;",
             "  .reg .f64 %fd<16>;", "  .reg .b16 %h<16>;"]
    for i, t in enumerate(ins):
        lines.append(f"  .reg .{TYPES[t][1]} %a{i};")
    for i, t in enumerate(outs):
        lines.append(f"  .reg .{TYPES[t][1]} %o{i};")
    if extra_regs:
        lines.append(extra_regs)
    lines += ["  mov.u32 %r1, %tid.x;", "  mov.u32 %r2, %ctaid.x;", "  mov.u32 %r3, %ntid.x;",
              "  mad.lo.s32 %r4, %r2, %r3, %r1;", "  ld.param.u32 %r5, [n];",
              "  setp.ge.u32 %done, %r4, %r5;", "  @%done bra $L_end;"]
    for i, t in enumerate(ins):
        size = np.dtype(TYPES[t][0]).itemsize
        lt = t if t != "u8" else "u8"
        lines += [f"  ld.param.u64 %rd1, [pin{i}];", "  cvta.to.global.u64 %rd1, %rd1;",
                  f"  mul.wide.u32 %rd2, %r4, {size};", "  add.s64 %rd3, %rd1, %rd2;",
                  f"  ld.global.{lt} %a{i}, [%rd3];"]
    lines += ["  " + ln.strip() for ln in body.strip().splitlines()]
    for i, t in enumerate(outs):
        size = np.dtype(TYPES[t][0]).itemsize
        lines += [f"  ld.param.u64 %rd1, [pout{i}];", "  cvta.to.global.u64 %rd1, %rd1;",
                  f"  mul.wide.u32 %rd2, %r4, {size};", "  add.s64 %rd3, %rd1, %rd2;",
                  f"  st.global.{t} [%rd3], %o{i};"]
    lines += ["$L_end:", "  ret;", "}", ""]
    return "\n".join(lines)


def run(ins: list[str], outs: list[str], body: str, *inputs, extra_regs: str = "", block: int = 64):
    """Run the kernel over len(inputs[0]) threads; return the output arrays."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(kernel_ptx(ins, outs, body, extra_regs).encode(), mem)
    n = len(inputs[0])
    ptrs = []
    for t, vals in zip(ins, inputs):
        arr = np.asarray(vals, TYPES[t][0]) if not isinstance(vals, np.ndarray) else vals.astype(TYPES[t][0])
        p = mem.alloc(max(arr.nbytes, 1))
        mem.write(p, arr.tobytes())
        ptrs.append(p)
    optrs = []
    for t in outs:
        size = n * np.dtype(TYPES[t][0]).itemsize
        p = mem.alloc(size)
        mem.fill(p, 0xAB, size)
        optrs.append(p)
    params = struct.pack("<I", n) + b"\0" * 4 + b"".join(struct.pack("<Q", p) for p in ptrs + optrs)
    layout = mod.kernels["k"].params
    assert [o for o, _ in layout] == [0] + [8 + 8 * i for i in range(len(ptrs) + len(optrs))]
    mod.launch("k", ((n + block - 1) // block, 1, 1), (block, 1, 1), 0, params)
    res = []
    for t, p in zip(outs, optrs):
        res.append(np.frombuffer(bytes(mem.read(p, n * np.dtype(TYPES[t][0]).itemsize)), TYPES[t][0]).copy())
    return res


def wrap32(v):
    v &= 0xFFFFFFFF
    return v - 2**32 if v >= 2**31 else v


def tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


# ------------------------------------------------------------------------------------------------ integer

def test_signed_div_rem_truncate_and_edge_cases():
    a = [-7, 7, -7, 7, -2**31, -2**31, 5, -5, 0, 123456789]
    b = [2, -2, -2, 2, -1, 1, 0, 0, 0, -1000]
    q, r = run(["s32", "s32"], ["s32", "s32"], """
        div.s32 %o0, %a0, %a1;
        rem.s32 %o1, %a0, %a1;
    """, a, b)
    want_q = [wrap32(tdiv(x, y)) if y else -1 for x, y in zip(a, b)]
    want_r = [wrap32(x - tdiv(x, y) * y) if y else x for x, y in zip(a, b)]
    assert q.tolist() == want_q
    assert r.tolist() == want_r


def test_unsigned_div_rem_and_immediates():
    a = [100, 0xFFFFFFFF, 7, 0]
    q, r, q2 = run(["u32", "u32"], ["u32", "u32", "u32"], """
        div.u32 %o0, %a0, %a1;
        rem.u32 %o1, %a0, %a1;
        div.u32 %o2, %a0, 7;
    """, a, [7, 16, 0, 3])
    assert q.tolist() == [14, 0x0FFFFFFF, 0xFFFFFFFF, 0]
    assert r.tolist() == [2, 15, 7, 0]
    assert q2.tolist() == [14, 0xFFFFFFFF // 7, 1, 0]


def test_mul_hi_u64_and_wide_sign_extension():
    rng = random.Random(8)
    a = [rng.getrandbits(64) for _ in range(100)] + [2**64 - 1]
    b = [rng.getrandbits(64) for _ in range(100)] + [2**64 - 1]
    (hi,) = run(["u64", "u64"], ["u64"], "mul.hi.u64 %o0, %a0, %a1;", a, b)
    assert [int(v) for v in hi] == [(x * y) >> 64 for x, y in zip(a, b)]
    sa = [-1, -2**31, 2**31 - 1, 12345, -3]
    sb = [1, -2**31, 2**31 - 1, -678, 7]
    (w,) = run(["s32", "s32"], ["s64"], "mul.wide.s32 %o0, %a0, %a1;", sa, sb)
    assert w.tolist() == [x * y for x, y in zip(sa, sb)]
    (m,) = run(["s32", "s32", "s32"], ["s32"], "mad.lo.s32 %o0, %a0, %a1, %a2;", sa, sb, [1, 2, 3, 4, 5])
    assert m.tolist() == [wrap32(x * y + z) for x, y, z in zip(sa, sb, [1, 2, 3, 4, 5])]


def test_shift_counts_at_and_beyond_width():
    counts = [0, 1, 31, 32, 33, 64, 255, 2**32 - 1]
    vals = [0x80000001] * len(counts)
    shl, shr_u, shr_s = run(["u32", "u32"], ["u32", "u32", "s32"], """
        shl.b32 %o0, %a0, %a1;
        shr.u32 %o1, %a0, %a1;
        shr.s32 %o2, %a0, %a1;
    """, vals, counts)
    assert shl.tolist() == [(0x80000001 << c) & 0xFFFFFFFF if c < 32 else 0 for c in counts]
    assert shr_u.tolist() == [0x80000001 >> c if c < 32 else 0 for c in counts]
    assert shr_s.tolist() == [wrap32(0x80000001) >> min(c, 31) for c in counts]
    (s64,) = run(["u64"], ["u64"], "shl.b64 %o0, %a0, 40;", [3, 2**63 + 5])
    assert [int(v) for v in s64] == [(3 << 40) % 2**64, ((2**63 + 5) << 40) % 2**64]


def test_bit_manipulation():
    vals = [0, 1, 0x80000000, 0x0F0F1234, 0xFFFFFFFF, 0x00010000]
    pc, cz, bf, br, bfe_s, bfi = run(["u32", "u32"], ["u32", "u32", "u32", "u32", "s32", "u32"], """
        popc.b32 %o0, %a0;
        clz.b32 %o1, %a0;
        bfind.shiftamt.u32 %o2, %a0;
        brev.b32 %o3, %a0;
        bfe.s32 %o4, %a0, 4, 8;
        bfi.b32 %o5, %a1, %a0, 8, 4;
    """, vals, [0xA] * len(vals))
    assert pc.tolist() == [bin(v).count("1") for v in vals]
    assert cz.tolist() == [32 - v.bit_length() for v in vals]
    assert bf.tolist() == [0xFFFFFFFF if v == 0 else 32 - v.bit_length() for v in vals]
    assert br.tolist() == [int(format(v, "032b")[::-1], 2) for v in vals]
    field = [(v >> 4) & 0xFF for v in vals]
    assert bfe_s.tolist() == [f - 256 if f & 0x80 else f for f in field]
    assert bfi.tolist() == [(v & ~0xF00) | (0xA << 8) for v in vals]
    (pm,) = run(["u32", "u32"], ["u32"], "prmt.b32 %o0, %a0, %a1, 0x4321;", [0x11223344], [0x55667788])
    # selectors 1,2,3,4 from {b, a} bytes [0x44,0x33,0x22,0x11,0x88,0x77,0x66,0x55]
    assert pm.tolist() == [0x33 | 0x22 << 8 | 0x11 << 16 | 0x88 << 24]
    (sf,) = run(["u32", "u32"], ["u32"], "shf.l.wrap.b32 %o0, %a0, %a1, 36;", [0xF0000000], [0x00000001])
    assert sf.tolist() == [(((0x00000001 << 32 | 0xF0000000) << 4) >> 32) & 0xFFFFFFFF]


def test_add_sat_and_min_max():
    a = [2**31 - 1, -2**31, 5]
    b = [10, -10, -7]
    s, mn, mx = run(["s32", "s32"], ["s32", "s32", "u32"], """
        add.sat.s32 %o0, %a0, %a1;
        min.s32 %o1, %a0, %a1;
        max.u32 %o2, %a0, %a1;
    """, a, b)
    assert s.tolist() == [2**31 - 1, -2**31, -2]
    assert mn.tolist() == [min(x, y) for x, y in zip(a, b)]
    assert mx.tolist() == [max(x & 0xFFFFFFFF, y & 0xFFFFFFFF) for x, y in zip(a, b)]


# ------------------------------------------------------------------------------------------------ predicates

def test_setp_unordered_selp_and_negated_predicate_source():
    nan = math.nan
    a = [1.0, nan, 3.0, -0.0, nan]
    b = [2.0, 1.0, 3.0, 0.0, nan]
    lt, ltu, ne, neu, both, qout = run(["f32", "f32"], ["f32", "f32", "f32", "f32", "u32", "u32"], """
        setp.lt.f32 %p1, %a0, %a1;
        selp.f32 %o0, 0f3F800000, 0f00000000, %p1;
        setp.ltu.f32 %p2, %a0, %a1;
        selp.f32 %o1, 0f3F800000, 0f00000000, %p2;
        setp.ne.f32 %p3, %a0, %a1;
        selp.f32 %o2, 0f3F800000, 0f00000000, %p3;
        setp.neu.f32 %p4, %a0, %a1;
        selp.f32 %o3, 0f3F800000, 0f00000000, %p4;
        setp.ge.and.f32 %p5|%p6, %a0, %a1, !%p4;
        selp.u32 %o4, 1, 0, %p5;
        selp.u32 %o5, 1, 0, %p6;
    """, a, b)

    def un(x, y):
        return math.isnan(x) or math.isnan(y)
    assert lt.tolist() == [float(x < y) for x, y in zip(a, b)]
    assert ltu.tolist() == [float(un(x, y) or x < y) for x, y in zip(a, b)]
    assert ne.tolist() == [float(not un(x, y) and x != y) for x, y in zip(a, b)]
    assert neu.tolist() == [float(un(x, y) or x != y) for x, y in zip(a, b)]
    # p5 = (a >= b) & !neu ; p6 = !(a >= b) & !neu   (neu false only for ordered-equal pairs)
    eq_ord = [not un(x, y) and x == y for x, y in zip(a, b)]
    assert both.tolist() == [int(e and x >= y) for e, x, y in zip(eq_ord, a, b)]
    assert qout.tolist() == [int(e and not (x >= y)) for e, x, y in zip(eq_ord, a, b)]


def test_guarded_alu_instruction_writes_only_true_lanes():
    (o,) = run(["s32"], ["s32"], """
        mov.u32 %o0, 7;
        setp.lt.s32 %p1, %a0, 0;
        @%p1 neg.s32 %o0, %a0;
        @!%p1 add.s32 %o0, %a0, 100;
    """, [-5, 3, -2**31, 0])
    assert o.tolist() == [5, 103, -2**31, 100]


# ------------------------------------------------------------------------------------------------ floating point

def test_fma_rn_f32_is_single_rounding():
    t = float(np.float32(1 + 2.0 ** -12))
    a = [t, t, 3.0, 1e-30]
    b = [t, t, 1 / 3.0, 1e-30]
    c = [2.0 ** -80, -2.0 ** -80, -1.0, 0.0]
    a32, b32, c32 = (np.array(v, np.float32) for v in (a, b, c))
    (o,) = run(["f32", "f32", "f32"], ["f32"], "fma.rn.f32 %o0, %a0, %a1, %a2;", a32, b32, c32)
    want = [round_frac(F(float(x)) * F(float(y)) + F(float(z)), "f32", "rn") for x, y, z in zip(a32, b32, c32)]
    assert [f32_bits(float(v)) for v in o] == [f32_bits(w) for w in want]


def test_expf_sequence_magic_number_round_down():
    """The core of nvcc's expf: t = sat(x * c1 + 0.5), j = fma.rm(t, 252, 0x4B400001), the integer bits of j
    shifted into the exponent field of a float."""
    xs = [-3.0, -1.0, -0.25, 0.0, 0.3, 1.0, 2.5, 10.0, math.nan]
    sat, j, scale = run(["f32"], ["f32", "f32", "f32"], """
        fma.rn.f32 %f1, %a0, 0f3BBB989D, 0f3F000000;
        cvt.sat.f32.f32 %o0, %f1;
        fma.rm.f32 %o1, %o0, 0f437C0000, 0f4B400001;
        mov.b32 %t1, %o1;
        shl.b32 %t2, %t1, 23;
        mov.b32 %o2, %t2;
    """, np.array(xs, np.float32))
    c1 = F(f32_from_bits(0x3BBB989D))
    magic = F(f32_from_bits(0x4B400001))
    for x, s, jj, sc in zip(xs, sat.tolist(), j.tolist(), scale.tolist()):
        if math.isnan(x):
            ws = 0.0
        else:
            y = round_frac(F(float(np.float32(x))) * c1 + F(1, 2), "f32", "rn")
            ws = min(max(y, 0.0), 1.0)
        assert f32_bits(s) == f32_bits(ws + 0.0), (x, s, ws)
        wj = round_frac(F(ws) * 252 + magic, "f32", "rm")
        assert jj == wj, (x, jj, wj)
        assert f32_bits(sc) == (f32_bits(wj) << 23) & 0xFFFFFFFF


def test_directed_rounding_add_div_sqrt():
    a = np.array([0.49999997, 1.0, 2.0, -1.0], np.float32)
    b = np.array([0.5, 3.0, 3.0, 3.0], np.float32)
    rz, rm, rp, sq = run(["f32", "f32"], ["f32", "f32", "f32", "f32"], """
        add.rz.f32 %o0, %a0, %a1;
        div.rm.f32 %o1, %a0, %a1;
        div.rp.f32 %o2, %a0, %a1;
        sqrt.rp.f32 %o3, %a1;
    """, a, b)
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        assert rz[i] == round_frac(F(x) + F(y), "f32", "rz")
        assert rm[i] == round_frac(F(x) / F(y), "f32", "rm")
        assert rp[i] == round_frac(F(x) / F(y), "f32", "rp")
    assert rz[0] < 1.0
    assert sq.tolist()[1] > math.sqrt(3.0) > float(np.nextafter(sq[1], np.float32(0)))


def test_float_specials_and_min_max_nan():
    inf, nan = math.inf, math.nan
    a = np.array([inf, 0.0, nan, -0.0, 1.0], np.float32)
    b = np.array([-inf, -0.0, 2.0, 0.0, nan], np.float32)
    s, mn, mx, d = run(["f32", "f32"], ["f32", "f32", "f32", "f32"], """
        add.f32 %o0, %a0, %a1;
        min.f32 %o1, %a0, %a1;
        max.f32 %o2, %a0, %a1;
        div.rn.f32 %o3, %a0, 0f80000000;
    """, a, b)
    assert math.isnan(s[0]) and f32_bits(float(s[1])) == 0 and math.isnan(s[2])
    assert mn.tolist()[2] == 2.0 and mn.tolist()[4] == 1.0 and f32_bits(float(mn[3])) == 0x80000000
    assert mx.tolist()[2] == 2.0 and f32_bits(float(mx[3])) == 0
    # x / -0: inf -> -inf, 0 and NaN -> NaN, 1 -> -inf
    assert d[0] == -inf and math.isnan(d[1]) and math.isnan(d[2]) and math.isnan(d[3]) and d[4] == -inf


def test_f64_fma_div_rcp():
    rng = random.Random(4)
    a = [rng.uniform(-1e3, 1e3) for _ in range(64)] + [1 + 2.0 ** -27]
    b = [rng.uniform(-1e3, 1e3) for _ in range(64)] + [1 + 2.0 ** -27]
    c = [rng.uniform(-1e3, 1e3) for _ in range(64)] + [2.0 ** -200]
    f, q, r = run(["f64", "f64", "f64"], ["f64", "f64", "f64"], """
        fma.rn.f64 %o0, %a0, %a1, %a2;
        div.rn.f64 %o1, %a0, %a1;
        rcp.rn.f64 %o2, %a2;
    """, a, b, c)
    for i in range(len(a)):
        assert f64_bits(f[i]) == f64_bits(round_frac(F(a[i]) * F(b[i]) + F(c[i]), "f64", "rn"))
        assert f64_bits(q[i]) == f64_bits(round_frac(F(a[i]) / F(b[i]), "f64", "rn"))
        assert f64_bits(r[i]) == f64_bits(round_frac(1 / F(c[i]), "f64", "rn"))


def test_ex2_approx_ftz_within_two_ulp():
    xs = np.array([-10.5, -1.0, 0.0, 0.5, 3.25, 20.0, -130.0], np.float32)
    (e,) = run(["f32"], ["f32"], "ex2.approx.ftz.f32 %o0, %a0;", xs)
    for x, g in zip(xs.tolist(), e.tolist()):
        want = 2.0 ** x
        if want < 2.0 ** -126:
            assert g == 0.0
        else:
            assert abs(g - want) <= 2 * float(np.spacing(np.float32(want)))


# ------------------------------------------------------------------------------------------------ cvt

def test_cvt_float_to_int_saturation_and_nan():
    xs = np.array([1.5, -1.5, 2.5, 3e9, -3e9, math.inf, -math.inf, math.nan, -0.7], np.float32)
    rzi, rni, rmi, u = run(["f32"], ["s32", "s32", "s32", "u32"], """
        cvt.rzi.s32.f32 %o0, %a0;
        cvt.rni.s32.f32 %o1, %a0;
        cvt.rmi.s32.f32 %o2, %a0;
        cvt.rzi.u32.f32 %o3, %a0;
    """, xs)
    assert rzi.tolist() == [1, -1, 2, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 0, 0]
    assert rni.tolist() == [2, -2, 2, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 0, -1]
    assert rmi.tolist() == [1, -2, 2, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 0, -1]
    assert u.tolist() == [1, 0, 2, 3000000000, 0, 2**32 - 1, 0, 0, 0]


def test_cvt_f16_round_trip_and_ties():
    xs = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 65520.0, -2.0 ** -25, 0.1], np.float32)
    h, back = run(["f32"], ["b16", "f32"], """
        cvt.rn.f16.f32 %h1, %a0;
        mov.b16 %o0, %h1;
        cvt.f32.f16 %o1, %h1;
    """, xs)
    want = [f16_bits(round_frac(F(float(x)), "f16", "rn")) if x != 0 else 0 for x in xs.tolist()]
    want[3] = 0x8000   # -2^-25 rounds to -0 (ties-to-even at half the smallest subnormal)
    assert h.tolist() == want
    assert back.tolist() == [struct.unpack("<e", struct.pack("<H", w))[0] for w in want]


def test_cvt_int_to_float_and_widening():
    v = [2**24 + 1, -(2**24 + 3), 2**31 - 1, 7]
    f, d = run(["s32"], ["f32", "s64"], """
        cvt.rn.f32.s32 %o0, %a0;
        cvt.s64.s32 %o1, %a0;
    """, v)
    assert f.tolist() == [round_frac(F(x), "f32", "rn") for x in v]
    assert d.tolist() == v
    (g,) = run(["u64"], ["f32"], "cvt.rz.f32.u64 %o0, %a0;", [2**64 - 1, 2**53 + 1])
    assert g.tolist() == [round_frac(F(2**64 - 1), "f32", "rz"), round_frac(F(2**53 + 1), "f32", "rz")]


# ------------------------------------------------------------------------------------------------ half precision

def test_f16_fma_and_f16x2_packing():
    hx = [f16_bits(v) for v in (1.5, 2.0, 65504.0, -0.5)]
    hy = [f16_bits(v) for v in (2.0, 0.25, 2.0, 3.0)]
    hz = [f16_bits(v) for v in (0.125, 1.0, 0.0, 1.5)]
    o, p = run(["u16", "u16", "u16"], ["b16", "u32"], """
        mov.b16 %h1, %a0;
        mov.b16 %h2, %a1;
        mov.b16 %h3, %a2;
        fma.rn.f16 %o0, %h1, %h2, %h3;
        mov.b32 %t1, {%h1, %h2};
        mov.b32 %t2, {%h3, %h3};
        fma.rn.f16x2 %o1, %t1, %t1, %t2;
    """, hx, hy, hz)

    def h(u):
        return struct.unpack("<e", struct.pack("<H", u))[0]
    want = [f16_bits(round_frac(F(h(x)) * F(h(y)) + F(h(z)), "f16", "rn")) for x, y, z in zip(hx, hy, hz)]
    assert o.tolist() == want
    lo = [f16_bits(round_frac(F(h(x)) ** 2 + F(h(z)), "f16", "rn")) for x, z in zip(hx, hz)]
    hi = [f16_bits(round_frac(F(h(y)) ** 2 + F(h(z)), "f16", "rn")) for y, z in zip(hy, hz)]
    assert p.tolist() == [l | (u << 16) for l, u in zip(lo, hi)]


def test_set_eq_f16_and_setp_f16():
    a = [f16_bits(v) for v in (1.0, 2.0, math.nan)]
    b = [f16_bits(v) for v in (1.0, 1.0, math.nan)]
    s, gt = run(["u16", "u16"], ["b16", "u32"], """
        mov.b16 %h1, %a0;
        mov.b16 %h2, %a1;
        set.eq.f16.f16 %o0, %h1, %h2;
        setp.gt.f16 %p1, %h1, %h2;
        selp.u32 %o1, 1, 0, %p1;
    """, a, b)
    assert s.tolist() == [0x3C00, 0, 0]
    assert gt.tolist() == [0, 1, 0]


# ------------------------------------------------------------------------------------------------ refusals

def test_unsupported_alu_instruction_refused_at_load_with_its_line():
    ptx = kernel_ptx(["s64", "s64"], ["s64"], "add.sat.s64 %o0, %a0, %a1;")
    line = next(i for i, ln in enumerate(ptx.splitlines(), 1) if "add.sat.s64" in ln)
    with pytest.raises(CudaError) as ei:
        EmuModule.load(ptx.encode(), DeviceMemory(1 << 40, 1 << 20))
    assert ei.value.code == ERROR_CODES["cudaErrorInvalidPtx"]
    assert "add.sat.s64" in ei.value.message and str(line) in ei.value.message
