"""A kernel fault on the cuda backend, as a real driver handles it (GPU run 1, finding 1).

A context that took a sticky fault answers every call with it until destroyed; cuCtxDestroy still destroys it. What a
new context of the same process gets is the driver's to say: NVIDIA documents that such an error lasts until the
process ends, and an H200 (driver 580) answered cuCtxCreate with CUDA_ERROR_ILLEGAL_ADDRESS after the faulted context
was destroyed. The daemon then keeps the fault as the session's error (a DEVICE_RESET tries again), names the device
unusable in STATUS and its log, and a daemon process of its own on the same GPU is healthy.

Without a GPU these run through the chain (the cuda backend on pyvgpu's libcuda.so.1 over an emulated daemon), whose
driver shares one daemon context among all contexts of a device, like a real driver's process: a fault in one session's
context reaches the others, a new context is refused while another lives, and once every context of the device went
the next one is healthy again (which NVIDIA's driver does not promise). With a GPU (`probe()` finds one) they run on
it and accept either answer of the driver, checked for consistency, and print which one it gave.
"""
from __future__ import annotations

import struct
import shutil

import numpy as np
import pytest

from harness import real_driver_fatbin
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES
from pyvgpu_daemon.backends.cuda import probe

GPU_COUNT, _ = probe()
REAL = "cuda" if GPU_COUNT else "chain"
NVCC = shutil.which("nvcc")
FAULT = ERROR_CODES["cudaErrorIllegalAddress"]
KERNEL_SRC = r"""
extern "C" __global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> bytes:
    if NVCC is None:
        pytest.skip("nvcc not installed")
    return real_driver_fatbin(tmp_path_factory.mktemp("faults"), KERNEL_SRC).read_bytes()


def fault(c: Client, image: bytes) -> None:
    """A kernel of this session reads address 8; its context takes the sticky fault."""
    err, info, _ = c.call("MODULE_LOAD", 0, 1, payload=image)
    assert err == 0, err
    kid = info["kernels"]["add_one"]["id"]
    c.call("LAUNCH", 0, kid, [4, 1, 1], [256, 1, 1], 0, 0, payload=struct.pack("<Qi", 8, 1000) + b"\0" * 4,
           reply=False)
    assert c.call("DEVICE_SYNC", 0)[0] == FAULT
    assert c.call("MEM_GET_INFO", 0)[0] == FAULT         # every call of the faulted context answers it


def round_trip(c: Client, seed: int) -> int:
    """Allocate, copy in and out, free; → 0, or the error the first step answered (a wrong byte fails the test)."""
    data = np.random.default_rng(seed).bytes(1 << 20)
    err, p, _ = c.call("MALLOC", 0, len(data))
    if err:
        return err
    err = c.call("MEMCPY_HTOD", 0, p, 0, payload=data)[0]
    if err:
        return err
    err, _, out = c.call("MEMCPY_DTOH", 0, p, len(data), 0)
    if err:
        return err
    assert out == data                                    # never a wrong byte without an error
    return c.call("FREE", 0, p)[0]


def unusable(c: Client) -> str:
    (usage,) = [u for u in c.status()["device_usage"] if u["device"] == 0]
    return usage["unusable"]


def test_fault_then_reset_recovers_or_is_refused_clearly(daemon_factory, image):
    d = daemon_factory(backend=REAL)
    with Client.connect("127.0.0.1", d.port) as c:
        assert round_trip(c, 1) == 0
        fault(c, image)
        # the old context goes whatever the driver says of a new one (cudaDeviceReset makes the next one lazily)
        assert c.call("DEVICE_RESET", 0)[0] == 0
        after = round_trip(c, 2)
        print(f"{REAL}: after a fault and DEVICE_RESET, copies answered {after}")
        if REAL == "chain":
            assert after == 0                             # its last context went: the driver recovered
        if after == 0:
            assert unusable(c) == ""
            assert c.call("MODULE_LOAD", 0, 2, payload=image)[0] == 0     # nothing of the old context is needed
            return
        # the driver refuses new contexts of this process: the refusal is the session's error, said clearly
        assert after == FAULT and "cuCtxCreate" in unusable(c) and "restart the daemon" in d.log_text()
        with Client.connect("127.0.0.1", d.port) as late:
            assert round_trip(late, 3) == FAULT               # a new session on the device: the same answer
        assert c.call("DEVICE_RESET", 0)[0] == 0 and round_trip(c, 4) == FAULT    # tried again, nothing raised
    # the remedy the log names: a daemon process of its own on the same GPU is healthy
    fresh = daemon_factory(backend=REAL)
    with Client.connect("127.0.0.1", fresh.port) as c:
        assert round_trip(c, 5) == 0


def test_fault_in_one_session_and_the_others(daemon_factory, image):
    d = daemon_factory(backend=REAL)
    with Client.connect("127.0.0.1", d.port) as a, Client.connect("127.0.0.1", d.port) as b:
        assert round_trip(b, 1) == 0
        fault(a, image)
        other = round_trip(b, 2)
        assert a.call("DEVICE_RESET", 0)[0] == 0
        again = round_trip(a, 3)
        print(f"{REAL}: after session A's fault, session B's copies answered {other}; A's after its reset {again}")
        assert other in (0, FAULT) and again in (0, FAULT)    # correct bytes, or the fault: nothing in between
        if REAL == "chain":
            # one daemon context under every context of the device: B shares the fault, and A's new context is
            # refused while B's lives
            assert other == FAULT and again == FAULT
        if again == FAULT:
            assert "cuCtxCreate" in unusable(a)
        if other == FAULT:
            assert b.call("DEVICE_RESET", 0)[0] == 0
            healthy = round_trip(b, 4)
            if REAL == "chain":
                assert healthy == 0                           # the device's last context went: healthy again
            if healthy == 0:
                assert unusable(b) == ""
                assert a.call("DEVICE_RESET", 0)[0] == 0 and round_trip(a, 5) == 0
        else:
            assert round_trip(b, 6) == 0                      # B was never touched by A's fault
