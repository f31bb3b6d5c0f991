"""Which rounding of a texel's linear-filtering weight a device follows, from diff_kernels.cu's tex_3d_fine group
(a 3D texture holding one 1.0, sampled at x, y, z = 2.5 + u/256 with u in [0, 512) from mix32 of the result index,
so each result is that texel's weight). Each factor is alpha or 1 - alpha in 1/256 units (9-bit fixed point); the
weight is held in 1/256 units too. Two H100 runs fixed the 2D rule (a product exactly halfway between two steps
rounds up when an even number of its factors are 1 - alpha: `parity`); their 1/16-step 3D grids could not tell the
3D candidates apart. Real-GPU run 3 (an H100, tex_3d_fine) did: the GPU rounds in two stages, x with z first (a tie
up when x's factor is alpha), then that with y (a tie by the 2D rule): `two_stage_xz_y`, every one of 16384 results;
each other rule here misses hundreds to thousands. gpu_diff_kernels.py names the ones a GPU's results follow;
tests/emu/test_emu_diff_kernels.py holds the emulator to `two_stage_xz_y` and replays run 3's recorded results.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Factors = list[tuple[np.ndarray, np.ndarray]]          # per dimension: (factor in 1/256 units, is alpha)


def mix32(x: np.ndarray) -> np.ndarray:
    """diff_kernels.cu's mix32 (a 32-bit integer hash)."""
    x = np.asarray(x).astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def single_texel(u: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(factor in 1/256 units, is alpha) of texel 3 at coordinate 2.5 + u/steps, u in [0, 2 steps): x - 0.5 =
    2 + u/steps, so texel 3 is the upper texel (alpha) while u < steps, the lower (1 - alpha) after."""
    a = (u % steps) * (256 // steps)
    upper = u < steps
    return np.where(upper, a, 256 - a), upper


def rounded(p: np.ndarray, unit: int, up: np.ndarray | bool) -> np.ndarray:
    """p / unit to the nearest integer, a tie up where `up`, else down."""
    q, r = np.divmod(p, unit)
    return q + (2 * r > unit) + ((2 * r == unit) & up)


def parity(fs: Factors) -> np.ndarray:
    """The product rounded once, a tie up when an even number of factors are 1 - alpha (the 2D rule of the GPU)."""
    p = np.ones_like(fs[0][0])
    for f, _ in fs:
        p = p * f
    lowers = sum((~u).astype(np.int64) for _, u in fs)
    return rounded(p, 256 ** (len(fs) - 1), lowers % 2 == 0)


def inclusion_exclusion(fs: Factors) -> np.ndarray:
    """Only products of alphas rounded (ties up), each texel's weight the inclusion-exclusion of them, so the eight
    weights sum to 1: the weight of a texel whose upper dimensions are U is the sum over subsets S of the others of
    (-1)^|S| times the rounded product of the alphas of U and S."""
    alphas = [np.where(u, f, 256 - f) for f, u in fs]
    dims = range(len(fs))

    def product(ks: list[int]) -> np.ndarray:          # in 1/256 units: 1 is 256
        if len(ks) < 2:
            return alphas[ks[0]] if ks else np.full_like(alphas[0], 256)
        p = np.ones_like(alphas[0])
        for k in ks:
            p = p * alphas[k]
        return rounded(p, 256 ** (len(ks) - 1), True)

    out = np.zeros_like(alphas[0])
    for corner in range(1 << len(fs)):
        upper = [k for k in dims if corner >> k & 1]
        lower = [k for k in dims if not corner >> k & 1]
        w = np.zeros_like(out)
        for sub in range(1 << len(lower)):
            s = [lower[j] for j in range(len(lower)) if sub >> j & 1]
            w = w + (-1) ** len(s) * product(sorted(upper + s))
        sel = np.logical_and.reduce([fs[k][1] == bool(corner >> k & 1) for k in dims])
        out = np.where(sel, w, out)
    return out


def staged(first: tuple[int, int]) -> Callable[[Factors], np.ndarray]:
    """Two factors' product rounded (the parity rule), then times the third, rounded again (parity of all three)."""
    def rule(fs: Factors) -> np.ndarray:
        third = 3 - sum(first)
        w = parity([fs[k] for k in first])
        lowers = sum((~fs[k][1]).astype(np.int64) for k in range(3))
        return rounded(w * fs[third][0], 256, lowers % 2 == 0)
    return rule


def two_stage_xz_y(fs: Factors) -> np.ndarray:
    """The GPU's rule (run 3): v = round(fx fz), a tie up when x's factor is alpha; then round(v fy), a tie up when
    x's and y's factors are both alpha or both 1 - alpha. In 2D (no z) this is `parity`."""
    (fx, ux), (fy, uy), (fz, _) = fs
    return rounded(rounded(fx * fz, 256, ux) * fy, 256, ux == uy)


GPU_RULE_3D = "two stages (x z) y"
RULES_3D: dict[str, Callable[[Factors], np.ndarray]] = {
    GPU_RULE_3D: two_stage_xz_y, "parity (one rounding)": parity, "inclusion-exclusion": inclusion_exclusion,
    "staged (x y) z": staged((0, 1)), "staged (x z) y": staged((0, 2)), "staged (y z) x": staged((1, 2))}


def fine_factors(n: int = 1 << 14) -> Factors:
    """tex_3d_fine's factors: u = bits 9k..9k+8 of mix32(i) per dimension k."""
    h = mix32(np.arange(n))
    return [single_texel(((h >> np.uint32(9 * k)) & np.uint32(511)).astype(np.int64), 256) for k in range(3)]


def rules_followed(tex_3d_fine: bytes) -> list[str]:
    """The names of RULES_3D whose weights equal a device's tex_3d_fine results bit for bit."""
    got = np.frombuffer(tex_3d_fine, np.float32)
    fs = fine_factors(len(got))
    return [name for name, rule in RULES_3D.items() if (got == (rule(fs) / 256).astype(np.float32)).all()]
