"""Stage 3's contiguous attempts (translator/ctaaffine.py): a converged loop whose shared or global addresses are
base + access size x thread runs with plain vector accesses after thread 0's address and the whole range are
checked, every thread's own address compared with the attempt's, a store made only when all matched. Every case
runs a CTA at a time and on the lockstep path and must give the same bits or the same error: all contiguous, one
thread of one CTA (the first, a later one; its first, a middle or its last thread) off by some elements in each of
the four accesses (a global uint4 load, a shared store, a shared load, a global uint4 store), a shared window or a
global allocation the range runs past (a fault in the last threads), with and without a suspension every 97
thread-instructions."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctaaffine, threadgen
from pyvgpu_daemon.errors import CudaError

from test_emu_ctagen import CTA, OFF, _cta_code
from test_emu_threadgen import HEAD, _module

# out[g'] = {s[t' + dl + sofs/4], sum of in[g' + d0], in[g' + d0].x, g}, s[t' + ds + sofs/4] = sum of in[g' + d0]:
# thread `who` of CTA `cta` adds d to the index of the accesses whose bit is set in `what` (1 global load, 2 shared
# store, 4 shared load, 8 global store: g'' = g' + d); t' = t + gap x (t >> gsh), g' = g + gap x (t >> gsh): with a
# gap, contiguous by groups of 2^gsh threads only (16: ctaaffine.GROUP; 32: a larger size of the attempts' steps),
# the CTA as a whole not.
AFF = HEAD + """
.visible .entry af(.param .u64 out, .param .u64 in, .param .u32 who, .param .u32 cta, .param .u32 what,
                   .param .u32 d, .param .u32 sofs, .param .u32 gap, .param .u32 gsh)
{
  .reg .pred %p<4>; .reg .b32 %r<40>; .reg .b64 %rd<8>;
  .shared .align 16 .b8 sh[1024];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  ld.param.u32 %r10, [who]; ld.param.u32 %r11, [cta]; ld.param.u32 %r12, [what]; ld.param.u32 %r13, [d];
  ld.param.u32 %r9, [sofs]; ld.param.u32 %r31, [gap]; ld.param.u32 %r33, [gsh];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  shr.u32 %r32, %r1, %r33; mul.lo.u32 %r32, %r32, %r31;
  setp.eq.u32 %p1, %r1, %r10;
  setp.eq.and.u32 %p1, %r3, %r11, %p1;
  selp.b32 %r14, %r13, 0, %p1;
  and.b32 %r15, %r12, 1; setp.ne.u32 %p2, %r15, 0; selp.b32 %r16, %r14, 0, %p2;
  and.b32 %r15, %r12, 2; setp.ne.u32 %p2, %r15, 0; selp.b32 %r17, %r14, 0, %p2;
  and.b32 %r15, %r12, 4; setp.ne.u32 %p2, %r15, 0; selp.b32 %r18, %r14, 0, %p2;
  and.b32 %r15, %r12, 8; setp.ne.u32 %p2, %r15, 0; selp.b32 %r19, %r14, 0, %p2;
  add.s32 %r20, %r4, %r16; add.s32 %r20, %r20, %r32;
  mul.wide.s32 %rd3, %r20, 16;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.v4.u32 {%r21, %r22, %r23, %r24}, [%rd4];
  add.s32 %r25, %r21, %r22; add.s32 %r25, %r25, %r23; add.s32 %r25, %r25, %r24;
  mov.u32 %r26, sh; add.s32 %r26, %r26, %r9;
  add.s32 %r27, %r1, %r17; add.s32 %r27, %r27, %r32; shl.b32 %r27, %r27, 2; add.s32 %r27, %r26, %r27;
  st.shared.u32 [%r27], %r25;
  bar.sync 0;
  add.s32 %r28, %r1, %r18; add.s32 %r28, %r28, %r32; shl.b32 %r28, %r28, 2; add.s32 %r28, %r26, %r28;
  ld.shared.u32 %r29, [%r28];
  add.s32 %r30, %r4, %r19; add.s32 %r30, %r30, %r32;
  mul.wide.s32 %rd5, %r30, 16;
  add.s64 %rd6, %rd1, %rd5;
  st.global.v4.u32 [%rd6], {%r29, %r25, %r21, %r4};
  ret;
}
"""
GRID, BLOCK = 4, 64
N = GRID * BLOCK
# (gap, gsh, block): contiguous as a whole CTA; by groups of 16 (ctaaffine.GROUP, after the whole CTA and groups of
# 32 failed); by groups of 32 (after the whole CTA failed); by 16 in a CTA of 48 threads (not a multiple of 32)
GROUPS = [(0, 4, BLOCK), (1, 4, BLOCK), (1, 5, BLOCK), (1, 4, 48)]
GROUP_IDS = ["whole CTA", "groups of 16", "groups of 32", "groups of 16 in a CTA of 48"]


def _launch(mode: dict, who: int, cta: int, what: int, d: int, sofs: int = 0, short: int = 0, gap: int = 0,
            gsh: int = 4, block: int = BLOCK):
    """(out's words or (error code, out's words), the CTA code or None); `in` is allocated last, `short` elements
    shorter than the grid (past it, no allocation); `block` threads a CTA (N in all when BLOCK)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(AFF, mode, mem)
    out = mem.alloc(16 * (N + 64))
    size = GRID * block + ((block - 1) >> gsh) * gap - short
    src = mem.alloc(16 * size)
    data = (np.arange(4 * size, dtype=np.uint32) * 2654435761) >> 7
    mem.write(src, data.tobytes())
    try:
        mod.launch("af", (GRID, 1, 1), (block, 1, 1), 0,
                   struct.pack("<QQIIIIIII", out, src, who, cta, what, d & 0xFFFFFFFF, sofs, gap, gsh))
        result = np.frombuffer(bytes(mem.read(out, 16 * (N + 64))), np.uint32).copy()
    except CudaError as e:
        result = (e.code, np.frombuffer(bytes(mem.read(out, 16 * (N + 64))), np.uint32).copy())
    return result, (_cta_code(mod, "af") if mode is CTA else None), data


def _same(on, off) -> bool:
    if isinstance(on, tuple) or isinstance(off, tuple):
        return isinstance(on, tuple) and isinstance(off, tuple) and on[0] == off[0] and (on[1] == off[1]).all()
    return bool((on == off).all())


def test_contiguous_accesses_match_a_host_model():
    on, code, data = _launch(CTA, 0, 0, 0, 0)
    off, _, _ = _launch(OFF, 0, 0, 0, 0)
    assert code is not None, "the kernel did not run a CTA at a time"
    v = data.reshape(N, 4)
    s = v.sum(1, dtype=np.uint32)
    want = np.zeros((N + 64, 4), np.uint32)
    want[:N] = np.stack([s, s, v[:, 0], np.arange(N, dtype=np.uint32)], 1)
    assert (on.reshape(-1, 4) == want).all() and (off == on).all()


def test_the_source_has_attempts_unless_too_large(monkeypatch):
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(AFF, CTA, mem)
    assert _cta_code(mod, "af") is not None
    assert mod.kernel("af").native_source.count("if (aff") >= 3       # the load, shared store and load, store
    monkeypatch.setattr(ctaaffine, "MAX_BYTES", 0)
    mod = _module(AFF, CTA, mem)
    assert _cta_code(mod, "af") is not None and "if (aff" not in mod.kernel("af").native_source
    on, _, _ = _launch(CTA, 5, 1, 15, 3)
    off, _, _ = _launch(OFF, 5, 1, 15, 3)
    assert _same(on, off)


@pytest.mark.parametrize("tick", [None, 97], ids=["plain", "suspended every 97"])
@pytest.mark.parametrize("what", [1, 2, 4, 8, 15], ids=["global load", "shared store", "shared load", "global store",
                                                       "all four"])
@pytest.mark.parametrize("who, cta, d", [(0, 0, 1), (0, 2, 5), (17, 0, -3), (30, 3, 1), (63, 1, -1), (63, 3, -63)],
                         ids=["first thread, first CTA", "first thread, a later CTA", "a middle thread, first CTA",
                              "a middle thread, the last CTA", "the last thread, a later CTA",
                              "the last thread onto the first"])
@pytest.mark.parametrize("gap, gsh, block", GROUPS, ids=GROUP_IDS)
def test_one_thread_off_the_contiguous_addresses(monkeypatch, tick, what, who, cta, d, gap, gsh, block):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    who, d = min(who, block - 1), max(d, -min(who, block - 1))    # (a CTA of 48: its last thread, onto its first)
    on, code, _ = _launch(CTA, who, cta, what, d, gap=gap, gsh=gsh, block=block)
    off, _, _ = _launch(OFF, who, cta, what, d, gap=gap, gsh=gsh, block=block)
    assert code is not None
    assert not isinstance(off, tuple)
    assert _same(on, off), np.nonzero(on != off)


@pytest.mark.parametrize("tick", [None, 97], ids=["plain", "suspended every 97"])
@pytest.mark.parametrize("sofs, short", [(1024 - 128, 0), (1024 - 4 * BLOCK, 0), (0, 8), (0, BLOCK), (0, 0)],
                         ids=["shared window passed by half", "shared window exactly", "allocation passed by 8",
                              "allocation passed by a CTA", "neither"])
@pytest.mark.parametrize("gap, gsh, block", GROUPS, ids=GROUP_IDS)
def test_a_range_past_the_window_or_the_allocation(monkeypatch, tick, sofs, short, gap, gsh, block):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    if sofs == 1024 - 4 * BLOCK:        # (the last thread's word the window's last)
        sofs = 1024 - 4 * block - 4 * gap * ((block - 1) >> gsh)
    short = min(short, block)
    on, code, _ = _launch(CTA, 0, 0, 0, 0, sofs, short, gap, gsh, block)
    off, _, _ = _launch(OFF, 0, 0, 0, 0, sofs, short, gap, gsh, block)
    monkeypatch.setattr(ctaaffine, "MAX_BYTES", 0)
    before, _, _ = _launch(CTA, 0, 0, 0, 0, sofs, short, gap, gsh, block)
    assert code is not None
    assert isinstance(off, tuple) == (sofs == 1024 - 128 or short > 0)
    if isinstance(off, tuple):
        # the lockstep path's error; memory as the CTA code without attempts leaves it (the CTAs before the fault
        # made their stores; the lockstep path's steps run every CTA of its chunk together)
        assert isinstance(on, tuple) and on[0] == off[0] and _same(on, before)
    else:
        assert _same(on, off) and _same(on, before)


def test_a_source_too_large_with_attempts_is_made_without_them(monkeypatch):
    """ctagen.MAX_COMPILE_S applies to the source without attempts: a kernel whose compile-time estimate only the
    attempts make too large still runs a CTA at a time, without them; one with more than ctaaffine.MAX_INSTRUCTIONS
    instructions gets none."""
    from pyvgpu_daemon.emu.translator import ctagen
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(AFF, CTA, mem)
    assert _cta_code(mod, "af") is not None
    large = mod.kernel("af").native_source
    monkeypatch.setattr(ctaaffine, "MAX_BYTES", 0)
    mod = _module(AFF, CTA, mem)
    assert _cta_code(mod, "af") is not None
    small = mod.kernel("af").native_source

    def estimate(src: str) -> float:
        return len(src) / 1e6 * ctagen.opt_level(src).s_per_mb
    assert estimate(small) < estimate(large)
    monkeypatch.setattr(ctaaffine, "MAX_BYTES", 1 << 30)
    monkeypatch.setattr(ctagen, "MAX_COMPILE_S", (estimate(small) + estimate(large)) / 2)
    mod = _module(AFF, CTA, mem)
    assert _cta_code(mod, "af") is not None and "if (aff" not in mod.kernel("af").native_source
    monkeypatch.undo()
    monkeypatch.setattr(ctaaffine, "MAX_INSTRUCTIONS", 10)
    mod = _module(AFF, CTA, mem)
    assert _cta_code(mod, "af") is not None and "if (aff" not in mod.kernel("af").native_source


@pytest.mark.parametrize("what", [1, 8], ids=["global load", "global store"])
@pytest.mark.parametrize("gap, gsh, block, cta", [(0, 4, 64, 1), (1, 4, 64, 3), (1, 5, 64, 2), (1, 4, 48, 3)],
                         ids=GROUP_IDS)
def test_an_address_4_gib_off(what, gap, gsh, block, cta):
    """A thread's address differing from the attempt's only above bit 31 (d x 16 bytes = 2^32): outside every
    allocation, the lockstep path's fault, not the attempt's read or write at the low 32 bits' address."""
    # (in a CTA that makes an attempt at the size that fits: the first CTA makes none, its pointers without a hint
    # yet; the whole CTA in the second; groups of 32 in the third, after the second's whole CTA failed; groups of 16
    # in the fourth, after whole and 32 failed, or 32 was not tried: 48 threads)
    on, code, _ = _launch(CTA, 5, cta, what, 1 << 28, gap=gap, gsh=gsh, block=block)
    off, _, _ = _launch(OFF, 5, cta, what, 1 << 28, gap=gap, gsh=gsh, block=block)
    assert code is not None
    assert isinstance(off, tuple) and isinstance(on, tuple) and on[0] == off[0]
