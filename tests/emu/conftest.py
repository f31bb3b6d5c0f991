"""Fixtures of the emulator's tests."""
from __future__ import annotations

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
