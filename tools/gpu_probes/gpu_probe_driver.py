"""Framework probe (real-GPU check): the driver API as frameworks' loaders reach it, dlopen("libcuda.so.1") through
ctypes, no framework needed (tools/gpu_probes/probe_common.py says how): device, primary context, a 1 MiB
round trip through device memory, compared byte for byte."""
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
step("release", lambda: ck("cuDevicePrimaryCtxRelease", cu.cuDevicePrimaryCtxRelease_v2(dev)))
'''

if __name__ == "__main__":
    sys.exit(main("driver API (ctypes)", "ctypes", BODY))
