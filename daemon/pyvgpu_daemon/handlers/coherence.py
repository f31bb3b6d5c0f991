"""What the client's coherence layer reports (docs/architecture.md, "Managed and mapped memory"): bytes of managed or
mapped memory that the host and the device both changed between two synchronizations, found by the client when it
merged the device's changes into a page the host had written (a conflict found in a push is the push's own error,
managed.py). Either way the device gets the sticky MANAGED_CONFLICT_ERROR: the program's numbers would depend on
which side pyvgpu let win."""
from __future__ import annotations

from pyvgpu_daemon import managed
from pyvgpu_daemon.handlers.registry import Call, handler


@handler("MANAGED_CONFLICT")
def managed_conflict(c: Call, ptr: int, size: int) -> None:
    raise managed.conflict(ptr, size, "the device changed bytes the host wrote since the last synchronization")
