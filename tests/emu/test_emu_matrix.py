"""Warp matrix operations on the emulated GPU directly (ops/matrix.py, runtime/matrix.py, translator/matrix.py):
the mma.sync fragments are the PTX ISA's figures (every element in exactly one lane's slot, at the lane the figure
names), wmma fragments cover their matrices, the product is rounded once from the exact value (random f16 data
against NumPy), NaN results are the canonical NaN, a warp without all 32 lanes is an error, and what sm_75 does not
offer (bf16, tf32, m16n8k16, m8n8k4, ldmatrix) is refused by name at module load."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from harness import ptx_of
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.ops import matrix as mx
from pyvgpu_daemon.errors import CudaError, code_of

GEMM, TALL = "_Z4gemmPK6__halfS1_PKfPfff", "_Z4tallPK6__halfS1_PS_"


@pytest.fixture(scope="module")
def mod():
    mem = DeviceMemory(1 << 40, 1 << 24)
    return EmuModule.load(ptx_of("emu_wmma.cu"), mem), mem


def test_mma_sync_fragments_are_the_isas():
    for shape, types in (("m16n8k8", ("f16", "f16", "f32")), ("m8n8k16", ("s8", "s8", "s32"))):
        for which, et in zip("abc", types):
            f = mx.mma_fragment(shape, which, et)
            assert sorted(f.where.ravel()) == list(range(f.rows * f.cols)), (shape, which)
    # m16n8k8 A: lane 5 (group 1, thread 1 of its group) holds a0, a1 = row 1, columns 2, 3 and a2, a3 = row 9
    a = mx.mma_fragment("m16n8k8", "a", "f16")
    assert [divmod(int(e), 8) for e in a.where[5]] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    b = mx.mma_fragment("m16n8k8", "b", "f16")             # b0, b1: rows (k) 2, 3 of column 1
    assert [divmod(int(e), 8) for e in b.where[5]] == [(2, 1), (3, 1)]
    a8 = mx.mma_fragment("m8n8k16", "a", "s8")             # row 1, columns 4..7
    assert [divmod(int(e), 16) for e in a8.where[5]] == [(1, 4), (1, 5), (1, 6), (1, 7)]
    assert (a.nregs, b.nregs, mx.mma_fragment("m16n8k8", "c", "f32").nregs, a8.nregs) == (2, 1, 4, 1)


def test_wmma_fragments_cover_their_matrices_and_registers_round_trip():
    rng = np.random.default_rng(3)
    for shape in mx.WMMA_SHAPES:
        for which, et, nregs in (("a", "f16", 8), ("b", "f16", 8), ("c", "f32", 8), ("c", "f16", 4),
                                 ("a", "s8", None), ("c", "s32", 8)):
            f = mx.wmma_fragment(shape, which, et)
            assert set(f.where.ravel()) == set(range(f.rows * f.cols)), (shape, which, et)
            if nregs:
                assert f.nregs == nregs
            regs = [rng.integers(0, 1 << 32, 32, dtype=np.uint32) for _ in range(f.nregs)]
            back = mx.pack(f, mx.unpack(f, regs))
            assert all((x == y).all() for x, y in zip(regs, back))


def test_product_is_rounded_once_and_nans_are_canonical():
    a = np.array([[[np.inf, 0.0]]], np.float16)
    b = np.array([[[0.0], [1.0]]], np.float16)
    c = np.zeros((1, 1, 1), np.float32)
    assert mx.product(a, b, c, "f32", False).view(np.uint32)[0, 0, 0] == 0x7FFFFFFF
    assert mx.product(a, b, c.astype(np.float16), "f16", False).view(np.uint16)[0, 0, 0] == 0x7FFF
    big = np.full((1, 1, 2), 60000, np.float16)
    assert mx.product(big, big.reshape(1, 2, 1), np.zeros((1, 1, 1), np.float16), "f16", True)[0, 0, 0] == 65504
    assert np.isinf(mx.product(big, big.reshape(1, 2, 1), np.zeros((1, 1, 1), np.float16), "f16", False)[0, 0, 0])


def test_gemm_of_random_halves_against_numpy(mod):
    m, mem = mod
    M, N, K = 64, 48, 80
    rng = np.random.default_rng(7)
    A = rng.standard_normal((M, K)).astype(np.float16)
    Bt = rng.standard_normal((N, K)).astype(np.float16)       # column-major B: row n holds column n
    C = rng.standard_normal((M, N)).astype(np.float32)
    pa, pb, pc, pd = (mem.alloc(x) for x in (A.nbytes, Bt.nbytes, C.nbytes, C.nbytes))
    mem.write(pa, A.tobytes()); mem.write(pb, Bt.tobytes()); mem.write(pc, C.tobytes())
    m.launch(GEMM, (3, 1, 1), (128, 1, 1), 0, struct.pack("<QQQQff", pa, pb, pc, pd, 1.0, 0.0))
    got = np.frombuffer(bytes(mem.read(pd, C.nbytes)), np.float32).reshape(M, N)
    # five k-steps of 16, each rounded to f32 once (the kernel accumulates across wmma.mma calls in f32)
    acc = np.zeros((M, N), np.float32)
    for k in range(0, K, 16):
        acc = (A[:, k:k + 16].astype(np.float64) @ Bt[:, k:k + 16].T.astype(np.float64) + acc).astype(np.float32)
    assert (got == acc).all()


def test_a_partial_warp_is_an_error(mod):
    m, mem = mod
    p = mem.alloc(4096)
    with pytest.raises(CudaError) as e:
        m.launch(TALL, (1, 1, 1), (16, 1, 1), 0, struct.pack("<QQQ", p, p + 1024, p + 2048))
    assert e.value.code == code_of("cudaErrorLaunchFailure") and "32 lanes" in e.value.message


PTX = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{{
  .reg .b32 %r<20>; .reg .f32 %f<20>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  {body}
  ret;
}}
"""


@pytest.mark.parametrize("body, named", [
    ("wmma.load.a.sync.aligned.row.m16n16k16.global.bf16 {%r1, %r2, %r3, %r4}, [%rd1], 16;", ".bf16"),
    ("wmma.load.a.sync.aligned.row.m16n16k8.global.tf32 {%r1, %r2, %r3, %r4}, [%rd1], 16;", "m16n16k8"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, "
     "{%f5, %f6, %f7, %f8};", "m16n8k16"),
    ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r1, %r2}, "
     "{%r3, %r4}, {%f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16};", "m8n8k4"),
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%rd1];", "ldmatrix"),
])
def test_what_sm75_lacks_is_refused_by_name(body, named):
    with pytest.raises(CudaError) as e:
        EmuModule.load(PTX.format(body=body).encode(), DeviceMemory(1 << 40, 1 << 20))
    assert e.value.code == code_of("cudaErrorInvalidPtx") and named in e.value.message, e.value.message
