"""SparseLanes: a diverged block's active lanes as a chunk of their own (ChunkAPI.sparse).

A masked block function works on lane vectors of the whole chunk, so each of its instructions costs the same
however few lanes are active (the decoupled look-back of CUB's onesweep sort runs its loop with ever fewer lanes,
the partial tile's CTA runs the kernel's blocks alone). A block that needs nothing but its own lanes' memory also
has a sparse variant (translator/kernel.py, `_sparse_source`): the same body over the active lanes' registers
only. Its `S` is a SparseLanes, whose lane vectors are those lanes' (T = their count); it serves the members
such blocks use by handing the lanes' own addresses and operands to the chunk's memory code with the lanes'
indices in the chunk (`picked`), so every check, fault, atomic and lane order is the chunk's own.
"""
from __future__ import annotations

import numpy as np


class SparseLanes:
    """The lanes `idx` (sorted indices into the chunk) of `chunk`, as the `S` of a sparse block."""

    __slots__ = ("chunk", "idx", "T", "ones")

    def __init__(self, chunk, idx: np.ndarray, ones: np.ndarray) -> None:
        self.chunk = chunk
        self.idx = idx
        self.T = idx.size
        self.ones = ones[:idx.size]         # the block's mask: every one of these lanes (read-only)

    def _lanes(self, sel):
        """The chunk's indices of the selected lanes (sel: indices into these lanes, sorted)."""
        return self.idx if sel is None else self.idx[sel]

    @staticmethod
    def _pick(v, sel):
        """A lane vector (or a scalar) of these lanes, for the selected ones."""
        return v if sel is None or np.ndim(v) == 0 else v[sel]

    def load(self, space, addr, off, dt, nvec, sel):
        a = None if addr is None else self._pick(addr, sel)
        return self.chunk.load(space, a, off, dt, nvec, self._lanes(sel), picked=True)

    def store(self, space, addr, off, dt, vals, sel):
        a = None if addr is None else self._pick(addr, sel)
        self.chunk.store(space, a, off, dt, [self._pick(x, sel) for x in vals], self._lanes(sel), picked=True)

    def atom(self, space, op, dt, addr, off, b, c, sel, live):
        a = None if addr is None else self._pick(addr, sel)
        cc = None if c is None else self._pick(c, sel)
        return self.chunk.atom(space, op, dt, a, off, self._pick(b, sel), cc, sel=self._lanes(sel), live=live,
                               picked=True)

    def isspace(self, space, a):
        return self.chunk.isspace(space, a)

    def param(self, off, dt):
        return self.chunk.param(off, dt)

    @staticmethod
    def memctx():
        """No native memory for a subset of lanes (a MemCtx indexes shared and local memory by lane): 0 makes a
        native run that loads decline, and its NumPy form serves these lanes (translator/kernel.py's _emit_run)."""
        return 0

    def special(self, name):
        v = self.chunk.special(name)
        return v[self.idx] if np.ndim(v) else v
