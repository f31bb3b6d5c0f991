"""A synchronous host-to-device copy has landed before the session's next work (HTOD_LANDED), on the cuda backend
over pyvgpu's own driver (the chain: tests/harness.py, start_chain), both ways of calling the driver (its compiled
calls, libpvdrvcall, and cuda-python: PYVGPU_CUDA_CALLS=python).

The driver calls the backend made are counted by that driver's call census (PYVGPU_CENSUS, csrc/core/census.c, in
the cuda daemon's process): copies followed by HTOD_LANDED (what the client sends after cudaMemcpy, cuMemcpyHtoD,
cudaMemcpyToSymbol) make one cuStreamSynchronize each, on the copy's stream, default or not; the same copies alone
(cudaMemcpyAsync's form) make none, so asynchronous copies stay asynchronous. On a real GPU the daemon does not load
pyvgpu's driver, so there is no census to read: there, tests/cuda/api_copy_order.cu (scripts/gpu-check.sh's programs
stage) checks what the wait is for."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import start_daemon
from pyvgpu.client import Client
from pyvgpu.protocol import ENV_CENSUS, ENV_CUDA_CALLS
from pyvgpu_daemon.backends.cuda import probe

GPU_COUNT, _ = probe()
COPIES = 6


def driver_calls(workdir: Path, calls: str, landed: bool) -> dict[str, int]:
    """The driver entry points a chain's cuda daemon reached (name -> calls) in a session that made COPIES
    host-to-device copies, alternately on a stream of its own (cudaStreamNonBlocking) and the default stream, each
    followed by HTOD_LANDED on its stream when `landed`."""
    census = workdir / f"census-{calls}-{int(landed)}.txt"
    env = {ENV_CENSUS: str(census), **({ENV_CUDA_CALLS: "python"} if calls == "python" else {})}
    d = start_daemon(workdir, backend="chain", env=env)
    try:
        with Client.connect("127.0.0.1", d.port) as c:
            err, p, _ = c.call("MALLOC", 0, 1 << 20)
            assert err == 0
            err, s, _ = c.call("STREAM_CREATE", 0, 1, 0)        # cudaStreamNonBlocking
            assert err == 0
            for i in range(COPIES):
                stream = s if i % 2 == 0 else 0
                assert c.call("MEMCPY_HTOD", 0, p + 4096 * i, stream, payload=bytes([i + 1]) * 4096)[0] == 0
                if landed:
                    assert c.call("HTOD_LANDED", 0, stream)[0] == 0
            err, _, out = c.call("MEMCPY_DTOH", 0, p, 4096 * COPIES, 0)
            assert err == 0 and out == b"".join(bytes([i + 1]) * 4096 for i in range(COPIES))
        said = "fast ops through compiled calls" if calls == "compiled" else "fast ops through cuda-python"
        assert said in d.log_text(), d.log_tail()           # the way of calling asked for, not a fallback
    finally:
        d.stop()
    text = census.read_text()
    return {name: int(n) for name, n in re.findall(r"^census reached \S+ (\w+) (\d+)$", text, re.M)}


@pytest.mark.skipif(GPU_COUNT > 0, reason="counts pyvgpu's driver's calls, which a cuda daemon on a GPU does not "
                                          "load; tests/cuda/api_copy_order.cu checks a GPU")
@pytest.mark.parametrize("calls", ["compiled", "python"])
def test_a_synchronous_copy_waits_for_its_stream_and_an_async_one_does_not(tmp_path, calls):
    alone = driver_calls(tmp_path, calls, landed=False)
    landed = driver_calls(tmp_path, calls, landed=True)
    assert alone.get("cuMemcpyHtoDAsync_v2") == landed.get("cuMemcpyHtoDAsync_v2") == COPIES, (alone, landed)
    # The read back waits for the default stream with cuStreamSynchronize too: the only other one.
    assert landed.get("cuStreamSynchronize", 0) - alone.get("cuStreamSynchronize", 0) == COPIES, (alone, landed)
    assert alone.get("cuStreamSynchronize", 0) == 1, alone
