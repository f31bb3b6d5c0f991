"""Peer ops: access between devices of this daemon (PEER_ENABLE/DISABLE), copies between them (MEMCPY_PEER), and
the two halves of a copy between daemons (PEER_EXPORT here on the source, PEER_PULL on the destination; peer.py)."""
from __future__ import annotations

from typing import Any

from pyvgpu.protocol import PEER_TICKET
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import Call, handler
from pyvgpu_daemon.session import DeviceState


def _peer(c: Call, peer: int) -> DeviceState:
    """The session's state of device `peer` of this daemon, whose context must be open (the client used it)."""
    st = c.session.devices.get(peer)
    if peer == c.st.ordinal or st is None or st.ctx is None:
        raise CudaError("cudaErrorInvalidDevice", f"device {peer} is not an open peer of device {c.st.ordinal}")
    return st


@handler("PEER_ENABLE")
def peer_enable(c: Call, peer: int) -> None:
    c.ctx.enable_peer(_peer(c, peer).ctx)


@handler("PEER_DISABLE")
def peer_disable(c: Call, peer: int) -> None:
    c.ctx.disable_peer(_peer(c, peer).ctx)


@handler("MEMCPY_PEER")
def memcpy_peer(c: Call, dst: int, src_dev: int, src: int, size: int, stream: Any) -> None:
    if not size:
        return
    src_st = _peer(c, src_dev)
    src_st.check_range(src, size, "peer copy source")
    c.st.check_range(dst, size, "peer copy destination")
    c.ctx.copy_from_peer(dst, src_st.ctx, src, size, stream)


@handler("PEER_EXPORT")
def peer_export(c: Call, src: int, size: int) -> dict[str, bytes]:
    if not size:
        raise CudaError("cudaErrorInvalidValue", "peer export of 0 bytes")
    c.st.check_range(src, size, "peer export")
    data = c.ctx.memcpy_dtoh(src, size, None)
    return {PEER_TICKET: c.session.hub.export(c.session.id, data)}


@handler("PEER_PULL")
def peer_pull(c: Call, dst: int, size: int, host: str, port: int, ticket: bytes) -> None:
    c.st.check_range(dst, size, "peer copy destination")
    if not 0 < port < 65536 or not host:
        raise CudaError("cudaErrorInvalidValue", f"peer daemon address {host!r}:{port}")
    data = c.session.hub.fetch(host, port, ticket, size, c.session.tag(c.st.ordinal))
    c.ctx.memcpy_htod(dst, data, None)
