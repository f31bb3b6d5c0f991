"""Fixtures of the Slurm tests: a pool of emulated pyvgpu daemons and a real Slurm cluster (cluster.py) whose jobs
lease the pool's GPUs through pyvgpu's hooks. One cluster per module: starting one takes a few seconds."""
from __future__ import annotations

import pytest

from cluster import Cluster, SlurmMissing, check_installed
from harness import CUDA_SRC, build_cuda, start_daemon

LEASE_TTL = 3.0          # seconds: short, so that expiry is seen quickly (the default is 30)
MiB = 1 << 20


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Two daemons of one GPU each (leased whole: license vgpu) and one of one 1 GiB GPU (shared out: vgpu_share)."""
    work = tmp_path_factory.mktemp("pool")
    daemons = [start_daemon(work, "--emu-devices", "1"), start_daemon(work, "--emu-devices", "1"),
               start_daemon(work, "--emu-devices", "1", "--emu-memory", "1G")]
    yield daemons
    for d in daemons:
        d.stop()


@pytest.fixture(scope="module")
def slurm(pool, tmp_path_factory):
    try:
        check_installed()
    except SlurmMissing as exc:
        pytest.fail(str(exc))            # never a skip: CI installs Slurm (scripts/setup-slurm.sh)
    conf = (f"Pool={pool[0].address},{pool[1].address}\nSharedPool={pool[2].address}\nShares=4\n"
            f"LeaseTTL={LEASE_TTL:g}\nStartTTL=30\nAcquireTimeout=60\nTimeout=5\n")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), conf, "vgpu:2,vgpu_share:4")
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def lease_check():
    return build_cuda(CUDA_SRC / "lease_check.cu")
