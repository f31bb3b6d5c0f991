"""Compressed bulk payloads (issue 10, P5; protocol docstring "Compressed payloads"): negotiated in the hello, decoded
byte for byte, replies compressed by the client's reported link rate, and bounded: a malformed or hostile compressed
payload (a decompression bomb) ends its own session, never the daemon, and costs no more memory than its raw size."""
from __future__ import annotations

import socket

import numpy as np
import pytest

from harness import frame, raw_session, rss
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import COMPRESS_BLOCK, COMPRESS_CODECS, ERR_UNAVAILABLE, HELLO_COMPRESS, OP_BY_NAME, \
    PROTOCOL_VERSION

compress = pytest.importorskip("pyvgpu_daemon.compress")
zstandard = pytest.importorskip("zstandard")
lz4_block = pytest.importorskip("lz4.block")

OP = {name: OP_BY_NAME[name].code for name in ("MALLOC", "MEMCPY_HTOD", "MEMCPY_DTOH", "LINK_RATE", "MEM_GET_INFO")}
LZ4, ZSTD = COMPRESS_CODECS["lz4"], COMPRESS_CODECS["zstd"]


def session(port: int, codecs: list[str] | None = None) -> tuple[socket.socket, list[str]]:
    """A raw session whose hello offers `codecs` → (socket, the codecs the daemon accepted)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    wire.parse_server_hello(wire.recv_header(s))
    hello = {"version": PROTOCOL_VERSION, "client": "compress-test"}
    if codecs is not None:
        hello[HELLO_COMPRESS] = codecs
    wire.send_parts(s, wire.encode_request(OP_BY_NAME["HELLO"].code, 1, [hello]))
    rep, _, _ = wire.recv_reply(s)
    assert rep.err == 0, rep
    return s, list(rep.result.get(HELLO_COMPRESS, []))


def reply(s: socket.socket) -> tuple[wire.Reply, bytes]:
    """The next reply that answers a request (heartbeats and rate notices skipped)."""
    while True:
        rep, payload, _ = wire.recv_reply(s)
        if rep.req_id:
            return rep, payload


def call(s: socket.socket, req_id: int, op: str, *args, payload: bytes = b"") -> tuple[wire.Reply, bytes]:
    wire.send_parts(s, wire.encode_request(OP[op], req_id, list(args), payload))
    return reply(s)


def compressed_frame(op: str, req_id: int, args: list, blocks: bytes, raw_len: int, codec: int) -> bytes:
    return frame([OP[op], req_id, [len(blocks), raw_len, codec], *args], blocks)


def ended(s: socket.socket) -> str:
    """The session-end notice's reason (the daemon closes the connection after it)."""
    s.settimeout(20)
    while True:
        rep, _, _ = wire.recv_reply(s)
        if rep.req_id == 0 and rep.err == ERR_UNAVAILABLE:
            return str(rep.result)


def training_like(n: int, seed: int = 1) -> bytes:
    """float32 values as a training batch holds them: mostly small, many exact zeros (ReLU), some noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.1, n // 4).astype(np.float32)
    x[rng.random(n // 4) < 0.5] = 0
    return x.tobytes()


def test_codecs_are_negotiated_in_the_hello(daemon_factory):
    d = daemon_factory()
    s, got = session(d.port, ["zstd", "lz4", "brotli", 7])
    assert sorted(got) == ["lz4", "zstd"]       # unknown names and non-strings are ignored
    s.close()
    s, got = session(d.port)                    # a client that offers none gets none
    assert got == []
    s.close()
    off = daemon_factory("--compress", "off")
    s, got = session(off.port, ["lz4", "zstd"])
    assert got == []
    s.close()


@pytest.mark.parametrize("codec", [LZ4, ZSTD])
def test_compressed_upload_and_compressed_reply_are_byte_exact(daemon, codec):
    s, _ = session(daemon.port, ["lz4", "zstd"])
    rng = np.random.default_rng(codec)
    # zeros, incompressible noise (stored blocks) and training-like floats; not a multiple of the block size
    data = bytes(COMPRESS_BLOCK) + rng.bytes(COMPRESS_BLOCK) + training_like(COMPRESS_BLOCK + 4 * 1234)
    n = len(data)
    rep, _ = call(s, 1, "MALLOC", 0, n)
    ptr = rep.result
    blocks = compress.encode(memoryview(data), codec)
    assert len(blocks) < n * 0.8
    s.sendall(compressed_frame("MEMCPY_HTOD", 2, [0, ptr, 0], blocks, n, codec))
    rep, _ = reply(s)
    assert rep.err == 0
    # uncompressed reply while the client reported no link rate
    rep, got = call(s, 3, "MEMCPY_DTOH", 0, ptr, n, 0)
    assert rep.err == 0 and rep.codec == 0 and got == data
    # a slow link (1 MB/s): the reply travels compressed, decodes to the same bytes
    wire.send_parts(s, wire.encode_request(OP["LINK_RATE"], 0, [1_000_000]))
    rep, got = call(s, 4, "MEMCPY_DTOH", 0, ptr, n, 0)
    assert rep.err == 0 and rep.codec in (LZ4, ZSTD) and rep.raw_len == n and len(got) < n * 0.8
    assert bytes(compress.Compressed(rep.codec, n, got).decode()) == data
    # noise does not pay: sent as it is even on the slow link
    rep, got = call(s, 5, "MEMCPY_DTOH", 0, ptr + COMPRESS_BLOCK, COMPRESS_BLOCK, 0)
    assert rep.err == 0 and rep.codec == 0 and got == data[COMPRESS_BLOCK:2 * COMPRESS_BLOCK]
    s.close()


def test_compressed_payload_not_negotiated_ends_the_session(daemon):
    s, _ = session(daemon.port)                 # offered nothing
    data = bytes(256 << 10)
    rep, _ = call(s, 1, "MALLOC", 0, len(data))
    blocks = compress.encode(memoryview(data), LZ4)
    s.sendall(compressed_frame("MEMCPY_HTOD", 0, [0, rep.result, 0], blocks, len(data), LZ4))
    assert "not negotiated" in ended(s)
    s.close()
    with Client.connect("127.0.0.1", daemon.port) as c:       # the daemon carries on
        assert c.call("MEM_GET_INFO", 0)[0] == 0


def zstd_bomb(claim_size: bool, total: int) -> bytes:
    """A zstd frame of `total` zero bytes (a few KiB compressed), with or without its size in the frame header."""
    c = zstandard.ZstdCompressor(level=1, write_content_size=claim_size)
    if claim_size:
        return c.compress(bytes(total))
    obj = c.compressobj()
    chunk = bytes(16 << 20)
    parts = [obj.compress(chunk) for _ in range(total // len(chunk))]
    return b"".join(parts) + obj.flush()


@pytest.mark.parametrize("kind", ["zstd-stated", "zstd-unstated", "lz4-overlong", "garbage"])
def test_decompression_bomb_ends_only_its_session(daemon, kind):
    """Each block claims 1 MiB raw but decodes to far more (or to nothing): its session ends with a reason, the daemon
    neither decodes past the stated size nor grows by the bomb's size, and serves the next session."""
    s, _ = session(daemon.port, ["lz4", "zstd"])
    rep, _ = call(s, 1, "MALLOC", 0, COMPRESS_BLOCK)
    ptr = rep.result
    if kind == "zstd-stated":
        codec, body, why = ZSTD, zstd_bomb(True, 64 << 20), "claims"
    elif kind == "zstd-unstated":
        codec, body, why = ZSTD, zstd_bomb(False, 1 << 30), "does not decode"
    elif kind == "lz4-overlong":
        codec, body, why = LZ4, lz4_block.compress(bytes(8 << 20), store_size=False), "does not decode"
    else:
        codec, body, why = LZ4, b"\xff" * 4096, "does not decode"
    assert len(body) < COMPRESS_BLOCK
    blocks = len(body).to_bytes(4, "little") + COMPRESS_BLOCK.to_bytes(4, "little") + body
    before = rss(daemon.proc.pid)
    s.sendall(compressed_frame("MEMCPY_HTOD", 0, [0, ptr, 0], blocks, COMPRESS_BLOCK, codec))
    assert why in ended(s)
    s.close()
    assert rss(daemon.proc.pid) - before < 256 << 20, "the daemon decoded past the block's stated size"
    with Client.connect("127.0.0.1", daemon.port) as c:
        assert c.call("MEM_GET_INFO", 0)[0] == 0
    assert daemon.proc.poll() is None


def test_block_structure_is_checked_before_decoding(daemon):
    """Blocks whose raw sizes do not add up, or trailing bytes: a malformed frame, ending the session on the loop."""
    for blocks, raw_len in [
        ((16).to_bytes(4, "little") + (COMPRESS_BLOCK // 2).to_bytes(4, "little") + bytes(16), COMPRESS_BLOCK),
        ((8).to_bytes(4, "little") + (100).to_bytes(4, "little") + bytes(8) + b"tail", 100),
    ]:
        s, _ = session(daemon.port, ["lz4"])
        rep, _ = call(s, 1, "MALLOC", 0, COMPRESS_BLOCK)
        s.sendall(compressed_frame("MEMCPY_HTOD", 0, [0, rep.result, 0], blocks, raw_len, LZ4))
        assert "compressed payload" in ended(s)
        s.close()
    assert raw_session(daemon.port) is not None
