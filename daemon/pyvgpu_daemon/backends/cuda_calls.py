"""The cuda backend's fast ops called into the driver from compiled code: libpvdrvcall.so (csrc/drvcall/), loaded
with cffi's ABI mode.

Runs of fast ops (DeviceContext.run_fast: launches, memsets, event records, stream waits, host-to-device and
device-to-device copies, as the frame path hands them over) go to the driver in one call (`Run`, pv_dc_run): Python
packs one record per op and C makes the calls, stopping at the first that fails. One op at a time, the compiled call
is taken where it saves the Python path's own work: launches (cuda-python needs a ctypes parameter block per launch),
cooperative launches, and copies between daemon memory and the device (a NumPy view of the host buffer per copy).
Where the Python path is a single bindings call with integer arguments (a memset, an event record, a stream wait, a
device-to-device copy), cuda-bindings' Cython call costs less than a cffi call, so those stay on cuda-python when they
come alone: on an H200 (GPU run 5, every lone op compiled for the measurement) a 4-byte memset took 2.35 µs compiled
against 1.67, an event record 1.31 against 0.83, a stream wait 1.17 against 0.74, while a launch took 7.18 against
7.39, a 4-byte HtoD 2.60 against 4.37 and a run of 64 launches 5.39 against 8.00 per op (bench/README.md). Every
compiled call runs with the session's context current on its thread: cuCtxGetCurrent each call, and where another
context (or none) is current, cuCtxSetCurrent before the call and the one found put back after it (pv_drvcall.h), so
no thread change (a run the event loop takes, a worker pool) can send one to the wrong context or none
(CUDA_ERROR_INVALID_CONTEXT), and the thread is left as it was for cuda-python's calls. ABI mode over a plain C library needs no Python headers and no
compiler where the daemon runs, the library is built by the top-level CMake with the client libraries (and carried
prebuilt in the GPU bundle); API mode measured 0.16 µs a call faster, which is less than what a run saves and would
tie the library to one Python version.

The library is handed the driver's entry points once, from cuda_driver's cuGetProcAddress lookup, in the ABI
cuda-bindings calls for each name (driver_abis: cuMemcpyHtoDAsync -> _v2), so it calls exactly what the loaded driver
exports and what the Python path would. Every CUresult becomes the CudaError the Python path raises (cuda.driver_error:
the same code, the same `what: CUDA_ERROR_...` message).

Used when the library and its header are found beside the client libraries (pyvgpu.lib_path) and ENV_CUDA_CALLS is
not "python"; otherwise the backend calls cuda-python as before, and says why in one log line at start.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, Callable, Sequence

from pyvgpu.protocol import ENV_CUDA_CALLS
from pyvgpu_daemon.backends.cuda_driver import DriverEntryPoints, called_abi
from pyvgpu_daemon.errors import CudaError

LIB_NAME = "libpvdrvcall.so"
HEADER_NAME = "pv_drvcall.h"
PYTHON_CALLS = "python"            # the value of ENV_CUDA_CALLS that turns the compiled calls off

# pv_dc_op kinds (pv_drvcall.h's enum pv_dc_kind, read from the header by cffi: these are its names)
LAUNCH, LAUNCH_COOP, MEMSET_D8, MEMSET_D2D8, MEMSET_D2D16, MEMSET_D2D32, EVENT_RECORD, STREAM_WAIT, HTOD, DTOH, DTOD = (
    "PV_DC_LAUNCH", "PV_DC_LAUNCH_COOP", "PV_DC_MEMSET_D8", "PV_DC_MEMSET_D2D8", "PV_DC_MEMSET_D2D16",
    "PV_DC_MEMSET_D2D32", "PV_DC_EVENT_RECORD", "PV_DC_STREAM_WAIT", "PV_DC_HTOD", "PV_DC_DTOH", "PV_DC_DTOD")
# The driver function each kind calls, for error messages (the names the Python path's messages use).
CALLED_BY_KIND = {LAUNCH: "cuLaunchKernel", LAUNCH_COOP: "cuLaunchCooperativeKernel", MEMSET_D8: "cuMemsetD8Async",
                  MEMSET_D2D8: "cuMemsetD2D8Async", MEMSET_D2D16: "cuMemsetD2D16Async",
                  MEMSET_D2D32: "cuMemsetD2D32Async", EVENT_RECORD: "cuEventRecord",
                  STREAM_WAIT: "cuStreamWaitEvent", HTOD: "cuMemcpyHtoDAsync", DTOH: "cuMemcpyDtoHAsync",
                  DTOD: "cuMemcpyDtoDAsync"}
# pv_dc_op as Python packs it (one struct.pack per op, then one call for the run; cheaper than setting cffi fields),
# field by field; checked against the compiler's layout (cffi's offsets) when the library loads.
OP_LAYOUT = (("kind", "I"), ("flags", "I"), ("stream", "Q"), ("handle", "Q"), ("dst", "Q"), ("src", "Q"),
             ("value", "Q"), ("pitch", "Q"), ("width", "Q"), ("height", "Q"), ("grid", "3I"), ("block", "3I"),
             ("shmem", "I"), ("nparams", "I"), ("offsets", "Q"), ("host", "Q"), ("size", "Q"))
OP_RECORD = struct.Struct("<" + "".join(f for _, f in OP_LAYOUT))


def cdef_of(header: Path) -> str:
    """The declarations between the header's cffi markers."""
    text = header.read_text()
    begin, end = text.index("/* cffi:begin */"), text.index("/* cffi:end */")
    return text[begin + len("/* cffi:begin */"):end]


def handle(obj: Any) -> int:
    """A cuda-python handle (CUstream, CUevent, CUfunction) as the pointer it holds; None: the legacy default stream."""
    return 0 if obj is None else int(obj)


class DriverCalls:
    """libpvdrvcall.so bound to the loaded driver's entry points. Its methods raise CudaError(to_error(...))."""

    def __init__(self, ffi: Any, lib: Any, table: Any, to_error: Callable[[int, str], CudaError],
                 path: Path) -> None:
        self.ffi = ffi
        self.lib = lib
        self.table = table
        self.to_error = to_error          # (CUresult, what) -> the CudaError the Python path raises
        self.path = path
        self.kind = {name: int(getattr(lib, name)) for name in CALLED_BY_KIND}
        self.runs = _layout_matches(ffi)        # runs in one call (else the ops of a run go one call each)

    @classmethod
    def load(cls, api: DriverEntryPoints, to_error: Callable[[int, str], CudaError]) -> tuple["DriverCalls | None", str]:
        """(the calls, a line for the log); None with the reason when the backend must call through cuda-python."""
        if os.environ.get(ENV_CUDA_CALLS, "").strip().lower() == PYTHON_CALLS:
            return None, f"fast ops through cuda-python ({ENV_CUDA_CALLS}={PYTHON_CALLS})"
        if api.lookup is None:
            return None, "fast ops through cuda-python: the driver has no cuGetProcAddress to take entry points from"
        try:
            import cffi  # noqa: PLC0415 - the cuda extra's dependency, as for cuBLAS
        except ImportError as exc:
            return None, f"fast ops through cuda-python: no cffi ({exc})"
        import pyvgpu  # noqa: PLC0415
        try:
            path = pyvgpu.lib_path(LIB_NAME)
            ffi = cffi.FFI()
            ffi.cdef(cdef_of(path.parent / HEADER_NAME))
            lib = ffi.dlopen(str(path))
        except (OSError, ValueError, cffi.CDefError, cffi.FFIError) as exc:
            return None, f"fast ops through cuda-python: {LIB_NAME} not usable ({exc})"
        names = [ffi.string(lib.pv_dc_entry_name(i)).decode() for i in range(lib.pv_dc_entry_count())]
        addrs = [api.pointer(name, called_abi(name)[1]) for name in names]
        missing = [n for n, a in zip(names, addrs) if not a]
        if missing:
            return None, f"fast ops through cuda-python: the driver gave no address for {', '.join(missing)}"
        table = lib.pv_dc_driver_new(ffi.new("uintptr_t[]", addrs), len(addrs))
        if table == ffi.NULL:
            return None, f"fast ops through cuda-python: {LIB_NAME} refused the entry points"
        return cls(ffi, lib, ffi.gc(table, lib.pv_dc_driver_free), to_error, path), \
            f"fast ops through compiled calls ({path})"

    def run(self, ctx: int) -> "Run":
        return Run(self, ctx)

    # ------------------------------------------------------------------ one op each (handles: handle())
    # `ctx` (handle(CUcontext)) is current on the calling thread while the call runs (set and put back where it is
    # not: pv_drvcall.h).
    def launch(self, ctx: int, func: int, grid: Sequence[int], block: Sequence[int], shmem: int, stream: int,
               params: bytes | memoryview, size: int, name: str) -> None:
        err = self.lib.pv_dc_launch(self.table, ctx, func, *grid, *block, shmem, stream, self.ffi.from_buffer(params),
                                    size)
        if err:
            raise self.to_error(err, f"cuLaunchKernel({name})")

    def launch_coop(self, ctx: int, func: int, grid: Sequence[int], block: Sequence[int], shmem: int, stream: int,
                    params: bytes | memoryview, offsets: Sequence[int], name: str) -> None:
        ffi = self.ffi
        err = self.lib.pv_dc_launch_coop(self.table, ctx, func, *grid, *block, shmem, stream, ffi.from_buffer(params),
                                         ffi.new("uint32_t[]", list(offsets)), len(offsets))
        if err:
            raise self.to_error(err, f"cuLaunchCooperativeKernel({name})")

    def htod(self, ctx: int, dst: int, data: bytes | memoryview, stream: int) -> None:
        buf = self.ffi.from_buffer(data)
        err = self.lib.pv_dc_htod(self.table, ctx, dst, buf, len(buf), stream)
        if err:
            raise self.to_error(err, "cuMemcpyHtoDAsync")

    def dtoh(self, ctx: int, dst_addr: int, src: int, size: int, stream: int) -> None:
        err = self.lib.pv_dc_dtoh(self.table, ctx, dst_addr, src, size, stream)
        if err:
            raise self.to_error(err, "cuMemcpyDtoHAsync")


def _layout_matches(ffi: Any) -> bool:
    """Whether OP_RECORD lays pv_dc_op out as the compiler did (every field's offset, the size)."""
    at = 0
    for name, fmt in OP_LAYOUT:
        if ffi.offsetof("pv_dc_op", name) != at:
            return False
        at += struct.calcsize("<" + fmt)
    return at == ffi.sizeof("pv_dc_op")


class Run:
    """Ops packed as pv_dc_op records for one pv_dc_run call; the Python buffers they point into are kept alive until
    it ran. `run()` → (ops that ran, the CudaError of the one that failed or None); the run is then empty again."""

    def __init__(self, calls: DriverCalls, ctx: int) -> None:
        self.calls = calls
        self.ctx = ctx                    # made current (where it is not) before the run's first op
        self.records = bytearray()
        self.whats: list[str] = []        # each op's name in an error message, as the per-op call gives it
        self.keep: list[Any] = []

    def __len__(self) -> int:
        return len(self.whats)

    def _add(self, what: str, *fields: Any) -> None:
        self.records += OP_RECORD.pack(*fields)
        self.whats.append(what)

    def launch(self, func: int, grid: Sequence[int], block: Sequence[int], shmem: int, stream: int,
               params: bytes | memoryview, size: int, name: str) -> None:
        buf = self.calls.ffi.from_buffer(params)
        self.keep.append(buf)
        self._add(f"cuLaunchKernel({name})", self.calls.kind[LAUNCH], 0, stream, func, 0, 0, 0, 0, 0, 0, *grid,
                  *block, shmem, 0, 0, int(self.calls.ffi.cast("uintptr_t", buf)), size)

    def memset(self, kind: str, dst: int, pitch: int, value: int, width: int, height: int, stream: int) -> None:
        self._add(CALLED_BY_KIND[kind], self.calls.kind[kind], 0, stream, 0, dst, 0, value, pitch, width, height,
                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    def event_record(self, event: int, stream: int) -> None:
        self._add("cuEventRecord", self.calls.kind[EVENT_RECORD], 0, stream, event, 0, 0, 0, 0, 0, 0,
                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    def stream_wait(self, stream: int, event: int, flags: int) -> None:
        self._add("cuStreamWaitEvent", self.calls.kind[STREAM_WAIT], flags, stream, event, 0, 0, 0, 0, 0, 0,
                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    def htod(self, dst: int, data: bytes | memoryview, stream: int) -> None:
        buf = self.calls.ffi.from_buffer(data)
        self.keep.append(buf)
        self._add("cuMemcpyHtoDAsync", self.calls.kind[HTOD], 0, stream, 0, dst, 0, 0, 0, 0, 0,
                  0, 0, 0, 0, 0, 0, 0, 0, 0, int(self.calls.ffi.cast("uintptr_t", buf)), len(buf))

    def dtod(self, dst: int, src: int, size: int, stream: int) -> None:
        self._add("cuMemcpyDtoDAsync", self.calls.kind[DTOD], 0, stream, 0, dst, src, 0, 0, 0, 0,
                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, size)

    def run(self) -> tuple[int, CudaError | None]:
        n = len(self.whats)
        if not n:
            return 0, None
        calls = self.calls
        ffi = calls.ffi
        failed = ffi.new("size_t *")
        err = calls.lib.pv_dc_run(calls.table, self.ctx, ffi.from_buffer("pv_dc_op[]", self.records), n, failed)
        k = int(failed[0])
        exc = calls.to_error(err, self.whats[k] if k < n else "cuCtxSetCurrent") if err else None
        self.records = bytearray()
        self.whats = []
        self.keep = []
        return (k if err else n), exc
