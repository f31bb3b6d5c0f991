"""Direct tests of the emulator core: CUDA kernels from tests/cuda/emu_*.cu compiled to PTX with nvcc, loaded with
EmuModule into a DeviceMemory, launched, and checked against NumPy references."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from harness import NVCC, ptx_of
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.errors import CudaError

pytestmark = pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is needed to build the test kernels")


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


# ------------------------------------------------------------------------------------------------ emu_atomics.cu
def test_every_atomic_kind_under_contention():
    d = Dev()
    m = d.load("emu_atomics.cu")
    n = 2000
    ints = d.put(np.array([0, 0, 1 << 30, -5, -1, 0, 0, -1, 0], np.int32))
    uints = d.put(np.zeros(2, np.uint32))
    ulls, flt, dbl = d.zeros(1, np.uint64), d.zeros(1, np.float32), d.zeros(1, np.float64)
    slots = d.zeros(n, np.int32)
    launch(m, "atomicsAll", (n + 127) // 128, 128, ints, uints, ulls, flt, dbl, slots, np.int32(n))
    i = np.arange(n)
    got = d.get(ints, 9, np.int32)
    assert sorted(d.get(slots, n, np.int32)) == list(range(n))
    # thread-linear order: slot numbers follow thread order
    np.testing.assert_array_equal(d.get(slots, n, np.int32), i)
    andv = np.bitwise_and.reduce(~(1 << (i % 31)))
    orv = np.bitwise_or.reduce(1 << (i % 17))
    xorv = np.bitwise_xor.reduce(i)
    assert list(got) == [n, -(n * (n - 1) // 2), 1000 - (n - 1), 3 * (n - 1), andv, orv, xorv, n - 1, 2 * n]
    assert list(d.get(uints, 2, np.uint32)) == [n % 16, (16 - n % 16) % 16]
    assert d.get(ulls, 1, np.uint64)[0] == sum(int(k) << 20 for k in i)
    assert d.get(flt, 1, np.float32)[0] == 0.5 * n
    assert d.get(dbl, 1, np.float64)[0] == 0.25 * n


def test_cas_loop_float_max_and_shared_histogram():
    d = Dev()
    m = d.load("emu_atomics.cu")
    n = 3000
    x = ((np.arange(n) * 7919) % 1000 - 300.5).astype(np.float32)
    px, po = d.put(x), d.put(np.array([-1e30], np.float32))
    launch(m, "casMax", (n + 255) // 256, 256, px, po, np.int32(n))
    assert d.get(po, 1, np.float32)[0] == x.max()
    v = (np.arange(n) * 31 + 7).astype(np.int32)
    pv, pb = d.put(v), d.zeros(16, np.int32)
    launch(m, "histo", (n + 255) // 256, 256, pv, pb, np.int32(n))
    np.testing.assert_array_equal(d.get(pb, 16, np.int32), np.bincount(v & 15, minlength=16))


def test_float_atomic_add_order_is_thread_order():
    d = Dev()
    m = d.load("emu_atomics.cu")
    n = 512
    ints = d.put(np.zeros(9, np.int32))
    flt = d.zeros(1, np.float32)
    for _ in range(2):
        d.mem.fill(flt, 0, 4)
        launch(m, "atomicsAll", 4, 128, ints, d.zeros(2, np.uint32), d.zeros(1, np.uint64), flt,
               d.zeros(1, np.float64), d.zeros(n, np.int32), np.int32(n))
        assert d.get(flt, 1, np.float32)[0] == np.float32(0.5) * n


# ------------------------------------------------------------------------------------------------ emu_math.cu
def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def test_math_functions_within_ulp_bounds():
    d = Dev()
    m = d.load("emu_math.cu")
    n = 1024
    x = ((np.arange(n) - 512) * np.float32(0.0173)).astype(np.float32)
    px, po = d.put(x), d.zeros(6 * n, np.float32)
    launch(m, "mathF", n // 256, 256, px, po, np.int32(n))
    out = d.get(po, 6 * n, np.float32).reshape(6, n)
    x64 = x.astype(np.float64)
    ref = [np.exp(x64), np.log(np.abs(x64) + 0.5), np.sin(x64), np.sqrt(np.abs(x64)), np.tanh(x64),
           np.power(np.abs(x64) + np.float32(0.1).astype(np.float64), np.float64(np.float32(1.7)))]
    ref[1] = np.log((np.abs(x) + np.float32(0.5)).astype(np.float64))
    ref[5] = np.power((np.abs(x) + np.float32(0.1)).astype(np.float64), np.float64(np.float32(1.7)))
    # CUDA's documented bounds (Programming Guide, math functions): expf 2, logf 1, sinf 2, sqrtf 0, tanhf 2, powf 4
    bounds = [2, 1, 2, 0, 2, 4]
    for k, (r, b) in enumerate(zip(ref, bounds)):
        u = _ulps(out[k], r.astype(np.float32))
        assert u.max() <= b, (k, int(u.max()), x[int(u.argmax())])


def test_double_precision():
    d = Dev()
    m = d.load("emu_math.cu")
    n = 1024
    x = (np.arange(n) - 300) * 0.01
    px, po = d.put(x), d.zeros(4 * n, np.float64)
    launch(m, "mathD", n // 128, 128, px, po, np.int32(n))
    out = d.get(po, 4 * n, np.float64).reshape(4, n)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(out[0], x * x + 1.0 / (x + 3.0))
    np.testing.assert_array_equal(out[1], np.sqrt(np.abs(x)) + (x * 2.0 - 1.0))
    np.testing.assert_allclose(out[2], np.exp(x * 0.5), rtol=4e-16)
    np.testing.assert_array_equal(out[3], np.trunc(x * 1000.0) / 7.0)


def test_half_precision():
    d = Dev()
    m = d.load("emu_math.cu")
    n = 1024
    a = ((np.arange(n) % 64) * 0.125).astype(np.float16)
    b = ((np.arange(n) % 9) - 4.0).astype(np.float16)
    pa, pb, pc, pf = d.put(a), d.put(b), d.zeros(n, np.float16), d.zeros(n, np.float32)
    launch(m, "halfK", n // 256, 256, pa, pb, pc, pf, np.int32(n))
    np.testing.assert_array_equal(d.get(pc, n, np.float16), (a * b) + np.float16(1))
    np.testing.assert_array_equal(d.get(pf, n, np.float32), a.astype(np.float32) + b.astype(np.float32))


# ------------------------------------------------------------------------------------------------ emu_misc.cu
def test_constant_and_device_variables():
    d = Dev()
    m = d.load("emu_misc.cu")
    caddr, csize = m.variables["cCoef"]
    assert csize == 64
    coef = np.arange(16, dtype=np.float32) * np.float32(0.5)
    d.mem.write(caddr, coef.tobytes())
    gaddr, _ = m.variables["gCounter"]
    d.mem.write(gaddr, np.int32(10).tobytes())
    taddr, tsize = m.variables["gTable"]
    assert tsize == 32
    np.testing.assert_array_equal(d.get(taddr, 8, np.float32), [1, 2, 3, 0, 0, 0, 0, 0])
    n = 100
    po = d.zeros(n, np.float32)
    launch(m, "useSymbols", 1, 128, po, np.int32(n))
    i = np.arange(n)
    tbl = np.array([1, 2, 3, 0, 0, 0, 0, 0], np.float32)
    np.testing.assert_array_equal(d.get(po, n, np.float32), coef[i % 16] * tbl[i % 8])
    assert d.get(gaddr, 1, np.int32)[0] == 15


def test_local_array_and_noinline_function_with_struct():
    d = Dev()
    m = d.load("emu_misc.cu")
    n = 100
    idx = (np.arange(n) * 7).astype(np.int32)
    p = np.array([10, 20, 30, 40], np.float32)
    pi, pp, po = d.put(idx), d.put(p), d.zeros(n, np.float32)
    launch(m, "localArr", 1, 128, pi, pp, po, np.int32(n))
    i = np.arange(n)
    exp = ((idx & 31) * np.float32(1.5) + i).astype(np.float32) + \
        ((i + np.float32(0.5)).astype(np.float32) + np.float32(2.0) + p[i % 4]).astype(np.float32)
    np.testing.assert_array_equal(d.get(po, n, np.float32), exp)


def test_printf_lines_in_thread_order():
    d = Dev()
    m = d.load("emu_misc.cu")
    out = launch(m, "hello", 2, 32, np.int32(7), np.float32(1.5), np.float64(2.25), 0)
    lines = out.stdout.decode().splitlines()
    assert lines == [f"block {b} thread {t} n=7 f=1.500 d=2.25 x=0xff s=hi" for b in range(2) for t in range(2)]


def test_assert_raises_cuda_error_assert():
    d = Dev()
    m = d.load("emu_assert.cu")
    v = np.arange(64, dtype=np.int32)
    v[37] = -1
    with pytest.raises(CudaError) as e:
        launch(m, "checkPositive", 2, 32, d.put(v), np.int32(64))
    assert e.value.code == 710   # cudaErrorAssert
    text = e.value.stdout.decode()
    assert "block: [1,0,0], thread: [5,0,0] Assertion `v[i] >= 0` failed." in text


# ------------------------------------------------------------------------------------------------ emu_ml.cu
def test_row_softmax():
    d = Dev()
    m = d.load("emu_ml.cu")
    rows, cols = 37, 200
    x = np.random.default_rng(7).normal(0, 3, (rows, cols)).astype(np.float32)
    px, po = d.put(x), d.zeros(rows * cols, np.float32)
    launch(m, "rowSoftmax", rows, 64, px, po, np.int32(cols), shmem=64 * 4)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(d.get(po, rows * cols, np.float32).reshape(rows, cols), e / e.sum(1, keepdims=True),
                               rtol=2e-6, atol=1e-12)


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_adam_with_powf(step):
    d = Dev()
    m = d.load("emu_ml.cu")
    n = 3000
    rng = np.random.default_rng(step)
    w, g = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
    mm, vv = rng.normal(size=n).astype(np.float32) * 0.1, rng.random(n).astype(np.float32) * 0.1
    pw, pg, pm, pv = d.put(w), d.put(g), d.put(mm), d.put(vv)
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    launch(m, "adamStep", (n + 255) // 256, 256, pw, pg, pm, pv, np.float32(lr), np.float32(b1), np.float32(b2),
           np.float32(eps), np.int32(step), np.int32(n))
    f = np.float64
    b1f, b2f = f(np.float32(b1)), f(np.float32(b2))
    mi = b1f * mm + (1 - b1f) * g
    vi = b2f * vv + (1 - b2f) * g.astype(f) ** 2
    wi = w - f(np.float32(lr)) * (mi / (1 - b1f ** step)) / (np.sqrt(vi / (1 - b2f ** step)) + f(np.float32(eps)))
    np.testing.assert_allclose(d.get(pm, n, np.float32), mi, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(d.get(pw, n, np.float32), wi, rtol=1e-5, atol=1e-6)


def test_gelu_and_cross_entropy():
    d = Dev()
    m = d.load("emu_ml.cu")
    n = 4096
    x = np.linspace(-8, 8, n).astype(np.float32)
    px, py = d.put(x), d.zeros(n, np.float32)
    launch(m, "geluK", n // 256, 256, px, py, np.int32(n))
    t = x.astype(np.float64)
    ref = 0.5 * t * (1 + np.tanh(0.7978845608 * (t + 0.044715 * t ** 3)))
    np.testing.assert_allclose(d.get(py, n, np.float32), ref, rtol=1e-5, atol=1e-6)
    rows, cols = 500, 10
    p = np.random.default_rng(8).dirichlet(np.ones(cols), rows).astype(np.float32)
    lab = np.random.default_rng(9).integers(0, cols, rows).astype(np.int32)
    pp, pl, ploss = d.put(p), d.put(lab), d.zeros(1, np.float32)
    launch(m, "xentLoss", 2, 256, pp, pl, ploss, np.int32(rows), np.int32(cols))
    terms = -np.log(np.maximum(p[np.arange(rows), lab], np.float32(1e-12)).astype(np.float64))
    assert abs(d.get(ploss, 1, np.float32)[0] - terms.sum()) < 1e-4 * terms.sum()


@pytest.mark.parametrize("flags", [("-G",), ("-lineinfo",)])
def test_debug_and_lineinfo_builds(flags):
    d = Dev()
    m = d.load("emu_shared.cu", *flags)
    n = 1000
    x = np.random.default_rng(10).integers(-1000, 1000, n).astype(np.int32)
    nb = (n + 255) // 256
    px, po = d.put(x), d.zeros(nb, np.int32)
    launch(m, "blockReduce", nb, 256, px, po, np.int32(n))
    np.testing.assert_array_equal(d.get(po, nb, np.int32), np.add.reduceat(x, np.arange(0, n, 256)))
    xf = (np.arange(n) % 13 - 6).astype(np.float32)
    pf, pr = d.put(xf), d.zeros(nb, np.float32)
    launch(m, "warpReduce", nb, 256, pf, pr, np.int32(n))
    np.testing.assert_array_equal(d.get(pr, nb, np.float32), np.add.reduceat(xf, np.arange(0, n, 256)))


@pytest.mark.parametrize("vals", [(42, 3000000000, -1234567890123, 3.14159265358979, -2.5),
                                  (-7, 0, 1 << 40, -0.000123456, 1e30)])
def test_printf_formats_match_c(vals):
    import ctypes
    libc = ctypes.CDLL(None)
    i, u, ll, dd, ff = vals
    d = Dev()
    m = d.load("emu_misc.cu")
    s = d.put(np.frombuffer(b"hello\0", np.uint8))
    out = launch(m, "fmtTest", 1, 1, np.int32(i), np.uint32(u), np.int64(ll), np.float64(dd), np.float32(ff), s)
    f32 = float(np.float32(ff))

    def c(fmt, *args):
        buf = ctypes.create_string_buffer(512)
        libc.snprintf(buf, 512, fmt, *args)
        return buf.value
    exp = c(b"[%d|%5d|%-5d|%05d|%+d|%u|%x|%X|%#o|%lld|%llx|%c|%%]\n", *([ctypes.c_int(i)] * 5),
            *([ctypes.c_uint(u)] * 4), ctypes.c_longlong(ll), ctypes.c_longlong(ll), ctypes.c_int(65 + (i & 7)))
    exp += c(b"[%f|%.2f|%10.3e|%g|%G|%e|%8.3g]\n", *([ctypes.c_double(dd)] * 4), ctypes.c_double(dd * 1e20),
             ctypes.c_double(f32), ctypes.c_double(f32))
    exp += c(b"[%s|%.3s|%8s|%-8s|%p]\n", *([ctypes.c_char_p(b"hello")] * 4), ctypes.c_void_p(0))
    assert out.stdout == exp
