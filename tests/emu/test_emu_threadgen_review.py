"""Adversarial cases for thread-at-a-time code with barriers (translator/threadgen.py, review of issue 19 part 6):
each kernel runs in thread mode (where eligible) and on the lockstep NumPy path, against a host model.
- Warp-synchronous volatile shared code the heuristic once let in with a wrong result and no error: a thread's own
  store followed by a store to another lane's slot, and stores to an address every lane (or every lane of a warp)
  shares. A GPU's warp and the lockstep interpreter store for all lanes before any loads; a thread at a time did not.
- Registers of every kind live across barriers (64-bit, predicates, 16-bit, a vector load's elements), a local
  array indexed at run time, dynamic shared memory, 2-D blocks, CTAs of 1, 33 and 1024 threads, several CTAs per
  chunk, suspensions (R_TICK) every few instructions."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import threadgen

from test_emu_threadgen import HEAD, OFF, ON, _module, _thread_code


def _run(ptx: str, name: str, mode: dict, grid: int, block: tuple, words: int, dyn: int = 0,
         **kw) -> np.ndarray:
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem, **kw)
    out = mem.alloc(4 * words)
    mem.write(out, bytes(4 * words))
    mod.launch(name, (grid, 1, 1), block, dyn, struct.pack("<Q", out))
    return np.frombuffer(bytes(mem.read(out, 4 * words)), np.uint32)


def _warp_kernel(body: str) -> str:
    return HEAD + """
.visible .entry ws(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<16>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[1024];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  add.s32 %r2, %r1, 100;
  add.s32 %r3, %r1, 200;
""" + body + """
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r11;
  bar.sync 0;
  ret;
}
"""


lane = np.arange(64, dtype=np.uint32)
# lane i stores its own slot, then lane i+1's; lockstep (a warp) stores all first slots, then all second ones
NEIGHBOUR = (_warp_kernel("""
  st.volatile.shared.u32 [%r8], %r2;
  st.volatile.shared.u32 [%r8+4], %r3;
  ld.volatile.shared.u32 %r11, [%r8];"""), np.where(lane == 0, 100, 199 + lane))
# every lane stores to one address (a symbol; a register that does not depend on the lane), then reads it back:
# all lanes of a warp read one lane's value
SYMBOL = (_warp_kernel("""
  st.volatile.shared.u32 [sh], %r2;
  ld.volatile.shared.u32 %r11, [sh];"""), None)
UNIFORM = (_warp_kernel("""
  st.volatile.shared.u32 [%r6+8], %r2;
  ld.volatile.shared.u32 %r11, [%r6+8];"""), None)
# one slot per warp (tid >> 5, or the slot's address & -128): the lanes of a warp share it
PER_WARP = (_warp_kernel("""
  shr.u32 %r9, %r1, 5;
  shl.b32 %r9, %r9, 2;
  add.s32 %r9, %r6, %r9;
  st.volatile.shared.u32 [%r9], %r2;
  ld.volatile.shared.u32 %r11, [%r9];"""), None)

MASKED = (_warp_kernel("""
  and.b32 %r9, %r8, -128;
  st.volatile.shared.u32 [%r9], %r2;
  ld.volatile.shared.u32 %r11, [%r9];"""), None)


@pytest.mark.parametrize("case", [NEIGHBOUR, SYMBOL, UNIFORM, PER_WARP, MASKED],
                         ids=["neighbour", "symbol", "uniform", "per warp", "masked"])
def test_volatile_stores_another_lane_may_address_keep_the_lockstep_path(monkeypatch, case):
    monkeypatch.setattr(threadgen, "slower_reason", lambda kernel: None)
    ptx, expected = case
    mod = _module(ptx, ON, DeviceMemory(1 << 40, 1 << 24))
    assert "warp-synchronous" in (threadgen.eligible_reason(mod.kernel("ws")) or "")
    assert not _thread_code(mod, "ws")
    on, off = (_run(ptx, "ws", m, 1, (64, 1, 1), 64) for m in (ON, OFF))
    assert (on == off).all()
    if expected is not None:
        assert (on == expected).all()
    else:                              # each warp's lanes read one value, some lane's of that warp
        for w in range(2):
            got = on[32 * w:32 * w + 32]
            assert (got == got[0]).all() and 100 + 32 * (w if ptx in (PER_WARP[0], MASKED[0]) else 0) <= got[0] < 164


def test_a_thread_reading_back_its_own_slot_keeps_the_lockstep_path():
    """Even a store to what looks like the thread's own slot (an address from %tid), then its load: whether the
    address is the thread's own depends on the block's shape and on values (threadgen._warp_synchronous_reason)."""
    ptx = _warp_kernel("""
  st.volatile.shared.u32 [%r8+4], %r3;
  st.volatile.shared.u32 [%r8], %r2;
  ld.volatile.shared.u32 %r11, [%r8];""")
    mod = _module(ptx, ON, DeviceMemory(1 << 40, 1 << 24))
    assert "volatile shared load" in threadgen.eligible_reason(mod.kernel("ws"))


# A kernel whose registers of every kind live across two barriers: a 64-bit value, a predicate, a 16-bit value, a
# vector load's elements, a local array written before the first barrier at a run-time index and read after the
# second; threads exchange through dynamic shared memory (extern .shared) indexed by the 2-D position.
LIVE = HEAD + """
.extern .shared .align 16 .b8 dyn[];
.visible .entry live(.param .u64 out)
{
  .reg .pred %p<4>; .reg .b16 %h<4>; .reg .b32 %r<40>; .reg .b64 %rd<20>;
  .local .align 4 .b8 loc[64];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %ntid.x; mov.u32 %r4, %ntid.y;
  mov.u32 %r5, %ctaid.x;
  mad.lo.s32 %r6, %r2, %r3, %r1;              // thread in block
  mul.lo.s32 %r7, %r3, %r4;                   // block size
  mad.lo.s32 %r8, %r5, %r7, %r6;              // global thread
  mul.wide.u32 %rd2, %r8, 2654435761;         // 64-bit, live across both barriers
  and.b32 %r9, %r6, 1;
  setp.eq.u32 %p1, %r9, 1;                    // predicate, live across both barriers
  cvt.u16.u32 %h1, %r8;                       // 16-bit, live across both barriers
  and.b32 %r10, %r6, 15;                      // a run-time index into the local array
  shl.b32 %r11, %r10, 2;
  mov.u64 %rd3, loc;
  cvt.u64.u32 %rd4, %r11;
  add.s64 %rd5, %rd3, %rd4;
  add.s32 %r12, %r8, 7000;
  st.local.u32 [%rd5], %r12;
  mov.u32 %r13, dyn;
  shl.b32 %r14, %r6, 4;
  add.s32 %r15, %r13, %r14;
  add.s32 %r16, %r8, 1; add.s32 %r17, %r8, 2; add.s32 %r18, %r8, 3;
  st.shared.v4.u32 [%r15], {%r8, %r16, %r17, %r18};
  bar.sync 0;
  sub.s32 %r19, %r7, 1;
  sub.s32 %r19, %r19, %r6;                    // the mirror thread
  shl.b32 %r20, %r19, 4;
  add.s32 %r20, %r13, %r20;
  ld.shared.v4.u32 {%r21, %r22, %r23, %r24}, [%r20];   // vector elements, live across the next barrier
  bar.sync 0;
  st.shared.u32 [%r15], %r6;                  // overwrite after everyone has read
  bar.sync 0;
  ld.local.u32 %r25, [%rd5];
  add.s32 %r26, %r21, %r24;
  selp.b32 %r27, %r22, %r23, %p1;
  cvt.u32.u16 %r28, %h1;
  cvt.u32.u64 %r29, %rd2;
  shr.u64 %rd6, %rd2, 32;
  cvt.u32.u64 %r30, %rd6;
  ld.shared.u32 %r31, [%r20];
  mul.wide.u32 %rd7, %r8, 32;
  add.s64 %rd8, %rd1, %rd7;
  st.global.v4.u32 [%rd8], {%r25, %r26, %r27, %r28};
  st.global.v4.u32 [%rd8+16], {%r29, %r30, %r31, %r19};
  ret;
}
"""


def _live_model(grid: int, bx: int, by: int) -> np.ndarray:
    size = bx * by
    t = np.arange(size, dtype=np.uint64)
    out = []
    for c in range(grid):
        g = c * size + t
        m = (size - 1 - t)
        mg = c * size + m
        h = g * 2654435761
        odd = (t & 1) == 1
        rows = np.stack([g + 7000, 2 * mg + 3, np.where(odd, mg + 1, mg + 2), g & 0xFFFF,
                         h & 0xFFFFFFFF, h >> 32, m, m], 1)
        out.append(rows)
    return (np.concatenate(out) & 0xFFFFFFFF).astype(np.uint32).reshape(-1)


@pytest.mark.parametrize("grid, block, lanes, tick", [
    (3, (1, 1, 1), 4, None), (5, (33, 1, 1), 66, 7), (2, (8, 4, 1), 64, None), (2, (32, 32, 1), 2048, 101)],
    ids=["1", "33 ticked", "8x4", "1024 ticked"])
def test_registers_of_every_kind_and_local_memory_live_across_barriers(monkeypatch, grid, block, lanes, tick):
    monkeypatch.setattr(threadgen, "slower_reason", lambda kernel: None)
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    size = block[0] * block[1]
    words = 8 * grid * size
    outs = []
    for mode in (ON, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(LIVE, mode, mem, lanes_per_chunk=lanes)
        out = mem.alloc(4 * words)
        mod.launch("live", (grid, 1, 1), block, 16 * size, struct.pack("<Q", out))
        outs.append(np.frombuffer(bytes(mem.read(out, 4 * words)), np.uint32))
        if mode is ON:
            assert _thread_code(mod, "live")
    assert (outs[0] == _live_model(grid, block[0], block[1])).all()
    assert (outs[0] == outs[1]).all()


# Per thread: a register written on one path only between two barriers (the other path must keep the value it had
# at the first barrier), then a loop of a data-dependent trip count ((tid >> 1) & 3) with a barrier in each
# iteration, a 64-bit accumulator and the loop counter live across it; threads leave the loop at different barriers.
TRIPS = HEAD + """
.visible .entry trips(.param .u64 out)
{
  .reg .pred %p<4>; .reg .b32 %r<20>; .reg .b64 %rd<10>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.lo.s32 %r5, %r1, 3;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  bar.sync 0;
  and.b32 %r9, %r1, 1;
  setp.eq.u32 %p1, %r9, 1;
  @%p1 bra SKIP;
  add.s32 %r5, %r1, 1000;
SKIP:
  bar.sync 0;
  shr.u32 %r10, %r1, 1;
  and.b32 %r10, %r10, 3;
  mov.u32 %r11, 0;
  cvt.u64.u32 %rd2, %r5;
LOOP:
  setp.ge.u32 %p2, %r11, %r10;
  @%p2 bra END;
  st.shared.u32 [%r8], %r11;
  bar.sync 0;
  ld.shared.u32 %r12, [%r8];
  cvt.u64.u32 %rd3, %r12;
  shl.b64 %rd3, %rd3, 33;
  add.s64 %rd2, %rd2, %rd3;
  add.s32 %r11, %r11, 1;
  bra LOOP;
END:
  mov.u32 %r13, %ctaid.x; mov.u32 %r14, %ntid.x;
  mad.lo.s32 %r15, %r13, %r14, %r1;
  mul.wide.u32 %rd4, %r15, 8;
  add.s64 %rd5, %rd1, %rd4;
  st.global.u64 [%rd5], %rd2;
  ret;
}
"""


@pytest.mark.parametrize("tick", [None, 5], ids=["plain", "ticked"])
def test_a_register_written_on_one_path_and_per_thread_barrier_counts(monkeypatch, tick):
    monkeypatch.setattr(threadgen, "slower_reason", lambda kernel: None)
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    outs = [_run(TRIPS, "trips", m, 3, (70, 1, 1), 2 * 3 * 70, lanes_per_chunk=140) for m in (ON, OFF)]
    t = np.arange(70, dtype=np.uint64)
    r5 = np.where(t & 1, 3 * t, t + 1000)
    k = (t >> np.uint64(1)) & np.uint64(3)
    exp = np.tile(r5 + (k * (k - 1) // 2 << np.uint64(33)), 3)
    assert (outs[0].view(np.uint64) == exp).all() and (outs[0] == outs[1]).all()
    mod = _module(TRIPS, ON, DeviceMemory(1 << 40, 1 << 24))
    assert threadgen.eligible_reason(mod.kernel("trips")) is None and _thread_code(mod, "trips")
