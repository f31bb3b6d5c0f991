"""Probe (real-GPU check): what slot 7 of the driver's private export table 6e163fbe-b958-444d-835c-e182aff1991e
answers, the slot cuFFT 12 calls when it makes a plan (docs/driver.md, "Export tables of the CUDA libraries").
What cuFFT shows (libcufft.so.12+0x350fb0): it checks the table's size exceeds 0x37 bytes, calls
slot7(a, m, callback, &out) where callback(ud, value) does `*ud = value`, and takes the answer 1 as success; the same
caller, when it has a kernel's name instead, calls a driver entry point shaped like cuModuleGetFunction /
cuLibraryGetKernel with m. The reading to confirm: slot 7 hands the callback the functions (or kernels) of module or
library m; cuFFT's modules hold one kernel each. Each step prints what NVIDIA's driver did, so the native way is the
one that answers; the pyvgpu ways show libvcuda's answer. GPU run 3 (H100, driver 580) answered natively: for a
module, the callback gets each of its functions (the first the one cuModuleGetFunction gives) and the count comes
back; for a library, nothing and 0. libvcuda now serves the slot so, and each step fails where an answer differs
from that (natively too: a driver that answers otherwise is news). Attempts that pass a handle of the wrong kind may
crash the process: they come last."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_common import main  # noqa: E402

BODY = r'''
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
def ck(what, rc):
    if rc != 0:
        raise RuntimeError(f"{what}: {rc}")
PTX = {n: (".version 8.0\n.target sm_75\n.address_size 64\n" + "".join(
    f".visible .entry {k}(.param .u64 p) {{ ret; }}\n" for k in names)).encode()
    for n, names in (("one", ["only"]), ("two", ["first", "second"]))}
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
mods, libs, facts = {}, {}, {}
def setup():
    ck("cuInit", cu.cuInit(0))
    ck("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    ck("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    ck("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    for n, ptx in PTX.items():
        m, lib = ctypes.c_void_p(), ctypes.c_void_p()
        ck("cuModuleLoadData", cu.cuModuleLoadData(ctypes.byref(m), ptx))
        ck("cuLibraryLoadData", cu.cuLibraryLoadData(ctypes.byref(lib), ptx, None, None, 0, None, None, 0))
        mods[n], libs[n] = m, lib
        f = ctypes.c_void_p()
        name = b"only" if n == "one" else b"first"
        ck("cuModuleGetFunction", cu.cuModuleGetFunction(ctypes.byref(f), m, name))
        k = ctypes.c_void_p()
        ck("cuLibraryGetKernel", cu.cuLibraryGetKernel(ctypes.byref(k), lib, name))
        facts[n] = {"function": f.value, "kernel": k.value}
    return {n: {k: hex(v) for k, v in d.items()} for n, d in facts.items()}
if not step("setup", setup):
    raise SystemExit(1)
table = ctypes.c_void_p()
def get_table():
    ck("cuGetExportTable", cu.cuGetExportTable(ctypes.byref(table), bytes.fromhex("6e163fbeb958444d835ce182aff1991e")))
    size = ctypes.cast(table, ctypes.POINTER(ctypes.c_size_t))[0]
    return f"size {size:#x} bytes ({size // 8} slots)"
if not step("table", get_table):
    raise SystemExit(1)
CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
SLOT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, CB, ctypes.c_void_p)
slot7 = SLOT(ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p))[7])
def attempt(a, handle, n):
    seen = []
    cb = CB(lambda ud, value: seen.append(value))
    r = slot7(a, handle, cb, None)
    known = {v: k for k, v in facts[n].items()}
    got = [known.get(v, hex(v or 0)) for v in seen]
    count = {"one": 1, "two": 2}[n] if handle is mods[n] else 0
    if r != count or len(seen) != count or (count and got[0] != "function"):
        raise RuntimeError(f"returned {r}, callback got {got}: NVIDIA's driver returned {count} with "
                           f"{count} callbacks, the first cuModuleGetFunction's handle")
    return f"returned {r}, callback got {got}"
for a_name, a in (("NULL", None), ("the context", ctx)):
    for n in ("one", "two"):
        step(f"slot7({a_name}, module {n}, cb)", lambda a=a, n=n: attempt(a, mods[n], n))
for a_name, a in (("NULL", None), ("the context", ctx)):
    for n in ("one", "two"):
        step(f"slot7({a_name}, library {n}, cb)", lambda a=a, n=n: attempt(a, libs[n], n))
'''

if __name__ == "__main__":
    sys.exit(main("cuFFT's export table 6e163fbe (ctypes)", "ctypes", BODY))
