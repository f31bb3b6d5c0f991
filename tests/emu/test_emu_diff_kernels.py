"""The real-GPU differential of tools/gpu_probes/diff_kernels.cu, here on the emulated GPU alone: the emulator's
results are within the bounds NVIDIA documents for every approximate slot (isa_bounds.py checks both devices on
every result, so comparing the emulator with itself holds it to them), its f32 NaNs are the canonical NaN and its
f64 NaNs follow the GPU's operand rule (real-GPU run 1); and the comparison itself tells a result within a bound
from one outside it, and a special input's result that is not bit for bit."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from harness import ROOT

sys.path.insert(0, str(ROOT / "tools" / "gpu_probes"))
import gpu_diff_kernels  # noqa: E402
import isa_bounds  # noqa: E402


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    from harness import start_daemon
    work = tmp_path_factory.mktemp("diffk")
    d = start_daemon(work)
    try:
        return gpu_diff_kernels.run(gpu_diff_kernels.build(), f"127.0.0.1:{d.port}", work / "emu.bin", 300)
    finally:
        d.stop()


def _replace(groups, name, fn):
    return [(n, fn(b) if n == name else b) for n, b in groups]


def test_emulator_within_the_documented_bounds(groups):
    lines, report, ok = gpu_diff_kernels.compare(groups, groups)
    assert ok, "\n".join(lines)
    assert lines[-1] == f"kernels: {len(report)} of {len(report)} groups bit-identical"
    assert {"f32_approx", "f32_libm", "f32_approx_ftz", "f64_approx"} <= set(report)


def test_nans_are_the_gpus(groups):
    g = dict(groups)
    for name, per, bitwise in (("f32_arith", 8, ()), ("f32_approx", 6, ()), ("f32_libm", 6, ()),
                               ("f32_signs", 4, (3,)), ("f32_approx_ftz", 11, ())):
        u = np.delete(np.frombuffer(g[name], np.uint32).reshape(-1, per), bitwise, axis=1)    # copysign: bits
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        assert nan.any() and (u[nan] == 0x7FFFFFFF).all(), name
    # fma.f64(0, inf, sNaN 0x7FF0000000000001): the GPU returns the NaN operand quieted (run 1, result #386)
    a, b, c = (np.frombuffer(g[f"input_f64_{k}"], np.uint64) for k in "abc")
    assert (a[64], b[64], c[64]) == (0, 0x7FF0000000000000, 0x7FF0000000000001)
    assert np.frombuffer(g["f64_arith"], np.uint64)[386] == 0x7FF8000000000001
    # f64_more of x = NaN 0x7FF8000000000000 (run 2, an H100): -x keeps the NaN's sign (ptxas: DADD -RZ, -x); NaN
    # to s64, s32 (f64 and via f32) and u32 is the sign bit alone
    assert a[40] == 0x7FF8000000000000
    more = np.frombuffer(g["f64_more"], np.uint64).reshape(-1, 10)
    assert more[40, [0, 6, 7, 8, 9]].tolist() == [0x7FF8000000000000, 1 << 63, 1 << 31, 1 << 63, 1 << 31]


def test_comparison_tells_bounds_from_differences(groups):
    g = dict(groups)
    inputs = {n: np.frombuffer(b, np.uint64 if "f64" in n else np.uint32) for n, b in groups if n.startswith("input_")}
    x = inputs["input_f32_a"].view(np.float32)
    ordinary = np.isfinite(x) & (np.abs(x) > 1e-3) & (np.abs(x) < 20)

    def bump(name, per, slot, delta, where):
        def fn(raw):
            u = np.frombuffer(raw, np.uint32).copy().reshape(-1, per)
            u[where, slot] += np.uint32(delta)
            return u.tobytes()
        return _replace(groups, name, fn)
    # sin.approx one ulp away on ordinary inputs: within 2**-20.5 absolute
    lines, _, ok = gpu_diff_kernels.compare(bump("f32_approx", 6, 0, 1, ordinary), groups)
    assert ok and "f32_approx: within the ISA's bounds" in "\n".join(lines), lines
    # rcp.approx.ftz.f64 one ulp of the upper word away on an f64 below f32's range: no stated bound, not special
    tiny = inputs["input_f64_a"].view(np.float64)
    tiny = np.isfinite(tiny) & (np.abs(tiny) < 2.0 ** -126) & (np.abs(tiny) >= 2.0 ** -1022)
    assert tiny.any()

    def bump64(raw):
        u = np.frombuffer(raw, np.uint64).copy().reshape(-1, 3)
        u[tiny, 0] += np.uint64(1 << 32)
        return u.tobytes()
    lines, _, ok = gpu_diff_kernels.compare(_replace(groups, "f64_approx", bump64), groups)
    assert ok, lines
    # ... far away: outside
    lines, _, ok = gpu_diff_kernels.compare(bump("f32_approx", 6, 0, 1 << 12, ordinary), groups)
    assert not ok and "sin.approx" in lines[-1] and "outside the ISA's bound" in lines[-1], lines[-1]
    # an exact group one ulp away anywhere fails
    lines, _, ok = gpu_diff_kernels.compare(bump("f32_arith", 8, 0, 1, ordinary), groups)
    assert not ok and "f32_arith.results" in lines[-1] and "not bit for bit" in lines[-1]
    # a special input (x = 0: ex2 gives exactly 1) must be bit for bit even within the bound
    zero = inputs["input_f32_a"] == 0
    lines, _, ok = gpu_diff_kernels.compare(bump("f32_approx", 6, 2, 1, zero), groups)
    assert not ok and "special input" in lines[-1]
    # a non-canonical NaN fails where the reference is NaN
    lines, _, ok = gpu_diff_kernels.compare(_replace(groups, "f32_approx", lambda raw: np.where(
        np.frombuffer(raw, np.uint32) == 0x7FFFFFFF, np.uint32(0xFFC00000), np.frombuffer(raw, np.uint32)).tobytes()),
        groups)
    assert not ok
    assert isa_bounds.check_group("f32_arith", g["f32_arith"], g["f32_arith"], inputs).identical


def test_texture_weights_are_9_bit_fixed_point(groups):
    # each result is the weight of the one texel holding 1.0 (texel 3): per dimension alpha rounded to 8 fraction
    # bits; in 2D and 3D the texel's product weight rounded again (what a real GPU gave, run 1), a tie up when its x
    # factor is alpha (texel 3 is the upper texel: u < 1) and down when it is 1 - alpha (an H100, run 2)
    g = dict(groups)

    def alpha(u):                                  # weight of texel 3 at coordinate 2.5 + u, u in [0, 2)
        a = np.floor((u % 1) * 256 + 0.5) / 256
        return np.where(u < 1, a, 1 - a)
    u1 = np.arange(2048) / 1024
    assert (np.frombuffer(g["tex_1d"], np.float32) == alpha(u1).astype(np.float32)).all()
    i = np.arange(512 * 512)
    separable = alpha((i % 512) / 256) * alpha((i // 512) / 256)
    got2 = np.frombuffer(g["tex_2d"], np.float32)
    def fixed9(w, up):
        return np.where(up, np.floor(w * 256 + 0.5), np.ceil(w * 256 - 0.5)) / 256
    assert (got2 == fixed9(separable, (i % 512) < 256).astype(np.float32)).all()
    assert (got2 != separable.astype(np.float32)).any()        # the rounding of the product shows
    j = np.arange(32 ** 3)
    w3 = alpha((j % 32) / 16) * alpha((j // 32 % 32) / 16) * alpha((j // 1024) / 16)
    assert (np.frombuffer(g["tex_3d"], np.float32) == fixed9(w3, (j % 32) < 16).astype(np.float32)).all()
