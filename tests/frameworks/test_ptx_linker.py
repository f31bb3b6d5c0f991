"""pyvgpu's PTX-only nvJitLink (csrc/nvjitlink, libvnvJitLink.so) called as cuda.bindings calls it, through its C
API: one PTX input is the linked result (as the "cubin" and as the PTX); what needs a device linker is
NVJITLINK_ERROR_INVALID_INPUT with the reason in the error log; -lto links go to NVIDIA's nvJitLink (-ptx added)
and give PTX. numba-cuda on the emulated GPU through it: test_frameworks.py::test_numba_emulated."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pyvgpu
from pyvgpu import frameworks

OK, MISSING_ARCH, INVALID_INPUT = 0, 2, 3
CUBIN, PTX = 1, 2
KERNEL = b"""//
.version 8.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 p) { ret; }
"""

# One process per check: the library is loaded once per process, and PYVGPU_NVJITLINK_LIB is read at its first
# -lto link.
SCRIPT = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
def create(*opts):
    h = ctypes.c_void_p()
    arr = (ctypes.c_char_p * len(opts))(*opts)
    return lib.nvJitLinkCreate(ctypes.byref(h), len(opts), arr), h
def log(h):
    n = ctypes.c_size_t()
    assert lib.nvJitLinkGetErrorLogSize(h, ctypes.byref(n)) == 0
    buf = ctypes.create_string_buffer(n.value)
    assert lib.nvJitLinkGetErrorLog(h, buf) == 0
    return buf.value.decode()
def result(h, what):
    n = ctypes.c_size_t()
    assert getattr(lib, f"nvJitLinkGetLinked{what}Size")(h, ctypes.byref(n)) == 0
    buf = ctypes.create_string_buffer(n.value)
    assert getattr(lib, f"nvJitLinkGetLinked{what}")(h, buf) == 0
    return buf.value
"""


def run(body: str, env: dict | None = None) -> subprocess.CompletedProcess:
    lib = pyvgpu.lib_dir() / pyvgpu.PTX_LINKER_LIB_NAME
    e = {k: v for k, v in os.environ.items() if k != frameworks.ENV_NVIDIA_NVJITLINK}
    return subprocess.run([sys.executable, "-c", SCRIPT + body, str(lib)], env={**e, **(env or {})},
                          capture_output=True, text=True, timeout=60)


def test_one_ptx_input_is_the_linked_cubin_and_ptx():
    proc = run(f"""
kernel = {KERNEL!r}
r, h = create(b"-arch=sm_75", b"-maxrregcount=32")
assert r == 0
assert lib.nvJitLinkAddData(h, 2, kernel, len(kernel), b"k.ptx") == 0
assert lib.nvJitLinkComplete(h) == 0
assert result(h, "Cubin") == kernel and result(h, "Ptx") == kernel
assert lib.nvJitLinkDestroy(ctypes.byref(h)) == 0 and not h.value
maj, mnr = ctypes.c_uint(), ctypes.c_uint()
assert lib.nvJitLinkVersion(ctypes.byref(maj), ctypes.byref(mnr)) == 0 and (maj.value, mnr.value) == (13, 0)
print("fine")
""")
    assert proc.stdout.strip() == "fine", proc.stderr


def test_what_needs_a_device_linker_is_refused_with_its_reason():
    proc = run(f"""
kernel = {KERNEL!r}
assert create()[0] == {MISSING_ARCH}
r, h = create(b"-arch=sm_75")
assert lib.nvJitLinkAddData(h, 1, b"\\x7fELF....", 8, b"k.cubin") == {INVALID_INPUT}
print(log(h))
assert lib.nvJitLinkAddData(h, 2, kernel, len(kernel), b"k.ptx") == 0
assert lib.nvJitLinkComplete(h) == {INVALID_INPUT}      # the refused input fails the link too
r, h = create(b"-arch=sm_75")
assert lib.nvJitLinkAddData(h, 2, kernel, len(kernel), b"a.ptx") == 0
assert lib.nvJitLinkAddData(h, 2, kernel, len(kernel), b"b.ptx") == {INVALID_INPUT}
print(log(h))
r, h = create(b"-arch=sm_75", b"-lto")                     # no NVIDIA nvJitLink named
assert r == 0 and lib.nvJitLinkAddData(h, 3, b"ltoir", 5, b"k.ltoir") == {INVALID_INPUT}
print(log(h))
""")
    assert proc.returncode == 0, proc.stderr
    cubin, second, lto = proc.stdout.splitlines()
    assert "links PTX only" in cubin and "a cubin (k.cubin)" in cubin
    assert "a second PTX input (b.ptx)" in second
    assert "PYVGPU_NVJITLINK_LIB" in lto and "-lto" in lto
    assert "NVJITLINK_ERROR_INVALID_INPUT" in proc.stderr


def test_lto_link_through_nvidias_nvjitlink_gives_ptx():
    """numba's LTO-IR of a kernel (compiled for sm_75 without a GPU) linked with -lto: NVIDIA's nvJitLink, asked
    for PTX, links it; the result, as cubin and as PTX, is PTX text holding the kernel."""
    nvidia = frameworks.nvidia_nvjitlink()
    assert nvidia, "nvidia-nvjitlink (a dependency of the frameworks tier's torch) is not installed"
    proc = run("""
import warnings; warnings.simplefilter("ignore")
from numba import cuda
def double(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] * 2
ltoir, _ = cuda.compile(double, "void(float32[:])", cc=(7, 5), device=False, abi="numba",
                         output="ltoir")
r, h = create(b"-arch=sm_75", b"-lto")
assert r == 0
assert lib.nvJitLinkAddData(h, 3, ltoir, len(ltoir), b"double.ltoir") == 0, log(h)
assert lib.nvJitLinkComplete(h) == 0, log(h)
cubin, ptx = result(h, "Cubin"), result(h, "Ptx")
assert cubin == ptx
print(ptx.decode())
""", env={frameworks.ENV_NVIDIA_NVJITLINK: str(nvidia)})
    assert proc.returncode == 0, proc.stderr
    assert ".target sm_75" in proc.stdout and ".entry" in proc.stdout and "double" in proc.stdout, proc.stdout


def test_nvidias_libraries_linking_nvjitlink_load_beside_it():
    """cuSPARSE 12 (and through it torch) links nvJitLink's versioned names (__nvJitLinkCreate_13_0, ...): with
    pyvgpu's library preloaded in nvJitLink's place it still loads, and those names are pyvgpu's functions."""
    wheel = frameworks.nvidia_nvjitlink()
    assert wheel, "the nvidia-* CUDA 13 wheels (dependencies of the frameworks tier's torch) are not installed"
    cusparse = wheel.parent / "libcusparse.so.12"
    lib = pyvgpu.lib_dir() / pyvgpu.PTX_LINKER_LIB_NAME
    proc = subprocess.run([sys.executable, "-c", f"""
import ctypes
ctypes.CDLL({str(cusparse)!r})
ours = ctypes.CDLL({str(lib)!r})
print(ctypes.cast(ours.__nvJitLinkCreate_13_0, ctypes.c_void_p).value ==
      ctypes.cast(ours.nvJitLinkCreate, ctypes.c_void_p).value)
"""], env={**os.environ, "LD_PRELOAD": str(lib)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr
