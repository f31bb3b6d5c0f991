"""Managed and mapped memory ops: allocation, attaching module variables, the host's pushes and the dirty scan
(the coherence model is in docs/architecture.md; the digests in managed.py)."""
from __future__ import annotations

from pyvgpu.protocol import MANAGED_FLAG_MAPPED, MANAGED_RUNS, MAX_MANAGED_ALIGN
from pyvgpu_daemon import managed
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, handler


def _reader(c: Call) -> managed.Reader:
    return lambda addr, size: c.ctx.memcpy_dtoh(addr, size, None)


@handler("MALLOC_MANAGED")
def malloc_managed(c: Call, size: int, align: int, flags: int) -> int:
    if size == 0 or align < 256 or align > MAX_MANAGED_ALIGN or align & (align - 1) or flags & ~MANAGED_FLAG_MAPPED:
        raise CudaError("cudaErrorInvalidValue", f"managed allocation of {size} B, alignment {align}, flags {flags}")
    rounded = -(-size // align) * align                 # whole client pages: the host maps them
    c.st.check_quota(rounded, "cudaMallocManaged")
    c.st.charge(c.st.allocations)
    ptr = c.ctx.malloc_managed(rounded, align)
    try:
        c.ctx.memset(ptr, 0, rounded, None)             # host and device copies both start as zeros
        c.st.managed.add(ptr, rounded, managed.zero_digests(rounded))
    except CudaError:
        c.ctx.free(ptr)
        raise
    c.st.add_allocation(ptr, rounded)
    return ptr


@handler("MANAGED_ATTACH")
def managed_attach(c: Call, ptr: int, size: int) -> None:
    if size == 0:
        raise CudaError("cudaErrorInvalidValue", "managed attach of 0 bytes")
    c.st.check_range(ptr, size, "managed attach")
    c.st.managed.add(ptr, size, None)


@handler("MANAGED_PUSH")
def managed_push(c: Call) -> None:
    managed.push(c.st.managed, _reader(c), lambda addr, data: c.ctx.memcpy_htod(addr, data, None), c.payload)
    # The host's bytes must be on the device before the next work on ANY stream reads them. A copy from pageable
    # memory on the default stream returns once staged, with its DMA still pending, and a non-blocking stream does
    # not wait for the default stream: on an H200 a graph replayed on such a stream read the old bytes once in three
    # runs (GPU run 6, api_managed.cu:195).
    c.ctx.stream_sync(None)


@handler("MANAGED_DIRTY")
def managed_dirty(c: Call) -> dict[str, list[list[int]]]:
    if not c.st.managed.ranges:
        return {MANAGED_RUNS: []}
    c.ctx.synchronize()                                  # the device's queued work may still write
    return {MANAGED_RUNS: managed.dirty(c.st.managed, _reader(c))}
