"""FUNC_SET_ATTR, DEVICE_SET_LIMIT and DEVICE_GET_LIMIT through the daemon on the emulated device: CUDA's limit
defaults and error codes, opt-in dynamic shared memory beyond 48 KiB, deferred errors of the fire-and-forget
FUNC_SET_ATTR, the printf FIFO limit, and what DEVICE_RESET and a new session start from."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu.client import Client
from pyvgpu.protocol import (ERROR_CODES, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT,
                             LIMIT_DEFAULTS, LIMIT_NAMES)

E = ERROR_CODES
SMEM = 64 << 10


def ok(c: Client, op: str, *args, payload=b""):
    err, result, data = c.call(op, *args, payload=payload)
    assert err == 0, f"{op}{args}: error {err}"
    return result


# ---------------------------------------------------------------------------------------------- limits
def test_limit_defaults_round_trips_and_errors(client):
    for limit, default in LIMIT_DEFAULTS.items():
        assert ok(client, "DEVICE_GET_LIMIT", 0, limit) == default, LIMIT_NAMES[limit]
    for limit, value in ((0, 8192), (1, 4 << 20), (2, 64 << 20), (3, 4), (4, 8192)):
        assert ok(client, "DEVICE_SET_LIMIT", 0, limit, value) is None
        assert ok(client, "DEVICE_GET_LIMIT", 0, limit) == value
    # hints are clamped as the driver does: L2 fetch granularity ≤ 128 B, no persisting L2 on sm_75
    ok(client, "DEVICE_SET_LIMIT", 0, 5, 1000)
    assert ok(client, "DEVICE_GET_LIMIT", 0, 5) == 128
    ok(client, "DEVICE_SET_LIMIT", 0, 6, 1 << 20)
    assert ok(client, "DEVICE_GET_LIMIT", 0, 6) == 0
    assert client.call("DEVICE_SET_LIMIT", 0, 3, 25)[0] == E["cudaErrorInvalidValue"]   # sync depth max 24
    # not a cudaLimit (7 is CU_LIMIT_SHMEM_SIZE, which the runtime does not have): an invalid value, as NVIDIA's
    # runtime answers cudaDeviceSetLimit(99, 1) on an H100 (GPU run 3)
    for bad in (7, 99, -1, 1 << 40):
        assert client.call("DEVICE_GET_LIMIT", 0, bad)[0] == E["cudaErrorInvalidValue"], bad
        assert client.call("DEVICE_SET_LIMIT", 0, bad, 1)[0] == E["cudaErrorInvalidValue"], bad
    assert client.call("DEVICE_GET_LIMIT", 5, 0)[0] == E["cudaErrorInvalidDevice"]
    assert client.call("DEVICE_SET_LIMIT", 0, 0, "x")[0] == E["cudaErrorInvalidValue"]
    assert client.call("DEVICE_SET_LIMIT", 0, 0, -1)[0] == E["cudaErrorInvalidValue"]
    assert client.call("DEVICE_SET_LIMIT", 0, 99, -1)[0] == E["cudaErrorInvalidValue"]


def test_limits_are_per_session_and_reset(daemon, client):
    ok(client, "DEVICE_SET_LIMIT", 0, 0, 4096)
    with Client.connect("127.0.0.1", daemon.port) as other:
        assert ok(other, "DEVICE_GET_LIMIT", 0, 0) == LIMIT_DEFAULTS[0]    # another process, another context
    assert ok(client, "DEVICE_GET_LIMIT", 0, 0) == 4096
    ok(client, "DEVICE_RESET", 0)
    assert ok(client, "DEVICE_GET_LIMIT", 0, 0) == LIMIT_DEFAULTS[0]


# ---------------------------------------------------------------------------------------------- function attributes
@pytest.fixture(scope="module")
def funcattr_ptx() -> bytes:
    from harness import ptx_of   # noqa: PLC0415
    return ptx_of("api_funcattr.cu")


def load(c: Client, image: bytes, module_id: int = 1) -> dict:
    return ok(c, "MODULE_LOAD", 0, module_id, payload=image)["kernels"]


def test_dynamic_shared_needs_the_attribute(client, funcattr_ptx):
    kernels = load(client, funcattr_ptx)
    big = kernels["big_smem"]
    assert big["attrs"]["shared_size_bytes"] == 0
    assert big["attrs"]["max_dynamic_shared_size_bytes"] == 48 << 10
    fid = big["id"]
    blocks, n = 2, SMEM // 4
    data = (np.arange(blocks * n) % 97).astype(np.float32)
    src = ok(client, "MALLOC", 0, data.nbytes)
    dst = ok(client, "MALLOC", 0, blocks * 256 * 4)
    ok(client, "MEMCPY_HTOD", 0, src, 0, payload=data.tobytes())
    params = struct.pack("<QQ", src, dst)
    launch = ("LAUNCH", 0, fid, [blocks, 1, 1], [256, 1, 1])
    assert client.call(*launch, SMEM, 0, payload=params)[0] == E["cudaErrorInvalidValue"]
    other = kernels["other_smem"]["id"]
    other_launch = ("LAUNCH", 0, other, [1, 1, 1], [32, 1, 1])
    assert client.call(*other_launch, 48 << 10, 0, payload=struct.pack("<Q", dst))[0] == 0   # up to the default
    # validation
    set_attr = ("FUNC_SET_ATTR", 0, fid)
    assert client.call(*set_attr, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, SMEM + 1)[0] == E["cudaErrorInvalidValue"]
    assert client.call(*set_attr, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, -1)[0] == E["cudaErrorInvalidValue"]
    assert client.call(*set_attr, FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT, 101)[0] == E["cudaErrorInvalidValue"]
    assert client.call(*set_attr, FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT, -2)[0] == E["cudaErrorInvalidValue"]
    assert client.call(*set_attr, 99, 0)[0] == E["cudaErrorInvalidValue"]
    assert client.call(*set_attr, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, 1 << 40)[0] == E["cudaErrorInvalidValue"]
    assert client.call("FUNC_SET_ATTR", 0, fid + 1000, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, 1)[0] == \
        E["cudaErrorInvalidDeviceFunction"]
    assert client.call(*set_attr, FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT, 50)[0] == 0
    # fire-and-forget, as the client sends it; the launch after it is accepted and computes correctly
    client.call(*set_attr, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, SMEM, reply=False)
    client.call(*launch, SMEM, 0, payload=params, reply=False)
    assert ok(client, "DEVICE_SYNC", 0) is None
    out = np.frombuffer(client.call("MEMCPY_DTOH", 0, dst, blocks * 256 * 4, 0)[2], np.float32)
    per = data.reshape(blocks, n)[:, ::-1].reshape(blocks, 256, n // 256).sum(axis=2)
    np.testing.assert_array_equal(out, per.reshape(-1))
    assert client.call(*launch, SMEM + 4, 0, payload=params)[0] == E["cudaErrorInvalidValue"]
    # the attribute is per function
    assert client.call(*other_launch, SMEM, 0, payload=struct.pack("<Q", dst))[0] == E["cudaErrorInvalidValue"]


def test_fire_and_forget_attr_error_is_deferred(client, funcattr_ptx):
    fid = load(client, funcattr_ptx)["big_smem"]["id"]
    client.call("FUNC_SET_ATTR", 0, fid, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, 1 << 20, reply=False)
    assert client.call("MEM_GET_INFO", 0)[0] == 0                           # not a SYNC op
    assert client.call("DEVICE_SYNC", 0)[0] == E["cudaErrorInvalidValue"]     # reported once, then cleared
    assert client.call("DEVICE_SYNC", 0)[0] == 0


def test_reset_returns_functions_to_defaults(client, funcattr_ptx):
    fid = load(client, funcattr_ptx)["big_smem"]["id"]
    ok(client, "FUNC_SET_ATTR", 0, fid, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, SMEM)
    ok(client, "DEVICE_RESET", 0)
    big = load(client, funcattr_ptx)["big_smem"]
    assert big["attrs"]["max_dynamic_shared_size_bytes"] == 48 << 10
    ptr = ok(client, "MALLOC", 0, 1 << 20)
    assert client.call("LAUNCH", 0, big["id"], [1, 1, 1], [256, 1, 1], SMEM, 0,
                       payload=struct.pack("<QQ", ptr, ptr))[0] == E["cudaErrorInvalidValue"]


def test_device_snapshot_advertises_the_opt_in_maximum(client):
    dev = client.devices[0]
    attrs = {int(k): v for k, v in dev["attrs"].items()}
    assert attrs[97] == SMEM and dev["shared_mem_per_block"] == 48 << 10


# ---------------------------------------------------------------------------------------------- printf FIFO
def test_printf_fifo_limit_drops_the_excess(client):
    from test_daemon_kernels import PTX   # noqa: PLC0415
    fid = load(client, PTX.encode())["hello"]["id"]
    line = len(b"hello 7 from block 0\n")
    ok(client, "DEVICE_SET_LIMIT", 0, 1, line + 5)       # room for one line (whole records only)
    client.call("LAUNCH", 0, fid, [3, 1, 1], [32, 1, 1], 0, 0, payload=struct.pack("<i", 7), reply=False)
    assert ok(client, "DEVICE_SYNC", 0) is None
    text = b"".join(client.stdout_chunks)
    assert len(text) == line and text.startswith(b"hello 7 from block ")
    client.stdout_chunks.clear()
    # the limit is per launch (the FIFO is drained at every launch): two launches, two lines
    for _ in range(2):
        client.call("LAUNCH", 0, fid, [3, 1, 1], [32, 1, 1], 0, 0, payload=struct.pack("<i", 8), reply=False)
    ok(client, "DEVICE_SYNC", 0)
    assert b"".join(client.stdout_chunks).count(b"\n") == 2
    client.stdout_chunks.clear()
    ok(client, "DEVICE_SET_LIMIT", 0, 1, LIMIT_DEFAULTS[1])
    client.call("LAUNCH", 0, fid, [3, 1, 1], [32, 1, 1], 0, 0, payload=struct.pack("<i", 9), reply=False)
    ok(client, "DEVICE_SYNC", 0)
    assert b"".join(client.stdout_chunks).count(b"\n") == 3
