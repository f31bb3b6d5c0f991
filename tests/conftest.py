"""Shared fixtures, over tests/harness.py (the module the benchmarks share): CUDA test programs built once per
session (cached), daemons on free loopback ports, programs run through libvcudart.

Layout: tests/interposer (libvcudart), tests/daemon (the daemon through its protocol), tests/emu (the emulated
GPU directly), tests/e2e (unmodified CUDA programs through libvcudart and daemons), tests/control (the `pyvgpu`
command, host map, wire format, set-up); tests/cuda holds the CUDA sources the tests build.
"""
from __future__ import annotations

import pytest

from harness import CUDA_SRC, ROOT, Daemon, build_cuda, lib_path, run_cuda, start_daemon
from pyvgpu.client import Client


@pytest.fixture(scope="session")
def cuda_build():
    """cuda_build('name.cu', *nvcc_flags, runtime='shared') -> path of the built program (tests/cuda/name.cu)."""
    return lambda name, *extra, runtime="shared": build_cuda(CUDA_SRC / name, tuple(extra), runtime)


@pytest.fixture(scope="session")
def cublas_include():
    """cuBLAS's headers (nvidia-cublas wheel, fetched once into build/cublas/ by tools/cublas_wheel.py)."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import cublas_wheel
    return cublas_wheel.fetch()


@pytest.fixture
def daemon_factory(tmp_path):
    started: list[Daemon] = []

    def make(*extra: str, backend: str = "emu", env: dict | None = None) -> Daemon:
        d = start_daemon(tmp_path, *extra, backend=backend, env=env)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture
def daemon(daemon_factory) -> Daemon:
    """One emulated-GPU daemon on a free loopback port."""
    return daemon_factory()


@pytest.fixture
def client(daemon):
    """A protocol client connected to the daemon fixture's daemon, closed after the test."""
    c = Client.connect("127.0.0.1", daemon.port)
    yield c
    c.close()


@pytest.fixture(scope="session")
def vcudart():
    return lib_path()


@pytest.fixture
def run():
    return run_cuda
