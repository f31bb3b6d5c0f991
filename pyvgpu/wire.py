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
from typing import Any, NamedTuple

import msgpack

from pyvgpu.protocol import (COMPRESS_BLOCK, COMPRESS_CODECS, FRAME_PREFIX_BYTES, HELLO_CLIENT, HELLO_CLIENT_MAX,
                             HELLO_PROOF, HELLO_SERVER_MAGIC,
                             HELLO_VA_BASE, HELLO_VERSION, MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES,
                             MAX_REPLY_HEADER_BYTES, MAX_STDOUT_BYTES)

_PREFIX = struct.Struct("<I")
_packb = msgpack.packb
U64_MAX = (1 << 64) - 1


class ProtocolError(Exception):
    """A frame that does not follow the protocol. The peer's session ends; the process carries on."""


class Request(NamedTuple):
    """A parsed request header (a NamedTuple: the daemon makes one per frame, a frozen dataclass costs ~1 µs)."""
    op: int
    req_id: int
    payload_len: int             # bytes on the wire
    args: list[Any]
    raw_len: int = 0             # a compressed payload's size once decoded (codec != 0)
    codec: int = 0               # protocol.COMPRESS_CODECS value, 0: not compressed

    @property
    def size(self) -> int:
        """The payload's size as the op sees it."""
        return self.raw_len if self.codec else self.payload_len


@dataclass(frozen=True)
class Reply:
    req_id: int
    err: int
    payload_len: int
    result: Any
    stdout_len: int
    event_times: list[Any] | None = None      # protocol v3: [handle, records, ms, ...] (protocol docstring)
    raw_len: int = 0                          # a compressed payload's decoded size (codec != 0)
    codec: int = 0

    @property
    def is_notice(self) -> bool:
        """req_id 0: a heartbeat (err 0) or the daemon ending the session (err != 0, result = reason)."""
        return self.req_id == 0


@dataclass(frozen=True)
class Hello:
    """The client's HELLO map, type-checked before any field is used (protocol.HELLO_* keys)."""
    version: Any                  # compared with PROTOCOL_VERSION only; any type is a mismatch, never an error
    proof: str | None             # 64 lowercase hex digits or None
    client: str
    va_base: int | None
    fields: dict[Any, Any]        # the whole map: other keys (sharing.py's) are type-checked by their reader


# ---------------------------------------------------------------------------------------------- encoding
def pack_header(header: list[Any], limit: int = MAX_HEADER_BYTES) -> bytes:
    body = msgpack.packb(header, use_bin_type=True)
    if len(body) > limit:
        raise ProtocolError(f"header of {len(body)} bytes exceeds the {limit}-byte limit")
    return _PREFIX.pack(len(body)) + body


def _bulk(data: bytes | bytearray | memoryview) -> bytes | memoryview:
    return data if isinstance(data, bytes) else memoryview(data).cast("B")


def encode_frame(header: list[Any], payload: bytes | bytearray | memoryview = b"",
                 limit: int = MAX_HEADER_BYTES) -> list[bytes | memoryview]:
    """The byte strings to write, in order. The payload is passed through untouched (no copy)."""
    parts: list[bytes | memoryview] = [pack_header(header, limit)]
    if payload_nbytes(payload):
        parts.append(_bulk(payload))
    return parts


def payload_nbytes(payload: Any) -> int:
    return len(payload) if isinstance(payload, bytes) else memoryview(payload).nbytes


def encode_request(op: int, req_id: int, args: list[Any] | tuple[Any, ...] = (),
                   payload: bytes | bytearray | memoryview = b"") -> list[bytes | memoryview]:
    return encode_frame([op, req_id, payload_nbytes(payload), *args], payload)


def encode_reply(req_id: int, err: int, result: Any = None, stdout: bytes | None = None,
                 payload: bytes | bytearray | memoryview = b"",
                 event_times: list[Any] | None = None, raw_len: int = 0, codec: int = 0) -> list[bytes | memoryview]:
    """Header, payload, then printf output (outside the header: it may be as large as the printf FIFO).
    event_times, when any, is the header's sixth field. ProtocolError when the result does not fit
    MAX_REPLY_HEADER_BYTES or stdout exceeds MAX_STDOUT_BYTES."""
    if not stdout and not payload and not event_times:
        # the common small reply (a query's answer): one header, no payload (payload_nbytes of b"" is 0)
        body = _packb([req_id, err, 0, result, 0], use_bin_type=True)
        if len(body) > MAX_REPLY_HEADER_BYTES:
            raise ProtocolError(f"header of {len(body)} bytes exceeds the {MAX_REPLY_HEADER_BYTES}-byte limit")
        return [_PREFIX.pack(len(body)) + body]
    out_len = len(stdout) if stdout else 0
    if out_len > MAX_STDOUT_BYTES:
        raise ProtocolError(f"{out_len} bytes of printf output exceed the {MAX_STDOUT_BYTES}-byte reply limit")
    wire_len = payload_nbytes(payload)
    header = [req_id, err, [wire_len, raw_len, codec] if codec else wire_len, result, out_len]
    if event_times:
        header.append(event_times)
    parts = encode_frame(header, payload, MAX_REPLY_HEADER_BYTES)
    if out_len:
        parts.append(_bulk(stdout))  # type: ignore[arg-type]
    return parts


def encode_notice(err: int, reason: str = "", info: dict[str, Any] | None = None) -> list[bytes | memoryview]:
    """A frame that answers no request: a heartbeat (err 0; info, when given, is its result: e.g. the daemon's
    receive rate) or the end of the session (err != 0, why)."""
    return encode_reply(0, err, reason[:200] if err else info)


def encode_server_hello(version: int, nonce: bytes, auth_required: bool) -> bytes:
    return pack_header([HELLO_SERVER_MAGIC, version, nonce, bool(auth_required)])


# ---------------------------------------------------------------------------------------------- decoding
def header_length(prefix: bytes, limit: int = MAX_HEADER_BYTES) -> int:
    if len(prefix) != FRAME_PREFIX_BYTES:
        raise ProtocolError(f"truncated frame prefix ({len(prefix)} bytes)")
    (n,) = _PREFIX.unpack(prefix)
    if n == 0 or n > limit:
        raise ProtocolError(f"header length {n} outside 1..{limit}")
    return n


def unpack_header(body: bytes | bytearray) -> list[Any]:
    """msgpack → list, rejecting trailing bytes, non-array headers and absurd container sizes."""
    n = len(body)
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True,
                              max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n, max_ext_len=n)
    except Exception as exc:  # msgpack raises a zoo of types (ExtraData, FormatError, ValueError, RecursionError…)
        raise ProtocolError(f"undecodable header: {type(exc).__name__}: {exc}"[:200]) from None
    if not isinstance(obj, list):
        raise ProtocolError(f"header is a {type(obj).__name__}, not an array")
    return obj


def _is_uint(x: Any, limit: int = U64_MAX) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= limit


def payload_field(v: Any, max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[int, int, int]:
    """A header's payload length: an integer, or [wire_len, raw_len, codec] for a compressed payload (protocol
    docstring) → (wire_len, raw_len, codec). The wire size of a compressed payload is at most its raw size plus
    the block headers: compression never expands it past storing the blocks as they are."""
    if _is_uint(v, max_payload):
        return v, v, 0
    if not (isinstance(v, list) and len(v) == 3 and _is_uint(v[0]) and _is_uint(v[1], max_payload)
            and v[2] in COMPRESS_CODECS.values()):
        raise ProtocolError(f"payload length {v!r:.60} is neither 0..{max_payload} nor [wire, raw, codec]")
    wire_len, raw_len, codec = v
    if raw_len == 0 or wire_len > raw_len + 8 * -(-raw_len // COMPRESS_BLOCK):
        raise ProtocolError(f"compressed payload of {wire_len} bytes for {raw_len}")
    return wire_len, raw_len, codec


def parse_request(header: list[Any], max_payload: int = MAX_PAYLOAD_BYTES) -> Request:
    if len(header) < 3:
        raise ProtocolError(f"request header has {len(header)} fields, needs at least 3")
    op, req_id, payload_len = header[0], header[1], header[2]
    # the common case in one expression (type(): bool is not an int here), the messages below otherwise
    if type(op) is int and type(req_id) is int and type(payload_len) is int and 0 <= op <= 0xFFFF and \
            0 <= req_id <= U64_MAX and 0 <= payload_len <= max_payload:
        return Request(op, req_id, payload_len, header[3:])
    if not _is_uint(op, 0xFFFF):
        raise ProtocolError(f"op {op!r:.40} is not a small unsigned integer")
    if not _is_uint(req_id):
        raise ProtocolError(f"req_id {req_id!r:.40} is not a u64")
    wire_len, raw_len, codec = payload_field(header[2], max_payload)
    return Request(op, req_id, wire_len, header[3:], raw_len, codec)


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
    if len(header) not in (5, 6):
        raise ProtocolError(f"reply header has {len(header)} fields, needs 5 or 6")
    req_id, err, plen, result, stdout_len = header[:5]
    times = header[5] if len(header) == 6 else None
    if times is not None and not (isinstance(times, list) and len(times) % 3 == 0):
        raise ProtocolError(f"reply event times {str(times)[:40]} are not [handle, records, ms] triples")
    if not _is_uint(req_id) or not isinstance(err, int) or isinstance(err, bool):
        raise ProtocolError(f"bad reply req_id/err {req_id!r:.40}/{err!r:.40}")
    payload_len, raw_len, codec = payload_field(plen)
    if not _is_uint(stdout_len, MAX_STDOUT_BYTES):
        raise ProtocolError(f"reply printf length {stdout_len!r:.40} outside 0..{MAX_STDOUT_BYTES}")
    return Reply(req_id, err, payload_len, result, stdout_len, times, raw_len if codec else 0, codec)


_HEX = frozenset("0123456789abcdef")


def parse_hello(fields: Any) -> Hello:
    """The HELLO map, every field type-checked (a hostile client must not reach auth with a non-str proof)."""
    if not isinstance(fields, dict):
        raise ProtocolError(f"hello is a {type(fields).__name__}, not a map")
    proof = fields.get(HELLO_PROOF)
    if proof is not None and not (isinstance(proof, str) and len(proof) == 64 and set(proof) <= _HEX):
        raise ProtocolError("hello proof is not 64 lowercase hex digits")
    client = fields.get(HELLO_CLIENT, "")
    client = client if isinstance(client, str) else repr(client)
    va_base = fields.get(HELLO_VA_BASE)
    if va_base is not None and (isinstance(va_base, bool) or not isinstance(va_base, int)):
        raise ProtocolError(f"hello va_base {va_base!r:.40} is not an integer")
    return Hello(fields.get(HELLO_VERSION), proof, client[:HELLO_CLIENT_MAX], va_base, fields)


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
    """Blocking read of one request frame (header's third field is the payload length).
    The payload is the bytearray it was received into (no second copy of bulk data)."""
    n = header_length(bytes(_recv_exact(sock, FRAME_PREFIX_BYTES)))
    header = unpack_header(bytes(_recv_exact(sock, n)))
    plen = header[2] if len(header) >= 3 else 0
    if not _is_uint(plen, max_payload):
        raise ProtocolError(f"payload length {plen!r:.40} out of range")
    payload = _recv_exact(sock, plen) if plen else b""
    return header, payload


def recv_reply(sock: socket.socket) -> tuple[Reply, bytes | bytearray, bytes]:
    """Blocking read of one reply frame → (reply, payload, printf output)."""
    n = header_length(bytes(_recv_exact(sock, FRAME_PREFIX_BYTES)), MAX_REPLY_HEADER_BYTES)
    rep = parse_reply(unpack_header(bytes(_recv_exact(sock, n))))
    payload = _recv_exact(sock, rep.payload_len) if rep.payload_len else b""
    stdout = bytes(_recv_exact(sock, rep.stdout_len)) if rep.stdout_len else b""
    return rep, payload, stdout


def recv_header(sock: socket.socket) -> list[Any]:
    """Blocking read of a payload-less frame (the daemon greeting)."""
    n = header_length(bytes(_recv_exact(sock, FRAME_PREFIX_BYTES)))
    return unpack_header(bytes(_recv_exact(sock, n)))


def send_parts(sock: socket.socket, parts: list[bytes | memoryview]) -> None:
    for p in parts:
        sock.sendall(p)
