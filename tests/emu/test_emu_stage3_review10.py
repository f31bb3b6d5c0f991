"""Review 10 of stage 3 (talking CTAs on two threads, translator/ctaatomic.py; the build tiers; onesweep's fast
paths): each test fails on the code before its fix."""
from __future__ import annotations

import struct

import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import ctaatomic, ctagen

import test_emu_ctatalk2
from test_emu_threadgen import HEAD

TWO = dict(native="on", ctagen=True, talk_threads=2)
ONE = dict(native="on", ctagen=True, talk_threads=1)
OFF = dict(native="off", ctagen=False)
helper_first = test_emu_ctatalk2.helper_first      # (the fixture: the launching thread waits for a helper's CTA)


def _load(ptx: str, mode: dict, mem: DeviceMemory, **kw) -> EmuModule:
    return EmuModule.load(ptx.encode(), mem, limits=EmuLimits(**mode, **kw))


def _cta_code(mod: EmuModule, name: str) -> ctagen.CtaCode:
    code = mod.kernel(name).native_make()
    assert isinstance(code, ctagen.CtaCode), f"{name} did not run a CTA at a time"
    return code


# ---------------------------------------------------------------- ordered vector accesses made whole
def _tear_ptx(st: str, sv: str, ld: str, lv: str) -> str:
    """Thread 0 of CTA 0 stores {i, i, ...} for i = 1, 2, ... with `st` (elements `sv`: 'v2.u64', 'v4.u32', ...)
    from when CTA 1 is ready until it is done; thread 0 of CTA 1 loads the same bytes n times with `ld` and
    counts the loads whose halves differ (a GPU makes an aligned vector access whole: CUB's look-back over 8-byte values stores a
    tile's {status, value} as one st.relaxed.v2.u64)."""
    def regs(v: str, r: str) -> str:
        n = int(v[1]) if v[0] == "v" else 1
        return "{" + ", ".join([r] * n) + "}" if n > 1 else r

    def typ(v: str) -> str:
        return v.split(".")[-1]

    lt = typ(lv)
    ln = int(lv[1]) if lv[0] == "v" else 1
    lregs = "{" + ", ".join(f"%y{k}" for k in range(ln)) + "}" if ln > 1 else "%y0"
    # the loaded bytes' two halves compared as u64 (16-byte vectors) or u32 (8-byte ones)
    if ln == 1:                                                       # a u64: its two u32 halves
        cmp = "mov.b64 {%q0, %q1}, %y0; setp.ne.u32 %p3, %q0, %q1;"
    elif lt in ("u64", "b64"):
        cmp = "setp.ne.u64 %p3, %y0, %y1;"
    else:
        cmp = f"setp.ne.{lt} %p3, %y0, %y{ln - 1};"
    return HEAD + f"""
.visible .entry tear(.param .u64 w, .param .u32 n)
{{
  .reg .pred %p<4>; .reg .b32 %r<10>; .reg .b32 %q<2>; .reg .{typ(sv)} %x<2>; .reg .{lt} %y<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [w]; ld.param.u32 %r1, [n];
  cvta.to.global.u64 %rd1, %rd1;
  bar.sync 0;
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %tid.x;
  setp.ne.u32 %p1, %r3, 0;
  @%p1 bra DONE;
  mov.u32 %r4, 0; mov.u32 %r5, 0;
  setp.ne.u32 %p1, %r2, 0;
  @%p1 bra READY;
WAIT:
  ld.volatile.global.u32 %r7, [%rd1+24];
  setp.eq.u32 %p2, %r7, 0;
  @%p2 bra WAIT;
WRITE:
  add.u32 %r4, %r4, 1;
  cvt.{typ(sv)}.u32 %x1, %r4;
  {st}.global.{sv} [%rd1], {regs(sv, "%x1")};
  ld.volatile.global.u32 %r7, [%rd1+16];
  setp.eq.u32 %p2, %r7, 0;
  @%p2 bra WRITE;
  bra DONE;
READY:
  st.volatile.global.u32 [%rd1+24], 1;
READ:
  {ld}.global.{lv} {lregs}, [%rd1];
  {cmp}
  selp.u32 %r6, 1, 0, %p3;
  add.u32 %r5, %r5, %r6;
  add.u32 %r4, %r4, 1;
  setp.lt.u32 %p2, %r4, %r1;
  @%p2 bra READ;
  st.global.u32 [%rd1+20], %r5;
  st.volatile.global.u32 [%rd1+16], 1;
DONE:
  ret;
}}
"""


@pytest.mark.parametrize("st, sv, ld, lv", [
    ("st.relaxed.gpu", "v2.u64", "ld.relaxed.gpu", "v2.u64"),
    ("st.release.gpu", "v2.u64", "ld.acquire.gpu", "v2.u64"),
    ("st.volatile", "v4.u32", "ld.volatile", "v4.u32"),
    ("st.relaxed.gpu", "v2.u32", "ld.relaxed.gpu", "u64"),
], ids=["v2.u64 relaxed", "v2.u64 release/acquire", "v4.u32 volatile", "v2.u32 read as u64"])
@pytest.mark.usefixtures("helper_first")
def test_ordered_vector_accesses_are_whole_on_two_threads(st, sv, ld, lv):
    """A CTA on one OS thread stores a vector while a CTA on the other loads it 400,000 times: no load sees
    elements of two different stores (before: each element its own __atomic access, about 3 % of the loads torn
    -- CUB's decoupled look-back over 8-byte values then adds an old value beside a new status; three launches: the
    two threads overlap only part of the time on a loaded machine)."""
    ptx = _tear_ptx(st, sv, ld, lv)
    helped = torn = 0
    for _ in range(3):                    # (the two threads overlap only part of the time on a loaded machine)
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(ptx, TWO, mem, max_vector_instructions=1 << 50)
        w = mem.alloc(64)
        mem.write(w, bytes(64))
        mod.launch("tear", (2, 1, 1), (32, 1, 1), 0, struct.pack("<QI", w, 400_000))
        torn += struct.unpack("<I", bytes(mem.read(w + 20, 4)))[0]
        helped += _cta_code(mod, "tear").helped
    assert torn == 0, f"{torn} torn loads"
    assert helped, "no CTA ran on a helper thread"


def test_whole_16_byte_helpers_at_any_host_alignment(tmp_path):
    """ctaatomic.PRELUDE's OLD16/OST16 as the kernel's C builds them: a store then a load at host addresses 16-byte
    aligned and 8 bytes off (a window of shared or local memory may be: an aligned 16-byte move or cmpxchg16b
    there would end the daemon), the bytes round-tripped."""
    import ctypes

    from pyvgpu_daemon.emu import native

    if native.compiler() is None:
        pytest.skip("no C compiler")
    src = ("#include <stdint.h>\n#include <string.h>\n" + ctaatomic.PRELUDE +
           "int rt(uint8_t *b, int64_t off) { uint8_t v[16], w[16]; for (int k = 0; k < 16; k++) v[k] = 3 * k + 1;\n"
           "  OST16(b + off, v); OLD16(b + off, w); return !memcmp(v, w, 16) && !memcmp(b + off, v, 16); }\n")
    lib = native.load(src, tmp_path, extra=ctagen.FLAGS)
    assert lib is not None
    buf = (ctypes.c_uint8 * 64)()
    base = ctypes.addressof(buf)
    for off in range(0, 32, 8):
        at = (-base) % 16 + off                   # (16-byte aligned at off 0 and 16, 8 bytes off at 8 and 24)
        assert lib.rt(ctypes.c_void_p(base + at), ctypes.c_int64(0)) == 1, off


# ---------------------------------------------------------------- ordered vector accesses' elements
# Each thread loads its 128 bytes with ordered vector loads of every element size and 2 to 16 bytes (sign-extending,
# floats, a sink, a guarded one) and stores them back swapped with ordered vector stores (a guarded one).
ORDERED_VECTORS = HEAD + """
.visible .entry k(.param .u64 w, .param .u64 in)
{
  .reg .pred %p<4>; .reg .b16 %h<8>; .reg .b32 %r<40>; .reg .b64 %rd<40>; .reg .f32 %f<8>; .reg .f64 %fd<4>;
  ld.param.u64 %rd1, [w]; ld.param.u64 %rd2, [in];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;
  bar.sync 0;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.u32 %rd3, %r4, 128;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  setp.eq.u32 %p1, %r3, 5;
  ld.volatile.global.v2.s8 {%r5, %r6}, [%rd5];
  ld.relaxed.gpu.global.v4.s8 {%r7, %r8, %r9, %r10}, [%rd5+4];
  ld.acquire.gpu.global.v4.u16 {%h1, %h2, %h3, %h4}, [%rd5+8];
  ld.volatile.global.v2.f32 {%f1, %f2}, [%rd5+16];
  ld.relaxed.gpu.global.v2.f64 {%fd1, %fd2}, [%rd5+32];
  ld.volatile.global.v4.f32 {%f3, %f4, %f5, %f6}, [%rd5+48];
  ld.volatile.global.v2.s16 {%r11, %r12}, [%rd5+64];
  @%p1 ld.volatile.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd5+80];
  ld.volatile.global.v2.u64 {%rd6, _}, [%rd5+96];
  st.volatile.global.v2.u8 [%rd4], {%r5, %r6};
  st.relaxed.gpu.global.v4.u8 [%rd4+4], {%r7, %r8, %r9, %r10};
  st.release.gpu.global.v4.u16 [%rd4+8], {%h4, %h3, %h2, %h1};
  st.volatile.global.v2.f32 [%rd4+16], {%f2, %f1};
  st.relaxed.gpu.global.v2.f64 [%rd4+32], {%fd2, %fd1};
  st.volatile.global.v4.f32 [%rd4+48], {%f6, %f5, %f4, %f3};
  st.volatile.global.v2.u32 [%rd4+64], {%r11, %r12};
  @!%p1 st.volatile.global.v4.u32 [%rd4+80], {%r8, %r7, %r6, %r5};
  st.volatile.global.v2.u64 [%rd4+96], {%rd6, %rd6};
  ret;
}
"""

@pytest.mark.parametrize("mode", [ONE, TWO], ids=["one thread", "two threads"])
def test_ordered_vector_accesses_against_the_lockstep_path(mode):
    """The whole-vector accesses' elements (split from one 2- to 16-byte access) as the lockstep path has them,
    bit for bit."""
    import numpy as np

    grid, block = 3, 64
    n = grid * block
    data = np.random.default_rng(3).integers(0, 256, 128 * n, dtype=np.uint8).tobytes()
    out = []
    for m in (mode, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(ORDERED_VECTORS, m, mem)
        w, i = mem.alloc(128 * n), mem.alloc(128 * n)
        mem.write(w, bytes(128 * n))
        mem.write(i, data)
        mod.launch("k", (grid, 1, 1), (block, 1, 1), 0, struct.pack("<QQ", w, i))
        out.append(bytes(mem.read(w, 128 * n)))
        if m is mode:
            _cta_code(mod, "k")
    assert out[0] == out[1]


# ---------------------------------------------------------------- atomics of every width under contention
# Every thread of 8 CTAs, 301 rounds: signed and unsigned 64-bit min/max of values past 32 bits (negative ones
# too), dec and inc wrapping at their bounds, and/or/exch/add of 64 bits, a 64-bit compare-and-swap loop, a
# signed 32-bit max.
CONTEND64 = HEAD + """
.visible .entry c64(.param .u64 w, .param .u32 k)
{
  .reg .pred %p<3>; .reg .b32 %r<16>; .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [w]; ld.param.u32 %r1, [k];
  cvta.to.global.u64 %rd1, %rd1;
  bar.sync 0;
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  cvt.s64.s32 %rd2, %r5;
  mul.lo.s64 %rd3, %rd2, -4294967311;
  mov.u32 %r6, 0;
LOOP:
  atom.global.max.s64 %rd4, [%rd1], %rd3;
  atom.global.min.s64 %rd4, [%rd1+8], %rd3;
  atom.global.min.u64 %rd4, [%rd1+16], %rd3;
  atom.global.max.u64 %rd4, [%rd1+24], %rd3;
  atom.global.dec.u32 %r7, [%rd1+32], 9;
  atom.global.inc.u32 %r7, [%rd1+36], 6;
  atom.global.and.b64 %rd4, [%rd1+40], -2;
  not.b64 %rd5, %rd2;
  atom.global.or.b64 %rd4, [%rd1+48], %rd2;
  atom.global.exch.b64 %rd4, [%rd1+56], %rd3;
  atom.global.add.s64 %rd4, [%rd1+64], -3;
CAS:
  ld.relaxed.gpu.global.u64 %rd6, [%rd1+72];
  add.s64 %rd7, %rd6, 5;
  atom.global.cas.b64 %rd8, [%rd1+72], %rd6, %rd7;
  setp.ne.s64 %p2, %rd8, %rd6;
  @%p2 bra CAS;
  atom.global.max.s32 %r8, [%rd1+80], %r5;
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p1, %r6, %r1;
  @%p1 bra LOOP;
  ret;
}
"""

@pytest.mark.usefixtures("helper_first")
def test_atomics_of_every_width_under_contention_on_two_threads():
    """Each word's final value is the host's whatever the schedule (the exchanged one: a value some thread
    exchanged); a CTA on each OS thread (CtaCode.helped)."""
    import numpy as np

    grid, block, k = 8, 64, 301
    n = grid * block
    vals = np.arange(n, dtype=np.int64) * np.int64(-4294967311)
    fmt = "<qqQQIIQQQqQi"
    init = struct.pack(fmt, 0, 0, (1 << 64) - 1, 0, 5, 2, (1 << 64) - 1, 0, 0, 0, 0, -1)
    orv = 0
    for i in range(n):
        orv |= i
    u = vals.astype(np.uint64)
    want = (max(0, int(vals.max())), min(0, int(vals.min())), int(u.min()), int(u.max()), (5 - n * k) % 10,
            (2 + n * k) % 7, (1 << 64) - 2, orv, None, -3 * n * k, 5 * n * k, n - 1)
    helped = 0
    for _ in range(3):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(CONTEND64, TWO, mem)
        w = mem.alloc(128)
        mem.write(w, init + bytes(128 - len(init)))
        mod.launch("c64", (grid, 1, 1), (block, 1, 1), 0, struct.pack("<QI", w, k))
        got = struct.unpack_from(fmt, bytes(mem.read(w, 128)))
        assert [g for g, x in zip(got, want) if x is not None] == [x for x in want if x is not None]
        assert got[8] in {int(x) for x in u}
        helped += _cta_code(mod, "c64").helped
        if helped:
            break
    assert helped, "no CTA ran on a helper thread"
