"""Cooperative launches on the emulated GPU directly (EmuModule.launch(cooperative=True)): the grid workspace behind
%envreg1:%envreg2 that cg::this_grid().sync() arrives at, all blocks in one chunk, the occupancy rule
(cudaErrorCooperativeLaunchTooLarge) computed as the client computes it, and a plain launch: it has a workspace too,
as on a GPU (an H100 with CUDA 13: cg::this_grid().is_valid() true), so a grid sync of blocks run together works."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from harness import ptx_of
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.errors import CudaError, code_of

RED = "_Z11reduce_gridPKiPiPxi"
STENCIL = "_Z7stencilPiS_ii"


@pytest.fixture(scope="module")
def mod():
    mem = DeviceMemory(1 << 40, 1 << 28)
    return EmuModule.load(ptx_of("emu_coop.cu"), mem), mem


def test_occupancy_is_the_clients_formula():
    lim = EmuLimits()
    # 1024 threads per multiprocessor, 16 blocks, 64K registers, 64 KiB shared memory (the emulated sm_75)
    assert lim.occupancy(256, 32, 0, 1024) == 4
    assert lim.occupancy(32, 16, 0, 1024) == 16                       # the block limit
    assert lim.occupancy(256, 128, 0, 1024) == 2                      # 128 regs x 256 threads: 32K per block
    assert lim.occupancy(128, 0, 20000, 1024) == 3                    # shared memory
    assert lim.occupancy(2048, 0, 0, 1024) == 0 and lim.occupancy(512, 0, 0, 256) == 0


def test_grid_sync_reduction_and_stencil(mod):
    m, mem = mod
    n = 100_000
    x = (np.arange(n) * 7 % 201 - 100).astype(np.int32)
    pin = mem.alloc(x.nbytes)
    mem.write(pin, x.tobytes())
    per_sm = m.limits.occupancy(256, m.kernels[RED].attrs["num_regs"], 256 * 4, 1024)
    blocks = per_sm * m.limits.multiprocessors
    part, out = mem.alloc(4 * blocks), mem.alloc(8)
    m.launch(RED, (blocks, 1, 1), (256, 1, 1), 0, struct.pack("<QQQi", pin, part, out, n), cooperative=True)
    assert struct.unpack("<q", bytes(mem.read(out, 8)))[0] == int(x.sum())
    # one block more cannot be resident: refused before it runs
    with pytest.raises(CudaError) as e:
        m.launch(RED, (blocks + 1, 1, 1), (256, 1, 1), 0, struct.pack("<QQQi", pin, part, out, n), cooperative=True)
    assert e.value.code == code_of("cudaErrorCooperativeLaunchTooLarge")
    # the stencil: every step reads other blocks' values of the step before
    ring = (np.arange(777) * 31 % 1000).astype(np.int32)
    a, b = mem.alloc(ring.nbytes), mem.alloc(ring.nbytes)
    mem.write(a, ring.tobytes())
    m.launch(STENCIL, (8, 1, 1), (64, 1, 1), 0, struct.pack("<QQii", a, b, 777, 6), cooperative=True)
    ref = ring.astype(np.int64)
    for _ in range(6):
        ref = (np.roll(ref, 1) + 2 * ref + np.roll(ref, -1)) // 4
    assert (np.frombuffer(bytes(mem.read(a, ring.nbytes)), np.int32) == ref).all()     # 6 steps: back in a


def test_a_plain_launch_has_a_grid_workspace(mod):
    m, mem = mod
    out = mem.alloc(4)
    for cooperative in (False, True):
        mem.write(out, b"\xff" * 4)
        m.launch("_Z5validPi", (2, 1, 1), (32, 1, 1), 0, struct.pack("<Q", out), cooperative=cooperative)
        assert struct.unpack("<i", bytes(mem.read(out, 4)))[0] == 1          # this_grid().is_valid()
    # a grid sync in a plain launch whose blocks run together, as on a GPU whose blocks are all resident
    ring = (np.arange(8) * 37 % 100).astype(np.int32)
    a = mem.alloc(64)
    mem.write(a, ring.tobytes())
    m.launch(STENCIL, (2, 1, 1), (8, 1, 1), 0, struct.pack("<QQii", a, a + 32, 8, 2))
    ref = ring.astype(np.int64)
    for _ in range(2):
        ref = (np.roll(ref, 1) + 2 * ref + np.roll(ref, -1)) // 4
    assert (np.frombuffer(bytes(mem.read(a, 32)), np.int32) == ref).all()
