"""Virtual memory management through the daemon's protocol (VMM_*, daemon/pyvgpu_daemon/vmm.py on the emulated
device, emu/vmm.py): reservations at hints and in the session's window, physical allocations charged to the session
and its quota, mappings that alias (one allocation at two addresses is the same bytes, for copies and kernels), access
before it is granted refused, CUDA's errors for every misuse, the bound on objects, and everything released with a
device reset and the session."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from harness import ptx_of
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, MAX_VMM_OBJECTS, VA_WINDOW_BYTES

E = ERROR_CODES
G = 2 << 20
RW = 3


def ok(c, op, *args, payload=b""):
    err, result, out = c.call(op, *args, payload=payload)
    assert err == 0, (op, args, err)
    return out if out is not None and result is None else result


def held(c) -> int:
    return next(s for s in c.status()["sessions"] if s.get("self"))["devices"][0]["memory"]


@pytest.fixture
def c(daemon):
    with Client.connect("127.0.0.1", daemon.port) as client:
        yield client


def mapped(c, size: int, hint: int = 0) -> tuple[int, int]:
    """(address, handle) of `size` bytes reserved, created, mapped and made read-write."""
    va = ok(c, "VMM_RESERVE", 0, size, 0, hint)
    h = ok(c, "VMM_CREATE", 0, size)
    ok(c, "VMM_MAP", 0, va, size, 0, h)
    ok(c, "VMM_SET_ACCESS", 0, va, size, RW)
    return va, h


def test_reserve_at_hints_and_in_the_window(c):
    assert c.devices[0]["vmm_granularity"] == G
    a = ok(c, "VMM_RESERVE", 0, 4 * G, 0, 0)
    assert VA_WINDOW_BYTES < a < 2 * VA_WINDOW_BYTES and a % G == 0          # above the heap, in device 0's window
    far = 7 * VA_WINDOW_BYTES + 10 * G
    assert ok(c, "VMM_RESERVE", 0, G, 0, far) == far                           # a free hint is honoured
    assert ok(c, "VMM_RESERVE", 0, G, 0, far) != far                           # a taken one is not
    assert ok(c, "VMM_RESERVE", 0, G, 0, VA_WINDOW_BYTES) != VA_WINDOW_BYTES   # nor one over the device's heap
    assert ok(c, "VMM_RESERVE", 0, G, 8 * G, 0) % (8 * G) == 0                 # alignment
    for args in ((G + 1, 0, 0), (0, 0, 0), (G, 3 * G, 0)):                      # off the granularity; 0; not 2**k
        assert c.call("VMM_RESERVE", 0, *args)[0] == E["cudaErrorInvalidValue"], args
    assert c.call("VMM_FREE", 0, a, 2 * G)[0] == E["cudaErrorInvalidValue"]     # not as reserved
    ok(c, "VMM_FREE", 0, a, 4 * G)
    assert c.call("VMM_FREE", 0, a, 4 * G)[0] == E["cudaErrorInvalidValue"]


def test_mappings_alias_for_copies_and_kernels(c):
    va = ok(c, "VMM_RESERVE", 0, 4 * G, 0, 0)
    h = ok(c, "VMM_CREATE", 0, 2 * G)
    assert held(c) == 2 * G                                                     # physical bytes are the session's
    ok(c, "VMM_MAP", 0, va, 2 * G, 0, h)
    assert c.call("MEMCPY_HTOD", 0, va, 0, payload=b"x")[0] == E["cudaErrorInvalidValue"]    # not accessible yet
    ok(c, "VMM_SET_ACCESS", 0, va, 2 * G, RW)
    ok(c, "VMM_MAP", 0, va + 2 * G, 2 * G, 0, h)
    ok(c, "VMM_SET_ACCESS", 0, va + 2 * G, 2 * G, RW)
    data = np.arange(1 << 16, dtype=np.int32)
    ok(c, "MEMCPY_HTOD", 0, va + 4096, 0, payload=data.tobytes())
    assert bytes(ok(c, "MEMCPY_DTOH", 0, va + 2 * G + 4096, data.nbytes, 0)) == data.tobytes()
    # a kernel writes through one address; the other sees it (emu_basic's `scale`-like kernel: x[i] = x[i] * 2)
    mod = ok(c, "MODULE_LOAD", 0, 1, payload=ptx_of("drv_kernels.cu"))
    k = mod["kernels"]["scale"]["id"]
    n = len(data)
    params = struct.pack("<Qfi", va + 2 * G + 4096, 2.0, n)
    f = np.frombuffer(data.tobytes(), np.float32)
    ok(c, "LAUNCH", 0, k, [n // 256, 1, 1], [256, 1, 1], 0, 0, payload=params)
    got = np.frombuffer(bytes(ok(c, "MEMCPY_DTOH", 0, va + 4096, data.nbytes, 0)), np.float32)
    np.testing.assert_array_equal(got, f * np.float32(2.0))
    # a copy spanning the two adjacent mappings is one range of device memory
    ok(c, "MEMCPY_DTOD", 0, va + 2 * G - 64, va + 4096, 128, 0)
    # released while mapped: the memory stays until the last mapping goes
    ok(c, "VMM_RELEASE", 0, h)
    assert c.call("VMM_RELEASE", 0, h)[0] == E["cudaErrorInvalidValue"]
    assert held(c) == 2 * G
    ok(c, "VMM_UNMAP", 0, va, 2 * G)
    assert held(c) == 2 * G
    assert bytes(ok(c, "MEMCPY_DTOH", 0, va + 2 * G + 4096, 4, 0)) == np.float32(f[0] * 2).tobytes()
    ok(c, "VMM_UNMAP", 0, va + 2 * G, 2 * G)
    assert held(c) == 0
    assert c.call("MEMCPY_DTOH", 0, va + 4096, 4, 0)[0] == E["cudaErrorInvalidValue"]


def test_kernel_access_outside_accessible_mappings_faults(c):
    va, _ = mapped(c, G)
    mod = ok(c, "MODULE_LOAD", 0, 1, payload=ptx_of("drv_kernels.cu"))
    k = mod["kernels"]["scale"]["id"]
    c.call("LAUNCH", 0, k, [1, 1, 1], [64, 1, 1], 0, 0, payload=struct.pack("<Qfi", va + G - 128, 2.0, 64),
           reply=False)                                                          # 128 bytes past the mapping
    assert c.call("DEVICE_SYNC", 0)[0] == E["cudaErrorIllegalAddress"]
    ok(c, "DEVICE_RESET", 0)                                                     # ... and the reset drops it all
    assert held(c) == 0
    assert c.call("MEMCPY_DTOH", 0, va, 4, 0)[0] == E["cudaErrorInvalidValue"]
    assert ok(c, "VMM_RESERVE", 0, G, 0, va) == va                              # its address is free again


def test_misuse_gets_cudas_errors(c):
    va = ok(c, "VMM_RESERVE", 0, 4 * G, 0, 0)
    h = ok(c, "VMM_CREATE", 0, 2 * G)
    bad = E["cudaErrorInvalidValue"]
    for args in ((va + 1, G, 0, h), (va, G + 1, 0, h), (va, G, G, h), (va, 4 * G, 0, h), (va + 3 * G, 2 * G, 0, h),
                 (va, G, 0, 12345), (5 * VA_WINDOW_BYTES, G, 0, h)):
        assert c.call("VMM_MAP", 0, *args)[0] == bad, args
    assert c.call("VMM_CREATE", 0, G + 1)[0] == bad
    ok(c, "VMM_MAP", 0, va, 2 * G, 0, h)
    assert c.call("VMM_MAP", 0, va + G, G, 0, h)[0] == bad                       # over a mapping
    assert c.call("VMM_UNMAP", 0, va, G)[0] == bad                               # part of one
    assert c.call("VMM_SET_ACCESS", 0, va, 3 * G, RW)[0] == bad                  # not fully mapped
    assert c.call("VMM_SET_ACCESS", 0, va, 2 * G, 2)[0] == bad                   # not an access flag
    assert c.call("VMM_FREE", 0, va, 4 * G)[0] == bad                            # still mapped
    ok(c, "VMM_SET_ACCESS", 0, va, 2 * G, 1)                                     # read-only
    assert c.call("FREE", 0, va)[0] == bad                                       # mapped memory is not freed


def test_physical_memory_is_bounded_by_the_quota_and_objects_by_the_daemon(daemon_factory):
    d = daemon_factory("--session-memory", str(4 * G))
    with Client.connect("127.0.0.1", d.port) as c:
        ok(c, "VMM_CREATE", 0, 2 * G)
        ok(c, "MALLOC", 0, G)
        assert c.call("VMM_CREATE", 0, 2 * G)[0] == E["cudaErrorMemoryAllocation"]
        ok(c, "VMM_CREATE", 0, G)
    with Client.connect("127.0.0.1", d.port) as c:
        done = 0
        while c.call("VMM_RESERVE", 0, G, 0, 0)[0] == 0:
            done += 1
        assert done == MAX_VMM_OBJECTS                                          # the daemon's bound on objects
    with Client.connect("127.0.0.1", d.port) as c:
        # 64 GiB of reservations per session and device on a 4 GiB device (emu/vmm.py MAX_RESERVED_FACTOR)
        assert c.call("VMM_RESERVE", 0, 64 << 30, 0, 0)[0] == 0
        assert c.call("VMM_RESERVE", 0, G, 0, 0)[0] == E["cudaErrorMemoryAllocation"]
