"""Python framing of the pyvgpu protocol (see the docstring of pyvgpu/protocol.py, which is normative).

A frame is `u32 LE header length | msgpack header | raw payload`. The payload never goes through msgpack: encoders
return the pieces to write (so a 64 MiB copy is not re-copied into one buffer), decoders read the header first,
validate it, and only then read the payload it announces, so a hostile length is refused before any allocation.

Used by the daemon (asyncio `read_frame`) and by the blocking Python client (`recv_frame`).
"""
from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from pyvgpu.protocol import FRAME_PREFIX_BYTES, HELLO_SERVER_MAGIC, MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES

_PREFIX = struct.Struct("<I")
U64_MAX = (1 << 64) - 1


class ProtocolError(Exception):
    """A frame that does not follow the protocol. The peer's session ends; the process carries on."""


@dataclass(frozen=True)
class Request:
    op: int
    req_id: int
    payload_len: int
    args: list[Any]


@dataclass(frozen=True)
class Reply:
    req_id: int
    err: int
    payload_len: int
    result: Any
    stdout: bytes | None


# ---------------------------------------------------------------------------------------------- encoding
def pack_header(header: list[Any]) -> bytes:
    body = msgpack.packb(header, use_bin_type=True)
    if len(body) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(body)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    return _PREFIX.pack(len(body)) + body


def encode_frame(header: list[Any], payload: bytes | bytearray | memoryview = b"") -> list[bytes | memoryview]:
    """The byte strings to write, in order. The payload is passed through untouched (no copy)."""
    parts: list[bytes | memoryview] = [pack_header(header)]
    if payload_nbytes(payload):
        parts.append(payload if isinstance(payload, bytes) else memoryview(payload).cast("B"))
    return parts


def payload_nbytes(payload: Any) -> int:
    return len(payload) if isinstance(payload, bytes) else memoryview(payload).nbytes


def encode_request(op: int, req_id: int, args: list[Any] | tuple[Any, ...] = (),
                   payload: bytes | bytearray | memoryview = b"") -> list[bytes | memoryview]:
    return encode_frame([op, req_id, payload_nbytes(payload), *args], payload)


def encode_reply(req_id: int, err: int, result: Any = None, stdout: bytes | None = None,
                 payload: bytes | bytearray | memoryview = b"") -> list[bytes | memoryview]:
    return encode_frame([req_id, err, payload_nbytes(payload), result, stdout or None], payload)


def encode_server_hello(version: int, nonce: bytes, auth_required: bool) -> bytes:
    return pack_header([HELLO_SERVER_MAGIC, version, nonce, bool(auth_required)])


# ---------------------------------------------------------------------------------------------- decoding
def header_length(prefix: bytes) -> int:
    if len(prefix) != FRAME_PREFIX_BYTES:
        raise ProtocolError(f"truncated frame prefix ({len(prefix)} bytes)")
    (n,) = _PREFIX.unpack(prefix)
    if n == 0 or n > MAX_HEADER_BYTES:
        raise ProtocolError(f"header length {n} outside 1..{MAX_HEADER_BYTES}")
    return n


def unpack_header(body: bytes) -> list[Any]:
    """msgpack → list, rejecting trailing bytes, non-array headers and absurd container sizes."""
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True,
                              max_str_len=MAX_HEADER_BYTES, max_bin_len=MAX_HEADER_BYTES,
                              max_array_len=MAX_HEADER_BYTES, max_map_len=MAX_HEADER_BYTES,
                              max_ext_len=MAX_HEADER_BYTES)
    except Exception as exc:  # msgpack raises a zoo of types (ExtraData, FormatError, ValueError, RecursionError…)
        raise ProtocolError(f"undecodable header: {type(exc).__name__}: {exc}"[:200]) from None
    if not isinstance(obj, list):
        raise ProtocolError(f"header is a {type(obj).__name__}, not an array")
    return obj


def _is_uint(x: Any, limit: int = U64_MAX) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= limit


def parse_request(header: list[Any], max_payload: int = MAX_PAYLOAD_BYTES) -> Request:
    if len(header) < 3:
        raise ProtocolError(f"request header has {len(header)} fields, needs at least 3")
    op, req_id, payload_len = header[0], header[1], header[2]
    if not _is_uint(op, 0xFFFF):
        raise ProtocolError(f"op {op!r} is not a small unsigned integer")
    if not _is_uint(req_id):
        raise ProtocolError(f"req_id {req_id!r} is not a u64")
    if not _is_uint(payload_len, max_payload):
        raise ProtocolError(f"payload length {payload_len!r} outside 0..{max_payload}")
    return Request(op, req_id, payload_len, header[3:])


def split_frames(buf: bytes | bytearray | memoryview, max_frames: int) -> list[tuple[list[Any], memoryview]]:
    """Frames laid end to end in buf (a graph upload) → [(header, payload view)]; any malformation or more than
    max_frames frames → ProtocolError. Each header's third field is its payload length, as in requests."""
    mv = memoryview(buf).cast("B")
    out: list[tuple[list[Any], memoryview]] = []
    pos = 0
    while pos < len(mv):
        if len(out) >= max_frames:
            raise ProtocolError(f"more than {max_frames} frames")
        n = header_length(bytes(mv[pos:pos + FRAME_PREFIX_BYTES]))
        if pos + FRAME_PREFIX_BYTES + n > len(mv):
            raise ProtocolError("frame header runs past the end of the buffer")
        header = unpack_header(bytes(mv[pos + FRAME_PREFIX_BYTES:pos + FRAME_PREFIX_BYTES + n]))
        pos += FRAME_PREFIX_BYTES + n
        plen = header[2] if len(header) >= 3 else None
        if not _is_uint(plen, len(mv) - pos):
            raise ProtocolError(f"frame payload length {plen!r} runs past the end of the buffer")
        out.append((header, mv[pos:pos + plen]))
        pos += plen
    return out


def parse_reply(header: list[Any]) -> Reply:
    if len(header) != 5:
        raise ProtocolError(f"reply header has {len(header)} fields, needs 5")
    req_id, err, payload_len, result, stdout = header
    if not _is_uint(req_id) or not isinstance(err, int) or isinstance(err, bool):
        raise ProtocolError(f"bad reply req_id/err {req_id!r}/{err!r}")
    if not _is_uint(payload_len, MAX_PAYLOAD_BYTES):
        raise ProtocolError(f"reply payload length {payload_len!r} out of range")
    if stdout is not None and not isinstance(stdout, (bytes, str)):
        raise ProtocolError("reply stdout is neither bytes nor nil")
    if isinstance(stdout, str):
        stdout = stdout.encode()
    return Reply(req_id, err, payload_len, result, stdout)


def parse_server_hello(header: list[Any]) -> tuple[int, bytes, bool]:
    """→ (version, nonce, auth_required). Any shape other than the documented one is a ProtocolError."""
    if len(header) != 4 or header[0] != HELLO_SERVER_MAGIC:
        raise ProtocolError(f"not a pyvgpu daemon (greeting {str(header)[:80]})")
    _, version, nonce, auth = header
    if not isinstance(version, int) or not isinstance(nonce, bytes) or not isinstance(auth, bool):
        raise ProtocolError("malformed daemon greeting")
    return version, nonce, auth


# ---------------------------------------------------------------------------------------------- asyncio reading
async def read_header(reader: asyncio.StreamReader) -> list[Any] | None:
    """Next frame's header, or None on a clean EOF before a frame starts. Truncation → ProtocolError."""
    try:
        prefix = await reader.readexactly(FRAME_PREFIX_BYTES)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProtocolError("connection closed inside a frame prefix") from None
    n = header_length(prefix)
    try:
        body = await reader.readexactly(n)
    except asyncio.IncompleteReadError:
        raise ProtocolError(f"connection closed inside a {n}-byte header") from None
    return unpack_header(body)


async def read_payload(reader: asyncio.StreamReader, n: int) -> bytes:
    if n == 0:
        return b""
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"connection closed after {len(exc.partial)} of {n} payload bytes") from None


# ---------------------------------------------------------------------------------------------- blocking I/O
def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"connection closed by peer ({got} of {n} bytes read)")
        got += k
    return buf


def recv_frame(sock: socket.socket, max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[list[Any], bytes | bytearray]:
    """Blocking read of one frame whose header's third field is the payload length (requests and replies).
    The payload is the bytearray it was received into (no second copy of bulk data)."""
    n = header_length(bytes(_recv_exact(sock, FRAME_PREFIX_BYTES)))
    header = unpack_header(bytes(_recv_exact(sock, n)))
    plen = header[2] if len(header) >= 3 else 0
    if not _is_uint(plen, max_payload):
        raise ProtocolError(f"payload length {plen!r} out of range")
    payload = _recv_exact(sock, plen) if plen else b""
    return header, payload


def recv_header(sock: socket.socket) -> list[Any]:
    """Blocking read of a payload-less frame (the daemon greeting)."""
    n = header_length(bytes(_recv_exact(sock, FRAME_PREFIX_BYTES)))
    return unpack_header(bytes(_recv_exact(sock, n)))


def send_parts(sock: socket.socket, parts: list[bytes | memoryview]) -> None:
    for p in parts:
        sock.sendall(p)
