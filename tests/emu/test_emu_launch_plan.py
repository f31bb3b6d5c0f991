"""Launch plans (emu/runtime/launch.LaunchPlan): what repeated launches of one configuration share, what they must
not share (%gridid, parameters, results, the state a kept chunk held in the last launch), errors that are never
kept, the bound on kept plans, and which launches are tiny enough for the daemon's loop (LaunchPlan.tiny)."""
from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from pyvgpu_daemon.emu import module as emu_module
from pyvgpu_daemon.emu import native as native_mod
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.runtime import launch as emu_launch
from pyvgpu_daemon.emu.translator.kernel import Kernel
from pyvgpu_daemon.errors import CudaError, code_of

PTX = """.version 9.0
.target sm_75
.address_size 64
.visible .entry ids(.param .u64 out, .param .u32 add)
{
  .reg .b32 %r<6>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r5, [add];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mad.lo.u32 %r4, %r2, %r3, %r1;
  setp.ge.u32 %p1, %r4, 1000;
  @%p1 bra DONE;
  mul.wide.u32 %rd2, %r4, 16;
  add.s64 %rd3, %rd1, %rd2;
  mov.u64 %rd4, %gridid;
  st.global.u64 [%rd3], %rd4;
  add.u32 %r4, %r4, %r5;
  st.global.u32 [%rd3+8], %r4;
DONE:
  ret;
}
.visible .entry spin(.param .u32 n)
{
  .reg .b32 %r<3>; .reg .pred %p<2>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, 0;
LOOP:
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, %r1;
  @%p1 bra LOOP;
  ret;
}
.visible .entry sync()
{
  bar.sync 0;
  ret;
}
.visible .entry state(.param .u64 out, .param .u32 n, .param .u32 write)
{
  .reg .b32 %r<9>; .reg .b64 %rd<5>; .reg .pred %p<3>;
  .shared .align 4 .b8 sh[128];
  .local .align 4 .b8 loc[4];
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  ld.param.u32 %r2, [write];
  mov.u32 %r3, %tid.x;
  setp.ge.u32 %p1, %r3, %r1;
  @%p1 bra DONE;
  shl.b32 %r4, %r3, 2;
  mov.u32 %r8, sh;
  add.u32 %r4, %r4, %r8;
  ld.shared.u32 %r5, [%r4];
  ld.local.u32 %r6, [loc];
  setp.eq.u32 %p2, %r2, 0;
  @%p2 bra KEEP;
  mov.u32 %r7, 1234;
  st.shared.u32 [%r4], 77;
  st.local.u32 [loc], 55;
KEEP:
  mul.wide.u32 %rd2, %r3, 12;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  st.global.u32 [%rd3+4], %r6;
  st.global.u32 [%rd3+8], %r7;
DONE:
  ret;
}
"""


@pytest.fixture
def mod():
    mem = DeviceMemory(1 << 40, 1 << 24)
    return EmuModule.load(PTX.encode(), mem), mem


def _ids(mod, mem, out, grid, block, add):
    mod.launch("ids", grid, block, 0, struct.pack("<QI", out, add) + b"\0" * 4)
    rec = np.frombuffer(bytes(mem.read(out, 16 * 1000)), np.dtype([("grid", "<u8"), ("v", "<u4"), ("pad", "<u4")]))
    return rec["grid"].copy(), rec["v"].copy()


def test_repeated_launches_share_the_plan_not_their_parameters_or_grid_ids(mod):
    m, mem = mod
    out = m.memory.alloc(16 * 1000)
    g1, v1 = _ids(m, mem, out, (4, 1, 1), (256, 1, 1), 0)
    g2, v2 = _ids(m, mem, out, [4, 1, 1], [256, 1, 1], 7)     # lists: the same configuration
    assert len(m._plans) == 1
    assert not next(iter(m._plans.values())).reusable       # it reads %gridid: every launch binds its chunk anew
    assert (v1 == np.arange(1000)).all() and (v2 == np.arange(1000) + 7).all()
    assert len(set(g1.tolist())) == 1 and len(set(g2.tolist())) == 1 and g2[0] == g1[0] + 1
    g3, v3 = _ids(m, mem, out, (8, 1, 1), (128, 1, 1), 1)       # another geometry, another plan
    assert len(m._plans) == 2 and (v3 == np.arange(1000) + 1).all() and g3[0] == g2[0] + 1


def _state(mod, mem, n, write):
    """The `state` kernel over 32 threads: what each of the first n read from shared memory, local memory and a
    register it writes only when `write` (a fresh launch: zeros), as uint32 triples; untouched lanes 0xFFFFFFFF."""
    out = mod.memory.alloc(12 * 32)
    mem.write(out, b"\xff" * 12 * 32)
    mod.launch("state", (1, 1, 1), (32, 1, 1), 0, struct.pack("<QII", out, n, write))
    got = np.frombuffer(bytes(mem.read(out, 12 * 32)), np.uint32).reshape(32, 3).copy()
    mod.memory.free(out)
    return got


def test_a_kept_chunk_starts_each_launch_as_a_fresh_one(mod):
    """A reusable plan runs its one chunk again: what the last launch wrote to shared and local memory and
    registers, and which lanes it left exited, is not seen by the next (each launch equals one on a fresh
    module)."""
    m, mem = mod
    runs = [(32, 1), (5, 0), (32, 0), (32, 1), (32, 0)]
    got = [_state(m, mem, n, w) for n, w in runs]
    plan = m._plans[("state", (1, 1, 1), (32, 1, 1), 0, None, None, False)]
    assert plan.reusable and len(plan.spare) == 1
    chunk = plan.spare[0]._chunk
    _state(m, mem, 32, 0)
    assert plan.spare[0]._chunk is chunk                       # the same chunk ran again
    for (n, w), g in zip(runs, got):
        fm = EmuModule.load(PTX.encode(), mem)
        try:
            assert (g == _state(fm, mem, n, w)).all(), (n, w)
        finally:
            fm.unload()
        want = np.full((32, 3), 0xFFFFFFFF, np.uint32)
        want[:n] = [0, 0, 1234 if w else 0]
        assert (g == want).all(), (n, w)


def test_failed_configurations_are_not_kept_and_keep_failing(mod):
    m, _ = mod
    for _ in range(2):
        with pytest.raises(CudaError) as e:
            m.launch("sync", (1, 1, 1), (2048, 1, 1), 0, b"")
        assert e.value.code == code_of("cudaErrorInvalidConfiguration")
        with pytest.raises(CudaError) as e:
            m.launch("nope", (1, 1, 1), (1, 1, 1), 0, b"")
        assert e.value.code == code_of("cudaErrorInvalidDeviceFunction")
    assert not m._plans
    with pytest.raises(CudaError) as e:        # a kept plan still checks each launch's parameter buffer
        m.launch("spin", (1, 1, 1), (1, 1, 1), 0, struct.pack("<I", 1))
        m.launch("spin", (1, 1, 1), (1, 1, 1), 0, b"")
    assert e.value.code == code_of("cudaErrorInvalidValue")


def test_kept_plans_are_bounded(mod):
    m, _ = mod
    for x in range(emu_module._MAX_PLANS + 5):
        m.launch("sync", (x + 1, 1, 1), (1, 1, 1), 0, b"")
    assert len(m._plans) == emu_module._MAX_PLANS
    assert ("sync", (1, 1, 1), (1, 1, 1), 0, None, None) not in m._plans      # the oldest went first


def test_only_launched_loop_free_small_kernels_are_tiny(mod, monkeypatch):
    monkeypatch.setattr(emu_launch, "TINY_SECONDS", 60.0)     # the bound under test is the static one, not timing
    m, _ = mod
    assert m.kernel("ids").straight
    assert not m.kernel("spin").straight                  # a backward branch: cost depends on its argument
    assert not m.tiny("ids", (1, 1, 1), (32, 1, 1), 0)      # not launched yet
    m.launch("ids", (1, 1, 1), (32, 1, 1), 0, struct.pack("<QI", m.memory.alloc(16 * 1000), 0) + b"\0" * 4)
    assert m.tiny("ids", (1, 1, 1), (32, 1, 1), 0)
    assert m.tiny("ids", [1, 1, 1], [32, 1, 1], 0)
    assert not m.tiny("ids", (1, 1, 1), (32, 1, 1), 16)     # another configuration
    m.launch("spin", (1, 1, 1), (1, 1, 1), 0, struct.pack("<I", 3))
    assert not m.tiny("spin", (1, 1, 1), (1, 1, 1), 0)
    m.launch("sync", (1, 1, 1), (32, 1, 1), 0, b"")
    assert not m.tiny("sync", (1, 1, 1), (32, 1, 1), 0)      # barriers park threads
    m.launch("ids", (2000, 1, 1), (1, 1, 1), 0, struct.pack("<QI", m.memory.alloc(16 * 1000), 0) + b"\0" * 4)
    assert not m.tiny("ids", (2000, 1, 1), (1, 1, 1), 0)     # more threads than TINY_LANES


def test_a_small_configuration_gets_native_code_once_its_launches_took_long(monkeypatch, tmp_path):
    """Fewer threads than native_min_threads: NumPy code until the configuration's launches have spent about what
    compiling the kernel costs, then native code (built in the background), with the same results. The next
    daemon on this machine (a new module load, the record beside the cache) builds it at the first launch."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))         # (no record of an earlier run)
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="auto"))
    out = m.memory.alloc(16 * 1000)
    monkeypatch.setattr(emu_launch, "NATIVE_AFTER_S", 3600.0)
    monkeypatch.setattr(emu_launch, "NATIVE_S_PER_INSTR", 0.0)
    _, v = _ids(m, mem, out, (4, 1, 1), (256, 1, 1), 3)
    plan = next(iter(m._plans.values()))
    assert plan.native is None and (v == np.arange(1000) + 3).all()
    monkeypatch.setattr(emu_launch, "NATIVE_AFTER_S", 0.0)
    _ids(m, mem, out, (8, 1, 1), (128, 1, 1), 3)            # a new configuration, 12 instructions
    plan = m._plans[("ids", (8, 1, 1), (128, 1, 1), 0, None, None, False)]
    assert plan.native_after == 0.0 and plan.native == "auto"      # from its next launch on
    monkeypatch.setattr(emu_launch, "NATIVE_S_PER_INSTR", 1000.0)
    assert EmuModule.load(PTX.encode(), mem)._plan("ids", (8, 1, 1), (128, 1, 1), 0, None, None, False).native_after \
        >= 1000.0                                           # a big kernel waits longer
    _ids(m, mem, out, (8, 1, 1), (128, 1, 1), 3)            # starts the build
    assert m.kernel("ids").native_make(wait=True) is not None
    _, v = _ids(m, mem, out, (8, 1, 1), (128, 1, 1), 5)
    assert (v == np.arange(1000) + 5).all()
    (record,) = (tmp_path / "pyvgpu" / "emu-native").glob("*.wanted")
    monkeypatch.setattr(emu_launch, "NATIVE_AFTER_S", 3600.0)
    m2 = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="auto"))
    assert m2._plan("ids", (4, 1, 1), (256, 1, 1), 0, None, None, False).native == "auto"    # wanted here before
    _, v = _ids(m2, mem, out, (4, 1, 1), (256, 1, 1), 7)
    assert m2.kernel("ids").native_make(wait=True) is not None and (v == np.arange(1000) + 7).all()
    record.unlink()                                         # a cache clear forgets it
    m3 = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="auto"))
    assert m3._plan("ids", (4, 1, 1), (256, 1, 1), 0, None, None, False).native is None
    m4 = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="auto", threadgen=False))
    (tmp_path / "pyvgpu" / "emu-native" / f"{m2.kernel('ids').native_key}.wanted").touch()
    assert m4._plan("ids", (4, 1, 1), (256, 1, 1), 0, None, None, False).native is None      # other paths: not it


def _count_numpy_runs(monkeypatch, kernel) -> list[int]:
    """[chunks bound to the kernel's NumPy block code], counted from now on."""
    runs, make = [0], kernel.make

    def counted(S):
        runs[0] += 1
        return make(S)

    monkeypatch.setattr(kernel, "_make", counted)
    return runs


def test_the_first_launch_of_a_kernel_wanted_here_waits_briefly_for_its_build(monkeypatch, tmp_path):
    """A kernel whose native code was built here before: its first launch waits (WANTED_WAIT_S at most) for the
    build, which finds the library cached, and runs native code, never compiling its NumPy code; a build that takes
    longer (the library gone) is not waited for beyond that: NumPy code, the same results."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mem = DeviceMemory(1 << 40, 1 << 24)
    out = mem.alloc(16 * 1000)
    monkeypatch.setattr(emu_launch, "NATIVE_AFTER_S", 3600.0)
    m = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="auto"))
    assert m.kernel("ids").native_make(wait=True) is not None     # built (the library cached) ...
    native_mod.mark_wanted(m.kernel("ids").native_key)              # ... and worth it here (the launch policy's record)
    m2 = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="auto"))
    numpy_runs = _count_numpy_runs(monkeypatch, m2.kernel("ids"))
    _, v = _ids(m2, mem, out, (4, 1, 1), (256, 1, 1), 7)
    assert numpy_runs == [0] and m2.kernel("ids").native_make(wait=False) is not None     # native from the first
    assert (v == np.arange(1000) + 7).all()
    slow = Kernel._build_native_or_false

    def slower(self, *a, **k):
        time.sleep(1.0)
        return slow(self, *a, **k)

    monkeypatch.setattr(Kernel, "_build_native_or_false", slower)
    monkeypatch.setattr(emu_launch, "WANTED_WAIT_S", 0.1)
    m3 = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="auto"))
    numpy_runs = _count_numpy_runs(monkeypatch, m3.kernel("ids"))
    t0 = time.monotonic()
    _, v = _ids(m3, mem, out, (4, 1, 1), (256, 1, 1), 9)
    assert time.monotonic() - t0 < 0.9 and numpy_runs[0] > 0       # not waited for: NumPy code
    assert (v == np.arange(1000) + 9).all()
    assert m3.kernel("ids").native_make(wait=True) is not None


VOLATILE_PTX = """.version 9.0
.target sm_75
.address_size 64
.visible .entry pairs(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>;
  .shared .align 4 .b8 sh[256];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mad.lo.u32 %r4, %r2, %r3, %r1;
  shl.b32 %r5, %r1, 2;
  mov.u32 %r6, sh;
  add.u32 %r5, %r5, %r6;
  st.volatile.SPACE.u32 [%r5], %r4;
  bar.sync 0;
  xor.b32 %r5, %r5, 4;
  ld.volatile.SPACE.u32 %r7, [%r5];
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r7;
  ret;
}
"""


@pytest.mark.parametrize("space", ["shared", "global"])
def test_volatile_shared_accesses_leave_ctas_independent(space):
    """A volatile access of the CTA's own shared memory (warp-synchronous code: the scan sample's) cannot let one
    CTA see another, so the launch's chunks run on the thread pool, with the same results; a volatile global one
    keeps them one at a time, in CTA order."""
    ptx = VOLATILE_PTX.replace("SPACE", space)
    if space == "global":                       # the address of a word of `out` instead of the shared array
        ptx = ptx.replace("mov.u32 %r6, sh;", "mov.u32 %r6, 0;").replace(
            "add.u32 %r5, %r5, %r6;", "add.u32 %r5, %r5, %r6;\n  cvt.u64.u32 %rd2, %r5;\n  add.s64 %rd2, %rd2, %rd1;"
        ).replace("[%r5]", "[%rd2]").replace("xor.b32 %r5, %r5, 4;", "xor.b64 %rd2, %rd2, 4;")
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = EmuModule.load(ptx.encode(), mem, limits=EmuLimits(threads=2, lanes_per_chunk=128))
    assert m.kernel("pairs").independent_ctas == (space == "shared")
    out = m.memory.alloc(4 * 1024)
    m.launch("pairs", (16, 1, 1), (64, 1, 1), 0, struct.pack("<Q", out))
    plan = next(iter(m._plans.values()))
    assert plan.threads == (2 if space == "shared" else 1)
    got = np.frombuffer(bytes(mem.read(out, 4 * 1024)), np.uint32)
    if space == "shared":                       # each thread reads its pair's global index
        assert (got == (np.arange(1024) ^ 1)).all()


def test_a_kernel_built_a_cta_at_a_time_waits_for_that_build_cost(monkeypatch, tmp_path):
    """The interpreting a configuration spends before its background build starts is the build's estimated cost:
    per instruction NATIVE_S_PER_INSTR_CTA for a kernel built a CTA at a time (scanTiles: barriers), which compiles
    faster than the lockstep runs' C, NATIVE_S_PER_INSTR for the others."""
    from test_emu_threadgen import SCAN_TILES
    # (a cache of its own: a `.wanted` record another run left for these kernels would start their builds at once)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mem = DeviceMemory(1 << 40, 1 << 24)
    monkeypatch.setattr(emu_launch, "NATIVE_AFTER_S", 0.0)
    monkeypatch.setattr(emu_launch, "NATIVE_S_PER_INSTR", 1000.0)
    monkeypatch.setattr(emu_launch, "NATIVE_S_PER_INSTR_CTA", 1.0)
    limits = EmuLimits(native="auto")
    scan = EmuModule.load(SCAN_TILES.encode(), mem, limits=limits)
    assert scan.kernel("scanTiles").tries_cta_code()
    plan = scan._plan("scanTiles", (4, 1, 1), (256, 1, 1), 0, None, None, False)
    assert plan.native_later and plan.native_after == sum(plan.sizes) * 1.0
    ids = EmuModule.load(PTX.encode(), mem, limits=limits)
    assert not ids.kernel("ids").tries_cta_code()
    plan = ids._plan("ids", (8, 1, 1), (128, 1, 1), 0, None, None, False)
    assert plan.native_later and plan.native_after == sum(plan.sizes) * 1000.0
