"""Chunks a plan keeps between launches (runtime/launch.LaunchPlan.keep, Chunk.retarget) and the chunk threads each
launching thread keeps (runtime/crew.py): a launch of a kept chunk equals one on a fresh module (shared and local
memory, registers, parameters, %gridid), one launch's failure is the lowest chunk's and leaves the plan usable, and
two threads (two streams) launching one plan at once each get their own chunks and results."""
from __future__ import annotations

import gc
import struct
import threading

import numpy as np
import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.runtime import crew as emu_crew
from pyvgpu_daemon.errors import CudaError, code_of

# state: each thread reads its shared word, a local word and a register that only `write` launches set, then
# writes them, with its parameter `add` (run a CTA at a time where native code is on). gid: each thread's %gridid
# (lockstep code only). fault: CTAs from `bad` on store at an unmapped address.
PTX = """.version 9.0
.target sm_75
.address_size 64
.visible .entry state(.param .u64 out, .param .u32 write, .param .u32 add)
{
  .reg .b32 %r<12>; .reg .b64 %rd<6>; .reg .pred %p<3>;
  .shared .align 4 .b8 sh[512];
  .local .align 4 .b8 loc[4];
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r2, [write];
  ld.param.u32 %r9, [add];
  mov.u32 %r3, %tid.x;
  mov.u32 %r10, %ctaid.x;
  mov.u32 %r11, %ntid.x;
  mad.lo.u32 %r1, %r10, %r11, %r3;
  shl.b32 %r4, %r3, 2;
  mov.u32 %r8, sh;
  add.u32 %r4, %r4, %r8;
  ld.shared.u32 %r5, [%r4];
  ld.local.u32 %r6, [loc];
  bar.sync 0;
  setp.eq.u32 %p2, %r2, 0;
  @%p2 bra KEEP;
  mov.u32 %r7, 1234;
  st.shared.u32 [%r4], 77;
  st.local.u32 [loc], 55;
KEEP:
  add.u32 %r7, %r7, %r9;
  mul.wide.u32 %rd2, %r1, 24;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  st.global.u32 [%rd3+4], %r6;
  st.global.u32 [%rd3+8], %r7;
  st.global.u32 [%rd3+12], %r1;
  ret;
}
.visible .entry gid(.param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mad.lo.u32 %r1, %r2, %r3, %r1;
  mul.wide.u32 %rd2, %r1, 8;
  add.s64 %rd3, %rd1, %rd2;
  mov.u64 %rd4, %gridid;
  st.global.u64 [%rd3], %rd4;
  ret;
}
.visible .entry fault(.param .u64 out, .param .u32 bad)
{
  .reg .b32 %r<6>; .reg .b64 %rd<5>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [bad];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %tid.x;
  setp.lt.u32 %p1, %r2, %r1;
  @%p1 bra OK;
  mov.u64 %rd1, 8;
OK:
  mul.wide.u32 %rd2, %r2, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
  ret;
}
"""
GRID, BLOCK = 16, 64              # with lanes_per_chunk 128: 8 chunks of 2 CTAs
REC = np.dtype([("sh", "<u4"), ("loc", "<u4"), ("reg", "<u4"), ("i", "<u4"), ("pad", "<u8")])
LIMITS = {
    "lockstep, 2 threads": dict(native="off", threads=2),
    "lockstep, 1 thread": dict(native="off", threads=1),
    "native, 2 threads": dict(native="on", threads=2),
    "native, 1 thread": dict(native="on", threads=1),
}


def _module(mem, **kw) -> EmuModule:
    return EmuModule.load(PTX.encode(), mem, limits=EmuLimits(lanes_per_chunk=128, **kw))


def _state(m, mem, write: int, add: int, out: int | None = None) -> np.ndarray:
    own = out is None
    if own:
        out = m.memory.alloc(REC.itemsize * GRID * BLOCK)
    mem.write(out, b"\xff" * REC.itemsize * GRID * BLOCK)
    m.launch("state", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QII", out, write, add))
    got = np.frombuffer(bytes(mem.read(out, REC.itemsize * GRID * BLOCK)), REC).copy()
    if own:
        m.memory.free(out)
    return got


def _check(got: np.ndarray, write: int, add: int) -> None:
    assert (got["i"] == np.arange(GRID * BLOCK)).all()
    assert (got["sh"] == 0).all() and (got["loc"] == 0).all(), "a launch read what an earlier one left"
    assert (got["reg"] == (1234 if write else 0) + add).all()


def _grid_ids(m, mem) -> np.ndarray:
    out = m.memory.alloc(8 * GRID * BLOCK)
    m.launch("gid", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<Q", out))
    got = np.frombuffer(bytes(mem.read(out, 8 * GRID * BLOCK)), np.uint64).copy()
    m.memory.free(out)
    return got


@pytest.mark.parametrize("kind", list(LIMITS))
def test_a_kept_chunk_runs_a_later_launch_as_a_fresh_one(kind):
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, **LIMITS[kind])
    runs = [(1, 0), (0, 5), (1, 9), (0, 0), (0, 3)]
    got = [_state(m, mem, w, a) for w, a in runs]
    plan = next(iter(m._plans.values()))
    assert plan.ncta // plan.per == 8 and plan.kept         # several chunks, kept after each launch
    kept = list(plan.kept)
    _state(m, mem, 0, 0)
    assert any(c is k for c in plan.kept for k in kept)       # a kept chunk ran again
    if LIMITS[kind]["native"] == "on":                        # (the path this test is about there)
        assert type(kept[0].launch.thread_code).__name__ == "CtaCode"
    grids = [_grid_ids(m, mem) for _ in range(4)]
    assert all(len(set(g.tolist())) == 1 for g in grids)       # every chunk's %gridid is its launch's
    assert [g[0] for g in grids] == sorted({g[0] for g in grids})
    for (w, a), g in zip(runs, got):
        _check(g, w, a)
        fm = _module(mem, **LIMITS[kind])
        try:
            want = _state(fm, mem, w, a)
        finally:
            fm.unload()
        assert (g == want).all()


@pytest.mark.parametrize("kind", list(LIMITS))
def test_a_failed_launch_is_the_lowest_failing_chunks_and_leaves_the_plan_usable(kind):
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, **LIMITS[kind])
    out = m.memory.alloc(4 * GRID)
    for bad in (GRID, 5, 0, 11, GRID):
        mem.write(out, b"\xff" * 4 * GRID)
        if bad == GRID:
            m.launch("fault", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QI", out, bad))
            assert (np.frombuffer(bytes(mem.read(out, 4 * GRID)), np.uint32) == np.arange(GRID)).all()
            continue
        with pytest.raises(CudaError) as e:
            m.launch("fault", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QI", out, bad))
        assert e.value.code == code_of("cudaErrorIllegalAddress")
        assert f"store at {8 + 4 * bad:#x} " in e.value.message      # the first failing CTA's, of every one failing
        got = np.frombuffer(bytes(mem.read(out, 4 * GRID)), np.uint32)
        # every chunk below the failing one ran (they are taken first, and the failure is theirs to wait for)
        first_bad_chunk = bad // 2 * 2
        assert (got[:first_bad_chunk] == np.arange(first_bad_chunk)).all()


def test_two_threads_launching_one_plan_get_their_own_chunks_and_results():
    """Two streams of one context launch the same configuration at once: each launch's chunks are its own (a
    kept chunk is taken by one launch), each thread's helpers its own (crew.py)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, native="on", threads=2)
    errors: list = []
    crews: dict = {}

    def stream(k: int) -> None:
        try:
            out = m.memory.alloc(REC.itemsize * GRID * BLOCK)
            for j in range(12):
                w, a = (j + k) % 2, 100 * k + j
                _check(_state(m, mem, w, a, out), w, a)
            crews[k] = emu_crew.crew_of_this_thread()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=stream, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert crews[0] is not crews[1]


def test_a_crews_helpers_run_what_it_offers_and_are_kept():
    crew = emu_crew.Crew()
    seen: list = []
    done = threading.Semaphore(0)

    def job() -> None:
        seen.append(threading.get_ident())
        done.release()

    def bad() -> None:
        done.release()
        raise ValueError("a job's own failure: the helper goes on")

    crew.offer(job, 2)
    for _ in range(2):
        assert done.acquire(timeout=10)
    assert len(set(seen)) == 2 and threading.get_ident() not in seen
    crew.offer(bad, 2)
    for _ in range(2):
        assert done.acquire(timeout=10)
    crew.offer(job, 1)                        # the helpers are kept: no new thread
    assert done.acquire(timeout=10)
    assert len(set(seen)) == 2 and len(crew.threads) == 2


def test_a_dropped_crew_ends_its_helpers():
    crew = emu_crew.Crew()
    crew.offer(lambda: None, 2)
    helpers = list(crew.threads)
    assert len(helpers) == 2
    del crew
    gc.collect()
    for t in helpers:
        t.join(5)
        assert not t.is_alive()


def test_a_launch_never_waits_for_a_helper_to_start(monkeypatch):
    """On a loaded machine a helper may get a CPU long after it was woken: the launching thread runs every chunk
    itself meanwhile and returns (a helper that starts late finds nothing left)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, native="off", threads=2)
    offered: list = []
    monkeypatch.setattr(emu_crew.Crew, "offer", lambda self, job, n: offered.append(job))   # no helper starts
    out = m.memory.alloc(REC.itemsize * GRID * BLOCK)
    for w in (1, 0):
        _check(_state(m, mem, w, 3, out), w, 3)
    assert len(offered) == 2
    offered[0]()                              # a helper of the first launch starting now: nothing to do
    _check(_state(m, mem, 0, 4, out), 0, 4)


def test_of_two_chunks_failing_at_once_the_lower_ones_failure_is_the_launchs(monkeypatch):
    """Chunks of CTAs 4-5 and 6-7 fail on the two threads at the same time (a barrier holds each until the other
    failed too): the launch's error is the lower chunk's, whichever thread reports first."""
    from pyvgpu_daemon.emu.runtime import chunk as emu_chunk
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, native="off", threads=2)
    both = threading.Barrier(2, timeout=10)
    run = emu_chunk.Chunk.run

    def failing(self) -> None:
        if self.cta0 in (4, 6):
            both.wait()
            if self.cta0 == 4:
                both.wait()                   # (the higher chunk's failure is recorded first)
                raise CudaError("cudaErrorIllegalAddress", "chunk of CTA 4")
            try:
                raise CudaError("cudaErrorIllegalAddress", "chunk of CTA 6")
            finally:
                threading.Thread(target=both.wait).start()
        run(self)

    monkeypatch.setattr(emu_chunk.Chunk, "run", failing)
    out = m.memory.alloc(REC.itemsize * GRID * BLOCK)
    with pytest.raises(CudaError) as e:
        m.launch("state", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QII", out, 0, 0))
    assert "chunk of CTA 4" in e.value.message


def test_kept_chunks_are_charged_to_the_sessions_budget_and_given_back():
    """What a plan keeps is charged to the module's CodeBudget (16 plans a module, 1,024 modules a session would
    otherwise hold 256 GB uncharged): charged while kept, given back when taken or when the plan is dropped; a
    budget without room keeps nothing and the launch is as right."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, native="off", threads=1)
    _check(_state(m, mem, 1, 0), 1, 0)
    plan = next(iter(m._plans.values()))
    assert plan.kept and plan.kept_bytes == sum(c.kept_bytes() for c in plan.kept)
    before, kept = m.budget.used, plan.kept_bytes
    plan.release()
    assert not plan.kept and plan.kept_bytes == 0 and m.budget.used == before - kept
    held = m.budget.used
    _check(_state(m, mem, 0, 3), 0, 3)                        # kept again, charged again
    assert m.budget.used == held + plan.kept_bytes > held
    # the oldest of _MAX_PLANS plans is dropped for a new configuration: its kept bytes go back
    from pyvgpu_daemon.emu import module as emu_module
    used = m.budget.used
    kept = plan.kept_bytes
    for g in range(1, emu_module._MAX_PLANS + 1):
        m.plan_for("state", (g, 1, 1), (1, 1, 1), 0)
    assert plan not in m._plans.values()
    assert m.budget.used == used - kept


def test_a_budget_without_room_keeps_no_chunk_and_the_launch_is_right():
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, native="off", threads=2)
    _state(m, mem, 0, 0)
    plan = next(iter(m._plans.values()))
    plan.release()
    m.budget.limit = used = m.budget.used    # no byte more
    for w, a in ((1, 4), (0, 2)):
        _check(_state(m, mem, w, a), w, a)
        assert not plan.kept and m.budget.used == used


@pytest.mark.parametrize("kind", list(LIMITS))
def test_a_kept_chunks_launch_counts_its_own_instructions(kind, monkeypatch):
    """The launch's instruction budget counts what this launch ran: a CTA-at-a-time chunk's state array (its
    count of thread-instructions among it) is zeroed for each run, not carried from the chunk's last launch."""
    from pyvgpu_daemon.emu.runtime import launch as emu_launch
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, **LIMITS[kind])
    steps: list[int] = []
    run = emu_launch.Launch.run

    def counted(self, checked: bool = False):
        out = run(self, checked)
        steps.append(self.steps)
        return out

    monkeypatch.setattr(emu_launch.Launch, "run", counted)
    for _ in range(4):
        _state(m, mem, 1, 0)
    assert steps[0] > 0 and len(set(steps)) == 1, steps


LOCAL_PTX = """.version 9.0
.target sm_75
.address_size 64
.visible .entry generic(.param .u64 p)
{
  .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 5;
  st.u32 [%rd1], %r1;
  ret;
}
.visible .entry atoms(.param .u64 p)
{
  .reg .b32 %r<4>; .reg .b64 %rd<2>;
  .shared .align 4 .b8 sh[16];
  ld.param.u64 %rd1, [p];
  mov.u32 %r3, sh;
  atom.shared.add.u32 %r1, [%r3], 1;
  atom.global.add.u32 %r2, [%rd1], %r1;
  bar.sync 0;
  ret;
}
.visible .entry atom_generic(.param .u64 p)
{
  .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  atom.add.u32 %r1, [%rd1], 1;
  ret;
}
"""


def test_only_a_kernel_that_may_write_local_memory_has_it_cleared_between_runs():
    """Kernel.writes_local: a store or atomic naming no space (generic: any window) or the local space may write it;
    one naming the global or shared space, loads and arithmetic may not (its chunk's local memory then stays zero,
    and Chunk.reuse leaves it)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem)
    assert m.kernel("state").writes_local                    # st.local
    assert not m.kernel("fault").writes_local and not m.kernel("gid").writes_local
    lm = EmuModule.load(LOCAL_PTX.encode(), mem)
    assert lm.kernel("generic").writes_local and lm.kernel("atom_generic").writes_local
    assert not lm.kernel("atoms").writes_local
