"""EmuLimits: the one home of the emulated device's limits, and the one launch validator on the emulator side.

Two kinds of limits live here:
- the interpreter's budgets (lanes per chunk, instructions and seconds per launch, call depth), some of them
  settable through PYVGPU_EMU_* environment variables;
- the emulated sm_75 device's limits (block and grid dimensions, shared memory, registers, ...). The device
  snapshot (`backends/emu.py`: cudaDeviceProp fields and cudaDeviceAttr values) reads them, and so does
  `check_launch`, so what a client is told and what a launch is held to cannot drift apart.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from pyvgpu_daemon.errors import CudaError

Dim3 = tuple[int, int, int]


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class EmuLimits:
    # ---- the interpreter
    # Threads interpreted together (a chunk holds whole CTAs; one CTA always fits whatever this says).
    lanes_per_chunk: int = _env_int("PYVGPU_EMU_LANES_PER_CHUNK", 65536)
    # Vector instructions (one instruction over the lanes of a chunk) one launch may execute in all. A deadlocked
    # or runaway kernel ends with cudaErrorLaunchTimeout instead of hanging the daemon.
    max_vector_instructions: int = _env_int("PYVGPU_EMU_MAX_VECTOR_INSTRUCTIONS", 50_000_000)
    # Native code for runs of ALU instructions and loads (emu/native.py): "auto" builds it (in the background: about
    # a second, once per kernel and machine) when a launch has at least native_min_threads threads, or once the
    # launches of one configuration have spent runtime/launch.py's NATIVE_AFTER_S interpreting, and later launches
    # use it; "on" builds it at the first launch and uses it for every launch; "off".
    native: str = os.environ.get("PYVGPU_EMU_NATIVE", "auto")
    native_min_threads: int = _env_int("PYVGPU_EMU_NATIVE_MIN_THREADS", 1 << 18)
    # Native code for a whole kernel run a thread at a time (translator/threadgen.py) where the kernel allows it
    # (no warp operations, atomics, fences, volatile global or scoped accesses, calls, barriers other than
    # `bar.sync 0`: translator/threadgen.py, eligible_reason and slower_reason); "0" keeps such kernels
    # on the lockstep native runs above. Applies wherever native code does (PYVGPU_EMU_NATIVE).
    threadgen: bool = os.environ.get("PYVGPU_EMU_THREADGEN", "1") != "0"
    # Native code for a kernel with `bar.sync 0` or warp operations run a CTA at a time, its threads inner
    # (translator/ctagen.py and ctawarp.py: eligible_reason and preferred_reason); "0" leaves such kernels to the
    # paths above. Applies wherever native code does (PYVGPU_EMU_NATIVE).
    ctagen: bool = os.environ.get("PYVGPU_EMU_CTAGEN", "1") != "0"
    # A diverged block runs over its active lanes alone (translator/kernel.py's sparse variant, runtime/sparse.py)
    # when they are at most 1/sparse_divisor of the chunk's lanes; 0: always over the whole chunk, masked. The
    # results are the same bits either way.
    sparse_divisor: int = max(0, _env_int("PYVGPU_EMU_SPARSE_DIVISOR", 4))
    # Chunks of one launch run at once on this many threads when the kernel's CTAs cannot observe each other.
    threads: int = max(1, _env_int("PYVGPU_EMU_THREADS", min(os.cpu_count() or 1, 4)))
    # A chunk's CTAs that talk (CUB's onesweep), run a CTA at a time, on this many threads (translator/ctaatomic.py);
    # 1: one after the other, the same order run after run. 0 (the default): 2 when `threads` > 1, else 1. Two
    # cut onesweep's wall time a launch by about a half beside two busy threads for about 7 % more CPU (measured at
    # nice 0 beside two spinners; at higher loads a CTA spins on the look-back while its predecessor's thread waits
    # for a CPU: bench/README.md, "fourteenth step"); more than two would spin more.
    talk_threads: int = max(0, _env_int("PYVGPU_EMU_TALK_THREADS", 0))
    # Wall-clock seconds one launch may run.
    max_seconds: float = float(_env_int("PYVGPU_EMU_MAX_SECONDS", 600))
    # Inlining depth for .func calls (recursive functions are not inlined: they run on the call stack).
    max_call_depth: int = 32
    # The call stack of out-of-line (recursive, address-taken) functions, per thread: cudaLimitStackSize (CUDA's
    # default 1 KiB unless the program sets it) times this factor, since the emulator's frames keep every saved
    # register in an 8-byte slot and so are larger than a GPU's.
    default_stack_size: int = 1024
    call_stack_factor: int = 8

    # ---- what one module load may make the daemon spend (a hostile image ends in an error, never in a big heap)
    # Bytes a fatbin image may decompress to, all entries together (cudaErrorInvalidKernelImage beyond).
    max_image_bytes: int = _env_int("PYVGPU_EMU_MAX_IMAGE_BYTES", 64 << 20)
    # PTX text of one module (cudaErrorInvalidPtx beyond, before any of it is read). A load costs time and memory
    # in proportion to the text (ptx/index.py: about 0.1 s and 1.3 bytes per byte); translations are charged to
    # max_code_bytes as kernels are launched. As large as the largest PTX a fatbin may decompress to.
    max_ptx_bytes: int = _env_int("PYVGPU_EMU_MAX_PTX_BYTES", 64 << 20)
    # Registers one function declares (`.reg .b64 %rd<N>` counts N), and one kernel holds after inlining.
    max_registers: int = _env_int("PYVGPU_EMU_MAX_REGISTERS", 1 << 16)
    # Instructions of one kernel after inlining its .func calls.
    max_instructions: int = _env_int("PYVGPU_EMU_MAX_INSTRUCTIONS", 1 << 18)
    # Declarations of one module: variables, functions, parameters of a function.
    max_declarations: int = 1 << 16
    # Modules one session may hold on one device, and the host memory they hold there (emu/codebudget.py: PTX text
    # and index of every loaded module, translated kernels while kept; cudaErrorMemoryAllocation beyond).
    max_modules: int = 1024
    max_code_bytes: int = _env_int("PYVGPU_EMU_MAX_CODE_BYTES", 512 << 20)

    # ---- the emulated device (sm_75)
    max_threads_per_block: int = 1024
    max_block_dim: Dim3 = (1024, 1024, 64)
    max_grid_dim: Dim3 = ((1 << 31) - 1, 65535, 65535)
    warp_size: int = 32
    multiprocessors: int = 40
    max_threads_per_multiprocessor: int = 1024
    max_blocks_per_multiprocessor: int = 16
    regs_per_block: int = 65536
    regs_per_multiprocessor: int = 65536
    # Static + dynamic shared memory per CTA: without opting in (cudaFuncAttributeMaxDynamicSharedMemorySize),
    # and the opt-in maximum (cudaDevAttrMaxSharedMemoryPerBlockOptin).
    shared_per_block: int = 48 * 1024
    shared_per_block_optin: int = 64 * 1024
    shared_per_multiprocessor: int = 64 * 1024
    const_bytes: int = 64 * 1024
    # Per-thread local memory (bytes).
    max_local_bytes: int = 512 * 1024
    max_pitch: int = (1 << 31) - 1
    max_sync_depth: int = 24                 # cudaLimitDevRuntimeSyncDepth maximum
    max_l2_fetch_granularity: int = 128      # cudaLimitMaxL2FetchGranularity maximum
    persisting_l2_bytes: int = 0             # no persisting L2 on the emulated device

    def __post_init__(self) -> None:
        if self.talk_threads < 1:             # (resolved here, so that EmuLimits(threads=1) talks on one thread)
            self.talk_threads = 2 if self.threads > 1 else 1

    def occupancy(self, threads: int, regs: int, shared: int, kernel_max_threads: int) -> int:
        """cudaOccupancyMaxActiveBlocksPerMultiprocessor: the blocks of `threads` threads, `regs` registers per
        thread and `shared` bytes of shared memory (static + dynamic) one multiprocessor holds at once (the
        client's pv_occupancy computes the same from the device snapshot these limits fill)."""
        if threads <= 0 or threads > min(kernel_max_threads, self.max_threads_per_block):
            return 0
        warps = -(-threads // self.warp_size)
        n = min(self.max_threads_per_multiprocessor // (warps * self.warp_size), self.max_blocks_per_multiprocessor)
        if regs > 0:
            per_warp = -(-regs * self.warp_size // 256) * 256
            n = min(n, self.regs_per_multiprocessor // (per_warp * warps))
        if shared > 0:
            n = min(n, self.shared_per_multiprocessor // shared)
        return max(n, 0)

    def check_cooperative(self, kernel: str, grid: Dim3, block: Dim3, *, regs: int, shared: int,
                          kernel_max_threads: int) -> None:
        """A cooperative launch's blocks must all be resident at once: at most the occupancy's blocks on every
        multiprocessor (cudaErrorCooperativeLaunchTooLarge, as CUDA checks it)."""
        blocks = grid[0] * grid[1] * grid[2]
        per_sm = self.occupancy(block[0] * block[1] * block[2], regs, shared, kernel_max_threads)
        if blocks > per_sm * self.multiprocessors:
            raise CudaError("cudaErrorCooperativeLaunchTooLarge",
                            f"{kernel}: {blocks} blocks of a cooperative launch, at most {per_sm} per multiprocessor "
                            f"x {self.multiprocessors} multiprocessors can be resident at once")

    def check_launch(self, kernel: str, grid: Dim3, block: Dim3, shmem: int, *, kernel_max_threads: int,
                     static_shared: int, max_dynamic_shared: int | None = None) -> None:
        """CUDA's launch-configuration errors, in the order a launch meets them: the device's dimensions
        (cudaErrorInvalidConfiguration), the function's dynamic shared memory maximum when one is given
        (cudaErrorInvalidValue), the kernel's own thread maximum (.maxntid, cudaErrorInvalidConfiguration), and
        the device's opt-in shared memory maximum (cudaErrorInvalidValue)."""
        if len(grid) != 3 or len(block) != 3 or min(grid) < 1 or min(block) < 1:
            raise CudaError("cudaErrorInvalidConfiguration", f"bad launch configuration grid={grid} block={block}")
        nthreads = block[0] * block[1] * block[2]
        too_big = any(g > m for g, m in zip(grid, self.max_grid_dim)) or \
            any(b > m for b, m in zip(block, self.max_block_dim))
        if too_big or nthreads > self.max_threads_per_block:
            raise CudaError("cudaErrorInvalidConfiguration", f"grid {grid} / block {block} exceed sm_75 limits")
        if max_dynamic_shared is not None and shmem > max_dynamic_shared:
            # As on a GPU: more than the default needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize) first.
            raise CudaError("cudaErrorInvalidValue",
                            f"{kernel}: {shmem} B of dynamic shared memory, the function allows "
                            f"{max_dynamic_shared} B (cudaFuncAttributeMaxDynamicSharedMemorySize)")
        if nthreads > kernel_max_threads:
            raise CudaError("cudaErrorInvalidConfiguration",
                            f"{kernel}: block {block} has more than {kernel_max_threads} threads")
        if shmem < 0 or static_shared + shmem > self.shared_per_block_optin:
            raise CudaError("cudaErrorInvalidValue",
                            f"{kernel}: {static_shared} B static + {shmem} B dynamic shared memory exceeds "
                            f"{self.shared_per_block_optin} B")
