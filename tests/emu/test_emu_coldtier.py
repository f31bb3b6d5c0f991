"""A large CTA-at-a-time kernel on a machine whose native cache lacks its library (translator/kernel.py's quick tier):
built in the background first at ctagen.QUICK's level, its launches running that code while the build at its size's
level runs, then that one; only the full build stays cached. Every launch, whichever tier runs it (switching between
launches of one kernel, its kept chunks moving from one tier's code to the other's), is bit for bit the lockstep
NumPy code's; a full build that fails leaves the quick tier running; a cache that holds only the quick tier serves it
at once and builds the full one; a cached full build is loaded without a quick tier; the launch policy's rent for
such a kernel is the quick build's cost (runtime/launch.py NATIVE_S_PER_INSTR_QUICK); the full build's rent is its
estimated compile time, paid by what the quick tier's launches would have saved, across daemon runs (a record beside
the cache: one that is corrupt or of another version counts as nothing)."""
from __future__ import annotations

import os
import struct
import threading
import time

import numpy as np
import pytest

from pyvgpu_daemon.emu import native as native_mod
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.runtime import launch as emu_launch
from pyvgpu_daemon.emu.translator import ctagen
from pyvgpu_daemon.emu.translator import kernel as kernel_mod

HEAD = ".version 9.0\n.target sm_75\n.address_size 64\n"
# Floats through a barrier: products, sums, a quotient and a square root (NaN payloads, infinities, subnormals
# from the inputs), each thread's result read by its neighbour; a loop so that the optimiser has something to move.
FMIX = HEAD + """
.visible .entry fmix(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<2>; .reg .b32 %r<12>; .reg .f32 %f<10>; .reg .b64 %rd<6>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  mov.f32 %f8, %f1;
  mov.u32 %r9, 0;
LOOP:
  mul.f32 %f2, %f8, 0f3F8CCCCD;
  add.f32 %f3, %f2, %f1;
  div.rn.f32 %f4, %f3, 0f40400000;
  sqrt.rn.f32 %f5, %f4;
  sub.f32 %f8, %f5, %f2;
  add.s32 %r9, %r9, 1;
  setp.lt.u32 %p1, %r9, 5;
  @%p1 bra LOOP;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.shared.f32 [%r8], %f8;
  bar.sync 0;
  xor.b32 %r7, %r7, 4;
  add.s32 %r8, %r6, %r7;
  ld.shared.f32 %f6, [%r8];
  mul.f32 %f7, %f6, %f1;
  add.s64 %rd5, %rd1, %rd3;
  st.global.f32 [%rd5], %f7;
  ret;
}
"""
GRID, BLOCK = (8, 1, 1), (64, 1, 1)
N = 8 * 64


def _inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(N).astype(np.float32) * np.float32(1e3)
    x[::17] = np.float32(1e-40)                        # subnormals
    x[5::23] = np.inf
    x[7::29] = -np.inf
    x[::31] = np.frombuffer(np.uint32(0x7FC12345).tobytes(), np.float32)[0]    # a NaN with a payload
    return x


def _launch(mod: EmuModule, mem: DeviceMemory, x: np.ndarray) -> bytes:
    src, out = mem.alloc(4 * N), mem.alloc(4 * N)
    mem.write(src, x.tobytes())
    mod.launch("fmix", GRID, BLOCK, 0, struct.pack("<QQ", out, src))
    got = bytes(mem.read(out, 4 * N))
    mem.free(src)
    mem.free(out)
    return got


def _reference(x: np.ndarray) -> bytes:
    mem = DeviceMemory(1 << 40, 1 << 24)
    return _launch(EmuModule.load(FMIX.encode(), mem, limits=EmuLimits(native="off")), mem, x)


def _auto(mem: DeviceMemory) -> EmuModule:
    """A module whose launches build native code in the background at once (chunks of two CTAs: a launch keeps some
    for the next, whose code may be the other tier's)."""
    return EmuModule.load(FMIX.encode(), mem, limits=EmuLimits(native="auto", native_min_threads=1, threads=1,
                                                               lanes_per_chunk=128))


def _first_native(seed: int) -> tuple[DeviceMemory, np.ndarray, bytes, EmuModule, object]:
    """A daemon's fmix on inputs of `seed` (their lockstep result: `want`), once its first launch, bit for bit,
    started a build whose code is now in."""
    x = _inputs(seed)
    want = _reference(x)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _auto(mem)
    kernel = mod.kernel("fmix")
    assert _launch(mod, mem, x) == want
    _wait_for(lambda: kernel._native)
    return mem, x, want, mod, kernel


class Builds:
    """native.load's calls, by tier ("quick", "full"), in order; `gate` holds full builds until set; `fail_full`
    makes them answer None (a build that failed and was not remembered: its compiler killed from outside)."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[str] = []
        self.compiled: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_full = False
        load, build = native_mod.load, native_mod._build
        tier = threading.local()

        def counted_load(source, directory=None, extra=(), name="", jobs=1):
            tier.now = "quick" if ctagen.QUICK.flags[-1] in extra else "full"
            self.calls.append(tier.now)
            if tier.now == "full":
                assert self.gate.wait(60)
                if self.fail_full:
                    return None
            return load(source, directory, extra, name, jobs)

        def counted_build(*a, **k):
            self.compiled.append(tier.now)
            return build(*a, **k)

        monkeypatch.setattr(native_mod, "load", counted_load)
        monkeypatch.setattr(native_mod, "_build", counted_build)


@pytest.fixture
def builds(monkeypatch, tmp_path) -> Builds:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))            # an empty cache: a cold machine
    monkeypatch.setattr(ctagen, "QUICK_MIN_INSTRS", 0)               # (fmix is small: a quick tier all the same)
    monkeypatch.setattr(kernel_mod, "FULL_RENT_FACTOR", 0.0)          # the full build at the quick tier's first launch
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)
    if native_mod.compiler() is None:
        pytest.skip("no C compiler")
    return Builds(monkeypatch)


def _cache(tmp_path) -> list[str]:
    return sorted(p.suffix for p in (tmp_path / "pyvgpu" / "emu-native").iterdir())


def _wait_for(cond, seconds: float = 120.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_launches_run_the_quick_tier_then_the_full_build_bit_for_bit(builds, tmp_path):
    x = _inputs(1)
    want = _reference(x)
    mem = DeviceMemory(1 << 40, 1 << 24)
    builds.gate.clear()                                 # the full build waits: the quick tier serves meanwhile
    mod = _auto(mem)
    kernel = mod.kernel("fmix")
    assert kernel.tries_cta_code()
    assert _launch(mod, mem, x) == want                 # (starts the build; NumPy code or the quick tier)
    _wait_for(lambda: kernel._native)
    quick = kernel._native
    assert isinstance(quick, ctagen.CtaCode) and builds.calls == ["quick"] and builds.compiled == ["quick"]
    for _ in range(3):
        assert _launch(mod, mem, x) == want
        assert kernel.native_make(wait=False) is quick
    assert builds.calls == ["quick", "full"] and builds.compiled == ["quick"]     # (started, waiting at the gate)
    assert ".wanted" in _cache(tmp_path)                # worth it here: the next daemon builds at its first launch
    builds.gate.set()
    kernel._native_thread.join(120)
    full = kernel._native
    assert isinstance(full, ctagen.CtaCode) and full is not quick and builds.compiled == ["quick", "full"]
    for seed in (1, 2):                                 # the chunks kept from the quick tier's launches run full code
        assert _launch(mod, mem, _inputs(seed)) == (want if seed == 1 else _reference(_inputs(seed)))
        assert kernel.native_make(wait=False) is full
    assert _cache(tmp_path) == [".kernel", ".so", ".wanted"]     # the full build alone stays cached (and its record)
    # the next daemon: its first launch finds the full build cached by the kernel's record (native.record: no C
    # generated, no load by the C's key), no quick tier, nothing compiled
    builds.calls.clear()
    mod2 = _auto(mem)
    assert _launch(mod2, mem, x) == want
    mod2.kernel("fmix")._native_thread.join(120)
    assert builds.calls == [] and builds.compiled == ["quick", "full"]
    assert _launch(mod2, mem, x) == want and isinstance(mod2.kernel("fmix")._native, ctagen.CtaCode)


def test_a_full_build_that_fails_leaves_the_quick_tier_running(builds, tmp_path):
    x = _inputs(3)
    want = _reference(x)
    mem = DeviceMemory(1 << 40, 1 << 24)
    builds.fail_full = True
    mod = _auto(mem)
    kernel = mod.kernel("fmix")
    assert _launch(mod, mem, x) == want
    _wait_for(lambda: kernel._native)
    quick = kernel._native
    assert isinstance(quick, ctagen.CtaCode) and builds.calls == ["quick"]
    assert _launch(mod, mem, x) == want                 # (starts the full build, which fails)
    kernel._native_thread.join(120)
    assert builds.calls == ["quick", "full"]
    assert _launch(mod, mem, x) == want and kernel.native_make(wait=False) is quick
    # (the quick tier's: no full build to replace it; the record of its rent, paid: the next daemon builds at once)
    assert _cache(tmp_path) == [".rent", ".so", ".wanted"]
    # the next daemon finds only the quick tier cached: it runs that at once (not compiled again), builds the full
    builds.fail_full = False
    builds.calls.clear()
    mod2 = _auto(mem)
    kernel2 = mod2.kernel("fmix")
    assert _launch(mod2, mem, x) == want
    _wait_for(lambda: kernel2._native)
    assert _launch(mod2, mem, x) == want
    kernel2._native_thread.join(120)
    assert builds.calls == ["quick", "full"] and builds.compiled == ["quick", "full"]
    assert _launch(mod2, mem, x) == want
    assert _cache(tmp_path) == [".kernel", ".so", ".wanted"]


def test_a_full_build_the_compiler_refuses_is_remembered_and_the_quick_tier_kept(builds, tmp_path, monkeypatch):
    """The compiler fails at the full level only (a wrapper): the failure's marker stops the next daemon from trying
    again, and both daemons run the quick tier, with the lockstep code's results."""
    cc = tmp_path / "cc"
    real = native_mod.compiler()
    level = ctagen.QUICK.flags[-1]
    cc.write_text(f'#!/bin/sh\nfor a in "$@"; do case "$a" in {level}) exec {real} "$@";; esac; done\n'
                  'echo "refused" >&2; exit 1\n')
    os.chmod(cc, 0o755)
    monkeypatch.setenv("PYVGPU_EMU_CC", str(cc))
    x = _inputs(4)
    want = _reference(x)
    mem = DeviceMemory(1 << 40, 1 << 24)
    for daemon in range(2):
        builds.compiled.clear()
        mod = _auto(mem)
        kernel = mod.kernel("fmix")
        assert _launch(mod, mem, x) == want
        _wait_for(lambda: kernel._native)
        assert _launch(mod, mem, x) == want             # (starts the full build)
        kernel._native_thread.join(120)
        assert isinstance(kernel._native, ctagen.CtaCode)
        assert _launch(mod, mem, x) == want
        assert builds.compiled == (["quick", "full"] if daemon == 0 else [])
        assert _cache(tmp_path / "") == [".failed", ".rent", ".so", ".wanted"]


def test_native_on_builds_the_full_level_at_once(builds):
    x = _inputs(5)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(FMIX.encode(), mem, limits=EmuLimits(native="on"))
    assert _launch(mod, mem, x) == _reference(x)
    assert builds.calls == ["full"] and isinstance(mod.kernel("fmix")._native, ctagen.CtaCode)


def test_the_rent_of_a_kernel_with_a_quick_tier_is_the_quick_builds(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)
    monkeypatch.setattr(emu_launch, "NATIVE_AFTER_S", 0.0)
    monkeypatch.setattr(emu_launch, "NATIVE_MIN_S_CTA", 0.0)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = EmuModule.load(FMIX.encode(), mem, limits=EmuLimits(native="auto"))
    instrs = mod.kernel("fmix").instructions
    for least, rate in ((instrs + 1, emu_launch.NATIVE_S_PER_INSTR_CTA), (instrs, emu_launch.NATIVE_S_PER_INSTR_QUICK)):
        monkeypatch.setattr(ctagen, "QUICK_MIN_INSTRS", least)
        plan = emu_launch.LaunchPlan(mod.kernel("fmix"), (1, 1, 1), (64, 1, 1), 0, EmuLimits(native="auto"))
        assert sum(plan.sizes) == instrs and plan.native_later and plan.native_after == instrs * rate


def test_the_full_build_waits_until_the_quick_tiers_launches_paid_for_it(builds, monkeypatch):
    """A short program that got a quick tier for its last few launches does not pay the full build too."""
    monkeypatch.setattr(kernel_mod, "FULL_RENT_FACTOR", 1e6)
    mem, x, want, mod, kernel = _first_native(6)
    for _ in range(3):
        assert _launch(mod, mem, x) == want
    assert builds.calls == ["quick"] and kernel._full is not None and kernel._full_rent > 0
    rent = kernel._full_rent
    kernel._full_rent = 1e-9                            # (its rent all but spent: the next launch starts it)
    assert rent > 1e3 and _launch(mod, mem, x) == want
    kernel._native_thread.join(120)
    assert builds.calls == ["quick", "full"] and kernel._full is None
    assert _launch(mod, mem, x) == want and kernel.native_make(wait=False) is kernel._native


def test_a_small_kernel_built_a_cta_at_a_time_pays_at_least_its_schedulers_build(monkeypatch, tmp_path):
    """Its C holds the CTA's scheduler whatever its instructions (CUB's exclusive sum: 135 of them, 127 KB of C, 5-6 s
    of compiler CPU): its rent is at least NATIVE_MIN_S_CTA; a kernel of the other paths keeps NATIVE_AFTER_S."""
    from test_emu_launch_plan import PTX as IDS_PTX
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mem = DeviceMemory(1 << 40, 1 << 24)
    limits = EmuLimits(native="auto")
    ids = EmuModule.load(IDS_PTX.encode(), mem, limits=limits).kernel("ids")
    assert not ids.tries_cta_code()
    plan = emu_launch.LaunchPlan(ids, (1, 1, 1), (64, 1, 1), 0, limits)
    assert plan.native_later and plan.native_after == max(emu_launch.NATIVE_AFTER_S,
                                                          ids.instructions * emu_launch.NATIVE_S_PER_INSTR)
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)
    fmix = EmuModule.load(FMIX.encode(), mem, limits=limits).kernel("fmix")
    assert fmix.tries_cta_code()
    plan = emu_launch.LaunchPlan(fmix, (1, 1, 1), (64, 1, 1), 0, limits)
    assert plan.native_later and plan.native_after == emu_launch.NATIVE_MIN_S_CTA > fmix.instructions * max(
        emu_launch.NATIVE_S_PER_INSTR_CTA, emu_launch.NATIVE_S_PER_INSTR_QUICK)


def _record(kernel) -> "os.PathLike":
    return kernel._full.record


def test_the_full_builds_rent_is_its_estimated_cost_paid_by_the_quick_tiers_savings(builds, monkeypatch, tmp_path):
    monkeypatch.setattr(kernel_mod, "FULL_RENT_FACTOR", 1e3)
    monkeypatch.setattr(kernel_mod, "RENT_SAVE_S", 0.0)               # (every launch writes its record)
    mem, x, want, mod, kernel = _first_native(7)
    full = kernel._full
    assert full.rent == 1e3 * ctagen.compile_seconds(full.units) > 0 and kernel._full_rent == full.rent
    kernel.native_ran(kernel._native, 10.0)             # a launch of 10 s pays what the full build saves of it
    paid = 10.0 * (1 - kernel_mod.FULL_LAUNCH_SHARE)
    assert kernel._full_rent == pytest.approx(full.rent - paid)
    assert native_mod.rent_paid(full.record) == pytest.approx(paid, abs=1e-3)
    kernel.native_ran(object(), 10.0)                   # (another tier's launch pays nothing)
    assert kernel._full_rent == pytest.approx(full.rent - paid)
    assert _launch(mod, mem, x) == want
    assert builds.calls == ["quick"] and _cache(tmp_path) == [".rent", ".so", ".wanted"]
    assert paid < native_mod.rent_paid(full.record) < full.rent


def test_the_rent_paid_is_kept_across_daemon_runs(builds, monkeypatch, tmp_path):
    """A daemon that finds only the quick tier cached and its rent paid by earlier runs starts the full build at its
    quick tier's first launch; every launch, whichever tier, is the lockstep code's."""
    monkeypatch.setattr(kernel_mod, "FULL_RENT_FACTOR", 1e3)
    mem, x, want, mod, kernel = _first_native(8)
    for _ in range(2):
        assert _launch(mod, mem, x) == want
    record, rent = kernel._full.record, kernel._full.rent
    assert builds.calls == ["quick"]
    native_mod.save_rent(record, rent - 1e-6)           # (earlier runs paid all but a microsecond)
    for daemon in range(2):
        builds.calls.clear()
        mod2 = _auto(mem)
        kernel2 = mod2.kernel("fmix")
        assert _launch(mod2, mem, x) == want            # (it waits for its build: worth it here before)
        _wait_for(lambda: kernel2._native)
        assert _launch(mod2, mem, x) == want            # (its quick tier's first launch starts the full build)
        kernel2._native_thread.join(120)
        assert builds.calls == (["quick", "full"] if daemon == 0 else [])    # (then by its record)
        assert builds.compiled == ["quick", "full"]
        assert _launch(mod2, mem, x) == want and kernel2.native_make(wait=False) is kernel2._native
    assert _cache(tmp_path) == [".kernel", ".so", ".wanted"] and not record.exists()   # (the full build alone, no rent)


@pytest.mark.parametrize("text", [b"", b"garbage\n", b"pyvgpu-rent 0\n1e6\n", b"pyvgpu-rent 1\nnan\n",
                                  b"pyvgpu-rent 1\n-5\n", b"pyvgpu-rent 1\n1e300\n", b"pyvgpu-rent 1\n\xff\xfe\n",
                                  b"pyvgpu-rent 1\n" + b"9" * 100000])
def test_a_corrupt_or_foreign_rent_record_counts_as_nothing_paid(builds, monkeypatch, tmp_path, text):
    monkeypatch.setattr(kernel_mod, "FULL_RENT_FACTOR", 1e3)
    mem, x, want, mod, kernel = _first_native(9)
    record = kernel._full.record
    record.write_bytes(text)
    assert native_mod.rent_paid(record) == 0.0
    builds.calls.clear()
    mod2 = _auto(mem)                                   # the next daemon: quick tier cached, nothing paid
    kernel2 = mod2.kernel("fmix")
    assert _launch(mod2, mem, x) == want
    _wait_for(lambda: kernel2._native)
    for _ in range(2):
        assert _launch(mod2, mem, x) == want
    assert builds.calls == ["quick"] and kernel2._full is not None
    assert kernel2._full_rent > kernel2._full.rent - 1.0


def test_a_quick_tier_launch_pays_its_cpu_time_not_its_wall_time(builds, monkeypatch):
    """On a loaded machine a launch's wall time is mostly waiting for a CPU, which the full build's estimate (CPU
    seconds) does not hold: a launch that used no CPU pays nothing."""
    monkeypatch.setattr(kernel_mod, "FULL_RENT_FACTOR", 1e3)
    mem, x, want, mod, kernel = _first_native(10)
    assert kernel.rent_due
    monkeypatch.setattr(emu_launch.time, "process_time", lambda: 1.0)     # (no CPU used, whatever the wall)
    for _ in range(3):
        assert _launch(mod, mem, x) == want
    assert kernel._full_rent == kernel._full.rent


def test_a_quick_tier_only_where_it_is_much_cheaper_than_the_full_build(monkeypatch):
    """ctagen.quick_flags with the source: a quick level that costs more than QUICK_MAX_SHARE of the full level's
    compile time (LEAN_O1's 3.0 s/MB against -Og's 2.4) gives no quick tier; without the source, the size rule."""
    monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(1000, ("-O1",), 3.0),
                                                ctagen.OptLevel(0, ("-O3",), 40.0)))
    monkeypatch.setattr(ctagen, "QUICK", ctagen.OptLevel(0, ("-Og",), 2.4))
    monkeypatch.setattr(ctagen, "QUICK_MIN_INSTRS", 3000)
    quick = ctagen.FLAGS + ("-Og",)
    assert ctagen.quick_flags(5000, "x" * 2000) is None
    assert ctagen.quick_flags(5000, ["x" * 600, "y" * 600]) is None       # (translation units: their bytes together)
    assert ctagen.quick_flags(5000, "x" * 10) == quick
    assert ctagen.quick_flags(5000) == quick
    assert ctagen.quick_flags(2999, "x" * 10) is None
    monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(1000, ("-O1",), 5.0),
                                                ctagen.OptLevel(0, ("-O3",), 40.0)))
    assert ctagen.quick_flags(5000, "x" * 2000) == quick


def test_a_kernel_whose_full_build_costs_about_the_quick_one_builds_it_at_once(builds, monkeypatch, tmp_path):
    """No quick tier where it would only delay the full code: one build, the full level's, bit for bit."""
    monkeypatch.setattr(ctagen, "QUICK", ctagen.OptLevel(0, ctagen.QUICK.flags, 1e9))
    mem, x, want, mod, kernel = _first_native(12)
    for _ in range(2):
        assert _launch(mod, mem, x) == want
    assert builds.calls == ["full"] and builds.compiled == ["full"] and kernel._full is None
    assert not kernel.rent_due
