"""Device-side malloc/free (emu/device_heap.py, runtime/calls.py) on the emulated GPU directly: the heap's
first-fit blocks (16-byte and requested alignment, NULL when full, coalescing on free), the kernels of
tests/cuda/emu_malloc.cu through an EmuContext (the heap reserved from device memory by the first malloc kernel,
charged to the session, cudaLimitMallocHeapSize fixed from then on, dropped by a reset), and what a GPU leaves
undefined made an error: free of a pointer malloc did not return, a malloc kernel launched without a heap."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from harness import ptx_of
from pyvgpu_daemon.backends.emu import EmuBackend
from pyvgpu_daemon.emu.device_heap import GUARD, DeviceHeap
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.errors import CudaError, code_of

FILL, CONSUME, EXHAUST = "_Z4fillPPiPj", "_Z7consumePPiPx", "_Z7exhaustPiS_"
MIB = 1 << 20


def _heap(size=4096):
    mem = DeviceMemory(1 << 40, 1 << 24)
    h = DeviceHeap(mem.alloc)
    h.ensure(size)
    return h, mem


def test_blocks_are_aligned_disjoint_and_coalesce():
    h, mem = _heap(4096)
    # the guard: cudaFree finds the backing allocation's start, never a block's
    assert mem.allocation_at(h.base)[0] == h.base and h.malloc(1) == h.base + GUARD
    h.free(h.base + GUARD)
    blocks = [h.malloc(n) for n in (1, 17, 100, 16)]
    assert all(b % 16 == 0 for b in blocks)
    spans = sorted((b, b + s) for b, s in zip(blocks, (16, 32, 112, 16)))
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(3))
    assert h.malloc(4096) == 0                          # no room: NULL, not an error
    a = h.malloc(64, 1024)
    assert a % 1024 == 0 and a > 0
    assert h.malloc(8, 3) == 0                          # not a power of two
    for b in blocks + [a]:
        h.free(b)
    assert h.live_bytes() == 0
    assert h.malloc(4096) == h.base + GUARD             # every range joined again: the whole heap in one block
    h.free(0)                                           # free(NULL) does nothing


def test_free_of_a_foreign_pointer_is_an_error():
    h, _ = _heap()
    p = h.malloc(32)
    h.free(p)
    for bad in (p, p + 16, h.base):
        with pytest.raises(CudaError) as e:
            h.free(bad)
        assert e.value.code == code_of("cudaErrorIllegalAddress")


def test_kernels_without_a_heap_are_refused():
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = EmuModule.load(ptx_of("emu_malloc.cu"), mem)
    with pytest.raises(CudaError) as e:
        m.launch(FILL, (1, 1, 1), (32, 1, 1), 0, struct.pack("<QQ", mem.alloc(256), mem.alloc(4)))
    assert e.value.code == code_of("cudaErrorNotSupported")


def test_heap_of_an_emulated_context():
    backend = EmuBackend(memory=64 * MIB)
    ctx = backend.open_context(0, 1 << 40, 1)
    try:
        mod = ctx.module_load(ptx_of("emu_malloc.cu"))
        k = mod.kernels
        free_before = ctx.mem_info()[0]
        ctx.set_limit(2, 2 * MIB)
        ptrs, mis = ctx.malloc(8 * 64), ctx.malloc(4)
        ctx.memcpy_htod(mis, b"\0" * 4, None)
        ctx.launch(mod, k[FILL], (2, 1, 1), (32, 1, 1), 0, struct.pack("<QQ", ptrs, mis), None)
        assert ctx.heap.reserved and ctx.heap.size == 2 * MIB
        assert free_before - ctx.mem_info()[0] >= 2 * MIB           # the heap is charged to the session
        got = np.frombuffer(ctx.memcpy_dtoh(ptrs, 8 * 64, None), np.uint64)
        assert len(set(got.tolist())) == 64 and (got % 16 == 0).all()
        assert ctx.heap.live_bytes() == sum(-(-4 * (1 + t % 37) // 16) * 16 for t in range(64))
        for t in (0, 5, 63):                                        # thread t's block: t * 1000 + i
            n = 1 + t % 37
            v = np.frombuffer(ctx.memcpy_dtoh(int(got[t]), 4 * n, None), np.int32)
            assert (v == t * 1000 + np.arange(n)).all()
        with pytest.raises(CudaError) as e:                         # the heap is in place: its size is fixed
            ctx.set_limit(2, 4 * MIB)
        assert e.value.code == code_of("cudaErrorInvalidValue")
        with pytest.raises(CudaError):                              # not cudaMalloc's pointer
            ctx.free(int(got[0]))
        # consume frees what thread T-1-t allocated (its own kernel's table has 96 entries: pad with NULLs)
        table = ctx.malloc(8 * 96)
        ctx.memcpy_htod(table, got.tobytes() + b"\0" * 8 * 32, None)
        sums = ctx.malloc(8 * 96)
        ctx.launch(mod, k[CONSUME], (3, 1, 1), (32, 1, 1), 0, struct.pack("<QQ", table, sums), None)
        assert ctx.heap.live_bytes() == 0
        # the whole 2 MiB heap is 32 blocks of 64 KiB, then NULL; after their free one fits again
        cnt = ctx.malloc(8)
        ctx.launch(mod, k[EXHAUST], (1, 1, 1), (1, 1, 1), 0, struct.pack("<QQ", cnt, cnt + 4), None)
        assert struct.unpack("<ii", ctx.memcpy_dtoh(cnt, 8, None)) == (32, 3)
        # a free of a pointer malloc never returned stops the launch
        ctx.memcpy_htod(table, struct.pack("<Q", ctx.heap.base + GUARD + 8) + b"\0" * 8 * 95, None)
        with pytest.raises(CudaError) as e:
            ctx.launch(mod, k[CONSUME], (3, 1, 1), (32, 1, 1), 0, struct.pack("<QQ", table, sums), None)
        assert e.value.code == code_of("cudaErrorIllegalAddress") and "free" in e.value.message
        ctx.reset()
        assert not ctx.heap.reserved
        ctx.set_limit(2, 4 * MIB)                                   # a new context: the limit is free again
    finally:
        ctx.close()
