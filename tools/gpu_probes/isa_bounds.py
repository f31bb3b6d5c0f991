"""What the results of tools/gpu_probes/diff_kernels.cu must be, slot by slot: bit for bit between the emulated GPU
and a real one, or, where NVIDIA documents only an error bound (the PTX ISA's .approx instructions, the CUDA C
Programming Guide's libm ulp table), within that bound of a float64 reference, with the inputs the ISA's tables
name (NaN, infinities, zeros; subnormals under .ftz) bit for bit and every f32 NaN the canonical 0x7FFFFFFF.

    check_group(name, emu, gpu, inputs) -> GroupCheck     (gpu_diff_kernels.py; tests/emu/test_emu_diff_kernels.py
                                                          calls it with gpu = emu: the emulator within the bounds)

The bounds (PTX ISA 9.0, "Floating Point Instructions"; CUDA C Programming Guide, "Mathematical Functions"):
sin/cos.approx.f32 2**-20.5 absolute in [-2pi, 2pi], 2**-14.7 in [-100pi, 100pi], none beyond; ex2.approx 2 ulp;
lg2.approx 2**-22 absolute in (0.5, 2), else 2**-22 relative; rcp.approx.f32 1 ulp; rsqrt.approx.f32 2**-22.9
relative; sqrt.approx.f32 2**-23 relative; tanh.approx 2**-11 relative; div.approx.f32 2 ulp for |b| in
[2**-126, 2**126] and a sign-preserving zero (NaN for an infinite a) for 2**126 < |b| < 2**128; div.full.f32 2 ulp;
rcp/rsqrt.approx.ftz.f64 (the operand's upper word) a zero lower word, no stated bound; rsqrt.approx.f64 no stated
bound. libm (f32): sinf 2 ulp, expf 2, logf 1, powf 4, tanhf 2, erff 2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

F32, F64 = np.float32, np.float64
CANON32 = 0x7FFFFFFF
TWO_PI = 2 * math.pi
_TINY32 = 2.0 ** -126
_LOG2E = float(np.uint32(0x3FB8AA3B).view(F32))     # the constants nvcc puts into __expf and __logf
_LN2 = float(np.uint32(0x3F317218).view(F32))


# ---------------------------------------------------------------------------------------------- measures
def ordinal(x: np.ndarray) -> np.ndarray:
    """f32 values as integers in their order (adjacent floats differ by 1; -0 and +0 are both 0)."""
    u = np.asarray(x, F32).view(np.uint32).astype(np.int64)
    return np.where(u >= 1 << 31, (1 << 31) - u, u)


def ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Distance in f32 steps from got to the correctly rounded reference."""
    with np.errstate(all="ignore"):
        return np.abs(ordinal(got) - ordinal(np.asarray(ref, F64).astype(F32)))


def ulp_bound(n: float):
    def ok(got, ref, x):
        return ulps(got, ref) <= n
    return ok


def abs_bound(limit: Callable[[np.ndarray], np.ndarray]):
    def ok(got, ref, x):
        with np.errstate(all="ignore"):
            return np.abs(got.astype(F64) - ref) <= limit(x)
    return ok


def rel_bound(e: float):
    def ok(got, ref, x):
        with np.errstate(all="ignore"):
            return np.abs(got.astype(F64) - ref) <= e * np.abs(ref)
    return ok


def _sincos_limit(x):
    ax = np.abs(x[0].astype(F64))
    return np.where(ax <= TWO_PI, 2.0 ** -20.5, np.where(ax <= 100 * math.pi, 2.0 ** -14.7, np.inf))


def _lg2_ok(scale: float = 1.0):
    """lg2.approx (times a constant rounded once, as __logf's mul): 2**-22 absolute in (0.5, 2), else relative."""
    def ok(got, ref, x):
        a = x[0].astype(F64)
        inner = np.where((a > 0.5) & (a < 2), 2.0 ** -22, 2.0 ** -22 * np.abs(ref / scale))
        with np.errstate(all="ignore"):
            rounding = 0.5 * np.spacing(np.abs(got)).astype(F64)
            return np.abs(got.astype(F64) - ref) <= scale * inner + rounding
    return ok


# ---------------------------------------------------------------------------------------------- slots
def _ftz(x):
    return np.where(np.abs(x) < _TINY32, np.zeros_like(x) * np.sign(x), x)


@dataclass(frozen=True)
class Slot:
    """One result of a group's kernel: bit for bit (no ref, not loose), or ref(x) (float64, NaN where the result
    is NaN) and ok(got, ref, x) say what is within the bound, bounded(x) where the ISA states one; loose: the ISA
    states none (only the special inputs are compared); ftz: subnormal inputs are special and subnormal results
    may be zero; low_zero: an f64 result whose lower word must be zero."""
    name: str
    args: int = 1
    ref: Callable | None = None
    ok: Callable | None = None
    bounded: Callable | None = None
    ftz: bool = False
    loose: bool = False
    low_zero: bool = False


def _approx(name, args, ref, ok, bounded=None, ftz=False):
    return Slot(name, args, ref, ok, bounded, ftz)


def _div_range(x):
    b = np.abs(x[1].astype(F64))
    return (b >= _TINY32) & (b <= 2.0 ** 126)


def _libm(name, args, ref, n):
    return _approx(name, args, ref, ulp_bound(n))


def _erf(x):
    return np.vectorize(math.erf, otypes=[F64])(x)


# What each group's kernel computes, in diff_kernels.cu's order (a group absent here is compared bit for bit).
GROUPS: dict[str, list[Slot]] = {
    "f32_approx": [
        _approx("sin.approx", 1, lambda x: np.sin(x[0].astype(F64)), abs_bound(_sincos_limit)),
        _approx("cos.approx", 1, lambda x: np.cos(x[0].astype(F64)), abs_bound(_sincos_limit)),
        _approx("ex2.approx(x*log2e)", 1, lambda x: np.exp2((x[0] * F32(_LOG2E)).astype(F64)), ulp_bound(2)),
        _approx("lg2.approx(x)*ln2", 1, lambda x: _LN2 * np.log2(x[0].astype(F64)), _lg2_ok(_LN2)),
        _approx("rsqrt.approx", 1, lambda x: 1 / np.sqrt(x[0].astype(F64)), rel_bound(2.0 ** -22.9)),
        _approx("div.approx", 2, lambda x: x[0].astype(F64) / x[1].astype(F64), ulp_bound(2), _div_range),
    ],
    "f32_libm": [
        _libm("sinf", 1, lambda x: np.sin(x[0].astype(F64)), 2),
        _libm("expf", 1, lambda x: np.exp(x[0].astype(F64)), 2),
        _libm("logf", 1, lambda x: np.log(x[0].astype(F64)), 1),
        _libm("powf", 2, lambda x: np.power(x[0].astype(F64), x[1].astype(F64)), 4),
        _libm("tanhf", 1, lambda x: np.tanh(x[0].astype(F64)), 2),
        _libm("erff", 1, lambda x: _erf(x[0].astype(F64)), 2),
    ],
    "f32_approx_ftz": [
        _approx("ex2.approx.ftz", 1, lambda x: np.exp2(_ftz(x[0]).astype(F64)), ulp_bound(2), ftz=True),
        _approx("lg2.approx.ftz", 1, lambda x: np.log2(x[0].astype(F64)), _lg2_ok(), ftz=True),
        _approx("sin.approx.ftz", 1, lambda x: np.sin(x[0].astype(F64)), abs_bound(_sincos_limit), ftz=True),
        _approx("rcp.approx.ftz", 1, lambda x: 1 / x[0].astype(F64), ulp_bound(1), ftz=True),
        _approx("rcp.approx", 1, lambda x: 1 / x[0].astype(F64), ulp_bound(1)),
        _approx("sqrt.approx", 1, lambda x: np.sqrt(x[0].astype(F64)), rel_bound(2.0 ** -23)),
        _approx("sqrt.approx.ftz", 1, lambda x: np.sqrt(x[0].astype(F64)), rel_bound(2.0 ** -23), ftz=True),
        # subnormal inputs pass through (ISA): special, so compared bit for bit
        _approx("tanh.approx", 1, lambda x: np.tanh(x[0].astype(F64)), rel_bound(2.0 ** -11), ftz=True),
        _approx("div.full", 2, lambda x: x[0].astype(F64) / x[1].astype(F64), ulp_bound(2)),
        _approx("div.approx.ftz", 2, lambda x: x[0].astype(F64) / x[1].astype(F64), ulp_bound(2), _div_range,
                ftz=True),
        _approx("rsqrt.approx.ftz", 1, lambda x: 1 / np.sqrt(x[0].astype(F64)), rel_bound(2.0 ** -22.9),
                ftz=True),
    ],
    "f64_approx": [Slot("rcp.approx.ftz.f64", ftz=True, loose=True, low_zero=True),
                   Slot("rsqrt.approx.ftz.f64", ftz=True, loose=True, low_zero=True),
                   Slot("rsqrt.approx.f64", loose=True)],
}
WIDTH = {"f64_arith": 8, "f64_more": 8, "f64_approx": 8}      # result bytes (4 otherwise)


# ---------------------------------------------------------------------------------------------- checking
@dataclass
class SlotCheck:
    name: str
    n: int = 0
    identical: int = 0
    within: int = 0            # not identical, both within the bound
    unbounded: int = 0         # not identical, where the ISA states no bound
    failed: int = 0
    failures: list = field(default_factory=list)    # the first few: (index, why, inputs, emu, gpu, ref)


@dataclass
class GroupCheck:
    name: str
    slots: list[SlotCheck]

    @property
    def identical(self) -> bool:
        return all(s.identical == s.n for s in self.slots)

    @property
    def passed(self) -> bool:
        return not any(s.failed for s in self.slots)

    def first_failure(self) -> str:
        for s in self.slots:
            if s.failed:
                i, why, xs, e, g, r = s.failures[0]
                return (f"{self.name}.{s.name}: {s.failed} of {s.n} fail, first #{i} ({why}): inputs {xs} emu {e} "
                        f"gpu {g}" + (f" ref {r:.9g}" if r is not None else ""))
        return ""


def _hex(v) -> str:
    return f"0x{int(v):0{v.dtype.itemsize * 2}x}"


def _special(x: list[np.ndarray], ftz: bool) -> np.ndarray:
    m = np.zeros(x[0].shape, bool)
    for a in x:
        a64 = a.astype(F64)
        m |= ~np.isfinite(a64) | (a64 == 0)
        if ftz:     # subnormal inputs of the operand's own format (an f64 below f32's range is an ordinary input)
            m |= np.abs(a64) < (_TINY32 if a.dtype == F32 else np.finfo(F64).tiny)
    return m


def _record(sc: SlotCheck, idx, why, x, emu, gpu, ref, keep=20):
    """Count the failing results at idx; keep the first `keep` of the slot as examples."""
    sc.failed += len(idx)
    for i in idx[:max(0, keep - len(sc.failures))].tolist():
        sc.failures.append((i, why, [_hex(a[i:i + 1].view(np.uint32 if a.itemsize == 4 else np.uint64)[0])
                                     for a in x], _hex(emu[i]), _hex(gpu[i]), None if ref is None else float(ref[i])))


def _check_bounded(slot: Slot, sc: SlotCheck, x, emu_u, gpu_u, diff):
    emu = emu_u.view(F32)
    gpu = gpu_u.view(F32)
    with np.errstate(all="ignore"):
        ref = slot.ref(x)
    special = _special(x, slot.ftz)
    bounded = ~special if slot.bounded is None else (~special & slot.bounded(x))
    if slot.name.startswith("div.approx"):   # 2**126 < |b| < 2**128: defined exactly (a zero, or NaN)
        special |= ~_special(x, slot.ftz) & (np.abs(x[1].astype(F64)) > 2.0 ** 126)
        bounded &= ~special
    bad_special = special & diff
    _record(sc, np.flatnonzero(bad_special), "special input: not bit for bit", x, emu_u, gpu_u, ref)
    for who, got, gu in (("emu", emu, emu_u), ("gpu", gpu, gpu_u)):
        nan = np.isnan(ref)
        fine = np.where(nan, gu == CANON32, slot.ok(got, ref, x) & ~np.isnan(got))
        if slot.ftz:                               # a result the bound allows to be subnormal may be flushed
            fine |= (got == 0) & (np.abs(ref) < _TINY32 * (1 + 2.0 ** -20))
        _record(sc, np.flatnonzero(bounded & ~fine), f"{who} outside the ISA's bound", x, emu_u, gpu_u, ref)
    sc.within = int((bounded & diff).sum())
    sc.unbounded = int((~bounded & ~special & diff).sum())


def check_group(name: str, emu: bytes, gpu: bytes, inputs: dict[str, np.ndarray]) -> GroupCheck:
    """Compare one group's results (raw bytes from the two devices); inputs: input_f32_a ... input_f64_c."""
    with np.errstate(all="ignore"):
        return _check_group(name, emu, gpu, inputs)


def _check_group(name: str, emu: bytes, gpu: bytes, inputs: dict[str, np.ndarray]) -> GroupCheck:
    wide = WIDTH.get(name, 4) == 8
    ut = np.uint64 if wide else np.uint32
    e = np.frombuffer(emu, ut)
    g = np.frombuffer(gpu, ut)
    slots = GROUPS.get(name)
    if slots is None:                      # bit for bit, result by result
        sc = SlotCheck("results", max(len(e), len(g)))
        if len(e) != len(g):
            sc.failed, sc.failures = 1, [(0, f"{len(e)} / {len(g)} results", [], "", "", None)]
        else:
            sc.identical = int((e == g).sum())
            _record(sc, np.flatnonzero(e != g), "not bit for bit", [], e, g, None)
        return GroupCheck(name, [sc])
    n_in = len(inputs["input_f32_a"])
    per = len(e) // n_in if len(e) == len(g) else 0
    if per != len(slots):
        return GroupCheck(name, [SlotCheck("layout", failed=1, failures=[
            (0, f"{len(e)} / {len(g)} results, {len(slots)} slots", [], "", "", None)])])
    e, g = e.reshape(n_in, per), g.reshape(n_in, per)
    fmt = "f64" if name.startswith("f64") else "f32"
    checks = []
    for k, slot in enumerate(slots):
        x = [inputs[f"input_{fmt}_{c}"].view(F64 if fmt == "f64" else F32) for c in "abc"[:max(slot.args, 1)]]
        ek, gk = e[:, k].copy(), g[:, k].copy()
        diff = ek != gk
        sc = SlotCheck(slot.name, n_in, int((~diff).sum()))
        if slot.low_zero:
            for who, r in (("emu", ek), ("gpu", gk)):
                _record(sc, np.flatnonzero(r & np.uint64(0xFFFFFFFF)), f"{who}: lower word not zero", x, ek, gk, None)
        if slot.loose:
            special = _special(x, slot.ftz)
            _record(sc, np.flatnonzero(special & diff), "special input: not bit for bit", x, ek, gk, None)
            sc.unbounded = int((~special & diff).sum())
        elif slot.ref is None:
            _record(sc, np.flatnonzero(diff), "not bit for bit", x, ek, gk, None)
        else:
            _check_bounded(slot, sc, x, ek, gk, diff)
        checks.append(sc)
    return GroupCheck(name, checks)
