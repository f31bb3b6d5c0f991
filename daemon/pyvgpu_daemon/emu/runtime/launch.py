"""Launch: one kernel launch, run as chunks of whole CTAs.

A chunk holds `EmuLimits.lanes_per_chunk // threads_per_cta` CTAs (at least one), fewer when their local memory
(static frame + call stack per thread) would pass about 256 MB. The launch keeps what its chunks share: the grid,
the parameter buffer, the shared memory size (static + dynamic, 16-byte aligned), the lane-geometry arrays of the
chunk size, printf output, the instruction count and the deadline that bound the launch (cudaErrorLaunchTimeout).

Chunks run one after the other, in CTA order, unless the kernel cannot observe other CTAs (Kernel.independent_ctas:
no atomics, fences, volatile (but of the CTA's shared memory) or scoped memory accesses, printf or assert): then up
to `EmuLimits.threads` chunks run at once, on the launching thread and helpers of its own kept between launches
(crew.py; NumPy and native code release the GIL), with the same results, since nothing one CTA does is visible to
another. (A kernel whose CTAs talk, run a CTA at a time in native code, may run a chunk's CTAs on several
threads instead: EmuLimits.talk_threads, translator/ctaatomic.py.) Finished chunks are kept by the plan for its later launches (LaunchPlan.keep): a chunk's arrays, geometry
and fresh pages cost more than a simple kernel's chunk run.

The time limit holds for any grid and any kernel: the deadline (and the session's cancellation) is checked
before every chunk, so a huge grid of cheap CTAs stops on time, and after every scheduler step inside a chunk
(chunk.py), a step being one basic block of at most cfg.MAX_BLOCK_INSTRS instructions over the chunk's lanes. A
launch therefore overruns EmuLimits.max_seconds by at most one such step or one chunk's set-up.

The same checks are where a long launch shares the device (`turn`, the session's scheduler.Lane): when another
session waits for the device, it pokes the launch (`check_at` becomes 0), the next step's check offers the turn
(Lane.preempt), and the launch pauses while the other session's work runs, for as long as the fair scheduler's
weights say; then it continues where it stopped. Other sessions never touch this launch's memory, so a pause
between steps is invisible to it.

An index past the end of an emulated memory buffer is an access no bounds check should have let through; it is
reported as what it is on a GPU, a sticky cudaErrorIllegalAddress naming the kernel, never as an internal error.
"""
from __future__ import annotations

import os
import threading
import time

from typing import Callable

import numpy as np

from pyvgpu_daemon.errors import CudaError, code_of

from ..layout import align
from ..limits import EmuLimits
from ..translator import ctagen
from ..translator.threadgen import ThreadCode
from .chunk import Chunk, state_bytes
from .crew import crew_of_this_thread
from .special import ParamBuffer

_MAX_CHUNK_LOCAL = 256 << 20
ILLEGAL_ADDRESS = code_of("cudaErrorIllegalAddress")
MISALIGNED_ADDRESS = code_of("cudaErrorMisalignedAddress")


_PLAN_GEO_LANES = 1024       # geometries of chunks up to this many lanes are kept with the plan (small, reused)
_REUSE_MAX_BYTES = 1 << 20   # a plan keeps its chunk for the next launch when that chunk's state is at most this
# A plan of several chunks keeps finished chunks for its next launches (LaunchPlan.keep) up to this many bytes of
# their state and lane geometry (Chunk.kept_bytes): scan_batches' scanTiles, 2 chunks of 65,536 lanes, 13 MB.
_KEEP_BYTES = 16 << 20
# A tiny launch (LaunchPlan.tiny): at most this many threads and instructions, and its fastest run took less.
TINY_LANES = 1024
TINY_INSTRS = 256
TINY_SECONDS = 500e-6
# Native code (limits.native "auto") also for a configuration of fewer threads than limits.native_min_threads once its
# launches have spent interpreting about what compiling the kernel costs (NATIVE_AFTER_S, and NATIVE_S_PER_INSTR per
# instruction: the C compiler took 4-6 ms per instruction on the 2-core VM, 47 s for CUB's 8,600-instruction onesweep
# kernel; NATIVE_S_PER_INSTR_CTA for a CTA-at-a-time build, split and compiled at a level chosen by size:
# translator/ctasplit.py, ctagen.OPT_BY_SIZE, 21 s for onesweep): small launches that run long or often (a one-thread
# kernel looping over a 32 KB parameter block, launched 1000 times) would pay the interpreter's cost per instruction
# in every launch, the compiler only once (in the background), and a short program never waits for a compiler it does
# not need. A kernel whose native code was worth it on this machine before (emu/native.py's record: another daemon
# run) starts its build at the first launch: with the library cached, that costs only the source's generation.
NATIVE_AFTER_S = 0.25
NATIVE_S_PER_INSTR = 0.005
NATIVE_S_PER_INSTR_CTA = 0.0025
# A kernel large enough for a quick tier (ctagen.quick_flags: built at ctagen.QUICK's level first, its full level
# after, in the background, once the quick tier's launches paid for it: translator/kernel.py) pays about its first
# build's cost: onesweep's source generated and compiled at -Og in about 5.7 s of CPU, 13 of its NumPy launches
# (bench/README.md, "fourteenth step: radix_sort_thrust cold", "fifteenth step: tier policy"); at LEAN_O1, built at
# once where a quick tier would cost about as much (ctagen.QUICK_MAX_SHARE), 7 s.
NATIVE_S_PER_INSTR_QUICK = 0.0005
# ... and at least this for any kernel built a CTA at a time: its C holds the CTA's scheduler and helpers whatever its
# size (25-130 KB at -O3's 40 s per MB): CUB's exclusive sum, 135 instructions and blocks (0.34 s at
# NATIVE_S_PER_INSTR_CTA), is 127 KB of C, 5-6 s of compiler CPU, for 3 ms a launch (bench/README.md, "fourteenth
# step: radix_sort_thrust cold").
NATIVE_MIN_S_CTA = 2.0
# The first launch of a kernel worth native code here before waits this long for its build rather than running its
# NumPy code meanwhile: with the library cached the build is the source's generation (CUB's onesweep: 0.4-1.3 s,
# against 0.42 s of CPU, 1.15 s of wall at load 4.6, a NumPy launch); a library no longer cached costs this once a
# daemon (bench/README.md, "thirteenth step: radix_sort_thrust outside onesweep").
WANTED_WAIT_S = 3.0
SHARED_CHECK_S = 2e-4        # while another session uses the device, a launch checks (and yields the GIL) this often


class LaunchPlan:
    """What every launch of one configuration shares: the kernel, grid and block, the shared memory size (static
    + dynamic, 16-byte aligned), the local frame per thread, and the lane geometry of small chunks (the arrays
    `Launch.geometry` builds, and the special registers that depend on nothing else). EmuModule keeps a few per
    module, keyed by (kernel, grid, block, dynamic shared memory, its maximum, stack size), so a repeated launch
    validates and sets up nothing again: it packs its parameters and runs (bench/README.md, "P2"). A launch of
    one small chunk (`reusable`) goes further: the plan keeps the Launch that ran last, with its chunk's arrays
    and bound block functions, and the next launch only resets them (Launch.start, Chunk.reuse; bench/README.md,
    "emulator launch")."""

    __slots__ = ("kernel", "grid", "block", "ctasize", "ncta", "dyn_shared", "shared_size", "frame", "geo", "sizes",
                 "per", "threads", "native", "bounded", "best", "cooperative", "workspace", "reusable", "spare",
                 "native_later", "native_after", "spent", "kept", "kept_bytes", "_keep_lock", "charge",
                 "patience")

    def __init__(self, kernel, grid, block, shmem: int, limits: EmuLimits, stack_size: int | None = None,
                 cooperative: bool = False, charge: Callable[[int], bool] | None = None):
        """`charge(n)`: charge n more bytes (n < 0: give them back) to the session's budget, False when they do
        not fit (the module's CodeBudget.charge, for its kept chunks); None: nothing is kept."""
        self.kernel = kernel
        self.charge = charge
        self.grid = tuple(int(x) for x in grid)
        self.block = tuple(int(x) for x in block)
        self.ctasize = self.block[0] * self.block[1] * self.block[2]
        self.ncta = self.grid[0] * self.grid[1] * self.grid[2]
        self.dyn_shared = int(shmem)
        lay = kernel.layout
        self.shared_size = align(lay.dyn_shared_base + self.dyn_shared if (lay.dyn_shared_names or shmem)
                                 else lay.static_shared, 16) or 16
        # Local memory per thread: the static frame, then (kernels with out-of-line calls) the call stack:
        # cudaLimitStackSize scaled by EmuLimits.call_stack_factor, at most the device's local memory per thread.
        stack = (stack_size if stack_size is not None else limits.default_stack_size) * limits.call_stack_factor
        stack = min(stack, limits.max_local_bytes)
        self.frame = lay.frame + (align(stack, 16) if lay.has_calls else 0)
        self.geo: dict = {}                   # ncta -> geometry, chunks of at most _PLAN_GEO_LANES lanes only
        self.best: float | None = None        # seconds the fastest completed launch took (None: none completed)
        self.sizes = [len(b.instrs) + 1 for b in kernel.blocks]      # vector instructions per block step
        # CTAs per chunk, and how many chunks run at once. A cooperative launch is one chunk: its CTAs wait for each
        # other at grid-wide barriers, so all of them must be scheduled together (EmuLimits.check_cooperative
        # bounds them by the occupancy, as on a GPU).
        self.cooperative = cooperative
        # A grid workspace (%envreg1:%envreg2) for a cooperative launch and for any launch of a kernel that reads it
        # (cg::this_grid()): a GPU gives one to plain launches too (an H100, CUDA 13: this_grid().is_valid() true).
        self.workspace = cooperative or bool({"%envreg1", "%envreg2"} & kernel.specials)
        per = max(1, limits.lanes_per_chunk // self.ctasize)
        self.per = max(1, min(per, _MAX_CHUNK_LOCAL // max(1, self.ctasize * self.frame)))
        if cooperative:
            if self.ncta * self.ctasize * self.frame > _MAX_CHUNK_LOCAL:
                raise CudaError("cudaErrorLaunchOutOfResources",
                                f"{kernel.name}: a cooperative launch runs its {self.ncta} blocks together, and their "
                                f"local memory ({self.frame} B per thread) exceeds the emulator's "
                                f"{_MAX_CHUNK_LOCAL >> 20} MiB")
            self.per = self.ncta
        nchunks = -(-self.ncta // self.per)
        self.threads = min(limits.threads, nchunks) if kernel.independent_ctas else 1
        # the block code every chunk binds: native when built ("on": built at the first launch; "auto", for
        # large launches: built in the background, used once ready); None: the NumPy variant
        self.native = "on" if limits.native == "on" else \
            "auto" if limits.native == "auto" and self.ncta * self.ctasize >= limits.native_min_threads else None
        self.native_later = limits.native == "auto" and self.native is None     # after native_after seconds
        wanted = limits.native == "auto" and kernel.native_wanted()
        if self.native_later and wanted:     # worth it here before: build (or find) it now
            self.native, self.native_later = "auto", False
        self.patience = WANTED_WAIT_S if wanted else 0.0      # (the build's first launch waits that long for it)
        cta = self.native_later and kernel.tries_cta_code()
        self.native_after = 0.0 if not self.native_later else max(
            NATIVE_AFTER_S, NATIVE_MIN_S_CTA if cta else 0.0, sum(self.sizes) * (
                NATIVE_S_PER_INSTR if not cta else
                NATIVE_S_PER_INSTR_QUICK if ctagen.quick_flags(sum(self.sizes)) else NATIVE_S_PER_INSTR_CTA))
        self.spent = 0.0                      # seconds its completed launches took, in all
        # Bounded whatever the arguments: each thread runs each block at most once (Kernel.straight) and no
        # barrier or warp operation parks threads, so the scheduler takes at most one step per block: at most
        # TINY_INSTRS vector instructions over at most TINY_LANES lanes, in one chunk.
        self.bounded = kernel.straight and self.ncta * self.ctasize <= min(TINY_LANES, limits.lanes_per_chunk) \
            and sum(self.sizes) <= TINY_INSTRS and all(b.kind == "plain" for b in kernel.blocks)
        # A launch of one small chunk keeps its Launch and Chunk for the next launch of the plan (Launch.start,
        # Chunk.reuse): arrays, geometry and bound block functions are made once. Not for kernels that read
        # %gridid, nor launches with a grid workspace (%envreg1:%envreg2, a new one each launch): make(S) binds special
        # registers once per chunk; the others are the same in every launch.
        T = self.ncta * self.ctasize
        self.reusable = nchunks == 1 and T <= _PLAN_GEO_LANES and "%gridid" not in kernel.specials and \
            not self.workspace and \
            state_bytes(T, self.ncta, self.shared_size, self.frame) <= _REUSE_MAX_BYTES
        self.spare: list[Launch] = []         # at most one launch that ran, ready to start again
        self.kept: list[Chunk] = []           # finished chunks of earlier launches (keep, take)
        self.kept_bytes = 0
        self._keep_lock = threading.Lock()    # (two streams may launch the plan at once)

    def keep(self, chunk: Chunk) -> None:
        """A launch's chunk that finished (without a failure), kept for a later launch within _KEEP_BYTES and what
        the session's budget allows (`charge`: 16 plans a module, 1,024 modules a session would otherwise hold
        256 GB); it is taken by one launch at a time (take), and reset before it runs again (Chunk.retarget)."""
        size = chunk.kept_bytes()
        with self._keep_lock:
            if self.charge is not None and self.kept_bytes + size <= _KEEP_BYTES and self.charge(size):
                self.kept.append(chunk)
                self.kept_bytes += size

    def take(self, ncta: int) -> Chunk | None:
        """A kept chunk of ncta CTAs, now the caller's alone, or None."""
        with self._keep_lock:
            for k, chunk in enumerate(self.kept):
                if chunk.ncta == ncta:
                    del self.kept[k]
                    size = chunk.kept_bytes()
                    self.kept_bytes -= size
                    self.charge(-size)
                    return chunk
        return None

    def release(self) -> None:
        """The plan is dropped by its module: its kept chunks go, and their bytes back to the budget."""
        with self._keep_lock:
            self.kept.clear()
            if self.kept_bytes and self.charge is not None:
                self.charge(-self.kept_bytes)
            self.kept_bytes = 0

    def drop(self) -> None:
        """The module let the plan go (evicted, its translation dropped, the module unloaded): release, and keep
        nothing from now on. A launch of it may still run (another stream's; a run of launches holds its plans,
        backends/emu.py _RunLaunches): its chunks would be kept, and charged, in a plan no one takes them from."""
        with self._keep_lock:
            charge, self.charge = self.charge, None
            self.kept.clear()
            if self.kept_bytes and charge is not None:
                charge(-self.kept_bytes)
            self.kept_bytes = 0

    @property
    def tiny(self) -> bool:
        """Whether a launch of this configuration is certain to be short, so that the daemon's event loop may run
        it (fastpath): bounded, launched before (the first launch compiles the block code), and its fastest launch
        ran (compilation not counted) in less than TINY_SECONDS: the bound is the static one; the time keeps slow
        hosts and costly instructions off the loop (the fastest: a launch preempted on a loaded host says nothing
        about its cost)."""
        return self.bounded and self.best is not None and self.best < TINY_SECONDS

    def ran(self, seconds: float) -> None:
        if self.best is None or seconds < self.best:
            self.best = seconds
        self.spent += seconds
        if self.native_later and self.spent >= self.native_after:
            self.native = "auto"
            self.native_later = False

    def geometry(self, ncta: int) -> dict:
        """Lane-layout arrays of a chunk of ncta CTAs (read-only; "special" holds launch-independent values)."""
        g = self.geo.get(ncta)
        if g is None:
            cs = self.ctasize
            T = ncta * cs
            lin = np.arange(T, dtype=np.int64)
            lin_in_cta = lin % cs
            cta_local = lin // cs
            laneid = (lin_in_cta % 32).astype(np.uint32)
            warp = cta_local * ((cs + 31) // 32) + lin_in_cta // 32
            g = {"lin": lin, "lin_in_cta": lin_in_cta, "cta_local": cta_local, "laneid": laneid, "warp": warp,
                 "warp_first": lin - laneid.astype(np.int64), "special": {},
                 "cta_off": cta_local * self.shared_size, "lane_off": lin * self.frame,
                 # initial register values: never written in place (registers rebind, see translator/codegen.py)
                 "zeros": {1: np.zeros(T, bool), 16: np.zeros(T, np.uint16), 32: np.zeros(T, np.uint32),
                           64: np.zeros(T, np.uint64)}}
            if T <= _PLAN_GEO_LANES:
                self.geo[ncta] = g            # at most the full chunk and the tail: a grid's chunks have two sizes
        return g


class Launch:
    """One launch of a plan. A reusable plan's launch is kept after it ran (LaunchPlan.spare) and started again
    for the next launch with new parameters (`start`), its chunk with it (Chunk.reuse)."""

    def __init__(self, plan: LaunchPlan, mem, symbols, limits: EmuLimits):
        self.plan = plan
        self.kernel = plan.kernel
        self.mem = mem
        self.symbols = symbols
        self.grid = plan.grid
        self.block = plan.block
        self.ctasize = plan.ctasize
        self.limits = limits
        self.sm_count = limits.multiprocessors
        self.dyn_shared = plan.dyn_shared
        self.shared_size = plan.shared_size
        self.frame = plan.frame
        self._geo: dict = {}
        self._chunk: Chunk | None = None      # the chunk of the last launch (reusable plans)
        self.param_buffer = ParamBuffer()      # this launch's parameters (start copies them in)
        self._lock = threading.Lock()

    def start(self, params: bytes, grid_id: int = 1, resources=None, peers=(),
              cancel: threading.Event | None = None, printf_fifo: int = 1 << 20, turn=None,
              workspace: int = 0, heap=None) -> "Launch":
        """Set up what is this launch's own: parameters, the grid's id, the resources and peers kernels may use,
        printf output and its cap, the budget, deadline, cancellation and turn, a cooperative launch's workspace,
        the context's device heap."""
        self.param_buffer.load(params if type(params) is bytes else bytes(params))
        # A cooperative launch's grid workspace (cooperative_groups' grid_workspace {wsSize, barrier} in device
        # memory): its address is what %envreg1:%envreg2 give, the pointer cg::this_grid().sync() arrives at; 0 for a
        # plain launch (a grid sync there traps, as on a GPU).
        self.workspace = workspace
        self.heap = heap                      # the context's DeviceHeap (device malloc/free) or None
        self.resources = resources            # texture and surface objects (runtime/texture.Resources) or None
        self.peers = peers if type(peers) is tuple else tuple(peers)   # memories of peer devices
        self.grid_id = grid_id
        self.stdout = bytearray()
        self.printf_cap = printf_fifo         # cudaLimitPrintfFifoSize: printf output beyond it is dropped
        self.stdout_dropped = 0
        self.clock_bump = 0
        self.steps = 0
        self.deadline = time.monotonic() + self.limits.max_seconds
        self.cancel = cancel                  # set when the session's client is gone: stop at the next check
        self.turn = turn                      # backends.base.DeviceTurn or None
        self.check_at = self.deadline         # monotonic time of the next check a chunk must make at the latest
        return self

    @property
    def pbuf(self) -> np.ndarray:
        """The parameter buffer as read-only bytes (kernel parameters by address)."""
        return self.param_buffer.ro

    def _poke(self) -> None:
        """Another session waits for the device: check (and maybe pause) at the next step."""
        self.check_at = 0.0

    def offer_helpers(self, job: Callable[[], None], n: int) -> None:
        """job() on n helper threads of the launching thread (crew.py), started as they get a CPU: the parallel
        chunks here and the talking CTAs of a chunk (translator/ctaatomic.py, which reaches the crew through the
        launch: the translator does not import the runtime)."""
        crew_of_this_thread().offer(job, n)

    def check_time(self) -> None:
        """cudaErrorLaunchTimeout past the deadline or once the launch is cancelled; then, when another session
        waits for the device, the turn is offered (the launch may pause here)."""
        if time.monotonic() > self.deadline:
            raise CudaError("cudaErrorLaunchTimeout",
                            f"{self.kernel.name}: ran longer than {self.limits.max_seconds} s (PYVGPU_EMU_MAX_SECONDS)")
        if self.cancel is not None and self.cancel.is_set():
            raise CudaError("cudaErrorLaunchTimeout", f"{self.kernel.name}: cancelled, the session's client is gone")
        turn = self.turn
        if turn is not None:
            now = time.monotonic()
            self.check_at = self.deadline     # before asking: a poke from now on is not lost
            if turn.others_outside:
                # Other sessions' requests are handled by threads that need the GIL this launch holds: they get it
                # (and the CPU) here, within SHARED_CHECK_S, rather than at the interpreter's next forced switch.
                # (Not while the others only wait for the turn: the yield would hand the CPU to other processes.)
                os.sched_yield()
                self.check_at = min(self.check_at, now + SHARED_CHECK_S)
            left = turn.preempt()
            if left is not None:              # others wait and this launch is within its share: check again then
                self.check_at = min(self.check_at, time.monotonic() + max(left, 1e-4))
            if self.cancel is not None and self.cancel.is_set():    # the client left while the launch paused
                raise CudaError("cudaErrorLaunchTimeout",
                                f"{self.kernel.name}: cancelled, the session's client is gone")

    def geometry(self, ncta: int) -> dict:
        """Lane-layout arrays of a chunk of ncta CTAs, shared by every chunk of that size (read-only)."""
        with self._lock:                # chunks running at once share it
            g = self._geo.get(ncta)
            if g is None:
                g = self.plan.geometry(ncta)
                self._geo = {ncta: g}     # keep one geometry (the full-chunk one, or the tail)
        return g

    def account(self, kernel: str, steps: int) -> None:
        """A chunk executed `steps` more vector instructions: enforce the launch's budget, deadline and
        cancellation."""
        if self.plan.threads == 1:            # one chunk at a time: nobody else adds
            self.steps += steps
            total = self.steps
        else:
            with self._lock:
                self.steps += steps
                total = self.steps
        if total > self.limits.max_vector_instructions:
            raise CudaError("cudaErrorLaunchTimeout",
                            f"{kernel}: instruction budget of {self.limits.max_vector_instructions} vector "
                            f"instructions exhausted (runaway loop or spin-wait?)")
        self.check_time()

    def run(self, checked: bool = False) -> bytes:
        """Run the launch (started). `checked`: the caller's previous launch of this context ended with its checks
        (check_time: deadline, cancellation, the turn) just now, nothing in between: a reusable plan's launch,
        whose only chunk checks again when it ends, skips the check before it (a run of launches: EmuContext's
        run_fast)."""
        plan = self.plan
        ncta_total, per, threads = plan.ncta, plan.per, plan.threads
        # (a build waited for: at most half the time left to the deadline, the launch's checks made meanwhile)
        patience = min(plan.patience, max(0.0, (self.deadline - time.monotonic()) / 2)) if plan.patience else 0.0
        native = plan.native and self.kernel.native_make(wait=plan.native == "on", patience=patience,
                                                         check=self.check_time)
        # a whole kernel a thread at a time (translator/threadgen.py): its chunks bind no block functions
        self.thread_code = native if isinstance(native, ThreadCode) else None
        self.make = None if self.thread_code else native or self.kernel.make   # (compiles the block code once)
        t0 = time.perf_counter()
        # (a quick tier paying its full build's rent counts its launches' CPU: on a loaded machine their wall time is
        # mostly waiting for a CPU, which the estimate of the build's CPU seconds does not hold)
        c0 = time.process_time() if native and self.kernel.rent_due else None
        if self.turn is not None:
            self.turn.on_waiter(self._poke)
        try:
            if threads > 1:
                self._run_parallel(ncta_total, per, threads)
            elif plan.reusable:
                chunk = self._chunk
                if chunk is None:
                    chunk = self._chunk = Chunk(self, 0, ncta_total)
                else:
                    chunk.reuse()
                if not checked:
                    self.check_time()
                chunk.run()
            else:
                chunk = None
                try:
                    for cta in range(0, ncta_total, per):
                        self.check_time()
                        chunk = self._chunk_for(chunk, cta, min(per, ncta_total - cta))
                        chunk.run()
                except BaseException:
                    chunk = None              # (a failed chunk is not used again)
                    raise
                finally:
                    if chunk is not None:
                        plan.keep(chunk)
            took = time.perf_counter() - t0
            plan.ran(took)
            if native:                                    # (a quick tier's launches start its full build)
                self.kernel.native_ran(native, took if c0 is None else min(took, time.process_time() - c0))
        except IndexError as e:
            err = CudaError("cudaErrorIllegalAddress", f"{self.kernel.name}: access outside emulated memory ({e})")
            err.stdout = bytes(self.stdout)
            raise err from e
        except CudaError as e:
            if e.code in (ILLEGAL_ADDRESS, MISALIGNED_ADDRESS) and not e.message.startswith(self.kernel.name):
                e = CudaError(e.code, f"{self.kernel.name}: {e.message}")
            e.stdout = bytes(self.stdout)
            raise e
        finally:
            if self.turn is not None:
                self.turn.on_waiter(None)
        return bytes(self.stdout)

    def _chunk_for(self, chunk: Chunk | None, cta0: int, ncta: int) -> Chunk:
        """A chunk for CTAs [cta0, cta0 + ncta): `chunk` (the one this thread ran last, finished) when it has ncta
        CTAs, reset and moved to them (Chunk.rebind); else one the plan kept from a launch before (Chunk.retarget),
        else a new one: its arrays' fresh pages, its lane geometry and its bound block functions cost more than
        the run of a simple kernel's chunk (scan_batches: 26 chunks of about 1 ms a launch)."""
        if chunk is not None:
            if chunk.ncta == ncta:
                chunk.rebind(cta0)
                return chunk
            self.plan.keep(chunk)
        kept = self.plan.take(ncta)
        if kept is None:
            return Chunk(self, cta0, ncta)
        kept.retarget(self, cta0)
        return kept

    def _run_parallel(self, ncta_total: int, per: int, threads: int) -> None:
        """The chunks on this thread and `threads - 1` helpers (crew.py: kept from one launch to the next), each
        taking the next chunk in CTA order; this thread waits for the chunks a helper took, never for a helper to
        start. The first failure in chunk order is the launch's: after a failure no chunk starts, those running
        end, and the failure of the lowest chunk is raised (every chunk below it completed: they were taken
        first)."""
        starts = iter(range(0, ncta_total, per))
        lock = threading.Lock()
        ended = threading.Condition(lock)
        failed: list[tuple[int, BaseException]] = []
        running = [0]                           # threads that took a chunk and have not ended (nor kept it)

        def work() -> None:
            chunk = None
            took = False
            try:
                while True:
                    with lock:
                        cta = None if failed else next(starts, None)
                        if cta is None:
                            return
                        if not took:
                            took = True
                            running[0] += 1
                    try:
                        self.check_time()
                        chunk = self._chunk_for(chunk, cta, min(per, ncta_total - cta))
                        chunk.run()
                    except BaseException as e:  # noqa: BLE001 - the launch's failure (the lowest chunk's), raised below
                        chunk = None            # (a failed chunk is not used again)
                        with lock:
                            failed.append((cta, e))
                        return
            finally:
                if chunk is not None:           # (before the launch ends: the plan may be dropped after it)
                    self.plan.keep(chunk)
                if took:
                    with lock:
                        running[0] -= 1
                        if not running[0]:
                            ended.notify_all()

        self.offer_helpers(work, threads - 1)
        work()
        with lock:
            while running[0]:
                ended.wait()
        if failed:
            raise min(failed, key=lambda f: f[0])[1]
