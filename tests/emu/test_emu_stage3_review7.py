"""Adversarial review of stage 3 as extended in stop 30 (translator/ctagen.py's loops without suspensions over
global memory and registers kept once per CTA; translator/ctawarp.py's warp operations; translator/ctaatomic.py's
atomics and CTAs that talk). Each kernel tries to make the CTA-at-a-time code give another result than the
lockstep NumPy path (native="off") or a host model without an error; each is compared bit for bit with both:
a register read before its one definition in the first block (kept once per CTA, a thread read another's: fixed),
a pointer's allocation hint across launches and allocations, atomics through generic addresses of every width
with contention, float atomic adds of NaNs (the C add kept the other NaN: fixed), a grid barrier made by hand
(CTAs set aside and resumed; faults in them); shfl in four modes, vote, redux, match and activemask in 2-D
blocks, partial warps, exited lanes, two paths and a loop lanes leave, under run-time member masks."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen
from pyvgpu_daemon.errors import CudaError, code_of

from differential.warp_cases import shfl_source
from test_emu_stage3_review import CTA, OFF, every_barrier_kernel  # noqa: F401 (an autouse fixture: a CTA at a time)
from test_emu_threadgen import HEAD, _module


def _launch(ptx, name, mode, grid, block, params, shared=0, mem=None, require=True, codes=None, **kw):
    """(what params' read-back returns, or (error code, read-back) after an error); require: the kernel must run a
    CTA at a time in mode CTA."""
    mem = mem or DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem, **kw)
    raw, read = params(mem)
    grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
    block = block if isinstance(block, tuple) else (block, 1, 1)
    try:
        mod.launch(name, grid, block, shared, raw)
    except CudaError as e:
        return ("error", e.code, read(mem))
    finally:
        if codes is not None and mode is CTA:
            codes.append(mod.kernel(name).native_make())
    if mode is CTA and require:
        assert isinstance(mod.kernel(name).native_make(), ctagen.CtaCode), "the kernel did not run a CTA at a time"
    return read(mem)


def _both(ptx, name, grid, block, params, shared=0, codes=None, **kw):
    on = _launch(ptx, name, CTA, grid, block, params, shared, codes=codes, **kw)
    off = _launch(ptx, name, OFF, grid, block, params, shared, **kw)
    return on, off


def _out(nbytes: int, *extra_allocs: np.ndarray, pack: str = ""):
    """params(mem) for kernels taking (out, in0, in1, ..., extra scalars): out zeroed, in_k = extra_allocs[k]."""
    def params(mem):
        out = mem.alloc(nbytes)
        ins = []
        for a in extra_allocs:
            p = mem.alloc(max(a.nbytes, 4))
            mem.write(p, a.tobytes())
            ins.append(p)
        return struct.pack("<" + "Q" * (1 + len(ins)), out, *ins) + pack.encode("latin-1"), \
            lambda m: np.frombuffer(bytes(m.read(out, nbytes)), np.uint32).copy()
    return params


# ---------------------------------------------------------------- scanfast7: registers kept once per CTA
# %r5 has one definition, in the first block, from an immediate: ctagen._uniform keeps it once per CTA. But each
# thread reads its own %r5 before that definition (0: a register read before written starts at zero, as every
# lane's does on the lockstep path; test_emu_ctagen's test_registers_read_before_written_start_at_zero...), in the
# same loop over the threads: kept once, thread 1 read thread 0's 7.
READ_BEFORE = HEAD + """
.visible .entry rb(.param .u64 out)
{
  .reg .b32 %r<10>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
  mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd3, %rd1, %rd2;
  add.u32 %r6, %r5, 1;
  mov.u32 %r5, 7;
  st.global.u32 [%rd3], %r6;
  bar.sync 0;
  ret;
}
"""


@pytest.mark.parametrize("block", [1, 33, 64])
def test_a_register_read_before_its_one_definition_is_per_thread(block):
    grid = 3
    on, off = _both(READ_BEFORE, "rb", grid, block, _out(4 * grid * block))
    want = np.ones(grid * block, np.uint32)
    assert (off == want).all()
    assert (on == want).all(), np.nonzero(on != want)


# A converged loop of global loads and stores without suspensions (ctagen._fast_code) launched twice by one module:
# between the launches the source allocation is freed (the second launch's loads must fault as on the lockstep
# path, not read through the first launch's allocation hint), or a neighbouring allocation holds the second half of
# the addresses (each address checked against the allocation its pointer used last: another one is served by the
# loop with suspensions).
COPY = HEAD + """
.visible .entry cp(.param .u64 out, .param .u64 in, .param .u64 in2, .param .u32 split)
{
  .reg .pred %p<3>; .reg .b32 %r<20>; .reg .b64 %rd<12>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in]; ld.param.u64 %rd9, [in2]; ld.param.u32 %r10, [split];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  setp.ge.u32 %p1, %r4, %r10;
  selp.b64 %rd10, %rd9, %rd2, %p1;
  add.s64 %rd4, %rd10, %rd3;
  ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, sh; shl.b32 %r7, %r1, 2; add.s32 %r8, %r6, %r7;
  st.shared.u32 [%r8], %r5;
  bar.sync 0;
  ld.shared.u32 %r9, [%r8];
  add.s32 %r9, %r9, 1;
  add.s64 %rd7, %rd1, %rd3;
  st.global.u32 [%rd7], %r9;
  ret;
}
"""


@pytest.mark.parametrize("case", ["freed", "neighbour"])
def test_a_pointer_hint_does_not_outlive_its_launch_or_allocation(case):
    grid, block = 4, 64
    n = grid * block
    data = np.arange(n, dtype=np.uint32) * 11 + 5
    results = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(COPY, mode, mem)
        src, out = mem.alloc(4 * n), mem.alloc(4 * n)
        mem.write(src, data.tobytes())
        mod.launch("cp", (grid, 1, 1), (block, 1, 1), 0, struct.pack("<QQQI", out, src, src, n))
        first = np.frombuffer(bytes(mem.read(out, 4 * n)), np.uint32).copy()
        assert (first == data + 1).all()
        if mode is CTA:
            assert isinstance(mod.kernel("cp").native_make(), ctagen.CtaCode)
        if case == "freed":
            mem.free(src)
            args = struct.pack("<QQQI", out, src, src, n)
        else:
            # the second half of the threads read another allocation at the same offsets
            other = mem.alloc(4 * n)
            mem.write(other, (data * 3).tobytes())
            args = struct.pack("<QQQI", out, src, other, n // 2 + 7)
        try:
            mod.launch("cp", (grid, 1, 1), (block, 1, 1), 0, args)
            results.append(np.frombuffer(bytes(mem.read(out, 4 * n)), np.uint32).copy())
        except CudaError as e:
            results.append(e.code)
    if case == "freed":
        assert results[0] == results[1] == code_of("cudaErrorIllegalAddress")
    else:
        want = np.where(np.arange(n) >= n // 2 + 7, data * 3, data) + 1
        assert (results[0] == want).all() and (results[1] == want).all()


HEAD80 = ".version 8.0\n.target sm_80\n.address_size 64\n"


# ---------------------------------------------------------------- ctawarp7: warp operations a CTA at a time


def _value(lin: np.ndarray, cta: int) -> np.ndarray:
    return ((lin.astype(np.uint64) * 2654435761) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(0x5BD1E995 + cta)


# 2-D blocks (warps of consecutive linear thread indices), lanes with (lin & 7) == 3 exited, shared stores before
# the shuffles and after, the member mask activemask's (a run-time register), b per lane for idx, c a parameter;
# per thread 8 words: up (value, predicate), down (value, predicate), bfly, idx, the mask, and the neighbour's
# value stored in shared memory before the shuffles, read after a barrier.
SHFL = HEAD80 + """
.visible .entry wshfl(.param .u64 out, .param .u32 cval)
{
  .reg .pred %p<6>; .reg .b32 %r<40>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[8192];
  ld.param.u64 %rd1, [out]; ld.param.u32 %r20, [cval];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %ntid.x; mov.u32 %r4, %ctaid.x;
  mad.lo.s32 %r5, %r2, %r3, %r1;
  mov.u32 %r6, %ntid.y; mul.lo.s32 %r7, %r3, %r6;
  mad.lo.s32 %r8, %r4, %r7, %r5;
  mul.wide.u32 %rd2, %r8, 32;
  add.s64 %rd3, %rd1, %rd2;
  mul.lo.u32 %r9, %r8, -1640531535; add.u32 %r30, %r4, 0x5BD1E995; xor.b32 %r9, %r9, %r30;
  mov.u32 %r31, sh; shl.b32 %r32, %r5, 2; add.s32 %r33, %r31, %r32;
  and.b32 %r10, %r5, 7; setp.eq.u32 %p1, %r10, 3;
  @%p1 bra DONE;
  st.shared.u32 [%r33], %r9;
  activemask.b32 %r11;
  and.b32 %r12, %r5, 31; mul.lo.u32 %r13, %r12, 7; and.b32 %r13, %r13, 31;
  shfl.sync.up.b32 %r14|%p2, %r9, 3, %r20, %r11;
  shfl.sync.down.b32 %r15|%p3, %r9, 5, %r20, %r11;
  shfl.sync.bfly.b32 %r16, %r9, 6, %r20, %r11;
  shfl.sync.idx.b32 %r17, %r9, %r13, %r20, %r11;
  st.shared.u32 [%r33+4096], %r17;
  selp.u32 %r18, 1, 0, %p2; selp.u32 %r19, 1, 0, %p3;
  st.global.v4.u32 [%rd3], {%r14, %r18, %r15, %r19};
DONE:
  bar.sync 0;
  @%p1 exit;
  xor.b32 %r34, %r32, 4; add.s32 %r35, %r31, %r34;
  ld.shared.u32 %r36, [%r35];
  ld.shared.u32 %r37, [%r33+4096];
  st.global.v4.u32 [%rd3+16], {%r16, %r17, %r11, %r36};
  ret;
}
"""


def _shfl_host(grid: int, bx: int, by: int, c: int) -> np.ndarray:
    cs = bx * by
    out = np.zeros((grid * cs, 8), np.uint32)
    for cta in range(grid):
        lin = np.arange(cs)
        v = _value(cta * cs + lin, cta)
        live = (lin & 7) != 3
        for w0 in range(0, cs, 32):
            lanes = [x for x in range(32) if w0 + x < cs]
            ex = {x for x in lanes if live[w0 + x]}
            mask = sum(1 << x for x in ex)
            for x in ex:
                row = out[cta * cs + w0 + x]
                res = []
                for mode, b in (("up", 3), ("down", 5), ("bfly", 6), ("idx", (x * 7) & 31)):
                    j, p = shfl_source(mode, x, b, c)
                    res.append((int(v[w0 + j]) if j in ex else 0, int(p)))
                row[:] = [res[0][0], res[0][1], res[1][0], res[1][1], res[2][0], res[3][0], mask, 0]
                nb = (w0 + x) ^ 1
                row[7] = int(v[nb]) if nb < cs and live[nb] else 0
    return out.reshape(-1)


@pytest.mark.parametrize("block", [(32, 1), (33, 1), (12, 5), (8, 6), (48, 2)])
@pytest.mark.parametrize("cval", [0x1F, 0x0, 0x181F, 0x1800, 0x0C07])
def test_shuffles_in_2d_blocks_with_exited_lanes_and_stores_around(block, cval):
    grid = 2
    n = grid * block[0] * block[1]
    on, off = _both(SHFL, "wshfl", grid, block + (1,), _out(32 * n, pack=struct.pack("<I", cval).decode("latin-1")))
    want = _shfl_host(grid, *block, cval)
    assert (off == want).all(), np.nonzero(off != want)
    assert (on == want).all(), np.nonzero(on != want)


# Two paths of a warp at two PCs (lanes split by (lane * 5) & 31 < split), each with its own warp operations over
# the member mask a parameter gives (kept once per CTA: ctagen._uniform) and'ed with activemask, guarded ones among
# them; 8 words per thread: activemask, ballot, vote.any/all/uni bits, redux add/min/max/xor, match.any,
# match.all (value, predicate).
VOTES = HEAD80 + """
.visible .entry wvote(.param .u64 out, .param .u32 pmask, .param .u32 split)
{
  .reg .pred %p<12>; .reg .b32 %r<50>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out]; ld.param.u32 %r20, [pmask]; ld.param.u32 %r21, [split];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %ntid.x; mov.u32 %r4, %ctaid.x;
  mad.lo.s32 %r5, %r2, %r3, %r1;
  mov.u32 %r6, %ntid.y; mul.lo.s32 %r7, %r3, %r6;
  mad.lo.s32 %r8, %r4, %r7, %r5;
  mul.wide.u32 %rd2, %r8, 48;
  add.s64 %rd3, %rd1, %rd2;
  mul.lo.u32 %r9, %r8, -1640531535; add.u32 %r30, %r4, 0x5BD1E995; xor.b32 %r9, %r9, %r30;
  and.b32 %r12, %r5, 31;
  and.b32 %r10, %r5, 7; setp.eq.u32 %p1, %r10, 6;
  @%p1 exit;
  mul.lo.u32 %r13, %r12, 5; and.b32 %r13, %r13, 31;
  setp.lt.u32 %p2, %r13, %r21;
  and.b32 %r14, %r9, 1; setp.ne.u32 %p3, %r14, 0;
  and.b32 %r15, %r9, 3;
  shr.u32 %r16, %r12, 4;
  and.b32 %r17, %r9, 0x80000FFF;
  setp.ne.u32 %p4, %r10, 1;
  @%p2 bra A;
  activemask.b32 %r22;
  and.b32 %r23, %r22, %r20;
  vote.sync.ballot.b32 %r24, %p3, %r23;
  @%p4 vote.sync.any.pred %p5, %p3, %r23;
  vote.sync.all.pred %p6, %p3, %r23;
  vote.sync.uni.pred %p7, %p4, %r23;
  redux.sync.add.u32 %r25, %r9, %r23;
  @%p4 redux.sync.min.s32 %r26, %r17, %r23;
  redux.sync.max.u32 %r27, %r9, %r23;
  redux.sync.xor.b32 %r28, %r9, %r23;
  match.any.sync.b32 %r29, %r15, %r23;
  match.all.sync.b32 %r31|%p8, %r16, %r23;
  vote.sync.ballot.b32 %r10, !%p3, %r23;
  bra.uni J;
A:
  activemask.b32 %r22;
  and.b32 %r23, %r22, %r20;
  @%p4 vote.sync.ballot.b32 %r24, %p3, %r23;
  vote.sync.any.pred %p5, %p3, %r23;
  @!%p4 vote.sync.all.pred %p6, %p3, %r23;
  vote.sync.uni.pred %p7, %p3, %r23;
  @%p4 redux.sync.add.u32 %r25, %r17, %r23;
  redux.sync.min.u32 %r26, %r9, %r23;
  redux.sync.max.s32 %r27, %r17, %r23;
  redux.sync.and.b32 %r28, %r9, %r23;
  @!%p4 match.any.sync.b32 %r29, %r16, %r23;
  match.all.sync.b32 %r31|%p8, %r15, %r23;
  @%p4 activemask.b32 %r10;
J:
  selp.u32 %r40, 1, 0, %p5; selp.u32 %r41, 2, 0, %p6; selp.u32 %r42, 4, 0, %p7; selp.u32 %r43, 8, 0, %p8;
  or.b32 %r40, %r40, %r41; or.b32 %r42, %r42, %r43; or.b32 %r40, %r40, %r42;
  st.global.v4.u32 [%rd3], {%r22, %r24, %r40, %r25};
  st.global.v4.u32 [%rd3+16], {%r26, %r27, %r28, %r29};
  st.global.v4.u32 [%rd3+32], {%r31, %r23, %r9, %r10};
  ret;
}
"""


def _votes_host(grid: int, bx: int, by: int, pmask: int, split: int) -> np.ndarray:
    """The lockstep path's (runtime/collective.py) warp semantics: a warp operation's executing threads are the
    warp's threads at it whose guard holds; vote/redux/match reduce over those whose member-mask bit is set and
    write every executing thread; unwritten registers read 0."""
    cs = bx * by
    out = np.zeros((grid * cs, 12), np.uint32)
    s32 = lambda x: x - (1 << 32) if x & 0x80000000 else x        # noqa: E731
    for cta in range(grid):
        for w0 in range(0, cs, 32):
            lanes = [x for x in range(32) if w0 + x < cs and ((w0 + x) & 7) != 6]
            lin = {x: w0 + x for x in lanes}
            v = {x: int(_value(np.array([cta * cs + lin[x]]), cta)[0]) for x in lanes}
            g = {x: ((x * 5) & 31) < split for x in lanes}
            p3 = {x: v[x] & 1 == 1 for x in lanes}
            p4 = {x: (lin[x] & 7) != 1 for x in lanes}
            k15 = {x: v[x] & 3 for x in lanes}
            k16 = {x: x >> 4 for x in lanes}
            k17 = {x: v[x] & 0x80000FFF for x in lanes}
            for path in (False, True):
                at = [x for x in lanes if g[x] == path]
                if not at:
                    continue
                am = sum(1 << x for x in at)
                m23 = am & pmask

                def ex(guard):
                    return [x for x in at if guard is None or guard[x]]

                def mem(guard):
                    return [x for x in ex(guard) if (m23 >> x) & 1]

                r = {x: dict(r22=am, r23=m23) for x in at}
                if not path:
                    ops = [("ballot", "r24", p3, None), ("any", "p5", p3, p4), ("all", "p6", p3, None),
                           ("uni", "p7", p4, None)]
                    reds = [("add", "r25", v, None, False), ("min", "r26", k17, p4, True),
                            ("max", "r27", v, None, False), ("xor", "r28", v, None, False)]
                    many = ("r29", k15, None)
                    mall = k16
                else:
                    notp4 = {x: not p4[x] for x in lanes}
                    ops = [("ballot", "r24", p3, p4), ("any", "p5", p3, None), ("all", "p6", p3, notp4),
                           ("uni", "p7", p3, None)]
                    reds = [("add", "r25", k17, p4, False), ("min", "r26", v, None, False),
                            ("max", "r27", k17, None, True), ("and", "r28", v, None, False)]
                    many = ("r29", k16, notp4)
                    mall = k15
                for mode, dst, src, guard in ops:
                    ms = mem(guard)
                    bal = sum(1 << x for x in ms if src[x])
                    full = sum(1 << x for x in ms)
                    val = {"ballot": bal, "any": bal != 0, "all": bal == full, "uni": bal == 0 or bal == full}[mode]
                    for x in ex(guard):
                        r[x][dst] = int(val)
                for op, dst, src, guard, signed in reds:
                    ms = mem(guard)
                    vals = [s32(src[x]) if signed else src[x] for x in ms]
                    if not vals:
                        val = 0
                    elif op == "add":
                        val = sum(vals) & 0xFFFFFFFF
                    elif op == "min":
                        val = min(vals) & 0xFFFFFFFF
                    elif op == "max":
                        val = max(vals) & 0xFFFFFFFF
                    else:
                        val = vals[0]
                        for y in vals[1:]:
                            val = val ^ y if op == "xor" else val & y
                    for x in ex(guard):
                        r[x][dst] = val
                dst, src, guard = many
                ms = mem(guard)
                for x in ex(guard):
                    r[x][dst] = sum(1 << q for q in ms if src[q] == src[x]) if x in ms else 0
                ms = mem(None)
                same = len({mall[x] for x in ms}) <= 1
                for x in at:
                    inn = x in ms
                    r[x]["r31"] = m23 if inn and same else 0
                    r[x]["p8"] = int(inn and same)
                for x in at:
                    if not path:
                        r[x]["r10"] = sum(1 << y for y in mem(None) if not p3[y])
                    else:
                        r[x]["r10"] = am if p4[x] else lin[x] & 7
                for x in at:
                    q = r[x]
                    flags = q.get("p5", 0) | 2 * q.get("p6", 0) | 4 * q.get("p7", 0) | 8 * q.get("p8", 0)
                    out[cta * cs + lin[x]] = [q["r22"], q.get("r24", 0), flags, q.get("r25", 0), q.get("r26", 0),
                                              q.get("r27", 0), q.get("r28", 0), q.get("r29", 0), q["r31"],
                                              q["r23"], v[x], q["r10"]]
    return out.reshape(-1)


@pytest.mark.parametrize("block", [(32, 1), (35, 1), (12, 5), (16, 4)])
@pytest.mark.parametrize("pmask, split", [(0xFFFFFFFF, 13), (0xF0F0F0F3, 13), (0xFFFFFFFF, 0), (0x7FFFFFFE, 32),
                                          (0x00010001, 20)])
def test_votes_reductions_and_matches_on_two_paths(block, pmask, split):
    grid = 2
    n = grid * block[0] * block[1]
    on, off = _both(VOTES, "wvote", grid, block + (1,), _out(48 * n, pack=struct.pack("<II", pmask, split)
                                                              .decode("latin-1")))
    want = _votes_host(grid, *block, pmask, split)
    assert (off == want).all(), np.nonzero(off != want)
    assert (on == want).all(), np.nonzero(on != want)


# A loop whose trip count differs per lane (1 + (lane * 7) % 5 + cta), a shfl.down over activemask each round (the
# lanes still in the loop): the lanes that left read as 0, lane 31 (out of range) reads itself.
LOOPED = HEAD80 + """
.visible .entry wloop(.param .u64 out)
{
  .reg .pred %p<4>; .reg .b32 %r<40>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %ctaid.x;
  mad.lo.s32 %r8, %r4, %r3, %r1;
  mul.wide.u32 %rd2, %r8, 8;
  add.s64 %rd3, %rd1, %rd2;
  mul.lo.u32 %r9, %r8, -1640531535; add.u32 %r30, %r4, 0x5BD1E995; xor.b32 %r9, %r9, %r30;
  and.b32 %r12, %r1, 31; mul.lo.u32 %r13, %r12, 7; rem.u32 %r13, %r13, 5; add.u32 %r13, %r13, 1;
  add.u32 %r13, %r13, %r4;
  mov.u32 %r14, 0; mov.u32 %r16, 0;
LOOP:
  activemask.b32 %r11;
  shfl.sync.down.b32 %r15, %r9, 1, 31, %r11;
  add.u32 %r9, %r9, %r15;
  xor.b32 %r16, %r16, %r11;
  add.u32 %r14, %r14, 1;
  setp.lt.u32 %p1, %r14, %r13;
  @%p1 bra LOOP;
  st.global.v2.u32 [%rd3], {%r9, %r16};
  ret;
}
"""


def _loop_host(grid: int, block: int) -> np.ndarray:
    out = np.zeros((grid * block, 2), np.uint32)
    for cta in range(grid):
        lin = np.arange(block)
        x = _value(cta * block + lin, cta).astype(np.uint64)
        trips = 1 + ((lin & 31) * 7) % 5 + cta
        acc = np.zeros(block, np.uint64)
        for t in range(int(trips.max())):
            for w0 in range(0, block, 32):
                e = [q for q in range(32) if w0 + q < block and trips[w0 + q] > t]
                mask = sum(1 << q for q in e)
                y = {}
                for q in e:
                    j = q + 1 if q + 1 <= 31 else q
                    y[q] = int(x[w0 + j]) if j in e else 0
                for q in e:
                    x[w0 + q] = (int(x[w0 + q]) + y[q]) & 0xFFFFFFFF
                    acc[w0 + q] ^= mask
        out[cta * block:(cta + 1) * block] = np.stack([x, acc], 1)
    return out.reshape(-1)


@pytest.mark.parametrize("block", [32, 45, 96])
def test_a_shuffle_in_a_loop_lanes_leave(block):
    grid = 3
    on, off = _both(LOOPED, "wloop", grid, block, _out(8 * grid * block))
    want = _loop_host(grid, block)
    assert (off == want).all(), np.nonzero(off != want)
    assert (on == want).all(), np.nonzero(on != want)


# ---------------------------------------------------------------- ctaatom7: atomics a CTA at a time
# Atomics through generic addresses into shared and global memory, 16/32/64-bit integer and f32/f64 types, with
# contention (a few addresses per CTA), their old values in thread order; per thread 10 words out, then the
# shared words and the global words after. Each global word is touched by one instruction only, so the order
# across CTAs (one after the other here, lane order over the chunk on the lockstep path) gives the same bits.
ATOMS = HEAD80 + """
.visible .entry atoms(.param .u64 out, .param .u64 gw, .param .u64 in, .param .u32 lim)
{
  .reg .pred %p<4>; .reg .b16 %h<4>; .reg .b32 %r<40>; .reg .b64 %rd<40>; .reg .f32 %f<8>; .reg .f64 %fd<8>;
  .shared .align 8 .b8 sh[128];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [gw]; ld.param.u64 %rd3, [in]; ld.param.u32 %r30, [lim];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd4, %r4, 8; add.s64 %rd5, %rd3, %rd4;
  ld.global.u64 %rd6, [%rd5];
  cvt.u32.u64 %r5, %rd6;
  mov.u32 %r20, %r5; shr.u64 %rd31, %rd6, 32; cvt.u32.u64 %r21, %rd31;
  setp.lt.u32 %p1, %r1, 16;
  mov.u64 %rd7, sh;
  @!%p1 bra INITED;
  shl.b32 %r6, %r1, 3; cvt.u64.u32 %rd8, %r6; add.s64 %rd9, %rd7, %rd8;
  add.s64 %rd10, %rd3, %rd8;
  ld.global.u64 %rd11, [%rd10];
  st.shared.u64 [%rd9], %rd11;
INITED:
  bar.sync 0;
  cvta.shared.u64 %rd12, %rd7;
  cvta.global.u64 %rd13, %rd2;
  and.b32 %r7, %r1, 3; shl.b32 %r8, %r7, 2; cvt.u64.u32 %rd14, %r8;
  add.s64 %rd15, %rd12, %rd14;
  atom.add.u32 %r10, [%rd15], %r5;
  and.b32 %r9, %r1, 1; shl.b32 %r9, %r9, 3; cvt.u64.u32 %rd16, %r9;
  add.s64 %rd17, %rd7, %rd16;
  atom.shared.min.s64 %rd18, [%rd17+16], %rd6;
  atom.max.u64 %rd19, [%rd12+32], %rd6;
  and.b64 %rd20, %rd6, 3;
  atom.cas.b64 %rd21, [%rd12+40], %rd20, %rd6;
  cvt.u16.u32 %h1, %r21; and.b16 %h2, %h1, 1;
  atom.shared.cas.b16 %h3, [sh+48], %h2, %h1;
  cvt.u32.u16 %r11, %h3;
  and.b64 %rd22, %rd6, 0x800FFFFFFFFFFFFF; or.b64 %rd22, %rd22, 0x3FF0000000000000; mov.b64 %fd2, %rd22;
FLT  atom.global.add.f64 %fd3, [%rd2], %fd2;
  mov.b32 %f1, %r20;
  add.s64 %rd23, %rd13, %rd14;
FLT  atom.add.f32 %f2, [%rd23+8], %f1;
  atom.global.exch.b32 %r12, [%rd2+24], %r21;
  atom.global.inc.u32 %r13, [%rd2+28], %r30;
  atom.global.dec.u32 %r14, [%rd2+32], %r30;
  red.shared.xor.b32 [sh+52], %r20;
  atom.global.exch.b64 %rd24, [%rd2+40], %rd6;
FLT  red.add.f32 [%rd13+48], %f1;
  mul.wide.u32 %rd25, %r4, 64; add.s64 %rd26, %rd1, %rd25;
  mov.b64 %rd27, %fd3; mov.b32 %r15, %f2;
  st.global.v4.u32 [%rd26], {%r10, %r11, %r12, %r13};
  st.global.v2.u32 [%rd26+16], {%r14, %r15};
  st.global.v2.u64 [%rd26+32], {%rd18, %rd19};
  st.global.v2.u64 [%rd26+48], {%rd21, %rd27};
  st.global.u64 [%rd26+24], %rd24;
  bar.sync 0;
  @!%p1 bra DONE;
  mul.wide.u32 %rd28, %r3, 128; add.s64 %rd29, %rd2, %rd28; add.s64 %rd29, %rd29, %rd8;
  ld.shared.u64 %rd30, [%rd9];
  st.global.u64 [%rd29+64], %rd30;
DONE:
  ret;
}
"""
NAN_A, NAN_B = 0x7FC00123, 0xFFA00456          # f32 NaNs with payloads (the second one signalling)


def _atoms_data(grid: int, block: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 1 << 64, grid * block, dtype=np.uint64)
    lo = (d & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    # f32 halves: some NaNs with payloads, zeros of both signs, subnormals, large and small magnitudes
    special = np.array([NAN_A, NAN_B, 0x80000000, 0x00000000, 0x00000003, 0x80400000, 0x7F7FFFFF, 0x3F800001],
                       np.uint32)
    pick = rng.integers(0, 3 * len(special), lo.size)
    lo = np.where(pick < len(special), special[np.minimum(pick, len(special) - 1)], lo)
    return (d & np.uint64(0xFFFFFFFF00000000)) | lo.astype(np.uint64)


def _add(a, b):
    """a + b as an x86 SSE add (ops/atomic's NumPy arrays; the C code's): a NaN operand's payload, quieted."""
    with np.errstate(all="ignore"):
        return (np.array([a]) + np.array([b], np.array([a]).dtype))[0]


def _atoms_host(data: np.ndarray, grid: int, block: int, lim: int, floats: bool):
    """Serial application in thread order: (out words per thread as uint32 [n, 16], shared words per CTA, global
    words)."""
    M32, M64 = 0xFFFFFFFF, (1 << 64) - 1
    n = grid * block
    out = np.zeros((n, 16), np.uint32)
    sh_final = np.zeros((grid, 16), np.uint64)
    g = dict(f64=[0.0, 0.0], f32=[np.float32(0)] * 4, exch32=0, inc=0, dec=0, exch64=0, red=np.float32(0))
    gbits = lambda x: int(np.float32(x).view(np.uint32))       # noqa: E731
    for c in range(grid):
        sh = [int(data[k]) if k < block else 0 for k in range(16)]   # (threads 0..15 set them)

        def w32(k):
            word = sh[k // 2]
            return (word >> (32 * (k % 2))) & M32

        def set32(k, v):
            word = sh[k // 2]
            sh[k // 2] = (word & ~(M32 << (32 * (k % 2)))) | (v << (32 * (k % 2)))

        def s64(x):
            return x - (1 << 64) if x >> 63 else x
        rows = [dict() for _ in range(block)]
        vals = [int(data[c * block + t]) for t in range(block)]
        for t, v in enumerate(vals):                       # atom.add.u32 at sh + 4 * (t & 3)
            k = t & 3
            rows[t][0] = w32(k)
            set32(k, (w32(k) + (v & M32)) & M32)
        for t, v in enumerate(vals):                       # atom.min.s64 at sh + 16 + 8 * (t & 1)
            k = 2 + (t & 1)
            rows[t]["min"] = sh[k]
            sh[k] = sh[k] if s64(sh[k]) < s64(v) else v
        for t, v in enumerate(vals):                       # atom.max.u64 at sh + 32
            rows[t]["max"] = sh[4]
            sh[4] = max(sh[4], v)
        for t, v in enumerate(vals):                       # atom.cas.b64 at sh + 40
            rows[t]["cas"] = sh[5]
            sh[5] = v if sh[5] == (v & 3) else sh[5]
        for t, v in enumerate(vals):                       # atom.cas.b16 at sh + 48
            h1 = (v >> 32) & 0xFFFF
            old = sh[6] & 0xFFFF
            rows[t][1] = old
            if old == (h1 & 1):
                sh[6] = (sh[6] & ~0xFFFF) | h1
        for t, v in enumerate(vals):                       # atom.global.add.f64 at gw
            b = (v & 0x800FFFFFFFFFFFFF) | 0x3FF0000000000000
            old = g["f64"][0]
            rows[t]["f64"] = int(np.float64(old).view(np.uint64)) if floats else 0
            g["f64"][0] = _add(np.float64(old), np.uint64(b).view(np.float64))
        for t, v in enumerate(vals):                       # atom.add.f32 at gw + 8 + 4 * (t & 3)
            k = t & 3
            old = g["f32"][k]
            rows[t][5] = gbits(old) if floats else 0
            g["f32"][k] = _add(old, np.uint32(v & M32).view(np.float32))
        for t, v in enumerate(vals):                       # exch.b32 at gw + 24, inc / dec at + 28 / + 32
            rows[t][2] = g["exch32"]
            g["exch32"] = v >> 32
            rows[t][3] = g["inc"]
            g["inc"] = 0 if g["inc"] >= lim else g["inc"] + 1
            rows[t][4] = g["dec"]
            g["dec"] = lim if g["dec"] == 0 or g["dec"] > lim else g["dec"] - 1
        for t, v in enumerate(vals):                       # red.xor.b32 at sh + 52
            set32(13, w32(13) ^ (v & M32))
        for t, v in enumerate(vals):                       # exch.b64 at gw + 40, red.add.f32 at gw + 48
            rows[t]["x64"] = g["exch64"]
            g["exch64"] = v
            g["red"] = _add(g["red"], np.uint32(v & M32).view(np.float32))
        for t in range(block):
            r = rows[t]
            o = out[c * block + t]
            o[0:6] = [r[0], r[1], r[2], r[3], r[4], r[5]]
            o[6:8] = [r["x64"] & M32, r["x64"] >> 32]
            for k, key in ((8, "min"), (10, "max"), (12, "cas"), (14, "f64")):
                o[k:k + 2] = [r[key] & M32, r[key] >> 32]
        sh_final[c] = sh
    gw = np.zeros(16 + 32 * grid, np.uint32)
    if not floats:
        g.update(f64=[0.0, 0.0], f32=[np.float32(0)] * 4, red=np.float32(0))
    f64 = int(np.float64(g["f64"][0]).view(np.uint64))
    gw[0:2] = [f64 & M32, f64 >> 32]
    gw[2:6] = [gbits(x) for x in g["f32"]]
    gw[6:9] = [g["exch32"], g["inc"], g["dec"]]
    gw[10:12] = [g["exch64"] & M32, g["exch64"] >> 32]
    gw[12] = gbits(g["red"])
    for c in range(grid):
        words = np.where(np.arange(16) < block, sh_final[c], 0).astype(np.uint64)
        gw[16 + 32 * c: 16 + 32 * c + 32] = np.stack([words & np.uint64(M32), words >> np.uint64(32)],
                                                            1).reshape(-1).astype(np.uint32)
    return out.reshape(-1), gw


def _atoms_ptx(floats: bool) -> str:
    return "\n".join(x[3:] if x.startswith("FLT") else x for x in ATOMS.split("\n") if floats or
                     not x.startswith("FLT"))


@pytest.mark.parametrize("block", [1, 33, 64, 256])
@pytest.mark.parametrize("tick", [None, 3], ids=["plain", "suspended every 3"])
def test_atomics_through_generic_addresses_every_width(monkeypatch, block, tick):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    _atoms_case(block, floats=False)


# f32 and f64 adds (atom and red) whose operands include NaNs with payloads: a sum of two NaNs keeps the payload of
# the machine add's first operand, which NumPy's `old + b` keeps in order and the C compiler was free to swap (CTAs
# of 256: the C code stored the second NaN, the lockstep path the first); such adds keep the other paths
# (ctaatomic.emit).
@pytest.mark.parametrize("block", [33, 256])
def test_float_atomic_adds_store_the_lockstep_nans(block):
    _atoms_case(block, floats=True)


def _atoms_case(block: int, floats: bool) -> None:
    grid, lim = 3, 37
    data = _atoms_data(grid, max(block, 16), block)[:grid * max(block, 16)]
    gwords = 16 + 32 * grid

    def params(mem):
        out, gw, src = mem.alloc(64 * grid * block), mem.alloc(4 * gwords), mem.alloc(data.nbytes)
        mem.write(src, data.tobytes())
        return struct.pack("<QQQI", out, gw, src, lim), \
            lambda m: (np.frombuffer(bytes(m.read(out, 64 * grid * block)), np.uint32).copy(),
                       np.frombuffer(bytes(m.read(gw, 4 * gwords)), np.uint32).copy())
    # (one thread: the global exch/inc/dec old values are serial application's, CTA after CTA; on two threads the
    # CTAs' atomics meet in another order a GPU may give: test_emu_ctatalk2 checks totals there)
    on = _launch(_atoms_ptx(floats), "atoms", CTA, grid, block, params, require=not floats, talk_threads=1)
    off = _launch(_atoms_ptx(floats), "atoms", OFF, grid, block, params)
    want = _atoms_host(data, grid, block, lim, floats)
    for got in (off, on):
        assert (got[0] == want[0]).all(), np.nonzero(got[0] != want[0])
        assert (got[1] == want[1]).all(), np.nonzero(got[1] != want[1])


# A grid barrier made by hand (each CTA's thread 0 adds 1 to a global count, then spins on a volatile load of it
# until every CTA has come): a CTA a time must set the early CTAs aside (ctaatomic.run_talking) and resume them
# with their registers (32/64-bit, a predicate, a register kept once per CTA, %ctaid), shared and local memory as
# they left them. After the barrier each thread reads what a thread of the next CTA stored before it; thread 5 of
# CTA `bad` then loads at a bad address (no CTA: none does).
GRID_BARRIER = HEAD80 + """
.visible .entry gbar(.param .u64 out, .param .u64 count, .param .u64 in, .param .u32 bad, .param .u64 mid)
{
  .local .align 8 .b8 loc[16];
  .reg .pred %p<6>; .reg .b32 %r<40>; .reg .b64 %rd<40>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [count]; ld.param.u64 %rd3, [in]; ld.param.u32 %r30, [bad];
  ld.param.u64 %rd30, [mid];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %nctaid.x;
  mad.lo.s32 %r5, %r3, %r2, %r1;
  mul.wide.u32 %rd4, %r5, 4; add.s64 %rd5, %rd3, %rd4;
  ld.global.u32 %r6, [%rd5];
  mul.lo.u32 %r7, %r6, 3;
  mov.u32 %r8, sh; shl.b32 %r9, %r1, 2; add.s32 %r10, %r8, %r9;
  st.shared.u32 [%r10], %r7;
  mul.wide.u32 %rd6, %r6, 0x10001;
  st.local.u64 [loc], %rd6;
  setp.eq.u32 %p1, %r3, %r30;
  and.b32 %r31, %r1, 1; setp.eq.u32 %p2, %r31, 1;
  add.s64 %rd7, %rd30, %rd4;
  st.global.u32 [%rd7], %r6;
  bar.sync 0;
  setp.ne.u32 %p3, %r1, 0;
  @%p3 bra WAITED;
  atom.global.add.u32 %r11, [%rd2], 1;
SPIN:
  ld.volatile.global.u32 %r12, [%rd2];
  setp.lt.u32 %p4, %r12, %r4;
  @%p4 bra SPIN;
WAITED:
  bar.sync 0;
  add.u32 %r13, %r3, 1; setp.eq.u32 %p4, %r13, %r4; selp.u32 %r13, 0, %r13, %p4;
  mad.lo.s32 %r14, %r13, %r2, %r1;
  mul.wide.u32 %rd8, %r14, 4; add.s64 %rd9, %rd30, %rd8;
  ld.global.u32 %r15, [%rd9];
  add.u32 %r16, %r1, 1; setp.eq.u32 %p4, %r16, %r2; selp.u32 %r16, 0, %r16, %p4; shl.b32 %r16, %r16, 2; add.s32 %r16, %r8, %r16;
  ld.shared.u32 %r17, [%r16];
  ld.local.u64 %rd10, [loc];
  selp.u32 %r18, 1, 0, %p2;
  setp.eq.and.u32 %p5, %r1, 5, %p1;
  @%p5 mov.u64 %rd9, 8;
  ld.global.u32 %r19, [%rd9];
  mul.wide.u32 %rd11, %r5, 32; add.s64 %rd12, %rd1, %rd11;
  st.global.v4.u32 [%rd12], {%r15, %r17, %r18, %r19};
  st.global.u64 [%rd12+16], %rd10;
  st.global.v2.u32 [%rd12+24], {%r3, %r30};
  ret;
}
"""


def _gbar_host(data: np.ndarray, grid: int, block: int, bad: int) -> np.ndarray:
    out = np.zeros((grid * block, 8), np.uint32)
    for c in range(grid):
        for t in range(block):
            g = c * block + t
            nxt = ((c + 1) % grid) * block + t
            loc = int(data[g]) * 0x10001
            out[g] = [data[nxt], (int(data[c * block + (t + 1) % block]) * 3) & 0xFFFFFFFF, t & 1, data[nxt],
                      loc & 0xFFFFFFFF, loc >> 32, c, bad & 0xFFFFFFFF]
    return out.reshape(-1)


@pytest.mark.parametrize("bad", [-1, 0, 2], ids=["no fault", "fault in CTA 0 (set aside)", "fault in CTA 2"])
@pytest.mark.parametrize("tick", [64, 1000])
def test_a_grid_barrier_made_by_hand(monkeypatch, bad, tick):
    monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    grid, block = 4, 48
    data = np.random.default_rng(5).integers(0, 1 << 32, grid * block, dtype=np.uint32)

    def params(mem):
        out, count, src, mid = mem.alloc(32 * grid * block), mem.alloc(4), mem.alloc(data.nbytes), mem.alloc(data.nbytes)
        mem.write(src, data.tobytes())
        mem.fill(count, 0, 4)
        return struct.pack("<QQQIIQ", out, count, src, bad & 0xFFFFFFFF, 0, mid), \
            lambda m: np.frombuffer(bytes(m.read(out, 32 * grid * block)), np.uint32).copy()
    codes = []
    on, off = _both(GRID_BARRIER, "gbar", grid, block, params, codes=codes)
    assert isinstance(codes[0], ctagen.CtaCode) and codes[0].set_aside > 0     # (CTAs set aside and resumed)
    if bad < 0:
        want = _gbar_host(data, grid, block, bad)
        assert (off == want).all(), np.nonzero(off != want)
        assert (on == want).all(), np.nonzero(on != want)
    else:
        assert on[:2] == off[:2] == ("error", code_of("cudaErrorIllegalAddress"))
