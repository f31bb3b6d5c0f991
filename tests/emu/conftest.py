"""Fixtures of the emulator's tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyvgpu_daemon.emu.runtime.chunk import Chunk


@pytest.fixture
def sparse_calls(monkeypatch) -> list[int]:
    """How many times a block ran sparse (ChunkAPI.sparse, runtime/sparse.py), counted: [calls]."""
    calls = [0]
    orig = Chunk.sparse

    def counted(self, idx):
        calls[0] += 1
        return orig(self, idx)

    monkeypatch.setattr(Chunk, "sparse", counted)
    return calls


class FakeCompiler:
    """A compiler for PYVGPU_EMU_CC: a shell script that logs each run, then runs the body it was made with; asked
    for its version (native.compiler_identity, once a process), it answers without either."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __call__(self, body: str) -> Path:
        cc = self.directory / "fake-cc"
        cc.write_text(f"#!/bin/sh\n[ \"$*\" = --version ] && {{ echo fake-cc 1; exit 0; }}\n"
                      f"echo run >> {self.directory / 'runs'}\n{body}\n")
        cc.chmod(0o755)
        return cc

    def runs(self) -> int:
        """How many times a compiler made here ran."""
        p = self.directory / "runs"
        return len(p.read_text().splitlines()) if p.exists() else 0


@pytest.fixture
def fake_cc(tmp_path) -> FakeCompiler:
    return FakeCompiler(tmp_path)
