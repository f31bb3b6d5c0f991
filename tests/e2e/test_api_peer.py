"""Copies between GPUs (tests/cuda/api_peer.cu): two GPUs of one daemon (the daemon copies between its contexts)
and GPUs of two daemons, where the bytes go daemon to daemon (the destination fetches a ticket from the source; its
log says so) and, when the daemons cannot reach each other, through the client instead (said once on stderr)."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain


def test_peer_copies_one_daemon(cuda_build, daemon_factory, run):
    d = daemon_factory("--emu-devices", "2")
    proc = run(cuda_build("api_peer.cu"), [d], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


def test_peer_copies_daemon_to_daemon(cuda_build, daemon_factory, run):
    a, b = daemon_factory(), daemon_factory()
    proc = run(cuda_build("api_peer.cu"), [a, b], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "through this process" not in proc.stderr
    fetched_by_b = re.findall(rf"fetched (\d+) B from peer daemon 127\.0\.0\.1:{a.port}", b.log_text())
    fetched_by_a = re.findall(rf"fetched (\d+) B from peer daemon 127\.0\.0\.1:{b.port}", a.log_text())
    assert sorted(map(int, fetched_by_b)) == [4096, 6 << 20, 64 << 20]      # 70 MiB in two chunks, then 4 KiB
    assert list(map(int, fetched_by_a)) == [4096]


def test_peer_copies_fall_back_when_daemons_cannot_reach_each_other(cuda_build, daemon_factory, run, tmp_path):
    token = tmp_path / "token"
    token.write_text("ab" * 32 + "\n")
    token.chmod(0o600)
    a = daemon_factory("--token-file", str(token))             # B has no token: A refuses its fetch
    b = daemon_factory()
    proc = run(cuda_build("api_peer.cu"), [a, b], str(1 << 20), env={"PYVGPU_TOKEN": "ab" * 32}, timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert proc.stderr.count("copies between them go through this process") == 1
