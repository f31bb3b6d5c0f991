"""The emulated GPU: memory, copies, memsets, streams, events and (via emu/module.py) kernels, all on the CPU.

Each (session, device) gets its own DeviceMemory at `va_base + ordinal * VA_WINDOW_BYTES`, so the pointers a
client sees are unique across the hosts it talks to. The configured memory size is one budget per device shared
by every session, as on a real GPU (cudaMemGetInfo's free shrinks when another process allocates).

All work of a (session, device) runs in order on its worker thread, so streams are plain handles: by the time an
op runs, everything queued before it has finished. Events therefore record wall-clock time in that worker, which
makes cudaEventElapsedTime meaningful (it measures the emulated work between the two records).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
import uuid

import numpy as np
from dataclasses import dataclass
from typing import Any, Sequence

from pyvgpu.protocol import (FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT, LIMIT_DEFAULTS,
                             LIMIT_NAMES, MAX_STDOUT_BYTES, REMOTED_DEVICE_ATTRS, VA_WINDOW_BYTES)
from pyvgpu import cublas_spec as blas_spec
from pyvgpu import cublaslt_spec as lt_spec
from pyvgpu.cuda_enums import DEVICE_ATTRS
from pyvgpu_daemon import blas
from pyvgpu_daemon.blas import lt
from pyvgpu_daemon.backends.base import Backend, DeviceContext, FastOp, KernelDesc, LoadedModule, pack_rows
from pyvgpu_daemon.backends.emu_arrays import EmuArrays
from pyvgpu_daemon.emu.device_heap import DeviceHeap
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import ALIGN, DeviceMemory
from pyvgpu_daemon.emu.vmm import GRANULARITY, MAX_RESERVED_FACTOR, EmuVmm, Physical
from pyvgpu_daemon import tensor_map
from pyvgpu_daemon.errors import CudaError

log = logging.getLogger("pyvgpu.daemon")

EMU_NAME = "pyvgpu emulated GPU (sm_75)"
SM = 75
EVENT_DISABLE_TIMING = 0x2        # cudaEventDisableTiming
STDOUT_LIMIT = 8 << 20            # printf bytes kept per device between syncs; the rest is dropped, as CUDA does
MAX_PRINTF_FIFO = MAX_STDOUT_BYTES  # the largest cudaLimitPrintfFifoSize (a reply carries at most this much)
# What the emulated device reports beyond its limits (emu/limits.py): clocks, memory bus and L2 of an sm_75 part.
CLOCK_RATE_KHZ = 1_590_000
MEMORY_CLOCK_RATE_KHZ = 5_001_000
MEMORY_BUS_WIDTH = 256
L2_CACHE_SIZE = 4 << 20
PEER_KERNEL_ACCESS = True         # emulated kernels can use another device's memory of the session (peers)


def emu_attrs(lim: EmuLimits) -> dict[int, int]:
    """cudaDeviceAttr number → value for the emulated sm_75 device (names: pyvgpu/cuda_enums.py)."""
    named = {
        "MaxThreadsPerBlock": lim.max_threads_per_block,
        "MaxBlockDimX": lim.max_block_dim[0],
        "MaxBlockDimY": lim.max_block_dim[1],
        "MaxBlockDimZ": lim.max_block_dim[2],
        "MaxGridDimX": lim.max_grid_dim[0],
        "MaxGridDimY": lim.max_grid_dim[1],
        "MaxGridDimZ": lim.max_grid_dim[2],
        "MaxSharedMemoryPerBlock": lim.shared_per_block,
        "TotalConstantMemory": lim.const_bytes,
        "WarpSize": lim.warp_size,
        "MaxPitch": lim.max_pitch,
        "MaxRegistersPerBlock": lim.regs_per_block,
        "ClockRate": CLOCK_RATE_KHZ,
        "TextureAlignment": 256,                    # = the allocation alignment: any cudaMalloc pointer fits
        "GpuOverlap": 1,
        "MultiProcessorCount": lim.multiprocessors,
        "KernelExecTimeout": 0,
        "Integrated": 0,
        "CanMapHostMemory": 1,                      # mapped host memory: a coherent device copy
        "ComputeMode": 0,
        "SurfaceAlignment": 512,
        "ConcurrentKernels": 1,
        "EccEnabled": 0,
        "PciBusId": 0,
        "PciDeviceId": 0,
        "TccDriver": 0,
        "MemoryClockRate": MEMORY_CLOCK_RATE_KHZ,
        "GlobalMemoryBusWidth": MEMORY_BUS_WIDTH,
        "L2CacheSize": L2_CACHE_SIZE,
        "MaxThreadsPerMultiProcessor": lim.max_threads_per_multiprocessor,
        "AsyncEngineCount": 3,
        "UnifiedAddressing": 1,
        "PciDomainId": 0,
        "TexturePitchAlignment": 32,
        "ComputeCapabilityMajor": SM // 10,
        "ComputeCapabilityMinor": SM % 10,
        "StreamPrioritiesSupported": 1,
        "GlobalL1CacheSupported": 1,
        "LocalL1CacheSupported": 1,
        "MaxSharedMemoryPerMultiprocessor": lim.shared_per_multiprocessor,
        "MaxRegistersPerMultiprocessor": lim.regs_per_multiprocessor,
        "ManagedMemory": 1,
        "IsMultiGpuBoard": 0,
        "MultiGpuBoardGroupID": 0,
        "HostNativeAtomicSupported": 0,
        "SingleToDoublePrecisionPerfRatio": 32,
        "PageableMemoryAccess": 0,
        "ConcurrentManagedAccess": 1,               # host and device may write different bytes of a page
        "ComputePreemptionSupported": 1,
        "CanUseHostPointerForRegisteredMem": 0,
        "MaxSharedMemoryPerBlockOptin": lim.shared_per_block_optin,
        "CanFlushRemoteWrites": 0,
        "HostRegisterSupported": 0,
        "MaxBlocksPerMultiprocessor": lim.max_blocks_per_multiprocessor,
        "MaxPersistingL2CacheSize": lim.persisting_l2_bytes,
        "MaxAccessPolicyWindowSize": 0,
        "ReservedSharedMemoryPerBlock": 0,
        "MaxTexture1DWidth": 1 << 17, "MaxTexture2DWidth": 1 << 17, "MaxTexture2DHeight": 1 << 16,
        "MaxTexture3DWidth": 1 << 14, "MaxTexture3DHeight": 1 << 14, "MaxTexture3DDepth": 1 << 14,
        "MaxTexture1DLayeredWidth": 1 << 15, "MaxTexture1DLayeredLayers": 2048,
        "MaxTexture2DLayeredWidth": 1 << 15, "MaxTexture2DLayeredHeight": 1 << 15,
        "MaxTexture2DLayeredLayers": 2048, "MaxTexture2DGatherWidth": 1 << 15, "MaxTexture2DGatherHeight": 1 << 15,
        "MaxTexture1DLinearWidth": 1 << 28, "MaxTexture2DLinearWidth": 1 << 17, "MaxTexture2DLinearHeight": 65000,
        "MaxTexture2DLinearPitch": 2097120, "MaxSurface1DWidth": 1 << 15, "MaxSurface2DWidth": 1 << 17,
        "MaxSurface2DHeight": 1 << 16, "MaxSurface3DWidth": 1 << 14, "MaxSurface3DHeight": 1 << 14,
        "MaxSurface3DDepth": 1 << 14, "MaxSurface1DLayeredWidth": 1 << 15, "MaxSurface1DLayeredLayers": 2048,
        "MaxSurface2DLayeredWidth": 1 << 15, "MaxSurface2DLayeredHeight": 1 << 15,
        "MaxSurface2DLayeredLayers": 2048,
        "MemoryPoolsSupported": 1,
        "MemoryPoolSupportedHandleTypes": 0,
        "PageableMemoryAccessUsesHostPageTables": 0,
        "DirectManagedMemAccessFromHost": 0,
        "ClusterLaunch": 0,
    }
    named.update(REMOTED_DEVICE_ATTRS)                 # what pyvgpu provides between hosts (the client says the same)
    return {DEVICE_ATTRS["cudaDevAttr" + name]: value for name, value in named.items()}


def _lt_offered(epilogue: int) -> None:
    """The emulated GPU offers no algorithm for what NVIDIA's cuBLASLt refuses on GPUs (cublaslt_spec.EPILOGUES):
    NumPy could compute it, but a program must not come to depend on what no real GPU would run."""
    why = lt_spec.epi_no_gpu_algorithm(epilogue)
    if why:
        raise blas.BlasError(blas_spec.NOT_SUPPORTED, f"{lt_spec.EPILOGUE[epilogue].name}: {why}")


@dataclass
class EmuStream:
    flags: int
    priority: int


@dataclass
class EmuEvent:
    flags: int
    recorded_at: float | None = None


class _RunLaunches:
    """The launches of one run of FAST ops (EmuContext.run_fast), each run as EmuContext.launch runs it, their
    set-up shared: no FAST op changes a limit, a function attribute or a peer (base.FAST_METHODS: launches, memsets,
    copies, event records and stream waits), so the limits, peers and context objects are read once (_run_env),
    and each configuration's plan is looked up once (EmuModule.plan_for, its translation's LRU place touched then)
    and kept for the run's later launches of it, until making a plan drops a translation (CodeBudget.drops) whose
    plans the run may hold. A launch right after another skips the checks that one made as it ended (Launch.run's
    `checked`)."""

    __slots__ = ("ctx", "plans", "common", "drops", "failed")

    def __init__(self, ctx: EmuContext) -> None:
        self.ctx = ctx
        self.plans: dict[tuple, tuple[Any, Any, str]] = {}   # (module, function, grid, block, shmem) -> its plan
        self.common = ctx._run_env()
        self.drops = self._drops()
        self.failed = 0                   # the index of the launch that raised (run)

    def _drops(self) -> int:
        budget = self.ctx._code           # (made by the first module load: there is one when a launch runs)
        return budget.drops if budget is not None else 0

    def run(self, ops: Sequence[FastOp], i: int, checked: bool) -> int:
        """ops[i], a launch, and the launches right after it of the same function and configuration (one plan
        lookup for them). → the index after the last one; a launch's failure is raised, `self.failed` its index."""
        module, kernel, grid, block, shmem, _, _ = ops[i].args
        ctx = self.ctx
        self.failed = i                   # (where plan_for refuses the configuration)
        key = (id(module), id(kernel), grid, block, shmem)    # the run's ops hold module and kernel: ids are theirs
        got = self.plans.get(key)
        if got is None:
            emu_module = module.handle[0]
            plan = emu_module.plan_for(kernel.handle, tuple(grid), tuple(block), shmem, ctx._dyn_max(kernel),
                                       ctx._limits[0])
            if self._drops() != self.drops:   # making this plan dropped a translation (only translations do, and
                self.plans.clear()            # a run makes none but here): the others' plans may be stale
                self.drops = self._drops()
            got = self.plans[key] = (emu_module.run_plan, plan, kernel.handle)
        run_plan, plan, name = got
        common = self.common
        n = len(ops)
        while i < n:
            method, args = ops[i]
            if method != "launch" or args[0] is not module or args[1] is not kernel or args[2] != grid \
                    or args[3] != block or args[4] != shmem:
                break
            self.failed = i
            ctx._run_plan(run_plan, plan, name, args[5], common, checked)
            checked = True
            i += 1
        return i


class EmuBackend(Backend):
    name = "emu"

    def __init__(self, devices: int = 1, memory: int = 4 << 30, slowdown: float = 1.0,
                 instance: str = "", limits: EmuLimits | None = None) -> None:
        if devices < 1:
            raise ValueError("need at least one emulated device")
        if not 0 < memory <= VA_WINDOW_BYTES:
            raise ValueError(f"emulated memory must be in 1..{VA_WINDOW_BYTES} bytes")
        if slowdown < 1.0:
            raise ValueError("slowdown factor must be >= 1")
        self.ndevices = devices
        self.memory = memory
        self.slowdown = slowdown
        self.instance = instance or f"{socket.gethostname()}"
        self.limits = limits or EmuLimits()
        # Budget shared by all sessions of one device; touched from several worker threads, hence the lock.
        self._budget_lock = threading.Lock()
        self._budget_used = [0] * devices

    def devices(self) -> list[dict[str, Any]]:
        return [self._snapshot(r) for r in range(self.ndevices)]

    def _snapshot(self, r: int) -> dict[str, Any]:
        lim = self.limits
        return {
            "name": EMU_NAME, "total_mem": self.memory, "major": SM // 10, "minor": SM % 10,
            "multiprocessors": lim.multiprocessors, "warp_size": lim.warp_size,
            "max_threads_per_block": lim.max_threads_per_block, "max_block_dim": list(lim.max_block_dim),
            "max_grid_dim": list(lim.max_grid_dim), "shared_mem_per_block": lim.shared_per_block,
            "shared_mem_per_multiprocessor": lim.shared_per_multiprocessor, "regs_per_block": lim.regs_per_block,
            "clock_rate_khz": CLOCK_RATE_KHZ, "memory_clock_rate_khz": MEMORY_CLOCK_RATE_KHZ,
            "memory_bus_width": MEMORY_BUS_WIDTH, "l2_cache_size": L2_CACHE_SIZE,
            "max_threads_per_multiprocessor": lim.max_threads_per_multiprocessor, "total_const_mem": lim.const_bytes,
            "uuid": uuid.uuid5(uuid.NAMESPACE_DNS, f"pyvgpu-emu/{self.instance}/{r}").bytes,
            "pci_bus_id": f"0000:{r + 1:02x}:00.0", "attrs": emu_attrs(lim), "backend": self.name,
            "peers": [o for o in range(self.ndevices) if o != r] if PEER_KERNEL_ACCESS else [],
            "vmm_granularity": GRANULARITY,
        }

    def open_context(self, ordinal: int, va_base: int, session_id: int) -> "EmuContext":
        return EmuContext(self, ordinal, va_base + ordinal * VA_WINDOW_BYTES)

    # -- shared memory budget
    def reserve(self, ordinal: int, nbytes: int) -> None:
        with self._budget_lock:
            if self._budget_used[ordinal] + nbytes > self.memory:
                raise CudaError("cudaErrorMemoryAllocation",
                                f"emulated device {ordinal}: {nbytes} B requested, "
                                f"{self.memory - self._budget_used[ordinal]} B free")
            self._budget_used[ordinal] += nbytes

    def release(self, ordinal: int, nbytes: int) -> None:
        with self._budget_lock:
            self._budget_used[ordinal] = max(0, self._budget_used[ordinal] - nbytes)

    def free_bytes(self, ordinal: int) -> int:
        with self._budget_lock:
            return self.memory - self._budget_used[ordinal]


def _rounded(size: int) -> int:
    return (max(size, 1) + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class EmuBlasHandle:
    """A cuBLAS handle of the emulated device: it holds only what the client set on it."""
    workspace: tuple[int, int] = (0, 0)


class EmuContext(EmuArrays, DeviceContext):
    # Every stream is the worker's queue, so once it is empty the LOOP ops' queries answer from state alone, and the
    # small work ops finish at once (base.answers_on_loop; the server bounds their bytes; launches only when
    # tiny_launch says so).
    answers_on_loop = True

    def __init__(self, backend: EmuBackend, ordinal: int, base: int) -> None:
        self.backend = backend
        self.ordinal = ordinal
        self.mem = DeviceMemory(base, backend.memory)
        self._charged = 0          # bytes of the shared budget this context holds
        self._stdout = bytearray()
        self._stdout_dropped = 0
        self._limits = dict(LIMIT_DEFAULTS)
        self._cancelled = threading.Event()     # set from the loop thread when the session's client is gone
        self._modules = 0                       # modules loaded (EmuLimits.max_modules)
        self._code = None                       # emu.codebudget.CodeBudget: what they hold (EmuLimits.max_code_bytes)
        self._aligned: dict[int, int] = {}     # page-aligned managed address -> its allocation's start
        self.peers: dict[int, DeviceContext] = {}   # contexts whose memory this context's kernels may use
        self._vmm: EmuVmm | None = None              # reserved ranges (virtual memory management), on first use
        self._physical: set[Physical] = set()        # physical allocations not yet released
        self.heap = DeviceHeap(self.malloc)          # device-side malloc/free: reserved by its first kernel

    # ------------------------------------------------------------------ memory
    def _charge(self, nbytes: int) -> None:
        self.backend.reserve(self.ordinal, nbytes)
        self._charged += nbytes

    def _uncharge(self, nbytes: int) -> None:
        nbytes = min(nbytes, self._charged)
        self.backend.release(self.ordinal, nbytes)
        self._charged -= nbytes

    def mem_info(self) -> tuple[int, int]:
        return self.backend.free_bytes(self.ordinal), self.backend.memory

    def malloc(self, size: int) -> int:
        need = _rounded(size)
        self._charge(need)
        try:
            return self.mem.alloc(size)
        except CudaError:
            self._uncharge(need)
            raise

    def malloc_managed(self, size: int, align: int) -> int:
        if align <= ALIGN:
            return self.malloc(size)
        start = self.malloc(size + align - ALIGN)      # allocations are ALIGN-aligned: room to reach `align`
        ptr = (start + align - 1) // align * align
        self._aligned[ptr] = start
        return ptr

    def free(self, ptr: int) -> None:
        ptr = self._aligned.pop(ptr, ptr)
        hit = self.mem.allocation_at(ptr)
        self.mem.free(ptr)
        if hit is not None:
            self._uncharge(_rounded(hit[1]))

    def host_view(self, ptr: int, size: int) -> memoryview | None:
        if self.mem.region_at(ptr) is not self.mem:
            return None             # a reserved range: its pages may be unmapped once the worker moves on
        return memoryview(self.mem.view(ptr, size)).cast("B")

    # ------------------------------------------------------------------ virtual memory management (emu/vmm.py)
    def vmm_granularity(self) -> int:
        return GRANULARITY

    def _space(self) -> EmuVmm:
        if self._vmm is None:
            w = VA_WINDOW_BYTES
            va_base = self.mem.base - self.ordinal * w
            heap = -(-self.backend.memory // GRANULARITY) * GRANULARITY
            self._vmm = EmuVmm(self.mem, (self.mem.base, w), self.mem.base + heap,
                               [(va_base + r * w, heap) for r in range(self.backend.ndevices)],
                               MAX_RESERVED_FACTOR * self.backend.memory)
        return self._vmm

    def vmm_reserve(self, size: int, align: int, hint: int) -> int:
        return self._space().reserve(size, align, hint)

    def vmm_free(self, addr: int, size: int) -> None:
        self._space().free(addr)

    def vmm_create(self, size: int) -> Physical:
        self._charge(size)
        try:
            phys = Physical(size)
        except CudaError:
            self._uncharge(size)
            raise
        self._physical.add(phys)
        return phys

    def vmm_release(self, obj: Physical) -> None:
        self._physical.discard(obj)
        obj.close()
        self._uncharge(obj.size)

    def vmm_map(self, addr: int, size: int, obj: Physical) -> None:
        self._space().range_of(addr).map(addr, size, obj)

    def vmm_unmap(self, addr: int, size: int) -> None:
        self._space().range_of(addr).unmap(addr)

    def vmm_set_access(self, addr: int, size: int, flags: int) -> None:
        self._space().range_of(addr).set_access(addr, size, flags != 0)

    def _vmm_drop(self) -> None:
        """Every reservation and physical allocation goes (reset, close)."""
        if self._vmm is not None:
            for r in self._vmm.ranges.values():
                r.free_all()
            self._vmm.close()
            self._vmm = None
        for phys in self._physical:
            phys.close()
        self._physical.clear()

    def memcpy_htod(self, dst: int, data: bytes | memoryview, stream: Any) -> None:
        self.mem.write(dst, data)

    def memcpy_dtoh(self, src: int, size: int, stream: Any) -> bytes:
        # Copy out now: later device work on this worker may change the heap before the reply is written.
        return bytes(self.mem.read(src, size))

    def memcpy_dtod(self, dst: int, src: int, size: int, stream: Any) -> None:
        self.mem.copy(dst, src, size)

    @staticmethod
    def _check_2d(pitch: int, width: int, height: int) -> None:
        if width > pitch and height > 1:
            raise CudaError("cudaErrorInvalidPitchValue", f"width {width} > pitch {pitch}")

    def _rows(self, addr: int, pitch: int, width: int, height: int) -> np.ndarray:
        """The height x width bytes at addr, rows pitch apart, as one strided view of the heap (the whole span is
        validated first, so a bad 2D op changes nothing). Every 2D op is one NumPy call: cost follows bytes, not rows."""
        span = self.mem.view(addr, pitch * (height - 1) + width)
        return np.lib.stride_tricks.as_strided(span, shape=(height, width), strides=(pitch, 1))

    def memcpy2d_htod(self, dst: int, dpitch: int, width: int, height: int, data: bytes | memoryview,
                      stream: Any) -> None:
        self._check_2d(dpitch, width, height)
        mv = pack_rows(data, width, height)
        if width == 0 or height == 0:
            return
        self._rows(dst, dpitch, width, height)[...] = np.frombuffer(mv, dtype=np.uint8).reshape(height, width)

    def memcpy2d_dtoh(self, src: int, spitch: int, width: int, height: int, stream: Any) -> bytes:
        self._check_2d(spitch, width, height)
        if width == 0 or height == 0:
            return b""
        return self._rows(src, spitch, width, height).tobytes()

    def memcpy2d_dtod(self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                      stream: Any) -> None:
        self._check_2d(dpitch, width, height)
        self._check_2d(spitch, width, height)
        if width == 0 or height == 0:
            return
        source = self._rows(src, spitch, width, height)
        target = self._rows(dst, dpitch, width, height)
        # NumPy copies through a temporary when the two views overlap (memmove semantics, as cudaMemcpy2D's).
        target[...] = source

    def memset(self, ptr: int, value: int, size: int, stream: Any) -> None:
        self.mem.fill(ptr, value, size)

    def memset2d(self, ptr: int, pitch: int, value: int, width: int, height: int, stream: Any) -> None:
        self._check_2d(pitch, width, height)
        if width == 0 or height == 0:
            return
        self._rows(ptr, pitch, width, height)[...] = value & 0xFF

    def enable_peer(self, peer: DeviceContext) -> None:
        if not PEER_KERNEL_ACCESS:
            raise CudaError("cudaErrorPeerAccessUnsupported", "emulated kernels cannot reach another device's memory")
        if peer.ordinal in self.peers:
            raise CudaError("cudaErrorPeerAccessAlreadyEnabled", f"device {self.ordinal} -> {peer.ordinal}")
        self.peers[peer.ordinal] = peer

    def disable_peer(self, peer: DeviceContext) -> None:
        if peer.ordinal not in self.peers:
            raise CudaError("cudaErrorPeerAccessNotEnabled", f"device {self.ordinal} -> {peer.ordinal}")
        del self.peers[peer.ordinal]
    def memset_elems(self, ptr: int, pitch: int, value: int, elem: int, width: int, height: int,
                     stream: Any) -> None:
        row_bytes = width * elem
        self._check_2d(pitch, row_bytes, height)
        if width == 0 or height == 0:
            return
        row = np.full(width, value, dtype={1: np.uint8, 2: np.uint16, 4: np.uint32}[elem]).view(np.uint8)
        self._rows(ptr, pitch, row_bytes, height)[...] = row       # one row, broadcast over all of them

    # ------------------------------------------------------------------ modules and kernels
    def module_load(self, image: bytes) -> LoadedModule:
        try:
            from pyvgpu_daemon.emu.codebudget import CodeBudget  # written alongside; imported lazily on purpose
            from pyvgpu_daemon.emu.module import EmuModule
        except ImportError as exc:
            raise CudaError("cudaErrorNotSupported", f"kernel emulation unavailable: {exc}") from None
        lim = self.backend.limits
        if self._modules >= lim.max_modules:
            raise CudaError("cudaErrorMemoryAllocation", f"device {self.ordinal}: {self._modules} modules loaded, the "
                                                         f"emulator's bound per session")
        if self._code is None:
            self._code = CodeBudget(lim.max_code_bytes)
        before = set(self.mem.allocations())
        used_before = self.mem.used
        module = EmuModule.load(image, self.mem, sm=SM, limits=lim, budget=self._code)
        owned = [a for a in self.mem.allocations() if a not in before]
        grown = self.mem.used - used_before
        try:
            self._charge(grown)
        except CudaError:
            module.unload()
            raise
        self._modules += 1
        kernels = {name: KernelDesc(name, [(int(o), int(s)) for o, s in info.params], dict(info.attrs), name)
                   for name, info in module.kernels.items()}
        variables = {name: (int(a), int(s)) for name, (a, s) in module.variables.items()}
        return LoadedModule((module, owned, grown), kernels, variables)

    def module_unload(self, module: LoadedModule) -> None:
        emu_module, owned, grown = module.handle
        emu_module.unload()               # frees the module's variables
        self._uncharge(grown)
        self._modules -= 1

    def _dyn_max(self, kernel: KernelDesc) -> int:
        """The function's cudaFuncAttributeMaxDynamicSharedMemorySize."""
        static = int(kernel.attrs.get("shared_size_bytes", 0))
        lim = self.backend.limits
        return int(kernel.attrs.get("max_dynamic_shared_size_bytes", max(0, lim.shared_per_block - static)))

    def tiny_launch(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
                    block: tuple[int, int, int], shmem: int) -> bool:
        if self.backend.slowdown > 1.0:
            return False                        # --emu-slowdown stretches every launch: never on the loop
        return module.handle[0].tiny(kernel.handle, grid, block, shmem, self._dyn_max(kernel), self._limits[0])

    def _run_env(self) -> tuple:
        """EmuModule.run_plan's arguments after a launch's parameters, in its order: the texture and surface
        objects, the peers' memory, the session's cancellation, cudaLimitPrintfFifoSize, the device turn, the
        heap and cudaLimitMallocHeapSize."""
        peers = tuple(p.mem for p in self.peers.values()) if self.peers else ()
        return (self.resources, peers, self._cancelled, self._limits[1], self.turn, self.heap, self._limits[2])

    def _run_plan(self, run_plan, plan, name: str, params, env: tuple, checked: bool) -> None:
        """One launch of `plan` (run_plan: its module's), its printf output kept, also when it fails."""
        try:
            out = run_plan(plan, name, bytes(params), *env, checked)
        except CudaError as exc:
            self._keep_output(getattr(exc, "stdout", b"") or b"")
            raise
        self._keep_output(out.stdout, out.dropped)

    def launch(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
               block: tuple[int, int, int], shmem: int, params: bytes, stream: Any,
               cooperative: bool = False) -> None:
        emu_module = module.handle[0]
        t0 = time.perf_counter()
        plan = emu_module.plan_for(kernel.handle, tuple(grid), tuple(block), shmem, self._dyn_max(kernel),
                                   self._limits[0], cooperative)      # _limits[0]: cudaLimitStackSize
        self._run_plan(emu_module.run_plan, plan, kernel.handle, params, self._run_env(), False)
        if self.backend.slowdown > 1.0:
            self._stretch(kernel.name, (time.perf_counter() - t0) * (self.backend.slowdown - 1.0))

    def launch_cooperative(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
                           block: tuple[int, int, int], shmem: int, params: bytes, stream: Any) -> None:
        self.launch(module, kernel, grid, block, shmem, params, stream, cooperative=True)

    # ------------------------------------------------------------------ runs of fast ops (the compiled frame path)
    def run_fast(self, ops: Sequence[FastOp]) -> tuple[int, BaseException | None]:
        """DeviceContext.run_fast in one loop: memsets and event records without a method call each (records
        with nothing run between them share one clock read: the time they completed), and the run's launches
        sharing their set-up (_RunLaunches). --emu-slowdown stretches each launch: then op by op through the
        methods."""
        if self.backend.slowdown > 1.0:
            return super().run_fast(ops)
        n = len(ops)
        i = 0
        fill = self.mem.fill
        now: float | None = None          # the clock for the records since the last op that did work
        launches: _RunLaunches | None = None
        checked = False                   # the last op was a launch, which ended with its checks (Launch.run)
        try:
            while i < n:
                method, args = ops[i]
                if method == "launch":
                    if launches is None:
                        launches = _RunLaunches(self)
                    try:
                        i = launches.run(ops, i, checked)
                    except Exception as exc:  # noqa: BLE001 - that launch's failure (base.run_fast's contract)
                        return launches.failed, exc
                    checked = True
                    now = None
                    continue
                elif method == "event_record":
                    if now is None:
                        now = time.monotonic()
                    args[0].recorded_at = now
                elif method == "memset":
                    fill(args[0], args[1], args[2])
                    now = None
                    checked = False
                elif method != "stream_wait_event":       # in-order worker: a wait has nothing to wait for
                    getattr(self, method)(*args)
                    now = None
                    checked = False
                i += 1
        except Exception as exc:  # noqa: BLE001 - op i's failure (base.run_fast's contract)
            return i, exc
        return n, None

    STRETCH_STEP_S = 0.005

    def _stretch(self, name: str, seconds: float) -> None:
        """--emu-slowdown: the kernel lasts F× its emulated time so load balancing sees a slower GPU; the stretch
        is device time like the rest of the kernel, offered to waiting sessions every STRETCH_STEP_S."""
        end = time.perf_counter() + seconds
        while (left := end - time.perf_counter()) > 0:
            if self._cancelled.wait(min(left, self.STRETCH_STEP_S)):
                raise CudaError("cudaErrorLaunchTimeout", f"{name}: cancelled, the session's client is gone")
            if self.turn is not None:
                t = time.perf_counter()
                self.turn.preempt()
                end += time.perf_counter() - t            # a pause is not part of the kernel's time

    def cancel(self) -> None:
        self._cancelled.set()

    def _keep_output(self, stdout: bytes, dropped: int = 0) -> None:
        """A launch's printf output, and what its FIFO dropped, kept for the client; a failed kernel's too (it may
        have printed before a trap)."""
        if stdout or dropped:
            self._stdout_dropped += dropped
            self._append_stdout(self._fifo(stdout))

    def _fifo(self, data: bytes) -> bytes:
        """One launch's printf output as the device's printf FIFO (cudaLimitPrintfFifoSize) holds it."""
        cap = self._limits[1]
        if len(data) > cap:
            cut = data.rfind(b"\n", 0, cap) + 1 or cap     # whole lines, as a GPU drops whole printf records
            self._stdout_dropped += len(data) - cut
            data = data[:cut]
        return data

    def _append_stdout(self, data: bytes) -> None:
        room = max(STDOUT_LIMIT, self._limits[1]) - len(self._stdout)
        if len(data) > room:
            self._stdout_dropped += len(data) - max(room, 0)
            data = data[:max(room, 0)]
        self._stdout += data

    def take_stdout(self) -> bytes:
        out = bytes(self._stdout)
        self._stdout.clear()
        if self._stdout_dropped:
            log.warning("device %d: dropped %d bytes of printf output (printf FIFO %d B, buffer limit %d B)",
                        self.ordinal, self._stdout_dropped, self._limits[1], STDOUT_LIMIT)
            self._stdout_dropped = 0
        return out

    def func_set_attr(self, module: LoadedModule, kernel: KernelDesc, attr: int, value: int) -> None:
        if attr == FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE:
            room = self.backend.limits.shared_per_block_optin - int(kernel.attrs.get("shared_size_bytes", 0))
            if not 0 <= value <= room:
                raise CudaError("cudaErrorInvalidValue",
                                f"{kernel.name}: max dynamic shared memory {value} B, the device allows {room} B")
            kernel.attrs["max_dynamic_shared_size_bytes"] = value
        elif attr == FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT:
            if not -1 <= value <= 100:
                raise CudaError("cudaErrorInvalidValue", f"{kernel.name}: shared memory carveout {value}")
            kernel.attrs["preferred_shmem_carveout"] = value     # a hint: the emulator has no L1 to split
        else:
            raise CudaError("cudaErrorInvalidValue", f"{kernel.name}: cudaFuncAttribute {attr} cannot be set")

    # ------------------------------------------------------------------ limits
    def set_limit(self, limit: int, value: int) -> None:
        lim = self.backend.limits
        if limit == 3 and value > lim.max_sync_depth:
            raise CudaError("cudaErrorInvalidValue", f"{LIMIT_NAMES[limit]} {value} > {lim.max_sync_depth}")
        if limit == 5:
            value = min(value, lim.max_l2_fetch_granularity)     # a hint, clamped as the driver does
        elif limit == 6:
            value = min(value, lim.persisting_l2_bytes)          # no persisting L2 on the emulated device
        elif limit == 2 and self.heap.reserved and value != self._limits[2]:
            raise CudaError("cudaErrorInvalidValue", f"{LIMIT_NAMES[limit]}: a kernel using device malloc/free "
                                                     f"has run, the heap of {self.heap.size} B is in place")
        elif limit == 1 and value > MAX_PRINTF_FIFO:
            raise CudaError("cudaErrorMemoryAllocation", f"{LIMIT_NAMES[limit]} {value} > {MAX_PRINTF_FIFO}")
        self._limits[limit] = value

    def get_limit(self, limit: int) -> int:
        return self._limits[limit]

    # ------------------------------------------------------------------ streams and events
    def stream_create(self, flags: int, priority: int) -> EmuStream:
        return EmuStream(flags, priority)

    def stream_destroy(self, stream: Any) -> None:
        pass

    def stream_sync(self, stream: Any) -> None:
        pass  # in-order worker: everything before this op is already done

    def stream_query(self, stream: Any) -> bool:
        return True

    def stream_wait_event(self, stream: Any, event: Any, flags: int) -> None:
        pass

    def event_create(self, flags: int) -> EmuEvent:
        return EmuEvent(flags)

    def event_destroy(self, event: Any) -> None:
        pass

    def event_record(self, event: EmuEvent, stream: Any) -> None:
        event.recorded_at = time.monotonic()

    def event_sync(self, event: Any) -> None:
        pass

    def event_query(self, event: Any) -> bool:
        return True

    def event_time(self, event: EmuEvent) -> float | None:
        if event.flags & EVENT_DISABLE_TIMING or event.recorded_at is None:
            return None
        return event.recorded_at * 1000.0

    def event_elapsed(self, start: EmuEvent, end: EmuEvent) -> float:
        if (start.flags | end.flags) & EVENT_DISABLE_TIMING:
            raise CudaError("cudaErrorInvalidResourceHandle", "event created with cudaEventDisableTiming")
        if start.recorded_at is None or end.recorded_at is None:
            raise CudaError("cudaErrorInvalidResourceHandle", "event was never recorded")
        return (end.recorded_at - start.recorded_at) * 1000.0

    def synchronize(self) -> None:
        pass

    # ------------------------------------------------------------------ cuBLAS
    def blas_create(self) -> EmuBlasHandle:
        return EmuBlasHandle()

    def blas_destroy(self, handle: EmuBlasHandle) -> None:
        pass

    def blas_set_workspace(self, handle: EmuBlasHandle, ptr: int, size: int) -> None:
        handle.workspace = (ptr, size)      # NumPy needs none; kept so the handle's state is what the client set

    def blas_call(self, handle: EmuBlasHandle, family: str, stream: Any, pmode: int, math: int,
                  args: dict[str, Any]) -> bytes | None:
        # One ordered worker per (session, device): the call runs after everything queued before it, as on its
        # stream; math modes only allow a GPU to be less precise, the emulation always computes as documented.
        return blas.execute(family, self.mem, args)

    def lt_matmul(self, stream: Any, args: dict[str, Any]) -> None:
        _lt_offered(args["epilogue"])
        lt.execute(self.mem, args)       # in the worker's order, as on its stream (see blas_call)

    def lt_heuristic(self, problem: dict[str, int], aligns: tuple[int, int, int, int]) -> tuple[int, int]:
        _lt_offered(problem["epilogue"])
        return 1, 0                      # NumPy runs every other problem the table accepts, with no workspace

    # ------------------------------------------------------------------ tensor maps
    def tensor_map_encode(self, request: Any) -> bytes:
        # no TMA instructions run here (sm_90 SASS): a descriptor of the emulator's own, after the documented checks
        tensor_map.check(request)
        return tensor_map.emulated(request)

    def tensor_map_replace_address(self, tmap: bytes, addr: int) -> bytes:
        return tensor_map.emulated_replace_address(tmap, addr)

    def reset(self) -> None:
        self._vmm_drop()
        self.mem.free_all()
        self.heap.drop()
        self._aligned.clear()
        self.drop_resources()
        self._uncharge(self._charged)
        self._stdout.clear()
        self._limits = dict(LIMIT_DEFAULTS)
        self._modules = 0
        self._code = None                 # the modules are gone with the reset, and what they held
        self.peers.clear()

    def close(self) -> None:
        try:
            self.reset()
        except Exception:  # noqa: BLE001 - close must not raise
            log.exception("device %d: error while releasing emulated memory", self.ordinal)
        self.mem.close()
