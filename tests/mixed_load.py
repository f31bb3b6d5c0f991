"""Many concurrent CUDA clients of mixed operations against one daemon, every byte they read back checked
(tests/cuda/load_mixed.cu): the load of issue 23, shared by tests/daemon/test_flow_control.py (one run) and
bench/load_bench.py (the done-when: 10 runs of 32 clients x 1000 operations).

Clients are given bursts of equal asynchronous copies whose frames are 256, 512 or 1024 bytes (one client in four:
bursts of small mixed operations instead): frames that tile the daemon's 64 KiB read buffer, so whenever the daemon
lags a client by 64 KiB a read ends exactly on a frame boundary -- the pattern that left reading paused before
issue 23 (every run of this load then lost clients).
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass

from harness import CUDA_SRC, Daemon, build_cuda, interposer_env

TILE_FRAMES = (256, 512, 1024, 0)       # client i gets TILE_FRAMES[i % 4]; 0: bursts of small mixed operations
_DONE = re.compile(r"DONE ops=(\d+) checked=(\d+) mismatches=(\d+)")


def htod_payload(frame: int) -> int:
    """The payload of an asynchronous MEMCPY_HTOD on the legacy stream whose whole frame is `frame` bytes."""
    from pyvgpu import wire                       # noqa: PLC0415
    from pyvgpu.protocol import OP_BY_NAME        # noqa: PLC0415
    code = OP_BY_NAME["MEMCPY_HTOD"].code
    for payload in range(frame, 0, -1):           # device pointers are above 2**32 (9 msgpack bytes), stream 0
        if sum(len(p) for p in wire.encode_request(code, 0, [0, 1 << 40, 0], b"\0" * payload)) == frame:
            return payload
    raise ValueError(f"no MEMCPY_HTOD frame of exactly {frame} bytes")


@dataclass
class ClientRun:
    seed: int
    rc: int
    ops: int
    checked: int
    mismatches: int
    output: str


def run_clients(daemon: Daemon, clients: int, nops: int, seed0: int = 0, timeout: float = 600) -> list[ClientRun]:
    """`clients` concurrent load_mixed programs of `nops` operations each (seeds seed0, seed0+1, ...); the daemon
    should not compress (--compress off) so that frame sizes are what htod_payload says."""
    exe = build_cuda(CUDA_SRC / "load_mixed.cu")
    env = {**os.environ, **interposer_env([daemon])}
    procs = []
    for i in range(clients):
        tile = TILE_FRAMES[i % len(TILE_FRAMES)]
        args = [str(exe), str(seed0 + i), str(nops)] + ([str(htod_payload(tile))] if tile else [])
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    deadline = time.monotonic() + timeout
    runs = []
    for i, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n(killed: timed out)"
        m = _DONE.search(out)
        ops, checked, bad = (int(g) for g in m.groups()) if m else (0, 0, -1)
        runs.append(ClientRun(seed0 + i, p.returncode, ops, checked, bad, out))
    return runs


def failed(runs: list[ClientRun]) -> list[ClientRun]:
    """The clients that did not finish all their operations with every byte right."""
    return [r for r in runs if r.rc != 0 or r.mismatches != 0]
