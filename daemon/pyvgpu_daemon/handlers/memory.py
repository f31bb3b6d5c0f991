"""Memory ops: device memory information, allocation, linear and 2D copies in every direction, memsets."""
from __future__ import annotations

from typing import Any

from pyvgpu_daemon.backends.base import FastOp
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, fast_handler, handler
from pyvgpu_daemon.session import DeviceState
from pyvgpu_daemon.lent import Lent


def check_2d(pitch: int, width: int, height: int) -> int:
    """Bytes spanned by a pitched region; width > pitch is CUDA's cudaErrorInvalidPitchValue."""
    if height > 1 and width > pitch:
        raise CudaError("cudaErrorInvalidPitchValue", f"width {width} exceeds pitch {pitch}")
    return 0 if width == 0 or height == 0 else pitch * (height - 1) + width


@handler("MEM_GET_INFO")
def mem_get_info(c: Call) -> list[int]:
    free, total = c.st.mem_view(*c.ctx.mem_info())     # a session with a memory limit sees it as the total
    return [int(free), int(total)]


@handler("MALLOC")
def malloc(c: Call, size: int) -> int:
    if size == 0:
        return 0                          # cudaMalloc(&p, 0) succeeds with a NULL pointer
    c.st.check_quota(size, "cudaMalloc")
    c.st.charge(c.st.allocations)
    ptr = c.ctx.malloc(size)
    c.st.add_allocation(ptr, size)
    return ptr


@handler("FREE")
def free(c: Call, ptr: int) -> None:
    if ptr == 0:
        return                            # cudaFree(NULL) is a no-op
    if ptr not in c.st.allocations:
        raise CudaError("cudaErrorInvalidValue", f"free of {ptr:#x}: not an allocation of this session")
    c.ctx.free(ptr)
    c.st.remove_allocation(ptr)
    c.st.managed.remove(ptr)


@fast_handler("MEMCPY_HTOD")
def memcpy_htod(c: Call, dst: int, stream: Any) -> FastOp | None:
    if not c.payload:
        return None
    c.st.check_range(dst, len(c.payload), "memcpy HtoD destination")
    return FastOp("memcpy_htod", (dst, c.payload, stream))


@handler("HTOD_LANDED")
def htod_landed(c: Call, stream: Any) -> None:
    # After a synchronous host-to-device copy: its bytes are in device memory before the session's next op runs,
    # on any stream (the spec line says why).
    c.ctx.htod_landed(stream)


@handler("MEMCPY_DTOH")
def memcpy_dtoh(c: Call, src: int, size: int, stream: Any) -> bytes | memoryview | Lent:
    if size == 0:
        return b""
    c.st.check_range(src, size, "memcpy DtoH source")
    return c.ctx.memcpy_dtoh_reply(src, size, stream)


@handler("MEMCPY_DTOH_ASYNC")
def memcpy_dtoh_async(c: Call, src: int, size: int, stream: Any) -> bytes | memoryview | Lent:
    # DETACHED: the same copy, but the client does not wait; a failure is latched for its next synchronizing call
    return memcpy_dtoh(c, src, size, stream)


def _dtod_done(st: DeviceState, op: FastOp) -> None:
    st.bytes_dtod += op.args[2]


@fast_handler("MEMCPY_DTOD", after=_dtod_done)
def memcpy_dtod(c: Call, dst: int, src: int, size: int, stream: Any) -> FastOp | None:
    if not size:
        return None
    c.st.check_range(src, size, "memcpy DtoD source")
    c.st.check_range(dst, size, "memcpy DtoD destination")
    return FastOp("memcpy_dtod", (dst, src, size, stream))


@handler("MEMCPY2D_HTOD")
def memcpy2d_htod(c: Call, dst: int, dpitch: int, width: int, height: int, stream: Any) -> None:
    span = check_2d(dpitch, width, height)
    if len(c.payload) != width * height:
        raise CudaError("cudaErrorInvalidValue", f"2D payload of {len(c.payload)} B, expected {width}x{height}")
    if span:
        c.st.check_range(dst, span, "memcpy2D HtoD destination")
        c.ctx.memcpy2d_htod(dst, dpitch, width, height, c.payload, stream)


@handler("MEMCPY2D_DTOH")
def memcpy2d_dtoh(c: Call, src: int, spitch: int, width: int, height: int, stream: Any) -> bytes:
    span = check_2d(spitch, width, height)
    if not span:
        return b""
    c.st.check_range(src, span, "memcpy2D DtoH source")
    return c.ctx.memcpy2d_dtoh(src, spitch, width, height, stream)


@handler("MEMCPY2D_DTOD")
def memcpy2d_dtod(c: Call, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                  stream: Any) -> None:
    dspan = check_2d(dpitch, width, height)
    sspan = check_2d(spitch, width, height)
    if dspan:
        c.st.check_range(src, sspan, "memcpy2D DtoD source")
        c.st.check_range(dst, dspan, "memcpy2D DtoD destination")
        c.ctx.memcpy2d_dtod(dst, dpitch, src, spitch, width, height, stream)
        c.st.bytes_dtod += width * height


@fast_handler("MEMSET")
def memset(c: Call, ptr: int, value: int, size: int, stream: Any) -> FastOp | None:
    if not size:
        return None
    c.st.check_range(ptr, size, "memset")
    return FastOp("memset", (ptr, value & 0xFF, size, stream))


@handler("MEMSET2D")
def memset2d(c: Call, ptr: int, pitch: int, value: int, width: int, height: int, stream: Any) -> None:
    span = check_2d(pitch, width, height)
    if span:
        c.st.check_range(ptr, span, "memset2D")
        c.ctx.memset2d(ptr, pitch, value & 0xFF, width, height, stream)


@handler("MEMSET_ELEMS")
def memset_elems(c: Call, ptr: int, pitch: int, value: int, elem: int, width: int, height: int,
                 stream: Any) -> None:
    if elem not in (1, 2, 4):
        raise CudaError("cudaErrorInvalidValue", f"memset element of {elem} bytes")
    if value >> (8 * elem):
        raise CudaError("cudaErrorInvalidValue", f"memset value {value:#x} does not fit {elem} bytes")
    if height > 1 and pitch % elem:
        raise CudaError("cudaErrorInvalidValue", f"pitch {pitch} is not a multiple of the {elem}-byte element")
    span = check_2d(pitch, width * elem, height)
    if span:
        c.st.check_range(ptr, span, "memset")
        c.ctx.memset_elems(ptr, pitch, value, elem, width, height, stream)
