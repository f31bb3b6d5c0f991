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
