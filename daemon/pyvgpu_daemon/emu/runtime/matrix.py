"""Warp matrix operations over the chunk's lanes (ChunkAPI.wmma_load, wmma_store, matrix_mma): the fragments and
the product are ops/matrix.py's.

wmma.load/store are per lane: each lane reads or writes the elements its own slots hold (at the instruction's
address, layout and stride), so they need no other lane. wmma.mma and mma.sync are warp operations: the
translator has waited for every live lane of the warp (ChunkAPI.warp_ready), and a warp whose 32 lanes are not all
here (a short last warp, exited or diverged lanes) is an error, where the ISA leaves the result undefined.

Uses the chunk state described in chunk.py (T, laneid, warp, nwarps) and LaneMemory (load, store).
"""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..ops import matrix as mx

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def _fragment(kind: str, shape: str, which: str, etype: str) -> mx.Fragment:
    return (mx.wmma_fragment if kind == "wmma" else mx.mma_fragment)(shape, which, etype)


class MatrixUnit:
    def _element_addresses(self, frag: mx.Fragment, layout: str, addr, stride):
        """Per slot, every lane's address of the element that slot holds (uint64, or the register's width)."""
        T = self.T
        base = np.zeros(T, np.uint64) if addr is None else np.broadcast_to(np.asarray(addr), (T,))
        where = frag.where[self.laneid]                                    # (T, slots)
        r, c = where // frag.cols, where % frag.cols
        ld = np.broadcast_to(np.asarray(stride).astype(np.int64), (T,))[:, None]
        idx = r * ld + c if layout == "row" else c * ld + r
        byte = idx * (mx.ELEM_BITS[frag.etype] // 8)
        return [(base.astype(np.int64) + byte[:, s]).astype(base.dtype) for s in range(frag.slots)]

    def wmma_load(self, spec, space, addr, off, stride, sel) -> list[np.ndarray]:
        shape, which, etype, layout = spec
        frag = mx.wmma_fragment(shape, which, etype)
        dt = _UINT[mx.ELEM_BITS[etype]]
        vals = [self.load(space, a, off, dt, 1, sel)[0] for a in self._element_addresses(frag, layout, addr, stride)]
        slots = np.stack(vals, axis=1).view(mx.ELEM_DTYPE[etype])
        return mx.pack(frag, slots)

    def wmma_store(self, spec, space, addr, off, stride, regs, sel) -> None:
        shape, which, etype, layout = spec
        frag = mx.wmma_fragment(shape, which, etype)
        T = self.T
        slots = mx.unpack(frag, [np.broadcast_to(np.asarray(r).view(np.uint32), (T,)) for r in regs])
        dt = _UINT[mx.ELEM_BITS[etype]]
        raw = slots.view(dt)
        for s, a in enumerate(self._element_addresses(frag, layout, addr, stride)):
            self.store(space, a, off, dt, [raw[:, s]], sel)

    def matrix_mma(self, spec, a_regs, b_regs, c_regs, m) -> list[np.ndarray]:
        """D = A B + C per warp of the lanes in m (None: every lane): D's registers, per lane (zeros elsewhere)."""
        kind, shape, atype, btype, ctype, dtype, satfinite = spec
        T = self.T
        act = np.ones(T, bool) if m is None else np.broadcast_to(np.asarray(m, bool), (T,))
        idx = np.flatnonzero(act)
        fd = _fragment(kind, shape, "d", dtype)
        out = [np.zeros(T, np.uint32) for _ in range(fd.nregs)]
        if idx.size == 0:
            return out
        warps = np.unique(self.warp[idx])
        counts = np.bincount(self.warp[idx], minlength=self.nwarps)[warps]
        if (counts != 32).any() or idx.size != 32 * len(warps):
            w = int(warps[counts != 32][0]) if (counts != 32).any() else int(warps[0])
            raise CudaError("cudaErrorLaunchFailure",
                            f"{self.kernel.name}: {kind}.mma with {int(np.sum(self.warp[idx] == w))} of the 32 "
                            f"lanes of a warp (the instruction needs the whole warp: .aligned)")
        order = idx[np.lexsort((self.laneid[idx], self.warp[idx]))]       # warp by warp, lane 0..31

        def matrix(which, etype, regs):
            frag = _fragment(kind, shape, which, etype)
            slots = mx.unpack(frag, [np.broadcast_to(np.asarray(r).view(np.uint32), (T,))[order] for r in regs])
            return mx.gather(frag, slots.reshape(len(warps), 32, frag.slots))
        a = matrix("a", atype, a_regs)
        b = matrix("b", btype, b_regs)
        c = matrix("c", ctype, c_regs)
        d = mx.product(a, b, c, dtype, satfinite)
        regs = mx.pack(fd, mx.scatter(fd, d).reshape(len(order), fd.slots))
        for o, r in zip(out, regs):
            o[order] = r
        return out
