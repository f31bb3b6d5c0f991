"""The warp operations' and atomics' fast paths (runtime/collective.py: a constant member mask's lanes kept per chunk, a
full mask taken as every lane, shfl's source lanes computed over 32 lanes, warp_ready's state test; ops/atomic.py:
distinct elements found without sorting) against their definitions, and immediate member masks in kernels against
the PTX ISA host model of tests/differential/warp_cases.py, in whole and partial warps, with exited lanes."""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from differential.warp_cases import FORMS, WORDS_OUT, Case, compare, kernel_ptx, make_case, model
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule

NAMES = [n for n in FORMS if n.split(".")[0] in ("shfl", "vote", "redux", "match") and not n.endswith("guarded")]
MASKS = [0xFFFFFFFF, 0x0000FFFF, 0xF0F0F0F1, 0x80000001]


def constant_case(name: str, mask: int, nthreads: int, seed: int) -> Case:
    """A case of the form with `mask` written into the instruction: the lanes in the mask run it (some exit
    first), the others exit, and the mask column holds `mask` so that the model sees the same."""
    form = FORMS[name]
    assert form.ptx.endswith("%r5;")
    const = dataclasses.replace(form, ptx=form.ptx[:-len("%r5;")] + f"{mask:#x};")
    case = make_case(form, seed, nthreads)
    rng = np.random.default_rng(seed + 1000)
    lane = np.arange(nthreads) % 32
    member = ((mask >> lane) & 1).astype(bool)
    inp = case.inp.copy()
    inp[:, 4] = np.where(member & (rng.random(nthreads) < 0.8), 1, 0)      # group 1 runs it, group 0 exits
    inp[:, 3] = mask
    return Case(const, nthreads, inp)


def emulate(case: Case) -> np.ndarray:
    mem = DeviceMemory(1 << 40, 1 << 22)
    mod = EmuModule.load(kernel_ptx(case.form).encode(), mem)
    inp = mem.alloc(case.inp.nbytes)
    out = mem.alloc(case.nthreads * WORDS_OUT * 4)
    mem.write(inp, case.inp.tobytes())
    mem.fill(out, 0, case.nthreads * WORDS_OUT * 4)
    mod.launch("k", (1, 1, 1), (case.nthreads, 1, 1), 0, struct.pack("<QQ", inp, out))
    return np.frombuffer(bytes(mem.read(out, case.nthreads * WORDS_OUT * 4)), np.uint32).reshape(-1, WORDS_OUT)


@pytest.mark.parametrize("name", NAMES)
def test_constant_member_masks_match_the_isa_model(name):
    for k, mask in enumerate(MASKS):
        for nthreads in (64, 48, 20):
            case = constant_case(name, mask, nthreads, seed=7 * k + nthreads)
            if not (case.inp[:, 4] == 1).any():
                continue
            bad = compare(emulate(case), model(case))
            assert not bad, f"{name} mask {mask:#x}, {nthreads} threads: {bad[:4]}"


# ------------------------------------------------------------------ the fast paths against their definitions
from pyvgpu_daemon.emu.chunk_api import BAR, EXIT, RUN, WAIT          # noqa: E402
from pyvgpu_daemon.emu.ops import atomic                               # noqa: E402
from pyvgpu_daemon.emu.runtime.collective import Collectives           # noqa: E402


class Lanes(Collectives):
    """The lane geometry and state warp operations read (runtime/chunk.py), for `ncta` CTAs of `cs` threads."""

    def __init__(self, ncta: int, cs: int, rng) -> None:
        lin = np.arange(ncta * cs)
        self.T, self.ctasize, self.ncta = ncta * cs, cs, ncta
        inc = lin % cs
        self.cta_local = lin // cs
        self.laneid = (inc % 32).astype(np.uint32)
        self.warp = self.cta_local * ((cs + 31) // 32) + inc // 32
        self.nwarps = ncta * ((cs + 31) // 32)
        self.warp_first = lin - self.laneid.astype(np.int64)
        self.st = rng.choice(np.array([RUN, BAR, WAIT, EXIT], np.int8), self.T)
        self.forced = False


def member_by_definition(lanes: Lanes, mask) -> np.ndarray:
    mk = np.broadcast_to(np.asarray(mask), (lanes.T,)).astype(np.uint64)
    return ((mk >> lanes.laneid.astype(np.uint64)) & np.uint64(1)) != 0


def ready_by_definition(lanes: Lanes, m, mask):
    """warp_ready as the ISA's waiting reads: member lanes not here, running or (unless forced) parked elsewhere,
    hold their whole warp back."""
    st = lanes.st.copy()
    member = (st != EXIT) & (True if mask is None else member_by_definition(lanes, mask))
    missing = member & ~m & ((st == RUN) | ((st == WAIT) & (not lanes.forced)))
    if not missing.any():
        return m, st
    badw = np.zeros(lanes.nwarps, bool)
    badw[lanes.warp[missing]] = True
    park = m & badw[lanes.warp]
    st[park] = WAIT
    m = m & ~park
    return (m if m.any() else None), st


@pytest.mark.parametrize("seed", range(20))
def test_warp_ready_and_member_lanes_are_their_definitions(seed):
    rng = np.random.default_rng(seed)
    lanes = Lanes(int(rng.integers(1, 4)), int(rng.choice([32, 64, 48, 20, 96])), rng)
    masks = [None, 0xFFFFFFFF, -1, np.uint32(0x0F0F0F0F), int(rng.integers(0, 1 << 32)), np.int64(-2),
             rng.integers(0, 1 << 32, lanes.T).astype(np.uint32), rng.integers(-(1 << 40), 1 << 40, lanes.T)]
    for mask in masks:
        got = lanes._member_lanes(mask)
        want = np.ones(lanes.T, bool) if mask is None else member_by_definition(lanes, mask)
        np.testing.assert_array_equal(np.ones(lanes.T, bool) if got is None else got, want)
        for forced in (False, True):
            lanes.forced = forced
            lanes.st = rng.choice(np.array([RUN, BAR, WAIT, EXIT], np.int8), lanes.T)
            m = (lanes.st == RUN) & (rng.random(lanes.T) < rng.random())
            want_m, want_st = ready_by_definition(lanes, m, mask)
            got_m = lanes.warp_ready(m.copy(), mask, 0)
            np.testing.assert_array_equal(lanes.st, want_st)
            assert (got_m is None) == (want_m is None)
            if want_m is not None:
                np.testing.assert_array_equal(got_m, want_m)


def shfl_by_definition(lanes: Lanes, mode, a, b, c, m):
    """shfl.sync per the ISA's pseudo-code over all lanes; 0 from a lane not executing it or past the CTA."""
    T = lanes.T
    lane = lanes.laneid.astype(np.int64)
    b = np.broadcast_to(np.asarray(b).astype(np.int64) & 31, (T,))
    c = np.broadcast_to(np.asarray(c).astype(np.int64), (T,))
    clamp, seg = c & 31, (c >> 8) & 31
    maxl, minl = (lane & seg) | (clamp & ~seg), lane & seg
    j = {"up": lane - b, "down": lane + b, "bfly": lane ^ b, "idx": minl | (b & ~seg)}[mode]
    p = j >= maxl if mode == "up" else j <= maxl
    src = lanes.warp_first + np.where(p, j, lane)
    ok = src < (lanes.cta_local + 1) * lanes.ctasize
    if m is not None:
        ok &= m[np.where(ok, src, 0)]
    v = np.broadcast_to(np.asarray(a), (T,)).take(np.where(ok, src, 0))
    return np.where(ok, v, v.dtype.type(0)), p


@pytest.mark.parametrize("seed", range(20))
def test_shfl_is_its_definition(seed):
    rng = np.random.default_rng(seed)
    lanes = Lanes(int(rng.integers(1, 4)), int(rng.choice([32, 64, 48, 20, 96])), rng)
    a = rng.integers(0, 1 << 32, lanes.T).astype(np.uint32)
    for mode in ("up", "down", "bfly", "idx"):
        for b, c in ((3, 31), (np.uint32(17), 0x181F), (int(rng.integers(0, 64)), int(rng.integers(0, 1 << 13))),
                     (rng.integers(0, 64, lanes.T).astype(np.uint32), 0x1C1F),
                     (5, rng.integers(0, 1 << 13, lanes.T).astype(np.uint32))):
            for m in (None, rng.random(lanes.T) < 0.6):
                got = lanes.shfl(mode, a, b, c, m)
                want = shfl_by_definition(lanes, mode, a, b, c, m)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("seed", range(12))
def test_atomics_on_distinct_or_shared_elements_are_serial_order(seed):
    """apply_atomic (whichever path: distinct elements found by stamping, sorted groups) equals the lanes'
    operations applied one by one in lane order."""
    rng = np.random.default_rng(seed)
    size = int(rng.choice([64, 5000, 1 << 20]))
    n = int(rng.integers(2, 1500))
    for distinct in (True, False):
        if distinct and n > size:
            continue
        idx = rng.permutation(size)[:n] if distinct else rng.integers(0, max(1, size // int(rng.integers(1, 50))), n)
        idx = idx.astype(np.int64)
        for op in ("add", "min", "max", "exch", "cas", "inc", "or"):
            v0 = rng.integers(0, 1 << 32, size).astype(np.uint32)
            b = rng.integers(0, 1 << 32, n).astype(np.uint32) if op != "inc" else np.full(n, 1000, np.uint32)
            c = rng.integers(0, 1 << 32, n).astype(np.uint32) if op == "cas" else None
            if op == "cas":
                b[::3] = v0[idx[::3]]
            v = v0.copy()
            old = atomic.apply_atomic(v, idx, op, b, c, True)
            ref = v0.copy()
            ref_old = np.empty(n, np.uint32)
            for i in range(n):
                ref_old[i] = ref[idx[i]]
                ref[idx[i]] = atomic.combine(op, ref[idx[i]:idx[i] + 1], b[i:i + 1],
                                             None if c is None else c[i:i + 1], ref.dtype)[0]
            np.testing.assert_array_equal(old, ref_old)
            np.testing.assert_array_equal(v, ref)
            assert atomic._distinct(idx, size) == (np.unique(idx).size == n) or size > 64 * n
