"""DeviceMemory: the emulated device's allocator, host-side copies and kernel access checks."""
from __future__ import annotations

import random

import numpy as np
import pytest

from pyvgpu.protocol import ERROR_CODES
from pyvgpu_daemon.emu.memory import ALIGN, DeviceMemory
from pyvgpu_daemon.errors import CudaError

BASE = 1 << 40


def code(name: str) -> int:
    return ERROR_CODES[name]


def test_alloc_aligned_and_distinct():
    m = DeviceMemory(BASE, 1 << 20)
    ptrs = [m.alloc(n) for n in (1, 255, 256, 257, 1000, 0)]
    assert all(p % ALIGN == 0 for p in ptrs)
    assert len(set(ptrs)) == len(ptrs)
    assert all(BASE <= p < BASE + (1 << 20) for p in ptrs)
    assert m.used == sum(max(256, (n + 255) // 256 * 256) for n in (1, 255, 256, 257, 1000, 0))


def test_free_coalesces_and_reuses():
    m = DeviceMemory(BASE, 4096)
    a, b, c = m.alloc(1024), m.alloc(1024), m.alloc(2048)
    with pytest.raises(CudaError) as e:
        m.alloc(1)
    assert e.value.code == code("cudaErrorMemoryAllocation")
    m.free(b)
    m.free(a)
    m.free(c)
    assert m.used == 0
    assert m.alloc(4096) == BASE  # everything merged back into one block


def test_random_alloc_free_never_overlaps():
    rng = random.Random(1)
    m = DeviceMemory(BASE, 1 << 16)
    live: dict[int, int] = {}
    for _ in range(2000):
        if live and rng.random() < 0.45:
            p = rng.choice(list(live))
            m.free(p)
            del live[p]
        else:
            n = rng.randrange(1, 3000)
            try:
                p = m.alloc(n)
            except CudaError:
                continue
            for q, s in live.items():
                assert p + n <= q or q + s <= p
            live[p] = n
    for p in list(live):
        m.free(p)
    assert m.used == 0 and m.alloc(1 << 16) == BASE


def test_free_errors():
    m = DeviceMemory(BASE, 4096)
    p = m.alloc(100)
    for bad in (p + 1, BASE + 2048, 0, 12345):
        with pytest.raises(CudaError) as e:
            m.free(bad)
        assert e.value.code == code("cudaErrorInvalidValue")
    m.free(p)
    with pytest.raises(CudaError):
        m.free(p)  # double free


def test_read_write_copy_fill():
    m = DeviceMemory(BASE, 1 << 20)
    p, q = m.alloc(1000), m.alloc(1000)
    data = bytes(range(256)) * 3
    m.write(p + 10, data)
    assert bytes(m.read(p + 10, len(data))) == data
    m.copy(q, p + 10, 500)
    assert bytes(m.read(q, 500)) == data[:500]
    m.fill(q, 0x1AB, 100)
    assert bytes(m.read(q, 100)) == b"\xab" * 100
    m.write(p, np.arange(4, dtype=np.float32))
    assert np.frombuffer(m.read(p, 16), np.float32).tolist() == [0, 1, 2, 3]
    # overlapping copy behaves like memmove
    m.write(p, bytes(range(100)))
    m.copy(p + 1, p, 50)
    assert bytes(m.read(p + 1, 50)) == bytes(range(50))
    assert m.allocation_at(p + 999) == (p, 1000)
    assert m.allocation_at(p + 1000) is None


@pytest.mark.parametrize("op", ["read", "write", "fill", "copy_src", "copy_dst"])
def test_out_of_bounds_host_access(op):
    m = DeviceMemory(BASE, 1 << 20)
    p = m.alloc(100)
    with pytest.raises(CudaError) as e:
        if op == "read":
            m.read(p + 50, 51)
        elif op == "write":
            m.write(p + 99, b"ab")
        elif op == "fill":
            m.fill(BASE + 4096, 0, 1)
        elif op == "copy_src":
            m.copy(p, p + 60, 50)
        else:
            m.copy(p + 60, p, 50)
    assert e.value.code == code("cudaErrorInvalidValue")


def test_check_access():
    m = DeviceMemory(BASE, 1 << 20)
    a, b = m.alloc(64), m.alloc(64)
    m.check_access(np.arange(a, a + 64, 4, dtype=np.uint64), 4, False)
    m.check_access(np.array([a, b + 60], dtype=np.uint64), 4, True)  # spans two allocations: slow path
    m.check_access(np.array([], dtype=np.uint64), 4, False)
    with pytest.raises(CudaError) as e:
        m.check_access(np.array([a, a + 2], dtype=np.uint64), 4, False)
    assert e.value.code == code("cudaErrorMisalignedAddress")
    with pytest.raises(CudaError) as e:
        m.check_access(np.array([a, a + 64], dtype=np.uint64), 4, True)
    assert e.value.code == code("cudaErrorIllegalAddress")
    with pytest.raises(CudaError) as e:
        m.check_access(np.array([BASE - 8], dtype=np.uint64), 8, False)
    assert e.value.code == code("cudaErrorIllegalAddress")
    m.free(b)
    with pytest.raises(CudaError) as e:
        m.check_access(np.array([b], dtype=np.uint64), 1, False)
    assert e.value.code == code("cudaErrorIllegalAddress")


def test_big_heap_is_lazy_and_free_all():
    m = DeviceMemory(BASE, 8 << 30)  # 8 GiB virtual, untouched pages cost nothing
    p = m.alloc(64 << 20)
    m.fill(p, 7, 64 << 20)
    assert m.read(p + (64 << 20) - 1, 1)[0] == 7
    m.free_all()
    assert m.used == 0 and m.allocations() == {}


def test_base_zero_never_returns_null():
    m = DeviceMemory(0, 4096)
    assert m.alloc(1) != 0
