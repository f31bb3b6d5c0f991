"""CTA-at-a-time native code (translator/ctagen.py, "stage 3"): a kernel with `bar.sync 0` runs as one C function
over a CTA at a time, its registers arrays over the CTA's threads, each block a loop over the threads at it. Every
kernel here is compared with the lockstep NumPy path (bit for bit, or the same error) and with a host model: scans
as nvcc writes them, reductions with barriers in loops, divergent branches that reconverge before barriers, exited
threads, warp-synchronous shared memory, 2-D blocks, CTAs of 1, 33 and 1024 threads, faults, accesses served by
Python, the instruction budget; kernels it must not take keep the other paths; PYVGPU_EMU_CTAGEN=0 turns it off."""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen
from pyvgpu_daemon.errors import CudaError, code_of

from test_emu_threadgen import (DIVERGENT, GRID_SUM, HEAD, REDUCE, REVERSE, RUNAWAY, SCAN_TILES, STREAM, WARP_SYNC,
                                _module)

CTA = dict(native="on")                       # ctagen (and threadgen) on by default
OFF = dict(native="off")                      # the lockstep NumPy code
MODES = pytest.mark.parametrize("mode", ["cta", "numpy"])


@pytest.fixture(autouse=True)
def every_barrier_kernel(monkeypatch):
    """A CTA at a time for every eligible kernel, also where thread mode would take it by default
    (ctagen.preferred_reason: a loop between two barriers)."""
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)


def _cta_code(mod, name: str):
    code = mod.kernel(name).native_make()
    return code if isinstance(code, ctagen.CtaCode) else None


def _run(ptx: str, name: str, mode: dict, grid, block, params, mem: DeviceMemory | None = None, **kw):
    """Launch `name` with `params(mem)` -> (bytes, read-back function); (the read-back's result, the CTA code)."""
    mem = mem or DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem, **kw)
    raw, read = params(mem)
    grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
    block = block if isinstance(block, tuple) else (block, 1, 1)
    mod.launch(name, grid, block, 0, raw)
    code = None
    if mode is CTA:
        code = _cta_code(mod, name)
        assert code is not None, "the kernel did not run a CTA at a time"
    return read(mem), code


def _both(ptx, name, grid, block, params, **kw):
    """(CTA result, lockstep result, CTA code), each launch in a memory of its own."""
    on, code = _run(ptx, name, CTA, grid, block, params, **kw)
    off, _ = _run(ptx, name, OFF, grid, block, params, **kw)
    return on, off, code


def _io(data: np.ndarray, out_words: int, extra: bytes = b"", in_region: bool = False):
    """params(mem) for kernels taking (out, in, extra...): out zeroed, in = data (in a reserved range: every access
    to it is served by Python)."""
    def params(mem: DeviceMemory):
        out = mem.alloc(4 * out_words)
        owner = mem
        if in_region:
            owner = DeviceMemory((1 << 40) + (1 << 30), 1 << 22)
            mem.add_region(owner)
        src = owner.alloc(max(data.nbytes, 4))
        owner.write(src, data.tobytes())
        return struct.pack("<QQ", out, src) + extra, \
            lambda m: np.frombuffer(bytes(m.read(out, 4 * out_words)), np.uint32).copy()
    return params


# ---------------------------------------------------------------- scans and reductions
@pytest.mark.parametrize("size", [4, 64, 1024])
@pytest.mark.parametrize("tick", [None, 97], ids=["plain", "suspended every 97"])
def test_scan_tiles_as_nvcc_writes_it(monkeypatch, size, tick):
    """scan_batches' kernel: volatile shared memory read back between barriers in a loop; the host's scan."""
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    data = np.random.default_rng(size).integers(0, 256, 4 * 1024, dtype=np.uint32)

    def params(mem):
        src, dst = mem.alloc(data.nbytes), mem.alloc(data.nbytes)
        mem.write(src, data.tobytes())
        return struct.pack("<QQI", dst, src, size), lambda m: np.frombuffer(bytes(m.read(dst, data.nbytes)), np.uint32)
    on, off, _ = _both(SCAN_TILES, "scanTiles", 4, 256, params, lanes_per_chunk=512)
    tiles = data.reshape(-1, size)
    assert (on == (np.cumsum(tiles, 1, dtype=np.uint32) - tiles).reshape(-1)).all() and (on == off).all()


def test_scan_batches_three_kernels_against_the_host():
    """bench/cuda/scan_batches.cu as nvcc builds it: tiles, the tiles' totals per array, the offsets added."""
    from harness import ROOT, ptx_of
    ptx = ptx_of(str(ROOT / "bench" / "cuda" / "scan_batches.cu")).decode()
    n, length = 16 * 1024, 8192                      # 2 arrays of 8 tiles of 1024
    data = np.random.default_rng(2).integers(0, 256, n, dtype=np.uint32)
    outs = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(ptx, mode, mem)
        names = {k.split("P")[0].lstrip("_Z0123456789"): k for k in mod.kernels}
        src, dst, buf = mem.alloc(4 * n), mem.alloc(4 * n), mem.alloc(4 * 64)
        mem.write(src, data.tobytes())
        ntiles = n // 1024
        mod.launch(names["scanTiles"], (ntiles, 1, 1), (256, 1, 1), 0, struct.pack("<QQI", dst, src, 1024))
        mod.launch(names["scanTotals"], (1, 1, 1), (256, 1, 1), 0,
                   struct.pack("<QQQII", buf, dst, src, ntiles, length // 1024))
        mod.launch(names["addOffsets"], (ntiles, 1, 1), (256, 1, 1), 0, struct.pack("<QQ", dst, buf))
        outs.append(np.frombuffer(bytes(mem.read(dst, 4 * n)), np.uint32))
        if mode is CTA:
            assert all(_cta_code(mod, names[k]) for k in ("scanTiles", "scanTotals", "addOffsets"))
    arrays = data.reshape(-1, length)
    assert (outs[0] == (np.cumsum(arrays, 1, dtype=np.uint32) - arrays).reshape(-1)).all()
    assert (outs[0] == outs[1]).all()


@pytest.mark.parametrize("ptx, per_thread", [(REDUCE, 1), (GRID_SUM, 4)], ids=["tree", "grid-stride then tree"])
@pytest.mark.parametrize("tick", [None, 3], ids=["plain", "suspended every 3"])
def test_reductions_with_barriers_in_loops(monkeypatch, ptx, per_thread, tick):
    """Threads that skip the addition (diverged) still arrive at the loop's barrier."""
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    data = np.random.default_rng(5).integers(0, 1 << 20, per_thread * 7 * 256, dtype=np.uint32)
    on, off, _ = _both(ptx, "red", 7, 256, _io(data, 7), lanes_per_chunk=512)
    exp = data.reshape(per_thread, 7, 256).sum((0, 2), dtype=np.uint32)
    assert (on == exp).all() and (on == off).all()


# ---------------------------------------------------------------- divergence, exits, shapes
# Divergent if/else that both write shared memory, each thread's own number of loop trips (its id mod 4), the
# paths reconverging before a barrier; then every thread reads its mirror's slots. A guarded exit of every thread
# whose id is 6 mod 8 before the barrier: the CTA goes on without it, its slots as it left them.
IFELSE = HEAD + """
.visible .entry ifelse(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<5>; .reg .b32 %r<24>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[8192];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 3;
  add.s32 %r8, %r6, %r7;
  and.b32 %r9, %r5, 1;
  setp.eq.u32 %p1, %r9, 0;
  @%p1 bra EVEN;
  mul.lo.s32 %r10, %r5, 3;
  st.shared.u32 [%r8], %r10;
  bra JOIN;
EVEN:
  shr.u32 %r10, %r5, 1;
  st.shared.u32 [%r8], %r10;
  xor.b32 %r10, %r10, 255;
JOIN:
  and.b32 %r11, %r1, 3;
  mov.u32 %r12, %r10;
TRIP:
  setp.eq.u32 %p2, %r11, 0;
  @%p2 bra AFTER;
  mad.lo.s32 %r12, %r12, 33, %r11;
  sub.s32 %r11, %r11, 1;
  bra TRIP;
AFTER:
  st.shared.u32 [%r8+4], %r12;
  and.b32 %r13, %r1, 7;
  setp.eq.u32 %p3, %r13, 6;
  @%p3 exit;
  bar.sync 0;
  sub.s32 %r14, %r2, %r1;
  sub.s32 %r14, %r14, 1;
  shl.b32 %r14, %r14, 3;
  add.s32 %r14, %r6, %r14;
  ld.shared.v2.u32 {%r15, %r16}, [%r14];
  add.s32 %r17, %r15, %r16;
  mul.wide.u32 %rd5, %r4, 4;
  add.s64 %rd6, %rd1, %rd5;
  st.global.u32 [%rd6], %r17;
  ret;
}
"""


def _ifelse_host(data: np.ndarray, block: int) -> np.ndarray:
    out = np.zeros(data.size, np.uint32)
    for c in range(data.size // block):
        slots = []
        for t in range(block):
            v = int(data[c * block + t])
            a = (v * 3) & 0xFFFFFFFF if v & 1 else v >> 1
            r = a if v & 1 else a ^ 255
            for k in range(t % 4, 0, -1):
                r = (r * 33 + k) & 0xFFFFFFFF
            slots.append((a + r) & 0xFFFFFFFF)
        for t in range(block):
            if t % 8 != 6:
                out[c * block + t] = slots[block - 1 - t]
    return out


@pytest.mark.parametrize("block", [1, 33, 96, 1024])
def test_divergent_paths_loops_and_exits_reconverge_at_the_barrier(block):
    data = np.random.default_rng(block).integers(0, 1 << 31, 3 * block, dtype=np.uint32)
    on, off, _ = _both(IFELSE, "ifelse", 3, block, _io(data, 3 * block), lanes_per_chunk=2048)
    assert (on == _ifelse_host(data, block)).all() and (on == off).all()


@pytest.mark.parametrize("block, live", [(64, 64), (96, 40), (40, 40), (33, 20), (1024, 1000)])
def test_a_reversal_with_exited_threads(block, live):
    data = np.random.default_rng(block).integers(0, 1 << 32, 5 * block, dtype=np.uint64).astype(np.uint32)
    on, off, _ = _both(REVERSE, "rev", 5, block, _io(data, 5 * block, struct.pack("<I", live)),
                       lanes_per_chunk=2 * block)
    tiles = data.reshape(5, block)
    tid = np.arange(block)
    exp = np.where((tid < live) & ((tid ^ 1) < live), tiles[:, block - 1 - (tid ^ 1)], 0).astype(np.uint32)
    lonely = (tid < live) & ((tid ^ 1) >= live)      # its partner exited: the partner's slot holds its input
    exp[:, lonely] = tiles[:, (tid ^ 1)[lonely]]
    assert (on == exp.reshape(-1)).all() and (on == off).all()


def test_threads_waiting_at_different_barriers_are_released_together():
    def params(mem):
        out = mem.alloc(4 * 192)
        return struct.pack("<Q", out), lambda m: np.frombuffer(bytes(m.read(out, 4 * 192)), np.uint32)
    on, off, _ = _both(DIVERGENT, "div", 3, 64, params)
    assert (on == ((np.arange(192) ^ 1) * 7).astype(np.uint32)).all() and (on == off).all()


# Odd threads (the lower PC) wait at their barrier and then overwrite their slot; even threads read their odd
# partner's slot before their own barrier: a diverged thread parks at a barrier until every live thread of its CTA
# is at one, so they read the old value.
PARKED = HEAD + """
.visible .entry parked(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<16>; .reg .b64 %rd<6>;
  .shared .align 4 .b8 sh[4100];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.lo.s32 %r5, %r4, 7;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.shared.u32 [%r8], %r5;
  and.b32 %r9, %r1, 1;
  setp.eq.u32 %p1, %r9, 0;
  @%p1 bra EVEN;
  bar.sync 0;
  mul.lo.s32 %r11, %r1, 1000;
  st.shared.u32 [%r8], %r11;
  bra OUT;
EVEN:
  ld.shared.u32 %r11, [%r8+4];
  bar.sync 0;
OUT:
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r11;
  ret;
}
"""

# Both sides of a divergent branch write one shared word (a race on a GPU, where either may win): the lockstep
# runtime runs the lower PC (the odd threads' side) first, so the last even thread's value stays, here as there.
SAME_WORD = HEAD + """
.visible .entry same(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<8>; .reg .b64 %rd<4>;
  .shared .align 4 .b8 sh[4];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  and.b32 %r4, %r1, 1;
  setp.eq.u32 %p1, %r4, 0;
  @%p1 bra EVEN;
  st.shared.u32 [sh], %r1;
  bra JOIN;
EVEN:
  st.shared.u32 [sh], %r1;
JOIN:
  bar.sync 0;
  ld.shared.u32 %r5, [sh];
  mad.lo.s32 %r6, %r3, %r2, %r1;
  mul.wide.u32 %rd2, %r6, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  ret;
}
"""


def _out_only(words: int):
    def params(mem):
        out = mem.alloc(4 * words)
        return struct.pack("<Q", out), lambda m: np.frombuffer(bytes(m.read(out, 4 * words)), np.uint32)
    return params


@pytest.mark.parametrize("block", [64, 33, 1024])
def test_a_diverged_thread_waits_at_its_barrier(block):
    on, off, _ = _both(PARKED, "parked", 2, block, _out_only(2 * block))
    g = np.arange(2 * block)
    tid = g % block
    exp = np.where(tid % 2 == 1, tid * 1000, (g + 1) * 7)
    exp[(tid % 2 == 0) & (tid == block - 1)] = 0          # (an even last thread reads past the CTA's slots: zero)
    assert (on == exp.astype(np.uint32)).all() and (on == off).all()


@pytest.mark.parametrize("block", [64, 33])
def test_divergent_paths_run_lowest_pc_first_as_in_lockstep(block):
    on, off, _ = _both(SAME_WORD, "same", 2, block, _out_only(2 * block))
    last_even = block - 1 if (block - 1) % 2 == 0 else block - 2
    assert (on == last_even).all() and (on == off).all()


# A register written on one path only and read on both, across a barrier: the lockstep runtime's registers start
# at zero in every CTA (the register file here is reused from CTA to CTA of a chunk).
UNSET = HEAD + """
.visible .entry unset(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<8>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  setp.eq.u32 %p1, %r3, 0;
  @%p1 add.s32 %r5, %r1, 100;
  bar.sync 0;
  mad.lo.s32 %r6, %r3, %r2, %r1;
  mul.wide.u32 %rd2, %r6, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  ret;
}
"""


def test_registers_read_before_written_start_at_zero_in_every_cta():
    on, off, _ = _both(UNSET, "unset", 3, 64, _out_only(3 * 64))
    exp = np.zeros(3 * 64, np.uint32)
    exp[:64] = np.arange(64) + 100
    assert (on == exp).all() and (on == off).all()


# A 2-D block transposes its tile through shared memory: thread (x, y) stores element y*bx + x, reads x*by + y.
TRANSPOSE = HEAD + """
.visible .entry tr(.param .u64 out, .param .u64 in)
{
  .reg .b32 %r<20>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %ntid.x; mov.u32 %r4, %ntid.y;
  mov.u32 %r5, %ctaid.x; mov.u32 %r6, %ctaid.y; mov.u32 %r7, %nctaid.x;
  mad.lo.s32 %r8, %r2, %r3, %r1;
  mul.lo.s32 %r9, %r3, %r4;
  mad.lo.s32 %r10, %r6, %r7, %r5;
  mad.lo.s32 %r11, %r10, %r9, %r8;
  mul.wide.u32 %rd3, %r11, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r12, [%rd4];
  mov.u32 %r13, sh;
  shl.b32 %r14, %r8, 2;
  add.s32 %r14, %r13, %r14;
  st.shared.u32 [%r14], %r12;
  bar.sync 0;
  mad.lo.s32 %r15, %r1, %r4, %r2;
  shl.b32 %r15, %r15, 2;
  add.s32 %r15, %r13, %r15;
  ld.shared.u32 %r16, [%r15];
  add.s64 %rd5, %rd1, %rd3;
  st.global.u32 [%rd5], %r16;
  ret;
}
"""


@pytest.mark.parametrize("block", [(8, 4, 1), (32, 8, 1), (3, 11, 1)])
def test_two_dimensional_blocks(block):
    grid = (3, 2, 1)
    cs = block[0] * block[1]
    n = cs * 6
    data = np.random.default_rng(cs).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    on, off, _ = _both(TRANSPOSE, "tr", grid, block, _io(data, n), lanes_per_chunk=2 * cs)
    lin = np.arange(cs)
    src = (lin % block[0]) * block[1] + lin // block[0]
    assert (on == data.reshape(6, cs)[:, src].reshape(-1)).all() and (on == off).all()


def test_warp_synchronous_shared_memory_gives_the_lockstep_answer():
    """Volatile shared loads of other lanes' slots between stores, no barrier: each instruction runs over all the
    threads at it before the next, as in lockstep (and on a GPU warp), so it is eligible here (not in thread mode)."""
    data = np.random.default_rng(3).integers(0, 1 << 20, 32, dtype=np.uint32)

    def params(mem):
        out, src = mem.alloc(4), mem.alloc(data.nbytes)
        mem.write(src, data.tobytes())
        return struct.pack("<QQ", out, src), lambda m: struct.unpack("<I", bytes(m.read(out, 4)))[0]
    on, off, _ = _both(WARP_SYNC, "wsync", 1, 32, params)
    assert threadgen.eligible_reason(_module(WARP_SYNC, CTA, DeviceMemory(1 << 40, 1 << 24)).kernel("wsync"))
    assert on == off == int(data.sum()) % (1 << 32)


# ---------------------------------------------------------------- memory the C code cannot serve, faults, bounds
def test_an_access_served_by_python_between_barriers():
    data = np.arange(128, dtype=np.uint32) * 3 + 1
    on, off, code = _both(REVERSE, "rev", 2, 64, _io(data, 128, struct.pack("<I", 64), in_region=True))
    assert code.suspended == 128 and (on == off).all()
    assert (on == data.reshape(2, 64)[:, 63 - (np.arange(64) ^ 1)].reshape(-1)).all()


# A shared access `delta` bytes past each thread's slot after a barrier (in a converged loop without suspensions:
# a fault there runs the loop again with them); thread `who` only, or all of them (who = -1).
SHARED_FAULT = HEAD + """
.visible .entry sf(.param .u64 out, .param .u32 delta, .param .u32 who)
{
  .reg .pred %p<2>; .reg .b32 %r<16>; .reg .b64 %rd<4>;
  .shared .align 4 .b8 sh[1024];
  ld.param.u64 %rd1, [out]; ld.param.u32 %r9, [delta]; ld.param.u32 %r10, [who];
  mov.u32 %r1, %tid.x;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.shared.u32 [%r8], %r1;
  bar.sync 0;
  setp.eq.u32 %p1, %r1, %r10;
  setp.eq.or.u32 %p1, %r10, -1, %p1;
  selp.b32 %r11, %r9, 0, %p1;
  add.s32 %r12, %r8, %r11;
  ld.shared.u32 %r13, [%r12];
  bar.sync 0;
  st.shared.u32 [%r12], %r13;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r13;
  ret;
}
"""


# The same with the load from the thread's own slot: the store after the second barrier is the bad access.
STORE_FAULT = SHARED_FAULT.replace("ld.shared.u32 %r13, [%r12];", "ld.shared.u32 %r13, [%r8];")
assert STORE_FAULT != SHARED_FAULT


@pytest.mark.parametrize("kernel", ["load", "store"])
@pytest.mark.parametrize("delta, who", [(4096, 5), (4096, -1), (2, 0), (-8, 1), (4, 254)],
                         ids=["past the window", "every thread", "misaligned", "before the window", "fine"])
def test_a_shared_fault_is_the_same_error(kernel, delta, who):
    results = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(SHARED_FAULT if kernel == "load" else STORE_FAULT, mode, mem)
        out = mem.alloc(4 * 256)
        try:
            mod.launch("sf", (2, 1, 1), (256, 1, 1), 0, struct.pack("<QIi", out, delta & 0xFFFFFFFF, who))
            results.append(bytes(mem.read(out, 4 * 256)))
        except CudaError as e:
            results.append((e.code, e.message))
        if mode is CTA:
            assert _cta_code(mod, "sf")
    assert results[0] == results[1]
    if who == 254:
        got = np.frombuffer(results[0], np.uint32)
        assert got[254] == (255 if kernel == "load" else 254)
        assert (np.delete(got, 254) == np.delete(np.arange(256), 254)).all()
    else:
        assert results[0][0] in (code_of("cudaErrorIllegalAddress"), code_of("cudaErrorMisalignedAddress"))


def test_a_global_fault_after_a_barrier_is_the_same_error():
    errors = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(REVERSE, mode, mem)
        src = mem.alloc(4 * 128)
        with pytest.raises(CudaError) as e:      # out: an address nothing is allocated at
            mod.launch("rev", (2, 1, 1), (64, 1, 1), 0, struct.pack("<QQI", (1 << 40) + (1 << 23), src, 64))
        errors.append((e.value.code, e.value.message))
        if mode is CTA:
            assert _cta_code(mod, "rev")
    assert errors[0] == errors[1] and errors[0][0] == code_of("cudaErrorIllegalAddress")


@MODES
def test_a_runaway_thread_before_a_barrier_ends_in_a_launch_timeout(mode):
    mode = CTA if mode == "cta" else OFF
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(RUNAWAY, mode, mem, max_vector_instructions=200_000)
    out = mem.alloc(4)
    with pytest.raises(CudaError) as e:
        mod.launch("runaway", (2, 1, 1), (32, 1, 1), 0, struct.pack("<Q", out))
    assert e.value.code == code_of("cudaErrorLaunchTimeout")
    if mode is CTA:
        assert _cta_code(mod, "runaway")


# ---------------------------------------------------------------- which kernels, the switch
# (atomics, volatile and scoped accesses, fences and bar.red run a CTA at a time since ctaatomic.py:
# tests/emu/test_emu_ctaatomic.py; warp operations since ctawarp.py: tests/emu/test_emu_ctawarp.py)
@pytest.mark.parametrize("body", ["bar.sync 1;", "barrier.sync 0, 64;", "bar.arrive 1, 64;", "@%p1 bar.sync 0;",
                                  "st.mmio.relaxed.sys.global.u32 [%rd1], %r1;"],
                         ids=["named barrier", "counted barrier", "arrive", "guarded barrier", "mmio"])
def test_kernels_that_could_tell_keep_the_other_paths(body):
    ptx = HEAD + f""".visible .entry k(.param .u64 out)
{{
  .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<2>;
  .shared .align 4 .b8 sh[64];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r3, sh;
  setp.eq.u32 %p1, %r1, 3;
  bar.sync 0;
  {body}
  st.global.u32 [%rd1], %r1;
  ret;
}}
"""
    mod = _module(ptx, CTA, DeviceMemory(1 << 40, 1 << 24))
    assert ctagen.eligible_reason(mod.kernel("k")) is not None
    assert not _cta_code(mod, "k")


def test_which_kernels_run_a_cta_at_a_time_by_default(monkeypatch):
    monkeypatch.undo()                           # ctagen.preferred_reason as it is
    mem = DeviceMemory(1 << 40, 1 << 24)
    for ptx, name, cta in ((SCAN_TILES, "scanTiles", True), (REVERSE, "rev", True), (WARP_SYNC, "wsync", True),
                           (GRID_SUM, "red", False), (STREAM, "add_factor", False)):
        mod = _module(ptx, CTA, mem)
        assert ctagen.eligible_reason(mod.kernel(name)) is None
        assert (_cta_code(mod, name) is not None) == cta, name
    # a loop between two barriers runs a thread at a time unless thread mode is off
    mod = _module(GRID_SUM, dict(native="on", threadgen=False), mem)
    assert _cta_code(mod, "red")


def test_the_switch_turns_it_off():
    mod = _module(SCAN_TILES, dict(native="on", ctagen=False), DeviceMemory(1 << 40, 1 << 24))
    assert not _cta_code(mod, "scanTiles") and mod.kernel("scanTiles").native_make() is not None
    code = "from pyvgpu_daemon.emu.limits import EmuLimits; print(EmuLimits().ctagen)"
    for value, expect in (("0", "False"), ("1", "True"), (None, "True")):
        env = {k: v for k, v in os.environ.items() if k != "PYVGPU_EMU_CTAGEN"}
        if value is not None:
            env["PYVGPU_EMU_CTAGEN"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expect
