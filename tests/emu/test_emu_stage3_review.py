"""Adversarial review of stage 3 (translator/ctagen.py: a CTA at a time, each block loops over its threads, the
converged shared loops vectorised with branch-free checks). Each kernel tries to make the CTA code give another
result than the lockstep NumPy path without an error; each is compared with the lockstep path bit for bit and with
a host model: several threads storing one shared address (scalar, vector, byte; in the fast loop and in the guarded
one), sub-word and 64-bit loads through the fast loop (sign and zero extension into wider registers), a store's
loop that faults after other threads stored, 3-D blocks with %laneid, dynamic shared memory, CTAs of 1/33/1000/1024
threads, a warp-synchronous reduction in a CTA's last (partial) warp, and all of it suspended at every step; and
runtime/sparse.py's blocks of few lanes around a barrier against the masked run and a host model."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen
from pyvgpu_daemon.errors import CudaError, code_of

from test_emu_threadgen import HEAD, _module

CTA = dict(native="on")
OFF = dict(native="off")
TICKS = pytest.mark.parametrize("tick", [None, 1, 7], ids=["plain", "suspended every step", "every 7"])


@pytest.fixture(autouse=True)
def every_barrier_kernel(monkeypatch):
    """A CTA at a time for every eligible kernel (ctagen.preferred_reason would leave some to thread mode)."""
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)


def _launch(ptx, name, mode, grid, block, params, shared=0, **kw):
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem, **kw)
    raw, read = params(mem)
    mod.launch(name, grid, block, shared, raw)
    if mode is CTA:
        assert isinstance(mod.kernel(name).native_make(), ctagen.CtaCode), "the kernel did not run a CTA at a time"
    return read(mem)


def _both(ptx, name, grid, block, params, shared=0, **kw):
    grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
    block = block if isinstance(block, tuple) else (block, 1, 1)
    on = _launch(ptx, name, CTA, grid, block, params, shared, **kw)
    off = _launch(ptx, name, OFF, grid, block, params, shared, **kw)
    return on, off


def _io(data: np.ndarray, out_bytes: int):
    def params(mem):
        out, src = mem.alloc(out_bytes), mem.alloc(max(data.nbytes, 4))
        mem.write(src, data.tobytes())
        return struct.pack("<QQ", out, src), lambda m: bytes(m.read(out, out_bytes))
    return params


# ---------------------------------------------------------------- several threads storing one address
# Every thread stores its value to slot tid/4 (u32), a vector {v, tid} to slot tid/8 (v2.u32) and its low byte to
# byte tid/2; after the barrier each thread copies out its word of the three regions. The lockstep path stores lane
# after lane (the highest thread of a group wins); a GPU keeps one of them. GUARD makes the stores guarded (the
# loop with suspensions instead of the vectorised one).
OVERLAP = HEAD + """
.visible .entry overlap(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<2>; .reg .b32 %r<20>; .reg .b64 %rd<10>;
  .shared .align 16 .b8 sh[12288];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r5, [%rd4];
  setp.ne.u32 %p1, %r1, 5000;
  mov.u32 %r6, sh;
  shr.u32 %r7, %r1, 2; shl.b32 %r7, %r7, 2; add.s32 %r7, %r6, %r7;
  GUARDst.shared.u32 [%r7], %r5;
  shr.u32 %r8, %r1, 3; shl.b32 %r8, %r8, 3; add.s32 %r8, %r6, %r8;
  GUARDst.shared.v2.u32 [%r8+4096], {%r5, %r1};
  shr.u32 %r9, %r1, 1; add.s32 %r9, %r6, %r9;
  GUARDst.shared.u8 [%r9+8192], %r5;
  bar.sync 0;
  shl.b32 %r10, %r1, 2; add.s32 %r10, %r6, %r10;
  ld.shared.u32 %r11, [%r10];
  ld.shared.u32 %r12, [%r10+4096];
  ld.shared.u32 %r13, [%r10+8192];
  mul.wide.u32 %rd5, %r4, 12;
  add.s64 %rd6, %rd1, %rd5;
  st.global.u32 [%rd6], %r11;
  st.global.u32 [%rd6+4], %r12;
  st.global.u32 [%rd6+8], %r13;
  ret;
}
"""


def _overlap_host(data: np.ndarray, block: int) -> np.ndarray:
    out = np.zeros((data.size, 3), np.uint32)
    for c in range(data.size // block):
        v = data[c * block:(c + 1) * block]
        w = np.zeros(3072, np.uint32)
        b = w.view(np.uint8)
        for t in range(block):                       # thread after thread: the last one wins
            w[t // 4] = v[t]
        for t in range(block):
            w[1024 + 2 * (t // 8)], w[1024 + 2 * (t // 8) + 1] = v[t], t
        for t in range(block):
            b[8192 + t // 2] = v[t] & 0xFF
        for t in range(block):
            out[c * block + t] = w[t], w[1024 + t], w[2048 + t]
    return out.reshape(-1)


@pytest.mark.parametrize("block", [33, 1000, 1024])
@pytest.mark.parametrize("lanes", [64, 1000, 1536, 5000])
def test_chunks_of_any_size_hold_whole_ctas(block, lanes):
    """Chunks of fewer lanes than a CTA, and of a CTA and a half: the runtime's chunks hold whole CTAs."""
    data = np.random.default_rng(block).integers(0, 1 << 32, 5 * block, dtype=np.uint32)
    on, off = _both(OVERLAP.replace("GUARD", ""), "overlap", 5, block, _io(data, 12 * 5 * block),
                    lanes_per_chunk=lanes)
    assert on == off
    assert (np.frombuffer(on, np.uint32) == _overlap_host(data, block)).all()


@pytest.mark.parametrize("guard", ["", "@%p1 "], ids=["vectorised loop", "guarded loop"])
@pytest.mark.parametrize("block", [1, 33, 256, 1000, 1024])
@TICKS
def test_threads_storing_one_shared_address(monkeypatch, guard, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    grid = 2
    data = np.random.default_rng(block).integers(0, 1 << 32, grid * block, dtype=np.uint32)
    on, off = _both(OVERLAP.replace("GUARD", guard), "overlap", grid, block, _io(data, 12 * grid * block))
    assert on == off
    assert (np.frombuffer(on, np.uint32) == _overlap_host(data, block)).all()


# ---------------------------------------------------------------- sub-word and 64-bit loads in the fast loop
# Each thread stores bytes to shared memory, then (converged, unguarded: the vectorised loop) reads them back as
# s8 -> s32, u8 -> u16, s16 -> s64, u16 -> u32, s32 -> s64 and u64 of its neighbour's slot, and writes all as u64s.
SUBWORD = HEAD + """
.visible .entry subword(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<2>; .reg .b16 %rs<4>; .reg .b32 %r<20>; .reg .b64 %rd<20>;
  .shared .align 8 .b8 sh[8192];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 8;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u64 %rd5, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 3; add.s32 %r7, %r6, %r7;
  st.shared.u64 [%r7], %rd5;
  bar.sync 0;
  add.s32 %r8, %r1, 1;
  setp.eq.u32 %p1, %r8, %r2;
  selp.b32 %r8, 0, %r8, %p1;
  shl.b32 %r8, %r8, 3; add.s32 %r8, %r6, %r8;
  ld.shared.s8 %r9, [%r8+1];
  ld.shared.u8 %rs1, [%r8+2];
  ld.shared.s16 %rd6, [%r8+2];
  ld.shared.u16 %r10, [%r8+6];
  ld.shared.s32 %rd7, [%r8+4];
  ld.shared.u64 %rd8, [%r8];
  cvt.u64.u32 %rd9, %r9;
  cvt.u64.u16 %rd10, %rs1;
  cvt.u64.u32 %rd11, %r10;
  mul.wide.u32 %rd12, %r4, 48;
  add.s64 %rd13, %rd1, %rd12;
  st.global.u64 [%rd13], %rd9;
  st.global.u64 [%rd13+8], %rd10;
  st.global.u64 [%rd13+16], %rd6;
  st.global.u64 [%rd13+24], %rd11;
  st.global.u64 [%rd13+32], %rd7;
  st.global.u64 [%rd13+40], %rd8;
  ret;
}
"""


def _subword_host(data: np.ndarray, block: int) -> np.ndarray:
    out = np.zeros((data.size, 6), np.uint64)
    for c in range(data.size // block):
        for t in range(block):
            b = int(data[c * block + (t + 1) % block]).to_bytes(8, "little")
            s = lambda lo, n: int.from_bytes(b[lo:lo + n], "little", signed=True)   # noqa: E731
            u = lambda lo, n: int.from_bytes(b[lo:lo + n], "little")                # noqa: E731
            m = (1 << 64) - 1
            out[c * block + t] = [s(1, 1) & 0xFFFFFFFF, u(2, 1), s(2, 2) & m, u(6, 2), s(4, 4) & m, u(0, 8)]
    return out.reshape(-1)


@pytest.mark.parametrize("block", [1, 33, 1024])
@TICKS
def test_sub_word_and_64_bit_loads_in_the_fast_loop(monkeypatch, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    data = np.random.default_rng(7).integers(0, 1 << 63, 2 * block, dtype=np.uint64) * np.uint64(3)
    on, off = _both(SUBWORD, "subword", 2, block, _io(data, 48 * 2 * block))
    assert on == off
    assert (np.frombuffer(on, np.uint64) == _subword_host(data, block)).all()


# ---------------------------------------------------------------- the last (partial) warp, warp-synchronous
# A CTA of any size: every thread stores zeros 32 slots on, then (after a barrier) its value; after the barrier the threads of the last
# warp (tid >= ntid & ~31, fewer than 32 where ntid is not a multiple of 32) sum their slots warp-synchronously
# (volatile, no barrier: each step all lanes load, then all store, as a GPU warp and the lockstep path do), and the
# first of them writes slot 0 of its warp. f64 values: the converged loops' 64-bit shared loads.
LASTWARP = HEAD + """
.visible .entry lastwarp(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<3>; .reg .b32 %r<20>; .reg .f64 %fd<6>; .reg .b64 %rd<10>;
  .shared .align 8 .b8 sh[8704];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 8;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f64 %fd1, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 3; add.s32 %r7, %r6, %r7;
  mov.f64 %fd2, 0d0000000000000000;
  st.shared.f64 [%r7+256], %fd2;
  bar.sync 0;
  st.shared.f64 [%r7], %fd1;
  bar.sync 0;
  and.b32 %r8, %r2, -32;
  setp.eq.u32 %p2, %r8, %r2;
  @%p2 sub.u32 %r8, %r8, 32;
  setp.lt.u32 %p1, %r1, %r8;
  @%p1 bra DONE;
""" + "".join(f"""  ld.volatile.shared.f64 %fd3, [%r7+{8 * k}];
  ld.volatile.shared.f64 %fd4, [%r7];
  add.f64 %fd4, %fd4, %fd3;
  st.volatile.shared.f64 [%r7], %fd4;
""" for k in (16, 8, 4, 2, 1)) + """
  setp.ne.u32 %p1, %r1, %r8;
  @%p1 bra DONE;
  mul.wide.u32 %rd5, %r3, 8;
  add.s64 %rd6, %rd1, %rd5;
  st.global.f64 [%rd6], %fd4;
DONE:
  ret;
}
"""


def _lastwarp_host(data: np.ndarray, block: int) -> np.ndarray:
    out = np.zeros(data.size // block, np.float64)
    for c in range(out.size):
        base = (block & -32) if block % 32 else block - 32
        s = np.zeros(block + 64, np.float64)
        s[:block] = data[c * block:(c + 1) * block]
        s[block:block + 32] = 0.0
        lanes = np.arange(base, block)
        for off in (16, 8, 4, 2, 1):             # each step: every lane loads, then every lane stores
            s[lanes] = s[lanes] + s[lanes + off]
        out[c] = s[base]
    return out


@pytest.mark.parametrize("block", [1, 33, 1000, 1024])
@TICKS
def test_a_warp_synchronous_sum_in_the_last_partial_warp(monkeypatch, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    grid = 3
    data = np.random.default_rng(block).standard_normal(grid * block) * 1e6
    on, off = _both(LASTWARP, "lastwarp", grid, block, _io(data, 8 * grid))
    assert on == off
    assert (np.frombuffer(on, np.float64) == _lastwarp_host(data, block)).all()


# ---------------------------------------------------------------- 3-D blocks, dynamic shared memory, registers
# A 3-D block: each thread stores its position word (tid.x | tid.y << 8 | tid.z << 16 | laneid << 24) to dynamic
# shared memory, fills a local array of 8 words by a run-time index, keeps a 64-bit, a 16-bit and a predicate
# register live across two barriers, reads its mirror thread's word between them (the mirror's local array and
# registers untouched by it) and writes all.
SHAPE3 = HEAD + """
.extern .shared .align 8 .b8 dyn[];
.visible .entry shape3(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<4>; .reg .b16 %rs<4>; .reg .b32 %r<40>; .reg .b64 %rd<20>;
  .local .align 4 .b8 loc[32];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %tid.z;
  mov.u32 %r4, %ntid.x; mov.u32 %r5, %ntid.y; mov.u32 %r6, %ntid.z;
  mad.lo.s32 %r7, %r3, %r5, %r2;
  mad.lo.s32 %r7, %r7, %r4, %r1;
  mul.lo.s32 %r8, %r4, %r5; mul.lo.s32 %r8, %r8, %r6;
  mov.u32 %r9, %ctaid.x; mov.u32 %r30, %ctaid.y; mov.u32 %r31, %nctaid.x;
  mad.lo.s32 %r9, %r30, %r31, %r9;
  mad.lo.s32 %r10, %r9, %r8, %r7;
  mul.wide.u32 %rd3, %r10, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r11, [%rd4];
  mov.u32 %r12, %laneid;
  shl.b32 %r13, %r2, 8; or.b32 %r13, %r13, %r1;
  shl.b32 %r14, %r3, 16; or.b32 %r13, %r13, %r14;
  shl.b32 %r14, %r12, 24; or.b32 %r13, %r13, %r14;
  mov.u32 %r15, dyn;
  shl.b32 %r16, %r7, 2; add.s32 %r16, %r15, %r16;
  st.shared.u32 [%r16], %r13;
  mov.u64 %rd5, loc; cvta.local.u64 %rd5, %rd5; cvta.to.local.u64 %rd5, %rd5;
  mov.u32 %r17, 0;
FILL:
  add.s32 %r18, %r17, %r11;
  and.b32 %r18, %r18, 7;
  mul.wide.u32 %rd6, %r18, 4;
  add.s64 %rd7, %rd5, %rd6;
  mad.lo.s32 %r19, %r17, %r11, %r7;
  st.local.u32 [%rd7], %r19;
  add.s32 %r17, %r17, 1;
  setp.lt.u32 %p1, %r17, 8;
  @%p1 bra FILL;
  mul.wide.u32 %rd8, %r11, 0x9E3779B9;
  cvt.u16.u32 %rs1, %r11;
  mul.lo.u16 %rs1, %rs1, 77;
  and.b32 %r20, %r11, 1;
  setp.eq.u32 %p2, %r20, 1;
  bar.sync 0;
  sub.s32 %r21, %r8, %r7; sub.s32 %r21, %r21, 1;
  shl.b32 %r21, %r21, 2; add.s32 %r21, %r15, %r21;
  ld.shared.u32 %r22, [%r21];
  bar.sync 0;
  st.shared.u32 [%r16], %r22;
  bar.sync 0;
  ld.shared.u32 %r23, [%r16];
  and.b32 %r24, %r11, 7;
  mul.wide.u32 %rd9, %r24, 4;
  add.s64 %rd10, %rd5, %rd9;
  ld.local.u32 %r25, [%rd10];
  cvt.u32.u16 %r26, %rs1;
  selp.u32 %r27, 1, 0, %p2;
  mul.wide.u32 %rd11, %r10, 24;
  add.s64 %rd12, %rd1, %rd11;
  st.global.u32 [%rd12], %r23;
  st.global.u32 [%rd12+4], %r25;
  st.global.u64 [%rd12+8], %rd8;
  st.global.u16 [%rd12+16], %r26;
  st.global.u8 [%rd12+18], %r27;
  ret;
}
"""


def _shape3_host(data: np.ndarray, grid, block) -> bytes:
    bx, by, bz = block
    n = bx * by * bz
    out = bytearray(24 * data.size)
    for c in range(grid[0] * grid[1]):
        words = []
        for lin in range(n):
            x, y, z = lin % bx, (lin // bx) % by, lin // (bx * by)
            words.append(x | y << 8 | z << 16 | (lin % 32) << 24)
        for lin in range(n):
            g = c * n + lin
            v = int(data[g])
            loc = [0] * 8
            for k in range(8):
                loc[(k + v) & 7] = (k * v + lin) & 0xFFFFFFFF
            rec = struct.pack("<IIQHB", words[n - 1 - lin], loc[v & 7], (v * 0x9E3779B9) & ((1 << 64) - 1),
                              ((v & 0xFFFF) * 77) & 0xFFFF, v & 1)
            out[24 * g:24 * g + len(rec)] = rec
    return bytes(out)


@pytest.mark.parametrize("block", [(4, 3, 2), (8, 4, 4), (33, 1, 1), (10, 10, 10), (16, 8, 8)])
@TICKS
def test_three_dimensional_blocks_dynamic_shared_and_live_registers(monkeypatch, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    grid = (2, 2, 1)
    n = block[0] * block[1] * block[2]
    data = np.random.default_rng(n).integers(0, 1 << 32, 4 * n, dtype=np.uint32)
    on, off = _both(SHAPE3, "shape3", grid, block, _io(data, 24 * 4 * n), shared=4 * n)
    assert on == off
    assert on == _shape3_host(data, grid, block)


# ---------------------------------------------------------------- a warp scan reading lower lanes
# Each warp's inclusive scan without barriers (volatile shared, as old warp scans are written): at each step a
# lane at or above `off` adds the slot `off` below it. A GPU warp and the lockstep path load for all lanes, then
# store for all; run a thread after another within one loop, lane t would read lane t-off's new value: this is
# the kernel that tells whether a store shares a loop with the loads before it (it does not: ctagen._loops).
WARPSCAN = HEAD + """
.visible .entry warpscan(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<3>; .reg .b32 %r<20>; .reg .b64 %rd<10>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2; add.s32 %r7, %r6, %r7;
  st.volatile.shared.u32 [%r7], %r5;
  bar.sync 0;
  and.b32 %r8, %r1, 31;
""" + "".join(f"""  setp.ge.u32 %p1, %r8, {k};
  @%p1 ld.volatile.shared.u32 %r9, [%r7+-{4 * k}];
  @%p1 ld.volatile.shared.u32 %r10, [%r7];
  @%p1 add.s32 %r10, %r10, %r9;
  @%p1 st.volatile.shared.u32 [%r7], %r10;
""" for k in (1, 2, 4, 8, 16)) + """
  bar.sync 0;
  ld.volatile.shared.u32 %r11, [%r7];
  mul.wide.u32 %rd5, %r4, 4;
  add.s64 %rd6, %rd1, %rd5;
  st.global.u32 [%rd6], %r11;
  ret;
}
"""


def _generic(ptx: str) -> str:
    """WARPSCAN through generic addresses (cvta.shared; not volatile, which only shared accesses may be here)."""
    ptx = ptx.replace("shl.b32 %r7, %r1, 2; add.s32 %r7, %r6, %r7;",
                      "shl.b32 %r7, %r1, 2; add.s32 %r7, %r6, %r7; cvt.u64.u32 %rd7, %r7; cvta.shared.u64 %rd7, %rd7;")
    return ptx.replace("[%r7", "[%rd7").replace(".volatile.shared.", ".")


@pytest.mark.parametrize("space", ["shared", "generic"])
@pytest.mark.parametrize("block", [32, 33, 1000, 1024])
@TICKS
def test_a_warp_scan_reading_lower_lanes(monkeypatch, space, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    data = np.random.default_rng(block).integers(0, 1 << 20, 2 * block, dtype=np.uint32)
    ptx = WARPSCAN if space == "shared" else _generic(WARPSCAN)
    on, off = _both(ptx, "warpscan", 2, block, _io(data, 4 * 2 * block))
    exp = np.zeros(data.size, np.uint32)
    for c in range(2):
        for w in range(0, block, 32):
            seg = data[c * block + w:c * block + min(w + 32, block)]
            exp[c * block + w:c * block + w + seg.size] = np.cumsum(seg, dtype=np.uint32)
    assert on == off
    assert (np.frombuffer(on, np.uint32) == exp).all()


# ---------------------------------------------------------------- shared addresses at the edges of 32 bits
# A 32-bit shared address register plus the instruction's offset: tid * 4 + delta (32-bit, wrapping) then [r + 8],
# a store and a load of the vectorised loop, and the same through a 64-bit register. Whatever the lockstep path
# makes of each (a value or an error), the CTA code must make the same.
EDGE = HEAD + """
.visible .entry edge(.param .u64 out, .param .u32 delta)
{
  .reg .pred %p<3>; .reg .b32 %r<24>; .reg .b64 %rd<10>;
  .shared .align 4 .b8 sh[1024];
  ld.param.u64 %rd1, [out]; ld.param.u32 %r20, [delta];
  mov.u32 %r1, %tid.x;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2; add.s32 %r7, %r6, %r7;
  add.s32 %r8, %r7, %r20;
  xor.b32 %r9, %r1, 0x5a5a;
  st.shared.u32 [%r8+8], %r9;
  bar.sync 0;
  ld.shared.u32 %r10, [%r8+8];
  cvt.u64.u32 %rd2, %r7;
  cvt.s64.s32 %rd3, %r20;
  add.s64 %rd3, %rd2, %rd3;
  ld.shared.u32 %r11, [%rd3+8];
  mul.wide.u32 %rd5, %r1, 8;
  add.s64 %rd6, %rd1, %rd5;
  st.global.u32 [%rd6], %r10;
  st.global.u32 [%rd6+4], %r11;
  ret;
}
"""


def _outcome(fn):
    try:
        return fn()
    except CudaError as e:
        return code_of(e)


@pytest.mark.parametrize("delta", [0, -8, -4, -12, -9, 1012, 1016], ids=lambda d: f"delta {d}")
@pytest.mark.parametrize("block", [1, 64, 254])
def test_shared_addresses_at_the_edges_give_the_lockstep_outcome(delta, block):
    def params(mem):
        out = mem.alloc(8 * block)
        return struct.pack("<QI", out, delta & 0xFFFFFFFF), lambda m: bytes(m.read(out, 8 * block))
    on = _outcome(lambda: _launch(EDGE, "edge", CTA, (2, 1, 1), (block, 1, 1), params))
    off = _outcome(lambda: _launch(EDGE, "edge", OFF, (2, 1, 1), (block, 1, 1), params))
    assert on == off
    if delta in (0, -8):                         # (in the window: each thread reads its own store back)
        assert (np.frombuffer(on, np.uint32) == np.repeat(np.arange(block, dtype=np.uint32) ^ 0x5a5a, 2)).all()


# ---------------------------------------------------------------- vectors, floats and immediates in the fast loop
# Each thread stores (converged, unguarded: the vectorised loops) a v4.f32 of two registers and two immediates
# (1.0, -0.0), a v2.f64, a u16 and a byte from 16-bit registers; after the barrier it reads its mirror thread's
# slots back as v4.b32, v2.b64 and u16 / u8, and writes them all.
VEC = HEAD + """
.visible .entry vec(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<2>; .reg .b16 %rs<4>; .reg .f32 %f<4>; .reg .f64 %fd<4>; .reg .b32 %r<30>; .reg .b64 %rd<12>;
  .shared .align 16 .b8 sh[40960];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 8;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  ld.global.f32 %f2, [%rd4+4];
  ld.global.f64 %fd1, [%rd4];
  neg.f64 %fd2, %fd1;
  ld.global.u16 %rs1, [%rd4+2];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 4; add.s32 %r7, %r6, %r7;
  st.shared.v4.f32 [%r7], {%f1, %f2, 0f3F800000, 0f80000000};
  st.shared.v2.f64 [%r7+16384], {%fd1, %fd2};
  shl.b32 %r8, %r1, 1; add.s32 %r8, %r6, %r8;
  st.shared.u16 [%r8+32768], %rs1;
  add.s32 %r9, %r6, %r1;
  st.shared.b8 [%r9+34816], %rs1;
  bar.sync 0;
  sub.s32 %r10, %r2, %r1; sub.s32 %r10, %r10, 1;
  shl.b32 %r11, %r10, 4; add.s32 %r11, %r6, %r11;
  ld.shared.v4.b32 {%r12, %r13, %r14, %r15}, [%r11];
  ld.shared.v2.b64 {%rd5, %rd6}, [%r11+16384];
  shl.b32 %r16, %r10, 1; add.s32 %r16, %r6, %r16;
  ld.shared.u16 %r17, [%r16+32768];
  add.s32 %r18, %r6, %r10;
  ld.shared.u8 %r19, [%r18+34816];
  mul.wide.u32 %rd7, %r4, 48;
  add.s64 %rd8, %rd1, %rd7;
  st.global.v4.u32 [%rd8], {%r12, %r13, %r14, %r15};
  st.global.v2.u64 [%rd8+16], {%rd5, %rd6};
  st.global.u32 [%rd8+32], %r17;
  st.global.u32 [%rd8+36], %r19;
  ret;
}
"""


@pytest.mark.parametrize("block", [1, 33, 1024])
@TICKS
def test_vectors_floats_and_immediates_in_the_fast_loop(monkeypatch, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    grid = 2
    data = np.random.default_rng(block).integers(0, 1 << 64, grid * block, dtype=np.uint64)
    data &= np.uint64(~(1 << 62) & ((1 << 64) - 1))          # no f64 NaN (neg.f64 gives the canonical NaN)
    data[::3] = (data[::3] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(0x7FC01234)   # an f32 NaN's payload
    on, off = _both(VEC, "vec", grid, block, _io(data, 48 * grid * block))
    assert on == off
    exp = bytearray(48 * data.size)
    for c in range(grid):
        for t in range(block):
            v = int(data[c * block + block - 1 - t])
            b = v.to_bytes(8, "little")
            rec = b + struct.pack("<II", 0x3F800000, 0x80000000) + b + (v ^ (1 << 63)).to_bytes(8, "little") + \
                struct.pack("<II", v >> 16 & 0xFFFF, v >> 16 & 0xFF)
            exp[48 * (c * block + t):48 * (c * block + t) + 40] = rec
    assert on == bytes(exp)


# ---------------------------------------------------------------- the default choice of path
PREFERRED = ctagen.preferred_reason                 # (the fixture replaces it in the module)


@pytest.mark.parametrize("case", ["overlap", "lastwarp", "warpscan", "generic scan", "vec"])
@pytest.mark.parametrize("mode", [dict(native="on"), dict(native="on", ctagen=False),
                                  dict(native="on", ctagen=False, threadgen=False)],
                         ids=["default", "ctagen off", "ctagen and threadgen off"])
def test_the_default_choice_of_path_gives_the_lockstep_bits(monkeypatch, case, mode):
    """Whichever path the kernels take by default (ctagen.preferred_reason, threadgen's rules), and with ctagen or
    both whole-kernel generators off, the bits are the lockstep NumPy path's."""
    monkeypatch.setattr(ctagen, "preferred_reason", PREFERRED)
    ptx, name, block = {"overlap": (OVERLAP.replace("GUARD", ""), "overlap", 256),
                        "lastwarp": (LASTWARP, "lastwarp", 1000), "warpscan": (WARPSCAN, "warpscan", 1000),
                        "generic scan": (_generic(WARPSCAN), "warpscan", 1000), "vec": (VEC, "vec", 1024)}[case]
    data = np.random.default_rng(3).integers(0, 1 << 30, 4 * block, dtype=np.uint64)
    params = _io(data, 48 * 2 * block)
    got = []
    for m in (mode, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(ptx, m, mem)
        raw, read = params(mem)
        mod.launch(name, (2, 1, 1), (block, 1, 1), 0, raw)
        got.append(read(mem))
    assert got[0] == got[1]


# ---------------------------------------------------------------- accesses served by Python inside a loop
# Each thread gathers two words of `in` through addresses computed in the same loop (C locals: ctagen._locals)
# from memory the C code cannot serve (a region of its own: each access suspends, Python serves it and the loop
# resumes inside), combines them with a register computed before the loads, and passes the result through shared
# memory to its mirror thread.
GATHER = HEAD + """
.visible .entry gather(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<2>; .reg .b32 %r<30>; .reg .b64 %rd<12>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.lo.s32 %r5, %r4, 7;
  and.b32 %r5, %r5, 255;
  xor.b32 %r20, %r4, 0x35;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r6, [%rd4];
  add.s64 %rd5, %rd4, 4;
  ld.global.u32 %r7, [%rd5];
  mad.lo.s32 %r8, %r6, 3, %r7;
  xor.b32 %r8, %r8, %r20;
  mov.u32 %r9, sh;
  shl.b32 %r10, %r1, 2; add.s32 %r10, %r9, %r10;
  st.shared.u32 [%r10], %r8;
  bar.sync 0;
  sub.s32 %r11, %r2, %r1; sub.s32 %r11, %r11, 1;
  shl.b32 %r11, %r11, 2; add.s32 %r11, %r9, %r11;
  ld.shared.u32 %r12, [%r11];
  mul.wide.u32 %rd6, %r4, 4;
  add.s64 %rd7, %rd1, %rd6;
  st.global.u32 [%rd7], %r12;
  ret;
}
"""


@pytest.mark.parametrize("block", [1, 33, 256])
@TICKS
def test_accesses_served_by_python_inside_a_loop(monkeypatch, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    data = np.random.default_rng(block).integers(0, 1 << 32, 260, dtype=np.uint32)

    def params(mem):
        out = mem.alloc(4 * 2 * block)
        owner = DeviceMemory((1 << 40) + (1 << 30), 1 << 22)
        mem.add_region(owner)
        src = owner.alloc(data.nbytes)
        owner.write(src, data.tobytes())
        return struct.pack("<QQ", out, src), lambda m: bytes(m.read(out, 4 * 2 * block))
    on, off = _both(GATHER, "gather", 2, block, params)
    assert on == off
    exp = np.zeros(2 * block, np.uint32)
    for c in range(2):
        for t in range(block):
            g = c * block + block - 1 - t
            k = (g * 7) & 255
            exp[c * block + t] = ((int(data[k]) * 3 + int(data[k + 1])) ^ g ^ 0x35) & 0xFFFFFFFF
    assert (np.frombuffer(on, np.uint32) == exp).all()


# ---------------------------------------------------------------- sparse blocks (runtime/sparse.py)
# Few lanes survive (tid % 37 == 3) and loop tid % 5 + 1 times around a barrier (the others have exited), writing
# 32-, 64- and 16-bit registers and a predicate that the other lanes never write: run over those lanes alone
# (sparse_divisor 1) or masked over the chunk (0), every lane's registers must be as a host model has them (the
# inactive lanes' untouched), and the bits the same.
FEW = HEAD + """
.visible .entry few(.param .u64 out)
{
  .reg .pred %p<6>; .reg .b16 %rs<4>; .reg .b32 %r<30>; .reg .b64 %rd<12>;
  .shared .align 8 .b8 sh[8192];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
  mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.wide.u32 %rd2, %r4, 16; add.s64 %rd3, %rd1, %rd2;
  mov.u32 %r5, sh; shl.b32 %r6, %r1, 3; add.s32 %r6, %r5, %r6;
  mov.u32 %r7, 0; mov.u64 %rd4, 0; mov.u16 %rs1, 0; setp.eq.u32 %p3, %r1, 999999;
  rem.u32 %r8, %r1, 37;
  setp.ne.u32 %p1, %r8, 3;
  @%p1 bra OUT;
  rem.u32 %r9, %r1, 5; add.s32 %r9, %r9, 1;
  mov.u32 %r10, 0;
LOOP:
  mad.lo.s32 %r7, %r7, 31, %r1;
  mul.wide.u32 %rd5, %r7, 0x10001; add.s64 %rd4, %rd4, %rd5;
  cvt.u16.u32 %rs2, %r7; add.u16 %rs1, %rs1, %rs2;
  st.shared.u32 [%r6], %r7;
  bar.sync 0;
  xor.b32 %r11, %r10, 1;
  setp.eq.u32 %p3, %r11, 0;
  add.s32 %r10, %r10, 1;
  setp.lt.u32 %p2, %r10, %r9;
  @%p2 bra LOOP;
OUT:
  selp.u32 %r12, 1, 0, %p3;
  cvt.u32.u16 %r13, %rs1;
  st.global.u32 [%rd3], %r7;
  st.global.u64 [%rd3+8], %rd4;
  st.global.u16 [%rd3+4], %r13;
  st.global.u8 [%rd3+6], %r12;
  ret;
}
"""


def _few_host(ncta: int, nt: int) -> bytes:
    out = bytearray(b"\xab" * (16 * ncta * nt))
    for c in range(ncta):
        for t in range(nt):
            r7 = rd4 = rs1 = p3 = 0
            if t % 37 == 3:
                n = t % 5 + 1
                for i in range(n):
                    r7 = (r7 * 31 + t) & 0xFFFFFFFF
                    rd4 = (rd4 + r7 * 0x10001) & ((1 << 64) - 1)
                    rs1 = (rs1 + r7) & 0xFFFF
                    p3 = int(i == 1)
            g = 16 * (c * nt + t)
            out[g:g + 7] = struct.pack("<IHB", r7, rs1, p3)
            out[g + 8:g + 16] = struct.pack("<Q", rd4)
    return bytes(out)


@pytest.mark.parametrize("native", ["off", "on"])
def test_few_lanes_around_a_barrier_run_sparse_with_the_masked_bits(sparse_calls, native):
    from pyvgpu_daemon.emu.limits import EmuLimits
    calls = sparse_calls
    ncta, nt = 3, 256
    got = []
    for divisor in (1, 0):
        mem = DeviceMemory(1 << 40, 1 << 22)
        mod = _module(FEW, dict(native=native, threadgen=False, ctagen=False, sparse_divisor=divisor), mem)
        out = mem.alloc(16 * ncta * nt)
        mem.fill(out, 0xAB, 16 * ncta * nt)
        mod.launch("few", (ncta, 1, 1), (nt, 1, 1), 0, struct.pack("<Q", out))
        got.append(bytes(mem.read(out, 16 * ncta * nt)))
        if divisor:
            assert calls[0] > 0, "no block ran sparse"
    assert EmuLimits().sparse_divisor > 0
    assert got[0] == got[1] == _few_host(ncta, nt)
