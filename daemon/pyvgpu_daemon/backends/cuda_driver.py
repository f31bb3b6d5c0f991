"""The loaded CUDA driver as the cuda backend may use it: its version and the entry points it exports, asked of the
driver itself through cuGetProcAddress (never of cuda-bindings, which declares every function of its own CUDA
version whatever driver it loaded, and fails only when one is called), and what the backend does where an older
driver lacks one.

The bindings call a function by the symbol its name denotes in NVIDIA's headers (cuCtxCreate -> cuCtxCreate_v4); that
ABI exists in a driver when the driver knows the function's name (cuGetProcAddress at the driver's own version
succeeds) and the driver's version is not older than the CUDA version that introduced the ABI. Both facts come from
pyvgpu/driver_abis.py, generated with libvcuda's cuGetProcAddress table from NVIDIA's headers
(tools/gen_driver_exports.py): one source.

ENTRY_POINTS lists every driver function the backend calls; FALLBACKS, those it can do without and how. A driver
that lacks a function outside FALLBACKS cannot run the backend: the daemon refuses to start and names it.
"""
from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from pyvgpu.driver_abis import ABIS, CALLED

log = logging.getLogger("pyvgpu.daemon")

# Every function the cuda backend (cuda.py, cuda_arrays.py, cuda_clock.py, cuda_tensor_map.py) calls, by the name cuGetProcAddress takes.
ENTRY_POINTS = (
    "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceTotalMem",
    "cuDeviceGetAttribute", "cuDeviceGetUuid", "cuDeviceGetPCIBusId", "cuDeviceCanAccessPeer",
    "cuCtxCreate", "cuCtxDestroy", "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxSynchronize", "cuCtxSetLimit", "cuCtxGetLimit",
    "cuCtxEnablePeerAccess", "cuCtxDisablePeerAccess",
    "cuMemGetInfo", "cuMemAlloc", "cuMemFree", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync",
    "cuMemcpy2DAsync", "cuMemcpy3DAsync", "cuMemcpyPeerAsync", "cuMemsetD8Async", "cuMemsetD2D8Async",
    "cuMemsetD2D16Async", "cuMemsetD2D32Async", "cuMemHostRegister", "cuMemHostUnregister",
    "cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
    "cuMemSetAccess", "cuMemGetAllocationGranularity",
    "cuModuleLoadData", "cuModuleUnload", "cuModuleGetGlobal", "cuModuleGetFunction", "cuModuleGetFunctionCount",
    "cuModuleEnumerateFunctions", "cuFuncGetName", "cuFuncLoad", "cuFuncGetParamCount", "cuFuncGetParamInfo",
    "cuFuncGetAttribute", "cuFuncSetAttribute", "cuLaunchKernel", "cuLaunchCooperativeKernel",
    "cuStreamCreateWithPriority", "cuStreamDestroy", "cuStreamSynchronize", "cuStreamQuery", "cuStreamWaitEvent",
    "cuEventCreate", "cuEventDestroy", "cuEventRecord", "cuEventSynchronize", "cuEventQuery", "cuEventElapsedTime",
    "cuArray3DCreate", "cuArrayDestroy", "cuTexObjectCreate", "cuTexObjectDestroy", "cuSurfObjectCreate",
    "cuSurfObjectDestroy",
    "cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col", "cuTensorMapEncodeIm2colWide", "cuTensorMapReplaceAddress",
)
# What the backend does without each of these (the newest ABI of the name, as the bindings call it).
VMM = "device memory from cuMemAlloc at addresses the driver picks (not unique across GPU hosts)"
FALLBACKS = {
    "cuCtxCreate": "cuCtxCreate_v2 through the pointer cuGetProcAddress gives (the bindings call cuCtxCreate_v4)",
    "cuFuncGetParamCount": "cuFuncGetParamInfo asked for one parameter after another until it fails",
    "cuFuncGetParamInfo": "parameter layouts read from the image (cubin .nv.info, PTX .entry)",
    "cuModuleGetFunctionCount": "kernel names read from the image, each taken with cuModuleGetFunction",
    "cuModuleEnumerateFunctions": "kernel names read from the image, each taken with cuModuleGetFunction",
    "cuFuncGetName": "kernel names read from the image, each taken with cuModuleGetFunction",
    "cuFuncLoad": "none needed: a function taken by name is loaded by the driver",
    "cuMemHostRegister": "device-to-host replies copied through pageable memory (no pinned staging)",
    "cuMemHostUnregister": "device-to-host replies copied through pageable memory (no pinned staging)",
    "cuEventElapsedTime": "cuEventElapsedTime's first ABI through its pointer (the bindings call _v2, CUDA 12.8)",
    **{name: f"{name} answered cudaErrorNotSupported (tensor maps: backends/cuda_tensor_map.py)"
       for name in ("cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col", "cuTensorMapEncodeIm2colWide",
                    "cuTensorMapReplaceAddress")},
    **{name: VMM for name in ("cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease", "cuMemMap",
                              "cuMemUnmap", "cuMemSetAccess", "cuMemGetAllocationGranularity")},
}
CU_GET_PROC_ADDRESS_DEFAULT = 0


def called_abi(name: str) -> tuple[str, int]:
    """(the symbol the bindings call for `name`, the CUDA version that introduced it)."""
    symbol = CALLED.get(name, name)
    return symbol, ABIS.get(symbol, (name, 0, False))[1]


def version_text(v: int) -> str:
    return f"CUDA {v // 1000}.{v % 1000 // 10}"


Lookup = Callable[[str, int], int]     # (base name, CUDA version) -> function pointer, 0 when the driver has none


def proc_lookup(library: str = "libcuda.so.1") -> Lookup | None:
    """cuGetProcAddress of the loaded driver (the bindings loaded it by this name, so dlopen returns that one), in its
    first ABI (CUDA 11.3, every driver since has it); None when the driver has no cuGetProcAddress."""
    try:
        fn = ctypes.CDLL(library).cuGetProcAddress
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64]

    def lookup(name: str, version: int) -> int:
        ptr = ctypes.c_void_p()
        err = fn(name.encode(), ctypes.byref(ptr), version, CU_GET_PROC_ADDRESS_DEFAULT)
        return int(ptr.value or 0) if err == 0 else 0
    return lookup


def pyvgpu_driver(library: str = "libcuda.so.1") -> bool:
    """Whether the loaded driver is pyvgpu's own libcuda.so.1 (the chain: tests/harness.py), whose every call is a
    round trip to another daemon and may wait there behind the emulated GPU's queued kernels (a real driver's queries
    return at once): the symbols of pyvgpu's client core resolve through it."""
    try:
        return hasattr(ctypes.CDLL(library), "pv_alloc_add")
    except OSError:
        return False


@dataclass
class DriverEntryPoints:
    """Which of ENTRY_POINTS the loaded driver has (`has`), and the fallbacks that follow (`missing`)."""
    version: int
    lookup: Lookup | None
    missing: dict[str, str] = field(default_factory=dict)     # name -> the fallback taken
    forwards: bool = False          # pyvgpu's own driver (pyvgpu_driver): its calls are round trips

    @classmethod
    def probe(cls, drv: Any, lookup: Lookup | None = None) -> "DriverEntryPoints":
        """`lookup`: the driver's cuGetProcAddress (proc_lookup() for the libcuda.so.1 the bindings loaded); None
        for a driver object that is not that library (a test's fake): no entry points, so nothing compiled calls
        the process's real driver with the fake's handles (GPU run 3: CUDA_ERROR_INVALID_CONTEXT)."""
        err, version = drv.cuDriverGetVersion()
        if int(err) != 0:
            raise RuntimeError(f"cuDriverGetVersion failed: {getattr(err, 'name', err)}")
        self = cls(int(version), lookup, forwards=lookup is not None and pyvgpu_driver())
        if self.lookup is None:
            log.warning("the driver (%s) has no cuGetProcAddress: assuming it has every entry point",
                        version_text(self.version))
            return self
        lacking = []
        for name in ENTRY_POINTS:
            symbol, introduced = called_abi(name)
            if self.lookup(name, self.version) and introduced <= self.version:
                continue
            if name not in FALLBACKS:
                lacking.append(f"{symbol} ({version_text(introduced)})")
            else:
                self.missing[name] = FALLBACKS[name]
        if lacking:
            raise RuntimeError(f"the CUDA driver ({version_text(self.version)}) lacks {', '.join(lacking)}, "
                               "which the cuda backend needs")
        return self

    def has(self, name: str) -> bool:
        return name not in self.missing

    def pointer(self, name: str, version: int) -> int:
        """The driver's ABI of `name` as of CUDA `version` (0: none)."""
        return self.lookup(name, version) if self.lookup else 0

    def describe(self) -> str:
        """One line for the daemon's log: the version, and each fallback taken."""
        line = f"CUDA driver {version_text(self.version)} ({self.version})"
        if not self.missing:
            return line + ": every entry point the backend uses"
        by_fallback: dict[str, list[str]] = {}
        for name, how in self.missing.items():
            # the version that introduced the ABI the bindings call: an expected absence reads as one
            by_fallback.setdefault(how, []).append(f"{name} ({version_text(called_abi(name)[1])})")
        return line + "; without " + "; without ".join(f"{', '.join(names)}: {how}"
                                                      for how, names in by_fallback.items())
