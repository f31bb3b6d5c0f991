"""Framework probe (real-GPU check): the driver API as frameworks' loaders reach it, dlopen("libcuda.so.1") through
ctypes, no framework needed (tools/gpu_probes/probe_common.py says how): device, primary context, a 1 MiB
round trip through device memory, compared byte for byte; memsets of page-locked host memory (XLA's autotuner's
8-byte zeroing, which libvcuda refused in GPU run 3)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_common import main  # noqa: E402

BODY = '''
import ctypes, os
cu = ctypes.CDLL("libcuda.so.1")
def ck(what, rc):
    if rc != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError(f"{what}: {rc} {name.value.decode() if name.value else ''}")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
def init():
    ck("cuInit", cu.cuInit(0))
    n, ver, name = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(256)
    ck("cuDeviceGetCount", cu.cuDeviceGetCount(ctypes.byref(n)))
    ck("cuDriverGetVersion", cu.cuDriverGetVersion(ctypes.byref(ver)))
    ck("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    ck("cuDeviceGetName", cu.cuDeviceGetName(name, 256, dev))
    return f"{n.value} device(s), {name.value.decode()}, driver API {ver.value}"
step("init", init)
def context():
    ck("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    ck("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
step("primary context", context)
def roundtrip():
    n = 1 << 20
    src = os.urandom(n)
    back = ctypes.create_string_buffer(n)
    ptr = ctypes.c_uint64()
    ck("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n)))
    ck("cuMemcpyHtoD", cu.cuMemcpyHtoD_v2(ptr, src, ctypes.c_size_t(n)))
    ck("cuMemcpyDtoH", cu.cuMemcpyDtoH_v2(back, ptr, ctypes.c_size_t(n)))
    ck("cuMemFree", cu.cuMemFree_v2(ptr))
    assert back.raw == src, "the bytes read back differ"
    return f"{n} bytes at 0x{ptr.value:x}"
step("memory round trip", roundtrip)
def pinned_memset():
    # XLA's autotuner zeroes an 8-byte result in page-locked host memory (cuMemsetD32Async, 2 elements): libvcuda
    # refused that in GPU run 3; natively it tells what NVIDIA's driver does with such a pointer
    host, s = ctypes.c_void_p(), ctypes.c_void_p()
    ck("cuMemHostAlloc", cu.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(4096), 0))
    ctypes.memset(host, 0xEE, 4096)
    ck("cuStreamCreate", cu.cuStreamCreate(ctypes.byref(s), 1))
    ck("cuMemsetD32Async", cu.cuMemsetD32Async(ctypes.c_uint64(host.value), ctypes.c_uint(0), ctypes.c_size_t(2), s))
    ck("cuMemsetD8Async", cu.cuMemsetD8Async(ctypes.c_uint64(host.value + 64), ctypes.c_ubyte(0x3C),
                                             ctypes.c_size_t(5), s))
    ck("cuStreamSynchronize", cu.cuStreamSynchronize(s))
    got = ctypes.string_at(host.value, 72)
    ck("cuStreamDestroy", cu.cuStreamDestroy_v2(s))
    ck("cuMemFreeHost", cu.cuMemFreeHost(host))
    want = bytes(8) + b"\\xee" * 56 + b"\\x3c" * 5 + b"\\xee" * 3
    assert got == want, f"the host bytes read {got.hex()}"
    return "cuMemsetD32Async/D8Async on cuMemHostAlloc memory, in stream order"
step("memset of page-locked host memory", pinned_memset)
step("release", lambda: ck("cuDevicePrimaryCtxRelease", cu.cuDevicePrimaryCtxRelease_v2(dev)))
'''

if __name__ == "__main__":
    sys.exit(main("driver API (ctypes)", "ctypes", BODY))
