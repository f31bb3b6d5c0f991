"""A stand-in for cuda-python's `driver` module whose "device memory" is host memory, for the one thing the chain
(the cuda backend on pyvgpu's libcuda.so.1, tests/harness.py) cannot do: let a fake NVIDIA library read and write
device memory directly. tests/daemon/test_daemon_cuda_blas.py and test_daemon_cuda_blaslt.py drive the backend's
cuBLAS and cuBLASLt plumbing against fake libraries that answer any status on demand and record every argument;
those libraries dereference the device pointers they are given, which only works when device memory is host
memory. Everything else of the cuda backend is tested on the chain (test_daemon_cuda.py and the e2e/driver suites).
"""
from __future__ import annotations

import ctypes
import enum
import struct

import numpy as np


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


class CUdevice_attribute(enum.IntEnum):
    MAX_THREADS_PER_BLOCK = 1
    WARP_SIZE = 10
    MULTIPROCESSOR_COUNT = 16
    CC_MAJOR = 75
    CC_MINOR = 76


class CUfunction_attribute:
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9


class CUlimit(enum.IntEnum):
    CU_LIMIT_STACK_SIZE = 0
    CU_LIMIT_PRINTF_FIFO_SIZE = 1
    CU_LIMIT_MALLOC_HEAP_SIZE = 2
    CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH = 3
    CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT = 4
    CU_LIMIT_MAX_L2_FETCH_GRANULARITY = 5
    CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 6
    CU_LIMIT_SHMEM_SIZE = 7


class CUmemorytype:
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2


class CUDA_MEMCPY2D:
    srcMemoryType = dstMemoryType = 0
    srcHost = dstHost = srcDevice = dstDevice = 0
    srcPitch = dstPitch = WidthInBytes = Height = 0


OK = CUresult.CUDA_SUCCESS


class FakeDriver:
    """Just enough of cuda.bindings.driver, with cuda-python's calling conventions; device memory = host memory."""
    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUfunction_attribute = CUfunction_attribute
    CUlimit = CUlimit
    CUmemorytype = CUmemorytype
    CUDA_MEMCPY2D = CUDA_MEMCPY2D
    CU_LAUNCH_PARAM_END = 0
    CU_LAUNCH_PARAM_BUFFER_POINTER = 1
    CU_LAUNCH_PARAM_BUFFER_SIZE = 2
    KERNEL = "add_one"
    PARAMS = [(0, 8), (8, 4), (12, 1), (16, 8)]

    def __init__(self) -> None:
        self.blocks: dict[int, np.ndarray] = {}
        self.contexts: set[int] = set()
        self.current = None
        self.launches: list[tuple] = []
        self.counter = np.zeros(1, dtype=np.int32)
        self.events: dict[int, float] = {}
        self._ids = 100
        self.limits: dict[int, int] = {0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 64, 6: 0, 7: 0}
        self.func_attrs: list[tuple] = []

    def _id(self) -> int:
        self._ids += 1
        return self._ids

    @staticmethod
    def CUstream(v: int = 0) -> int:
        return v

    def cuInit(self, flags):
        return (OK,)

    def cuDriverGetVersion(self):
        return OK, 13000

    def cuDeviceGetCount(self):
        return OK, 1

    def cuDeviceGet(self, i):
        return (OK, i) if i == 0 else (CUresult.CUDA_ERROR_INVALID_VALUE, None)

    def cuDeviceGetName(self, n, dev):
        return OK, b"Fake GPU\0\0\0"

    def cuDeviceTotalMem(self, dev):
        return OK, 1 << 30

    def cuDeviceGetAttribute(self, attr, dev):
        # 102: no virtual memory management, so allocations are cuMemAlloc's (host memory here)
        return OK, {1: 1024, 10: 32, 16: 8, 75: 8, 76: 9, 102: 0}[int(attr)]

    def cuDeviceGetUuid(self, dev):
        class U:
            bytes = b"u" * 16
        return OK, U()

    def cuDeviceGetPCIBusId(self, n, dev):
        return OK, b"0000:65:00.0\0"

    def cuCtxCreate(self, params, flags, dev):
        c = self._id()
        self.contexts.add(c)
        return OK, c

    def cuCtxSetCurrent(self, ctx):
        self.current = ctx
        return (OK,)

    def cuCtxDestroy(self, ctx):
        self.contexts.discard(ctx)
        return (OK,)

    def cuCtxSynchronize(self):
        return (OK,)

    def cuMemGetInfo(self):
        return OK, (1 << 30) - sum(b.nbytes for b in self.blocks.values()), 1 << 30

    def cuMemAlloc(self, size):
        arr = np.zeros(size, dtype=np.uint8)
        self.blocks[arr.ctypes.data] = arr
        return OK, arr.ctypes.data

    def cuMemFree(self, ptr):
        return (OK,) if self.blocks.pop(int(ptr), None) is not None else (CUresult.CUDA_ERROR_INVALID_VALUE,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        ctypes.memmove(dst, src, n)
        return (OK,)

    cuMemcpyDtoHAsync = cuMemcpyDtoDAsync = cuMemcpyHtoDAsync

    def cuMemsetD8Async(self, ptr, value, n, stream):
        ctypes.memset(ptr, value, n)
        return (OK,)

    def cuMemsetD2D8Async(self, ptr, pitch, value, w, h, stream):
        for r in range(h):
            ctypes.memset(ptr + r * pitch, value, w)
        return (OK,)

    def cuMemcpy2DAsync(self, c, stream):
        src = c.srcHost if c.srcMemoryType == 1 else c.srcDevice
        dst = c.dstHost if c.dstMemoryType == 1 else c.dstDevice
        for r in range(c.Height):
            ctypes.memmove(dst + r * c.dstPitch, src + r * c.srcPitch, c.WidthInBytes)
        return (OK,)

    def cuStreamSynchronize(self, s):
        return (OK,)

    def cuModuleLoadData(self, addr):
        head = ctypes.string_at(addr, 4)
        if head not in (b"\x50\xed\x55\xba", b"\x7fELF"):
            return CUresult.CUDA_ERROR_INVALID_VALUE, None
        return OK, ("module", self._id())

    def cuModuleUnload(self, m):
        return (OK,)

    def cuModuleGetFunctionCount(self, m):
        return OK, 1

    def cuModuleEnumerateFunctions(self, n, m):
        return OK, [("func", self.KERNEL)]

    def cuFuncLoad(self, f):
        return (OK,)

    def cuFuncGetName(self, f):
        return OK, f[1].encode()

    def cuFuncGetParamCount(self, f):
        return OK, len(self.PARAMS)

    def cuFuncGetParamInfo(self, f, i):
        if i >= len(self.PARAMS):
            return CUresult.CUDA_ERROR_INVALID_VALUE, 0, 0
        return OK, *self.PARAMS[i]

    def cuFuncGetAttribute(self, attr, f):
        known = {0: 1024, 4: 12}
        return (OK, known[attr]) if attr in known else (CUresult.CUDA_ERROR_INVALID_VALUE, 0)

    def cuFuncSetAttribute(self, f, attr, value):
        if int(attr) == 8 and value > 99 * 1024:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.func_attrs.append((f, int(attr), value))
        return (OK,)

    def cuCtxSetLimit(self, limit, value):
        assert isinstance(limit, CUlimit)
        self.limits[int(limit)] = value
        return (OK,)

    def cuCtxGetLimit(self, limit):
        assert isinstance(limit, CUlimit)
        return OK, self.limits[int(limit)]

    def cuModuleGetGlobal(self, m, name):
        if name == b"counter":
            return OK, self.counter.ctypes.data, 4
        return CUresult.CUDA_ERROR_NOT_FOUND, 0, 0

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shmem, stream, kernel_params, extra):
        # Read the extra array exactly as the driver would.
        arr = (ctypes.c_void_p * 5).from_address(extra)
        assert arr[0] == self.CU_LAUNCH_PARAM_BUFFER_POINTER and arr[2] == self.CU_LAUNCH_PARAM_BUFFER_SIZE
        assert (arr[4] or 0) == self.CU_LAUNCH_PARAM_END and kernel_params in (0, None)
        size = ctypes.c_size_t.from_address(arr[3]).value
        params = ctypes.string_at(arr[1], size)
        ptr, n = struct.unpack_from("<Qi", params, 0)
        (bias,) = struct.unpack_from("<q", params, 16)
        self.launches.append((f[1], (gx, gy, gz), (bx, by, bz), shmem, params))
        if ptr not in self.blocks:
            return (CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)
        view = np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(ptr))
        view += 1 + int(self.counter[0]) + bias
        return (OK,)

    def cuStreamCreateWithPriority(self, flags, prio):
        return OK, ("stream", self._id())

    def cuStreamDestroy(self, s):
        return (OK,)

    def cuStreamQuery(self, s):
        return (OK,)

    def cuStreamWaitEvent(self, s, e, flags):
        return (OK,)

    def cuEventCreate(self, flags):
        e = self._id()
        self.events[e] = 0.0
        return OK, e

    def cuEventDestroy(self, e):
        return (OK,) if self.events.pop(e, None) is not None else (CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def cuEventRecord(self, e, s):
        self.events[e] = float(len(self.launches))
        return (OK,)

    def cuEventSynchronize(self, e):
        return (OK,)

    def cuEventQuery(self, e):
        return (CUresult.CUDA_ERROR_NOT_READY,)

    def cuEventElapsedTime(self, a, b):
        return OK, self.events[b] - self.events[a]
