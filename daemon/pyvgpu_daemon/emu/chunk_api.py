"""ChunkAPI: the one interface between generated block code (translator/) and the runtime (runtime/).

The translator compiles each kernel into Python source defining `make(S)`; the runtime calls it once per chunk
with S = the chunk, an instance of a ChunkAPI subclass. Generated code may touch S only through the members
declared below (`MEMBERS`): the code generator refuses to emit any other (`Codegen.rt`), and a test checks the
generated source of every test kernel against this list. Everything else generated code uses is in its own
namespace (NumPy as `np` and the value helpers of translator/codegen.py).

Lane vectors: every array argument or result has one element per lane of the chunk (T lanes) unless its
description says otherwise. `sel` is None (all lanes) or the sorted indices of the lanes taking part; `m` is a
boolean lane mask. Memory spaces: 'global', 'shared', 'local', 'generic', 'param' (.param addresses in registers:
kernel parameters or call sequences' variables; 'const' and .param symbols are mapped by the translator). Addresses are an unsigned lane vector (`addr`) plus a constant byte offset (`off`), or `addr` None
for an absolute address `off`.

Lane states (`st`) and block results: a converged block function returns the index of the next block, DIVERGED
(the lanes went different ways: `pc` holds each lane's next block) or ALL_EXITED.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

# Values of ChunkAPI.st, per lane.
RUN, BAR, WAIT, EXIT = 0, 1, 2, 3
# What a converged block function returns besides the next block index.
DIVERGED, ALL_EXITED = -1, -2


class ChunkAPI(ABC):
    """The chunk as generated code sees it (the `S` of `make(S)`)."""

    # ---- state
    T: int                          # lanes in this chunk (whole CTAs)
    pc: np.ndarray                  # int32 per lane: the block each lane runs next (written by diverged code)
    st: np.ndarray                  # int8 per lane: RUN / BAR / WAIT / EXIT
    zeros: dict[int, np.ndarray]    # register width (1, 16, 32, 64) -> the initial (all-zero) register value
    barpred: np.ndarray             # bool per lane: the predicate a lane brings to a diverged bar.red
    barsite: np.ndarray             # int32 per lane: which bar.red site a parked lane waits at

    # ---- registers and parameters
    @abstractmethod
    def special(self, name: str) -> np.ndarray:
        """The lane vector of special register `name` ('%tid.x', '%laneid', '%clock64', ...)."""

    @abstractmethod
    def param(self, off: int, dt):
        """The kernel parameter of NumPy type dt at byte offset off of the launch's parameter buffer (a scalar)."""

    # ---- memory
    @abstractmethod
    def load(self, space: str, addr, off: int, dt, nvec: int, sel) -> list[np.ndarray]:
        """nvec consecutive elements of type dt per lane (one array per element, one entry per selected lane);
        CudaError(cudaErrorIllegalAddress / cudaErrorMisalignedAddress) on a bad access."""

    @abstractmethod
    def store(self, space: str, addr, off: int, dt, vals: list, sel) -> None:
        """Store len(vals) consecutive elements of type dt per selected lane (vals: lane vectors or scalars)."""

    @abstractmethod
    def atom(self, space: str, op: str, dt, addr, off: int, b, c, sel, live: bool):
        """Atomic op (ops/atomic.py) in lane order; the old values of the selected lanes when live, else None."""

    @abstractmethod
    def isspace(self, space: str, a) -> np.ndarray:
        """isspacep: whether each generic address lies in the space."""

    @abstractmethod
    def memctx(self) -> int:
        """The address of the chunk's memory as native runs that load see it (translator/cgen.py's MemCtx: the
        device heap and its live allocations, the parameter buffer, shared and local memory), valid until the
        next call."""

    # ---- call frames of out-of-line functions (frame addresses: a local offset, an int or one per lane)
    @abstractmethod
    def spill(self, addr, vals: list, sel, room: int = 0) -> None:
        """Store values (lane vectors or scalars) in consecutive 8-byte slots at frame address addr of the
        selected lanes; `room`: bytes from addr that must fit in local memory (cudaErrorHardwareStackError)."""

    @abstractmethod
    def unspill(self, addr, widths: list[int], sel) -> list[np.ndarray]:
        """Read consecutive 8-byte slots back as registers of the given widths (1, 16, 32, 64), one value per
        selected lane."""

    @abstractmethod
    def lcopy(self, dst, src, n: int, sel) -> None:
        """Copy n bytes of local memory from frame address src to dst in every selected lane."""

    @abstractmethod
    def sparse(self, idx: np.ndarray) -> "ChunkAPI":
        """The lanes idx (sorted indices, the active lanes of a diverged block) as a chunk of their own for the
        block's sparse variant (translator/kernel.py): T = len(idx), lane vectors of those lanes only; it offers
        load, store, atom, isspace, param and special, which act exactly as the whole chunk's do for those lanes
        (runtime/sparse.py)."""

    # ---- CTA barriers (runtime/barriers.py)
    @abstractmethod
    def cta_reduce(self, p, kind: str, _unused) -> np.ndarray:
        """Converged bar.red completing at once: 'popc' (uint32 count), 'and' or 'or' of p over each CTA, per
        lane."""

    @abstractmethod
    def bar_all(self, kind: str, a, b, line: int) -> bool:
        """Every lane executes barrier `a` ('sync', 'red' or 'arrive'; thread count b, None: all threads): True
        when it completes at once for all of them, else the lanes are parked (their pc set by the caller)."""

    @abstractmethod
    def bar_wait(self, m, kind: str, a, b, line: int) -> None:
        """The lanes of m arrive at barrier `a` (count b): they park, and the barriers that complete release
        their warps (the lanes' pc set by the caller)."""

    # ---- warp operations
    @abstractmethod
    def warp_ready(self, m: np.ndarray, mask, nxt: int):
        """Diverged warp operation at block nxt - 1: the lanes of m that may go ahead (their warp's other member
        lanes are here too); the others are parked (WAIT). None when no lane may."""

    @abstractmethod
    def shfl(self, mode: str, a, b, c, m) -> tuple[np.ndarray, np.ndarray]:
        """shfl.sync.{up,down,bfly,idx}: (value, in-range predicate) per lane."""

    @abstractmethod
    def vote(self, mode: str, p, mask, m) -> np.ndarray:
        """vote.sync.{ballot,any,all,uni} over the active member lanes of each warp."""

    @abstractmethod
    def redux(self, op: str, t: str, a, mask, m) -> np.ndarray:
        """redux.sync.{add,min,max,and,or,xor} over the active member lanes of each warp."""

    @abstractmethod
    def match(self, mode: str, a, mask, m) -> tuple[np.ndarray, np.ndarray]:
        """match.{any,all}.sync: (lane mask, predicate) per lane."""

    @abstractmethod
    def activemask(self, m) -> np.ndarray:
        """activemask.b32: the lanes of each warp executing it."""

    # ---- textures and surfaces (runtime/texunit.py; the objects are the launch's `resources`)
    @abstractmethod
    def tex(self, geom: str, dtype: str, handle, coords: list, gather, sel) -> list[np.ndarray]:
        """tex.{1d,2d,3d,a1d,a2d}.v4.{dtype} (gather None) and tld4 (gather: the component 0..3): the four result
        components per selected lane. `handle` holds the texture object; for a1d/a2d coords[0] is the layer."""

    @abstractmethod
    def txq(self, what: str, handle, sel) -> np.ndarray:
        """txq.<what> (u32 per selected lane); 'su:<what>' for suq."""

    @abstractmethod
    def suld(self, geom: str, dt, nvec: int, mode: str, handle, coords: list, sel) -> list[np.ndarray]:
        """suld.b: nvec elements of dt at byte x (coords[0]), row y, slice z; mode 'trap', 'clamp' or 'zero'."""

    @abstractmethod
    def sust(self, geom: str, dt, mode: str, handle, coords: list, vals: list, sel) -> None:
        """sust.b: store len(vals) elements of dt at byte x, row y, slice z."""

    # ---- warp matrix operations (runtime/matrix.py; spec tuples from translator/matrix.py)
    @abstractmethod
    def wmma_load(self, spec, space: str, addr, off: int, stride, sel) -> list[np.ndarray]:
        """wmma.load: the fragment's registers (uint32 per selected lane) from memory at addr + off."""

    @abstractmethod
    def wmma_store(self, spec, space: str, addr, off: int, stride, regs: list, sel) -> None:
        """wmma.store: the fragment's registers to memory at addr + off."""

    @abstractmethod
    def matrix_mma(self, spec, a_regs: list, b_regs: list, c_regs: list, m) -> list[np.ndarray]:
        """wmma.mma / mma.sync over whole warps of the lanes in m: D's registers (uint32 per lane)."""

    # ---- system calls
    @abstractmethod
    def vprintf(self, fmt_off: int, args_off: int, sel) -> np.ndarray:
        """Device printf: format string and argument buffer pointers at local offsets; the argument counts."""

    @abstractmethod
    def assertfail(self, offs: list[int], sel) -> None:
        """__assertfail: print CUDA's assertion message per failing lane, then raise cudaErrorAssert."""

    @abstractmethod
    def malloc(self, offs: list[int], sel) -> np.ndarray:
        """Device malloc (one offset: the size) or __nv_aligned_device_malloc (size, alignment) from the launch's
        heap: the pointers (0 where the heap has no room), as uint64 per lane."""

    @abstractmethod
    def free(self, off: int, sel) -> None:
        """Device free of the pointer at local offset `off` (NULL: nothing)."""

    @abstractmethod
    def trap(self, sel, line: int) -> None:
        """trap / brkpt executed by any selected lane: cudaErrorLaunchFailure."""


MEMBERS: frozenset[str] = frozenset(ChunkAPI.__annotations__) | frozenset(ChunkAPI.__abstractmethods__)
