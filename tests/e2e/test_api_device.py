"""Device queries, per-thread device and last error, CUDA's error codes for bad pointers/devices/handles,
cudaErrorNotSupported for unsupported calls, stream/event ordering (tests/cuda/api_device.cu)."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain


def test_device_queries_errors_streams_events(cuda_build, daemon, run):
    prog = cuda_build("api_device.cu")
    proc = run(prog, [daemon], timeout=300)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "devices 1" in proc.stdout
    assert re.search(r"GPU0 .+ sm_\d+ mem=\d+ sms=\d+", proc.stdout)
    free, total = map(int, re.search(r"^after reset free (\d+) total (\d+)$", proc.stdout, re.M).groups())
    if daemon.backend != "cuda":    # the emulated GPU is this program's alone; a real one is shared with the others
        assert free == total        # cudaDeviceReset released everything the program held
    # the unsupported calls were named once each on stderr
    assert proc.stderr.count("pyvgpu: cudaIpcGetMemHandle is not supported") == 1
    assert "cudaIpcOpenMemHandle is not supported" in proc.stderr


def test_two_emulated_devices_on_one_host(cuda_build, daemon_factory, run):
    d = daemon_factory("--emu-devices", "2")
    prog = cuda_build("api_device.cu")
    proc = run(prog, [d], timeout=300)
    assert "devices 2" in proc.stdout
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


@pytest.mark.emu_only("no daemon at all")
def test_no_daemon_is_a_clean_error(cuda_build, run):
    """A host map naming a port nobody listens on: cudaGetDeviceCount fails with an error, no hang, no crash."""
    from harness import Daemon, free_port   # noqa: PLC0415

    port = free_port()
    fake = Daemon(port=port, proc=None, log=None)  # type: ignore[arg-type]
    prog = cuda_build("api_device.cu")
    proc = run(prog, [fake], timeout=60, check=False)
    assert proc.returncode == 1
    assert "cudaErrorDevicesUnavailable" in proc.stdout
    assert f"cannot connect to daemon 127.0.0.1:{port}" in proc.stderr
