"""Interpreter tests written directly in PTX: warp operations at the edges (out-of-range shuffle lanes and the
range predicate, partial warps), barriers with exited threads, bar.red, generic addressing, vector pack/unpack,
runaway kernels, load-time errors."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.errors import CudaError


def head(sm=75):
    return f".version 9.0\n.target sm_{sm}\n.address_size 64\n"


def run(body: str, nthreads: int, words: int, block=None, sm=75, limits=None, grid=1, dtype=np.uint32,
        extra_params=b""):
    """Kernel `k(.param .u64 out)`; returns out as `words` elements of dtype."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load((head(sm) + body).encode(), mem, sm=sm, limits=limits)
    out = mem.alloc(words * 8)
    mem.fill(out, 0, words * 8)
    mod.launch("k", (grid, 1, 1), block or (nthreads, 1, 1), 0, struct.pack("<Q", out) + extra_params)
    return np.frombuffer(bytes(mem.read(out, words * np.dtype(dtype).itemsize)), dtype).copy()


SHFL = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .pred %p<3>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, 10;
  shfl.sync.down.b32 %r3|%p1, %r2, 3, 31, -1;
  shfl.sync.up.b32 %r4|%p2, %r2, 3, 0, -1;
  shfl.sync.idx.b32 %r5, %r2, 40, 31, -1;
  shfl.sync.bfly.b32 %r6, %r2, 5, 31, -1;
  shfl.sync.down.b32 %r9, %r2, 2, 0x181f, -1;
  selp.u32 %r7, 1, 0, %p1;
  selp.u32 %r8, 1, 0, %p2;
  mul.wide.u32 %rd2, %r1, 32;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r3, %r4, %r5, %r6};
  st.global.v4.u32 [%rd3+16], {%r7, %r8, %r9, 0};
  ret;
}
"""


def test_shfl_modes_range_predicate_and_segments():
    out = run(SHFL, 32, 32 * 8).reshape(32, 8)
    lane = np.arange(32)
    v = lane * 10
    down_ok = lane + 3 <= 31
    np.testing.assert_array_equal(out[:, 0], np.where(down_ok, (lane + 3) * 10, v))
    np.testing.assert_array_equal(out[:, 4], down_ok)
    up_ok = lane - 3 >= 0
    np.testing.assert_array_equal(out[:, 1], np.where(up_ok, (lane - 3) * 10, v))
    np.testing.assert_array_equal(out[:, 5], up_ok)
    np.testing.assert_array_equal(out[:, 2], np.full(32, 80))          # b[4:0] = 40 & 31 = 8
    np.testing.assert_array_equal(out[:, 3], (lane ^ 5) * 10)
    # c = 0x181f (width 8 as nvcc encodes it): segments of 8 lanes (segmask 24), clamp 31: shuffles stay inside each segment
    seg_ok = (lane & 7) + 2 <= 7
    np.testing.assert_array_equal(out[:, 6], np.where(seg_ok, (lane + 2) * 10, v))


def test_shfl_in_partial_warp():
    out = run(SHFL, 40, 40 * 8).reshape(40, 8)
    # lanes 32..39 form a warp of 8: source lanes 40.. do not exist; the ISA leaves their value unpredictable and
    # NVIDIA's GPUs read 0 there (the range predicate stays true: it depends on the clamp only)
    lane = np.arange(8)
    np.testing.assert_array_equal(out[32:, 0], np.where(lane + 3 < 8, (32 + lane + 3) * 10, 0))
    np.testing.assert_array_equal(out[32:, 4], 1)


BARRIER_EXIT = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  .shared .align 4 .b32 cnt[1];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %p3, %r1, 0;
  @!%p3 bra $L_skip;
  st.shared.u32 [cnt], 0;
$L_skip:
  bar.sync 0;
  setp.ge.u32 %p1, %r1, 48;
  @%p1 bra $L_exit;
  atom.shared.add.u32 %r2, [cnt], 1;
  setp.lt.u32 %p2, %r1, 20;
  bar.red.popc.u32 %r3, 0, %p2;
  bar.red.and.pred %p3, 0, %p2;
  bar.red.or.pred %p2, 0, %p2;
  selp.u32 %r4, 1, 0, %p3;
  selp.u32 %r5, 1, 0, %p2;
  ld.shared.u32 %r6, [cnt];
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r3, %r4, %r5, %r6};
$L_exit:
  ret;
}
"""


def test_barriers_count_exited_threads_and_bar_red():
    out = run(BARRIER_EXIT, 64, 64 * 4).reshape(64, 4)
    live = out[:48]
    np.testing.assert_array_equal(live[:, 0], 20)      # popc over the 48 live threads
    np.testing.assert_array_equal(live[:, 1], 0)       # not all < 20
    np.testing.assert_array_equal(live[:, 2], 1)       # some < 20
    np.testing.assert_array_equal(live[:, 3], 48)      # every live thread's atomic happened before the barrier
    assert not out[48:].any()


REDUX_VOTE = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<10>; .reg .pred %p<3>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  and.b32 %r2, %r1, 3;
  setp.ne.u32 %p1, %r2, 0;
  @%p1 bra $L_odd;
  activemask.b32 %r3;
  bra.uni $L_join;
$L_odd:
  activemask.b32 %r3;
$L_join:
  redux.sync.add.u32 %r4, %r1, -1;
  redux.sync.max.u32 %r5, %r2, -1;
  vote.sync.ballot.b32 %r6, %p1, -1;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r3, %r4, %r5, %r6};
  ret;
}
"""


def test_activemask_after_divergence_redux_and_ballot():
    out = run(REDUX_VOTE, 64, 64 * 4, sm=80).reshape(64, 4)
    lane = np.arange(64) % 32
    mult4 = sum(1 << l for l in range(32) if l % 4 == 0)
    np.testing.assert_array_equal(out[:, 0], np.where(lane % 4 == 0, mult4, 0xFFFFFFFF ^ mult4))
    np.testing.assert_array_equal(out[:32, 1], sum(range(32)))
    np.testing.assert_array_equal(out[32:, 1], sum(range(32, 64)))
    np.testing.assert_array_equal(out[:, 2], 3)
    np.testing.assert_array_equal(out[:, 3], 0xFFFFFFFF ^ mult4)


GENERIC = """
.visible .entry k(.param .u64 out)
{
  .local .align 8 .b8 depot[16];
  .shared .align 8 .b8 sh[256];
  .reg .b32 %r<8>; .reg .b64 %rd<12>; .reg .f64 %fd<3>; .reg .b16 %rs<3>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u64 %rd2, depot;
  cvta.local.u64 %rd3, %rd2;
  st.u32 [%rd3], %r1;                   // generic store into local memory
  mov.u32 %r2, sh;
  mul.lo.u32 %r3, %r1, 4;
  add.u32 %r4, %r2, %r3;
  cvt.u64.u32 %rd4, %r4;
  cvta.shared.u64 %rd5, %rd4;
  add.u32 %r5, %r1, 100;
  st.u32 [%rd5], %r5;                   // generic store into shared memory
  bar.sync 0;
  ld.u32 %r6, [%rd3];                   // generic loads back
  ld.u32 %r7, [%rd5];
  mov.b64 %rd6, {%r6, %r7};             // pack two b32 into b64
  mov.b64 {%r3, %r4}, %rd6;             // and unpack
  mov.b32 %r5, {%rs1, %rs2};
  mul.wide.u32 %rd7, %r1, 16;
  add.s64 %rd8, %rd1, %rd7;
  st.global.v2.u64 [%rd8], {%rd6, %rd6};
  cvta.to.shared.u64 %rd9, %rd5;
  cvt.u32.u64 %r6, %rd9;
  sub.u32 %r6, %r6, %r2;
  st.global.u32 [%rd8+8], %r6;
  st.global.u32 [%rd8+12], %r4;
  ret;
}
"""


def test_generic_addressing_and_vector_pack_unpack():
    out = run(GENERIC, 64, 64 * 4).reshape(64, 4)
    t = np.arange(64)
    np.testing.assert_array_equal(out[:, 0], t)
    np.testing.assert_array_equal(out[:, 1], t + 100)
    np.testing.assert_array_equal(out[:, 2], t * 4)
    np.testing.assert_array_equal(out[:, 3], t + 100)


def test_runaway_kernel_hits_the_instruction_budget():
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>;
$L_loop:
  add.u32 %r1, %r1, 1;
  bra.uni $L_loop;
}
"""
    with pytest.raises(CudaError) as e:
        run(body, 32, 1, limits=EmuLimits(max_vector_instructions=20000))
    assert e.value.code == 702    # cudaErrorLaunchTimeout


def test_second_barrier_passes_when_the_others_exited():
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>; .reg .pred %p<2>;
  mov.u32 %r1, %tid.x;
  setp.lt.u32 %p1, %r1, 32;
  @%p1 bra $L_a;
  bar.sync 0;
  bra.uni $L_end;
$L_a:
  bar.red.popc.u32 %r2, 0, %p1;
  bar.red.popc.u32 %r2, 0, %p1;
$L_end:
  ret;
}
"""
    # the first group passes one barrier while the second passes one then exits: the first group's second
    # bar.red waits for threads that have exited, which counts as arrived, so this completes
    run(body, 64, 1)


def test_out_of_range_shared_access_is_an_error():
    body = """
.visible .entry k(.param .u64 out)
{
  .shared .align 4 .b8 sh[64];
  .reg .b32 %r<4>;
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  st.shared.u32 [%r2], %r1;
  ret;
}
"""
    run(body, 16, 1)
    with pytest.raises(CudaError) as e:
        run(body, 17, 1)
    assert e.value.code == 700


@pytest.mark.parametrize("line", ["ld.global.weird.u32 %r1, [%rd1];", "shfl.sync.sideways.b32 %r1, %r1, 1, 31, -1;",
                                  "add.q32 %r1, %r1, 1;", "bar.sync 16;", "bar.arrive 1;",
                                  "bar.sync 1, 48;"])
def test_unsupported_instructions_fail_at_load_naming_them(line):
    body = ".visible .entry k(.param .u64 out)\n{\n.reg .b32 %r<3>; .reg .b64 %rd<3>;\n" + line + "\nret;\n}\n"
    mem = DeviceMemory(1 << 40, 1 << 20)
    with pytest.raises(CudaError) as e:
        EmuModule.load((head() + body).encode(), mem)
    assert e.value.code == 218 and "line 7" in e.value.message


def test_ptx_for_a_newer_target_is_translated_and_unimplemented_instructions_refused_at_load():
    # PTX ISA 9.2 for sm_120 (what nvcc/NVRTC 13.x emit for CuPy's CUB kernels) runs when it uses what the emulator
    # implements; an instruction it does not implement fails the load, named with its line, never a launch
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
  ret;
}
"""
    src = ".version 9.2\n.target sm_120\n.address_size 64\n" + body
    mem = DeviceMemory(1 << 40, 1 << 20)
    mod = EmuModule.load(src.encode(), mem, sm=75)
    assert mod.kernels["k"].attrs["ptx_version"] == 120
    out = mem.alloc(64 * 4)
    mod.launch("k", (1, 1, 1), (64, 1, 1), 0, struct.pack("<Q", out))
    np.testing.assert_array_equal(np.frombuffer(bytes(mem.read(out, 256)), np.uint32), np.arange(64))
    bad = src.replace("mov.u32 %r1, %tid.x;", "mov.u32 %r1, %tid.x;\n  tcgen05.fence::before_thread_sync;")
    with pytest.raises(CudaError) as e:
        EmuModule.load(bad.encode(), mem, sm=75)
    assert e.value.code == 218 and "tcgen05.fence" in e.value.message and "line 10" in e.value.message


def test_griddepcontrol_runs_as_the_in_order_device_needs_nothing_more():
    # programmatic dependent launch (sm_90 PTX of CuPy's Thrust sort): a launch starts only after the device's
    # earlier work is done, so .wait has nothing to wait for and .launch_dependents nothing to release
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>; .reg .b64 %rd<4>;
  griddepcontrol.wait;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
  griddepcontrol.launch_dependents;
  ret;
}
"""
    np.testing.assert_array_equal(run(body, 32, 32, sm=90), np.arange(32))
    with pytest.raises(CudaError) as e:
        run(body.replace("griddepcontrol.wait", "griddepcontrol.sleep"), 32, 32, sm=90)
    assert e.value.code == 218 and "griddepcontrol.sleep" in e.value.message and "line 8" in e.value.message


def test_spin_wait_on_a_flag_set_by_a_later_warp_completes():
    body = """
.global .align 4 .u32 flag;
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>; .reg .pred %p<3>; .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra $L_other;
$L_spin:
  ld.volatile.global.u32 %r2, [flag];
  setp.eq.u32 %p2, %r2, 0;
  @%p2 bra $L_spin;
  st.global.u32 [%rd1], %r2;
  bra.uni $L_end;
$L_other:
  setp.ne.u32 %p1, %r1, 32;
  @%p1 bra $L_end;
  st.volatile.global.u32 [flag], 7;
$L_end:
  ret;
}
"""
    assert run(body, 64, 1)[0] == 7


def test_every_corpus_kernel_compiles():
    from pathlib import Path
    files = sorted(Path("/work/shared/reference/ptx-corpus/ptx").glob("*.ptx"))
    if not files:
        pytest.skip("reference corpus not present")
    for f in files:
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = EmuModule.load(f.read_bytes(), mem, sm=80)
        assert mod.kernels, f.name
        for name in mod.kernels:            # translated at first use: translate each now
            assert mod.kernel(name).source, (f.name, name)


def test_clock64_advances():
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b64 %rd<6>; .reg .b32 %r<3>;
  ld.param.u64 %rd1, [out];
  mov.u64 %rd2, %clock64;
  add.u32 %r1, %r1, 1;
  add.u32 %r1, %r1, 1;
  mov.u64 %rd3, %clock64;
  sub.s64 %rd4, %rd3, %rd2;
  st.global.u64 [%rd1], %rd4;
  ret;
}
"""
    assert run(body, 32, 1, dtype=np.uint64)[0] > 0


def test_cache_hint_modifiers_and_unbounded_recursion_overflows_the_call_stack():
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>; .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  ld.global.nc.L1::no_allocate.u32 %r1, [%rd1];
  add.u32 %r1, %r1, 5;
  st.global.L1::no_allocate.u32 [%rd1], %r1;
  ret;
}
"""
    assert run(body, 1, 1)[0] == 5
    rec = """
.func (.param .b32 rv) f(.param .b32 a)
{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [a];
  { .param .b32 p0; st.param.b32 [p0], %r1; .param .b32 r0;
    call.uni (r0), f, (p0); ld.param.b32 %r2, [r0]; }
  st.param.b32 [rv], %r2;
  ret;
}
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>;
  { .param .b32 p0; st.param.b32 [p0], 1; .param .b32 r0;
    call.uni (r0), f, (p0); ld.param.b32 %r2, [r0]; }
  ret;
}
"""
    # Recursion runs on a bounded call stack: f calls itself without end, so the stack overflows.
    mem = DeviceMemory(1 << 40, 1 << 20)
    mod = EmuModule.load((head() + rec).encode(), mem)
    with pytest.raises(CudaError) as e:
        mod.launch("k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", mem.alloc(8)))
    assert e.value.code == 714 and "call stack overflow" in e.value.message   # cudaErrorHardwareStackError
    assert e.value.sticky


@pytest.mark.parametrize("live", [True, False])
def test_atomics_equal_serial_thread_order(live):
    from pyvgpu_daemon.emu.ops.atomic import apply_atomic as _atomic
    rng = np.random.default_rng(0)
    ops = {"add": lambda o, b, c: o + b, "cas": lambda o, b, c: c if o == b else o, "exch": lambda o, b, c: b,
           "min": lambda o, b, c: min(o, b), "max": lambda o, b, c: max(o, b),
           "inc": lambda o, b, c: 0 if o >= b else o + 1, "dec": lambda o, b, c: b if (o == 0 or o > b) else o - 1,
           "and": lambda o, b, c: o & b, "or": lambda o, b, c: o | b, "xor": lambda o, b, c: o ^ b}
    for trial in range(15):
        n = 1 if trial < 3 else int(rng.integers(1, 400))      # one lane: apply_atomic's own path
        nad = int(rng.integers(1, 6))
        for op, f in ops.items():
            for dt in ((np.float32, np.float64, np.int32, np.uint64) if op == "add" else (np.uint32,)):
                v = (rng.random(8) * 20).astype(dt)
                v0 = v.copy()
                idx = rng.integers(0, nad, n)
                b = (rng.random(n) * (3 if op == "add" else 20)).astype(dt)
                c = rng.integers(0, 20, n).astype(dt)
                old = _atomic(v, idx, op, b, c if op == "cas" else None, live)
                w = v0.copy()
                ref = np.empty(n, dt)
                for i in range(n):
                    ref[i] = w[idx[i]]
                    w[idx[i]] = dt(f(w[idx[i]], b[i], c[i]))
                np.testing.assert_array_equal(v, w, err_msg=f"{op} {dt}")
                if live:
                    np.testing.assert_array_equal(old, ref, err_msg=f"{op} {dt}")


def test_match_any_and_all():
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .pred %p<2>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  rem.u32 %r2, %r1, 3;
  match.any.sync.b32 %r3, %r2, -1;
  shr.u32 %r4, %r1, 5;
  match.all.sync.b32 %r5|%p1, %r4, -1;
  match.all.sync.b32 %r6|%p1, %r2, -1;
  selp.u32 %r7, 1, 0, %p1;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r3, %r5, %r6, %r7};
  ret;
}
"""
    out = run(body, 64, 64 * 4).reshape(64, 4)
    t = np.arange(64)
    lane = t % 32
    for i in range(64):
        w = t[(t // 32) == (i // 32)]
        exp = sum(1 << int(l) for l, v in zip(w % 32, w % 3) if v == i % 3)
        assert out[i, 0] == exp
    np.testing.assert_array_equal(out[:, 1], 0xFFFFFFFF)
    np.testing.assert_array_equal(out[:, 2], 0)
    np.testing.assert_array_equal(out[:, 3], 0)
    assert lane.size == 64
