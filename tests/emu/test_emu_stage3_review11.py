"""Review of stop 34's stage-3 and native-build work (ccflags11, tierpolicy11, coldprof11, onesweeprun11): cases that
gave a wrong result or broke a guarantee, each failing on the code before its fix, and the edges the stop's changes
reach checked against the lockstep path."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu import native
from pyvgpu_daemon.emu.memory import DeviceMemory

from test_emu_ctagen import CTA, OFF, _cta_code
from test_emu_threadgen import HEAD, _module

# ------------------------------------------------------------- every tier's flags keep the lockstep path's bits
# Each thread reads two words a, b (as f32 and s32 both) and writes NOUT words: integer-to-float and width conversions
# (the float-to-integer ones have no C form: cgen._cvt), integer edges whose C would be undefined (INT_MIN / -1, division by zero, shifts by the width or more, signed overflow), NaN payloads
# through neg/abs/min/max, signed zeros, sqrt of a negative, mul then add (two roundings, never fused), fma,
# division, f64 and conversions between the widths. The quick tier (ctagen.QUICK: -O0 or -Og) and LEAN_O1 (onesweep's
# level) are this stop's new levels; the C compiler exploits undefined behaviour differently at each.
EDGES = HEAD + """
.visible .entry edges(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<8>; .reg .b16 %rs<4>; .reg .b32 %r<60>; .reg .b64 %rd<30>; .reg .f32 %f<40>; .reg .f64 %fd<20>;
  .shared .align 4 .b8 sh[1024];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.wide.u32 %rd3, %r4, 8; add.s64 %rd4, %rd2, %rd3;
  ld.global.v2.u32 {%r5, %r6}, [%rd4];
  mov.b32 %f1, %r5; mov.b32 %f2, %r6;
  mul.lo.u32 %r10, %r5, 3; cvt.u64.u32 %rd10, %r6; cvt.s64.s32 %rd11, %r5; shr.u64 %rd12, %rd10, 1;
  cvt.u32.u64 %r11, %rd12; add.s64 %rd13, %rd11, %rd10; cvt.u32.u64 %r12, %rd13; cvt.u16.u32 %rs1, %r5;
  cvt.s32.s16 %r13, %rs1; cvt.u32.u64 %r14, %rd11; shr.s64 %rd14, %rd11, 33; cvt.u32.u64 %r15, %rd14;
  cvt.rn.f32.s32 %f6, %r5; cvt.rn.f32.u32 %f7, %r6; cvt.rn.f32.s64 %f8, %rd13;
  add.f32 %f6, %f6, %f7; add.f32 %f6, %f6, %f8;
  div.s32 %r16, %r5, %r6; rem.s32 %r17, %r5, %r6; div.u32 %r18, %r5, %r6; rem.u32 %r19, %r6, %r5;
  shl.b32 %r20, %r5, %r6; shr.s32 %r21, %r5, %r6; shr.u32 %r22, %r6, %r5;
  add.s32 %r23, %r5, %r6; mul.lo.s32 %r24, %r5, %r6; mul.hi.s32 %r25, %r5, %r6; mad.lo.s32 %r26, %r5, %r6, %r5;
  neg.f32 %f7, %f1; abs.f32 %f8, %f2; min.f32 %f30, %f1, %f2;
  mov.b32 %r47, %f30; xor.b32 %r13, %r13, %r47; max.f32 %f9, %f2, %f1; sub.f32 %f10, %f2, %f1;
  sqrt.rn.f32 %f11, %f1; div.rn.f32 %f12, %f1, %f2; rcp.rn.f32 %f13, %f2;
  mul.f32 %f14, %f1, %f2; add.f32 %f15, %f14, %f1; fma.rn.f32 %f16, %f1, %f2, %f1; sub.f32 %f17, %f1, %f1;
  mul.f32 %f18, %f1, 0f00000000; add.f32 %f19, %f18, 0f80000000; sub.f32 %f20, %f18, %f18; neg.f32 %f21, %f19;
  cvt.f64.f32 %fd1, %f1; cvt.f64.f32 %fd2, %f2; mul.f64 %fd3, %fd1, %fd2; add.f64 %fd4, %fd3, %fd1;
  fma.rn.f64 %fd5, %fd1, %fd2, %fd3; div.rn.f64 %fd6, %fd1, %fd2; sqrt.rn.f64 %fd7, %fd2; cvt.rn.f32.f64 %f22, %fd4;
  mul.hi.u32 %r27, %r5, %r6; cvt.rn.f32.f64 %f23, %fd5; cvt.rn.f32.f64 %f24, %fd7; min.f64 %fd8, %fd1, %fd2;
  cvt.rn.f32.f64 %f25, %fd8; max.f32 %f26, %f1, 0f80000000; mul.lo.u64 %rd15, %rd10, %rd11; cvt.u32.u64 %r28, %rd15;
  setp.ltu.f32 %p1, %f1, %f2; selp.b32 %r29, 1, 2, %p1; setp.nan.f32 %p2, %f1, %f2; selp.b32 %r30, %r29, 4, %p2;
  setp.lt.s32 %p3, %r23, %r5; selp.b32 %r31, %r30, 8, %p3; setp.geu.f32 %p4, %f14, %f2; selp.b32 %r32, %r31, 16, %p4;
  ex2.approx.f32 %f3, %f1; lg2.approx.f32 %f4, %f2; rsqrt.approx.f32 %f5, %f1; popc.b32 %r45, %r5; clz.b32 %r46, %r6;
  add.s32 %r28, %r28, %r45; xor.b32 %r27, %r27, %r46;
  mov.b64 {%r33, %r34}, %fd3; mov.b64 {%r35, %r36}, %fd5; mov.b64 {%r37, %r38}, %fd6; mov.b64 {%r39, %r40}, %fd7;
  shl.b32 %r41, %r1, 2; mov.u32 %r42, sh; add.s32 %r42, %r42, %r41; st.shared.f32 [%r42], %f15;
  bar.sync 0;
  xor.b32 %r43, %r41, 4; mov.u32 %r44, sh; add.s32 %r44, %r44, %r43; ld.shared.f32 %f27, [%r44];
  mul.f32 %f28, %f27, %f2; add.f32 %f29, %f28, %f16;
  mul.f32 %f31, %f1, %f27; sub.f32 %f32, %f31, %f2; mul.f64 %fd9, %fd1, %fd1; sub.f64 %fd10, %fd9, %fd2;
  cvt.rn.f32.f64 %f33, %fd10;
  mul.wide.u32 %rd5, %r4, 192; add.s64 %rd6, %rd1, %rd5;
  st.global.v4.u32 [%rd6], {%r10, %r11, %r12, %r13};
  st.global.v4.u32 [%rd6+16], {%r14, %r15, %r16, %r17};
  st.global.v4.u32 [%rd6+32], {%r18, %r19, %r20, %r21};
  st.global.v4.u32 [%rd6+48], {%r22, %r23, %r24, %r25};
  st.global.v4.u32 [%rd6+64], {%r26, %r27, %r28, %r32};
  st.global.v4.f32 [%rd6+80], {%f3, %f4, %f5, %f6};
  st.global.v4.f32 [%rd6+96], {%f7, %f8, %f9, %f10};
  st.global.v4.f32 [%rd6+112], {%f11, %f12, %f13, %f15};
  st.global.v4.f32 [%rd6+128], {%f16, %f17, %f19, %f20};
  st.global.v4.f32 [%rd6+144], {%f21, %f22, %f23, %f24};
  st.global.v4.f32 [%rd6+160], {%f25, %f26, %f29, %f32};
  st.global.v2.u32 [%rd6+176], {%r33, %r36}; st.global.f32 [%rd6+184], %f33; st.global.u32 [%rd6+188], %r37;
  ret;
}
"""
NOUT = 48


def _edge_inputs(n: int) -> np.ndarray:
    """n (a, b) pairs of 32-bit words: floats of every magnitude, NaNs with payloads and signs, signed zeros,
    subnormals, integers at the edges of s32/u32 (INT_MIN, -1, 0, shift counts past 31)."""
    rng = np.random.default_rng(34)
    with np.errstate(over="ignore"):            # (infinities too)
        f = (rng.standard_normal(2 * n) * np.exp2(rng.integers(-150, 128, 2 * n))).astype(np.float32).view(np.uint32)
    special = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
                        0xFFA5A5A5, 0x00000001, 0x80000001, 0x007FFFFF, 0x4F000000, 0xCF000000, 0x4F800000,
                        0x5F000000, 0xDF000001, 0x3F000000, 0x3FC00000, 0xBF000000, 0x40200000,
                        0x80000000, 0xFFFFFFFF, 0x7FFFFFFF, 0x00000020, 0x00000021, 0x0000001F, 0x00000040,
                        0x80000000, 0x00000000, 0xFFFFFFFF, 0x80000000, 0x00000003], np.uint32)
    words = f.copy()
    # every special word against every other (both orders), then random floats, then random integers
    pairs = np.array([(x, y) for x in special for y in special], np.uint32).reshape(-1)
    words[:len(pairs)] = pairs[:len(words)]
    ints = rng.integers(0, 1 << 32, 2 * n, dtype=np.uint64).astype(np.uint32)
    words[len(pairs):len(pairs) + n // 2] = ints[:n // 2]  # (n >= 2048: 1024 pairs first)
    return words


def _run_edges(mode: dict, data: np.ndarray, n: int) -> tuple[bytes, bool]:
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(EDGES, mode, mem)
    out, src = mem.alloc(4 * NOUT * n), mem.alloc(8 * n)
    mem.write(src, data.tobytes())
    mod.launch("edges", (n // 128, 1, 1), (128, 1, 1), 0, struct.pack("<QQ", out, src))
    return bytes(mem.read(out, 4 * NOUT * n)), (_cta_code(mod, "edges") is not None if mode is CTA else False)


def _levels() -> dict[str, tuple[str, ...]]:
    from pyvgpu_daemon.emu.translator import ctagen
    return {"quick": tuple(ctagen.QUICK.flags), "-O0": ("-O0",), "-Og": ("-Og",),
            "lean": tuple(getattr(ctagen, "LEAN_O1", ("-O1",))), "-O1": ("-O1",)}


@pytest.mark.parametrize("level", ["quick", "-O0", "-Og", "lean", "-O1"])
def test_every_tiers_level_keeps_the_lockstep_bits_at_the_edges(monkeypatch, level):
    from pyvgpu_daemon.emu.translator import ctagen
    opts = _levels()[level]
    monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(0, opts, 1.0),))
    every = native.FLAGS + tuple(ctagen.flags(""))
    assert "-ffp-contract=off" in every
    assert not {"-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-ffinite-math-only", "-fno-signed-zeros",
                "-freciprocal-math", "-fassociative-math", "-ffp-contract=fast", "-fcx-limited-range",
                "-fexcess-precision=fast"} & set(every)
    n = 16 * 128
    data = _edge_inputs(n)
    on, ran = _run_edges(CTA, data, n)
    off, _ = _run_edges(OFF, data, n)
    assert ran, "the kernel did not run a CTA at a time"
    a, b = np.frombuffer(on, np.uint32).reshape(n, NOUT), np.frombuffer(off, np.uint32).reshape(n, NOUT)
    bad = np.argwhere(a != b)
    assert not len(bad), [(int(t), int(w), hex(a[t, w]), hex(b[t, w]), hex(data[2 * t]), hex(data[2 * t + 1]))
                          for t, w in bad[:8]]


# ------------------------------------------------- CUB's onesweep at the quick tier's level, its CTAs on two threads
@pytest.mark.parametrize("level", ["quick", "-Og"])
def test_cub_onesweep_at_the_quick_tiers_level_on_two_threads_keeps_the_lockstep_bits(monkeypatch, level):
    """The cold run's code: onesweep (talking CTAs: set aside and resumed on the other thread's register file,
    ctaatomic.CtaRegisters) built at the quick tier's level (-O0 where the global accesses' hint check is a call,
    -Og where it is inlined: threadgen.TG), every buffer as the lockstep path writes it and the sort as the host's."""
    from pyvgpu_daemon.emu.limits import EmuLimits
    from pyvgpu_daemon.emu.translator import ctagen
    from test_emu_ctasplit import TILE, _onesweep
    monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(0, _levels()[level], 1.0),))
    n = 3 * TILE + 77
    keys = np.random.default_rng(11).integers(0, 1 << 32, n, dtype=np.uint32)
    keys[::5] = keys[0]                                   # (a digit that many keys share: long runs per CTA)
    got, kernel = _onesweep(EmuLimits(native="on", ctagen=True, talk_threads=2), keys, 16)
    assert isinstance(kernel.native_make(), ctagen.CtaCode), "onesweep did not run a CTA at a time"
    order = np.argsort((keys >> 16) & 255, kind="stable")
    assert got[0] == keys[order].tobytes() and got[1] == order.astype(np.uint32).tobytes()
    want, _ = _onesweep(False, keys, 16)
    assert got == want


# ----------------------------------------------------- a compiler that does not know one of LEAN_O1's flags (ccflags11)
OLD_GCC = ("case \" $* \" in *' -fno-ipa-modref '*) echo \"cc1: error: unrecognized command-line option "
           "'-fno-ipa-modref'\" >&2; exit 1;; esac; exec cc \"$@\"")


def test_a_compiler_without_a_lean_o1_flag_builds_at_its_o_level(fake_cc, tmp_path, monkeypatch):
    # LEAN_O1's -f flags are GCC 12's: GCC before 11 has no -fno-ipa-modref (clang none of the -fno-tree-* and IPA
    # ones) and refuses the whole command, so every build at that level (onesweep's, 2.4 MB) failed and was
    # remembered as failed: the kernel never left the quick tier, or the NumPy code, on that machine
    from pyvgpu_daemon.emu.translator import ctagen
    monkeypatch.setattr(native, "_warned", set())
    big = "x" * (4 << 20)
    assert ctagen.flags(big)[-len(ctagen.LEAN_O1):] == ctagen.LEAN_O1       # (this machine's GCC takes them)
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc(OLD_GCC)))
    flags = ctagen.flags(big)
    assert "-fno-ipa-modref" not in flags and [f for f in flags if f.startswith("-O")][-1] == "-O1"
    lib = native.load("int f(void) { return 7; }\n", tmp_path, extra=flags)
    assert lib is not None and lib.f() == 7 and not list(tmp_path.glob("*.failed"))


def test_a_kernel_at_lean_o1_runs_native_with_a_compiler_without_its_flags(fake_cc, monkeypatch, tmp_path):
    from pyvgpu_daemon.emu.translator import ctagen
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc(OLD_GCC)))
    monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(0, ctagen.LEAN_O1, 1.0),))
    n = 16 * 128
    data = _edge_inputs(n)
    on, ran = _run_edges(CTA, data, n)
    off, _ = _run_edges(OFF, data, n)
    assert ran, "the kernel did not run a CTA at a time"
    assert on == off
