"""The interface every backend implements.

A Backend describes the host's devices (one snapshot each, sent in the HELLO reply) and opens one DeviceContext
per (session, device). Every DeviceContext method runs on that pair's ordered worker thread (executor.py), never
on the event loop, and may block. Handles given to and returned by a context (streams, events, modules,
functions) are backend objects; the session translates wire handles to them after validating, so a backend never
sees a garbage handle. Pointers are validated by the session against the allocations it knows before they get here.
Failures raise pyvgpu_daemon.errors.CudaError.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, Sequence

from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.lent import Lent

# Legacy default stream as the backend sees it.
DEFAULT_STREAM = None


@dataclass
class KernelDesc:
    """One kernel of a loaded module: parameter layout [(offset, size)...] and function attributes."""
    name: str
    params: list[tuple[int, int]]
    attrs: dict[str, int] = field(default_factory=dict)
    handle: Any = None       # backend object used by launch()
    param_bytes: int = field(init=False, default=0)     # the least parameter buffer a launch must pass

    def __post_init__(self) -> None:
        self.param_bytes = max((o + sz for o, sz in self.params), default=0)


@dataclass
class LoadedModule:
    handle: Any                                        # backend object passed back to module_unload()
    kernels: dict[str, KernelDesc]
    variables: dict[str, tuple[int, int]]              # name -> (device address, size)


@dataclass(frozen=True)
class CopySide:
    """One side of a 3D copy, checked by the handler: a backend array (array not None; ptr unused) or linear device
    memory at ptr; rows of `pitch` bytes, `rows` rows per slice; the copy starts at byte x of row y of slice z."""
    array: Any
    pitch: int
    rows: int
    x: int
    y: int
    z: int
    ptr: int


class FastOp(NamedTuple):
    """One op of a run handed to DeviceContext.run_fast: the DeviceContext method that runs it and that method's
    positional arguments, checked and resolved by the daemon exactly as for the per-op call (a NamedTuple: one is
    made per op on the frame path). The methods and their arguments:

        "launch"             (module: LoadedModule, kernel: KernelDesc, grid: (x, y, z), block: (x, y, z), shmem: int,
                              params: bytes | memoryview, stream)
        "memset"             (ptr: int, value: int 0..255, size: int > 0, stream)
        "event_record"       (event, stream)
        "stream_wait_event"  (stream, event, flags: int)
        "memcpy_dtod"        (dst: int, src: int, size: int > 0, stream)
        "memcpy_htod"        (dst: int, data: bytes | memoryview (len > 0), stream)

    stream and event are the backend's own objects (DEFAULT_STREAM for the legacy default stream); ranges were
    checked against the session's allocations, parameter buffers against the kernel's layout."""
    method: str
    args: tuple[Any, ...]


# The methods a FastOp may name (FAST ops of the spec: handlers/fast.py makes them); a new one is added here, to the
# FastOp docstring, and to every run_fast override.
FAST_METHODS: frozenset[str] = frozenset({"launch", "memset", "event_record", "stream_wait_event", "memcpy_dtod",
                                          "memcpy_htod"})


class DeviceTurn(Protocol):
    """A session's turn on its device, as a long job sees it (scheduler.Lane): where the job may pause for others."""

    def preempt(self) -> float | None:
        """A point where the running job may pause: when another session waits and this one has run past its
        share, hand the device over and return once it is this session's turn again. → device seconds the job
        may run before it should call again (None: nobody waits; call again when poked)."""

    def on_waiter(self, poke: Callable[[], None] | None) -> None:
        """poke() is called (from another thread) as soon as another session starts waiting for the device."""

    @property
    def shared(self) -> bool:
        """Another session uses the device (a hint: its fair share then matters)."""

    @property
    def others_outside(self) -> bool:
        """Another session active here is not waiting for the device now: its requests need the interpreter."""

    def charge(self, seconds: float) -> None:
        """Device time of earlier work, measured once it finished (a real GPU's kernels: backends/cuda_turns.py)."""


class DeviceContext(ABC):
    """One session's view of one device. Methods are called from a single thread, in the client's order."""

    ordinal: int
    # A scope for host waits on the device (stream, event or context synchronize) that block in the driver: the
    # daemon's scheduler sets it so that other sessions may use the device meanwhile (scheduler.Lane.waiting).
    wait_scope: Callable[[], AbstractContextManager[None]] = nullcontext
    # The session's turn on the device (scheduler.Lane, set by the daemon): a backend that can pause a long job
    # (the emulator, between scheduler steps of a kernel) offers the device to other sessions there. None: no
    # arbitration (--scheduling off, or a context used outside a daemon).
    turn: DeviceTurn | None = None
    # Whether the server may run the ops flagged OpFlag.LOOP on its event-loop thread instead of the worker, when the
    # (session, device) has nothing queued or running (executor.OrderedWorker.idle): their handlers then touch
    # nothing another thread uses and never block; copies and memsets among them only up to fastpath.LOOP_BYTES.
    # False by default: a real GPU's calls need the context current on the calling thread.
    answers_on_loop: bool = False

    def loop_may_answer(self, spec: Any, args: Callable[[], list[Any]]) -> bool:
        """With answers_on_loop: whether the event loop may run this LOOP op (an OpSpec) now, its (session, device)
        having nothing queued or running. args() gives the op's arguments as its handler gets them (converted,
        handles resolved; CudaError when they are not valid: the op then goes to the worker, which reports it).
        Every LOOP op by default; a real GPU's context takes only what returns at once (backends/cuda.py)."""
        return True

    def host_view(self, ptr: int, size: int) -> memoryview | None:
        """A writable view of device bytes [ptr, ptr+size) in this process's memory, for receiving a copy's payload
        straight into the device and sending one from it (the caller checked the range is the session's and that no
        device work is queued); None where device memory is not host memory (a real GPU)."""
        return None

    def run_fast(self, ops: Sequence[FastOp]) -> tuple[int, BaseException | None]:
        """Run a run of consecutive FAST ops of this (session, device), in order, as one call (the daemon's compiled
        frame path hands each run it decoded here; a run is 1 to a few hundred ops).

        Contract (stable: backends override it, e.g. the cuda backend's compiled executor):
        - ops[i] is a FastOp (its docstring lists the methods and argument shapes); they run in the given order, each
          ordered on its stream exactly as the per-op method call would be;
        - → (done, None) when all ran: done == len(ops);
        - → (k, exc) when ops[0..k-1] ran and op k failed with exc (a CudaError, or any exception a backend bug
          raised): ops k+1.. were NOT run. The daemon then applies the per-op error rules to op k (its error is
          latched for the next synchronizing call; a sticky error fails every later op of the device) and hands the
          ops after it back to run_fast (or fails them with the sticky error), so the results are the ones the
          per-op path gives;
        - it never raises for an op's failure, it may block like the methods it stands for, and it runs on the
          thread the per-op methods run on (the worker, or the loop where answers_on_loop allows).
        This default calls each op's method in turn, so a backend without an override gives exactly the per-op
        results."""
        for i, op in enumerate(ops):
            try:
                getattr(self, op.method)(*op.args)
            except Exception as exc:  # noqa: BLE001 - reported as op i's failure (see the contract)
                return i, exc
        return len(ops), None

    @abstractmethod
    def mem_info(self) -> tuple[int, int]: ...            # (free, total)

    @abstractmethod
    def malloc(self, size: int) -> int: ...

    @abstractmethod
    def free(self, ptr: int) -> None: ...

    @abstractmethod
    def memcpy_htod(self, dst: int, data: bytes | memoryview, stream: Any) -> None: ...

    def htod_landed(self, stream: Any) -> None:
        """The host-to-device copies made so far on `stream` have landed in device memory when this returns (after a
        synchronous copy: HTOD_LANDED). Nothing to do here: a backend whose memcpy_htod writes device memory before it
        returns (the emulator) is there already; one whose copy returns earlier (a real GPU's, from pageable memory,
        returns once the bytes are staged) waits for the stream."""

    @abstractmethod
    def memcpy_dtoh(self, src: int, size: int, stream: Any) -> bytes: ...

    def memcpy_dtoh_reply(self, src: int, size: int, stream: Any) -> bytes | memoryview | Lent:
        """memcpy_dtoh for a reply (MEMCPY_DTOH): the bytes may be a Lent view of a buffer the backend reuses once
        the server has sent them (lent.py)."""
        return self.memcpy_dtoh(src, size, stream)

    @abstractmethod
    def memcpy_dtod(self, dst: int, src: int, size: int, stream: Any) -> None: ...

    @abstractmethod
    def memcpy2d_htod(self, dst: int, dpitch: int, width: int, height: int, data: bytes | memoryview,
                      stream: Any) -> None: ...

    @abstractmethod
    def memcpy2d_dtoh(self, src: int, spitch: int, width: int, height: int, stream: Any) -> bytes: ...

    @abstractmethod
    def memcpy2d_dtod(self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                      stream: Any) -> None: ...

    @abstractmethod
    def memset(self, ptr: int, value: int, size: int, stream: Any) -> None: ...

    @abstractmethod
    def memset2d(self, ptr: int, pitch: int, value: int, width: int, height: int, stream: Any) -> None: ...

    def malloc_managed(self, size: int, align: int) -> int:
        """Device memory for a managed or mapped range: `align`-aligned (the client maps the same addresses on its
        side, page by page) and, where the backend can choose, inside this session's address window."""
        if align <= 256:
            return self.malloc(size)
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: {align}-byte aligned allocations")

    # ---- virtual memory management: mechanics only, the rules are pyvgpu_daemon/vmm.py's (checked before these run)
    def vmm_granularity(self) -> int:
        """Bytes every VMM size, address and offset is a multiple of (cuMemGetAllocationGranularity)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    def vmm_reserve(self, size: int, align: int, hint: int) -> int:
        """An address range of `size` bytes, `align`-aligned, at `hint` when the backend can (0: anywhere); → its
        start. It must not overlap the session's other reservations on this device (hint 0 is given otherwise)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    def vmm_free(self, addr: int, size: int) -> None:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    def vmm_create(self, size: int) -> Any:
        """A physical allocation of `size` bytes on this device (backend object)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    def vmm_release(self, obj: Any) -> None:
        """Frees a physical allocation that is no longer mapped anywhere."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    def vmm_map(self, addr: int, size: int, obj: Any) -> None:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    def vmm_unmap(self, addr: int, size: int) -> None:
        """Unmaps one whole mapping."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    def vmm_set_access(self, addr: int, size: int, flags: int) -> None:
        """This device's access (protocol.VMM_ACCESS_*) to the fully mapped range."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: virtual memory management")

    # ---- tensor maps (handlers/tensormap.py; tensor_map.py: the request, the documented rules)
    def tensor_map_encode(self, request: Any) -> bytes:
        """The 128-byte CUtensorMap of a tensor_map.Request, as this device's driver encodes it; a refused argument is
        cudaErrorInvalidValue."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: tensor maps")

    def tensor_map_replace_address(self, tmap: bytes, addr: int) -> bytes:
        """A map this device's driver encoded, with its global address replaced."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: tensor maps")

    # ---- arrays, textures, surfaces (descriptions checked by handlers/array.py, resources.py)
    def array_create(self, spec: Any) -> Any:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: CUDA arrays")

    def array_destroy(self, array: Any) -> None:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: CUDA arrays")

    def copy3d(self, dst: CopySide | None, src: CopySide | None, width: int, height: int, depth: int, stream: Any,
               data: bytes | memoryview | None) -> bytes | None:
        """A 3D copy of width bytes x height rows x depth slices; dst None: to the host (returns the rows packed);
        src None: from the host (data, rows packed)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: 3D copies")

    def tex_create_array(self, array: Any, spec: Any, sampler: Any) -> int:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: texture objects")

    def tex_create_linear(self, ptr: int, fmt: Any, width: int, height: int, pitch: int, sampler: Any) -> int:
        """Over linear memory: height 0 for cudaResourceTypeLinear (1D, fetched by integer index)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: texture objects")

    def tex_destroy(self, value: int) -> None:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: texture objects")

    def surf_create(self, array: Any, spec: Any) -> int:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: surface objects")

    def surf_destroy(self, value: int) -> None:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: surface objects")

    def enable_peer(self, peer: "DeviceContext") -> None:
        """Kernels of this context may use `peer`'s memory (cudaDeviceEnablePeerAccess)."""
        raise CudaError("cudaErrorPeerAccessUnsupported", f"{type(self).__name__}: peer access")

    def disable_peer(self, peer: "DeviceContext") -> None:
        raise CudaError("cudaErrorPeerAccessNotEnabled", f"{type(self).__name__}: peer access")

    def copy_from_peer(self, dst: int, peer: "DeviceContext", src: int, size: int, stream: Any) -> None:
        """Copies `size` bytes at `src` of another context of this session (this daemon) to `dst` here. The
        default goes through host memory; a backend with direct peer copies overrides it."""
        self.memcpy_htod(dst, peer.memcpy_dtoh(src, size, None), stream)

    def memset_elems(self, ptr: int, pitch: int, value: int, elem: int, width: int, height: int,
                     stream: Any) -> None:
        """Sets width elements of elem bytes (1, 2, 4) to value in each of height rows pitch bytes apart (the
        driver's cuMemsetD8/D16/D32 and 2D forms). This default writes the pattern as a 2D copy."""
        row = value.to_bytes(elem, "little") * width
        self.memcpy2d_htod(ptr, pitch, len(row), height, row * height, stream)

    @abstractmethod
    def module_load(self, image: bytes) -> LoadedModule: ...

    @abstractmethod
    def module_unload(self, module: LoadedModule) -> None: ...

    @abstractmethod
    def launch(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
               block: tuple[int, int, int], shmem: int, params: bytes, stream: Any) -> None:
        """Run (or enqueue) a kernel. Its device printf output is not returned: a backend that captures it keeps it
        for the next reply that carries output (take_stdout)."""

    def launch_cooperative(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
                           block: tuple[int, int, int], shmem: int, params: bytes, stream: Any) -> None:
        """A launch whose blocks are all resident at once (grid-wide synchronization works);
        cudaErrorCooperativeLaunchTooLarge when the occupancy does not allow that."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cooperative launch")

    def tiny_launch(self, module: LoadedModule, kernel: KernelDesc, grid: tuple[int, int, int],
                    block: tuple[int, int, int], shmem: int) -> bool:
        """Whether this launch (a LOOP op, with answers_on_loop) is certain to finish within microseconds whatever its
        parameters, so that the event loop may run it itself (fastpath); the arguments are converted but not yet
        validated."""
        return False

    def func_set_attr(self, module: LoadedModule, kernel: KernelDesc, attr: int, value: int) -> None:
        """cudaFuncSetAttribute for this session's copy of the kernel (attr: protocol.FUNC_ATTR_*)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cudaFuncSetAttribute")

    def set_limit(self, limit: int, value: int) -> None:
        """cudaDeviceSetLimit (limit: a key of protocol.LIMIT_NAMES, already checked)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cudaDeviceSetLimit")

    def get_limit(self, limit: int) -> int:
        """cudaDeviceGetLimit (limit: a key of protocol.LIMIT_NAMES, already checked)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cudaDeviceGetLimit")

    @abstractmethod
    def stream_create(self, flags: int, priority: int) -> Any: ...

    @abstractmethod
    def stream_destroy(self, stream: Any) -> None: ...

    @abstractmethod
    def stream_sync(self, stream: Any) -> None: ...

    @abstractmethod
    def stream_query(self, stream: Any) -> bool: ...      # True when idle

    @abstractmethod
    def stream_wait_event(self, stream: Any, event: Any, flags: int) -> None: ...

    @abstractmethod
    def event_create(self, flags: int) -> Any: ...

    @abstractmethod
    def event_destroy(self, event: Any) -> None: ...

    @abstractmethod
    def event_record(self, event: Any, stream: Any) -> None: ...

    @abstractmethod
    def event_sync(self, event: Any) -> None: ...

    @abstractmethod
    def event_query(self, event: Any) -> bool: ...        # True when complete

    @abstractmethod
    def event_elapsed(self, start: Any, end: Any) -> float: ...

    def event_time(self, event: Any) -> float | None:
        """The completed event's time in ms on a clock of this context (only differences count), sent with replies
        (event_times.py); None when the backend cannot tell (the client then asks event_elapsed)."""
        return None

    @abstractmethod
    def synchronize(self) -> None: ...

    # ------------------------------------------------------------------ cuBLAS (pyvgpu/cublas_spec.py)
    # Whether the daemon must check every device region a cuBLAS call names against the session's allocations
    # before the backend runs it (a real library would read or write anywhere); the emulated device checks each
    # operand it touches against the session's own heap itself.
    blas_validates_pointers: bool = False

    def blas_create(self) -> Any:
        """A cuBLAS handle (backend object) on this device."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cuBLAS")

    def blas_destroy(self, handle: Any) -> None:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cuBLAS")

    def blas_set_workspace(self, handle: Any, ptr: int, size: int) -> None:
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cuBLAS")

    def blas_call(self, handle: Any, family: str, stream: Any, pmode: int, math: int,
                  args: dict[str, Any]) -> bytes | None:
        """Run one call of a cuBLAS family, in order on `stream`. `args` are the family's arguments by name (scalars:
        bytes in host pointer mode, device addresses in device pointer mode; results: None in host pointer mode).
        Returns the result's bytes for a host-mode result. Failures: BlasError (a status), CudaError (a fault)."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cuBLAS")

    def lt_matmul(self, stream: Any, args: dict[str, Any]) -> None:
        """Run one cublasLtMatmul in order on `stream` (pyvgpu/cublaslt_spec.py: LT_MATMUL's arguments by name,
        checked; alpha/beta as bytes in host pointer mode, device addresses in device pointer mode). Failures:
        BlasError (a status), CudaError (a fault). blas_validates_pointers applies as for cuBLAS."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cuBLASLt")

    def lt_heuristic(self, problem: dict[str, int], aligns: tuple[int, int, int, int]) -> tuple[int, int]:
        """(algorithms for this problem, 0 or 1; the workspace bytes it needs), the problem being LT_MATMUL's int
        arguments (checked; workspace_size: the most the caller allows) and aligns the pointers' alignments. No
        algorithm may also be BlasError(CUBLAS_STATUS_NOT_SUPPORTED) saying why."""
        raise CudaError("cudaErrorNotSupported", f"{type(self).__name__}: cuBLASLt")

    def take_stdout(self) -> bytes:
        """Device printf output not yet returned (backends that buffer it override this)."""
        return b""

    @abstractmethod
    def reset(self) -> None:
        """cudaDeviceReset: drop every resource of this context and clear its sticky error state."""

    @abstractmethod
    def close(self) -> None:
        """Release everything (session end). Must not raise."""

    def cancel(self) -> None:
        """The session's client is gone: stop device work now running as soon as it can be stopped.
        Called from the event-loop thread while the worker may be inside a method; must be thread-safe."""


class Backend(ABC):
    name: str

    @abstractmethod
    def devices(self) -> list[dict[str, Any]]:
        """One snapshot per device (keys: protocol.DEVICE_INFO_KEYS)."""

    @abstractmethod
    def open_context(self, ordinal: int, va_base: int, session_id: int) -> DeviceContext:
        """Called on the (session, device) worker thread, on the first op of that pair."""

    def unusable(self, ordinal: int) -> str:
        """Why the device cannot take sessions now ("" when it can): a real driver that refuses new contexts after
        a kernel fault (backends/cuda.py DeviceHealth). Shown by STATUS."""
        return ""

    def close(self) -> None:
        pass


def pack_rows(data: bytes | memoryview, width: int, height: int) -> memoryview:
    """Validate a packed 2D host buffer (rows of `width` bytes, no pitch)."""
    mv = memoryview(data).cast("B")
    if mv.nbytes != width * height:
        raise CudaError("cudaErrorInvalidValue", f"2D payload has {mv.nbytes} bytes, expected {width}x{height}")
    return mv
