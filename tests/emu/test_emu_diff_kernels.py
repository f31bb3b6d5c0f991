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


# What two H100 runs (real-GPU runs 2 and 3) returned where the emulator of the day differed: result index → the
# GPU's float32 bits (the first 20 differences of each run and group, diff_kernels.json; both runs' other results
# equalled the emulator of their day, two different tie rules, and the counts, 2048 and 2560, match the rule below)
GPU_TEX_2D = {896: 0, 1344: 0x3b800000, 1472: 0, 1920: 0x3b800000, 2336: 0x3c400000, 2400: 0x3c000000,
              2464: 0x3b800000, 2528: 0, 2944: 0x3c000000, 3392: 0x3c800000, 3520: 0x3b800000, 3968: 0x3c400000,
              4368: 0x3ce00000, 4400: 0x3cc00000, 4432: 0x3ca00000, 4464: 0x3c800000, 4496: 0x3c400000,
              4528: 0x3c000000, 4560: 0x3b800000, 4592: 0, 131712: 0x3efe0000, 131968: 0x3f000000,
              132160: 0x3e7c0000, 132288: 0x3f3e0000, 132416: 0x3f3f0000, 132544: 0x3e800000, 132736: 0x3efc0000,
              132992: 0x3efe0000, 133152: 0x3df80000, 133216: 0x3ebc0000, 133280: 0x3f1d0000, 133344: 0x3f5c0000,
              133408: 0x3f5d0000, 133472: 0x3f1e0000, 133536: 0x3ebe0000, 133600: 0x3e000000, 133760: 0x3efa0000,
              134016: 0x3efc0000, 134208: 0x3e780000, 134336: 0x3f3b0000}
GPU_TEX_3D = {1080: 0, 1108: 0x3b800000, 1116: 0, 1144: 0x3b800000, 1170: 0x3c400000, 1174: 0x3c000000,
              1178: 0x3b800000, 1182: 0, 1208: 0x3c000000, 1236: 0x3c800000, 1244: 0x3b800000, 1272: 0x3c400000,
              1297: 0x3ce00000, 1299: 0x3cc00000, 1301: 0x3ca00000, 1303: 0x3c800000, 1305: 0x3c400000,
              1307: 0x3c000000, 1309: 0x3b800000, 1311: 0, 1576: 0x3ce00000, 1592: 0x3d000000, 1604: 0x3c400000,
              1612: 0x3d200000, 1620: 0x3d300000, 1628: 0x3c800000, 1640: 0x3cc00000, 1656: 0x3ce00000,
              1666: 0x3b800000, 1670: 0x3c800000, 1674: 0x3ce00000, 1678: 0x3d200000, 1682: 0x3d300000,
              1686: 0x3d000000, 1690: 0x3ca00000, 1694: 0x3c000000, 1704: 0x3ca00000, 1720: 0x3cc00000,
              1732: 0x3c000000, 1740: 0x3ce00000}


def _weight(factors: list[np.ndarray], uppers: list[np.ndarray]) -> np.ndarray:
    """A texel's weight as the GPU holds it: the product of its dimensions' factors (alpha for the upper texel,
    1 - alpha for the lower, each in 1/256 units) rounded to 1/256, a tie up when an even number of factors are
    1 - alpha, down when odd (in 2D: w11 rounded, the other three by difference; H100 runs 2 and 3)."""
    p = np.ones_like(factors[0])
    for f in factors:
        p = p * f
    unit = 256 ** (len(factors) - 1)
    q, r = np.divmod(p, unit)
    lowers = sum((~u).astype(np.int64) for u in uppers)
    return (q + (2 * r > unit) + ((2 * r == unit) & (lowers % 2 == 0))) / 256.0


def _single_texel(u: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(factor in 1/256 units, texel 3 is the upper texel) at coordinate 2.5 + u/steps, u in [0, 2 steps)."""
    a = (u % steps) * (256 // steps)
    upper = u < steps
    return np.where(upper, a, 256 - a), upper


def _mix32(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def test_texture_weights_are_9_bit_fixed_point(groups):
    # each result is the weight of the one texel holding 1.0 (texel 3): per dimension alpha rounded to 8 fraction
    # bits (a tie up); in 2D and 3D the texel's product weight rounded again (what a real GPU gave, run 1), its ties
    # by the number of 1 - alpha factors (runs 2 and 3)
    g = dict(groups)
    u1 = np.arange(2048)
    alpha = np.floor((u1 % 1024) / 1024 * 256 + 0.5)
    w1 = np.where(u1 < 1024, alpha, 256 - alpha) / 256
    assert (np.frombuffer(g["tex_1d"], np.float32) == w1.astype(np.float32)).all()
    i = np.arange(512 * 512)
    f2 = [_single_texel(i % 512, 256), _single_texel(i // 512, 256)]
    w2 = _weight([f for f, _ in f2], [u for _, u in f2])
    got2 = np.frombuffer(g["tex_2d"], np.float32)
    assert (got2 == w2.astype(np.float32)).all()
    assert (got2 != (f2[0][0] * f2[1][0] / 65536).astype(np.float32)).any()   # the rounding of the product shows
    j = np.arange(32 ** 3)
    f3 = [_single_texel(j % 32, 16), _single_texel(j // 32 % 32, 16), _single_texel(j // 1024, 16)]
    got3 = np.frombuffer(g["tex_3d"], np.float32)
    assert (got3 == _weight([f for f, _ in f3], [u for _, u in f3]).astype(np.float32)).all()
    # the GPU's own numbers where the emulator differed in runs 2 and 3
    for got, rec in ((got2, GPU_TEX_2D), (got3, GPU_TEX_3D)):
        idx = np.array(sorted(rec))
        assert (got.view(np.uint32)[idx] == np.array([rec[k] for k in idx], np.uint32)).all()
    # alphas in 1/256 steps in 3D (unconfirmed on a GPU: the rule above, applied to three factors)
    h = _mix32(np.arange(1 << 14))
    ff = [_single_texel(((h >> np.uint32(9 * k)) & np.uint32(511)).astype(np.int64), 256) for k in range(3)]
    wf = _weight([f for f, _ in ff], [u for _, u in ff])
    assert (np.frombuffer(g["tex_3d_fine"], np.float32) == wf.astype(np.float32)).all()


def _sample_2d(tex: np.ndarray, x: np.ndarray, y: np.ndarray, mode: str, normalized: bool) -> np.ndarray:
    """Linear filtering by the Programming Guide's rules with the GPU's fixed-point weights; border colour 0."""
    h, w = tex.shape
    parts = []
    for c, n in ((x, w), (y, h)):
        c = c.astype(np.float64)
        if normalized:
            if mode == "wrap":
                c = c - np.floor(c)
            elif mode == "mirror":
                t = np.floor(c)
                c = np.where(np.mod(t, 2) == 0, c - t, 1 - (c - t))
            c = c * n
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
            wgt = _weight(factors, [np.full(len(x), bool(cx)), np.full(len(x), bool(cy))])
            val = np.where(inside | (mode != "border"), tex[idx[1], idx[0]], 0.0)
            acc += wgt * val
    return acc.astype(np.float32)


def test_texture_coordinates_anywhere(groups):
    # tex_2d_coords: a 13 x 7 texture of small integers at hashed coordinates, four address modes; every sum is
    # exact in float32, so the emulator must equal this model bit for bit (the GPU: the next real-GPU run)
    tex = ((np.arange(13 * 7) * 7) % 23 - 11).astype(np.float64).reshape(7, 13)
    got = np.frombuffer(dict(groups)["tex_2d_coords"], np.float32).reshape(4, 4096)
    i = np.arange(4096, dtype=np.uint32)
    t = [(_mix32(2 * i + k) >> np.uint32(8)).astype(np.float32) * np.float32(1 / 16777216) for k in (1, 2)]
    for row, (mode, norm, lo, span) in enumerate((("clamp", False, -2, 17), ("border", False, -2, 17),
                                                  ("wrap", True, -1.5, 4), ("mirror", True, -1.5, 4))):
        x, y = (np.float32(lo) + np.float32(span) * tk for tk in t)
        assert x.dtype == np.float32
        want = _sample_2d(tex, x, y, mode, norm)
        bad = np.flatnonzero(got[row].view(np.uint32) != want.view(np.uint32))
        assert not len(bad), f"{mode}: {len(bad)} differ, first #{bad[0]}: got {got[row][bad[0]]} want {want[bad[0]]}"
