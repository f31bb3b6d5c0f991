"""Call frames of out-of-line functions (ChunkAPI.spill, unspill, lcopy): per-lane reads and writes of the
thread's local memory at frame addresses, the call stack's only primitives.

A frame address is a local-memory offset, the same for every lane (an int: the kernel's static frame) or one per
lane (an array: frames on the call stack, which sit at different depths in different lanes). Register values are
kept in 8-byte slots whatever their width. Every access is checked against the thread's local memory: past its
end the call stack has overflowed (cudaErrorHardwareStackError, as a GPU reports a stack overflow).

Uses the chunk state described in chunk.py (T, lmem, frame, lane_off, kernel).
"""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.errors import CudaError

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_REG = {1: np.bool_, 16: np.uint16, 32: np.uint32, 64: np.uint64}


class CallFrames:
    def _slots(self, addr, nbytes: int, sel) -> np.ndarray:
        """Byte offsets into lmem of `addr` for the selected lanes, after checking [addr, addr + nbytes)."""
        lanes_off = self.lane_off if sel is None else self.lane_off[sel]
        a = np.asarray(addr, np.int64)
        if a.ndim:
            a = a if sel is None else a[sel]
        if a.size:
            lo, hi = int(a.min()), int(a.max())
            if lo < 0 or hi + nbytes > self.frame:
                raise CudaError("cudaErrorHardwareStackError",
                                f"{self.kernel.name}: call stack overflow ({nbytes} B at local offset {hi:#x}, "
                                f"{self.frame} B of local memory per thread; cudaLimitStackSize sets the stack)")
        return lanes_off + a

    def spill(self, addr, vals, sel, room: int = 0):
        n = len(vals)
        off = self._slots(addr, max(8 * n, room), sel)
        view = self._view(self.lmem, np.uint64)
        idx = off >> 3
        for k, v in enumerate(vals):
            v = np.asarray(v)
            if v.ndim and sel is not None:
                v = v[sel]
            if v.dtype.kind != "b" and v.dtype.itemsize in _UINT:
                v = v.view(_UINT[v.dtype.itemsize])
            view[idx + k] = v.astype(np.uint64)

    def unspill(self, addr, widths, sel):
        off = self._slots(addr, 8 * len(widths), sel)
        view = self._view(self.lmem, np.uint64)
        idx = off >> 3
        return [view.take(idx + k).astype(_REG[w]) for k, w in enumerate(widths)]

    def lcopy(self, dst, src, n: int, sel):
        d = self._slots(dst, n, sel)
        s = self._slots(src, n, sel)
        k = np.arange(n)
        self.lmem[d[:, None] + k] = self.lmem[s[:, None] + k]
