"""Real GPUs through cuda-python's driver API (`from cuda.bindings import driver`).

One CUDA context per (session, device), created with cuCtxCreate on that pair's worker thread and made current
there: destroying it at session end frees everything the client held, whatever state it left behind, and a sticky
fault in one client's context cannot poison another's. Kernel images are the fatbins the client ships;
cuModuleLoadData loads them, kernels are enumerated from the module itself (cuModuleGetFunctionCount +
cuModuleEnumerateFunctions + cuFuncGetName), parameter layouts come from cuFuncGetParamCount/cuFuncGetParamInfo, and
launches hand the client's packed parameter buffer to cuLaunchKernel through CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE.
Module globals are listed from the ELF symbol tables of the fatbin's cubins (the driver has no enumeration call) and
resolved with cuModuleGetGlobal (cuda_image.py).

Only entry points the loaded driver has are called: cuda_driver.py asks the driver (cuGetProcAddress) at start, logs
its version and every fallback once, and an older driver's missing calls are done another way (parameter counts
probed, kernels and layouts read from the image, an older ABI called through its pointer).

The `driver` module is injectable (tests/daemon/test_daemon_cuda.py keeps a few cases the real chain cannot produce).
"""
from __future__ import annotations

import ctypes
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from pyvgpu.cuda_enums import DEVICE_ATTRS
from pyvgpu.protocol import (ERROR_NAMES, FUNC_ATTR_CLUSTER_FIRST, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE,
                             FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT, VA_WINDOW_BYTES)
from pyvgpu_daemon.backends import cublas_cuda, cublaslt_cuda
from pyvgpu_daemon.backends.base import Backend, DeviceContext, KernelDesc, LoadedModule, pack_rows
from pyvgpu_daemon.backends.cuda_arrays import CudaArrays
from pyvgpu_daemon.backends.cuda_calls import MEMSET_D8, DriverCalls, handle
from pyvgpu_daemon.backends.cuda_clock import EventClock
from pyvgpu_daemon.backends.cuda_driver import DriverEntryPoints, Lookup, proc_lookup
from pyvgpu_daemon.backends.cuda_image import image_globals, image_kernels
from pyvgpu_daemon.backends.cuda_staging import StagingPool
from pyvgpu_daemon.backends.cuda_tensor_map import CudaTensorMaps
from pyvgpu_daemon.backends.cuda_turns import GpuTime
from pyvgpu_daemon.backends.cuda_vmm import WindowMemory, WindowSpaces
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.lent import Lent

log = logging.getLogger("pyvgpu.daemon")

# CUdevice_attribute numbers equal cudaDeviceAttr numbers; the snapshot carries every one CUDA 13 defines (the driver
# answers each; one it does not know is left out).
SNAPSHOT_ATTRS = tuple(sorted(DEVICE_ATTRS.values()))
FUNC_ATTRS = {
    "max_threads_per_block": "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "shared_size_bytes": "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
    "const_size_bytes": "CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES",
    "local_size_bytes": "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
    "num_regs": "CU_FUNC_ATTRIBUTE_NUM_REGS",
    "ptx_version": "CU_FUNC_ATTRIBUTE_PTX_VERSION",
    "binary_version": "CU_FUNC_ATTRIBUTE_BINARY_VERSION",
    "max_dynamic_shared_size_bytes": "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
}
# cudaFuncSetAttribute: cudaFuncAttribute value → (CUfunction_attribute name, KernelDesc.attrs key)
FUNC_SET_ATTRS = {
    FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE: ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
                                        "max_dynamic_shared_size_bytes"),
    FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT: ("CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT",
                                         "preferred_shmem_carveout"),
    # thread block clusters (sm_90 and later; the driver refuses them elsewhere): cuBLAS's cublasCreate sets
    # NON_PORTABLE_CLUSTER_SIZE_ALLOWED on an H100
    **{FUNC_ATTR_CLUSTER_FIRST + i: (f"CU_FUNC_ATTRIBUTE_{name.upper()}", name) for i, name in enumerate((
        "required_cluster_width", "required_cluster_height", "required_cluster_depth",
        "non_portable_cluster_size_allowed", "cluster_scheduling_policy_preference"))},
}
EVENT_DISABLE_TIMING = 0x2
VMM_SUPPORTED_ATTR = 102           # CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
VMM_CALLS = ("cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
             "cuMemSetAccess", "cuMemGetAllocationGranularity")


def _load_driver() -> Any:
    from cuda.bindings import driver
    return driver


def probe(driver: Any = None) -> tuple[int, str]:
    """(number of usable GPUs, reason when 0). Never raises: a missing driver is an answer, not a crash."""
    try:
        drv = driver or _load_driver()
    except Exception as exc:  # noqa: BLE001
        return 0, f"cuda-python not importable: {exc}"
    try:
        (err,) = drv.cuInit(0)
        if int(err) != 0:
            return 0, f"cuInit failed: {getattr(err, 'name', err)}"
        err, count = drv.cuDeviceGetCount()
        if int(err) != 0:
            return 0, f"cuDeviceGetCount failed: {getattr(err, 'name', err)}"
        return int(count), "" if count else "the driver reports zero devices"
    except Exception as exc:  # noqa: BLE001
        return 0, f"{type(exc).__name__}: {exc}"


def to_cuda_error(err: Any, what: str) -> CudaError:
    """CUresult → CudaError. The runtime reuses the driver's numbers for every code a client can meet here."""
    code = int(err)
    name = getattr(err, "name", str(code))
    return CudaError(code if code in ERROR_NAMES else "cudaErrorUnknown", f"{what}: {name}")


def driver_error(drv: Any, code: int, what: str) -> CudaError:
    """A CUresult number (the compiled calls' answer) → the CudaError to_cuda_error gives for the bindings' enum."""
    try:
        return to_cuda_error(drv.CUresult(code), what)
    except ValueError:                       # not a CUresult this cuda-bindings knows: the number stands for it
        return to_cuda_error(code, what)


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-python return tuple (err, *values), raising on failure; → None, the value, or a tuple."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        raise to_cuda_error(err, what)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


# ---------------------------------------------------------------------------------------------- backend
class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, driver: Any = None, cublas: Any = None, cublaslt: Any = None,
                 lookup: Lookup | None = None) -> None:
        self.drv = driver or _load_driver()
        if lookup is None and driver is None:
            lookup = proc_lookup()      # the loaded libcuda.so.1's own (an injected driver has none unless given)
        self.cublas = cublas           # a cublas_cuda.Cublas (tests inject one); None: loaded on first use
        self.cublaslt = cublaslt       # a cublaslt_cuda.CublasLt, likewise
        check(self.drv.cuInit(0), "cuInit")
        self.api = DriverEntryPoints.probe(self.drv, lookup)
        log.info("%s", self.api.describe())
        # The fast ops' calls into the driver from compiled code (cuda_calls.py), else through cuda-python.
        self.calls, why = DriverCalls.load(self.api, lambda code, what: driver_error(self.drv, code, what))
        log.info("%s", why)
        # The loop answers queries only where the driver's return at once (CudaContext): not pyvgpu's own driver,
        # whose queries wait behind the emulated GPU's kernels on the chain.
        self.loop_answers = not self.api.forwards
        log.info("queries answered on the event loop" if self.loop_answers else
                 "queries on the sessions' workers (the driver is pyvgpu's own: its calls are round trips)")
        self.count = int(check(self.drv.cuDeviceGetCount(), "cuDeviceGetCount"))
        if self.count < 1:
            raise RuntimeError("no CUDA device")
        self._snapshots = [self._snapshot(i) for i in range(self.count)]
        self.health = DeviceHealth()
        self.windows = WindowSpaces()  # the free window addresses of this process, shared by its sessions' contexts

    def _attr(self, dev: Any, number: int) -> int | None:
        try:
            attr = self.drv.CUdevice_attribute(number)
        except ValueError:
            return None                    # not an attribute of this driver version
        err, value = self.drv.cuDeviceGetAttribute(attr, dev)
        return int(value) if int(err) == 0 else None

    def _snapshot(self, ordinal: int) -> dict[str, Any]:
        drv = self.drv
        dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        raw_name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = raw_name.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw_name, bytes) else str(raw_name)
        total = int(check(drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
        attrs = {n: v for n in SNAPSHOT_ATTRS if (v := self._attr(dev, n)) is not None}
        try:
            uuid_obj = check(drv.cuDeviceGetUuid(dev), "cuDeviceGetUuid")
            uuid = bytes(getattr(uuid_obj, "bytes", b""))[:16]
        except CudaError:
            uuid = b""
        try:
            pci = check(drv.cuDeviceGetPCIBusId(64, dev), "cuDeviceGetPCIBusId")
            pci = pci.split(b"\0", 1)[0].decode() if isinstance(pci, bytes) else str(pci)
        except CudaError:
            pci = ""
        def a(name: str, default: int) -> int:
            return attrs.get(DEVICE_ATTRS["cudaDevAttr" + name], default)
        return {
            "name": name, "total_mem": total, "major": a("ComputeCapabilityMajor", 0),
            "minor": a("ComputeCapabilityMinor", 0), "multiprocessors": a("MultiProcessorCount", 0),
            "warp_size": a("WarpSize", 32), "max_threads_per_block": a("MaxThreadsPerBlock", 1024),
            "max_block_dim": [a("MaxBlockDimX", 1024), a("MaxBlockDimY", 1024), a("MaxBlockDimZ", 64)],
            "max_grid_dim": [a("MaxGridDimX", 0), a("MaxGridDimY", 0), a("MaxGridDimZ", 0)],
            "shared_mem_per_block": a("MaxSharedMemoryPerBlock", 0),
            "shared_mem_per_multiprocessor": a("MaxSharedMemoryPerMultiprocessor", 0),
            "regs_per_block": a("MaxRegistersPerBlock", 0), "clock_rate_khz": a("ClockRate", 0),
            "memory_clock_rate_khz": a("MemoryClockRate", 0), "memory_bus_width": a("GlobalMemoryBusWidth", 0),
            "l2_cache_size": a("L2CacheSize", 0),
            "max_threads_per_multiprocessor": a("MaxThreadsPerMultiProcessor", 0),
            "total_const_mem": a("TotalConstantMemory", 0), "uuid": uuid, "pci_bus_id": pci, "attrs": attrs,
            "backend": self.name,
            "peers": self._peers(dev, ordinal),
            "vmm_granularity": self._vmm_granularity(dev, ordinal),
        }

    def _vmm_granularity(self, dev: Any, ordinal: int) -> int:
        """The device's VMM granularity; 0 where the driver or the device offers no virtual memory management."""
        if not all(self.api.has(n) for n in VMM_CALLS) or not self._attr(dev, VMM_SUPPORTED_ATTR):
            return 0
        try:
            return WindowMemory(self.drv, ordinal, 0, check).granularity()
        except CudaError:
            return 0

    def _peers(self, dev: Any, ordinal: int) -> list[int]:
        """Daemon-local ordinals whose memory kernels of device `ordinal` can use once peer access is enabled."""
        out = []
        for j in range(self.count):
            if j == ordinal:
                continue
            err, can = self.drv.cuDeviceCanAccessPeer(dev, check(self.drv.cuDeviceGet(j), "cuDeviceGet"))
            if int(err) == 0 and can:
                out.append(j)
        return out

    def devices(self) -> list[dict[str, Any]]:
        return self._snapshots

    def open_context(self, ordinal: int, va_base: int, session_id: int) -> "CudaContext":
        # Every allocation lies in the session's window (va_base + ordinal * VA_WINDOW_BYTES): pointers of different
        # GPU hosts never collide, and managed memory's host copy is mapped at the same address (cuda_vmm.py).
        window = va_base + ordinal * VA_WINDOW_BYTES
        return CudaContext(self.drv, ordinal, self.cublas, window, self.cublaslt, self.api,
                           vmm=self._snapshots[ordinal]["vmm_granularity"] > 0, health=self.health,
                           spaces=self.windows, calls=self.calls, loop_answers=self.loop_answers)

    def unusable(self, ordinal: int) -> str:
        return self.health.unusable.get(ordinal, "")


@dataclass
class DeviceHealth:
    """Whether the driver still gives this daemon's process contexts on each device. After a kernel fault a real
    driver may refuse every new context of the process on that device (cuCtxCreate answers the fault): the device is
    then unusable here until the daemon restarts. Logged once when it happens, shown by STATUS (`unusable`), cleared
    when a context is created again (a driver that recovers, or libvcuda's, once every context of the device went)."""
    unusable: dict[int, str] = field(default_factory=dict)     # ordinal -> why
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refused(self, ordinal: int, exc: CudaError) -> None:
        with self._lock:
            first = ordinal not in self.unusable
            self.unusable[ordinal] = str(exc)
        if first:
            log.error("device %d: the driver refuses new contexts of this daemon's process after a kernel fault "
                      "(%s): sessions on the device get that error; NVIDIA's driver keeps it until the process ends, "
                      "so restart the daemon to use the GPU again", ordinal, exc)

    def created(self, ordinal: int) -> None:
        with self._lock:
            was = self.unusable.pop(ordinal, None)
        if was is not None:
            log.info("device %d: the driver gives contexts again; usable", ordinal)


# The context a thread other than a context's worker (the event loop) made current last (CudaContext._here): the
# CUcontext object itself, so a destroyed context's successor, a new object, is made current again.
_CURRENT = threading.local()


@dataclass
class _Event:
    handle: Any
    flags: int
    recorded: bool = False
    anchor: Any = None             # cuda_clock.Anchor of its latest record (None: not timed on the clock)


class CudaContext(CudaArrays, CudaTensorMaps, DeviceContext):
    """Lives on one worker thread; the context is made current there once and stays current.

    The event loop answers this context's queries itself while its worker is idle (answers_on_loop, fastpath.py):
    state queries that need no device work (memory info, stream and event queries, elapsed times, limits), and
    synchronizations once what they wait for has completed (then they return at once). That saves the two thread
    hand-overs of the worker, most of a synchronous call's cost beyond the round trip (bench/README.md). The loop's
    thread serves every session, so each such call first makes this context current there (_here). Device work
    (launches, copies, memsets, records) stays on the worker: a real GPU's queue may block its caller. Not on the
    chain (`loop_answers` False): pyvgpu's own driver answers a query only once the emulated GPU's queued kernels
    ran, which would stall the loop."""

    @staticmethod
    def _check(result: Any, what: str) -> Any:
        return check(result, what)          # CudaArrays' calls

    def __init__(self, drv: Any, ordinal: int, cublas: Any = None, window: int = 0, cublaslt: Any = None,
                 api: DriverEntryPoints | None = None, vmm: bool = False,
                 health: "DeviceHealth | None" = None, spaces: WindowSpaces | None = None,
                 calls: DriverCalls | None = None, loop_answers: bool = False) -> None:
        self.drv = drv
        self.answers_on_loop = loop_answers
        self.calls = calls             # the fast ops from compiled code (cuda_calls.py); None: through cuda-python
        self._default_stream = drv.CUstream(0)
        self.api = api or DriverEntryPoints(version=0, lookup=None)
        self.ordinal = ordinal
        self._cublas = cublas
        self._cublaslt = cublaslt
        self._lt: cublaslt_cuda.LtSession | None = None     # this context's cuBLASLt handle and plans, on first use
        self.dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        self.health = health or DeviceHealth()
        self.ctx: Any = None
        self._cx = 0                   # handle(self.ctx), as the compiled calls take it (cuda_calls.py)
        self._thread = threading.get_ident()        # the worker's, where the context stays current
        self._streams: set[Any] = set()             # the streams made here (a context-wide wait waits for them)
        self.ctx = self._new_context()
        self._cx = handle(self.ctx)
        # Allocations in the session's window (cuda_vmm.py) where the driver offers virtual memory management
        # (every GPU since Pascal), else cuMemAlloc wherever the driver puts them.
        # Sessions of one daemon on the same window share its free lists and what the daemon learnt of its driver
        # (`spaces`): one process, one address space.
        self.mem = WindowMemory(drv, ordinal, window, check, spaces) if vmm else None
        self._prog_ranges: dict[int, int] = {}       # the program's own (VMM_*): reservations, handles, mappings
        self._prog_handles: list[Any] = []
        self._prog_maps: dict[int, int] = {}
        self.staging = self._new_staging()
        self.clock = EventClock(drv, self._elapsed)   # event times for replies (event_times.py)
        self.gpu_time = GpuTime(drv, self._elapsed)   # kernels' GPU time, charged to the session's turn when shared

    def _new_staging(self) -> StagingPool:
        drv = self.drv
        if not (self.api.has("cuMemHostRegister") and self.api.has("cuMemHostUnregister")):
            return StagingPool(None, None, f"device {self.ordinal}")
        return StagingPool(lambda addr, size: check(drv.cuMemHostRegister(addr, size, 0), "cuMemHostRegister"),
                           lambda addr: check(drv.cuMemHostUnregister(addr), "cuMemHostUnregister"),
                           f"device {self.ordinal}")

    def _new_context(self) -> Any:
        """A new context, made current on this (the worker's) thread. A driver that refuses it with a sticky error
        keeps the fault of an earlier context: NVIDIA documents that such an error lasts until the process ends, and
        a real GPU (H200, driver 580) answered cuCtxCreate with CUDA_ERROR_ILLEGAL_ADDRESS after a context of the
        same process faulted and was destroyed. The device is then unusable in this daemon until it restarts: the
        refusal is the session's sticky error (a DEVICE_RESET leaves no context, the next op tries again)."""
        try:
            ctx = self._create()
        except CudaError as exc:
            if not exc.sticky:
                raise
            self.health.refused(self.ordinal, exc)
            raise CudaError(exc.code, f"{exc.message} (the driver refuses new contexts of this daemon's process "
                                      "after a kernel fault; restarting the daemon ends it)", sticky=True) from None
        self.health.created(self.ordinal)
        return ctx

    def _create(self) -> Any:
        if not self.api.has("cuCtxCreate"):
            ctx = self._create_v2()
        else:
            try:
                result = self.drv.cuCtxCreate(None, 0, self.dev)      # cuda-python 13: (params, flags, dev)
            except TypeError:
                result = self.drv.cuCtxCreate(0, self.dev)            # cuda-python 12: (flags, dev)
            ctx = check(result, "cuCtxCreate")
        check(self.drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return ctx

    def _create_v2(self) -> Any:
        """cuCtxCreate_v2 (CUDA 3.2's ABI) through the driver's own pointer: drivers before CUDA 12.5 have no _v4."""
        fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int)(
            self.api.pointer("cuCtxCreate", 3020))
        out = ctypes.c_void_p()
        err = fn(ctypes.byref(out), 0, int(self.dev))
        if err:
            raise to_cuda_error(self.drv.CUresult(err), "cuCtxCreate_v2")
        return self.drv.CUcontext(out.value)

    def _here(self) -> bool:
        """Makes the context current on the calling thread when that is not its worker (the event loop answering
        for it: answers_on_loop), unless this thread made it current last; → whether the caller is the worker.
        (The compiled calls need none of this: they set the context for the call and put the thread's back.)"""
        if threading.get_ident() == self._thread or self.ctx is None:
            return True
        if getattr(_CURRENT, "ctx", None) is not self.ctx:
            check(self.drv.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
            _CURRENT.ctx = self.ctx         # only these contexts' calls set one on a thread other than their worker
        return False

    def loop_may_answer(self, spec: Any, args: Any) -> bool:
        """Queries that need no device work, and waits with nothing left to wait for (every stream and event the op
        names idle; one that names none waits for the whole context: its streams and the legacy default stream)."""
        if not spec.host or self.ctx is None:
            return False                  # device work: on the worker (a real GPU's queue may block the caller)
        if not spec.sync:
            return True
        self._here()
        named = [a for a, t in zip(args(), spec.args[1:]) if t.type in ("stream", "event")]
        waits = named or [None, *self._streams]
        for obj in waits:
            if isinstance(obj, _Event):
                err = self.drv.cuEventQuery(obj.handle)[0]
            else:
                err = self.drv.cuStreamQuery(self._stream(obj))[0]
            if int(err) != 0:
                return False              # still running (or failed: the worker reports it)
        return True

    @contextmanager
    def _host_wait(self) -> Iterator[None]:
        """A host wait on this context's work, inside the scheduler's wait scope (others may use the device). Alone on
        the device, the wait is the GPU running this session's work, which nothing else measures (GpuTime times
        kernels only while the device is shared): it is charged as the session's device time, so the device's busy
        figures (STATUS, NVML utilization, placement) see a lone session's kernels."""
        if not self._here():
            yield                          # the loop, for a wait with nothing left to wait for: no turn to give away
            return
        turn = self.turn
        alone = turn is not None and not turn.shared
        t0 = time.perf_counter()
        with self.wait_scope():
            yield
        if alone:
            turn.charge(time.perf_counter() - t0)

    def _stream(self, stream: Any) -> Any:
        return self._default_stream if stream is None else stream

    def _sync_stream(self, stream: Any) -> None:
        with self._host_wait():
            check(self.drv.cuStreamSynchronize(self._stream(stream)), "cuStreamSynchronize")

    # ------------------------------------------------------------------ memory
    def mem_info(self) -> tuple[int, int]:
        self._here()
        free, total = check(self.drv.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    def malloc(self, size: int) -> int:
        if self.mem is None:
            return int(check(self.drv.cuMemAlloc(size), "cuMemAlloc"))
        return self.mem.malloc(size)

    def free(self, ptr: int) -> None:
        if self.mem is None:
            check(self.drv.cuMemFree(ptr), "cuMemFree")
        else:
            self.mem.free(ptr)

    def malloc_managed(self, size: int, align: int) -> int:
        """Device memory at an address of the session's window, aligned as the client's pages (it maps its host copy
        at the same address); kernels use it as ordinary device memory, the client keeps the copies coherent."""
        if self.mem is None:
            raise CudaError("cudaErrorNotSupported", "managed memory needs virtual memory management, which this "
                                                     "driver does not offer")
        return self.mem.malloc(size, align)

    # ------------------------------------------------------------------ virtual memory management of programs
    # (the rules: pyvgpu_daemon/vmm.py; every range the program reserves without a hint lies in its window too)
    def _vmm(self) -> WindowMemory:
        if self.mem is None:
            raise CudaError("cudaErrorNotSupported", "this driver offers no virtual memory management")
        return self.mem

    def vmm_granularity(self) -> int:
        return self._vmm().granularity()

    def vmm_reserve(self, size: int, align: int, hint: int) -> int:
        ptr = self._vmm().reserve(size, align, hint)
        self._prog_ranges[ptr] = size
        return ptr

    def vmm_free(self, addr: int, size: int) -> None:
        self._vmm().unreserve(addr, size)
        del self._prog_ranges[addr]

    def vmm_create(self, size: int) -> Any:
        handle = check(self.drv.cuMemCreate(size, self._vmm().prop(), 0), "cuMemCreate")
        self._prog_handles.append(handle)
        return handle

    def vmm_release(self, obj: Any) -> None:
        self._prog_handles.remove(obj)
        check(self.drv.cuMemRelease(obj), "cuMemRelease")

    def vmm_map(self, addr: int, size: int, obj: Any) -> None:
        check(self.drv.cuMemMap(addr, size, 0, obj, 0), "cuMemMap")
        self._prog_maps[addr] = size

    def vmm_unmap(self, addr: int, size: int) -> None:
        check(self.drv.cuMemUnmap(addr, size), "cuMemUnmap")
        del self._prog_maps[addr]

    def vmm_set_access(self, addr: int, size: int, flags: int) -> None:
        self._vmm().access(addr, size, self.drv.CUmemAccess_flags(flags))

    def _release_vmm(self) -> None:
        """The program's mappings, handles and ranges, then the backend's own (physical allocations outlive a
        context: they are given back explicitly)."""
        drv = self.drv
        try:
            for addr, size in list(self._prog_maps.items()):
                drv.cuMemUnmap(addr, size)
            for handle in self._prog_handles:
                drv.cuMemRelease(handle)
            if self.mem is not None:
                for addr, size in list(self._prog_ranges.items()):
                    self.mem.unreserve(addr, size)
        finally:        # whatever a faulted context answered, the window starts empty for the next context
            if self.mem is not None:
                self.mem.release_all()
        self._prog_maps.clear()
        self._prog_handles.clear()
        self._prog_ranges.clear()

    def memcpy_htod(self, dst: int, data: bytes | memoryview, stream: Any) -> None:
        if self.calls is not None:
            self.calls.htod(self._cx, dst, data, handle(stream))
            return
        src = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        # From pageable memory the call returns once the bytes are staged, so `data` may be dropped after it.
        check(self.drv.cuMemcpyHtoDAsync(dst, src.ctypes.data, src.nbytes, self._stream(stream)),
              "cuMemcpyHtoDAsync")

    def htod_landed(self, stream: Any) -> None:
        # memcpy_htod's copy (cuda-python's or the compiled call's) returned once its bytes were staged, with the DMA
        # pending, and a non-blocking stream or another context does not wait for this stream: after a synchronous
        # copy, wait for it here, as a synchronous cudaMemcpy from page-locked memory does natively.
        self._sync_stream(stream)

    def _dtoh_into(self, dst: int, src: int, size: int, stream: Any) -> None:
        if self.calls is not None:
            self.calls.dtoh(self._cx, dst, src, size, handle(stream))
        else:
            check(self.drv.cuMemcpyDtoHAsync(dst, src, size, self._stream(stream)), "cuMemcpyDtoHAsync")
        self._sync_stream(stream)

    def _dtoh_array(self, src: int, size: int, stream: Any) -> np.ndarray:
        out = np.empty(size, dtype=np.uint8)
        self._dtoh_into(out.ctypes.data, src, size, stream)
        return out

    def memcpy_dtoh(self, src: int, size: int, stream: Any) -> bytes:
        return self._dtoh_array(src, size, stream).tobytes()

    def memcpy_dtoh_reply(self, src: int, size: int, stream: Any) -> memoryview | Lent:
        """Into a pinned staging buffer the reply is sent from (cuda_staging.py), else into pageable memory that
        the reply is sent from (no copy into bytes either way)."""
        lent = self.staging.copy(size, lambda addr: self._dtoh_into(addr, src, size, stream))
        return lent if lent is not None else memoryview(self._dtoh_array(src, size, stream))

    def memcpy_dtod(self, dst: int, src: int, size: int, stream: Any) -> None:
        check(self.drv.cuMemcpyDtoDAsync(dst, src, size, self._stream(stream)), "cuMemcpyDtoDAsync")

    def _copy2d(self, stream: Any, *, src_host: int = 0, src_dev: int = 0, src_pitch: int, dst_host: int = 0,
                dst_dev: int = 0, dst_pitch: int, width: int, height: int) -> None:
        drv = self.drv
        c = drv.CUDA_MEMCPY2D()
        host, device = drv.CUmemorytype.CU_MEMORYTYPE_HOST, drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
        if src_host:
            c.srcMemoryType, c.srcHost = host, src_host
        else:
            c.srcMemoryType, c.srcDevice = device, src_dev
        if dst_host:
            c.dstMemoryType, c.dstHost = host, dst_host
        else:
            c.dstMemoryType, c.dstDevice = device, dst_dev
        c.srcPitch, c.dstPitch, c.WidthInBytes, c.Height = src_pitch, dst_pitch, width, height
        check(drv.cuMemcpy2DAsync(c, self._stream(stream)), "cuMemcpy2DAsync")

    def memcpy2d_htod(self, dst: int, dpitch: int, width: int, height: int, data: bytes | memoryview,
                      stream: Any) -> None:
        rows = np.frombuffer(pack_rows(data, width, height), dtype=np.uint8)
        if rows.nbytes == 0:
            return
        self._copy2d(stream, src_host=rows.ctypes.data, src_pitch=width, dst_dev=dst, dst_pitch=dpitch,
                     width=width, height=height)
        # The 2D path does not promise to stage pageable memory before returning: finish before `rows` goes.
        self._sync_stream(stream)

    def memcpy2d_dtoh(self, src: int, spitch: int, width: int, height: int, stream: Any) -> bytes:
        out = np.empty(width * height, dtype=np.uint8)
        if out.nbytes:
            self._copy2d(stream, src_dev=src, src_pitch=spitch, dst_host=out.ctypes.data, dst_pitch=width,
                         width=width, height=height)
            self._sync_stream(stream)
        return out.tobytes()

    def memcpy2d_dtod(self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                      stream: Any) -> None:
        self._copy2d(stream, src_dev=src, src_pitch=spitch, dst_dev=dst, dst_pitch=dpitch, width=width,
                     height=height)

    def memset(self, ptr: int, value: int, size: int, stream: Any) -> None:
        check(self.drv.cuMemsetD8Async(ptr, value & 0xFF, size, self._stream(stream)), "cuMemsetD8Async")

    def memset2d(self, ptr: int, pitch: int, value: int, width: int, height: int, stream: Any) -> None:
        check(self.drv.cuMemsetD2D8Async(ptr, pitch, value & 0xFF, width, height, self._stream(stream)),
              "cuMemsetD2D8Async")

    def enable_peer(self, peer: DeviceContext) -> None:
        # the numbers of CUDA_ERROR_PEER_ACCESS_* equal cudaErrorPeerAccess* (704, 705, 217)
        check(self.drv.cuCtxEnablePeerAccess(peer.ctx, 0), "cuCtxEnablePeerAccess")   # type: ignore[attr-defined]

    def disable_peer(self, peer: DeviceContext) -> None:
        check(self.drv.cuCtxDisablePeerAccess(peer.ctx), "cuCtxDisablePeerAccess")   # type: ignore[attr-defined]

    def copy_from_peer(self, dst: int, peer: DeviceContext, src: int, size: int, stream: Any) -> None:
        check(self.drv.cuMemcpyPeerAsync(dst, self.ctx, src, peer.ctx, size, self._stream(stream)),  # type: ignore
              "cuMemcpyPeerAsync")
        self._sync_stream(stream)    # the source's later work must not race the copy
    def memset_elems(self, ptr: int, pitch: int, value: int, elem: int, width: int, height: int,
                     stream: Any) -> None:
        fn = {1: "cuMemsetD2D8Async", 2: "cuMemsetD2D16Async", 4: "cuMemsetD2D32Async"}[elem]
        check(getattr(self.drv, fn)(ptr, pitch, value, width, height, self._stream(stream)), fn)

    # ------------------------------------------------------------------ modules and kernels
    def module_load(self, image: bytes) -> LoadedModule:
        drv = self.drv
        image = bytes(image)
        # cuModuleLoadData reads a fatbin/cubin/PTX from a host pointer; PTX must be NUL-terminated.
        buf = np.frombuffer(image + (b"\0" if not image.endswith(b"\0") else b""), dtype=np.uint8)
        module = check(drv.cuModuleLoadData(buf.ctypes.data), "cuModuleLoadData")
        try:
            kernels = self._kernels(module, image)
            variables = self._globals(module, image)
        except BaseException:
            drv.cuModuleUnload(module)
            raise
        return LoadedModule(module, kernels, variables)

    def _functions(self, module: Any, declared: dict[str, list[tuple[int, int]]] | None) -> dict[str, Any]:
        """name -> CUfunction of every kernel of the module: enumerated by the driver, or (drivers before CUDA 12.4)
        each kernel the image declares taken by name."""
        drv = self.drv
        if self.api.has("cuModuleEnumerateFunctions") and self.api.has("cuModuleGetFunctionCount") \
                and self.api.has("cuFuncGetName"):
            count = int(check(drv.cuModuleGetFunctionCount(module), "cuModuleGetFunctionCount"))
            funcs = check(drv.cuModuleEnumerateFunctions(count, module), "cuModuleEnumerateFunctions") \
                if count else []
            out = {}
            for f in funcs or []:
                raw = check(drv.cuFuncGetName(f), "cuFuncGetName")
                out[raw.decode() if isinstance(raw, bytes) else str(raw)] = f
            return out
        out = {}
        for name in declared or {}:
            err, f = drv.cuModuleGetFunction(module, name.encode())
            if int(err) == 0:
                out[name] = f
            elif int(err) != 500:              # CUDA_ERROR_NOT_FOUND: not a kernel of this device's code
                raise to_cuda_error(err, f"cuModuleGetFunction({name})")
        return out

    def _kernels(self, module: Any, image: bytes) -> dict[str, KernelDesc]:
        need_image = not (self.api.has("cuModuleEnumerateFunctions") and self.api.has("cuModuleGetFunctionCount")
                          and self.api.has("cuFuncGetName") and self.api.has("cuFuncGetParamInfo"))
        declared = image_kernels(image) if need_image else None
        kernels: dict[str, KernelDesc] = {}
        for name, f in self._functions(module, declared).items():
            if self.api.has("cuFuncLoad"):
                # Lazy loading (the default) may hand out functions not yet on the device; load before querying.
                check(self.drv.cuFuncLoad(f), f"cuFuncLoad({name})")
            params = self._param_layout(f) if self.api.has("cuFuncGetParamInfo") else (declared or {}).get(name)
            if params is None:
                raise CudaError("cudaErrorInvalidKernelImage",
                                f"{name}: no parameter layout (the driver predates cuFuncGetParamInfo and the image "
                                "does not declare the kernel)")
            kernels[name] = KernelDesc(name, params, self._func_attrs(f), f)
        return kernels

    def _param_layout(self, f: Any) -> list[tuple[int, int]]:
        drv = self.drv
        params: list[tuple[int, int]] = []
        n: int | None = None
        if self.api.has("cuFuncGetParamCount"):
            n = int(check(drv.cuFuncGetParamCount(f), "cuFuncGetParamCount"))
        i = 0
        while n is None or i < n:
            err, offset, size = drv.cuFuncGetParamInfo(f, i)
            if int(err) != 0:
                if n is None and int(err) == 1:       # CUDA_ERROR_INVALID_VALUE: past the last parameter
                    break
                raise to_cuda_error(err, f"cuFuncGetParamInfo({i})")
            params.append((int(offset), int(size)))
            i += 1
        return params

    def _func_attrs(self, f: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, enum_name in FUNC_ATTRS.items():
            attr = getattr(self.drv.CUfunction_attribute, enum_name, None)
            if attr is None:
                continue
            err, value = self.drv.cuFuncGetAttribute(attr, f)
            if int(err) == 0:
                out[key] = int(value)
        return out

    def _globals(self, module: Any, image: bytes) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        for name in image_globals(image):
            err, ptr, size = self.drv.cuModuleGetGlobal(module, name.encode())
            if int(err) == 0:
                found[name] = (int(ptr), int(size))
        return found

    def module_unload(self, module: LoadedModule) -> None:
        check(self.drv.cuModuleUnload(module.handle), "cuModuleUnload")

    def launch(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
               block: tuple[int, int, int], shmem: int, params: bytes, stream: Any) -> None:
        drv = self.drv
        # The client packed the arguments at the offsets cuFuncGetParamInfo gave: that is exactly the
        # device-side layout. A real driver refuses a CU_LAUNCH_PARAM_BUFFER_SIZE other than the kernel's
        # parameter space with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (an H100 did, for a buffer padded from 12 to 16
        # bytes), so the buffer goes cut to the layout's size (check_params made sure it holds that much). libvcuda
        # answers as that driver does, so the chain's fault tests fail without the cut (test_daemon_cuda_faults).
        size = kernel.param_bytes
        s = self._stream(stream)
        calls = self.calls
        if calls is not None:
            turn = self.turn
            if (turn is None or not turn.shared) and not self.gpu_time.timed:     # GpuTime.launch: nothing to time
                calls.launch(self._cx, handle(kernel.handle), grid, block, shmem, handle(stream), params, size,
                             kernel.name)
            else:
                self.gpu_time.launch(turn, s, lambda: calls.launch(self._cx, handle(kernel.handle), grid, block,
                                                                   shmem, handle(stream), params, size, kernel.name),
                                     self.wait_scope)
            return
        arg_buf = ctypes.create_string_buffer(bytes(params[:size]), max(size, 1))
        arg_size = ctypes.c_size_t(size)
        extra = (ctypes.c_void_p * 5)(drv.CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(arg_buf),
                                      drv.CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(arg_size),
                                      drv.CU_LAUNCH_PARAM_END)
        self.gpu_time.launch(self.turn, s, lambda: check(drv.cuLaunchKernel(
            kernel.handle, *grid, *block, shmem, s, 0, ctypes.addressof(extra)), f"cuLaunchKernel({kernel.name})"),
            self.wait_scope)
        # device printf of a real GPU goes to the daemon's own stdout (nothing for take_stdout)

    def launch_cooperative(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
                           block: tuple[int, int, int], shmem: int, params: bytes, stream: Any) -> None:
        # cuLaunchCooperativeKernel takes no packed buffer: one pointer per parameter, into the client's buffer
        drv = self.drv
        calls = self.calls
        if calls is not None:
            offsets = [off for off, _ in kernel.params]
            self.gpu_time.launch(self.turn, self._stream(stream), lambda: calls.launch_coop(
                self._cx, handle(kernel.handle), grid, block, shmem, handle(stream), params, offsets, kernel.name),
                self.wait_scope)
            return
        arg_buf = ctypes.create_string_buffer(bytes(params), max(len(params), 1))
        base = ctypes.addressof(arg_buf)
        ptrs = (ctypes.c_void_p * max(len(kernel.params), 1))(*[base + off for off, _ in kernel.params])
        s = self._stream(stream)
        self.gpu_time.launch(self.turn, s, lambda keep=(arg_buf, ptrs): check(drv.cuLaunchCooperativeKernel(
            kernel.handle, *grid, *block, shmem, s, ctypes.addressof(keep[1])),
            f"cuLaunchCooperativeKernel({kernel.name})"), self.wait_scope)

    def run_fast(self, ops: Any) -> tuple[int, BaseException | None]:
        """A run of fast ops in one call into the driver's entry points (cuda_calls.Run, pv_dc_run), with the per-op
        methods' bookkeeping around it: an event record's clock anchor is taken in order (a new anchor, a driver call
        of its own, first runs the ops before it), its event marked recorded once it ran. While the device is shared
        each launch is timed (cuda_turns.py) and the ops go one call each, as without the compiled calls."""
        calls = self.calls
        turn = self.turn
        if calls is None or not calls.runs or (turn is not None and turn.shared) or self.gpu_time.timed:
            self._here()                           # (a run the loop took: the context current there too)
            return super().run_fast(ops)
        run = calls.run(self._cx)
        base = 0                                   # ops before the run being packed: already ran
        recorded: list[tuple[int, _Event, Any]] = []   # (index, event, anchor) of the records in the run

        def flush() -> tuple[int, BaseException | None]:
            nonlocal base
            k, exc = run.run()
            for i, event, anchor in recorded:
                if i < base + k:
                    event.recorded = True
                    event.anchor = anchor
            recorded.clear()
            base += k
            return base, exc

        for i, op in enumerate(ops):
            method, a = op.method, op.args
            if method == "launch":
                module, kernel, grid, block, shmem, params, stream = a
                run.launch(handle(kernel.handle), grid, block, shmem, handle(stream), params, kernel.param_bytes,
                           kernel.name)
            elif method == "memset":
                ptr, value, size, stream = a
                run.memset(MEMSET_D8, ptr, 0, value & 0xFF, size, 1, handle(stream))
            elif method == "event_record":
                event, stream = a
                anchor = None
                if not event.flags & EVENT_DISABLE_TIMING:
                    if self.clock.rebase_due() and len(run):
                        done, exc = flush()            # the new anchor goes on the stream after the ops before it
                        if exc is not None:
                            return done, exc
                    self._here()                       # cuda-python's calls (the run's own set the context)
                    anchor = self.clock.before_record(self._stream(stream))
                run.event_record(handle(event.handle), handle(stream))
                recorded.append((i, event, anchor))
            elif method == "stream_wait_event":
                stream, event, flags = a
                run.stream_wait(handle(stream), handle(event.handle), flags)
            elif method == "memcpy_dtod":
                dst, src, size, stream = a
                run.dtod(dst, src, size, handle(stream))
            elif method == "memcpy_htod":
                dst, data, stream = a
                run.htod(dst, data, handle(stream))
            else:                                      # not one the library runs: in order, through its method
                done, exc = flush()
                if exc is not None:
                    return done, exc
                try:
                    self._here()
                    getattr(self, method)(*a)
                except Exception as exc:  # noqa: BLE001 - op i's failure (base.run_fast's contract)
                    return i, exc
                base = i + 1
        return flush()

    def func_set_attr(self, module: LoadedModule, kernel: KernelDesc, attr: int, value: int) -> None:
        # cudaFuncAttribute and CUfunction_attribute share their numbers (MaxDynamicSharedMemorySize = 8,
        # PreferredSharedMemoryCarveout = 9); the driver does the validation against this device.
        key = FUNC_SET_ATTRS.get(attr)
        if key is None:
            raise CudaError("cudaErrorInvalidValue", f"{kernel.name}: cudaFuncAttribute {attr} cannot be set")
        enum_name, attr_key = key
        drv_attr = getattr(self.drv.CUfunction_attribute, enum_name, attr)
        check(self.drv.cuFuncSetAttribute(kernel.handle, drv_attr, value), f"cuFuncSetAttribute({kernel.name})")
        kernel.attrs[attr_key] = value

    # ------------------------------------------------------------------ limits
    def _limit(self, limit: int) -> Any:
        enum = getattr(self.drv, "CUlimit", None)
        try:
            return enum(limit) if enum is not None else limit
        except ValueError:
            raise CudaError("cudaErrorInvalidValue", f"limit {limit} unknown to this driver") from None

    def set_limit(self, limit: int, value: int) -> None:
        check(self.drv.cuCtxSetLimit(self._limit(limit), value), "cuCtxSetLimit")

    def get_limit(self, limit: int) -> int:
        self._here()
        return int(check(self.drv.cuCtxGetLimit(self._limit(limit)), "cuCtxGetLimit"))

    # ------------------------------------------------------------------ streams and events
    def stream_create(self, flags: int, priority: int) -> Any:
        stream = check(self.drv.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
        self._streams.add(stream)
        return stream

    def stream_destroy(self, stream: Any) -> None:
        self._streams.discard(stream)
        check(self.drv.cuStreamDestroy(stream), "cuStreamDestroy")

    def stream_sync(self, stream: Any) -> None:
        self._sync_stream(stream)

    def stream_query(self, stream: Any) -> bool:
        self._here()
        (err,) = self.drv.cuStreamQuery(self._stream(stream))
        if int(err) == 600:                # CUDA_ERROR_NOT_READY
            return False
        check((err,), "cuStreamQuery")
        return True

    def stream_wait_event(self, stream: Any, event: _Event, flags: int) -> None:
        check(self.drv.cuStreamWaitEvent(self._stream(stream), event.handle, flags), "cuStreamWaitEvent")

    def event_create(self, flags: int) -> _Event:
        return _Event(check(self.drv.cuEventCreate(flags), "cuEventCreate"), flags)

    def event_destroy(self, event: _Event) -> None:
        check(self.drv.cuEventDestroy(event.handle), "cuEventDestroy")

    def event_record(self, event: _Event, stream: Any) -> None:
        s = self._stream(stream)
        anchor = None if event.flags & EVENT_DISABLE_TIMING else self.clock.before_record(s)
        check(self.drv.cuEventRecord(event.handle, s), "cuEventRecord")
        event.recorded = True
        event.anchor = anchor

    def event_time(self, event: _Event) -> float | None:
        self._here()
        return self.clock.time(event.anchor, event.handle) if event.recorded else None

    def event_sync(self, event: _Event) -> None:
        with self._host_wait():
            check(self.drv.cuEventSynchronize(event.handle), "cuEventSynchronize")

    def event_query(self, event: _Event) -> bool:
        self._here()
        (err,) = self.drv.cuEventQuery(event.handle)
        if int(err) == 600:
            return False
        check((err,), "cuEventQuery")
        return True

    def event_elapsed(self, start: _Event, end: _Event) -> float:
        self._here()
        return self._elapsed(start.handle, end.handle)

    def _elapsed(self, start: Any, end: Any) -> float:
        if not self.api.has("cuEventElapsedTime"):
            return self._elapsed_v1(start, end)
        return float(check(self.drv.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    def _elapsed_v1(self, start: Any, end: Any) -> float:
        """cuEventElapsedTime's first ABI through the driver's pointer (drivers before CUDA 12.8 have no _v2)."""
        fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p)(
            self.api.pointer("cuEventElapsedTime", 2000))
        out = ctypes.c_float()
        err = fn(ctypes.byref(out), int(start), int(end))
        if err:
            raise to_cuda_error(self.drv.CUresult(err), "cuEventElapsedTime")
        return float(out.value)

    def synchronize(self) -> None:
        with self._host_wait():
            check(self.drv.cuCtxSynchronize(), "cuCtxSynchronize")

    # ------------------------------------------------------------------ cuBLAS (backends/cublas_cuda.py)
    blas_validates_pointers = True      # real cuBLAS would touch whatever it is given

    def _blas(self) -> cublas_cuda.Cublas:
        return self._cublas or cublas_cuda.library()

    def blas_create(self) -> cublas_cuda.RealHandle:
        return self._blas().create()

    def blas_destroy(self, handle: cublas_cuda.RealHandle) -> None:
        self._blas().destroy(handle)

    def blas_set_workspace(self, handle: cublas_cuda.RealHandle, ptr: int, size: int) -> None:
        self._blas().set_workspace(handle, ptr, size)

    def blas_call(self, handle: cublas_cuda.RealHandle, family: str, stream: Any, pmode: int, math: int,
                  args: dict[str, Any]) -> bytes | None:
        return self._blas().call(handle, family, cublas_cuda.stream_pointer(stream), pmode, math, args)

    # ------------------------------------------------------------------ cuBLASLt (backends/cublaslt_cuda.py)
    def _lt_session(self) -> cublaslt_cuda.LtSession:
        if self._lt is None:
            self._lt = cublaslt_cuda.LtSession(self._cublaslt or cublaslt_cuda.library())
        return self._lt

    def lt_matmul(self, stream: Any, args: dict[str, Any]) -> None:
        self._lt_session().matmul(cublas_cuda.stream_pointer(stream), args)

    def lt_heuristic(self, problem: dict[str, int], aligns: tuple[int, int, int, int]) -> tuple[int, int]:
        return self._lt_session().heuristic(problem, aligns)

    def _lt_close(self) -> None:
        if self._lt is not None:
            try:
                self._lt.close()
            except Exception as exc:  # noqa: BLE001 - the context goes anyway
                log.warning("device %d: releasing cuBLASLt failed: %s", self.ordinal, exc)
            self._lt = None

    def _teardown(self) -> None:
        """Everything of this context goes, the context itself last. A context that took a sticky fault answers
        every call with that fault until it is destroyed (cuCtxDestroy may answer it too, and destroys it all the
        same): each step may fail, and the next one still runs."""
        steps = (("cuBLASLt", self._lt_close), ("event clock", self.clock.drop), ("GPU time", self.gpu_time.drop),
                 ("window memory", self._release_vmm),     # physical allocations outlive a context
                 ("staging buffers", self.staging.close))
        for what, step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - the context goes anyway
                log.warning("device %d: releasing the context's %s failed: %s", self.ordinal, what, exc)
        self._streams.clear()            # the context's streams go with it
        if self.ctx is None:
            return
        try:
            (err,) = self.drv.cuCtxDestroy(self.ctx)
            if int(err) != 0:
                log.info("device %d: cuCtxDestroy answered %s (the context is destroyed all the same)",
                         self.ordinal, getattr(err, "name", err))
        except Exception as exc:  # noqa: BLE001 - close must not raise
            log.warning("device %d: cuCtxDestroy failed: %s", self.ordinal, exc)
        self.ctx = None
        self._cx = 0

    def reset(self) -> None:
        # A context that took a sticky fault is unusable: replace it (destroying it frees all it held). Nothing of
        # the new context comes from the old one: the clock, GPU-time events and cuBLASLt plans start afresh. A
        # refused new context raises (sticky) with none left: DEVICE_RESET then drops this object.
        self._teardown()
        self.staging = self._new_staging()
        self.ctx = self._new_context()
        self._cx = handle(self.ctx)

    def close(self) -> None:
        self._teardown()
