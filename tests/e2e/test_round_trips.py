"""Blocking round trips (issue 10, P4), counted by the client core's statistics (PYVGPU_STATS):
cudaMemcpyAsync device-to-host into pinned memory does not block and its bytes are there after the synchronization
that covers it (order, window, cudaFreeHost, errors: tests/cuda/wire_async.cu checks them), elapsed times of events
after a synchronizing call need no round trip, and the training step of examples/dp_train needs one blocking round
trip per GPU."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness import ROOT, build_cuda


def prepare_digits(out: Path) -> Path:
    """scikit-learn's digits as IDX files (examples/dp_train/prepare_digits.py)."""
    pytest.importorskip("sklearn", reason="scikit-learn (its bundled digits set is the training data) is not installed")
    spec = importlib.util.spec_from_file_location("prepare_digits", ROOT / "examples" / "dp_train" / "prepare_digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.prepare(out)


def parse_stats(path: Path) -> dict[str, dict[str, float]]:
    """PYVGPU_STATS output → {op or GPUn or 'all': {calls, bytes, blocked, blocked_ms}}."""
    rows: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        words = line.split()
        if len(words) == 6 and words[1].isdigit():
            rows[words[0]] = {"calls": int(words[1]), "bytes": int(words[2]), "blocked": int(words[3]),
                              "blocked_ms": float(words[4])}
    return rows


@pytest.mark.chain
def test_async_copies_and_event_times_need_no_round_trip(cuda_build, daemon, run, tmp_path):
    prog = cuda_build("wire_async.cu")
    stats = tmp_path / "stats.txt"
    proc = run(prog, [daemon], env={"PYVGPU_STATS": str(stats)}, timeout=300)
    assert proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    rows = parse_stats(stats)
    copies = rows["MEMCPY_DTOH_ASYNC"]
    # 1 + 4 + 6 + 1 + 1 detached copies; only those that found the 64 MiB window full waited (for older bytes)
    assert copies["calls"] == 13, rows
    # bytes on the wire: the last copy fails (after a kernel fault) and brings none
    assert copies["bytes"] == (1 + 1 + 6 * 64 + 1) * (256 << 10), rows
    assert 1 <= copies["blocked"] <= 2, rows           # the 5th and 6th 16 MiB pieces wait for the first ones
    # cudaEventElapsedTime: one round trip for the record not reported yet, one for the untimed event
    assert rows["EVENT_ELAPSED"]["calls"] == 2, rows
    # the pageable async copy and the step's cudaMemcpy wait, as CUDA's do
    assert rows["MEMCPY_DTOH"]["calls"] == 2 and rows["MEMCPY_DTOH"]["blocked"] == 2, rows
    assert rows["all"]["blocked"] == sum(r["blocked"] for k, r in rows.items() if k != "all" and
                                         not k.startswith("GPU"))


def test_dp_train_step_needs_one_blocking_round_trip_per_gpu(daemon_factory, run, tmp_path):
    """Two runs that differ only in their number of steps: the difference is the steady-state steps'. Per GPU and
    step the one blocking call is the gradient's device-to-host copy (the host sums the gradients: data flow); the
    uploads, launches and event records are fire-and-forget and the step's cudaEventElapsedTime calls are answered
    from the event times of that copy's reply."""
    binary = build_cuda(ROOT / "examples" / "dp_train" / "dp_train.cu", ("-std=c++17",))
    data = prepare_digits(tmp_path / "digits")
    daemons = [daemon_factory(), daemon_factory()]
    blocked: dict[int, dict[str, dict[str, float]]] = {}
    for steps in (3, 7):
        stats = tmp_path / f"stats-{steps}.txt"
        run(binary, daemons, "--data", str(data), "--gpus", "2", "--batch", "32", "--hidden", "16", "--steps",
            str(steps), "--log-every", "1000", env={"PYVGPU_STATS": str(stats)}, timeout=300)
        blocked[steps] = parse_stats(stats)
    a, b = blocked[3], blocked[7]
    for gpu in ("GPU0", "GPU1"):
        assert b[gpu]["blocked"] - a[gpu]["blocked"] == 4, (a, b)      # 4 more steps, 1 blocking call each
    assert b["MEMCPY_DTOH"]["blocked"] - a["MEMCPY_DTOH"]["blocked"] == 8
    assert "EVENT_ELAPSED" not in b, b


@pytest.mark.chain
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_copies_are_byte_exact_and_smaller_on_the_wire(cuda_build, daemon_factory, run, tmp_path, codec):
    """PYVGPU_COMPRESS=<codec> compresses every upload of at least 64 KiB (loopback included); the daemon's --compress
    always compresses every bulk reply: tests/cuda/wire_compress.cu checks the bytes, the statistics the wire bytes."""
    prog = cuda_build("wire_compress.cu")
    daemon = daemon_factory("--compress", "always")
    stats = tmp_path / "stats.txt"
    proc = run(prog, [daemon], env={"PYVGPU_STATS": str(stats), "PYVGPU_COMPRESS": codec}, timeout=300)
    assert proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    rows = parse_stats(stats)
    raw = (3 << 20) + 12345 + 100 + 70000
    for op in ("MEMCPY_HTOD", "MEMCPY_DTOH", "MEMCPY_DTOH_ASYNC"):
        assert rows[op]["calls"] >= 3, rows
        # a third zeros, a third noise, a third half-zero floats: well under the raw size, above the noise alone
        assert raw / 3 < rows[op]["bytes"] < raw * 0.8, (op, rows[op])


@pytest.mark.chain
def test_no_compression_to_a_loopback_daemon_by_default(cuda_build, daemon_factory, run, tmp_path):
    """PYVGPU_COMPRESS unset (auto): a loopback daemon is offered no codec, so even --compress always sends raw."""
    prog = cuda_build("wire_compress.cu")
    daemon = daemon_factory("--compress", "always")
    stats = tmp_path / "stats.txt"
    env = {"PYVGPU_STATS": str(stats), "PYVGPU_COMPRESS": ""}
    proc = run(prog, [daemon], env=env, timeout=300)
    assert proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    rows = parse_stats(stats)
    assert rows["MEMCPY_HTOD"]["bytes"] == rows["MEMCPY_DTOH"]["bytes"] == (3 << 20) + 12345 + 100 + 70000, rows


@pytest.mark.chain
def test_only_synchronous_host_to_device_copies_say_they_must_land(cuda_build, daemon, run, tmp_path):
    """cudaMemcpy, cudaMemcpyToSymbol and a cudaMemcpyDefault from host memory send HTOD_LANDED after their bytes,
    fire-and-forget (the daemon of a real GPU waits there for the copy's DMA); cudaMemcpyAsync and
    cudaMemcpyToSymbolAsync (on a stream or the default stream) and cudaMemcpy2D do not (tests/cuda/wire_copy_landed.cu:
    6 synchronous 1D copies of 15, each copy's bytes checked)."""
    stats = tmp_path / "stats.txt"
    proc = run(cuda_build("wire_copy_landed.cu"), [daemon], env={"PYVGPU_STATS": str(stats)}, timeout=300)
    assert proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    rows = parse_stats(stats)
    assert rows["MEMCPY_HTOD"]["calls"] == 15 and rows["MEMCPY2D_HTOD"]["calls"] == 1, rows
    assert rows["HTOD_LANDED"] == {"calls": 6, "bytes": 0, "blocked": 0, "blocked_ms": 0.0}, rows
