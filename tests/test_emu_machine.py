"""Direct tests of the emulator core: CUDA kernels from tests/cuda/emu_*.cu compiled to PTX with nvcc, loaded with
EmuModule into a DeviceMemory, launched, and checked against NumPy references."""
from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.errors import CudaError

ROOT = Path(__file__).resolve().parent.parent
CUDA = ROOT / "tests" / "cuda"
CACHE = ROOT / "build" / "emu-ptx"
NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"

pytestmark = pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is needed to build the test kernels")


def ptx_of(name: str, *flags: str) -> bytes:
    src = CUDA / name
    key = hashlib.sha256(src.read_bytes() + repr(flags).encode()).hexdigest()[:16]
    out = CACHE / f"{src.stem}-{key}.ptx"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        subprocess.run([NVCC, "-ptx", "-arch=sm_75", "-O3", *flags, "-o", str(tmp), str(src)], check=True,
                       capture_output=True)
        tmp.rename(out)
    return out.read_bytes()


class Dev:
    def __init__(self, limits: EmuLimits | None = None) -> None:
        self.mem = DeviceMemory(1 << 40, 1 << 28)
        self.limits = limits

    def load(self, name: str, *flags: str) -> EmuModule:
        return EmuModule.load(ptx_of(name, *flags), self.mem, limits=self.limits)

    def put(self, a) -> int:
        a = np.ascontiguousarray(a)
        p = self.mem.alloc(a.nbytes)
        self.mem.write(p, a.tobytes())
        return p

    def zeros(self, n: int, dtype) -> int:
        p = self.mem.alloc(n * np.dtype(dtype).itemsize)
        self.mem.fill(p, 0, n * np.dtype(dtype).itemsize)
        return p

    def get(self, p: int, n: int, dtype) -> np.ndarray:
        return np.frombuffer(bytes(self.mem.read(p, n * np.dtype(dtype).itemsize)), dtype=dtype).copy()


def pack(mod: EmuModule, kernel: str, *args) -> bytes:
    """Pack arguments at the kernel's parameter offsets: ints are pointers (u64) unless given as NumPy scalars;
    bytes are passed through (structs)."""
    layout = mod.kernels[kernel].params
    assert len(layout) == len(args), (layout, args)
    end = max((o + s for o, s in layout), default=0)
    buf = bytearray(end)
    for (off, size), a in zip(layout, args):
        if isinstance(a, bytes):
            raw = a
        elif isinstance(a, np.generic):
            raw = a.tobytes()
        else:
            raw = struct.pack("<Q", a)
        assert len(raw) == size, (kernel, off, size, a)
        buf[off:off + size] = raw
    return bytes(buf)


def launch(mod, kernel, grid, block, *args, shmem=0):
    grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
    block = block if isinstance(block, tuple) else (block, 1, 1)
    return mod.launch(kernel, grid, block, shmem, pack(mod, kernel, *args))


# ------------------------------------------------------------------------------------------------ emu_basic.cu
def test_vector_add_and_bounds():
    d = Dev()
    m = d.load("emu_basic.cu")
    n = 1000
    a = np.random.default_rng(1).random(n, dtype=np.float32)
    b = np.random.default_rng(2).random(n, dtype=np.float32)
    pa, pb, pc = d.put(a), d.put(b), d.zeros(n, np.float32)
    launch(m, "vecAdd", 4, 256, pa, pb, pc, np.int32(n))
    np.testing.assert_array_equal(d.get(pc, n, np.float32), a + b)


def test_saxpy_grid_stride():
    d = Dev()
    m = d.load("emu_basic.cu")
    n = 10007
    x = np.arange(n, dtype=np.float32) * np.float32(0.5)
    y = np.ones(n, np.float32)
    px, py = d.put(x), d.put(y)
    launch(m, "saxpy", 7, 96, np.float32(3.0), px, py, np.uint64(n))
    np.testing.assert_array_equal(d.get(py, n, np.float32), np.float32(3.0) * x + y)


def test_3d_grid_and_partial_warps():
    d = Dev()
    m = d.load("emu_basic.cu")
    W, H, D = 13, 7, 5
    po = d.zeros(W * H * D, np.int32)
    launch(m, "index3d", (4, 3, 2), (4, 3, 3), po, np.int32(W), np.int32(H), np.int32(D))
    z, y, x = np.meshgrid(np.arange(D), np.arange(H), np.arange(W), indexing="ij")
    np.testing.assert_array_equal(d.get(po, W * H * D, np.int32).reshape(D, H, W), x + 1000 * y + 1000000 * z)


def test_struct_by_value():
    d = Dev()
    m = d.load("emu_basic.cu")
    # struct Params { int n; float scale; double offset; char tag; short s; } : 24 bytes, align 8
    raw = struct.pack("<ifdbxh4x", 100, 0.25, 3.5, 7, -2)
    po = d.zeros(100, np.float32)
    launch(m, "structParam", 1, 128, raw, po)
    i = np.arange(100)
    exp = (i * np.float32(0.25) + 3.5).astype(np.float32) + np.float32(5)
    np.testing.assert_array_equal(d.get(po, 100, np.float32), exp)


def test_grid_larger_than_one_chunk():
    d = Dev(EmuLimits(lanes_per_chunk=1024))
    m = d.load("emu_basic.cu")
    n = 20000
    a = np.arange(n, dtype=np.float32)
    pa, pc = d.put(a), d.zeros(n, np.float32)
    launch(m, "vecAdd", (n + 127) // 128, 128, pa, pa, pc, np.int32(n))
    np.testing.assert_array_equal(d.get(pc, n, np.float32), a + a)


def test_out_of_bounds_and_misaligned_are_errors():
    d = Dev()
    m = d.load("emu_basic.cu")
    n = 100
    pa = d.zeros(n, np.float32)
    with pytest.raises(CudaError) as e:
        launch(m, "vecAdd", 1, 128, pa, pa, pa, np.int32(n + 10))
    assert e.value.code == 700   # cudaErrorIllegalAddress
    with pytest.raises(CudaError) as e:
        launch(m, "vecAdd", 1, 32, pa + 2, pa, pa, np.int32(8))
    assert e.value.code == 716   # cudaErrorMisalignedAddress


# ------------------------------------------------------------------------------------------------ emu_shared.cu
def test_tiled_matmul():
    d = Dev()
    m = d.load("emu_shared.cu")
    M, N, K = 70, 50, 45
    rng = np.random.default_rng(3)
    A = (rng.integers(-8, 8, (M, K)) * 0.125).astype(np.float32)
    B = (rng.integers(-8, 8, (K, N)) * 0.25).astype(np.float32)
    pA, pB, pC = d.put(A), d.put(B), d.zeros(M * N, np.float32)
    launch(m, "matmulTiled", ((N + 15) // 16, (M + 15) // 16, 1), (16, 16, 1), pA, pB, pC,
           np.int32(M), np.int32(N), np.int32(K))
    np.testing.assert_array_equal(d.get(pC, M * N, np.float32).reshape(M, N), A @ B)


def test_block_reduction_with_syncthreads():
    d = Dev()
    m = d.load("emu_shared.cu")
    n = 5000
    x = np.random.default_rng(4).integers(-1000, 1000, n).astype(np.int32)
    nb = (n + 255) // 256
    px, po = d.put(x), d.zeros(nb, np.int32)
    launch(m, "blockReduce", nb, 256, px, po, np.int32(n))
    exp = np.add.reduceat(x, np.arange(0, n, 256))
    np.testing.assert_array_equal(d.get(po, nb, np.int32), exp)


def test_warp_shuffle_reduction_and_scan():
    d = Dev()
    m = d.load("emu_shared.cu")
    n = 3000
    x = (np.arange(n) % 13 - 6).astype(np.float32)
    nb = (n + 255) // 256
    px, po = d.put(x), d.zeros(nb, np.float32)
    launch(m, "warpReduce", nb, 256, px, po, np.int32(n))
    np.testing.assert_array_equal(d.get(po, nb, np.float32), np.add.reduceat(x, np.arange(0, n, 256)))
    xi = np.random.default_rng(5).integers(-50, 50, 256).astype(np.int32)
    pi, ps, pb = d.put(xi), d.zeros(256, np.int32), d.zeros(256, np.int32)
    launch(m, "warpScan", 2, 128, pi, ps, pb)
    w = xi.reshape(8, 32)
    np.testing.assert_array_equal(d.get(ps, 256, np.int32).reshape(8, 32), np.cumsum(w, axis=1))
    np.testing.assert_array_equal(d.get(pb, 256, np.int32).reshape(8, 32),
                                  np.repeat(np.cumsum(w, axis=1)[:, 7:8], 32, axis=1))


def test_vote_ballot_and_syncthreads_count():
    d = Dev()
    m = d.load("emu_shared.cu")
    x = np.random.default_rng(6).integers(-10, 10, 2048).astype(np.int32)
    x[64:96] = np.abs(x[64:96])     # a warp where all() holds
    pi, pb, pa = d.put(x), d.zeros(64, np.uint32), d.zeros(1100, np.int32)
    launch(m, "voteKernel", 8, 256, pi, pb, pa)
    w = x.reshape(64, 32)
    bal = ((w > 0) * (1 << np.arange(32, dtype=np.uint64))).sum(1).astype(np.uint32)
    np.testing.assert_array_equal(d.get(pb, 64, np.uint32), bal)
    anyall = d.get(pa, 1100, np.int32)
    np.testing.assert_array_equal(anyall[:64], (w > 5).any(1) * 2 + (w >= 0).all(1))
    np.testing.assert_array_equal(anyall[1000:1008], (x.reshape(8, 256) > 0).sum(1))


def test_dynamic_shared_memory():
    d = Dev()
    m = d.load("emu_shared.cu")
    n = 1000
    x = np.arange(n, dtype=np.float32)
    px, po = d.put(x), d.zeros(n, np.float32)
    launch(m, "dynSmem", 4, 256, px, po, np.int32(n), shmem=1024)
    xp = np.concatenate([x, np.zeros(24, np.float32)]).reshape(4, 256)[:, ::-1].reshape(-1)[:n]
    np.testing.assert_array_equal(d.get(po, n, np.float32), xp * 2)
