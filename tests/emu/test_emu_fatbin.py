"""Fatbin decoding: containers nvcc 13 writes with each --compress-mode, arch selection, no-PTX errors."""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from pyvgpu_daemon.emu import fatbin
from pyvgpu_daemon.errors import CudaError

NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"
pytestmark = pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is needed to build fatbins")

SRC = r"""
extern "C" __global__ void addOne(float* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += 1.f; }
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    d = tmp_path_factory.mktemp("fatbin")
    src = d / "k.cu"
    src.write_text(SRC)
    cache = {}

    def make(*flags: str) -> bytes:
        if flags not in cache:
            out = d / f"k{len(cache)}.fatbin"
            subprocess.run([NVCC, "-fatbin", *flags, "-o", str(out), str(src)], check=True, capture_output=True)
            cache[flags] = out.read_bytes()
        return cache[flags]
    return make


@pytest.mark.parametrize("flags,flag_bit", [((), fatbin.FLAG_ZSTD), (("--compress-mode=speed",), fatbin.FLAG_LZ4),
                                            (("--compress-mode=none",), 0)])
def test_decode_each_compression_mode(build, flags, flag_bit):
    img = build(*flags)
    entries = fatbin.parse_image(img)
    ptx = [e for e in entries if e.is_ptx]
    assert len(ptx) == 1 and ptx[0].arch == 75
    assert (ptx[0].flags & (fatbin.FLAG_ZSTD | fatbin.FLAG_LZ4)) == flag_bit
    text = fatbin.select_ptx(img, 75)
    assert ".entry addOne" in text and ".target sm_75" in text
    assert any(e.kind == fatbin.KIND_ELF for e in entries)


def test_highest_arch_not_above_device(build):
    img = build("-gencode", "arch=compute_75,code=compute_75", "-gencode", "arch=compute_80,code=compute_80")
    assert sorted(e.arch for e in fatbin.parse_image(img) if e.is_ptx) == [75, 80]
    assert ".target sm_75" in fatbin.select_ptx(img, 75)
    assert ".target sm_80" in fatbin.select_ptx(img, 86)
    # only newer PTX than the device: the newest one (CuPy's CUB kernels carry compute_120 alone)
    assert ".target sm_80" in fatbin.select_ptx(img, 70)


def test_no_ptx_names_the_kernel(build):
    img = build("-gencode", "arch=compute_75,code=sm_75")
    with pytest.raises(CudaError) as e:
        fatbin.select_ptx(img, 75)
    assert e.value.code == 209      # cudaErrorNoKernelImageForDevice
    assert "addOne" in e.value.message and "the emulated GPU runs PTX" in e.value.message
    assert "\n" not in e.value.message and "sm_75" in e.value.message


def test_wrapper_prefix_and_corrupt_images(build):
    img = build()
    wrapped = struct.pack("<IIQQ", fatbin.WRAPPER_MAGIC, 1, 0, 0) + img
    assert ".entry addOne" in fatbin.select_ptx(wrapped, 75)
    with pytest.raises(CudaError):
        fatbin.parse_image(img[:40])
    bad = bytearray(img)
    # corrupt the zstd frame of the PTX entry
    for e_off in range(16, len(bad) - 64):
        if struct.unpack_from("<H", bad, e_off)[0] == 1 and struct.unpack_from("<I", bad, e_off + 28)[0] == 75:
            hs = struct.unpack_from("<I", bad, e_off + 4)[0]
            bad[e_off + hs:e_off + hs + 8] = b"\xff" * 8
            break
    with pytest.raises(CudaError) as e:
        fatbin.select_ptx(bytes(bad), 75)
    assert e.value.code == 200     # cudaErrorInvalidKernelImage
