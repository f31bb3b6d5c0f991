"""Adversarial review of stage 3 (translator/ctagen.py: a CTA at a time, each block loops over its threads, the
converged shared loops vectorised with branch-free checks). Each kernel tries to make the CTA code give another
result than the lockstep NumPy path without an error; each is compared with the lockstep path bit for bit and with
a host model: several threads storing one shared address (scalar, vector, byte; in the fast loop and in the guarded
one), sub-word and 64-bit loads through the fast loop (sign and zero extension into wider registers), a store's
loop that faults after other threads stored, 3-D blocks with %laneid, dynamic shared memory, CTAs of 1/33/1000/1024
threads, a warp-synchronous reduction in a CTA's last (partial) warp, and all of it suspended at every step."""
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
