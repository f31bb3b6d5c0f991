"""Review of stop 32's launch and stage-3 work (scanlaunch9, radixrest9, onesweep9, scannarrow9): cases that gave a
wrong result or broke a guarantee, each failing on the code before its fix."""
from __future__ import annotations

import struct

import numpy as np

from pyvgpu_daemon.emu import module as emu_module
from pyvgpu_daemon.emu.memory import DeviceMemory

from test_emu_kept_chunks import BLOCK, GRID, REC, _check, _module


# ------------------------------------------------------------------------------- kept chunks: the session's budget
def test_a_plan_the_module_let_go_keeps_nothing_charged_from_a_launch_still_running():
    # A run of launches (backends/emu.py _RunLaunches) holds its plans while it runs, and another stream's launch may
    # be running one, when the module evicts it (a 17th configuration) or drops its translation: that launch's
    # finished chunks were kept by the evicted plan and charged to the translation, never given back (no one takes
    # them, nothing releases the plan again): every such run leaked up to 16 MB of the session's budget until its
    # translation was dropped.
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, native="off", threads=1)
    out = m.memory.alloc(REC.itemsize * GRID * BLOCK)
    params = struct.pack("<QII", out, 1, 0)
    plan = m.plan_for("state", (GRID, 1, 1), (BLOCK, 1, 1), 0)
    m.run_plan(plan, "state", params)
    assert plan.kept
    for g in range(1, emu_module._MAX_PLANS + 1):       # evicted: its kept bytes given back
        m.plan_for("state", (g, 1, 1), (1, 1, 1), 0)
    assert plan not in m._plans.values()
    used = m.budget.used
    m.run_plan(plan, "state", params)                    # the run that holds it launches it again
    _check(np.frombuffer(bytes(mem.read(out, REC.itemsize * GRID * BLOCK)), REC), 1, 0)
    assert not plan.kept and m.budget.used == used
    # the same for a plan whose translation the budget drops, and one of a module unloaded
    for let_go in ("_drop", "unload"):
        m2 = _module(mem, native="off", threads=1)
        plan = m2.plan_for("state", (GRID, 1, 1), (BLOCK, 1, 1), 0)
        m2.run_plan(plan, "state", params)
        assert plan.kept
        m2._drop("state") if let_go == "_drop" else m2.unload()
        used = m2.budget.used
        m2.run_plan(plan, "state", params)
        assert not plan.kept and m2.budget.used == used, let_go


# ------------------------------------------------------------------ the first launch's wait for a wanted build
def _wanted_module_with_a_slow_build(monkeypatch, tmp_path, done, **limits):
    """A module whose kernel `ids` was built here before (wanted) and whose build now takes until `done` is set (then
    fails: nothing built, nothing recorded; the test's cache directory is gone by then)."""
    from pyvgpu_daemon.emu import native as native_mod
    from pyvgpu_daemon.emu.limits import EmuLimits
    from pyvgpu_daemon.emu.module import EmuModule
    from pyvgpu_daemon.emu.runtime import launch as emu_launch
    from pyvgpu_daemon.emu.translator.kernel import Kernel

    from test_emu_launch_plan import PTX as IDS_PTX
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(emu_launch, "NATIVE_AFTER_S", 3600.0)
    monkeypatch.setattr(emu_launch, "WANTED_WAIT_S", 5.0)
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = EmuModule.load(IDS_PTX.encode(), mem, limits=EmuLimits(native="auto"))
    native_mod.mark_wanted(m.kernel("ids").native_key)
    monkeypatch.setattr(Kernel, "_build_native_or_false", lambda self, *a, **k: done.wait(10.0) and False)
    return EmuModule.load(IDS_PTX.encode(), mem, limits=EmuLimits(native="auto", **limits)), mem


def test_a_launch_waiting_for_its_build_is_cancelled_and_timed_as_one_running(monkeypatch, tmp_path):
    # The first launch of a wanted kernel waited WANTED_WAIT_S for its build without a check: a session whose client
    # left (cancel set) held on for it, and a launch with a time limit below it failed with cudaErrorLaunchTimeout
    # where its NumPy code ran well within the limit.
    import threading
    import time

    from pyvgpu_daemon.errors import CudaError
    done = threading.Event()
    built = []
    try:
        m, mem = _wanted_module_with_a_slow_build(monkeypatch, tmp_path, done)
        built.append(m)
        out = mem.alloc(16 * 1000)
        cancel = threading.Event()
        cancel.set()
        t0 = time.monotonic()
        try:
            m.launch("ids", (4, 1, 1), (256, 1, 1), 0, struct.pack("<QI", out, 3) + b"\0" * 4, cancel=cancel)
        except CudaError as e:
            assert "cancelled" in str(e)
        else:
            raise AssertionError("a cancelled launch ran")
        assert time.monotonic() - t0 < 1.5, "the cancelled launch waited for the build"
        m, mem = _wanted_module_with_a_slow_build(monkeypatch, tmp_path, done, max_seconds=2.0)
        built.append(m)
        out = mem.alloc(16 * 1000)
        m.launch("ids", (4, 1, 1), (256, 1, 1), 0, struct.pack("<QI", out, 3) + b"\0" * 4)      # (no timeout)
        v = np.frombuffer(bytes(mem.read(out, 16 * 1000)), np.dtype([("g", "<u8"), ("v", "<u4"), ("p", "<u4")]))
        assert (v["v"] == np.arange(1000) + 3).all()
    finally:
        done.set()                    # (the builds end here, within the test's cache directory)
        for m in built:
            m.kernel("ids").native_make(wait=True)


def test_a_kept_chunk_is_charged_for_its_native_codes_state_too():
    # A chunk that ran native code a thread or a CTA at a time keeps that code's state array (Chunk.code_state: a
    # CTA's register file, an array of up to 1,024 elements per register) for its next run; kept_bytes counted its
    # lane state and geometry only: the plan's 16 MB and the session's budget missed most of what kept chunks hold
    # (here 46 KB uncharged beside 15 KB charged a chunk; a kernel of 1,000 registers: 4 MB a chunk).
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = _module(mem, native="on", threads=2)
    out = m.memory.alloc(REC.itemsize * GRID * BLOCK)
    params = struct.pack("<QII", out, 1, 0)
    plan = m.plan_for("state", (GRID, 1, 1), (BLOCK, 1, 1), 0)
    before = m.budget.used
    m.run_plan(plan, "state", params)
    _check(np.frombuffer(bytes(mem.read(out, REC.itemsize * GRID * BLOCK)), REC), 1, 0)
    assert plan.kept and all(c.code_state is not None for c in plan.kept)
    held = sum(c._state.buf.nbytes + c.code_state[1].nbytes for c in plan.kept)
    assert plan.kept_bytes >= held and m.budget.used - before == plan.kept_bytes
    m.run_plan(plan, "state", params)                   # taken, run, kept again: the same charge
    assert m.budget.used - before == plan.kept_bytes >= held
    plan.release()
    assert m.budget.used == before
