"""Virtual memory management ops (VMM_RESERVE .. VMM_SET_ACCESS, libvcuda's cuMemAddressReserve, cuMemCreate,
cuMemMap, ...): CUDA's rules from the session's VmmTable (vmm.py), the mechanics from the backend's context. Physical
allocations are the session's memory (quota checked at VMM_CREATE, `held` until freed)."""
from __future__ import annotations

from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, handler
from pyvgpu_daemon.vmm import Allocation, VmmTable


def _table(c: Call) -> VmmTable:
    if c.st.vmm is None:
        c.st.vmm = VmmTable(c.ctx.vmm_granularity())   # cudaErrorNotSupported where the backend has none
    return c.st.vmm


def _freed(c: Call, a: Allocation | None) -> None:
    """An allocation whose last handle and mapping are gone: its memory goes."""
    if a is not None:
        c.ctx.vmm_release(a.obj)
        c.st.held -= a.size


@handler("VMM_RESERVE")
def vmm_reserve(c: Call, size: int, align: int, addr: int) -> int:
    t = _table(c)
    align = t.check_reserve(size, align)
    start = c.ctx.vmm_reserve(size, align, addr if t.hint_free(addr, size, align) else 0)
    if start % align or t.overlaps_reservation(start, size):
        c.ctx.vmm_free(start, size)
        raise CudaError("cudaErrorMemoryAllocation", f"the device reserved [{start:#x}, +{size:#x}) over another "
                                                     f"reservation or misaligned")
    t.add_reservation(start, size)
    return start


@handler("VMM_FREE")
def vmm_free(c: Call, addr: int, size: int) -> None:
    t = _table(c)
    t.check_free(addr, size)
    c.ctx.vmm_free(addr, size)
    t.remove_reservation(addr)


@handler("VMM_CREATE")
def vmm_create(c: Call, size: int) -> int:
    t = _table(c)
    t.check_create(size)
    c.st.check_quota(size, "cuMemCreate")
    handle = t.add_allocation(c.ctx.vmm_create(size), size)
    c.st.held += size
    return handle


@handler("VMM_RELEASE")
def vmm_release(c: Call, handle: int) -> None:
    _freed(c, _table(c).release(handle))


@handler("VMM_MAP")
def vmm_map(c: Call, addr: int, size: int, offset: int, handle: int) -> None:
    t = _table(c)
    a = t.check_map(addr, size, offset, handle)
    c.ctx.vmm_map(addr, size, a.obj)
    t.add_mapping(addr, size, handle)


@handler("VMM_UNMAP")
def vmm_unmap(c: Call, addr: int, size: int) -> None:
    t = _table(c)
    for start in t.check_unmap(addr, size):
        c.ctx.vmm_unmap(start, t.mappings[start].size)
        _freed(c, t.remove_mapping(start))


@handler("VMM_SET_ACCESS")
def vmm_set_access(c: Call, addr: int, size: int, flags: int) -> None:
    t = _table(c)
    starts = t.check_access(addr, size, flags)
    c.ctx.vmm_set_access(addr, size, flags)
    t.set_access(starts, flags)
