"""Backends: `emu` (CPU-emulated GPU) and `cuda` (real GPUs through cuda-python). `auto` prefers cuda."""
from __future__ import annotations

import logging

from pyvgpu_daemon.backends.base import Backend

log = logging.getLogger("pyvgpu.daemon")


def make_backend(kind: str, emu_devices: int = 1, emu_memory: int = 4 << 30, emu_slowdown: float = 1.0,
                 instance: str = "") -> Backend:
    """Build the backend named `kind` (auto|cuda|emu). auto falls back to emu, saying why, when no GPU is usable."""
    if kind not in ("auto", "cuda", "emu"):
        raise ValueError(f"unknown backend {kind!r} (auto, cuda or emu)")
    if kind in ("auto", "cuda"):
        from pyvgpu_daemon.backends.cuda import CudaBackend, probe
        count, why = probe()
        if count > 0:
            log.info("backend cuda: %d GPU(s)", count)
            return CudaBackend()
        if kind == "cuda":
            raise RuntimeError(f"--backend cuda: no usable CUDA GPU ({why})")
        log.info("backend auto: no CUDA GPU (%s); using the emulated device", why)
    from pyvgpu_daemon.backends.emu import EmuBackend
    return EmuBackend(devices=emu_devices, memory=emu_memory, slowdown=emu_slowdown, instance=instance)
