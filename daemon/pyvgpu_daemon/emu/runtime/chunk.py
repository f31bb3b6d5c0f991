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

import contextvars
import threading
import time

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..chunk_api import ALL_EXITED, RUN, ChunkAPI
from ..layout import init_bytes
from .barriers import NBARRIERS, CtaBarriers
from .calls import DeviceCalls
from .collective import Collectives
from .frames import CallFrames
from .matrix import MatrixUnit
from .spaces import LaneMemory
from .sparse import SparseLanes
from .special import SpecialRegisters
from .texunit import TextureUnit

_CHECK_EVERY = 64          # scheduler steps between checks of the instruction budget and cancellation
GEO_BYTES_PER_LANE = 80    # Launch.geometry's arrays, bytes per lane (at most: a chunk holds them)
_STARVATION = 128          # backward diverged steps before the highest-PC lanes get one turn


class Chunk(SpecialRegisters, LaneMemory, CtaBarriers, Collectives, DeviceCalls, CallFrames, TextureUnit, MatrixUnit,
            ChunkAPI):
    """State of one chunk of CTAs during a launch: the `S` of the generated code."""

    def __init__(self, launch, cta0: int, ncta: int) -> None:
        k = launch.kernel
        self.launch = launch
        self.mem = launch.mem
        self.peer_mems = launch.peers             # other devices' memories kernels may use (peer access)
        self.kernel = k
        cs = launch.ctasize
        T = ncta * cs
        self.T = T
        self.ncta = ncta
        self.cta0 = cta0
        self.ctasize = cs
        geo = launch.geometry(ncta)
        self.zeros = geo["zeros"]
        self.lin_in_cta = geo["lin_in_cta"]
        self.cta_local = geo["cta_local"]
        self._special: dict[str, np.ndarray] = geo["special"]
        self.laneid = geo["laneid"]
        self.warp = geo["warp"]
        self.nwarps = ncta * ((cs + 31) // 32)
        self.warp_first = geo["warp_first"]
        self.shared_size = launch.shared_size
        self.frame = launch.frame
        self.cta_off = geo["cta_off"]
        self.lane_off = geo["lane_off"]
        self._state = _State(state_bytes(T, ncta, self.shared_size, self.frame))
        alloc = self._state.take
        self.pc = alloc(T, np.int32)
        self.st = alloc(T, np.int8)
        self.barpred = alloc(T, np.bool_)
        self.barsite = alloc(T, np.int32)
        self._init_barriers(alloc)
        self.smem = alloc(max(ncta * self.shared_size, 16), np.uint8)
        self.lmem = alloc(T * self.frame, np.uint8)
        self._init_shared()
        self.views: dict = {}
        self._acache: dict = {}
        self._memctx = None                       # (bounds, pbuf, address, MemCtx, ...): spaces.memctx
        self._own_special: dict = {}
        self.forced = False
        self._bound = None                        # (make, converged, masked, handlers, reset, sparse blocks)
        self._ones = None                         # T trues, read-only (SparseLanes.ones)
        self.code_state = None                    # (code, state array, TX, its address): threadgen.ThreadCode.run
        self.talk_states = None                   # the state arrays of the helpers running its talking CTAs
                                                  # (translator/ctaatomic._Talk), kept as code_state
        self._lanes_written = False               # the lockstep code ran here (reuse: its lane arrays zeroed too)

    @property
    def pbuf(self) -> np.ndarray:
        return self.launch.pbuf

    def _init_shared(self) -> None:
        """Shared variables with initializers (a kernel's `.shared` declarations may have them)."""
        lay = self.kernel.layout
        for off, v in lay.shared_inits:
            raw = init_bytes(v, self.launch.symbols)
            for c in range(self.ncta):
                self.smem[c * self.shared_size + off:c * self.shared_size + off + len(raw)] = raw

    def reuse(self) -> None:
        """The next launch of the same plan runs this chunk again (LaunchPlan.reusable: the launch's only chunk,
        cta0 0): every array a launch writes back to zero (one fill; only shared and local memory where only
        whole-kernel native code ran, which writes no lane array; local memory only where the kernel may write it:
        Kernel.writes_local), shared initializers, caches of the last
        launch (address checks, views of its parameter buffer) dropped, registers back to zero (the generated
        reset()); the lane geometry and the bound block functions stay."""
        if self._lanes_written:
            self._state.buf.fill(0)
            self._lanes_written = False
        else:                                 # (whole-kernel native code writes shared and local memory only)
            self.smem.fill(0)
            if self.kernel.writes_local:      # (else it is zero still: every kernel has 16 B of it a thread, 1 MB
                self.lmem.fill(0)             # a chunk of 65,536: a third of scan_batches' resets)
        if self.kernel.layout.shared_inits:
            self._init_shared()
        self.peer_mems = self.launch.peers
        self.views.clear()
        self._acache.clear()
        self._memctx = None
        self.forced = False
        if self._bound is not None:
            self._bound[4]()

    def rebind(self, cta0: int) -> None:
        """Run the CTAs from cta0 next, in the same launch (Launch._chunk_for): reset as reuse() does, and the
        special registers that depend on the chunk's CTAs recomputed in place (the bound block functions hold
        those arrays), or dropped where no block function is bound."""
        self.cta0 = cta0
        ctx = self._memctx
        self.reuse()
        self._memctx = ctx                    # (the same launch's: memctx checks the allocations and parameters)
        if self._bound is None:               # nothing holds them: made again when read (a CTA-at-a-time kernel's
            self._own_special.clear()         # chunks read none: 65,536 lanes' %ctaid are 4 % of scan_batches)
            return
        for name, v in self._own_special.items():
            np.copyto(v, self._special_value(name), casting="unsafe")

    def retarget(self, launch, cta0: int) -> None:
        """Run the CTAs from cta0 in `launch`, a later launch of the plan this chunk ran in (LaunchPlan.keep):
        rebind's reset and the launch's memories; lockstep block functions are bound again (as for a new chunk:
        they were bound for the last launch); the lane geometry and the state's buffer stay, and a kernel run a
        thread or a CTA at a time has nothing bound."""
        self.launch = launch
        self.mem = launch.mem
        self._memctx = None
        self._bound = None                        # (conservative: what make(S) captured is make's business)
        self._handlers = ()
        self.rebind(cta0)

    def kept_bytes(self) -> int:
        """Bytes a plan keeping this chunk holds: its state buffer, (bounded by) its lane geometry, and the state
        array of native code run a thread or a CTA at a time (code_state: a CTA's register file, one array of
        ctagen.cta_cap elements per register, often the largest part), and its helpers' (talk_states)."""
        code = 0 if self.code_state is None else self.code_state[1].nbytes
        code += sum(a.nbytes for a in self.talk_states or ())
        return self._state.buf.nbytes + self.T * GEO_BYTES_PER_LANE + code

    # ---------------------------------------------------------------- driver
    def bind_blocks(self):
        """The kernel's block functions bound to this chunk: ([(converged, masked) per block], [bar.red
        release handlers], reset)."""
        return self.launch.make(self)

    def run(self) -> None:
        _ignoring_fp_errors(self._run)

    def _run(self) -> None:
        L = self.launch
        if L.thread_code is not None:      # the whole kernel as native code, a thread at a time
            if not L.thread_code.unfit:
                L.thread_code.run(self)
                return
            if L.make is None:             # (unfit since: the lockstep NumPy code, compiled once by the kernel)
                L.make = L.kernel.make
        self._lanes_written = True
        bound = self._bound
        if bound is None or bound[0] is not L.make:
            blocks, handlers, reset = self.bind_blocks()
            bound = self._bound = (L.make, [b[0] for b in blocks], [b[1] for b in blocks], handlers, reset,
                                   [b[2] for b in blocks])
        _, C, M, handlers, _, Sp = bound
        div = L.limits.sparse_divisor
        T = self.T
        self._handlers = handlers
        sizes = L.plan.sizes
        pc, st = self.pc, self.st
        cur = 0
        conv = True
        steps = done = 0            # this chunk's vector instructions, and how many the launch was told of
        check_every = 0
        self._last_p = -1
        self._loops = 0
        clock = time.monotonic
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
            if div and Sp[P] is not None and np.count_nonzero(m) * div <= T:
                Sp[P](np.flatnonzero(m))        # few lanes: the block over them alone (runtime/sparse.py)
                continue
            M[P](m)
        L.account(self.kernel.name, steps - done)

    def sparse(self, idx: np.ndarray) -> SparseLanes:
        if self._ones is None:
            self._ones = np.ones(self.T, np.bool_)
            self._ones.flags.writeable = False
        return SparseLanes(self, idx, self._ones)

    def _pick(self, runm: np.ndarray) -> int:
        """The block the diverged scheduler runs next: the lowest PC of the runnable lanes."""
        # (PCs are below 2^30: lanes that cannot run get bit 30 set, which costs less than a select)
        P = int((self.pc | ((~runm).view(np.uint8).astype(np.int32) << 30)).min())
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


def state_bytes(T: int, ncta: int, shared_size: int, frame: int) -> int:
    """Bytes of the one buffer a chunk's written state lives in (_State: each array 16-byte aligned)."""
    def a(n: int) -> int:
        return (n + 15) & ~15
    return a(4 * T) + a(T) + a(T) + a(4 * T) + a(T) + a(4 * T) + a(8 * NBARRIERS * ncta) + \
        a(max(ncta * shared_size, 16)) + a(T * frame)


class _State:
    """One zeroed buffer holding every array a launch writes (lane states, barrier bookkeeping, shared and local
    memory), so that a chunk run again by the next launch (Chunk.reuse) is reset with one fill."""

    def __init__(self, nbytes: int) -> None:
        self.buf = np.zeros(nbytes, np.uint8)
        self._at = 0

    def take(self, n: int, dt) -> np.ndarray:
        size = n * np.dtype(dt).itemsize
        v = self.buf[self._at:self._at + size].view(dt)
        self._at += (size + 15) & ~15
        return v


_fp_context = threading.local()


def _ignoring_fp_errors(fn) -> None:
    """fn() with NumPy's floating-point errors ignored (a GPU's arithmetic raises nothing), in a context of this
    thread kept for that: np.errstate builds its state anew on every entry, which cost a quarter of an empty
    launch (bench/README.md, "emulator launch"). NumPy >= 2 keeps the error state in a context variable."""
    ctx = getattr(_fp_context, "ctx", None)
    if ctx is None:
        ctx = contextvars.copy_context()
        ctx.run(np.seterr, all="ignore")
        _fp_context.ctx = ctx
    ctx.run(fn)
