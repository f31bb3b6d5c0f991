"""Family name (pyvgpu/cublas_spec.py) -> the emulated GPU's implementation of it."""
from __future__ import annotations

from typing import Callable

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas.operands import Operands

Routine = Callable[[Operands], None]
ROUTINES: dict[str, Routine] = {}


def routine(fam: spec.Family) -> Callable[[Routine], Routine]:
    def register(fn: Routine) -> Routine:
        if fam.name in ROUTINES:
            raise RuntimeError(f"two routines for {fam.name}")
        ROUTINES[fam.name] = fn
        return fn
    return register
