"""Warp operations in CTA-at-a-time code (translator/ctawarp.py in ctagen.py's "stage 3"): the warp conformance
suite's kernels (tests/differential/warp_cases.py: shfl in four modes, vote, redux, match, activemask and
bar.warp.sync under run-time member masks, divergent paths, exited lanes, guards, partial warps) and the reduction
patterns of tests/cuda/emu_reduce.cu, each run a CTA at a time (forced: ctagen.preferred_reason patched) and
compared bit for bit with the lockstep NumPy path and with the ISA model or the host's sums; threads of a warp
waiting at two different warp operations (the lockstep path's `forced` release); suspensions at every step."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from differential import run as diffrun
from differential.warp_cases import FORMS, WORDS_OUT, Case, compare, fixed_cases, kernel_ptx, make_case, model
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import ctagen, threadgen

CTA = dict(native="on")
OFF = dict(native="off")


@pytest.fixture(autouse=True)
def every_eligible_kernel(monkeypatch):
    """A CTA at a time for every eligible kernel (by default ctagen.preferred_reason decides)."""
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)


def _load(ptx: str, mode: dict, mem: DeviceMemory, **kw) -> EmuModule:
    return EmuModule.load(ptx.encode(), mem, limits=EmuLimits(**mode, **kw))


def _cta(mod: EmuModule, name: str) -> bool:
    return isinstance(mod.kernel(name).native_make(), ctagen.CtaCode)


def _case_out(mod: EmuModule, mem: DeviceMemory, case: Case, grid: int) -> np.ndarray:
    inp = mem.alloc(case.inp.nbytes)
    out = mem.alloc(case.nthreads * WORDS_OUT * 4)
    mem.write(inp, case.inp.tobytes())
    mem.fill(out, 0, case.nthreads * WORDS_OUT * 4)
    # every CTA reads and writes the same words (the kernel uses %tid.x only): the same bits whatever CTA is last
    mod.launch("k", (grid, 1, 1), (case.nthreads, 1, 1), 0, struct.pack("<QQ", inp, out))
    got = np.frombuffer(bytes(mem.read(out, case.nthreads * WORDS_OUT * 4)), np.uint32)
    mem.free(inp)
    mem.free(out)
    return got.reshape(case.nthreads, WORDS_OUT).copy()


def _both(case: Case, grid: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(CTA-at-a-time output, lockstep output) of a conformance case."""
    outs = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(kernel_ptx(case.form), mode, mem)
        outs.append(_case_out(mod, mem, case, grid))
        if mode is CTA:
            assert _cta(mod, "k"), f"{case.name} did not run a CTA at a time"
    return outs[0], outs[1]


@pytest.mark.parametrize("form", list(FORMS))
def test_conformance_forms_a_cta_at_a_time(form):
    """Each form, random masks and operands (a full warp, a partial one, three warps), one CTA and three CTAs in a
    chunk: the lockstep path's bits and the ISA model's."""
    for seed, nthreads, grid in ((1, 32, 1), (2, None, 3), (3, 96, 1), (4, 64, 2)):
        case = make_case(FORMS[form], 7919 * seed + len(form), nthreads)
        on, off = _both(case, grid)
        np.testing.assert_array_equal(on, off, err_msg=f"{form} seed {seed}: CTA code against the lockstep path")
        diffs = compare(on, model(case))
        assert not diffs, f"{form} seed {seed} ({case.nthreads} threads):\n" + "\n".join(diffs[:8])


def test_differential_set_a_cta_at_a_time():
    """The fixed set a real GPU is checked on (tests/differential/run.py): the recorded emulator outputs."""
    expected = diffrun.load_expected()
    mods: dict[str, tuple[EmuModule, DeviceMemory]] = {}
    for i, case in enumerate(fixed_cases()):
        if case.name not in mods:
            mem = DeviceMemory(1 << 40, 1 << 24)
            mods[case.name] = (_load(kernel_ptx(case.form), CTA, mem), mem)
        mod, mem = mods[case.name]
        got = _case_out(mod, mem, case, 1)
        assert _cta(mod, "k")
        np.testing.assert_array_equal(got, expected[diffrun.case_key(i, case)], err_msg=case.name)


@pytest.mark.parametrize("form", ["shfl.idx.guarded", "vote.uni", "match.all.b64", "redux.add.s32",
                                  "bar.warp.sync", "activemask"])
def test_suspended_at_every_step(monkeypatch, form):
    """A suspension (R_TICK) before every block, warp blocks and parked threads included: the same bits."""
    monkeypatch.setattr(threadgen, "TICK_EVERY", 1)
    case = make_case(FORMS[form], 31, 96)
    on, off = _both(case, 2)
    np.testing.assert_array_equal(on, off)
    assert not compare(on, model(case))


HEAD = ".version 9.0\n.target sm_80\n.address_size 64\n"

# Threads of one warp at two different shuffles with the full mask (undefined in the ISA): each waits for the
# other's; nothing else can run, so the lockstep path wakes them (`forced`) and lets one group go first. Then a
# ballot of the whole warp, a guarded redux over the odd lanes, and a shuffle reading its own destination
# register's old value in other lanes.
DIVERGENT_WAIT = HEAD + """
.visible .entry dw(.param .u64 out)
{
  .reg .b32 %r<20>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, 7;
  and.b32 %r3, %r1, 1;
  setp.eq.u32 %p1, %r3, 0;
  @%p1 bra EVEN;
  shfl.sync.down.b32 %r4, %r2, 1, 31, -1;
  bra.uni JOIN;
EVEN:
  shfl.sync.up.b32 %r4, %r2, 3, 0, -1;
JOIN:
  setp.gt.u32 %p2, %r4, 50;
  vote.sync.ballot.b32 %r5, %p2, -1;
  @!%p1 redux.sync.max.u32 %r6, %r4, 0xaaaaaaaa;
  @%p1 mov.u32 %r6, 0;
  shfl.sync.bfly.b32 %r2, %r2, 4, 31, -1;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r4, %r5, %r6, %r2};
  ret;
}
"""


@pytest.mark.parametrize("nthreads, grid", [(32, 1), (70, 1), (64, 3)])
def test_threads_waiting_at_two_warp_operations(nthreads, grid):
    outs = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(DIVERGENT_WAIT, mode, mem)
        out = mem.alloc(16 * nthreads)
        mod.launch("dw", (grid, 1, 1), (nthreads, 1, 1), 0, struct.pack("<Q", out))
        outs.append(np.frombuffer(bytes(mem.read(out, 16 * nthreads)), np.uint32).reshape(nthreads, 4))
        if mode is CTA:
            assert _cta(mod, "dw")
    on, off = outs
    np.testing.assert_array_equal(on, off)
    # the bfly of each thread's old value, from a thread of its own parity (the two groups need not meet again:
    # each went on without the other, parked, at the ballot); sources past a short warp's end read 0
    t = np.arange(nthreads)
    src = t ^ 4
    want = np.where((src // 32 == t // 32) & (src < nthreads), 7 * src, 0)
    np.testing.assert_array_equal(on[:, 3], want)


# Lanes 16-31 reach the warp operation later (a longer path) with their own member mask; lanes 0-15 go first with
# theirs: when they arrive, lanes 16-31 have not set their mask (a register read before written is 0), so they are
# not members and not waited for. Each half runs the bfly alone and reads 0 from the other half.
LATE_MEMBERS = HEAD + """
.visible .entry lm(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mad.lo.u32 %r2, %r1, 7, 1;
  and.b32 %r3, %r1, 31;
  setp.ge.u32 %p1, %r3, 16;
  @%p1 bra HIGH;
  mov.u32 %r8, 0x0000ffff;
S:
  shfl.sync.bfly.b32 %r4, %r2, 16, 31, %r8;
  bra.uni OUT;
HIGH:
  mov.u32 %r8, 0xffff0000;
  bra.uni S;
OUT:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r4;
  ret;
}
"""

# Odd lanes wait at Z, even lanes at X (a higher PC) with full masks; nothing runs, so both are woken (`forced`):
# Z's lanes still miss the even ones (running again) and park, X runs for the even lanes alone, which then come to
# Z and park (the odd lanes wait there, not forced any more); woken again, all 32 run Z together: every lane reads
# lane 2's value.
MEET_AGAIN = HEAD + """
.visible .entry ma(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mad.lo.u32 %r2, %r1, 7, 1;
  and.b32 %r3, %r1, 1;
  setp.eq.u32 %p1, %r3, 0;
  @%p1 bra A;
Z:
  shfl.sync.idx.b32 %r4, %r2, 2, 31, -1;
  bra.uni OUT;
A:
  shfl.sync.bfly.b32 %r5, %r2, 2, 31, -1;
  bra.uni Z;
OUT:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r4;
  ret;
}
"""

# Every thread at each warp operation (converged), CTAs of 1-70 threads: a short last warp's missing lanes are
# neither voters (a negated predicate would count them) nor shuffle sources.
CONVERGED = HEAD + """
.visible .entry cv(.param .u64 out)
{
  .reg .b32 %r<16>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mad.lo.u32 %r2, %r1, 7, 1;
  rem.u32 %r3, %r1, 3;
  setp.eq.u32 %p1, %r3, 0;
  vote.sync.ballot.b32 %r4, !%p1, -1;
  shfl.sync.down.b32 %r5|%p2, %r2, 5, 31, -1;
  selp.u32 %r6, 1, 0, %p2;
  redux.sync.add.u32 %r7, %r2, -1;
  and.b32 %r8, %r1, 3;
  match.any.sync.b32 %r9, %r8, -1;
  activemask.b32 %r10;
  vote.sync.all.pred %p3, !%p1, -1;
  selp.u32 %r11, 1, 0, %p3;
  mul.wide.u32 %rd2, %r1, 32;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r4, %r5, %r6, %r7};
  st.global.v4.u32 [%rd3+16], {%r9, %r10, %r11, %r2};
  ret;
}
"""


def _both_out(ptx: str, name: str, nthreads: int, grid: int, words: int, before: int = 0) -> np.ndarray:
    """(before: a launch of that many threads first, on the same module: its registers' values past the CTA's last
    thread stay in a register file the next launch reuses)"""
    outs = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(ptx, mode, mem)
        if before:
            first = mem.alloc(4 * words * before)
            mod.launch(name, (grid, 1, 1), (before, 1, 1), 0, struct.pack("<Q", first))
        out = mem.alloc(4 * words * nthreads)
        mod.launch(name, (grid, 1, 1), (nthreads, 1, 1), 0, struct.pack("<Q", out))
        outs.append(np.frombuffer(bytes(mem.read(out, 4 * words * nthreads)), np.uint32).reshape(nthreads, words))
        if mode is CTA:
            assert _cta(mod, name)
    np.testing.assert_array_equal(outs[0], outs[1], err_msg="CTA code against the lockstep path")
    return outs[0]


@pytest.mark.parametrize("nthreads", [32, 64])
def test_members_by_their_own_mask_not_waited_for(nthreads):
    got = _both_out(LATE_MEMBERS, "lm", nthreads, 2, 1)
    assert (got == 0).all()


@pytest.mark.parametrize("nthreads", [32, 96])
def test_threads_meet_again_at_a_warp_operation(nthreads):
    got = _both_out(MEET_AGAIN, "ma", nthreads, 2, 1)
    t = np.arange(nthreads)
    np.testing.assert_array_equal(got[:, 0], 7 * (t - t % 32 + 2) + 1)


@pytest.mark.parametrize("nthreads", [1, 33, 70])
def test_converged_partial_warps(nthreads):
    got = _both_out(CONVERGED, "cv", nthreads, 3, 8)
    t = np.arange(nthreads)
    val = (7 * t + 1).astype(np.uint32)
    for w0 in range(0, nthreads, 32):
        lanes = t[w0:w0 + 32]
        voters = lanes % 3 != 0
        bits = sum(1 << int(u - w0) for u in lanes[voters])
        src = lanes + 5
        for u in lanes:
            r = got[u]
            assert r[0] == bits and r[6] == int(voters.all())
            inside = src[u - w0] - w0 <= 31
            assert r[2] == int(inside)
            assert r[1] == (val[src[u - w0]] if inside and src[u - w0] < min(nthreads, w0 + 32) else
                            (val[u] if not inside else 0))
            assert r[3] == int(val[w0:w0 + 32].sum() & 0xFFFFFFFF)
            assert r[4] == sum(1 << int(x - w0) for x in lanes if x % 4 == u % 4)
            assert r[5] == (1 << len(lanes)) - 1 if len(lanes) < 32 else r[5] == 0xFFFFFFFF


# Votes of the whole warp, unguarded, in a converged CTA (ctawarp._converged_vote: no gathers, no waiting): %p1 false
# in warp 0 and true after, %p2 true below thread 40 (warp 1 split), each in all four modes
CONVERGED_VOTES = HEAD + """
.visible .entry cvv(.param .u64 out)
{
  .reg .b32 %r<24>; .reg .pred %p<12>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 32;
  setp.lt.u32 %p2, %r1, 40;
  vote.sync.all.pred %p3, %p1, -1;
  vote.sync.uni.pred %p4, %p1, 0xffffffff;
  vote.sync.any.pred %p5, %p1, -1;
  vote.sync.ballot.b32 %r2, %p1, -1;
  vote.sync.all.pred %p6, %p2, -1;
  vote.sync.uni.pred %p7, %p2, -1;
  vote.sync.any.pred %p8, %p2, -1;
  vote.sync.ballot.b32 %r3, !%p2, -1;
  selp.u32 %r4, 1, 0, %p3; selp.u32 %r5, 1, 0, %p4; selp.u32 %r6, 1, 0, %p5;
  selp.u32 %r7, 1, 0, %p6; selp.u32 %r8, 1, 0, %p7; selp.u32 %r9, 1, 0, %p8;
  mul.wide.u32 %rd2, %r1, 32;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r4, %r5, %r6, %r2};
  st.global.v4.u32 [%rd3+16], {%r7, %r8, %r9, %r3};
  ret;
}
"""


@pytest.mark.parametrize("nthreads", [1, 32, 33, 70, 96])
def test_converged_votes_of_the_whole_warp_in_every_mode(nthreads):
    got = _both_out(CONVERGED_VOTES, "cvv", nthreads, 2, 8)
    t = np.arange(nthreads)
    for p, neg, cols in ((t >= 32, False, slice(0, 4)), (t < 40, True, slice(4, 8))):
        for w0 in range(0, nthreads, 32):
            w = p[w0:w0 + 32]
            bits = sum(1 << k for k, x in enumerate(w) if x != neg)
            exp = [int(w.all()), int(w.all() or not w.any()), int(w.any()), bits]
            assert (got[w0:w0 + 32, cols] == exp).all(), (nthreads, w0, got[w0, cols], exp)


# Shuffles and bar.warp.sync in a converged CTA (ctawarp._converged_shfl, WSHFLC: no mask pass, no waiting, the
# operands' arrays read and the results' written in place): every mode; operands in arrays (a per-thread lane, a
# per-thread clamp and segment, a member mask in a register), immediates and a register kept once per CTA
# (gathered first), a destination that is the source (other lanes read its old value: written after), a predicate
# destination or none, sources past a partial warp's last thread (0), then a guarded shuffle (the usual passes)
CONVERGED_SHUFFLES = HEAD + """
.visible .entry csh(.param .u64 out)
{
  .reg .b32 %r<24>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mad.lo.u32 %r2, %r1, 7, 1;
  and.b32 %r3, %r1, 7;
  and.b32 %r4, %r1, 31;
  and.b32 %r5, %r1, 24;
  shl.b32 %r5, %r5, 8;
  or.b32 %r7, %r4, %r5;
  or.b32 %r8, %r1, -1;
  shfl.sync.up.b32 %r6|%p1, %r2, %r3, %r7, %r8;
  shfl.sync.down.b32 %r9|%p2, %r2, 5, 31, -1;
  bar.warp.sync %r8;
  shr.u32 %r10, %r1, 2;
  mov.u32 %r11, 0x181f;
  shfl.sync.idx.b32 %r12, %r6, %r10, %r11, %r8;
  shfl.sync.bfly.b32 %r2, %r2, 1, 31, -1;
  bar.warp.sync -1;
  @%p1 shfl.sync.idx.b32 %r13, %r9, 0, 31, -1;
  @!%p1 mov.u32 %r13, 99;
  selp.u32 %r14, 1, 0, %p1; selp.u32 %r15, 1, 0, %p2;
  mul.wide.u32 %rd2, %r1, 32;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r6, %r14, %r9, %r15};
  st.global.v4.u32 [%rd3+16], {%r12, %r2, %r13, %r1};
  ret;
}
"""


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("nthreads", [1, 32, 33, 70, 96])
def test_converged_shuffles_in_every_mode(monkeypatch, nthreads, large):
    if large:
        monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)   # (registers share arrays in large kernels only)
    got = _both_out(CONVERGED_SHUFFLES, "csh", nthreads, 2, 8, before=128)
    for u in range(nthreads):
        w0, l = u - u % 32, u % 32
        nl = min(32, nthreads - w0)
        val = lambda lane: 7 * (w0 + lane) + 1 if lane < nl else 0    # (a lane past the CTA's last thread: 0)
        b, clamp, seg = u & 7, u & 31, u & 24
        up = l - b
        q1 = up >= ((l & seg) | (clamp & ~seg))
        exp_up = val(up) if q1 else val(l)
        q2 = l + 5 <= 31
        assert list(got[u, :4]) == [exp_up, int(q1), val(l + 5) if q2 else val(l), int(q2)], (nthreads, u)
        assert got[u, 5] == val(l ^ 1)


# ---------------------------------------------------------------- the reduction sample's patterns (emu_reduce.cu)
@pytest.fixture(scope="module")
def reduce_ptx() -> str:
    from harness import ptx_of
    return ptx_of("emu_reduce.cu").decode()


def _kernels(mod: EmuModule) -> dict[str, str]:
    """Short names (k4, k7 with its block size template argument, ...) -> mangled names."""
    out = {}
    for k in mod.kernels:
        base = k.split("P")[0].lstrip("_Z0123456789")
        base = base.split("I")[0] if "I" in base else base
        tmpl = k.split("ILj")[1].split("E")[0] if "ILj" in k else ""
        out[f"{base}/{tmpl}" if tmpl else base] = k
    return out


# (kernel, template argument, grid, block, dynamic shared bytes, elements)
REDUCTIONS = [("k4", "256", 4, 256, 1024, 4 * 512), ("k5", "256", 4, 256, 1024, 4 * 512 - 77),
              ("k6", "256", 3, 256, 1024, 5000), ("k7", "256", 3, 256, 36, 5000), ("k7", "64", 5, 64, 12, 3000),
              ("k7", "1024", 2, 1024, 132, 9000), ("k8", "", 3, 256, 1024, 5000)]


@pytest.mark.parametrize("name, tmpl, grid, block, shared, n", REDUCTIONS,
                         ids=[f"{r[0]}/{r[1]}" if r[1] else r[0] for r in REDUCTIONS])
def test_reduction_patterns_against_the_host(reduce_ptx, name, tmpl, grid, block, shared, n):
    """Warp sums with shfl_down (ballot-masked in k7: sources outside the mask read 0), cg::reduce of a tile of
    32, after shared-memory trees: each CTA's sum."""
    data = ((np.arange(n, dtype=np.uint64) * 2654435761 >> 24) & 0xFF).astype(np.int32) - 128
    outs = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(reduce_ptx, mode, mem)
        k = _kernels(mod)[f"{name}/{tmpl}" if tmpl else name]
        din, dout = mem.alloc(4 * n), mem.alloc(4 * grid)
        mem.write(din, data.tobytes())
        mod.launch(k, (grid, 1, 1), (block, 1, 1), shared, struct.pack("<QQI", din, dout, n))
        outs.append(np.frombuffer(bytes(mem.read(dout, 4 * grid)), np.int32).copy())
        if mode is CTA:
            assert _cta(mod, k), f"{name} did not run a CTA at a time"
    on, off = outs
    np.testing.assert_array_equal(on, off)
    assert int(on.astype(np.int64).sum()) == int(data.astype(np.int64).sum())


@pytest.mark.parametrize("tile", [1, 2, 4, 8, 16, 32])
def test_tiled_partition_sums_against_the_host(reduce_ptx, tile):
    """cg::reduce over tiled_partition<1..32> (shfl with width, no barrier): per-tile sums, a partial last CTA."""
    n = 4096 + 77
    data = ((np.arange(n, dtype=np.uint64) * 2654435761 >> 24) & 0xFF).astype(np.int32) - 128
    grid = (n + 127) // 128
    outs = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(reduce_ptx, mode, mem)
        k = _kernels(mod)[f"k11_tiles/{tile}"]
        din, dout = mem.alloc(4 * n), mem.alloc(4 * 128 * grid)       # (threads past n store their tile's 0s)
        mem.write(din, data.tobytes())
        mem.fill(dout, 0, 4 * 128 * grid)
        mod.launch(k, (grid, 1, 1), (128, 1, 1), 0, struct.pack("<QQI", din, dout, n))
        outs.append(np.frombuffer(bytes(mem.read(dout, 4 * n)), np.int32).copy())
        if mode is CTA:
            assert _cta(mod, k)
    on, off = outs
    np.testing.assert_array_equal(on, off)
    ntiles = (n + tile - 1) // tile
    padded = np.zeros(ntiles * tile, np.int64)
    padded[:n] = data
    np.testing.assert_array_equal(on[:ntiles], padded.reshape(ntiles, tile).sum(1))


def test_warp_matrix_operations_stay_on_the_other_paths():
    """wmma/mma are not served here (ctawarp.supported): such a kernel is not eligible."""
    from pyvgpu_daemon.emu.ptx import ir
    from pyvgpu_daemon.emu.translator import ctawarp
    assert not ctawarp.supported(ir.Instr("mma", ("sync", "aligned"), [], []))
    assert not ctawarp.supported(ir.Instr("bar", ("sync",), [], []))
    assert ctawarp.supported(ir.Instr("bar", ("warp", "sync"), [], []))


def test_kernels_with_warp_operations_run_a_cta_at_a_time_by_default(monkeypatch, reduce_ptx):
    """ctagen.preferred_reason as shipped: warp operations with or without barriers (bench/emu_warp_modes_bench.py);
    PYVGPU_EMU_CTAGEN=0 (ctagen=False) keeps them off it."""
    monkeypatch.undo()
    mem = DeviceMemory(1 << 40, 1 << 24)
    for limits, cta in ((CTA, True), (dict(native="on", ctagen=False), False)):
        mod = _load(reduce_ptx, limits, mem)
        for short in ("k7/256", "k11_tiles/32", "k5/256"):
            assert _cta(mod, _kernels(mod)[short]) == cta, short
        mod = _load(MEET_AGAIN, limits, mem)
        assert _cta(mod, "ma") == cta


def test_a_source_too_large_for_the_compiler_keeps_the_other_paths(monkeypatch, reduce_ptx):
    """ctagen.MAX_COMPILE_S (a source whose compile-time estimate is larger: CUB's onesweep kernel was 5.6 MB of C
    the compiler did not finish): the kernel runs on the lockstep path, with the same sums."""
    monkeypatch.setattr(ctagen, "MAX_COMPILE_S", 0.001)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _load(reduce_ptx, CTA, mem)
    k = _kernels(mod)["k7/256"]
    assert not _cta(mod, k) and mod.kernel(k).native_make() is not None
    n = 5000
    data = ((np.arange(n, dtype=np.uint64) * 2654435761 >> 24) & 0xFF).astype(np.int32) - 128
    din, dout = mem.alloc(4 * n), mem.alloc(4 * 3)
    mem.write(din, data.tobytes())
    mod.launch(k, (3, 1, 1), (256, 1, 1), 36, struct.pack("<QQI", din, dout, n))
    got = np.frombuffer(bytes(mem.read(dout, 12)), np.int32)
    assert int(got.astype(np.int64).sum()) == int(data.astype(np.int64).sum())
