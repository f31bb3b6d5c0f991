"""Stage 3's scheduler (translator/ctagen.py, the code at `sched`): the lowest PC of the running threads and the
count of those at it, both branch-free loops; the CTA is converged again only when every thread is running at that
PC. Threads that exited inside a loop keep the PC of the block they left from, which the running ones reach again
at every turn: counted there, the CTA would be taken as converged and the exited threads would run again. Against
the lockstep path and a host model."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen

from test_emu_ctagen import CTA, OFF, _cta_code
from test_emu_threadgen import HEAD, _module


@pytest.fixture(autouse=True)
def _cta_everywhere(monkeypatch):
    """Every eligible kernel a CTA at a time (this one has a loop after its barrier: thread mode would take it)."""
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)


# out[g] += 1, 2, ... for tid % k turns (at least one): a thread exits from inside the loop's first block. Thread 0
# takes a branch the others do not before the loop: every thread's PC is written there (the loop's first block),
# and the CTA runs the loop converged again, exits leaving that PC in place.
EXITS = HEAD + """
.visible .entry ex(.param .u64 out, .param .u32 k)
{
  .reg .pred %p<3>; .reg .b32 %r<10>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out]; ld.param.u32 %r8, [k];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2;
  rem.u32 %r5, %r1, %r8;
  mov.u32 %r6, 0;
  bar.sync 0;
  setp.eq.u32 %p2, %r1, 0;
  @%p2 bra LOOP;
  add.s32 %r6, %r6, 0;
LOOP:
  add.s32 %r6, %r6, 1;
  ld.global.u32 %r7, [%rd3]; add.s32 %r7, %r7, %r6; st.global.u32 [%rd3], %r7;
  setp.ge.u32 %p1, %r6, %r5;
  @%p1 ret;
  bra.uni LOOP;
}
"""
GRID, BLOCK = 3, 64
N = GRID * BLOCK


@pytest.mark.parametrize("k", [1, 2, 7, 64])
def test_threads_that_exited_inside_a_loop_stay_exited(k):
    results = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(EXITS, mode, mem)
        out = mem.alloc(4 * N)
        mod.launch("ex", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QI", out, k))
        results.append(np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32).copy())
        if mode is CTA:
            assert _cta_code(mod, "ex") is not None
    turns = np.maximum(np.tile(np.arange(BLOCK), GRID) % k, 1)
    want = (turns * (turns + 1) // 2).astype(np.uint32)
    assert (results[0] == want).all() and (results[1] == want).all()


# A converged CTA split by a guard (tid % k == 0 to A: none, some, all), the other side split again by tid & 4: the
# split's PCs written branch-free, the lower block's list of threads made at once (ctagen.ACTS: 16 threads a vector
# step, then the rest one by one; CTAs of 16, 50, 64 and 256 threads), the scheduler's lists after it.
SPLITS = HEAD + """
.visible .entry sp(.param .u64 out, .param .u32 k)
{
  .reg .pred %p<3>; .reg .b32 %r<10>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out]; ld.param.u32 %r8, [k];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2;
  bar.sync 0;
  rem.u32 %r5, %r1, %r8;
  setp.eq.u32 %p1, %r5, 0;
  @%p1 bra A;
  mul.lo.u32 %r6, %r4, 3; add.u32 %r6, %r6, 1;
  and.b32 %r9, %r1, 4; setp.ne.u32 %p2, %r9, 0;
  @%p2 bra C;
  xor.b32 %r6, %r6, 256;
C:
  bra.uni D;
A:
  xor.b32 %r6, %r4, 85;
D:
  st.global.u32 [%rd3], %r6;
  ret;
}
"""


@pytest.mark.parametrize("block", [16, 50, 64, 256])
@pytest.mark.parametrize("k", [1, 2, 3, 17, 1000])
def test_a_converged_cta_split_by_a_guard(block, k):
    n = GRID * block
    results = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(SPLITS, mode, mem)
        out = mem.alloc(4 * n)
        mod.launch("sp", (GRID, 1, 1), (block, 1, 1), 0, struct.pack("<QI", out, k))
        results.append(np.frombuffer(bytes(mem.read(out, 4 * n)), np.uint32).copy())
        if mode is CTA:
            assert _cta_code(mod, "sp") is not None
    g = np.arange(n, dtype=np.uint32)
    t = g % block
    other = (g * 3 + 1) ^ np.where(t & 4, 0, 256).astype(np.uint32)
    want = np.where(t % k == 0, g ^ 85, other).astype(np.uint32)
    assert (results[0] == want).all() and (results[1] == want).all()
