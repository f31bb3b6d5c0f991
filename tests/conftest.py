"""Shared fixtures, over tests/harness.py (the module the benchmarks share): CUDA test programs built once per
session (cached), daemons on free loopback ports, programs run through libvcudart.

Layout: tests/interposer (libvcudart), tests/daemon (the daemon through its protocol), tests/emu (the emulated
GPU directly), tests/e2e (unmodified CUDA programs through libvcudart and daemons), tests/control (the `pyvgpu`
command, host map, wire format, set-up), tests/security (bounds, hangs, TLS and the frame fuzzer of issue 11);
tests/cuda holds the CUDA sources the tests build.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import (CHAIN_BACKENDS, CUDA_SRC, ROOT, TEST_BACKEND, Daemon, build_cuda, lib_path, run_cuda,
                     split_emu_options, start_daemon, unmet_on_a_gpu_host)
from pyvgpu.client import Client


@pytest.fixture(scope="session", autouse=True)
def hermetic_config(tmp_path_factory):
    """Tests never read the developer's ~/.config/pyvgpu (host map, token, TLS trust) or TLS settings."""
    keys = ("XDG_CONFIG_HOME", "PYVGPU_TLS", "PYVGPU_TLS_CA", "PYVGPU_TLS_FINGERPRINT")
    saved = {k: os.environ.get(k) for k in keys}
    for k in keys:
        os.environ.pop(k, None)
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-config"))
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@dataclass(frozen=True)
class TlsPair:
    cert: Path
    key: Path
    fingerprint: str


def make_tls_pair(where: Path, names: list[str]) -> TlsPair:
    from pyvgpu.tls import make_self_signed
    cert, key = where / "daemon.crt", where / "daemon.key"
    return TlsPair(cert, key, make_self_signed(cert, key, names))


@pytest.fixture(scope="session")
def tls_pair(tmp_path_factory) -> TlsPair:
    """A self-signed daemon certificate for the loopback addresses the tests listen on."""
    return make_tls_pair(tmp_path_factory.mktemp("tls"), ["127.0.0.1", "127.0.0.2", "localhost"])


@pytest.fixture(scope="session")
def other_tls_pair(tmp_path_factory) -> TlsPair:
    """Another certificate for the same names: what an impostor daemon would present."""
    return make_tls_pair(tmp_path_factory.mktemp("tls-other"), ["127.0.0.1", "127.0.0.2", "localhost"])


@pytest.fixture(scope="session")
def cuda_build():
    """cuda_build('name.cu', *nvcc_flags, runtime='shared') -> path of the program built from tests/cuda/<name>.cu."""
    return lambda name, *extra, runtime="shared": build_cuda(CUDA_SRC / name, tuple(extra), runtime)


@pytest.fixture(scope="session")
def cublas_include():
    """cuBLAS's headers (nvidia-cublas wheel, fetched once into build/cublas/ by tools/cublas_wheel.py)."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import cublas_wheel
    return cublas_wheel.fetch()


# Tests marked `chain` run twice when the test backend (harness.TEST_BACKEND) is emu: on emulated daemons and on
# chains (the cuda backend on pyvgpu's own libcuda.so.1 over emulated daemons, harness.start_chain), results checked
# the same way. A test of the emulator's own behaviour in such a module says so with `emu_only(reason)` and runs once;
# tests parametrized by case choose per case (harness.on_backends).


def pytest_configure(config):
    config.addinivalue_line("markers", "chain: run on emulated daemons and on chains (the cuda backend on pyvgpu's "
                                       "libcuda.so.1 over emulated daemons)")
    config.addinivalue_line("markers", "emu_only(reason): a test of the emulator's own behaviour in a chain module")


def pytest_generate_tests(metafunc):
    node = metafunc.definition
    if TEST_BACKEND == "emu" and node.get_closest_marker("chain") and not node.get_closest_marker("emu_only"):
        if "backend" not in metafunc.fixturenames:
            metafunc.fixturenames.append("backend")
        metafunc.parametrize("backend", CHAIN_BACKENDS, indirect=True)


@pytest.fixture
def backend(request) -> str:
    """The backend of the daemons this test starts (TEST_BACKEND unless the test runs on both, above)."""
    return getattr(request, "param", TEST_BACKEND)


@pytest.fixture
def daemon_factory(tmp_path, backend):
    started: list[Daemon] = []

    def make(*extra: str, backend: str = backend, env: dict | None = None) -> Daemon:
        d = start_daemon(tmp_path, *extra, backend=backend, env=env)
        started.append(d)
        if backend == "cuda" and split_emu_options(extra)[0]:
            # the emulator's options mean nothing to real GPUs: run where the GPU host has what the test needs
            with Client.connect(d.host, d.port) as c:
                why = unmet_on_a_gpu_host(extra, len(c.devices))
            if why:
                pytest.skip(why)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture
def daemon(daemon_factory) -> Daemon:
    """One daemon of the test's backend (an emulated GPU unless the test runs on chains too) on a free loopback port."""
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
