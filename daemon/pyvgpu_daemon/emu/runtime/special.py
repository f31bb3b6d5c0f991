"""Special registers and kernel parameters: the read-only inputs of a chunk's threads (ChunkAPI.special,
ChunkAPI.param).

Values are lane vectors of the register's type (ptx/predefined.py: uint32, uint64 or bool), computed on first use
and cached: with the chunk geometry of the launch configuration (LaunchPlan) when they are the same for every chunk
of that size in every launch of it (%tid, %laneid, ...), per chunk when they depend on its CTAs or on the launch
(%ctaid, %clusterid, %smid, %gridid). Clocks are
never cached: %clock/%clock64 advance with the launch's executed-instruction count and with every read,
%globaltimer is the host's time in ns. %smid is cta % multiprocessors. %envreg1:%envreg2 are the address of the
launch's grid workspace (Launch.workspace: a cooperative launch's, or a plain launch's of a kernel that reads them,
as on a GPU; LaunchPlan.workspace), the other %envreg 0.

Uses the chunk state described in chunk.py (launch, T, cta0, lin_in_cta, cta_local, laneid, shared_size).
"""
from __future__ import annotations

import time

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..ptx.predefined import CLOCKS, SPECIAL_REGISTERS

# Values that differ between chunks, or between launches of one LaunchPlan (%gridid): not kept in its geometry.
_PER_CHUNK = frozenset({"%ctaid.x", "%ctaid.y", "%ctaid.z", "%clusterid.x", "%clusterid.y", "%clusterid.z",
                        "%smid", "%gridid", "%envreg1", "%envreg2"})
_DTYPE = {"u32": np.uint32, "u64": np.uint64, "pred": np.bool_}


class SpecialRegisters:
    def special(self, name: str) -> np.ndarray:
        s = self._special.get(name)
        if s is None:
            s = self._own_special.get(name)
        if s is not None:
            return s
        if name in CLOCKS:
            return self._clock(name)
        t = SPECIAL_REGISTERS.get(name)
        if t is None:
            raise CudaError("cudaErrorInvalidPtx", f"special register {name} is not supported")
        v = np.empty(self.T, _DTYPE[t])
        np.copyto(v, self._special_value(name), casting="unsafe")      # one pass: broadcast and type
        if name in _PER_CHUNK:
            self._own_special[name] = v
        else:
            self._special[name] = v
        return v

    def param(self, off: int, dt):
        return self.launch.param_buffer.scalar(off, dt)

    def _special_value(self, name: str):
        L = self.launch
        if name in _INDEXES:
            return self._index(name)
        if name.startswith("%lanemask_") and name[10:] in ("eq", "lt", "le", "ge", "gt"):
            return self._lanemask(name[10:])
        if name == "%laneid":
            return self.laneid
        if name == "%warpid":
            return self.lin_in_cta // 32
        if name == "%smid":
            return (self.cta_local + self.cta0) % L.sm_count
        if name.startswith("%clusterid."):
            return self._index("%ctaid." + name[-1])
        if name.startswith("%nclusterid."):
            return self._index("%nctaid." + name[-1])
        if name.startswith(("%cluster_nctaid.", "%cluster_nctarank")):
            return 1                # every CTA is a cluster of one
        if name in ("%envreg1", "%envreg2"):    # the launch's grid workspace (LaunchPlan.workspace): high, low word
            return (L.workspace >> 32) if name == "%envreg1" else L.workspace & 0xFFFFFFFF
        constant = {"%nwarpid": 32, "%nsmid": L.sm_count, "%gridid": L.grid_id,
                    "%dynamic_smem_size": L.dyn_shared, "%total_smem_size": self.shared_size,
                    "%aggr_smem_size": self.shared_size}
        return constant.get(name, 0)    # cluster ranks and ids, %pm*, %envreg*, reserved shared memory, graph

    def _index(self, name: str):
        """%tid / %ntid / %ctaid / %nctaid .x .y .z."""
        L = self.launch
        kind, axis = _INDEXES[name]
        if kind == "ntid":
            return L.block[axis]
        if kind == "nctaid":
            return L.grid[axis]
        dims = L.block if kind == "tid" else L.grid
        lin = self.lin_in_cta if kind == "tid" else self.cta_local + self.cta0
        if axis == 0:
            return lin if dims[1] * dims[2] == 1 else lin % dims[0]     # 1-D: already below dims[0]
        if axis == 1:
            return (lin // dims[0]) % dims[1]
        return lin // (dims[0] * dims[1])

    def _lanemask(self, kind: str):
        ln = self.laneid.astype(np.uint64)
        one = np.uint64(1)
        v = {"eq": lambda: one << ln, "lt": lambda: (one << ln) - one, "le": lambda: ((one << ln) << one) - one,
             "ge": lambda: ~((one << ln) - one), "gt": lambda: ~(((one << ln) << one) - one)}[kind]()
        return v & np.uint64(0xFFFFFFFF)

    def _clock(self, name: str) -> np.ndarray:
        # Not cached: a clock must advance. Derived from the launch's executed-instruction count.
        L = self.launch
        L.clock_bump += 16      # each read advances, even within one block
        c = (L.steps + L.clock_bump) * 4 + 1000
        if name.startswith("%globaltimer"):
            c = time.time_ns()
        if name in ("%clock64", "%globaltimer"):
            return np.full(self.T, c, np.uint64)
        if name.endswith("_hi"):
            c >>= 32
        return np.full(self.T, c & 0xFFFFFFFF, np.uint32)


class ParamBuffer:
    """A launch's parameter bytes in a buffer kept with the Launch (a reusable plan's launches copy theirs into it,
    Launch.start) and read through typed views made once: a kernel's ld.param costs an index, not the 1-2 µs of
    an np.frombuffer per read. `ro`: the bytes, read-only (kernel parameters by address, spaces.py)."""

    __slots__ = ("buf", "ro", "_mv", "_views")

    def __init__(self) -> None:
        self.buf = self.ro = np.empty(0, np.uint8)
        self._mv = memoryview(self.buf)
        self._views: dict = {}

    def load(self, params: bytes) -> None:
        if len(params) != self.buf.size:
            self.buf = np.empty(len(params), np.uint8)
            self.ro = self.buf.view()
            self.ro.flags.writeable = False
            self._mv = memoryview(self.buf)
            self._views = {}
        self._mv[:] = params

    def scalar(self, off: int, dt):
        """The parameter of NumPy scalar type dt at byte offset off (a NumPy scalar)."""
        v = self._views.get(dt)
        if v is None:
            size = np.dtype(dt).itemsize
            n = self.buf.size - self.buf.size % size
            v = self._views[dt] = (self.buf[:n].view(dt), size)
        if off % v[1]:
            return np.frombuffer(self.buf, dtype=dt, count=1, offset=off)[0]      # (PTX aligns parameters)
        return v[0][off // v[1]]


_INDEXES = {f"%{kind}.{ax}": (kind, i) for kind in ("tid", "ntid", "ctaid", "nctaid") for i, ax in enumerate("xyz")}
