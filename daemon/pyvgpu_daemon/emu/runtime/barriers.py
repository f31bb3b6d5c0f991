"""CTA barriers over the chunk's lanes (ChunkAPI.cta_reduce, bar_all, bar_wait; the scheduler's release step).

PTX ISA (bar, barrier): each CTA has sixteen barriers, 0..15. `bar.sync a` / `barrier.sync a` without a thread
count waits for every thread of the CTA, an exited thread counting as arrived; with a count `b` (a multiple of
the warp size) the barrier completes once b threads have arrived. A barrier instruction first waits for the other
non-exited threads of the executing thread's warp, then marks the *warp* arrived, so arrivals are counted in whole
warps (32 threads each, the last short warp of a CTA too). `bar.arrive a, b` marks the arrival without waiting for
the other warps; `bar.red` is `bar.sync` that also reduces a predicate over the threads it releases. A completed
barrier starts over: arrivals beyond the count belong to its next phase.

Two implementations of the same rules:
- kernels whose barriers are all `bar.sync 0` / `barrier.sync 0` / `bar.red ... 0` without counts (nearly every
  program: `__syncthreads()` and its variants) take the plain path: a CTA is released when all its live lanes
  are parked, whatever their warps;
- kernels with another barrier id, a thread count or bar.arrive (Kernel.named_barriers: named barriers, warp
  specialization) track per lane the barrier it waits at (`barid`; 16 + id for bar.arrive) and its count
  (`barcnt`, 0: all threads), and per CTA and barrier the threads that arrived through bar.arrive (`_pend`).
  Completion is checked when lanes arrive (so a producer's bar.arrive releases waiting consumers while other
  lanes still run) and when nothing else can run.

Uses the chunk state described in chunk.py (T, st, ncta, ctasize, warp, nwarps, barpred, barsite) and the
kernel's bar.red kinds (Kernel.bar_kinds).
"""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..chunk_api import BAR, EXIT, RUN, WAIT

NBARRIERS = 16
ARRIVE = NBARRIERS              # barid of a lane parked at bar.arrive: ARRIVE + the barrier's id


class CtaBarriers:
    def _init_barriers(self, alloc) -> None:
        """alloc(n, dtype): n zeroed elements of the chunk's state (reset together between launches)."""
        self.barid = alloc(self.T, np.int8)
        self.barcnt = alloc(self.T, np.int32)
        self._wpc = (self.ctasize + 31) // 32                     # warps per CTA
        self._pend = alloc(self.ncta * NBARRIERS, np.int64)       # threads arrived through bar.arrive, per phase
        self._handlers = ()

    # ------------------------------------------------------------------ converged barriers (every lane here)
    def cta_reduce(self, p, kind, _unused):
        r = np.asarray(p).reshape(self.ncta, self.ctasize)
        if kind == "popc":
            v = r.sum(1, dtype=np.uint32)
        elif kind == "and":
            v = r.all(1)
        else:
            v = r.any(1)
        return np.repeat(v, self.ctasize)

    def bar_all(self, kind: str, a, b, line: int) -> bool:
        """Every lane of the chunk executes barrier `a` (count b, None: all threads). True when it completes at
        once for all of them (bar.arrive always does); otherwise the lanes are parked (the caller set their pc)."""
        ids, cnt = self._operands(a, b, line, kind)
        full = self._wpc * 32
        if ids.size == 1 and cnt.size == 1:
            pend = self._pend[int(ids[0])::NBARRIERS]
            if kind == "arrive":
                pend += full                      # every warp of every CTA arrives
                np.remainder(pend, int(cnt[0]), out=pend)      # the phases that completed had no waiter
                return True
            if (cnt[0] == 0 or cnt[0] == full) and not pend.any():
                return True
        self.bar_wait(None, kind, a, b, line)
        return False

    # ------------------------------------------------------------------ diverged barriers
    def bar_wait(self, m, kind: str, a, b, line: int) -> None:
        """The lanes of m (None: all) arrive at barrier a: they park (st BAR) and every barrier that completes
        releases its warps (the caller set their pc to the next block first)."""
        ids, cnt = self._operands(a, b, line, kind)
        sel = slice(None) if m is None else m
        self.st[sel] = BAR
        off = ARRIVE if kind == "arrive" else 0
        self.barid[sel] = int(ids[0]) + off if ids.size == 1 else ids[sel] + off
        self.barcnt[sel] = int(cnt[0]) if cnt.size == 1 else cnt[sel]
        self._settle()

    def _operands(self, a, b, line: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """The barrier ids (one, or one per lane) and thread counts rounded up to whole warps (0: all threads)."""
        ids = np.asarray(a).astype(np.int64).reshape(-1)
        if ids.size > 1 and (ids == ids[0]).all():
            ids = ids[:1]
        if ((ids < 0) | (ids >= NBARRIERS)).any():
            raise CudaError("cudaErrorLaunchFailure",
                            f"{self.kernel.name}: line {line}: barrier id {int(ids.max())} (the ids are 0..15)")
        if b is None:
            cnt = np.zeros(1, np.int64)
        else:
            cnt = np.asarray(b).astype(np.int64).reshape(-1)
            if cnt.size > 1 and (cnt == cnt[0]).all():
                cnt = cnt[:1]
            cnt = (cnt + 31) // 32 * 32
            if kind == "arrive" and (cnt == 0).any():
                raise CudaError("cudaErrorLaunchFailure",
                                f"{self.kernel.name}: line {line}: bar.arrive needs a non-zero thread count")
        return ids, cnt

    def _settle(self, handlers=None) -> bool:
        """Release what the parked lanes complete: warps arrived through bar.arrive go on (their arrival counted),
        barriers whose count is reached release their warps. True when some lane was released."""
        st = self.st
        bar = st == BAR
        if not bar.any():
            return False
        nw, wpc = self.nwarps, self._wpc
        w = self.warp
        wb = w[bar]
        ids = self.barid[bar].astype(np.int64)
        nlive = np.bincount(w, weights=st != EXIT, minlength=nw)
        nbar = np.bincount(wb, minlength=nw)
        wid = np.full(nw, -1, np.int64)
        wid[wb] = ids
        mixed = np.zeros(nw, bool)
        mixed[wb[ids != wid[wb]]] = True
        arrived = (nbar == nlive) & (nbar > 0) & ~mixed          # every live lane of the warp is at one barrier
        wcnt = np.zeros(nw, np.int64)
        np.maximum.at(wcnt, wb, self.barcnt[bar])
        wcta = np.arange(nw) // wpc
        released = np.zeros(nw, bool)
        # bar.arrive: the warp goes on; its 32 threads count towards the barrier's current phase
        arr = arrived & (wid >= ARRIVE)
        if arr.any():
            key = wcta[arr] * NBARRIERS + wid[arr] - ARRIVE
            np.add.at(self._pend, key, 32)
            released |= arr
        # bar.sync / bar.red: per CTA and barrier, the waiting warps and the threads they need
        syn = arrived & (wid >= 0) & (wid < ARRIVE)
        rel_keys = []
        if syn.any():
            exited = np.bincount(wcta[nlive == 0], minlength=self.ncta)
            sw = np.flatnonzero(syn)
            key = wcta[sw] * NBARRIERS + wid[sw]
            keys, inv, nwait = np.unique(key, return_inverse=True, return_counts=True)
            need = np.zeros(keys.size, np.int64)
            np.maximum.at(need, inv, wcnt[sw])
            full = wpc * 32
            everyone = (need == 0) | (need >= full)
            need = np.where(everyone, full, need)
            have = self._pend[keys] + 32 * (nwait + np.where(everyone, exited[keys // NBARRIERS], 0))
            done = have >= need
            if done.any():
                # a phase takes the waiting warps it needs, lowest first; the others wait for the next phase
                take = np.minimum(nwait, -(-(need - have + 32 * nwait) // 32))
                rank = np.zeros(sw.size, np.int64)
                order = np.argsort(inv, kind="stable")
                starts = np.r_[0, np.cumsum(nwait)[:-1]]
                rank[order] = np.arange(sw.size) - np.repeat(starts, nwait)
                go = done[inv] & (rank < take[inv])
                released[sw[go]] = True
                self._pend[keys[done]] = np.maximum(0, have[done] - 32 * (nwait[done] - take[done]) - need[done])
                self._pend[keys[done & everyone]] = 0
                rel_keys = keys[done]
        if not released.any():
            return False
        rel = bar & released[w]
        if len(rel_keys) and self.kernel.bar_kinds:
            self._reduce_released(rel & (self.barid < ARRIVE), handlers if handlers is not None else self._handlers)
        st[rel] = RUN
        return True

    # ------------------------------------------------------------------ the scheduler's release step
    def _release(self, handlers) -> bool:
        """Nothing can run: wake lanes parked at warp operations, else release the barriers the parked lanes
        complete (bar.red's release handlers run). False when every lane has exited."""
        st = self.st
        wait = st == WAIT
        if wait.any():
            st[wait] = RUN
            self.forced = True
            return True
        if not (st == BAR).any():
            return False        # every lane exited
        if self.kernel.named_barriers:
            if self._settle(handlers):
                return True
        elif self._release_plain(handlers):
            return True
        bad = int(self.cta_local[np.flatnonzero(st == BAR)[0]]) + self.cta0
        raise CudaError("cudaErrorLaunchFailure",
                        f"{self.kernel.name}: deadlock: CTA {bad} waits at a barrier that some of its live "
                        f"threads can never reach")

    def _release_plain(self, handlers) -> bool:
        """Barrier 0 for all threads: release every CTA whose live lanes all wait."""
        st = self.st
        bar = st == BAR
        cs = self.ctasize
        nbar = bar.reshape(self.ncta, cs).sum(1)
        nalive = (st != EXIT).reshape(self.ncta, cs).sum(1)
        ok = (nbar == nalive) & (nbar > 0)
        if not ok.any():
            return False
        rel = bar & np.repeat(ok, cs)
        if handlers:
            self._reduce_released(rel, handlers)
        st[rel] = RUN
        return True

    def _reduce_released(self, rel: np.ndarray, handlers) -> None:
        """bar.red: per site (and barrier), the reduction over all released lanes of each CTA, to its handler."""
        cs = self.ctasize
        key = self.barsite.astype(np.int64) * NBARRIERS + self.barid
        for k in np.unique(key[rel]).tolist():
            s = k // NBARRIERS
            mm = rel & (key == k)
            pr = (self.barpred & mm).reshape(self.ncta, cs)
            mr = mm.reshape(self.ncta, cs)
            red_kind = self.kernel.bar_kinds[s]
            if red_kind == "popc":
                v = np.repeat(pr.sum(1, dtype=np.uint32), cs)
            elif red_kind == "and":
                v = np.repeat(~((mr & ~pr).any(1)), cs)
            else:
                v = np.repeat(pr.any(1), cs)
            handlers[s](mm, v)
