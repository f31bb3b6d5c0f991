"""Warp operations over the chunk's lanes (ChunkAPI.warp_ready, shfl, vote, redux, match, activemask).

Warps are consecutive groups of 32 lanes of a CTA (`warp`: the chunk-wide warp number of each lane, `laneid`:
the lane's index in its warp); a CTA whose size is not a multiple of 32 has a short last warp, and shfl never reads
across a CTA's end. Results follow the PTX ISA's pseudo-code, per warp, over the active member lanes.

Uses the chunk state described in chunk.py (T, st, forced, ncta, ctasize, cta_local, laneid, warp, warp_first,
nwarps).
"""
from __future__ import annotations

import numpy as np

from ..chunk_api import BAR, EXIT, RUN, WAIT

_FULL = 0xFFFFFFFF
_MASKS_KEPT = 64             # constant member masks whose lanes a chunk keeps
assert RUN % 2 == 0 and WAIT % 2 == 0 and BAR % 2 == 1 and EXIT % 2 == 1     # warp_ready tests the state's parity


class Collectives:
    def warp_ready(self, m, mask, nxt):
        """Keep the lanes of m whose warp's other live member lanes are here too; park the others (WAIT)."""
        st = self.st
        # Member lanes still to come: running elsewhere (RUN), or parked at another warp operation (WAIT) unless
        # every lane was just woken because nothing else could run (then the op goes ahead with those present).
        # Exited lanes (and lanes at a barrier) are never waited for. RUN and WAIT are the even states.
        if self.forced:
            missing = ~m & (st == RUN)
        else:
            missing = ~m & ((st & 1) == 0)
        lanes = self._member_lanes(mask)
        if lanes is not None:
            missing &= lanes
        if not missing.any():
            self.forced = False
            return m
        badw = np.zeros(self.nwarps, bool)
        badw[self.warp[missing]] = True
        park = m & badw[self.warp]
        st[park] = WAIT
        m = m & ~park
        return m if m.any() else None

    def _member_lanes(self, mask):
        """The lanes whose bit is set in a warp operation's member mask, as a read-only bool array; None for every
        lane (no mask, or all 32 bits set). A constant mask's lanes are kept for the chunk's life (its lane
        geometry never changes): a warp operation in a loop asks for the same mask at every step."""
        if mask is None:
            return None
        if np.ndim(mask) == 0:
            bits = int(mask) & _FULL
            if bits == _FULL:
                return None
            cache = self.__dict__.setdefault("_mask_lanes", {})
            lanes = cache.get(bits)
            if lanes is None:
                table = ((np.uint32(bits) >> np.arange(32, dtype=np.uint32)) & np.uint32(1)).astype(bool)
                lanes = table[self.laneid]
                lanes.flags.writeable = False
                if len(cache) < _MASKS_KEPT:
                    cache[bits] = lanes
            return lanes
        # bits 0..31 of any integer type (laneid < 32): what a 64-bit shift and test of the same mask gives
        mk = np.broadcast_to(np.asarray(mask), (self.T,)).astype(np.uint32)
        return ((mk >> self.laneid) & np.uint32(1)) != 0

    def shfl(self, mode, a, b, c, m):
        T = self.T
        if np.ndim(b) == 0 and np.ndim(c) == 0:
            # the same b and c in every lane (immediates, mostly): source lane and predicate depend on laneid only
            j32, p32 = _shfl_lanes(mode, np.arange(32, dtype=np.int64), np.int64(int(b)), np.int64(int(c)))
            j, p = j32[self.laneid], p32[self.laneid]
        else:
            b = np.broadcast_to(np.asarray(b).astype(np.int64), (T,))
            c = np.broadcast_to(np.asarray(c).astype(np.int64), (T,))
            j, p = _shfl_lanes(mode, self.laneid.astype(np.int64), b, c)
        src = self.warp_first + j
        # The ISA leaves a value read from a lane that does not execute the shfl (inactive, predicated off, exited,
        # outside the member mask, or past the CTA's end) unpredictable; NVIDIA's GPUs read 0 there, and shipped
        # code (a ballot-masked shfl_down reduction) adds that 0 on purpose. (CTAs of whole warps have no lane
        # past their end.)
        ok = None if self.ctasize % 32 == 0 else src < (self.cta_local + 1) * self.ctasize
        if m is not None:
            act = np.broadcast_to(m, (T,)) if m.dtype == bool else self._mask_from_sel(m)
            ok = act[src] if ok is None else ok & act[np.where(ok, src, 0)]
        a = np.broadcast_to(np.asarray(a), (T,))
        if ok is None:
            return a.take(src), p
        src = np.where(ok, src, 0)
        v = a.take(src)
        return np.where(ok, v, v.dtype.type(0)), p

    def _warp_sum(self, vals, act):
        return np.bincount(self.warp, weights=np.where(act, vals, 0).astype(np.float64), minlength=self.nwarps)

    def _active(self, mask, m):
        lanes = self._member_lanes(mask)
        if m is None:
            if lanes is not None:
                return lanes
            cache = self.__dict__.setdefault("_mask_lanes", {})
            act = cache.get(None)
            if act is None:
                act = cache[None] = np.ones(self.T, bool)
                act.flags.writeable = False
            return act
        act = m if m.dtype == bool else self._mask_from_sel(m)
        return act if lanes is None else act & lanes

    def _mask_from_sel(self, m):
        out = np.zeros(self.T, bool)
        out[m] = True
        return out

    def vote(self, mode, p, mask, m):
        act = self._active(mask, m)
        p = np.broadcast_to(np.asarray(p, bool), (self.T,))
        if self.ctasize % 32 == 0:
            return _vote_full_warps(mode, act, p)
        if mode == "ballot":
            bits = np.left_shift(np.uint64(1), self.laneid.astype(np.uint64)).astype(np.float64)
            s = self._warp_sum(bits, act & p)
            return s.astype(np.uint64).astype(np.uint32)[self.warp]
        n_act = np.bincount(self.warp, weights=act.astype(np.float64), minlength=self.nwarps)
        n_true = np.bincount(self.warp, weights=(act & p).astype(np.float64), minlength=self.nwarps)
        if mode == "any":
            r = n_true > 0
        elif mode == "all":
            r = n_true == n_act
        else:
            r = (n_true == 0) | (n_true == n_act)
        return r[self.warp]

    def redux(self, op, t, a, mask, m):
        act = self._active(mask, m)
        a = np.broadcast_to(np.asarray(a), (self.T,))
        idx = np.flatnonzero(act)
        out = np.zeros(self.T, a.dtype)
        if idx.size == 0:
            return out
        w = self.warp[idx]
        starts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
        vals = a[idx]
        if op == "add":
            r = np.add.reduceat(vals.astype(np.int64), starts).astype(a.dtype)
        else:
            uf = {"min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
                  "xor": np.bitwise_xor}[op]
            r = uf.reduceat(vals, starts)
        full = np.zeros(self.nwarps, a.dtype)
        full[w[starts]] = r
        return full[self.warp]

    def match(self, mode, a, mask, m):
        """match.any: the mask of active member lanes of the warp holding the same value; match.all: membermask
        when all active members agree (and the predicate), else 0."""
        act = self._active(mask, m)
        a = np.broadcast_to(np.asarray(a), (self.T,))
        idx = np.flatnonzero(act)
        d = np.zeros(self.T, np.uint32)
        p = np.zeros(self.T, bool)
        if idx.size == 0:
            return d, p
        w = self.warp[idx]
        vals = a[idx].astype(np.uint64, copy=False) if a.dtype.itemsize == 8 else a[idx].astype(np.uint64)
        bits = np.left_shift(np.uint64(1), self.laneid[idx].astype(np.uint64)).astype(np.float64)
        if mode == "any":
            _, key = np.unique(np.stack([w.astype(np.uint64), vals]), axis=1, return_inverse=True)
            key = key.reshape(-1)
            sums = np.bincount(key, weights=bits)
            d[idx] = sums[key].astype(np.uint64).astype(np.uint32)
            return d, p
        vmin = np.full(self.nwarps, np.iinfo(np.uint64).max, np.uint64)
        vmax = np.zeros(self.nwarps, np.uint64)
        np.minimum.at(vmin, w, vals)
        np.maximum.at(vmax, w, vals)
        same = (vmin == vmax)[w]
        # PTX ISA: d = membermask when every non-exited member thread holds the same value
        mk = np.broadcast_to(np.asarray(mask if mask is not None else 0xFFFFFFFF).astype(np.uint32), (self.T,))
        d[idx] = np.where(same, mk[idx], 0)
        p[idx] = same
        return d, p

    def activemask(self, m):
        act = np.ones(self.T, bool) if m is None else m
        return self.vote("ballot", act, None, None)


def _shfl_lanes(mode: str, lane, b, c):
    """(source lane, in-range predicate) of shfl.sync for lane numbers `lane` (the ISA's pseudo-code: bval =
    b[4:0], clamp = c[4:0], segmask = c[12:8]); an out-of-range source is the lane itself."""
    b = b & 31
    clamp = c & 31
    seg = (c >> 8) & 31
    maxl = (lane & seg) | (clamp & ~seg)
    minl = lane & seg
    if mode == "up":
        j = lane - b
        p = j >= maxl
    elif mode == "down":
        j = lane + b
        p = j <= maxl
    elif mode == "bfly":
        j = lane ^ b
        p = j <= maxl
    else:
        j = minl | (b & ~seg)
        p = j <= maxl
    return np.where(p, j, lane), p


def _vote_full_warps(mode: str, act: np.ndarray, p: np.ndarray) -> np.ndarray:
    """vote over a chunk of whole warps (CTAs of a multiple of 32 threads: warp w is lanes 32w .. 32w + 31, laneid
    the lane's place in it), by reshaping instead of per-warp sums: the ballot's bits packed in lane order."""
    on = (act & p).reshape(-1, 32)
    if mode == "ballot":
        bits = np.packbits(on, axis=1, bitorder="little").view("<u4").ravel()
        return np.repeat(bits, 32)
    if mode == "any":
        r = on.any(axis=1)
    elif mode == "all":
        r = (on == act.reshape(-1, 32)).all(axis=1)
    else:
        r = ~on.any(axis=1) | (on == act.reshape(-1, 32)).all(axis=1)
    return np.repeat(r, 32)
