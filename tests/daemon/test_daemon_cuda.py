"""The real-GPU backend.

Without a GPU: `auto` must fall back to the emulated device cleanly, and the backend's plumbing (context per
session, copies, module globals from the fatbin's cubins, the packed parameter buffer handed to cuLaunchKernel
through CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE, events) is driven against a fake `driver` module whose "device memory"
is host memory. With a GPU (`probe()` finds one), the same checks run end to end through a `--backend cuda` daemon.
"""
from __future__ import annotations

import ctypes
import enum
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES
from pyvgpu_daemon.backends import make_backend
from pyvgpu_daemon.backends.cuda import CudaBackend, probe
from pyvgpu_daemon.backends.cuda_image import fatbin_entries, elf_global_names
from pyvgpu_daemon.errors import CudaError

GPU_COUNT, NO_GPU_REASON = probe()
needs_gpu = pytest.mark.skipif(GPU_COUNT == 0, reason="no CUDA GPU")
NVCC = shutil.which("nvcc")

KERNEL_SRC = r"""
__device__ int counter;
__constant__ float coeffs[4];
extern "C" __global__ void add_one(int *p, int n, char pad, long long bias) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1 + counter + (int)bias;
}
"""


# ---------------------------------------------------------------------------------------------- no GPU here
def test_probe_never_raises_and_auto_falls_back():
    count, why = probe()
    assert isinstance(count, int)
    backend = make_backend("auto", emu_devices=2, emu_memory=1 << 20)
    if count == 0:
        assert why and backend.name == "emu" and len(backend.devices()) == 2
    else:
        assert backend.name == "cuda"


@pytest.mark.skipif(GPU_COUNT > 0, reason="a GPU is present: --backend cuda works")
def test_backend_cuda_without_gpu_is_a_clear_error(daemon_factory):
    with pytest.raises(RuntimeError) as e:
        daemon_factory(backend="cuda")
    assert "no usable CUDA GPU" in str(e.value) and "Traceback" not in str(e.value)


@pytest.fixture(scope="module")
def fatbin(tmp_path_factory) -> bytes:
    if NVCC is None:
        pytest.skip("nvcc not installed")
    d = tmp_path_factory.mktemp("fatbin")
    (d / "k.cu").write_text(KERNEL_SRC)
    subprocess.run([NVCC, "-fatbin", "-arch=sm_75", "-Xfatbin=-compress-all", "-o", str(d / "k.fatbin"),
                    str(d / "k.cu")], check=True, capture_output=True)
    return (d / "k.fatbin").read_bytes()


def test_globals_listed_from_compressed_fatbin(fatbin):
    elves = fatbin_entries(fatbin)[0]
    assert elves and all(e[:4] == b"\x7fELF" for e in elves)
    names = {n for e in elves for n in elf_global_names(e)}
    assert {"counter", "coeffs"} <= names
    assert fatbin_entries(b"\x50\xed\x55\xbagarbage") == ([], []) and elf_global_names(b"\x7fELF\x02garbage") == []


# ---------------------------------------------------------------------------------------------- older drivers
# Through the chain, with libvcuda made an older driver (PYVGPU_FAKE_DRIVER_VERSION): 13.0 is the GPU hosts' driver
# (580), without cuFuncGetParamCount (13.2); 12.3 lacks what CUDA 12.4-12.8 added (enumeration, parameter info,
# cuFuncLoad, cuCtxCreate_v4, cuEventElapsedTime_v2), so kernels, layouts and globals come from the image (its cubin,
# or its PTX in a PTX-only build) and older ABIs are called through their pointers.
OLD_DRIVERS = [(13000, (), ["cuFuncGetParamCount"]),
               (12030, (), ["cuCtxCreate", "cuModuleEnumerateFunctions", "cuFuncGetParamInfo", "cuEventElapsedTime"]),
               (12030, ("-gencode", "arch=compute_75,code=compute_75"), ["cuFuncGetParamInfo"])]


@pytest.mark.parametrize("version,flags,fallbacks", OLD_DRIVERS, ids=["13.0", "12.3", "12.3-ptx-only"])
def test_older_drivers_through_the_chain(version, flags, fallbacks, daemon_factory, cuda_build, run):
    d = daemon_factory(backend="chain", env={"PYVGPU_FAKE_DRIVER_VERSION": str(version)})
    for program in ("api_kernels.cu", "api_device.cu"):
        proc = run(cuda_build(program, *flags), [d], timeout=300)
        assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    log = d.log_text()
    started = re.search(r"CUDA driver CUDA \d+\.\d+ \((\d+)\)(.*)", log)
    assert started and int(started.group(1)) == version, log
    assert all(f"without {name}" in started.group(2) or f", {name}" in started.group(2) for name in fallbacks), log
    assert "hides it" not in log                       # the backend called nothing the older driver lacks
    assert "module 1 loaded: 6 kernels, 3 variables" in log


# ---------------------------------------------------------------------------------------------- fake driver
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
        return OK, {1: 1024, 10: 32, 16: 8, 75: 8, 76: 9}[int(attr)]

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


def test_fake_driver_snapshot_and_memory():
    drv = FakeDriver()
    be = CudaBackend(driver=drv)
    (snap,) = be.devices()
    assert snap["name"] == "Fake GPU" and (snap["major"], snap["minor"]) == (8, 9)
    assert snap["attrs"] == {1: 1024, 10: 32, 16: 8, 75: 8, 76: 9} and snap["pci_bus_id"] == "0000:65:00.0"
    assert snap["uuid"] == b"u" * 16 and snap["backend"] == "cuda"
    ctx = be.open_context(0, 1 << 40, 1)
    assert drv.current == ctx.ctx
    p = ctx.malloc(1000)
    ctx.memcpy_htod(p, b"abc" * 100, None)
    assert ctx.memcpy_dtoh(p, 300, None) == b"abc" * 100
    q = ctx.malloc(1000)
    ctx.memcpy_dtod(q, p, 300, None)
    ctx.memset(q, 0x17A, 3, None)
    assert ctx.memcpy_dtoh(q, 6, None) == b"zzzabc"
    rows = bytes(range(40))
    ctx.memcpy2d_htod(q, 16, 10, 4, rows, None)
    assert ctx.memcpy2d_dtoh(q, 16, 10, 4, None) == rows
    ctx.memcpy2d_dtod(p, 10, q, 16, 10, 4, None)
    assert ctx.memcpy_dtoh(p, 40, None) == rows
    ctx.memset2d(p, 10, 0, 2, 4, None)
    assert ctx.memcpy_dtoh(p, 12, None) == b"\0\0" + rows[2:10] + b"\0\0"
    free, total = ctx.mem_info()
    assert total == 1 << 30 and free == total - 2000
    ctx.free(p)
    with pytest.raises(CudaError) as e:
        ctx.free(p)
    assert e.value.code == ERROR_CODES["cudaErrorInvalidValue"]
    ctx.close()
    assert drv.contexts == set()


def _tiny_elf_with_global(name: str) -> bytes:
    """A minimal 64-bit ELF whose symbol table defines one data object (what cubins look like to the scan)."""
    strtab = b"\0" + name.encode() + b"\0"
    sym = struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0) + struct.pack("<IBBHQQ", 1, (1 << 4) | 1, 0, 3, 0, 4)
    data_off = 64
    str_off, sym_off = data_off, data_off + len(strtab)
    sh_off = (sym_off + len(sym) + 7) & ~7
    body = strtab + sym + b"\0" * (sh_off - sym_off - len(sym))
    sections = [
        struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, str_off, len(strtab), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, sym_off, len(sym), 1, 1, 8, 24),
        struct.pack("<IIQQQQIIQQ", 0, 8, 3, 0, 0, 4, 0, 0, 4, 0),
    ]
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", header, 0x28, sh_off)
    struct.pack_into("<HHH", header, 0x3A, 64, len(sections), 1)
    return bytes(header) + body + b"".join(sections)


def test_fake_driver_module_launch_events_reset():
    drv = FakeDriver()
    ctx = CudaBackend(driver=drv).open_context(0, 1 << 40, 1)
    mod = ctx.module_load(_tiny_elf_with_global("counter"))
    (k,) = mod.kernels.values()
    assert k.name == "add_one" and k.params == FakeDriver.PARAMS
    assert k.attrs == {"max_threads_per_block": 1024, "num_regs": 12}
    assert mod.variables == {"counter": (drv.counter.ctypes.data, 4)}
    n = 64
    p = ctx.malloc(4 * n)
    ctx.memcpy_htod(p, np.arange(n, dtype=np.int32).tobytes(), None)
    ctx.memcpy_htod(mod.variables["counter"][0], np.int32(10).tobytes(), None)
    params = struct.pack("<Qi", p, n) + b"\x07" + b"\0" * 3 + struct.pack("<q", 100)
    s = ctx.stream_create(1, -1)
    e0, e1 = ctx.event_create(0), ctx.event_create(0)
    ctx.event_record(e0, s)
    ctx.launch(mod, k, (2, 1, 1), (32, 1, 1), 0, params, s)
    ctx.event_record(e1, s)
    assert drv.launches[-1][:4] == ("add_one", (2, 1, 1), (32, 1, 1), 0) and drv.launches[-1][4] == params
    out = np.frombuffer(ctx.memcpy_dtoh(p, 4 * n, None), dtype=np.int32)
    assert (out == np.arange(n) + 111).all()
    assert ctx.event_elapsed(e0, e1) == 1.0
    assert ctx.event_query(e1) is False and ctx.stream_query(s) is True
    bad = struct.pack("<Qi", 0xDEAD0000, 4) + b"\0" * 12
    with pytest.raises(CudaError) as e:
        ctx.launch(mod, k, (1, 1, 1), (1, 1, 1), 0, bad, None)
    assert e.value.code == ERROR_CODES["cudaErrorIllegalAddress"] and e.value.sticky
    old = ctx.ctx
    ctx.reset()
    assert ctx.ctx != old and drv.contexts == {ctx.ctx}
    with pytest.raises(CudaError) as e:
        ctx.module_load(b"not an image")
    assert e.value.code == ERROR_CODES["cudaErrorInvalidValue"]
    ctx.close()


def test_fake_driver_func_attributes_and_limits():
    drv = FakeDriver()
    ctx = CudaBackend(driver=drv).open_context(0, 1 << 40, 1)
    mod = ctx.module_load(_tiny_elf_with_global("counter"))
    (k,) = mod.kernels.values()
    ctx.func_set_attr(mod, k, 8, 64 << 10)
    ctx.func_set_attr(mod, k, 9, 25)
    assert drv.func_attrs == [(k.handle, 8, 64 << 10), (k.handle, 9, 25)]
    assert k.attrs["max_dynamic_shared_size_bytes"] == 64 << 10 and k.attrs["preferred_shmem_carveout"] == 25
    with pytest.raises(CudaError) as e:
        ctx.func_set_attr(mod, k, 8, 100 * 1024)              # the driver's answer is passed on
    assert e.value.code == ERROR_CODES["cudaErrorInvalidValue"]
    with pytest.raises(CudaError) as e:
        ctx.func_set_attr(mod, k, 0, 1)                       # not a settable cudaFuncAttribute
    assert e.value.code == ERROR_CODES["cudaErrorInvalidValue"]
    assert ctx.get_limit(1) == 1 << 20
    ctx.set_limit(0, 4096)
    assert ctx.get_limit(0) == 4096 and drv.limits[0] == 4096
    with pytest.raises(CudaError) as e:
        ctx.get_limit(42)
    assert e.value.code == ERROR_CODES["cudaErrorUnsupportedLimit"]
    ctx.close()


# ---------------------------------------------------------------------------------------------- real GPU
@needs_gpu
def test_real_gpu_memory_round_trip(daemon_factory):
    d = daemon_factory(backend="cuda")
    with Client.connect("127.0.0.1", d.port) as c:
        assert c.info["backend"] == "cuda" and len(c.devices) == GPU_COUNT
        dev = c.devices[0]
        assert dev["total_mem"] > 0 and dev["attrs"][10] == 32
        data = np.random.default_rng(1).bytes(64 << 20)
        err, p, _ = c.call("MALLOC", 0, len(data))
        assert err == 0
        assert c.call("MEMCPY_HTOD", 0, p, 0, payload=data)[0] == 0
        assert c.call("MEMCPY_DTOH", 0, p, len(data), 0)[2] == data
        assert c.call("FREE", 0, p + 1)[0] == ERROR_CODES["cudaErrorInvalidValue"]
        assert c.call("FREE", 0, p)[0] == 0


@needs_gpu
def test_real_gpu_module_load_and_launch(daemon_factory, tmp_path):
    if NVCC is None:
        pytest.skip("nvcc not installed")
    src = tmp_path / "k.cu"
    src.write_text(KERNEL_SRC)
    subprocess.run([NVCC, "-fatbin", "-o", str(tmp_path / "k.fatbin"), str(src)], check=True)
    image = (tmp_path / "k.fatbin").read_bytes()
    d = daemon_factory(backend="cuda")
    with Client.connect("127.0.0.1", d.port) as c:
        err, info, _ = c.call("MODULE_LOAD", 0, 1, payload=image)
        assert err == 0, err
        k = info["kernels"]["add_one"]
        assert [tuple(x) for x in k["params"]] == [(0, 8), (8, 4), (12, 1), (16, 8)]
        addr, size = info["vars"]["counter"]
        assert size == 4
        n = 1000
        _, p, _ = c.call("MALLOC", 0, 4 * n)
        c.call("MEMCPY_HTOD", 0, p, 0, payload=np.arange(n, dtype=np.int32).tobytes())
        c.call("MEMCPY_HTOD", 0, addr, 0, payload=np.int32(5).tobytes())
        params = struct.pack("<Qi", p, n) + b"\0" * 4 + struct.pack("<q", 10)
        assert c.call("LAUNCH", 0, k["id"], [4, 1, 1], [256, 1, 1], 0, 0, payload=params)[0] == 0
        err, _, out = c.call("MEMCPY_DTOH", 0, p, 4 * n, 0)
        assert err == 0 and (np.frombuffer(out, np.int32) == np.arange(n) + 16).all()
        # a kernel fault is sticky until DEVICE_RESET
        bad = struct.pack("<Qi", 8, n) + b"\0" * 12
        c.call("LAUNCH", 0, k["id"], [4, 1, 1], [256, 1, 1], 0, 0, payload=bad, reply=False)
        assert c.call("DEVICE_SYNC", 0)[0] == ERROR_CODES["cudaErrorIllegalAddress"]
        assert c.call("MEM_GET_INFO", 0)[0] == ERROR_CODES["cudaErrorIllegalAddress"]
        assert c.call("DEVICE_RESET", 0)[0] == 0
        assert c.call("MEM_GET_INFO", 0)[0] == 0


def test_fake_driver_host_waits_give_the_device_turn_away():
    """Every blocking driver wait (stream/event/context synchronize, and the syncs inside D2H copies) runs inside the
    context's wait_scope, which the scheduler sets so other sessions may use the device meanwhile."""
    from contextlib import contextmanager
    drv = FakeDriver()
    ctx = CudaBackend(driver=drv).open_context(0, 1 << 40, 1)
    waits: list[str] = []

    @contextmanager
    def scope():
        waits.append("in")
        yield
        waits.append("out")
    ctx.wait_scope = scope
    p = ctx.malloc(64)
    ctx.memcpy_htod(p, b"x" * 64, None)
    assert waits == []                                   # enqueueing work does not wait
    ctx.synchronize()
    ctx.stream_sync(None)
    ev = ctx.event_create(0)
    ctx.event_record(ev, None)
    ctx.event_sync(ev)
    assert ctx.memcpy_dtoh(p, 64, None) == b"x" * 64
    assert waits == ["in", "out"] * 4
    ctx.close()
