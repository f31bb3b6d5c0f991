"""Launch: one kernel launch, run as a sequence of chunks of whole CTAs.

A chunk holds `EmuLimits.lanes_per_chunk // threads_per_cta` CTAs (at least one), fewer when their local memory
(static frame + call stack per thread) would pass about 256 MB. The launch keeps what its chunks share: the grid, the parameter buffer, the shared
memory size (static + dynamic, 16-byte aligned), the lane-geometry arrays of the chunk size, printf output, the
instruction count and the deadline that bound the launch (cudaErrorLaunchTimeout).
"""
from __future__ import annotations

import time

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..layout import align
from ..limits import EmuLimits
from .chunk import Chunk

_MAX_CHUNK_LOCAL = 256 << 20


class Launch:
    def __init__(self, kernel, mem, symbols, grid, block, shmem, params: bytes, limits: EmuLimits,
                 grid_id: int = 1, stack_size: int | None = None):
        self.kernel = kernel
        self.mem = mem
        self.symbols = symbols
        self.grid = tuple(int(x) for x in grid)
        self.block = tuple(int(x) for x in block)
        self.ctasize = self.block[0] * self.block[1] * self.block[2]
        self.params = bytes(params)
        self.pbuf = np.frombuffer(self.params, np.uint8)
        self.limits = limits
        self.sm_count = limits.multiprocessors
        self.grid_id = grid_id
        self.dyn_shared = int(shmem)
        lay = kernel.layout
        self.shared_size = align(lay.dyn_shared_base + self.dyn_shared if (lay.dyn_shared_names or shmem)
                                 else lay.static_shared, 16) or 16
        # Local memory per thread: the static frame, then (kernels with out-of-line calls) the call stack:
        # cudaLimitStackSize scaled by EmuLimits.call_stack_factor, at most the device's local memory per thread.
        stack = (stack_size if stack_size is not None else limits.default_stack_size) * limits.call_stack_factor
        stack = min(stack, limits.max_local_bytes)
        self.frame = lay.frame + (align(stack, 16) if lay.has_calls else 0)
        self.stdout = bytearray()
        self._geo: dict = {}
        self.clock_bump = 0
        self.steps = 0
        self.deadline = time.monotonic() + limits.max_seconds

    def geometry(self, ncta: int) -> dict:
        """Lane-layout arrays of a chunk of ncta CTAs, shared by every chunk of that size (read-only)."""
        g = self._geo.get(ncta)
        if g is None:
            cs = self.ctasize
            T = ncta * cs
            lin = np.arange(T, dtype=np.int64)
            lin_in_cta = lin % cs
            cta_local = lin // cs
            laneid = (lin_in_cta % 32).astype(np.uint32)
            warp = cta_local * ((cs + 31) // 32) + lin_in_cta // 32
            g = {"lin": lin, "lin_in_cta": lin_in_cta, "cta_local": cta_local, "laneid": laneid, "warp": warp,
                 "warp_first": lin - laneid.astype(np.int64), "special": {}}
            self._geo = {ncta: g}     # keep one geometry (the full-chunk one, or the tail)
        return g

    def run(self) -> bytes:
        ncta_total = self.grid[0] * self.grid[1] * self.grid[2]
        per = max(1, self.limits.lanes_per_chunk // self.ctasize)
        per = max(1, min(per, _MAX_CHUNK_LOCAL // max(1, self.ctasize * self.frame)))
        cta = 0
        try:
            while cta < ncta_total:
                n = min(per, ncta_total - cta)
                Chunk(self, cta, n).run()
                cta += n
        except CudaError as e:
            e.stdout = bytes(self.stdout)
            raise
        return bytes(self.stdout)
