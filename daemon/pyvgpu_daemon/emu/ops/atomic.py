"""Atomic read-modify-write semantics (atom, red): applied to a NumPy view of memory in serial thread order.

    apply_atomic(view, idx, op, b, c, live) -> old values (or None when nobody reads them)

`view` is the memory as an array of the operation's type, `idx` the element index each accessing lane touches (in
lane order), `b` (and `c` for cas) the operands per lane. The result equals applying the lanes' operations one
after the other in lane order, which is one legal outcome of a GPU's unordered atomics; the paths below only make
that fast: unordered ufunc.at when no result is read, prefix sums for integer add, for a few heavily contended
addresses one pass per address (an accumulate for float add, min, max, and, or, xor; a step per successful swap
for cas), otherwise rounds in which every lane of a round touches a distinct address.

The translator checks operations and types against ATOMIC_OPS / ATOMIC_TYPES; the runtime resolves addresses and
calls apply_atomic per memory buffer.
"""
from __future__ import annotations

import threading

import numpy as np

from ...errors import CudaError
from . import half

ATOMIC_OPS = frozenset({"add", "min", "max", "and", "or", "xor", "exch", "cas", "inc", "dec"})
# Memory-ordering, scope and half-precision modifiers: accepted and ignored (the emulator runs one chunk at a
# time; .noftz is what half-precision adds do anyway).
ATOMIC_SEMANTICS = frozenset({"relaxed", "acquire", "release", "acq_rel", "cta", "gpu", "sys", "cluster", "noftz"})
# The PTX types each operation supports on the emulated device: every 32- and 64-bit integer type (bit-size
# operations take any integer type of their width), f32/f64 add and the half-precision adds of sm_70+.
_INT = frozenset({"b32", "b64", "u32", "u64", "s32", "s64"})
HALF_ADD = frozenset({"f16", "bf16", "f16x2", "bf16x2"})
ATOMIC_TYPES: dict[str, frozenset[str]] = {
    "add": frozenset({"u32", "s32", "u64", "s64", "f32", "f64"}) | HALF_ADD,
    "min": _INT - {"b32", "b64"}, "max": _INT - {"b32", "b64"},
    "and": _INT, "or": _INT, "xor": _INT, "exch": _INT | {"f32", "f64", "b16"}, "cas": _INT | {"b16"},
    "inc": frozenset({"u32"}), "dec": frozenset({"u32"}),
}


def op_name(op: str, t: str) -> str:
    """The operation apply_atomic is given: half-precision adds name their format ('add.bf16'), since their
    memory views hold raw bits (bf16, f16x2, bf16x2)."""
    return f"{op}.{t}" if op == "add" and t in HALF_ADD else op

_UNORDERED = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
              "xor": np.bitwise_xor}


def apply_atomic(v: np.ndarray, idx: np.ndarray, op: str, b: np.ndarray, c, live: bool):
    """Apply atomics in lane order; return old values (if live)."""
    n = idx.size
    if n == 0:
        return np.empty(0, v.dtype)
    if n == 1:                           # one lane (a warp's leader, say): nothing to order
        old = v.take(idx)
        v[idx] = combine(op, old, b, c, v.dtype)
        return old if live else None
    if not live and (op in _UNORDERED or op == "exch"):
        _apply_unordered(v, idx, op, b)
        return None
    dt = v.dtype
    if _distinct(idx, v.size):           # no two lanes at one address: any order gives the same
        old = v.take(idx)
        v[idx] = combine(op, old, b, c, dt)
        return old
    g = _Groups(idx)
    if g.maxrank == 0:
        old = v.take(idx)
        v[idx] = combine(op, old, b, c, dt)
        return old
    if op == "add" and dt.kind in "iu":
        return _int_add(v, b, g)
    if op == "exch":
        old = _exch(v, b, g)
        return old if live else None
    if g.naddr <= g.maxrank:             # few, heavily contended addresses: one pass per address
        if op == "add" and dt.kind == "f":
            return _float_add_per_address(v, b, g)
        if op in _ACCUMULATE:
            return _accumulate_per_address(v, b, g, _ACCUMULATE[op])
        if op == "cas":
            return _cas_per_address(v, b, c, g)
    return _rounds(v, idx, op, b, c, g)


def combine(op: str, old, b, c, dt):
    """The new value of one read-modify-write: op applied to the old value and the operands."""
    with np.errstate(all="ignore"):
        if op == "add":
            return (old + b).astype(dt)
        if op == "min":
            return np.minimum(old, b)
        if op == "max":
            return np.maximum(old, b)
        if op == "and":
            return old & b
        if op == "or":
            return old | b
        if op == "xor":
            return old ^ b
        if op == "exch":
            return b.astype(dt)
        if op == "cas":
            return np.where(old == b, c, old).astype(dt)
        if op == "inc":
            return np.where(old >= b, dt.type(0), old + dt.type(1)).astype(dt)
        if op == "dec":
            return np.where((old == 0) | (old > b), b, old - dt.type(1)).astype(dt)
        if op.startswith("add."):
            return _half_add(op[4:], old, b).astype(dt)
    raise CudaError("cudaErrorInvalidPtx", f"atomic {op}")


def _half_add(t: str, old, b):
    """old + b in a half-precision format (per 16-bit half for the x2 types), rounded to nearest even once."""
    fmt = half.base_fmt(t)
    parts = [half.encode(half.decode(x, fmt) + half.decode(y, fmt), fmt)
             for x, y in zip(half.lanes(t, old), half.lanes(t, b))]
    return half.unlanes(t, parts)


def _apply_unordered(v, idx, op, b) -> None:
    if op == "exch":
        v[idx] = b          # last lane in order wins, as in serial order
    else:
        _UNORDERED[op].at(v, idx, b)


_STAMP_SPAN = 64          # _distinct stamps lanes into a scratch array of at most this many elements per lane


def _distinct(idx: np.ndarray, size: int) -> bool:
    """Whether every lane touches another element, decided without sorting where the elements lie within a span
    of at most _STAMP_SPAN per lane (shared memory, a CTA's counters): each lane writes its number at its element
    of a scratch array; a lane whose element holds a later lane's number shares it. False when not decided."""
    n = idx.size
    if size > _STAMP_SPAN * n:
        lo = int(idx.min())
        span = int(idx.max()) - lo + 1
        if span > _STAMP_SPAN * n:
            return False
        idx = idx - lo
    else:
        span = size
    if n >= 1 << 31:
        return False
    stamp = _scratch(span)
    lanes = np.arange(n, dtype=np.int32)
    stamp[idx] = lanes
    return bool((stamp[idx] == lanes).all())


_SCRATCH_KEPT = 4 << 20      # elements of _distinct's scratch array a thread keeps between calls (16 MB)
_scratch_of = threading.local()


def _scratch(n: int) -> np.ndarray:
    """An int32 array of n elements, whatever their values: the thread's kept one when it is large enough (a fresh
    array's pages fault in at the first write: for shared memory's counters that was most of the stamping)."""
    kept = getattr(_scratch_of, "a", None)
    if kept is not None and kept.size >= n:
        return kept[:n]
    a = np.empty(n, np.int32)
    if n <= _SCRATCH_KEPT:
        _scratch_of.a = a
    return a


class _Groups:
    """The lanes sorted by address (stable, so lane order within an address): `rank` = how many earlier lanes
    touch the same address."""

    def __init__(self, idx: np.ndarray) -> None:
        n = idx.size
        self.n = n
        self.order = np.argsort(idx, kind="stable")
        self.sidx = idx[self.order]
        self.first = np.r_[True, self.sidx[1:] != self.sidx[:-1]]
        self.last = np.r_[self.sidx[1:] != self.sidx[:-1], True]
        self.gstart = np.maximum.accumulate(np.where(self.first, np.arange(n), 0))
        self.rank = np.arange(n) - self.gstart
        self.maxrank = int(self.rank.max())
        self.naddr = int(np.count_nonzero(self.first))

    def unsort(self, old_sorted: np.ndarray, dt: np.dtype) -> np.ndarray:
        old = np.empty(self.n, dt)
        old[self.order] = old_sorted
        return old


def _int_add(v, b, g: _Groups):
    """Integer add: each lane's old value is the initial value plus an exclusive prefix sum within its address."""
    dt = v.dtype
    sb = b[g.order].astype(dt)
    cs = np.cumsum(sb, dtype=dt)
    excl = cs - sb
    init = v.take(g.sidx)
    old_sorted = (init + (excl - excl[g.gstart])).astype(dt)
    v[g.sidx[g.last]] = (old_sorted[g.last] + sb[g.last]).astype(dt)
    return g.unsort(old_sorted, v.dtype)


def _exch(v, b, g: _Groups):
    """Exchange: each lane sees the value the previous lane at its address wrote."""
    sb = b[g.order]
    init = v.take(g.sidx)
    old_sorted = np.where(g.first, init, np.r_[sb[:1], sb[:-1]])
    v[g.sidx[g.last]] = sb[g.last]
    return g.unsort(old_sorted, v.dtype)


def _float_add_per_address(v, b, g: _Groups):
    """Few, heavily contended addresses: one sequential accumulate per address (serial rounding, in thread
    order), exactly what applying the adds one by one gives."""
    dt = v.dtype
    starts = np.flatnonzero(g.first)
    ends = np.r_[starts[1:], g.n]
    sb = b[g.order].astype(dt)
    old_sorted = np.empty(g.n, dt)
    for s0, e0 in zip(starts.tolist(), ends.tolist()):
        a = int(g.sidx[s0])
        seq = np.empty(e0 - s0 + 1, dt)
        seq[0] = v[a]
        seq[1:] = sb[s0:e0]
        acc = np.add.accumulate(seq, dtype=dt)
        old_sorted[s0:e0] = acc[:-1]
        v[a] = acc[-1]
    return g.unsort(old_sorted, v.dtype)


_ACCUMULATE = {"min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
               "xor": np.bitwise_xor}


def _segments(g: _Groups):
    """(address, start, end) of each address's run of lanes in address-sorted order."""
    starts = np.flatnonzero(g.first)
    ends = np.r_[starts[1:], g.n]
    return zip(g.sidx[starts].tolist(), starts.tolist(), ends.tolist())


def _accumulate_per_address(v, b, g: _Groups, uf):
    """min / max / and / or / xor: the running result of the lanes in order is exactly what serial application
    leaves after each lane."""
    dt = v.dtype
    sb = b[g.order].astype(dt)
    old_sorted = np.empty(g.n, dt)
    for a, s0, e0 in _segments(g):
        seq = np.empty(e0 - s0 + 1, dt)
        seq[0] = v[a]
        seq[1:] = sb[s0:e0]
        acc = uf.accumulate(seq, dtype=dt)
        old_sorted[s0:e0] = acc[:-1]
        v[a] = acc[-1]
    return g.unsort(old_sorted, dt)


def _cas_per_address(v, b, c, g: _Groups):
    """Compare-and-swap in lane order, one vector step per successful swap: from the current value, the next lane
    whose compare operand equals it swaps; the lanes before it fail (and see the current value). A CAS loop
    retried by every lane of a launch succeeds once per address and step, so this is linear, not quadratic."""
    dt = v.dtype
    sb = b[g.order].astype(dt)
    sc = c[g.order].astype(dt)
    old_sorted = np.empty(g.n, dt)
    for a, s0, e0 in _segments(g):
        cur = v[a]
        pos = s0
        while pos < e0:
            hit = np.flatnonzero(sb[pos:e0] == cur)
            stop = e0 if hit.size == 0 else pos + int(hit[0])
            old_sorted[pos:stop] = cur
            if stop == e0:
                break
            old_sorted[stop] = cur
            cur = sc[stop]
            pos = stop + 1
        v[a] = cur
    return g.unsort(old_sorted, dt)


def _rounds(v, idx, op, b, c, g: _Groups):
    """Any operation: round r applies the lanes of rank r, which touch distinct addresses."""
    dt = v.dtype
    byrank = np.argsort(g.rank, kind="stable")
    counts = np.bincount(g.rank)
    old = np.empty(g.n, dt)
    pos = 0
    for r in range(g.maxrank + 1):
        cnt = int(counts[r])
        lanes = g.order[byrank[pos:pos + cnt]]
        pos += cnt
        ii = idx[lanes]
        o = v.take(ii)
        old[lanes] = o
        v[ii] = combine(op, o, b[lanes], None if c is None else c[lanes], dt)
    return old
