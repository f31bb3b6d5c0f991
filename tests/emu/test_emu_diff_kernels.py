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
import tex_rules  # noqa: E402


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


# What real-GPU run 3 (an H100) returned for every texture result of diff_kernels.cu (times 256, with provenance)
GPU_TEXTURES = ROOT / "tests" / "differential" / "gpu_textures_run3.npz"


def _weight(fs: tex_rules.Factors) -> np.ndarray:
    """A texel's weight as the GPU holds it: 2D tex_rules.parity (the product rounded to 1/256, a tie up when an
    even number of factors are 1 - alpha), 3D tex_rules.two_stage_xz_y (x with z, then with y)."""
    return (tex_rules.parity(fs) if len(fs) == 2 else tex_rules.two_stage_xz_y(fs)) / 256.0


def test_texture_weights_are_9_bit_fixed_point(groups):
    # each result is the weight of the one texel holding 1.0 (texel 3): per dimension alpha rounded to 8 fraction
    # bits (a tie up); in 2D and 3D the texel's product weight rounded again (what a real GPU gave, run 1), its ties
    # by the number of 1 - alpha factors (runs 2 and 3), in 3D in two stages (run 3)
    g = dict(groups)
    u1 = np.arange(2048)
    alpha = np.floor((u1 % 1024) / 1024 * 256 + 0.5)
    w1 = np.where(u1 < 1024, alpha, 256 - alpha) / 256
    assert (np.frombuffer(g["tex_1d"], np.float32) == w1.astype(np.float32)).all()
    i = np.arange(512 * 512)
    f2 = [tex_rules.single_texel(i % 512, 256), tex_rules.single_texel(i // 512, 256)]
    w2 = _weight(f2)
    got2 = np.frombuffer(g["tex_2d"], np.float32)
    assert (got2 == w2.astype(np.float32)).all()
    assert (got2 != (f2[0][0] * f2[1][0] / 65536).astype(np.float32)).any()   # the product's rounding shows
    j = np.arange(32 ** 3)
    f3 = [tex_rules.single_texel(j % 32, 16), tex_rules.single_texel(j // 32 % 32, 16),
          tex_rules.single_texel(j // 1024, 16)]
    got3 = np.frombuffer(g["tex_3d"], np.float32)
    assert (got3 == _weight(f3).astype(np.float32)).all()
    # alphas in 1/256 steps in 3D: the other candidates each differ from the GPU's rule there
    assert (np.frombuffer(g["tex_3d_fine"], np.float32) == _weight(tex_rules.fine_factors()).astype(np.float32)).all()
    assert tex_rules.rules_followed(g["tex_3d_fine"]) == [tex_rules.GPU_RULE_3D]
    lines, _, _ = gpu_diff_kernels.compare(groups, groups)
    assert f"tex_3d_fine: the 3D weights follow {tex_rules.GPU_RULE_3D}" in lines


def test_textures_replay_the_gpu(groups):
    # every texture result an H100 gave (run 3) bit for bit: the recording is the GPU's, not a model's
    g = dict(groups)
    with np.load(GPU_TEXTURES) as z:
        assert "H100" in str(z["provenance"])
        for name in ("tex_1d", "tex_2d", "tex_3d", "tex_3d_fine", "tex_2d_coords"):
            want = (z[name].astype(np.float32) / np.float32(256)).view(np.uint32)
            got = np.frombuffer(g[name], np.uint32)
            bad = np.flatnonzero(got != want)
            assert not len(bad), (f"{name}: {len(bad)} of {len(want)} differ from the GPU, first #{bad[0]}: emu "
                                  f"{got[bad[0]]:#010x} gpu {want[bad[0]]:#010x}")


def _sample_2d(tex: np.ndarray, x: np.ndarray, y: np.ndarray, mode: str, normalized: bool) -> np.ndarray:
    """Linear filtering by the Programming Guide's rules with the GPU's fixed point (run 3): a normalized coordinate
    floored to 21 fraction bits, then scaled; wrap and mirror on the texel indices; border colour 0."""
    h, w = tex.shape
    parts = []
    for c, n in ((x, w), (y, h)):
        c = c.astype(np.float64)
        if normalized:
            c = np.floor(c * 2.0 ** 21) / 2.0 ** 21 * n
        cb = c - 0.5
        i0 = np.floor(cb)
        parts.append((i0.astype(np.int64), np.floor((cb - i0) * 256 + 0.5).astype(np.int64), n))
    acc = np.zeros(len(x))
    for cx in (0, 1):
        for cy in (0, 1):
            idx, inside, factors = [], np.ones(len(x), bool), []
            for (i0, a, n), up in ((parts[0], cx), (parts[1], cy)):
                i = i0 + up
                if mode == "wrap":
                    i = np.mod(i, n)
                elif mode == "mirror":
                    m = np.mod(i, 2 * n)
                    i = np.where(m < n, m, 2 * n - 1 - m)
                else:
                    inside &= (i >= 0) & (i < n)
                    i = np.clip(i, 0, n - 1)
                idx.append(i)
                factors.append(a if up else 256 - a)
            wgt = _weight([(factors[0], np.full(len(x), bool(cx))), (factors[1], np.full(len(x), bool(cy)))])
            val = np.where(inside | (mode != "border"), tex[idx[1], idx[0]], 0.0)
            acc += wgt * val
    return acc.astype(np.float32)


def test_texture_coordinates_anywhere(groups):
    # tex_2d_coords: a 13 x 7 texture of small integers at hashed coordinates, four address modes; every sum is
    # exact in float32, so the emulator must equal this model bit for bit (as the GPU did, run 3)
    tex = ((np.arange(13 * 7) * 7) % 23 - 11).astype(np.float64).reshape(7, 13)
    got = np.frombuffer(dict(groups)["tex_2d_coords"], np.float32).reshape(4, 4096)
    i = np.arange(4096, dtype=np.uint32)
    t = [(tex_rules.mix32(2 * i + k) >> np.uint32(8)).astype(np.float32) * np.float32(1 / 16777216) for k in (1, 2)]
    for row, (mode, norm, lo, span) in enumerate((("clamp", False, -2, 17), ("border", False, -2, 17),
                                                  ("wrap", True, -1.5, 4), ("mirror", True, -1.5, 4))):
        x, y = (np.float32(lo) + np.float32(span) * tk for tk in t)
        assert x.dtype == np.float32
        want = _sample_2d(tex, x, y, mode, norm)
        bad = np.flatnonzero(got[row].view(np.uint32) != want.view(np.uint32))
        assert not len(bad), f"{mode}: {len(bad)} differ, first #{bad[0]}: got {got[row][bad[0]]} want {want[bad[0]]}"
