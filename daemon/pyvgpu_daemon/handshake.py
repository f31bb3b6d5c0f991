"""The handshake of a new connection: the daemon's greeting (nonce, whether a token proof is required), the client's
HELLO checked (version, token proof, the daemon's session bound, its address window, its sharing and lease fields,
the codecs both sides offer) and answered with the devices' snapshots. A refusal is answered with its reason and
raises SessionEnd; the caller bounds the whole exchange by handshake_timeout_s."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NoReturn

from pyvgpu import auth, wire
from pyvgpu.protocol import (COMPRESS_CODECS, ERR_AUTH, ERR_PROTOCOL_MISMATCH, ERR_UNAVAILABLE, ERROR_CODES,
                             HELLO_COMPRESS, HELLO_CONTROL, HELLO_LEASES, HELLO_REPLY_BACKEND, HELLO_REPLY_DEVICES,
                             HELLO_REPLY_SESSION, OP_BY_NAME, PROTOCOL_VERSION, VA_WINDOW_BYTES)
from pyvgpu_daemon import compress
from pyvgpu_daemon.errors import SessionEnd
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.stream import FrameStream

if TYPE_CHECKING:
    from pyvgpu_daemon.server import Server

OP_HELLO = OP_BY_NAME["HELLO"].code
ERR_INVALID_VALUE = ERROR_CODES["cudaErrorInvalidValue"]


async def handshake(server: Server, session: Session, stream: FrameStream) -> None:
    """Greet, read and check the client's HELLO, fill the session from it and answer."""
    config = server.config
    nonce = auth.make_nonce()
    auth_required = config.token is not None
    stream.writelines([wire.encode_server_hello(PROTOCOL_VERSION, nonce, auth_required)])
    got = await stream.read_header(None, server.bounds.handshake_timeout_s)
    if got is None:
        raise SessionEnd("closed before the hello")
    req = wire.parse_request(got[0], max_payload=0)
    if req.op != OP_HELLO or len(req.args) != 1 or req.req_id == 0:
        raise SessionEnd(f"first request is not a well-formed HELLO (op {req.op})")
    try:
        hello = wire.parse_hello(req.args[0])
    except wire.ProtocolError as exc:
        await refuse(stream, req.req_id, ERR_INVALID_VALUE, f"malformed hello: {exc}")
    session.client = hello.client
    if hello.version != PROTOCOL_VERSION:
        await refuse(stream, req.req_id, ERR_PROTOCOL_MISMATCH, f"protocol version mismatch: client speaks "
                     f"{hello.version!r:.20}, daemon speaks {PROTOCOL_VERSION}")
    if auth_required:
        assert config.token is not None
        if not auth.verify(config.token, nonce, hello.proof):
            await refuse(stream, req.req_id, ERR_AUTH, "authentication failed: missing or wrong token proof")
    max_sessions = server.bounds.max_sessions
    control = sum(1 for s in server.sessions.values() if s.control_only)
    if len(server.sessions) - control >= max_sessions:
        # a status or lease query still gets in while the sessions are all open: one of a few slots of its own
        if hello.fields.get(HELLO_CONTROL) is not True or control >= server.bounds.control_slots:
            await refuse(stream, req.req_id, ERR_UNAVAILABLE, f"daemon busy: {len(server.sessions) - control} "
                         f"sessions open (--max-sessions {max_sessions})")
        session.control_only = True
    va_base = VA_WINDOW_BYTES if hello.va_base is None else hello.va_base
    if va_base <= 0 or va_base % 4096 or va_base + server.ndevices * VA_WINDOW_BYTES > (1 << 64):
        await refuse(stream, req.req_id, ERR_INVALID_VALUE, f"bad va_base {va_base!r}")
    session.va_base = va_base
    assert server.sharing is not None and server.leases is not None
    msg = server.sharing.apply_hello(session, hello.fields) or \
        server.leases.bind_hello(session, hello.fields.get(HELLO_LEASES))
    if msg is not None:
        await refuse(stream, req.req_id, ERR_INVALID_VALUE, msg)
    result = {HELLO_REPLY_DEVICES: server.devices, HELLO_REPLY_BACKEND: server.backend.name,
              HELLO_REPLY_SESSION: session.id}
    codecs = compress.accept(hello.fields.get(HELLO_COMPRESS), config.compress != "off")
    if codecs:
        session.codecs = tuple(COMPRESS_CODECS[n] for n in codecs)
        session.compress_always = config.compress == "always"
        result[HELLO_COMPRESS] = codecs
    stream.writelines(wire.encode_reply(req.req_id, 0, result))


async def refuse(stream: FrameStream, req_id: int, err: int, msg: str) -> NoReturn:
    """Answer the HELLO with err and the reason, let it go out (5 s at most), and end the session (SessionEnd)."""
    stream.writelines(wire.encode_reply(req_id, err, msg))
    try:
        await asyncio.wait_for(stream.drain(), 5)
    except (TimeoutError, OSError):
        pass
    raise SessionEnd(msg)
