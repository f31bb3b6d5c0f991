"""pyvgpu.wire: frame round trips and strict rejection of malformed input."""
from __future__ import annotations

import asyncio
import socket
import struct

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from pyvgpu import wire
from pyvgpu.protocol import HELLO_SERVER_MAGIC, MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES, OP_BY_NAME

msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


def frame_bytes(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


def feed(data: bytes):
    async def go():
        r = asyncio.StreamReader()
        r.feed_data(data)
        r.feed_eof()
        hdr = await wire.read_header(r)
        if hdr is None:
            return None, b""
        req = wire.parse_request(hdr)
        return req, await wire.read_payload(r, req.payload_len)
    return asyncio.run(go())


@given(op=st.integers(1, 100), req_id=st.integers(0, (1 << 64) - 1), args=st.lists(msgpack_values, max_size=6),
       payload=st.binary(max_size=300))
@settings(max_examples=150, deadline=None)
def test_request_round_trip(op, req_id, args, payload):
    req, data = feed(frame_bytes(wire.encode_request(op, req_id, args, payload)))
    assert (req.op, req.req_id, req.payload_len, req.args) == (op, req_id, len(payload), args)
    assert data == payload


@given(req_id=st.integers(0, 1 << 40), err=st.integers(0, 1000), result=msgpack_values,
       stdout=st.none() | st.binary(min_size=1, max_size=20), payload=st.binary(max_size=100))
@settings(max_examples=100, deadline=None)
def test_reply_round_trip_over_socket(req_id, err, result, stdout, payload):
    a, b = socket.socketpair()
    with a, b:
        wire.send_parts(a, wire.encode_reply(req_id, err, result, stdout, payload))
        rep, data, out = wire.recv_reply(b)
    assert (rep.req_id, rep.err, rep.result, out, data) == (req_id, err, result, stdout or b"", payload)
    assert rep.stdout_len == len(stdout or b"")


def test_payload_from_numpy_and_memoryview():
    import numpy as np
    arr = np.arange(10, dtype=np.float32)
    req, data = feed(frame_bytes(wire.encode_request(13, 5, [0, 1, 0], arr)))
    assert req.payload_len == 40 and data == arr.tobytes()
    req, data = feed(frame_bytes(wire.encode_request(13, 5, [0, 1, 0], memoryview(bytearray(b"xyz")))))
    assert data == b"xyz"


def test_server_hello_round_trip():
    hdr = wire.unpack_header(wire.encode_server_hello(1, b"n" * 32, True)[4:])
    assert wire.parse_server_hello(hdr) == (1, b"n" * 32, True)
    for bad in ([HELLO_SERVER_MAGIC, 1, b"n"], ["other", 1, b"n", False], [HELLO_SERVER_MAGIC, "1", b"", False]):
        with pytest.raises(wire.ProtocolError):
            wire.parse_server_hello(bad)


def raw(body: bytes, prefix_len: int | None = None) -> bytes:
    return struct.pack("<I", len(body) if prefix_len is None else prefix_len) + body


@pytest.mark.parametrize("data,why", [
    (raw(b"", 0), "zero header length"),
    (raw(b"x", MAX_HEADER_BYTES + 1), "header too large"),
    (raw(msgpack.packb({"a": 1})), "header is a map"),
    (raw(msgpack.packb(5)), "header is an int"),
    (raw(b"\xc1"), "never-used msgpack byte"),
    (raw(msgpack.packb([1, 2, 3]) + b"\x00"), "trailing bytes"),
    (raw(msgpack.packb([1, 2])), "too few fields"),
    (raw(msgpack.packb([-1, 1, 0])), "negative op"),
    (raw(msgpack.packb(["MALLOC", 1, 0])), "op is text"),
    (raw(msgpack.packb([11, 1, -5])), "negative payload"),
    (raw(msgpack.packb([11, 1, MAX_PAYLOAD_BYTES + 1])), "payload too large"),
    (raw(msgpack.packb([11, 1.5, 0])), "float req_id"),
    (raw(msgpack.packb([11, True, 0])), "bool req_id"),
    (b"\x10\x00", "truncated prefix"),
    (raw(msgpack.packb([11, 1, 0]))[:-1], "truncated header"),
    (raw(msgpack.packb([13, 1, 100, 0, 0, 0])) + b"short", "truncated payload"),
    (raw(b"\x91" * 2000 + b"\x00"), "deep nesting"),
])
def test_malformed_rejected(data, why):
    with pytest.raises(wire.ProtocolError):
        feed(data)


def test_clean_eof_is_none():
    assert feed(b"") == (None, b"")


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_random_bytes_only_raise_protocol_error(data):
    try:
        feed(data)
    except wire.ProtocolError:
        pass


def test_reply_validation():
    with pytest.raises(wire.ProtocolError):
        wire.parse_reply([1, 0, 0, None])
    with pytest.raises(wire.ProtocolError):
        wire.parse_reply([1, "x", 0, None, None])
    with pytest.raises(wire.ProtocolError):
        wire.pack_header([b"x" * (MAX_HEADER_BYTES + 10)])
    assert OP_BY_NAME["MALLOC"].code == 11
