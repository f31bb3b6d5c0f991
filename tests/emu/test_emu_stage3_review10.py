"""Review 10 of stage 3 (talking CTAs on two threads, translator/ctaatomic.py; the build tiers; onesweep's fast
paths): each test fails on the code before its fix."""
from __future__ import annotations

import struct

import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import ctaatomic, ctagen

from test_emu_threadgen import HEAD

TWO = dict(native="on", ctagen=True, talk_threads=2)
ONE = dict(native="on", ctagen=True, talk_threads=1)
OFF = dict(native="off", ctagen=False)


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
