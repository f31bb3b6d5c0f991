"""rsqrt.approx.f64 against an H100's own results (tests/differential/gpu_f64_rsqrt_run3.npz: 1024 positive normal
operands of diff_kernels.cu's f64_approx group with the GPU's rsqrt.approx.ftz.f64 and rsqrt.approx.f64 bits, and
where they come from). ptxas compiles rsqrt.approx.f64 to a 20-bit seed (MUFU.RSQ64H, which rsqrt.approx.ftz.f64 is
alone) and one correction in fused multiply-adds (emu/ops/floating.py, _rsqrt64): from the GPU's own seed that
correction must give the GPU's result bit for bit, and the emulator's instruction must give it wherever its seed is
the GPU's (its seed is 1/sqrt of the upper word truncated; the hardware's rounds differently in a few cases)."""
from __future__ import annotations

import numpy as np

from harness import ROOT
from pyvgpu_daemon.emu.ops import build_alu
from pyvgpu_daemon.emu.ops.floating import rsqrt64_refine
from pyvgpu_daemon.emu.ptx import ir

RECORDED = ROOT / "tests" / "differential" / "gpu_f64_rsqrt_run3.npz"


def _alu(spec: str):
    parts = spec.split(".")
    return build_alu(ir.Instr(parts[0], tuple(parts[1:]), [ir.Reg("%d0")], [ir.Reg("%a")], line=1))


def test_rsqrt_approx_f64_replays_the_gpu():
    with np.load(RECORDED) as z:
        assert "H100" in str(z["provenance"])
        x, seed, want = z["x"], z["seed"], z["rsqrt"]
    xf = x.view(np.float64)
    assert len(x) == 1024 and (xf > 0).all() and np.isfinite(xf).all()
    # the correction from the GPU's own seed: every result
    with np.errstate(all="ignore"):         # the exact fma splits huge x with overflow, then takes its slow path
        got = rsqrt64_refine(xf, seed.view(np.float64)).view(np.uint64)
    assert (got == want).all(), np.flatnonzero(got != want)[:5]
    # the emulator's instructions: the seed where the hardware's agrees, and then the result
    emu_seed = _alu("rsqrt.approx.ftz.f64").fn(xf).view(np.uint64)
    same_seed = emu_seed == seed
    assert same_seed.mean() > 0.9
    emu = _alu("rsqrt.approx.f64").fn(xf).view(np.uint64)
    assert (emu[same_seed] == want[same_seed]).all(), np.flatnonzero(same_seed & (emu != want))[:5]
    # 1 / sqrt in float64 (the emulator before) is not what the GPU gives
    assert ((np.float64(1.0) / np.sqrt(xf)).view(np.uint64) != want).sum() > 100
