"""Whole-device ops: synchronize, reset (everything of the session's context goes, errors are cleared) and limits."""
from __future__ import annotations

import logging

from pyvgpu.protocol import LIMIT_NAMES
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, handler

log = logging.getLogger("pyvgpu.daemon")


@handler("DEVICE_SYNC")
def device_sync(c: Call) -> None:
    c.ctx.synchronize()


@handler("DEVICE_RESET")
def device_reset(c: Call) -> None:
    # cudaDeviceReset destroys every object of the context (every kind of kinds.py) and clears errors. Like the
    # runtime's, which makes the next primary context only when a call needs one, the reset succeeds once the old
    # context is gone: a backend that cannot make a new one now (a real driver refusing new contexts of a process
    # after a kernel fault) leaves none, and the next op opens one and answers what the backend says.
    st = c.st
    try:
        st.teardown()                           # the one teardown path, shared with the session's end
        if st.ctx is not None:
            st.ctx.reset()
    except CudaError as exc:
        if not exc.sticky:
            raise
        st.ctx = None
        log.warning("%s: device reset: no new context now (%s); the next op tries again", c.session.tag(st.ordinal),
                    exc)
    finally:
        st.clear_tables()                       # nothing of the tables refers to anything alive
    log.info("%s: device reset", c.session.tag(st.ordinal))


def _limit(limit: int) -> int:
    if limit not in LIMIT_NAMES:
        # not a cudaLimit at all: what NVIDIA's runtime answers (GPU run 3, an H100: cudaDeviceSetLimit(99, 1));
        # cudaErrorUnsupportedLimit is for a real limit the device lacks
        raise CudaError("cudaErrorInvalidValue", f"limit {limit} is not a cudaLimit")
    return limit


@handler("DEVICE_SET_LIMIT")
def device_set_limit(c: Call, limit: int, value: int) -> None:
    _limit(limit)
    if value < 0:
        raise CudaError("cudaErrorInvalidValue", f"{LIMIT_NAMES[limit]} = {value}")
    c.ctx.set_limit(limit, value)


@handler("DEVICE_GET_LIMIT")
def device_get_limit(c: Call, limit: int) -> int:
    return int(c.ctx.get_limit(_limit(limit)))
