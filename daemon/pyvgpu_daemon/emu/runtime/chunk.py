"""Chunk: the state of one chunk of CTAs during a launch, and the scheduler that runs its block functions.

Chunk implements ChunkAPI (the `S` of generated code) from one mixin per concern: special registers and
parameters (special.py), memory spaces (spaces.py), CTA barriers (barriers.py), warp operations (collective.py), device-side
calls (calls.py), call frames of out-of-line functions (frames.py), texture and surface instructions (texunit.py),
warp matrix operations (matrix.py).
The state those mixins share is set up here:

    T, ncta, cta0, ctasize        lanes, CTAs in the chunk, index of its first CTA, threads per CTA
    pc, st, zeros, barpred, barsite   see ChunkAPI
    barid, barcnt, _pend          named barriers: see barriers.py
    lin_in_cta, cta_local, laneid, warp, warp_first, nwarps   lane geometry (Launch.geometry, shared, read-only)
    smem, shared_size, cta_off    the chunk's shared memory and each lane's CTA base offset in it
    lmem, frame, lane_off         the chunk's local memory (`frame` bytes per lane: the kernel's static frame,
                                  then its call stack) and each lane's offset in it
    mem, peer_mems                the device's DeviceMemory (global space), peer devices' memories
    pbuf                          the launch's parameter buffer as read-only bytes (kernel parameters by address)
    forced                        set when every parked warp-op lane was woken because nothing else could run
"""
from __future__ import annotations

import time

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..chunk_api import ALL_EXITED, RUN, ChunkAPI
from ..layout import init_bytes
from .barriers import CtaBarriers
from .calls import DeviceCalls
from .collective import Collectives
from .frames import CallFrames
from .matrix import MatrixUnit
from .spaces import LaneMemory
from .special import SpecialRegisters
from .texunit import TextureUnit

_CHECK_EVERY = 64          # scheduler steps between checks of the instruction budget and cancellation
_STARVATION = 128          # backward diverged steps before the highest-PC lanes get one turn


class Chunk(SpecialRegisters, LaneMemory, CtaBarriers, Collectives, DeviceCalls, CallFrames, TextureUnit, MatrixUnit,
            ChunkAPI):
    """State of one chunk of CTAs during a launch: the `S` of the generated code."""

    def __init__(self, launch, cta0: int, ncta: int) -> None:
        k = launch.kernel
        self.launch = launch
        self.mem = launch.mem
        self.pbuf = launch.pbuf
        self.peer_mems = launch.peers             # other devices' memories kernels may use (peer access)
        self.kernel = k
        cs = launch.ctasize
        T = ncta * cs
        self.T = T
        self.ncta = ncta
        self.cta0 = cta0
        self.ctasize = cs
        self.pc = np.zeros(T, np.int32)
        self.st = np.zeros(T, np.int8)
        self.barpred = np.zeros(T, bool)
        self.barsite = np.zeros(T, np.int32)
        geo = launch.geometry(ncta)
        self.zeros = geo["zeros"]
        self.lin_in_cta = geo["lin_in_cta"]
        self.cta_local = geo["cta_local"]
        self._special: dict[str, np.ndarray] = geo["special"]
        self.laneid = geo["laneid"]
        self.warp = geo["warp"]
        self.nwarps = ncta * ((cs + 31) // 32)
        self.warp_first = geo["warp_first"]
        self._init_memory(launch, geo)
        self.views: dict = {}
        self._acache: dict = {}
        self._own_special: dict = {}
        self.forced = False
        self._init_barriers()

    def _init_memory(self, launch, geo: dict) -> None:
        lay = self.kernel.layout
        ncta = self.ncta
        self.shared_size = launch.shared_size
        self.smem = np.zeros(max(ncta * self.shared_size, 16), np.uint8)
        for off, v in lay.shared_inits:
            raw = init_bytes(v, launch.symbols)
            for c in range(ncta):
                self.smem[c * self.shared_size + off:c * self.shared_size + off + len(raw)] = raw
        self.frame = launch.frame
        self.cta_off = geo["cta_off"]
        self.lmem = np.zeros(self.T * self.frame, np.uint8)
        self.lane_off = geo["lane_off"]

    # ---------------------------------------------------------------- driver
    def bind_blocks(self):
        """The kernel's block functions bound to this chunk: ([(converged, masked) per block], [bar.red
        release handlers])."""
        return self.launch.make(self)

    def run(self) -> None:
        L = self.launch
        blocks, handlers = self.bind_blocks()
        self._handlers = handlers
        C = [b[0] for b in blocks]
        M = [b[1] for b in blocks]
        sizes = L.plan.sizes
        pc, st = self.pc, self.st
        cur = 0
        conv = True
        steps = done = 0            # this chunk's vector instructions, and how many the launch was told of
        check_every = 0
        self._last_p = -1
        self._loops = 0
        clock = time.monotonic
        with np.errstate(all="ignore"):
            while True:
                # The deadline (or a poke of another session waiting for the device: Launch.check_at) after every
                # step (one block: cheap next to a clock read); the rest less often.
                check_every += 1
                if check_every >= _CHECK_EVERY or clock() > L.check_at:
                    check_every = 0
                    L.account(self.kernel.name, steps - done)
                    done = steps
                if conv:
                    steps += sizes[cur]
                    r = C[cur]()
                    if r >= 0:
                        cur = r
                        continue
                    if r == ALL_EXITED:
                        break
                    conv = False
                    continue
                runm = st == RUN
                if not runm.any():
                    if not self._release(handlers):
                        break
                    continue
                P = self._pick(runm)
                m = runm & (pc == P)
                if P >= len(M):
                    raise CudaError("cudaErrorLaunchFailure", f"{self.kernel.name}: fell off the end of the code")
                if m.all():
                    conv = True
                    cur = P
                    continue
                steps += sizes[P]
                M[P](m)
        L.account(self.kernel.name, steps - done)

    def _pick(self, runm: np.ndarray) -> int:
        """The block the diverged scheduler runs next: the lowest PC of the runnable lanes."""
        P = int(np.where(runm, self.pc, np.int32(1 << 30)).min())
        # Starvation escape: lanes looping at low PCs (a spin-wait on a flag) would keep lanes at higher
        # PCs (the ones that set the flag) from ever running under strict min-PC. After a long run of
        # backward steps, run the highest-PC group once; any order is a legal schedule.
        if P <= self._last_p:
            self._loops += 1
            if self._loops > _STARVATION:
                self._loops = 0
                P = int(np.where(runm, self.pc, -1).max())
        else:
            self._loops = 0
        self._last_p = P
        return P
