"""The native path (translator/cgen.py, emu/native.py): every instruction form with a C form computes exactly the
bits its NumPy function in ops/ computes, on random values and on the special ones (NaN with payloads, infinities,
signed zeros, subnormals, extremes); whole kernels give identical memory with native code on and off; and without
a C compiler kernels still run (as NumPy code). These tests pin the lockstep native runs (threadgen=False,
ctagen=False): the thread-at-a-time code of translator/threadgen.py and the CTA-at-a-time code of
translator/ctagen.py have their own tests (test_emu_threadgen.py, test_emu_ctagen.py)."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pyvgpu_daemon.emu import native
from pyvgpu_daemon.errors import CudaError, code_of
from pyvgpu_daemon.emu.layout import LOC_WIN, SH_WIN
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.ops import build_alu
from pyvgpu_daemon.emu.ptx import ir
from pyvgpu_daemon.emu.ptx.parser import parse_literal
from pyvgpu_daemon.emu.ptx.types import BITS, DTYPES
from pyvgpu_daemon.emu.translator import cgen
from pyvgpu_daemon.emu.translator.codegen import Codegen

N = 4096
RNG = np.random.default_rng(7)
_U = {16: np.uint16, 32: np.uint32, 64: np.uint64}

_F32_SPECIAL = [0x7FC00000, 0xFFC00000, 0x7FA00001, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x00000001,
                0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x4B000001, 0x33800000]
_F64_SPECIAL = [0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000000, 0xFFF0000000000000, 0, 1 << 63, 1,
                0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0x3FF0000000000000, 0xBFF0000000000000]


def values(t: str) -> np.ndarray:
    """N raw-bit values of PTX type t: specials first, then random values of every magnitude."""
    if t == "pred":
        return RNG.integers(0, 2, N).astype(bool)
    w = BITS[t]
    ut = _U[w]
    if t == "f32":
        rnd = np.concatenate([RNG.integers(0, 1 << 32, N // 2, dtype=np.uint64).astype(np.uint32),
                              RNG.standard_normal(N // 2).astype(np.float32).view(np.uint32)])
        special = np.array(_F32_SPECIAL, np.uint32)
    elif t == "f64":
        rnd = np.concatenate([RNG.integers(0, 1 << 63, N // 2, dtype=np.uint64) * np.uint64(2),
                              RNG.standard_normal(N // 2).view(np.uint64)])
        special = np.array(_F64_SPECIAL, np.uint64)
    else:
        hi = 1 << w
        rnd = RNG.integers(0, hi, N, dtype=np.uint64).astype(ut)
        special = np.array([0, 1, hi - 1, hi >> 1, (hi >> 1) - 1, 2, w, w - 1, w + 1], ut)
    v = rnd.astype(ut)
    v[:len(special)] = special
    return RNG.permutation(v) if t not in ("f32", "f64") else np.concatenate([special, rnd])[:N].astype(ut)


def prepare(text: str, srcs: list[str], dsts: list[str]):
    """One instruction (PTX text with %a0.. sources, %d0.. destinations of the given types): its inputs, the bits
    its NumPy function (build_alu) computes per destination, and its run's C function (named later)."""
    op, _, rest = text.partition(" ")
    parts = op.split(".")
    ops = [o.strip() for o in rest.split(",")]

    def operand(o):
        return ir.Reg(o) if o.startswith("%") else parse_literal(o)
    ins = ir.Instr(parts[0], tuple(parts[1:]), [operand(o) for o in ops[0].split("|")],
                   [operand(o) for o in ops[1:]])
    regs = {f"%a{k}": (1 if t == "pred" else BITS[t]) for k, t in enumerate(srcs)}
    regs.update({f"%d{k}": (1 if t == "pred" else BITS[t]) for k, t in enumerate(dsts)})
    inputs = [values(t) for t in srcs]
    g = Codegen.__new__(Codegen)
    if ins.opcode == "mov":               # not an ALU op: the code generator copies the bits
        ref = [inputs[0] if inputs else np.asarray(g.imm(ins.srcs[0], parts[-1], ins))]
    elif ins.opcode == "cvta":            # generic = global addresses; shared/local ones sit in their windows
        win = np.uint64({"shared": SH_WIN, "local": LOC_WIN}.get(parts[-2], 0))
        ref = [inputs[0] - win if parts[1] == "to" else inputs[0] + win]
    else:
        alu = build_alu(ins)
        args = []
        it = iter(inputs)
        for o, t in zip(ins.srcs, alu.src_types):
            args.append(next(it).view(DTYPES[t]) if isinstance(o, ir.Reg) else g.imm(o, t, ins))
        with np.errstate(all="ignore"):
            ref = alu.fn(*args)
        ref = list(ref) if isinstance(ref, tuple) else [ref]
    bits = [np.asarray(r).astype(bool) if t == "pred" else np.broadcast_to(np.asarray(r), (N,)).view(_U[BITS[t]])
            for r, t in zip(ref, dsts)]
    run = cgen.Run(0, [ins], [f"%a{k}" for k in range(len(srcs))], [f"%d{k}" for k in range(len(dsts))])
    return regs, inputs, bits, run, cgen.c_body([ins], regs, g.imm)


F = ["f32", "f64"]
FORMS = [
    # (instruction, source types, destination types)
    *[(f"{op}.{t} %d0, %a0, %a1", [t, t], [t]) for op in ("add", "sub", "mul") for t in F],
    *[(f"{op}.rn.ftz.f32 %d0, %a0, %a1", ["f32"] * 2, ["f32"]) for op in ("add", "sub", "mul")],
    *[(f"fma.rn.{t} %d0, %a0, %a1, %a2", [t] * 3, [t]) for t in F],
    ("fma.rn.ftz.f32 %d0, %a0, %a1, %a2", ["f32"] * 3, ["f32"]),
    ("mad.f32 %d0, %a0, %a1, %a2", ["f32"] * 3, ["f32"]),
    ("fma.rn.f32 %d0, %a0, 0f3E6D3389, 0f3F800000", ["f32"], ["f32"]),
    *[(f"div.rn.{t} %d0, %a0, %a1", [t, t], [t]) for t in F],
    ("div.approx.f32 %d0, %a0, %a1", ["f32"] * 2, ["f32"]),
    ("div.full.ftz.f32 %d0, %a0, %a1", ["f32"] * 2, ["f32"]),
    ("div.approx.f32 %d0, 0f3F800000, %a0", ["f32"], ["f32"]),
    *[(f"rcp.rn.{t} %d0, %a0", [t], [t]) for t in F],
    ("rcp.approx.ftz.f32 %d0, %a0", ["f32"], ["f32"]), ("div.approx.ftz.f32 %d0, %a0, %a1", ["f32"] * 2, ["f32"]),
    *[(f"sqrt.rn.{t} %d0, %a0", [t], [t]) for t in F],
    ("sqrt.approx.ftz.f32 %d0, %a0", ["f32"], ["f32"]),
    ("rsqrt.approx.f32 %d0, %a0", ["f32"], ["f32"]), ("rsqrt.approx.ftz.f32 %d0, %a0", ["f32"], ["f32"]),
    *[(f"{op}.{t} %d0, %a0", [t], [t]) for op in ("abs", "neg") for t in F],
    ("abs.ftz.f32 %d0, %a0", ["f32"], ["f32"]),
    *[(f"{op}.{t} %d0, %a0, %a1", [t, t], [t]) for op in ("min", "max") for t in F],
    *[(f"{op}.NaN.f32 %d0, %a0, %a1", ["f32"] * 2, ["f32"]) for op in ("min", "max")],
    ("max.ftz.f32 %d0, %a0, %a1", ["f32"] * 2, ["f32"]),
    *[(f"{op}.{t} %d0, %a0, %a1", [t, t], [t]) for op in ("add", "sub") for t in ("s32", "u32", "s64", "u16")],
    *[(f"mul.lo.{t} %d0, %a0, %a1", [t, t], [t]) for t in ("s32", "u32", "u64", "s16", "u16")],
    *[(f"mul.hi.{t} %d0, %a0, %a1", [t, t], [t]) for t in ("s32", "u32", "s64", "u64")],
    ("mul.wide.s32 %d0, %a0, %a1", ["s32"] * 2, ["s64"]), ("mul.wide.u32 %d0, %a0, 4", ["u32"], ["u64"]),
    ("mul.wide.s16 %d0, %a0, %a1", ["s16"] * 2, ["s32"]),
    *[(f"{op}.{t} %d0, %a0, %a1", [t, t], [t]) for op in ("div", "rem") for t in ("s32", "u32", "s64", "u64", "s16")],
    *[(f"{op}.{t} %d0, %a0, {b}", [t], [t]) for op in ("div", "rem") for t, b in (("s32", "-1"), ("s64", "-1"),
                                                                                 ("u32", "0"), ("s16", "0"))],
    ("mad.lo.s32 %d0, %a0, %a1, %a2", ["s32"] * 3, ["s32"]),
    ("mad.lo.u16 %d0, %a0, %a1, %a2", ["u16"] * 3, ["u16"]),
    ("mad.wide.u32 %d0, %a0, %a1, %a2", ["u32", "u32", "u64"], ["u64"]),
    ("mad.hi.u32 %d0, %a0, %a1, %a2", ["u32"] * 3, ["u32"]),
    *[(f"{op}.{t} %d0, %a0", [t], [t]) for op in ("neg", "abs") for t in ("s32", "s64")],
    *[(f"{op}.{t} %d0, %a0, %a1", [t, t], [t]) for op in ("min", "max") for t in ("s32", "u32", "s64", "u64")],
    *[(f"{op}.{t} %d0, %a0, %a1", [t, t], [t]) for op in ("and", "or", "xor") for t in ("b32", "b64", "pred")],
    *[(f"not.{t} %d0, %a0", [t], [t]) for t in ("b16", "b32", "b64", "pred")],
    *[(f"shl.{t} %d0, %a0, %a1", [t, "u32"], [t]) for t in ("b32", "b64", "b16")],
    *[(f"shr.{t} %d0, %a0, %a1", [t, "u32"], [t]) for t in ("b32", "u64", "s32", "s64", "s16")],
    ("shl.b32 %d0, %a0, 3", ["b32"], ["b32"]), ("shr.s32 %d0, %a0, 40", ["s32"], ["s32"]),
    *[(f"{op}.{t} %d0, %a0", [t], ["u32"]) for op in ("popc", "clz") for t in ("b32", "b64")],
    *[(f"setp.{c}.{t} %d0, %a0, %a1", [t, t], ["pred"]) for t in F
      for c in ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")],
    *[(f"setp.{c}.{t} %d0, %a0, %a1", [t, t], ["pred"]) for t in ("s32", "u32", "s64", "u64", "b32")
      for c in ("eq", "ne", "lt", "le", "gt", "ge")],
    ("setp.lo.u32 %d0, %a0, %a1", ["u32"] * 2, ["pred"]), ("setp.hs.u64 %d0, %a0, %a1", ["u64"] * 2, ["pred"]),
    ("setp.gt.ftz.f32 %d0, %a0, %a1", ["f32"] * 2, ["pred"]),
    ("setp.lt.and.f32 %d0, %a0, %a1, %a2", ["f32", "f32", "pred"], ["pred"]),
    ("setp.ne.or.s32 %d0|%d1, %a0, %a1, %a2", ["s32", "s32", "pred"], ["pred", "pred"]),
    *[(f"selp.{t} %d0, %a0, %a1, %a2", [t, t, "pred"], [t]) for t in ("f32", "b32", "s64", "f64", "u16")],
    ("selp.f32 %d0, %a0, 0f00000000, %a1", ["f32", "pred"], ["f32"]),
    *[(f"cvt.{d}.{s} %d0, %a0", [s], [d]) for d, s in (("u64", "u32"), ("s64", "s32"), ("u32", "u64"),
                                                        ("s32", "s64"), ("s16", "s32"), ("u32", "s16"),
                                                        ("s32", "u16"), ("f64", "f32"))],
    *[(f"cvt.rn.{d}.{s} %d0, %a0", [s], [d]) for d, s in (("f32", "s32"), ("f32", "u32"), ("f32", "s64"),
                                                           ("f32", "u64"), ("f64", "s32"), ("f64", "u64"),
                                                           ("f64", "s64"), ("f32", "f64"))],
    *[(f"mov.{t} %d0, %a0", [t], [t]) for t in ("b32", "f64", "pred", "u16")],
    ("mov.f32 %d0, 0fBF000000", [], ["f32"]),
    *[(f"{op}.approx{z}.f32 %d0, %a0", ["f32"], ["f32"]) for op in ("ex2", "lg2") for z in ("", ".ftz")],
    *[(f"cvta{to}.{sp}.u64 %d0, %a0", ["u64"], ["u64"]) for to in ("", ".to")
      for sp in ("global", "const", "shared", "local")],
]


@pytest.fixture(scope="module")
def forms():
    """Every form prepared, and its C function built: all of them in one library (one compiler run)."""
    prepared = [prepare(*f) for f in FORMS]
    source = cgen.PRELUDE + "".join(cgen.function_source(run, e, regs, f"f{k}")
                                    for k, (regs, _, _, run, e) in enumerate(prepared))
    lib = native.load(source)
    assert lib is not None, "the test machine has a C compiler"
    return prepared, lib


@pytest.mark.parametrize("k", range(len(FORMS)), ids=[f[0].split(" ")[0] + "/" + ",".join(f[1]) for f in FORMS])
def test_c_form_equals_the_numpy_semantics(k, forms):
    prepared, lib = forms
    regs, inputs, ref, run, _ = prepared[k]
    nat = cgen.NativeRun(getattr(lib, f"f{k}"), [regs[r] for r in run.inputs],
                         [regs[r] for r in run.outputs])(N, *inputs)
    for d, (r, n) in enumerate(zip(ref, nat)):
        bad = np.flatnonzero(r != n)
        assert bad.size == 0, f"{FORMS[k][0]}: destination {d} differs at {bad[:5]}: numpy {r[bad[:5]]} C {n[bad[:5]]}"


def test_ex2_lg2_c_forms_equal_numpy_over_their_whole_domain(forms):
    """Beyond the shared random values: ex2 over every exponent it can produce, lg2 over every positive magnitude."""
    prepared, lib = forms
    rng = np.random.default_rng(3)
    cases = {"ex2": rng.uniform(-160, 140, 200000).astype(np.float32),
             "lg2": rng.integers(0, 0x7F800000, 200000, dtype=np.uint32).view(np.float32)}
    for k, (text, _, _) in enumerate(FORMS):
        op = text.split(".")[0]
        if op not in cases:
            continue
        x = cases[op]
        want = build_alu(prepared[k][3].instrs[0]).fn(x).view(np.uint32)
        got = cgen.NativeRun(getattr(lib, f"f{k}"), [32], [32])(x.size, x.view(np.uint32))[0]
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{text}: differs at inputs {x[bad[:5]]}: numpy {want[bad[:5]]} C {got[bad[:5]]}"


def test_instructions_without_a_c_form_stay_numpy():
    regs = {"%a0": 32, "%d0": 32}
    g = Codegen.__new__(Codegen)
    for text in ("cvta.to.global.u32", "cvta.param.u64", "sin.approx.f32", "tanh.approx.f32", "add.rz.f32", "add.sat.s32", "fma.rm.f32",
                 "cvt.rzi.s32.f32", "add.f16"):
        parts = text.split(".")
        ins = ir.Instr(parts[0], tuple(parts[1:]), [ir.Reg("%d0")], [ir.Reg("%a0")] * 2)
        with pytest.raises(cgen.NoC):
            cgen.c_body([ins], regs, g.imm)


KERNEL = """
.version 9.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 in, .param .u64 out, .param .u32 n)
{
  .reg .pred %p<4>; .reg .f32 %f<20>; .reg .b32 %r<10>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd6, %rd1;
  mul.wide.u32 %rd3, %r5, 8;
  add.s64 %rd4, %rd6, %rd3;
  ld.global.v2.f32 {%f1, %f2}, [%rd4];
  mul.f32 %f3, %f1, %f2;
  fma.rn.f32 %f4, %f1, 0f3F000000, %f3;
  div.rn.f32 %f5, %f4, %f2;
  abs.f32 %f6, %f5;
  setp.gt.f32 %p2, %f6, 0f3F800000;
  rsqrt.approx.f32 %f7, %f6;
  selp.f32 %f8, %f7, %f5, %p2;
  ex2.approx.f32 %f9, %f8;
  sub.f32 %f10, %f9, %f1;
  min.f32 %f11, %f10, %f2;
  max.NaN.f32 %f12, %f11, %f3;
  @%p2 add.f32 %f12, %f12, 0f40000000;
  cvt.rzi.s32.f32 %r6, %f12;
  cvt.rn.f32.s32 %f13, %r6;
  add.s32 %r7, %r6, %r5;
  shl.b32 %r8, %r7, 2;
  add.s64 %rd5, %rd2, %rd3;
  st.global.v2.f32 [%rd5], {%f12, %f13};
DONE:
  ret;
}
"""


def _launch(limits: EmuLimits, data: np.ndarray) -> bytes:
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(KERNEL.encode(), mem, limits=limits)
    n = data.size // 2
    src = mem.alloc(data.nbytes)
    dst = mem.alloc(data.nbytes)
    mem.write(src, data.tobytes())
    mod.launch("k", ((n + 255) // 256, 1, 1), (256, 1, 1), 0, struct.pack("<QQI", src, dst, n))
    return bytes(mem.read(dst, data.nbytes)), mod


def test_kernel_gives_the_same_bits_with_native_code_on_and_off():
    data = np.concatenate([values("f32"), values("f32")]).view(np.float32)
    on, mod_on = _launch(EmuLimits(threadgen=False, ctagen=False, native="on"), data)
    off, mod_off = _launch(EmuLimits(threadgen=False, ctagen=False, native="off"), data)
    assert mod_on.kernel("k").native_make() is not None          # the native path really ran
    assert on == off


def test_a_build_says_in_one_log_line_which_path_the_kernel_takes(monkeypatch, caplog):
    data = np.concatenate([values("f32"), values("f32")]).view(np.float32)
    limits = EmuLimits(threadgen=False, ctagen=False, native="on")
    for cc, path in ((None, "lockstep with native runs"), ("/nonexistent/cc", "NumPy code (no native code)")):
        if cc:
            monkeypatch.setenv("PYVGPU_EMU_CC", cc)
        caplog.clear()
        with caplog.at_level("INFO", logger="pyvgpu.daemon"):
            _launch(limits, data)
        (line,) = [r.message for r in caplog.records if "from now on" in r.message]
        assert f"kernel k runs {path} from now on (build " in line, line


def test_without_a_compiler_kernels_run_as_numpy(monkeypatch, caplog):
    monkeypatch.setenv("PYVGPU_EMU_CC", "/nonexistent/cc")
    monkeypatch.setattr(native, "_warned", set())
    data = np.concatenate([values("f32"), values("f32")]).view(np.float32)
    with caplog.at_level("WARNING", logger="pyvgpu.daemon"):
        out, mod = _launch(EmuLimits(threadgen=False, ctagen=False, native="on"), data)
    assert mod.kernel("k").native_make() is None
    assert out == _launch(EmuLimits(threadgen=False, ctagen=False, native="off"), data)[0]
    assert any("native code unavailable" in r.message for r in caplog.records)


def test_library_cache_keeps_the_most_recently_used(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "MAX_CACHED", 3)
    src = "int f%d(void) { return %d; }\n"
    files = []
    for i in range(3):
        before = set(tmp_path.glob("*.so"))
        assert native.load(src % (i, i), tmp_path) is not None
        (new,) = set(tmp_path.glob("*.so")) - before
        os.utime(new, (1000 + i, 1000 + i))                         # built in the order 0, 1, 2
        files.append(new)
    assert native.load(src % (0, 0), tmp_path).f0() == 0            # a cache hit marks 0 as used
    assert native.load(src % (3, 3), tmp_path).f3() == 3            # a fourth library: the least recently used goes
    left = set(tmp_path.glob("*.so"))
    assert len(left) == 3 and files[0] in left and files[1] not in left and files[2] in left
    assert native.load(src % (1, 1), tmp_path).f1() == 1            # a removed one is simply built again
    assert len(set(tmp_path.glob("*.so"))) == 3


# ---------------------------------------------------------------------------------------------- loads in native runs
LOADS = """
.version 9.0
.target sm_75
.address_size 64
.const .align 4 .u32 ctab[4] = {11, 22, 33, 44};
.visible .entry ld(.param .u64 in, .param .u64 out, .param .align 8 .b8 blob[32])
{
  .reg .pred %p<4>; .reg .f32 %f<4>; .reg .f64 %fd<4>; .reg .b32 %r<60>; .reg .b64 %rd<30>;
  .shared .align 16 .b8 sh[2048];
  .local .align 16 .b8 loc[32];
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 16;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 4;
  add.s32 %r8, %r6, %r7;
  st.shared.v4.u32 [%r8], {%r2, %r3, %r4, %r5};
  mov.u64 %rd5, loc;
  st.local.v4.u32 [%rd5], {%r5, %r4, %r3, %r2};
  mov.u32 %r22, 7;
  bar.sync 0;
  xor.b32 %r9, %r1, 5;
  shl.b32 %r10, %r9, 4;
  add.s32 %r11, %r6, %r10;
  mov.b64 %rd6, blob;
  cvt.u64.u32 %rd7, %r11;
  cvta.shared.u64 %rd8, %rd7;
  setp.lt.u32 %p1, %r1, 7;
  ld.shared.u32 %r12, [%r11+4];
  ld.shared.s8 %r13, [%r11+3];
  ld.global.s8 %r14, [%rd4+7];
  ld.global.u8 %r15, [%rd4+7];
  ld.global.s16 %r16, [%rd4+6];
  ld.global.nc.f32 %f1, [%rd4+8];
  ld.global.v2.u32 {%r17, %r18}, [%rd4+8];
  ld.local.u32 %r19, [%rd5+12];
  ld.const.u32 %r20, [ctab+8];
  ld.param.u32 %r21, [%rd6+8];
  @%p1 ld.global.u32 %r22, [%rd4+4];
  ld.u32 %r23, [%rd8+8];
  ld.u32 %r24, [%rd4+12];
  ld.global.f64 %fd1, [%rd4+8];
  ld.global.s32 %rd9, [%rd4+4];
  add.f32 %f2, %f1, %f1;
  add.s32 %r25, %r12, %r13;
  mul.wide.u32 %rd10, %r1, 128;
  add.s64 %rd11, %rd2, %rd10;
  st.global.v4.u32 [%rd11], {%r12, %r13, %r14, %r15};
  st.global.v4.u32 [%rd11+16], {%r16, %r17, %r18, %r19};
  st.global.v4.u32 [%rd11+32], {%r20, %r21, %r22, %r23};
  st.global.v2.u32 [%rd11+48], {%r24, %r25};
  st.global.f32 [%rd11+56], %f2;
  st.global.f64 [%rd11+64], %fd1;
  st.global.u64 [%rd11+72], %rd9;
  ret;
}

.visible .entry short(.param .u64 in, .param .u64 out)
{
  .reg .b32 %r<6>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  shl.b32 %r2, %r2, 8;
  add.s32 %r1, %r1, %r2;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  st.global.u32 [%rd5], %r1;
  ld.global.u32 %r3, [%rd4];
  add.s32 %r4, %r3, %r1;
  st.global.u32 [%rd5], %r4;
  ret;
}

.visible .entry bad(.param .u64 in, .param .u64 out, .param .u64 gofs, .param .u32 sofs, .param .u32 lofs)
{
  .reg .b32 %r<20>; .reg .b64 %rd<20>;
  .shared .align 16 .b8 sh[256];
  .local .align 16 .b8 loc[16];
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  ld.param.u64 %rd3, [gofs];
  ld.param.u32 %r1, [sofs];
  ld.param.u32 %r2, [lofs];
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd4, %r3, 4;
  add.s64 %rd5, %rd1, %rd4;
  add.s64 %rd6, %rd5, %rd3;
  mov.u32 %r4, sh;
  add.s32 %r5, %r4, %r1;
  mov.u64 %rd7, loc;
  cvt.u64.u32 %rd8, %r2;
  add.s64 %rd9, %rd7, %rd8;
  ld.global.u32 %r6, [%rd6];
  ld.shared.u32 %r7, [%r5];
  ld.local.u32 %r8, [%rd9];
  add.s32 %r9, %r6, %r7;
  add.s32 %r10, %r9, %r8;
  add.s64 %rd10, %rd2, %rd4;
  st.global.u32 [%rd10], %r10;
  ret;
}
"""


def _loads_launch(limits: EmuLimits, kernel: str, params, threads: int = 64):
    """(output bytes, the module) of one launch of LOADS' kernel over 64 x 16 input bytes; params(in, out)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(LOADS.encode(), mem, limits=limits)
    data = np.random.default_rng(11).integers(0, 1 << 32, 64 * 4, dtype=np.uint64).astype(np.uint32)
    src = mem.alloc(data.nbytes)
    dst = mem.alloc(64 * 128)
    mem.write(src, data.tobytes())
    mod.launch(kernel, (1, 1, 1), (threads, 1, 1), 0, params(src, dst))
    return bytes(mem.read(dst, 64 * 128)), mod


def _blob(src: int, dst: int) -> bytes:
    return struct.pack("<QQ", src, dst) + bytes(range(32))


def test_loads_of_every_space_give_the_same_bits_as_numpy():
    """Global (8-bit to 64-bit, signed and unsigned, vectors, .nc), shared, local, const, .param through a register,
    generic (shared and global) and guarded loads as native code equal the NumPy code's."""
    on, mod = _loads_launch(EmuLimits(threadgen=False, ctagen=False, native="on"), "ld", _blob)
    off, _ = _loads_launch(EmuLimits(threadgen=False, ctagen=False, native="off"), "ld", _blob)
    runs = [r for r in mod.kernel("ld").native_runs if r.mem]
    assert runs and not any(r.declined for r in runs)                # the loads ran as C
    assert on == off
    out = np.frombuffer(on, np.uint32).reshape(64, 32)
    assert (out[:, 8] == 33).all() and (out[:, 9] == 0x0B0A0908).all()      # ctab[2]; blob bytes 8..11
    assert (out[7:, 10] == 7).all() and (out[:7, 10] != 7).all()             # the guarded load: lanes 0..6


# bad accesses of LOADS' `bad` kernel: offsets of its global, shared and local addresses (test_emu_threadgen.py too)
BAD_LOADS = pytest.mark.parametrize(
    "gofs, sofs, lofs", [(1 << 20, 0, 0), (2, 0, 0), (-8, 0, 0), (0, 256, 0), (0, 2, 0), (0, 0, 16), (0, 0, 1 << 31)],
    ids=["global-past", "global-misaligned", "global-before", "shared-past", "shared-misaligned", "local-past",
         "local-far"])


@BAD_LOADS
def test_a_bad_load_in_a_native_run_is_the_same_error(gofs, sofs, lofs):
    """An access the C code cannot serve makes the run's NumPy code run, which raises the error it always did."""
    def params(src, dst):
        return struct.pack("<QQqII", src, dst, gofs, sofs & 0xFFFFFFFF, lofs & 0xFFFFFFFF)
    errors = []
    for native_mode in ("on", "off"):
        with pytest.raises(CudaError) as e:
            _loads_launch(EmuLimits(threadgen=False, ctagen=False, native=native_mode), "bad", params, threads=32)
        errors.append((e.value.code, e.value.message))
    assert errors[0] == errors[1]
    assert errors[0][0] in (code_of("cudaErrorIllegalAddress"), code_of("cudaErrorMisalignedAddress"))
    assert _declined(params) == 1           # the C code met the access and left it to the NumPy code


def _declined(params) -> int:
    """How many calls of the bad kernel's native runs left their accesses to the NumPy code in a launch."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(LOADS.encode(), mem, limits=EmuLimits(threadgen=False, ctagen=False, native="on"))
    src, dst = mem.alloc(64 * 16), mem.alloc(64 * 128)
    try:
        mod.launch("bad", (1, 1, 1), (32, 1, 1), 0, params(src, dst))
    except CudaError:
        pass
    return sum(r.declined for r in mod.kernel("bad").native_runs if r.mem)


def test_good_accesses_of_the_bad_kernel_stay_in_c():
    assert _declined(lambda src, dst: struct.pack("<QQqII", src, dst, 4, 8, 4)) == 0


@pytest.mark.parametrize("ctas", [16, 64])
def test_a_short_run_of_global_loads_is_c_in_small_chunks_numpy_in_large_ones(ctas):
    """A run whose only loads are global and which is short is C up to cgen.LOAD_RUN_LANES lanes a chunk, the NumPy
    code beyond (its coalesced and same-address loads are faster there); the bits are the same either way."""
    n = ctas * 256
    data = np.random.default_rng(5).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    outs = []
    for mode in ("on", "off"):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = EmuModule.load(LOADS.encode(), mem, limits=EmuLimits(threadgen=False, ctagen=False, native=mode))
        src, dst = mem.alloc(4 * n), mem.alloc(4 * n)
        mem.write(src, data.tobytes())
        mod.launch("short", (ctas, 1, 1), (256, 1, 1), 0, struct.pack("<QQ", src, dst))
        outs.append(np.frombuffer(bytes(mem.read(dst, 4 * n)), np.uint32))
        if mode == "on":
            k = mod.kernel("short")
            assert f"if T <= {cgen.LOAD_RUN_LANES} else None" in k.native_source
            assert not any(r.declined for r in k.native_runs)
    assert (outs[0] == outs[1]).all() and (outs[0] == data + np.arange(n, dtype=np.uint32)).all()
    assert (n <= cgen.LOAD_RUN_LANES) == (ctas == 16)


# ---------------------------------------------------------------------------------------------- stores in native runs
STORES = """
.version 9.0
.target sm_75
.address_size 64
.visible .entry st(.param .u64 in, .param .u64 out)
{
  .reg .pred %p<4>; .reg .f32 %f<4>; .reg .b16 %rs<4>; .reg .b32 %r<40>; .reg .b64 %rd<20>;
  .shared .align 16 .b8 sh[4096];
  .local .align 16 .b8 loc[32];
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 16;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 4;
  add.s32 %r8, %r6, %r7;
  and.b32 %r9, %r1, 7;
  shl.b32 %r10, %r9, 2;
  add.s32 %r11, %r6, %r10;
  setp.lt.u32 %p1, %r1, 20;
  mov.u64 %rd5, loc;
  cvt.u16.u32 %rs1, %r4;
  mov.b32 %f1, %r3;
  st.shared.v4.u32 [%r8], {%r2, %r3, %r4, %r5};
  st.shared.u32 [%r11+2048], %r2;
  st.shared.u32 [%r11+2048], %r3;
  st.shared.u8 [%r8+3], %r4;
  st.shared.u16 [%r8+6], %r5;
  st.shared.s32 [%r8+12], %rs1;
  @%p1 st.shared.f32 [%r8+8], %f1;
  st.local.v2.u32 [%rd5], {%r5, %r2};
  add.s32 %r12, %r2, %r3;
  ld.local.u32 %r13, [%rd5+4];
  add.s32 %r13, %r13, 1;
  st.local.u32 [%rd5+4], %r13;
  ld.local.u32 %r13, [%rd5+4];
  bar.sync 0;
  xor.b32 %r14, %r1, 5;
  shl.b32 %r15, %r14, 4;
  add.s32 %r16, %r6, %r15;
  ld.shared.v4.u32 {%r17, %r18, %r19, %r20}, [%r16];
  ld.shared.u32 %r21, [%r11+2048];
  mul.wide.u32 %rd6, %r1, 32;
  add.s64 %rd7, %rd2, %rd6;
  st.global.v4.u32 [%rd7], {%r17, %r18, %r19, %r20};
  st.global.v4.u32 [%rd7+16], {%r21, %r13, %r12, %r1};
  ret;
}

.visible .entry badst(.param .u64 out, .param .u32 sofs, .param .u32 lofs)
{
  .reg .b32 %r<20>; .reg .b64 %rd<20>;
  .shared .align 16 .b8 sh[256];
  .local .align 16 .b8 loc[16];
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [sofs];
  ld.param.u32 %r2, [lofs];
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd2, %r3, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
  mov.u32 %r4, sh;
  shl.b32 %r5, %r3, 2;
  add.s32 %r6, %r4, %r5;
  add.s32 %r7, %r6, %r1;
  mov.u64 %rd4, loc;
  cvt.u64.u32 %rd5, %r2;
  add.s64 %rd6, %rd4, %rd5;
  st.shared.u32 [%r6], %r3;
  st.shared.u32 [%r7], %r3;
  st.local.u32 [%rd6], %r3;
  add.s32 %r8, %r3, 1;
  st.global.u32 [%rd3], %r8;
  ret;
}

.visible .entry ctas(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<10>; .reg .b64 %rd<6>;
  .shared .align 4 .u32 acc;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra SKIP;
  ld.shared.u32 %r3, [acc];
  add.s32 %r4, %r3, %r2;
  add.s32 %r4, %r4, 1;
  st.shared.u32 [acc], %r4;
SKIP:
  bar.sync 0;
  ld.shared.u32 %r5, [acc];
  mov.u32 %r6, %ntid.x;
  mad.lo.s32 %r7, %r2, %r6, %r1;
  mul.wide.u32 %rd2, %r7, 4;
  add.s64 %rd3, %rd1, %rd2;
  add.s32 %r8, %r5, %r1;
  st.global.u32 [%rd3], %r8;
  ret;
}
"""


def _stores_launch(limits: EmuLimits, data: np.ndarray):
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(STORES.encode(), mem, limits=limits)
    src, dst = mem.alloc(data.nbytes), mem.alloc(64 * 32)
    mem.write(src, data.tobytes())
    mod.launch("st", (1, 1, 1), (64, 1, 1), 0, struct.pack("<QQ", src, dst))
    return np.frombuffer(bytes(mem.read(dst, 64 * 32)), np.uint32).reshape(64, 8), mod


def test_shared_and_local_stores_in_native_runs_give_the_same_bits_as_numpy():
    """Shared and local stores (vectors, narrower stores of wider registers, a wider signed store of a 16-bit
    register, a guarded float store, lanes storing to the same bytes twice) inside native runs leave exactly the
    memory the lockstep NumPy code leaves: for bytes several lanes store, the last lane's last store."""
    data = np.random.default_rng(3).integers(0, 1 << 32, 64 * 4, dtype=np.uint64).astype(np.uint32)
    data[:8] = [0xFFFF8001, 0x80000000, 0xFFFFFFFF, 0x00017FFF, 0, 1, 0x8000, 0x7FFF]
    on, mod = _stores_launch(EmuLimits(threadgen=False, ctagen=False, native="on"), data)
    off, _ = _stores_launch(EmuLimits(threadgen=False, ctagen=False, native="off"), data)
    runs = [r for r in mod.kernel("st").native_runs if r.scratch]
    assert runs and not any(r.declined for r in runs)                # the stores ran as C
    assert (on == off).all()
    d = data.reshape(64, 4)
    lanes = np.arange(64)
    assert (on[:, 4] == d[56 + (lanes & 7), 1]).all()                 # sh[2048 + 4 (t & 7)]: lane 56 + (t & 7)
    assert (on[:, 5] == d[:, 0] + 1).all() and (on[:, 6] == d[:, 0] + d[:, 1]).all()
    src = lanes ^ 5                                                    # the slot lane t ^ 5 wrote
    rs1 = (d[src, 2] & 0xFFFF).astype(np.int16).astype(np.int32).view(np.uint32)
    assert (on[:, 3] == rs1).all()
    assert (on[:, 2][src < 20] == d[src, 1][src < 20]).all() and (on[:, 2][src >= 20] == d[src, 2][src >= 20]).all()


@pytest.mark.parametrize("sofs, lofs", [(256, 0), (2, 0), (-4, 0), (0, 16), (0, 2)],
                         ids=["shared-past", "shared-misaligned", "shared-before", "local-past", "local-misaligned"])
def test_a_bad_store_in_a_native_run_is_the_same_error_and_writes_nothing(sofs, lofs):
    """A store the C code cannot serve: the run writes nothing and its NumPy code raises the error it always did,
    after the same stores."""
    results = []
    for mode in ("on", "off"):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = EmuModule.load(STORES.encode(), mem, limits=EmuLimits(threadgen=False, ctagen=False, native=mode))
        dst = mem.alloc(4 * 32)
        mem.write(dst, b"\xee" * 128)
        with pytest.raises(CudaError) as e:
            mod.launch("badst", (1, 1, 1), (32, 1, 1), 0, struct.pack("<QII", dst, sofs & 0xFFFFFFFF, lofs))
        results.append((e.value.code, e.value.message, bytes(mem.read(dst, 128))))
        if mode == "on":
            assert sum(r.declined for r in mod.kernel("badst").native_runs if r.scratch) == 1
    assert results[0] == results[1]
    assert results[0][0] in (code_of("cudaErrorIllegalAddress"), code_of("cudaErrorMisalignedAddress"))
    assert results[0][2] == np.arange(32, dtype=np.uint32).tobytes()     # the first global store, not the second


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", ["on", "off"])
def test_chunks_run_again_for_later_ctas_start_from_zeroed_state(mode, threads):
    """A launch of many chunks runs later CTAs on chunks that finished (Launch._chunk_run): each starts with zeroed
    shared memory and its own %ctaid, the last (smaller) chunk too."""
    ncta, ntid = 51, 64
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(STORES.encode(), mem, limits=EmuLimits(threadgen=False, ctagen=False, native=mode, lanes_per_chunk=128, threads=threads))
    dst = mem.alloc(4 * ncta * ntid)
    for _ in range(2):
        mod.launch("ctas", (ncta, 1, 1), (ntid, 1, 1), 0, struct.pack("<Q", dst))
        out = np.frombuffer(bytes(mem.read(dst, 4 * ncta * ntid)), np.uint32).reshape(ncta, ntid)
        assert (out == np.arange(1, ncta + 1, dtype=np.uint32)[:, None] + np.arange(ntid, dtype=np.uint32)).all()


# ------------------------------------------------------------------------------------- failed builds are remembered
def _failures(caplog) -> list[str]:
    return [r.message for r in caplog.records if "(failed " in r.message]


def test_a_failed_build_is_tried_once_and_kernels_still_run(fake_cc, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc("echo 'error: too big' >&2; exit 1")))
    monkeypatch.setattr(native, "_warned", set())
    data = np.concatenate([values("f32"), values("f32")]).view(np.float32)
    off = _launch(EmuLimits(threadgen=False, ctagen=False, native="off"), data)[0]
    with caplog.at_level("WARNING", logger="pyvgpu.daemon"):
        for limits in (EmuLimits(threadgen=False, ctagen=False, native="on"), EmuLimits(native="on")):
            for _ in range(2):                      # two loads of the module: the second finds the marker
                out, mod = _launch(limits, data)
                assert mod.kernel("k").native_make() is None
                assert out == off
        runs = fake_cc.runs()
        assert runs == 1                            # one build of its source (the kernel's lockstep runs)
        (marker,) = (tmp_path / "cache" / "pyvgpu" / "emu-native").glob("*.failed")
        assert "exited 1: error: too big" in marker.read_text()
        (first,) = _failures(caplog)                # logged once, with the kernel's name
        assert "k: " in first and "exited 1" in first
        monkeypatch.setattr(native, "_warned", set())      # another daemon: it does not try again either
        assert _launch(EmuLimits(native="on"), data)[0] == off and fake_cc.runs() == runs
        (again,) = _failures(caplog)[1:]
        assert "k: its build failed before" in again
    marker.unlink()                                 # a cache clear tries again
    _launch(EmuLimits(native="on"), data)
    assert fake_cc.runs() == runs + 1


def test_a_marker_is_per_compiler_and_flags(fake_cc, tmp_path, monkeypatch):
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc("exit 1")))
    src = "int f(void) { return 1; }\n"
    assert native.load(src, tmp_path) is None and native.load(src, tmp_path) is None
    assert fake_cc.runs() == 1
    assert native.load(src, tmp_path, extra=("-O1",)) is None and fake_cc.runs() == 2    # other flags: tried
    monkeypatch.delenv("PYVGPU_EMU_CC")                                                    # another compiler: built
    assert native.load(src, tmp_path).f() == 1


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_build_past_the_timeout_is_stopped_with_its_subprocesses_and_remembered(fake_cc, tmp_path, monkeypatch):
    # the driver's child (cc1 for a real compiler) must not go on compiling after the driver is killed
    cc = fake_cc(f"sleep 60 & echo $! > {tmp_path / 'child'}\nwait")
    monkeypatch.setenv("PYVGPU_EMU_CC", str(cc))
    monkeypatch.setattr(native, "COMPILE_TIMEOUT", 1)
    monkeypatch.setattr(native.os, "getloadavg", lambda: (0.0, 0.0, 0.0))     # (an idle machine: remembered)
    src = "int f(void) { return 2; }\n"
    t0 = time.monotonic()
    assert native.load(src, tmp_path) is None
    assert time.monotonic() - t0 < 30
    child = int((tmp_path / "child").read_text())
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)
    (marker,) = tmp_path.glob("*.failed")
    assert marker.read_text().startswith("timeout 1 s")
    assert native.load(src, tmp_path) is None and fake_cc.runs() == 1      # remembered
    monkeypatch.setattr(native, "COMPILE_TIMEOUT", 2)                       # a longer timeout tries again
    assert native.load(src, tmp_path) is None and fake_cc.runs() == 2


def test_a_process_that_exits_stops_the_compilers_of_its_builds(fake_cc, tmp_path):
    # a build on a background thread (the launch policy's) when the daemon exits: its compiler, in a process group
    # of its own, and the compiler's child (cc1) must not go on compiling for nobody
    cc = fake_cc(f"sleep 60 & echo $! > {tmp_path / 'child'}\nwait")
    script = (f"import threading, time\n"
              f"from pathlib import Path\n"
              f"from pyvgpu_daemon.emu import native\n"
              f"threading.Thread(target=native.load, args=('int f(void) {{ return 3; }}\\n', Path({str(tmp_path)!r})),"
              f" daemon=True).start()\n"
              f"while not Path({str(tmp_path / 'child')!r}).exists(): time.sleep(0.02)\n")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYVGPU_EMU_CC": str(cc),
           "PYTHONPATH": os.pathsep.join([str(root / "daemon"), str(root), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", script], env=env, timeout=30, check=True)
    child = int((tmp_path / "child").read_text())
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert _gone(child)
    finally:
        if not _gone(child):                            # (broken: leave no compiler behind the test either)
            os.killpg(os.getpgid(child), signal.SIGKILL)
    assert not list(tmp_path.glob("*.failed"))          # stopped by its own process's exit: nothing to remember


def test_several_translation_units_link_into_one_library(tmp_path):
    units = ["int g(int x);\nint f(int x) { return g(x) + 1; }\n", "int g(int x) { return 2 * x; }\n"]
    lib = native.load(units, tmp_path, extra=("-O1",), jobs=2)
    assert lib.f(20) == 41 and lib.g(3) == 6
    assert len(list(tmp_path.glob("*.so"))) == 1 and not list(tmp_path.glob("*.[co]"))
    bad = native.load([units[0], "int g(int x) { return x }\n"], tmp_path, jobs=2)      # one unit fails: remembered
    assert bad is None and len(list(tmp_path.glob("*.failed"))) == 1
