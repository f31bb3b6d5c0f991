"""The ops the daemon answers itself, on its event loop: the spec's NO_DEVICE ops, one @control handler each (as
@handler is for device ops). A handler gets the server, the connection's Link and the request; it answers on the link
and returns None, or the reason to end the session (GOODBYE). STATUS, GOODBYE, PING, LINK_RATE and PEER_FETCH are
here, the LEASE_* ops in handlers/lease.py; `missing()` names a NO_DEVICE op of the spec without one."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from pyvgpu import wire
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME, OPS
from pyvgpu_daemon.errors import SessionEnd

if TYPE_CHECKING:
    from pyvgpu_daemon.link import Link
    from pyvgpu_daemon.server import Server

ERR_INVALID_VALUE = ERROR_CODES["cudaErrorInvalidValue"]
ControlHandler = Callable[["Server", "Link", wire.Request], "str | None"]
CONTROL: dict[int, ControlHandler] = {}      # op code -> its handler


def control(name: str) -> Callable[[ControlHandler], ControlHandler]:
    """Registers fn as the handler of NO_DEVICE op `name`."""
    spec = OP_BY_NAME[name]
    if spec.device:
        raise TypeError(f"{name} is a device op: it has a @handler, not a @control")

    def register(fn: ControlHandler) -> ControlHandler:
        if spec.code in CONTROL:
            raise TypeError(f"two control handlers for {name}")
        CONTROL[spec.code] = fn
        return fn
    return register


def missing() -> set[str]:
    """NO_DEVICE ops of the spec without a control handler."""
    return {op.name for op in OPS if not op.device and op.code not in CONTROL}


@control("HELLO")
def hello(server: Server, link: Link, req: wire.Request) -> str | None:
    raise SessionEnd("HELLO after the handshake")        # the handshake's own (handshake.py)


@control("STATUS")
def status(server: Server, link: Link, req: wire.Request) -> str | None:
    link.stream.writelines(wire.encode_reply(req.req_id, 0, server.status(link.session)))
    return None


@control("GOODBYE")
def goodbye(server: Server, link: Link, req: wire.Request) -> str | None:
    link.stream.writelines(wire.encode_reply(req.req_id, 0, None))
    return "client said goodbye"


@control("PING")
def ping(server: Server, link: Link, req: wire.Request) -> str | None:
    if req.req_id:
        link.stream.writelines(wire.encode_reply(req.req_id, 0, None))
    return None


@control("LINK_RATE")
def link_rate(server: Server, link: Link, req: wire.Request) -> str | None:
    rate = req.args[0]
    if not isinstance(rate, int) or isinstance(rate, bool) or rate < 0:
        raise SessionEnd(f"LINK_RATE of {rate!r:.40}")
    link.session.peer_rate = float(rate)
    return None


@control("PEER_FETCH")
def peer_fetch(server: Server, link: Link, req: wire.Request) -> str | None:
    data = server.hub.take(req.args[0])      # in memory already: answered on the loop
    link.stream.writelines(wire.encode_reply(req.req_id, 0 if data is not None else ERR_INVALID_VALUE, None, None,
                                             data or b""))
    return None
