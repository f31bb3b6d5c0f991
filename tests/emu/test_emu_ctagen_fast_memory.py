"""Stage 3's converged loops without suspensions over global memory and kernel parameters (translator/ctagen.py
_fast_code: each global address checked without a branch against the allocation its pointer used last, a global
store's loop checked in a first pass and stored in a second; a bad address runs the loop again with threadgen's
suspending accesses). Every case is compared with a host model of the CTA-at-a-time order (the loop with
suspensions, as before the fast loops: every thread before the bad one, CTA after CTA, made its access) and with the
lockstep path's error: faults in the first CTA (no hint yet) and in later ones, misaligned addresses, an address in
another allocation (no fault: served by the loop with suspensions), with and without a suspension every 97
thread-instructions (the hints start again after each)."""
from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import threadgen
from pyvgpu_daemon.errors import CudaError, code_of

from test_emu_ctagen import CTA, OFF, _cta_code
from test_emu_threadgen import HEAD, _module

# out[g] = in[g] + 1 through shared memory across a barrier; thread `who` of CTA `cta` adds `delta` to its global
# load's address (ldst 0) or its store's (ldst 1).
MOVE = HEAD + """
.visible .entry gm(.param .u64 out, .param .u64 in, .param .u64 delta, .param .u32 who, .param .u32 cta,
                   .param .u32 ldst)
{
  .reg .pred %p<4>; .reg .b32 %r<20>; .reg .b64 %rd<12>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in]; ld.param.u64 %rd9, [delta];
  ld.param.u32 %r10, [who]; ld.param.u32 %r11, [cta]; ld.param.u32 %r12, [ldst];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  setp.eq.u32 %p1, %r1, %r10;
  setp.eq.and.u32 %p1, %r3, %r11, %p1;
  selp.b64 %rd10, %rd9, 0, %p1;
  setp.eq.u32 %p2, %r12, 0;
  selp.b64 %rd11, %rd10, 0, %p2;
  add.s64 %rd4, %rd2, %rd3;
  add.s64 %rd5, %rd4, %rd11;
  ld.global.u32 %r5, [%rd5];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.shared.u32 [%r8], %r5;
  bar.sync 0;
  ld.shared.u32 %r9, [%r8];
  add.s32 %r9, %r9, 1;
  selp.b64 %rd6, 0, %rd10, %p2;
  add.s64 %rd7, %rd1, %rd3;
  add.s64 %rd8, %rd7, %rd6;
  st.global.u32 [%rd8], %r9;
  ret;
}
"""
GRID, BLOCK = 4, 64
N = GRID * BLOCK


def _launch(mode: dict, delta, who: int, cta: int, ldst: int):
    """(out's words or the error, the other allocation's words, the CTA code or None); delta "other": the address
    of the same element in another allocation."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(MOVE, mode, mem)
    data = np.arange(N, dtype=np.uint32) * 7 + 3
    src, out, other = mem.alloc(4 * N), mem.alloc(4 * N), mem.alloc(4 * N)
    mem.write(src, data.tobytes())
    mem.write(other, (data + 1000).tobytes())
    d = other - (src if ldst == 0 else out) if delta == "other" else delta
    try:
        mod.launch("gm", (GRID, 1, 1), (BLOCK, 1, 1), 0,
                   struct.pack("<QQqIII", out, src, d, who & 0xFFFFFFFF, cta, ldst))
        result = np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32).copy()
    except CudaError as e:
        result = (e.code, e.message, np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32).copy())
    return result, np.frombuffer(bytes(mem.read(other, 4 * N)), np.uint32).copy(), \
        (_cta_code(mod, "gm") if mode is CTA else None), data


@pytest.mark.parametrize("tick", [None, 97], ids=["plain", "suspended every 97"])
@pytest.mark.parametrize("ldst", [0, 1], ids=["load", "store"])
@pytest.mark.parametrize("delta, who, cta", [
    (1 << 30, 5, 2), (1 << 30, 0, 0), (1 << 30, 63, 3), (2, 17, 1), (-(1 << 30), 9, 2), (-(1 << 30), 0, 0), ("other", 33, 2),
    ("other", 0, 0), (0, 0, 0)],
    ids=["past it, a later CTA", "past it, the first thread", "past it, the last thread", "misaligned",
         "before it", "before it, the first thread", "another allocation", "another allocation, first thread",
         "none bad"])
def test_a_bad_global_address_in_a_converged_loop(monkeypatch, tick, ldst, delta, who, cta):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    on, other, code, data = _launch(CTA, delta, who, cta, ldst)
    off, other_off, _, _ = _launch(OFF, delta, who, cta, ldst)
    assert code is not None, "the kernel did not run a CTA at a time"
    bad = cta * BLOCK + who
    want = data + 1
    if delta == "other":
        # no fault: the bad thread's load read the other allocation, or its store wrote there
        want_other = data + 1000
        if ldst == 0:
            want[bad] = data[bad] + 1000 + 1
        else:
            want_other[bad], want[bad] = data[bad] + 1, 0
        assert (on == want).all() and (other == want_other).all()
        assert (off == on).all() and (other_off == other).all()
        return
    if delta == 0:
        assert (on == want).all() and (off == on).all()
        return
    # a fault: the lockstep path's error; every store before it in CTA-at-a-time order made, none after it
    assert isinstance(on, tuple) and isinstance(off, tuple) and on[:2] == off[:2]
    assert on[0] == code_of("cudaErrorMisalignedAddress" if delta == 2 else "cudaErrorIllegalAddress")
    made = np.where(np.arange(N) < (bad if ldst == 1 else cta * BLOCK), want, 0)
    assert (on[2] == made).all(), np.nonzero(on[2] != made)
    assert (other == data + 1000).all()


# Kernel parameters by name read in a converged loop with a shared store (no suspension): a parameter block
# shorter than the kernel's parameters (a launch that passes too few bytes) is refused before or served as today.
def test_parameters_read_in_a_converged_loop():
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(MOVE, mode, mem)
        src, out = mem.alloc(4 * N), mem.alloc(4 * N)
        mem.write(src, (np.arange(N, dtype=np.uint32) * 5).tobytes())
        mod.launch("gm", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QQqIII", out, src, 0, 0, 0, 0))
        got = np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32)
        assert (got == np.arange(N, dtype=np.uint32) * 5 + 1).all()
        if mode is CTA:
            src_code = mod.kernel("gm").native_source
            assert "kp0 != 0" in src_code and "hint0lim" in src_code     # the loops without suspensions exist


# Registers every thread of a CTA holds alike (ctagen._uniform: kept once per CTA): %r5 (the CTA's position and a
# parameter) is; %r6 (the thread's), %r7 (written again by some threads after a branch) and %r12 (written under a
# guard only: the others keep 0) are not.
UNIFORM = HEAD + """
.visible .entry un(.param .u64 out, .param .u32 k)
{
  .reg .pred %p<3>; .reg .b32 %r<20>; .reg .b64 %rd<6>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u32 %r1, [k];
  mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x;
  mad.lo.s32 %r5, %r3, %r1, %r4;
  add.s32 %r6, %r2, %r1;
  mov.u32 %r7, %r5;
  setp.lt.u32 %p1, %r2, %r1;
  @%p1 mov.u32 %r12, %r5;
  @%p1 bra SKIP;
  add.s32 %r7, %r7, %r2;
SKIP:
  mov.u32 %r8, sh; shl.b32 %r9, %r2, 2; add.s32 %r10, %r8, %r9;
  st.shared.u32 [%r10], %r6;
  bar.sync 0;
  xor.b32 %r11, %r2, 1; shl.b32 %r11, %r11, 2; add.s32 %r11, %r8, %r11;
  ld.shared.u32 %r13, [%r11];
  mad.lo.s32 %r14, %r3, %r4, %r2;
  mul.wide.u32 %rd2, %r14, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r5, %r7, %r13, %r12};
  ret;
}
"""


@pytest.mark.parametrize("k", [0, 5, 64, 1000])
def test_registers_every_thread_of_a_cta_holds_alike(k):
    from pyvgpu_daemon.emu.translator import ctagen
    from pyvgpu_daemon.emu.translator.codegen import Codegen
    results = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(UNIFORM, mode, mem)
        out = mem.alloc(16 * N)
        mod.launch("un", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QI", out, k))
        results.append(np.frombuffer(bytes(mem.read(out, 16 * N)), np.uint32).reshape(N, 4))
        if mode is CTA:
            assert _cta_code(mod, "un")
            kern = mod.kernel("un")
            uni = ctagen._uniform(kern, Codegen(kern).address)
            assert {"%r1", "%rd1", "%r5", "%ctaid.x"} <= uni and not {"%r6", "%r7", "%r12", "%r2"} & uni
            offsets = [int(x) for x in re.findall(r"\(rf \+ (\d+)\)", kern.native_source)]
            assert offsets and all(o % 64 == 0 for o in offsets)      # every register's array aligned
    tid, cta = np.tile(np.arange(BLOCK), GRID), np.repeat(np.arange(GRID), BLOCK)
    r5 = (cta * k + BLOCK).astype(np.uint32)
    want = np.stack([r5, r5 + np.where(tid >= k, tid, 0), (tid ^ 1) + k, np.where(tid < k, r5, 0)], 1)
    assert (results[0] == want).all() and (results[1] == want).all()


# Each thread reads its shared slot before it writes it (the emulator's shared memory starts zeroed), then
# out[g] = that + the slot of its neighbour written before the barrier.
STALE = HEAD + """
.visible .entry stale(.param .u64 out, .param .u32 k)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u32 %r1, [k];
  mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x;
  mov.u32 %r5, sh; shl.b32 %r6, %r2, 2; add.s32 %r6, %r5, %r6;
  ld.shared.u32 %r7, [%r6];
  add.s32 %r8, %r2, %r1;
  st.shared.u32 [%r6], %r8;
  bar.sync 0;
  xor.b32 %r9, %r2, 1; shl.b32 %r9, %r9, 2; add.s32 %r9, %r5, %r9;
  ld.shared.u32 %r10, [%r9];
  add.s32 %r10, %r10, %r7;
  mad.lo.s32 %r11, %r3, %r4, %r2;
  mul.wide.u32 %rd2, %r11, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r10;
  ret;
}
"""


# A chunk run again (the next launch of a one-chunk plan, or later CTAs of the same launch: Chunk.reuse / rebind)
# starts from zeroed lane arrays after the lockstep code, and from zeroed shared memory after native code (which
# writes no lane array, so only its shared and local memory are cleared then).
@pytest.mark.parametrize("mode", ["cta", "numpy"])
@pytest.mark.parametrize("chunk_ctas", [GRID, 1], ids=["the next launch", "later CTAs of the launch"])
def test_a_chunk_run_again_starts_clean(mode, chunk_ctas):
    mode = CTA if mode == "cta" else OFF
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(STALE, mode, mem, lanes_per_chunk=chunk_ctas * BLOCK)
    out = mem.alloc(4 * N)
    tid = np.tile(np.arange(BLOCK), GRID)
    for k in range(3):
        mod.launch("stale", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QI", out, 10 * k + 1))
        assert (np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32) == (tid ^ 1) + 10 * k + 1).all(), k
        if mode is CTA:
            assert _cta_code(mod, "stale")
