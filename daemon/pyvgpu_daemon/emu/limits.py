"""Resource limits of the emulated GPU's interpreter."""
from __future__ import annotations

import os
from dataclasses import dataclass


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class EmuLimits:
    # Threads interpreted together (a chunk holds whole CTAs; one CTA always fits whatever this says).
    lanes_per_chunk: int = _env_int("PYVGPU_EMU_LANES_PER_CHUNK", 65536)
    # Vector instructions (one instruction over the lanes of a chunk) one launch may execute in all. A deadlocked
    # or runaway kernel ends with cudaErrorLaunchTimeout instead of hanging the daemon.
    max_vector_instructions: int = _env_int("PYVGPU_EMU_MAX_VECTOR_INSTRUCTIONS", 50_000_000)
    # Wall-clock seconds one launch may run.
    max_seconds: float = float(_env_int("PYVGPU_EMU_MAX_SECONDS", 600))
    # Per-thread local memory (bytes) and per-CTA shared memory the emulated device grants.
    max_local_bytes: int = 512 * 1024
    max_shared_bytes: int = 64 * 1024
    default_dynamic_shared_bytes: int = 48 * 1024
    # Inlining depth for .func calls (recursion is refused outright).
    max_call_depth: int = 32
