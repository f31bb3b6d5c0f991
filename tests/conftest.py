"""Shared fixtures: build CUDA test programs (cached), start daemons on free loopback ports, run programs
through libvcudart."""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pyvgpu
from pyvgpu.client import Client

ROOT = Path(__file__).resolve().parent.parent
CUDA_SRC = Path(__file__).resolve().parent / "cuda"
BUILD = ROOT / "build" / "tests-cuda"
NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cuda_source_bytes(src: Path) -> bytes:
    """The source plus every shared header in tests/cuda (check.h, ...), for cache keys of built programs."""
    return src.read_bytes() + b"".join(h.read_bytes() for h in sorted(CUDA_SRC.glob("*.h")))


def build_cuda(src: Path, extra: tuple[str, ...] = ()) -> Path:
    """nvcc -cudart shared, cached by a hash of the source (with the tests/cuda headers), flags and nvcc path."""
    digest = hashlib.sha256(cuda_source_bytes(src) + repr(extra).encode() + NVCC.encode()).hexdigest()[:16]
    out = BUILD / f"{src.stem}-{digest}"
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    cmd = [NVCC, "-cudart", "shared", "-O3", "-o", str(tmp), str(src), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed for {src.name}:\n{proc.stderr}")
    tmp.rename(out)
    return out


@pytest.fixture(scope="session")
def cuda_build():
    """cuda_build('name.cu', *nvcc_flags) -> path of the built program (tests/cuda/name.cu)."""
    return lambda name, *extra: build_cuda(CUDA_SRC / name, tuple(extra))


@pytest.fixture(scope="session")
def cublas_include() -> Path:
    """cuBLAS's headers (nvidia-cublas wheel, fetched once into build/cublas/ by tools/cublas_wheel.py)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import cublas_wheel
    return cublas_wheel.fetch()


@dataclass
class Daemon:
    port: int
    proc: subprocess.Popen
    log: Path
    host: str = "127.0.0.1"
    extra: tuple[str, ...] = field(default_factory=tuple)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_daemon(tmp: Path, *extra: str, backend: str = "emu", env: dict | None = None,
                 cwd: Path | None = None) -> Daemon:
    port = free_port()
    log = tmp / f"daemon-{port}.log"
    cmd = [sys.executable, "-m", "pyvgpu_daemon", "--host", "127.0.0.1", "--port", str(port),
           "--backend", backend, *extra]
    fh = open(log, "wb")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return Daemon(port, proc, log, extra=extra)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"daemon did not listen on {port}:\n{log.read_text(errors='replace')}")


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
def vcudart() -> Path:
    return pyvgpu.lib_path()


def run_cuda(program: Path, daemons: list[Daemon], *args: str, timeout: float = 300,
             env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a CUDA program under LD_PRELOAD=libvcudart against the given daemons (GPU order = list order)."""
    full_env = {**os.environ, "LD_PRELOAD": str(pyvgpu.lib_path()),
                "PYVGPU_HOSTS": ",".join(d.address for d in daemons), **(env or {})}
    proc = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        logs = "\n".join(d.log_text()[-3000:] for d in daemons)
        raise AssertionError(f"{program.name} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}\ndaemon logs:\n{logs}")
    return proc


@pytest.fixture
def run():
    return run_cuda
