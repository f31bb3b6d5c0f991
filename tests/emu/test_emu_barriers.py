"""CTA barriers by the PTX ISA (bar / barrier): the sixteen barriers of a CTA, thread counts (whole warps),
bar.arrive (producer/consumer), bar.red over the threads a counted barrier releases, barrier ids in registers,
guarded barriers, phases, exited threads, and the deadlock a count that is never reached makes."""
from __future__ import annotations

import numpy as np
import pytest

from pyvgpu_daemon.errors import CudaError
from test_emu_runtime import run

# Two groups of two warps exchange values through shared memory, each behind its own barrier (1 and 2) with a
# count of 64: thread t writes t*3 to slot t, syncs its group, reads slot (t + 32) of its group.
GROUPS = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<16>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  .shared .align 4 .b8 s[512];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, 3;
  shl.b32 %r3, %r1, 2;
  mov.u32 %r4, s;
  add.s32 %r5, %r4, %r3;
  st.shared.u32 [%r5], %r2;
  and.b32 %r6, %r1, -64;
  add.s32 %r7, %r1, 32;
  and.b32 %r7, %r7, 63;
  add.s32 %r7, %r7, %r6;
  shl.b32 %r8, %r7, 2;
  add.s32 %r9, %r4, %r8;
  setp.ge.u32 %p1, %r1, 64;
  @%p1 bra $L_second;
  bar.sync 1, 64;
  ld.shared.u32 %r10, [%r9];
  bra.uni $L_out;
$L_second:
  barrier.sync.aligned 2, 64;
  ld.shared.u32 %r10, [%r9];
$L_out:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r10;
  ret;
}
"""


def test_two_named_barriers_with_counts_in_divergent_groups():
    out = run(GROUPS, 128, 128)
    t = np.arange(128)
    np.testing.assert_array_equal(out, ((t + 32) % 64 + (t & ~63)) * 3)


# Producer/consumer over four rounds: warps 0-1 fill a buffer then bar.arrive 3, 128; warps 2-3 bar.sync 3, 128,
# read it, add it up, then bar.arrive 4, 128 so the producers (bar.sync 4, 128) may overwrite it.
PRODUCER_CONSUMER = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<20>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  .shared .align 4 .b8 buf[256];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  and.b32 %r2, %r1, 63;
  shl.b32 %r3, %r2, 2;
  mov.u32 %r4, buf;
  add.s32 %r5, %r4, %r3;
  mov.u32 %r6, 0;
  mov.u32 %r7, 0;
  setp.ge.u32 %p1, %r1, 64;
$L_round:
  @%p1 bra $L_consume;
  mad.lo.s32 %r8, %r6, 1000, %r1;
  st.shared.u32 [%r5], %r8;
  bar.arrive 3, 128;
  bar.sync 4, 128;
  bra.uni $L_next;
$L_consume:
  bar.sync 3, 128;
  ld.shared.u32 %r9, [%r5];
  add.s32 %r7, %r7, %r9;
  bar.arrive 4, 128;
$L_next:
  add.s32 %r6, %r6, 1;
  setp.lt.u32 %p2, %r6, 4;
  @%p2 bra $L_round;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r7;
  ret;
}
"""


def test_bar_arrive_producer_consumer_rounds():
    out = run(PRODUCER_CONSUMER, 128, 128, grid=3)
    t = np.arange(64)
    np.testing.assert_array_equal(out[64:], sum(r * 1000 + t for r in range(4)))
    np.testing.assert_array_equal(out[:64], 0)


# bar.red over the threads a counted barrier releases: warps 0-1 at barrier 5, warps 2-3 at barrier 6, count 64;
# the barrier id comes from a register in one group.
BAR_RED = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<16>; .reg .pred %p<6>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  rem.u32 %r2, %r1, 3;
  setp.eq.u32 %p1, %r2, 0;
  setp.ge.u32 %p2, %r1, 64;
  @%p2 bra $L_b;
  bar.red.popc.u32 %r3, 5, 64, %p1;
  bar.red.or.pred %p3, 5, 64, %p2;
  bar.red.and.pred %p4, 5, 64, !%p2;
  bra.uni $L_out;
$L_b:
  mov.u32 %r9, 6;
  bar.red.popc.u32 %r3, %r9, 64, %p1;
  bar.red.or.pred %p3, %r9, 64, %p2;
  bar.red.and.pred %p4, %r9, 64, !%p2;
$L_out:
  selp.u32 %r4, 1, 0, %p3;
  selp.u32 %r5, 1, 0, %p4;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r3, %r4, %r5, %r1};
  ret;
}
"""


def test_bar_red_with_ids_counts_and_register_id():
    out = run(BAR_RED, 128, 128 * 4).reshape(128, 4)
    t = np.arange(128)
    np.testing.assert_array_equal(out[:64, 0], np.count_nonzero(t[:64] % 3 == 0))
    np.testing.assert_array_equal(out[64:, 0], np.count_nonzero(t[64:] % 3 == 0))
    np.testing.assert_array_equal(out[:, 1], t >= 64)       # or of (t >= 64) within each group
    np.testing.assert_array_equal(out[:, 2], t < 64)        # and of (t < 64) within each group


# Every warp of a 4-warp CTA runs bar.sync 1, 64 in a loop: each use completes in two phases of two warps.
# Then a guarded barrier 0: warp 3 does not take part and exits, which releases the others.
PHASES = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .pred %p<4>; .reg .b64 %rd<4>;
  .shared .align 4 .b32 cnt[1];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, 0;
$L_loop:
  bar.sync 1, 64;
  atom.shared.add.u32 %r3, [cnt], 1;
  add.s32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, 3;
  @%p1 bra $L_loop;
  setp.lt.u32 %p2, %r1, 96;
  @%p2 bar.sync 0;
  @!%p2 bra $L_done;
  ld.shared.u32 %r4, [cnt];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r4;
$L_done:
  ret;
}
"""


def test_counted_barrier_phases_and_guarded_barrier_with_exit():
    out = run(PHASES, 128, 128)
    np.testing.assert_array_equal(out[:96], 3 * 128)
    np.testing.assert_array_equal(out[96:], 0)


def test_short_last_warp_counts_as_a_warp():
    # 48 threads = a full warp and a warp of 16: bar.sync 1, 64 completes once both warps arrive
    body = GROUPS.replace("setp.ge.u32 %p1, %r1, 64;", "setp.ge.u32 %p1, %r1, 4096;")
    out = run(body, 48, 48)
    t = np.arange(48)
    src = (t + 32) % 64
    np.testing.assert_array_equal(out, np.where(src < 48, src * 3, 0))


def test_a_count_never_reached_is_a_deadlock_error():
    body = GROUPS.replace("bar.sync 1, 64;", "bar.sync 1, 96;")
    with pytest.raises(CudaError) as e:
        run(body, 128, 128)
    assert e.value.code == 719 and "deadlock" in e.value.message      # cudaErrorLaunchFailure


def test_barrier_id_out_of_range_in_a_register():
    body = BAR_RED.replace("mov.u32 %r9, 6;", "mov.u32 %r9, 17;")
    with pytest.raises(CudaError) as e:
        run(body, 128, 128 * 4)
    assert e.value.code == 719 and "barrier id 17" in e.value.message
