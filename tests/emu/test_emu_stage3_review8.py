"""Review of stop 31's stage-3 and native-build work (ctasize8, native8, scanfast8): cases that gave a wrong result
or broke a guarantee, each failing on the code before its fix."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu import native
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.errors import CudaError

from test_emu_ctagen import CTA, OFF, _cta_code
from test_emu_threadgen import HEAD, _module


# --------------------------------------------------------------------------- native.py: failures worth remembering
def test_a_compiler_killed_from_outside_is_not_remembered_as_failed(fake_cc, tmp_path, monkeypatch, caplog):
    # GCC's driver exits 1 (not by a signal) when the OOM killer kills cc1, with this message (checked with gcc 12:
    # cc1 killed by SIGKILL during a build): remembered, the kernel never got native code on this machine again
    monkeypatch.setattr(native, "_warned", set())
    for message in ("gcc: fatal error: Killed signal terminated program cc1", "cc1: out of memory allocating 65536 bytes",
                    "/usr/bin/ld: final link failed: No space left on device"):
        cache = tmp_path / message.split()[1].strip(":")
        cache.mkdir()
        monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc(f"echo '{message}' >&2; echo 'compilation "
                                                                   f"terminated.' >&2; exit 1")))
        src = "int f(void) { return 3; }\n"
        before = fake_cc.runs()
        with caplog.at_level("WARNING", logger="pyvgpu.daemon"):
            assert native.load(src, cache, name="kern") is None and not list(cache.glob("*.failed"))
        assert native.load(src, cache) is None and fake_cc.runs() == before + 2       # tried again
        monkeypatch.delenv("PYVGPU_EMU_CC")
    (logged,) = [r.message for r in caplog.records if "compiler failed" in r.message]     # once, with the name
    assert "kern: " in logged and "Killed signal" in logged and "tried again" in logged
    # a real error in the source is still remembered
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc("echo 'x.c:1:1: error: expected ;' >&2; exit 1")))
    assert native.load("int g(void) { return 4 }\n", tmp_path) is None and len(list(tmp_path.glob("*.failed"))) == 1


def test_a_timeout_on_a_loaded_machine_is_not_remembered(fake_cc, tmp_path, monkeypatch):
    # a build that fits COMPILE_TIMEOUT alone ran past it with more runnable processes than cores (the bench's
    # --load, four engineers on two cores): remembered, no daemon on this machine built it again, loaded or idle
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc("sleep 30")))
    monkeypatch.setattr(native, "COMPILE_TIMEOUT", 1)
    monkeypatch.setattr(native.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setattr(native.os, "cpu_count", lambda: 2)
    src = "int f(void) { return 5; }\n"
    assert native.load(src, tmp_path) is None and not list(tmp_path.glob("*.failed"))
    monkeypatch.delenv("PYVGPU_EMU_CC")                     # (the same compiler's success later: here the real one)
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc('exec cc "$@"')))
    monkeypatch.setattr(native, "COMPILE_TIMEOUT", 60)
    assert native.load(src, tmp_path).f() == 5


# ----------------------------------------------------------------- contiguous accesses of every width, every space
# out[g] = sh[t' + sofs] (stored there from in[g'' + shift]): thread `who` (a global index) adds d to the index of the
# accesses whose bit is set in `what` (1 global load, 2 shared store, 4 shared load, 8 global store); `shift` bytes
# added to in's address (misaligned bases, a range into the next allocation); shared addresses through 32- or 64-bit
# registers; every access type and vector width (8 to 64 bits, v2, v4)
TYPES = {"u8": (1, "r"), "u16": (2, "r"), "u32": (4, "r"), "u64": (8, "rd"), "f32": (4, "f"), "f64": (8, "fd")}


def _kernel(t: str, vec: int, wide_shared: bool) -> tuple[str, int]:
    size, reg = TYPES[t]
    vs = size * vec
    vt = (f"v{vec}." if vec > 1 else "") + t

    def regs(k0: int) -> str:
        names = [f"%{reg}{k0 + k}" for k in range(vec)]
        return "{" + ", ".join(names) + "}" if vec > 1 else names[0]
    if wide_shared:
        sh = ("mov.u64 %rd10, sh; cvt.u64.u32 %rd11, %r9; add.s64 %rd10, %rd10, %rd11;\n"
              "  mul.wide.s32 %rd12, %r27, {vs}; add.s64 %rd12, %rd10, %rd12;\n"
              "  mul.wide.s32 %rd13, %r28, {vs}; add.s64 %rd13, %rd10, %rd13;\n").format(vs=vs)
        a1, a2 = "%rd12", "%rd13"
    else:
        sh = ("mov.u32 %r30, sh; add.s32 %r30, %r30, %r9;\n"
              "  mul.lo.s32 %r31, %r27, {vs}; add.s32 %r31, %r30, %r31;\n"
              "  mul.lo.s32 %r32, %r28, {vs}; add.s32 %r32, %r30, %r32;\n").format(vs=vs)
        a1, a2 = "%r31", "%r32"
    ptx = HEAD + f"""
.visible .entry k(.param .u64 out, .param .u64 in, .param .u32 who, .param .u32 what, .param .u32 d,
                  .param .u64 shift, .param .u32 sofs)
{{
  .reg .pred %p<4>; .reg .b32 %r<64>; .reg .b64 %rd<64>; .reg .f32 %f<64>; .reg .f64 %fd<64>;
  .shared .align 16 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in]; ld.param.u32 %r10, [who]; ld.param.u32 %r12, [what];
  ld.param.u32 %r13, [d]; ld.param.u64 %rd9, [shift]; ld.param.u32 %r9, [sofs];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  setp.eq.u32 %p1, %r4, %r10;
  selp.b32 %r14, %r13, 0, %p1;
  and.b32 %r15, %r12, 1; setp.ne.u32 %p2, %r15, 0; selp.b32 %r16, %r14, 0, %p2;
  and.b32 %r15, %r12, 2; setp.ne.u32 %p2, %r15, 0; selp.b32 %r17, %r14, 0, %p2;
  and.b32 %r15, %r12, 4; setp.ne.u32 %p2, %r15, 0; selp.b32 %r18, %r14, 0, %p2;
  and.b32 %r15, %r12, 8; setp.ne.u32 %p2, %r15, 0; selp.b32 %r19, %r14, 0, %p2;
  add.s32 %r20, %r4, %r16; mul.wide.s32 %rd3, %r20, {vs}; add.s64 %rd4, %rd2, %rd3; add.s64 %rd4, %rd4, %rd9;
  add.s32 %r27, %r1, %r17; add.s32 %r28, %r1, %r18;
  {sh}  ld.global.{vt} {regs(40)}, [%rd4];
  st.shared.{vt} [{a1}], {regs(40)};
  bar.sync 0;
  ld.shared.{vt} {regs(50)}, [{a2}];
  add.s32 %r21, %r4, %r19; mul.wide.s32 %rd5, %r21, {vs}; add.s64 %rd6, %rd1, %rd5;
  st.global.{vt} [%rd6], {regs(50)};
  ret;
}}
"""
    return ptx, vs


GRID8, BLOCK8 = 3, 64
N8 = GRID8 * BLOCK8


def _launch8(ptx: str, vs: int, mode: dict, who=0, what=0, d=0, shift=0, sofs=0, extra=0, adjacent=False):
    """(out's bytes, or (error code, out's bytes); whether the CTA code ran). `in` holds N8 + extra elements; with
    `adjacent`, another allocation follows it directly (its bytes other than in's)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem)
    nout = vs * (N8 + 64)
    out = mem.alloc(nout)
    nin = vs * (N8 + extra)
    if adjacent:                                        # (the allocator's granule: 256 bytes)
        nin = -(-nin // 256) * 256
    src = mem.alloc(nin)
    rng = np.random.default_rng(vs * 131 + extra)
    data = rng.integers(0, 256, nin, dtype=np.uint8)
    mem.write(src, data.tobytes())
    if adjacent:
        nxt = mem.alloc(4096)
        assert nxt == src + nin, "allocations not adjacent"
        mem.write(nxt, (rng.integers(0, 256, 4096, dtype=np.uint8)).tobytes())
    try:
        mod.launch("k", (GRID8, 1, 1), (BLOCK8, 1, 1), 0,
                   struct.pack("<QQIII4xQI", out, src, who, what, d & 0xFFFFFFFF, shift & (2**64 - 1), sofs))
        result = bytes(mem.read(out, nout))
    except CudaError as e:
        result = (e.code, bytes(mem.read(out, nout)))
    return result, (_cta_code(mod, "k") is not None if mode is CTA else None), data


CASES8 = [dict(), dict(who=5, what=15, d=1), dict(who=64, what=1, d=-1), dict(who=127, what=6, d=-64),
          dict(who=191, what=8, d=3), dict(shift=1), dict(shift=-1), dict(shift=64, extra=0, adjacent=True),
          dict(sofs=-1), dict(sofs=1), dict(who=0, what=1, d=-(1 << 20))]


def _split_everything(monkeypatch) -> None:
    """Every kernel split into regions of one block and emitted as a large kernel (ctasplit.py, as
    test_emu_ctasplit.py does), where that code exists."""
    from pyvgpu_daemon.emu.translator import ctagen
    try:
        from pyvgpu_daemon.emu.translator import ctasplit
    except ImportError:
        pytest.skip("no ctasplit")
    monkeypatch.setattr(ctasplit, "SPLIT_BYTES", 0)
    monkeypatch.setattr(ctasplit, "REGION_BYTES", 1)
    monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)


@pytest.mark.parametrize("split", [False, True], ids=["", "split"])
@pytest.mark.parametrize("wide_shared", [False, True], ids=["shared via u32", "shared via u64"])
@pytest.mark.parametrize("t, vec", [("u8", 1), ("u8", 4), ("u16", 2), ("u32", 1), ("u32", 4), ("u64", 1),
                                    ("u64", 2), ("f32", 2), ("f64", 1), ("f64", 2)])
def test_contiguous_accesses_of_every_width_match_the_lockstep_path(monkeypatch, t, vec, wide_shared, split):
    if split:
        _split_everything(monkeypatch)
    ptx, vs = _kernel(t, vec, wide_shared)
    for case in CASES8:
        case = dict(case)
        if case.get("sofs") == -1:                           # (past the window by one element, aligned)
            case["sofs"] = 4096 - BLOCK8 * vs + vs
        if case.get("shift") == 64:
            # (the last CTA's second half into the next allocation)
            case["shift"] = -(-vs * N8 // 256) * 256 - vs * N8 + vs * BLOCK8 // 2
        on, ran, data = _launch8(ptx, vs, CTA, **case)
        off, _, _ = _launch8(ptx, vs, OFF, **case)
        assert ran, "the kernel did not run a CTA at a time"
        assert type(on) is type(off), (case, on if isinstance(on, tuple) else off)
        if isinstance(on, tuple):
            assert on[0] == off[0], case
        else:
            assert on == off, (case, np.nonzero(np.frombuffer(on, np.uint8) != np.frombuffer(off, np.uint8)))
        if not case:
            assert on[:vs * N8] == data[:vs * N8].tobytes()


# ---------------------------------------------------------------- optimisation levels chosen by size (ctasize8)
FP = HEAD + """
.visible .entry fp(.param .u64 out, .param .u64 in)
{
  .reg .b32 %r<10>; .reg .b64 %rd<10>; .reg .f32 %f<20>; .reg .f64 %fd<10>;
  .shared .align 8 .b8 sh[2048];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.wide.u32 %rd3, %r4, 8; add.s64 %rd4, %rd2, %rd3;
  ld.global.v2.f32 {%f1, %f2}, [%rd4];
  mul.f32 %f3, %f1, %f2; add.f32 %f4, %f3, %f1; sub.f32 %f5, %f4, %f2; div.rn.f32 %f6, %f5, %f2;
  fma.rn.f32 %f7, %f1, %f2, %f6; abs.f32 %f8, %f7; sqrt.rn.f32 %f8, %f8; mul.f32 %f9, %f8, 0f3F800001;
  cvt.f64.f32 %fd1, %f1; cvt.f64.f32 %fd2, %f2; mul.f64 %fd3, %fd1, %fd2; add.f64 %fd4, %fd3, %fd1;
  div.rn.f64 %fd5, %fd4, %fd2; mul.f64 %fd6, %fd5, %fd5; add.f64 %fd6, %fd6, %fd3; cvt.rn.f32.f64 %f10, %fd6;
  add.f32 %f11, %f10, %f9;
  shl.b32 %r5, %r1, 2; mov.u32 %r6, sh; add.s32 %r6, %r6, %r5; st.shared.f32 [%r6], %f11;
  bar.sync 0;
  xor.b32 %r7, %r1, 1; shl.b32 %r7, %r7, 2; mov.u32 %r8, sh; add.s32 %r8, %r8, %r7; ld.shared.f32 %f12, [%r8];
  mul.f32 %f13, %f12, %f1; add.f32 %f14, %f13, %f11; mul.f32 %f15, %f14, %f2; sub.f32 %f15, %f15, %f3;
  mul.wide.u32 %rd5, %r4, 8; add.s64 %rd6, %rd1, %rd5; st.global.v2.f32 [%rd6], {%f14, %f15};
  ret;
}
"""


def _fp_inputs(n: int) -> np.ndarray:
    rng = np.random.default_rng(19)
    x = (rng.standard_normal(2 * n) * np.exp2(rng.integers(-140, 120, 2 * n))).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, 1.1754942e-38, 1.0 + 2 ** -23],
                       np.float32)
    x[:len(special)] = special
    x[-len(special):] = special[::-1]
    return x


@pytest.mark.parametrize("split", [False, True], ids=["", "split"])
@pytest.mark.parametrize("level", ["-O1", "-O2", "-O3", "LEAN_O1"])
def test_every_optimisation_level_keeps_the_lockstep_bits(monkeypatch, level, split):
    if split:
        _split_everything(monkeypatch)
    from pyvgpu_daemon.emu.translator import ctagen
    # (LEAN_O1: onesweep's level, -O1 less the passes that cost its build)
    opts = tuple(getattr(ctagen, "LEAN_O1", ("-O1",))) if level == "LEAN_O1" else (level,)
    level = opts[0]
    if hasattr(ctagen, "OPT_BY_SIZE"):                  # (ctasize8: the level by the source's size)
        monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(0, opts, 1.0),))
        flags = ctagen.flags("")
    else:
        monkeypatch.setattr(ctagen, "FLAGS", ctagen.FLAGS + opts)
        flags = ctagen.FLAGS
    every = native.FLAGS + tuple(flags)
    assert "-ffp-contract=off" in every and not {"-ffast-math", "-Ofast", "-funsafe-math-optimizations"} & set(every)
    assert [f for f in every if f.startswith("-O")][-1] == level
    n = 4 * 128
    data = _fp_inputs(n)

    def run(mode):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(FP, mode, mem)
        out, src = mem.alloc(8 * n), mem.alloc(8 * n)
        mem.write(src, data.tobytes())
        mod.launch("fp", (4, 1, 1), (128, 1, 1), 0, struct.pack("<QQ", out, src))
        return bytes(mem.read(out, 8 * n)), (_cta_code(mod, "fp") is not None if mode is CTA else None)
    on, ran = run(CTA)
    off, _ = run(OFF)
    assert ran
    assert on == off, np.nonzero(np.frombuffer(on, np.uint32) != np.frombuffer(off, np.uint32))


def test_what_a_killed_daemons_build_left_is_removed_once_stale(tmp_path):
    # a daemon killed during a build leaves its C sources, objects and library under temporary names (its compiler,
    # in a session of its own, even finishes them): never loaded, but never removed either (2.4 MB a time for CUB's
    # onesweep); those of a build that may still run stay
    import os
    import time
    key = "0123456789abcdef01234567"
    left = [f"{key}.4242.1399.0.c", f"{key}.4242.1399.0.o", f"{key}.4242.1399", f"{key}.failed.4242.1399"]
    old = time.time() - 2 * native.COMPILE_TIMEOUT - 3600
    for name in left:
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (old, old))
    (tmp_path / f"{key}.4243.1400.0.c").write_text("a build still running")
    (tmp_path / f"{key}.so").write_text("")
    os.utime(tmp_path / f"{key}.so", (old, old))
    assert native.load("int f(void) { return 6; }\n", tmp_path).f() == 6
    names = {f.name for f in tmp_path.iterdir()}
    assert not names & set(left)
    assert {f"{key}.4243.1400.0.c", f"{key}.so"} <= names
