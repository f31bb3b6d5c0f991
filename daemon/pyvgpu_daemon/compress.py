"""Compressed bulk payloads (protocol docstring, "Compressed payloads"): the daemon's codecs, the bounded decoding of
a client's compressed payload, and the choice of compressing a reply.

Decoding never produces more than a block's stated raw length (at most COMPRESS_BLOCK) whatever the compressed
bytes claim, and a payload's raw length was admitted against the session's request bound before a byte of it was
read (link.py), so a decompression bomb costs what the same payload uncompressed would. The block structure (and a
zstd frame's stated size) is checked on the loop, where a malformed one ends the session like any malformed frame;
decoding runs on the device's worker thread, where a block that does not decode to exactly its raw length
(CorruptPayload) fails its op and ends the session too (Session.end_soon): the daemon carries on.

Choice (compress_reply): a reply of at least COMPRESS_MIN_BYTES is compressed when the client reported a receive rate
(LINK_RATE) slow enough that a codec's measured speed and the payload's sampled ratio predict at most COMPRESS_GAIN
of the uncompressed time; on loopback the reported rate is far above any codec's speed, so nothing is compressed.
zstandard and lz4 are optional here: a daemon without them offers no codec.
"""
from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pyvgpu import wire
from pyvgpu.protocol import (COMPRESS_BLOCK, COMPRESS_CODECS, COMPRESS_GAIN, COMPRESS_MIN_BYTES,
                             COMPRESS_SAMPLE_BYTES, COMPRESS_SAMPLES, ZSTD_LEVEL)

BLOCK_HEADER = struct.Struct("<II")
LZ4, ZSTD = COMPRESS_CODECS["lz4"], COMPRESS_CODECS["zstd"]


@dataclass(frozen=True)
class Codec:
    code: int
    compress: Callable[[bytes | memoryview], bytes]
    decompress: Callable[[bytes | memoryview, int], bytes]     # (block, raw length) -> at most raw length bytes


def _lz4() -> Codec | None:
    try:
        import lz4.block as b
    except ImportError:
        return None
    return Codec(LZ4, lambda data: b.compress(data, store_size=False),
                 lambda data, n: b.decompress(data, uncompressed_size=n))


_zstd_local = threading.local()


def _zstd() -> Codec | None:
    try:
        import zstandard
    except ImportError:
        return None

    def compress(data: bytes | memoryview) -> bytes:
        c = getattr(_zstd_local, "c", None)
        if c is None:                                  # a compressor is not thread-safe: one per worker thread
            c = _zstd_local.c = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        return c.compress(data)

    def decompress(data: bytes | memoryview, n: int) -> bytes:
        claimed = _zstd_claim(data[:18])
        if claimed > n:
            raise ValueError(f"zstd frame claims {claimed} bytes, the block holds {n}")
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=n)

    return Codec(ZSTD, compress, decompress)


def _zstd_claim(head: bytes | memoryview) -> int:
    """The content size a zstd frame header states (-1: unstated); ProtocolError when it is no frame header."""
    try:
        import zstandard
        return zstandard.frame_content_size(bytes(head))
    except ImportError:
        return -1
    except Exception as exc:  # noqa: BLE001 - zstandard.ZstdError: not a frame
        raise wire.ProtocolError(f"compressed payload: not a zstd frame ({exc})"[:120]) from None


CODECS: dict[int, Codec] = {c.code: c for c in (_lz4(), _zstd()) if c is not None}
NAMES: dict[int, str] = {v: k for k, v in COMPRESS_CODECS.items()}


def accept(offered: Any, enabled: bool) -> list[str]:
    """The hello's codec list answered: those the client offers and this daemon has (none when disabled)."""
    if not enabled or not isinstance(offered, list):
        return []
    return [n for n in offered if isinstance(n, str) and COMPRESS_CODECS.get(n) in CODECS]


# ---------------------------------------------------------------------------------------------- receiving
class CorruptPayload(Exception):
    """A compressed block that does not decode to exactly its stated raw length (a corrupt or hostile payload)."""


@dataclass(frozen=True)
class Compressed:
    """A request payload as it came, to be decoded on the worker thread (decode())."""
    codec: int
    raw_len: int
    data: memoryview | bytes

    def __len__(self) -> int:
        return self.raw_len

    def decode(self) -> memoryview:
        codec = CODECS[self.codec]
        out = np.empty(self.raw_len, dtype=np.uint8)
        mv = memoryview(self.data).cast("B")
        pos = off = 0
        while pos < len(mv):
            clen, rlen = BLOCK_HEADER.unpack_from(mv, pos)
            pos += BLOCK_HEADER.size
            block = mv[pos:pos + clen]
            pos += clen
            try:
                got = block if clen == rlen else codec.decompress(block, rlen)
            except Exception as exc:  # noqa: BLE001 - any decoder failure is a corrupt payload
                raise CorruptPayload(f"compressed payload: block at {off} does not decode: {exc}"[:200]) from None
            if len(got) != rlen:
                raise CorruptPayload(f"compressed payload: block at {off} decodes to {len(got)} bytes, not {rlen}")
            out[off:off + rlen] = np.frombuffer(got, dtype=np.uint8)
            off += rlen
        return memoryview(out)


def check_blocks(data: memoryview | bytes, raw_len: int, codec: int = 0) -> None:
    """The block structure of a compressed payload (not its content; for zstd also each frame's stated content
    size, which must be the block's raw length or unstated): ProtocolError when malformed."""
    mv = memoryview(data).cast("B")
    pos = total = 0
    nblocks = -(-raw_len // COMPRESS_BLOCK)
    for i in range(nblocks):
        if pos + BLOCK_HEADER.size > len(mv):
            raise wire.ProtocolError(f"compressed payload: block {i} of {nblocks} missing")
        clen, rlen = BLOCK_HEADER.unpack_from(mv, pos)
        want = min(COMPRESS_BLOCK, raw_len - total)
        if rlen != want or clen > rlen or clen == 0:
            raise wire.ProtocolError(f"compressed payload: block {i} of {rlen} raw / {clen} compressed bytes, "
                                     f"expected {want} raw")
        if codec == ZSTD and clen < rlen:
            claimed = _zstd_claim(mv[pos + BLOCK_HEADER.size:pos + BLOCK_HEADER.size + min(clen, 18)])
            if claimed not in (rlen, -1):
                raise wire.ProtocolError(f"compressed payload: zstd block {i} claims {claimed} bytes, holds {rlen}")
        pos += BLOCK_HEADER.size + clen
        total += rlen
    if pos != len(mv):
        raise wire.ProtocolError(f"compressed payload: {len(mv) - pos} bytes after its {nblocks} blocks")


# ---------------------------------------------------------------------------------------------- sending
@dataclass
class CodecSpeed:
    """Bytes per second a codec compresses at on this host, learnt from the samples it compressed."""
    bps: float = 0.0

    def learn(self, nbytes: int, seconds: float) -> None:
        if seconds > 0:
            v = nbytes / seconds
            self.bps = v if not self.bps else 0.7 * self.bps + 0.3 * v


SPEEDS: dict[int, CodecSpeed] = {code: CodecSpeed() for code in CODECS}


def _sample(data: memoryview) -> bytes:
    n = len(data)
    k = min(COMPRESS_SAMPLE_BYTES, n // COMPRESS_SAMPLES)
    starts = [(n - k) * i // max(1, COMPRESS_SAMPLES - 1) for i in range(COMPRESS_SAMPLES)]
    return b"".join(bytes(data[s:s + k]) for s in starts)


def may_pay(link_bps: float, codecs: tuple[int, ...]) -> bool:
    """Whether compressing could pay on this link at all (False: send as it is without sampling the data): a
    link rate was reported and a negotiated codec is not known to be too slow for it (choose's test with a perfect
    ratio: 1 / speed < COMPRESS_GAIN / link rate)."""
    if not codecs or not link_bps:
        return False
    return any(not SPEEDS[c].bps or SPEEDS[c].bps * COMPRESS_GAIN > link_bps for c in codecs if c in SPEEDS)


def choose(data: memoryview, link_bps: float, codecs: tuple[int, ...]) -> int:
    """The codec to send `data` with over a link that delivers link_bps bytes/s, or 0 (uncompressed)."""
    if len(data) < COMPRESS_MIN_BYTES or not may_pay(link_bps, codecs):
        return 0
    sample = _sample(data)
    plain = 1.0 / link_bps
    best, best_t = 0, COMPRESS_GAIN * plain
    for code in codecs:
        c = CODECS.get(code)
        if c is None:
            continue
        t0 = time.perf_counter()
        ratio = len(c.compress(sample)) / len(sample)
        SPEEDS[code].learn(len(sample), time.perf_counter() - t0)
        per_byte = 1.0 / SPEEDS[code].bps + ratio * plain     # compressed whole, then sent: the times add up
        if per_byte < best_t:
            best, best_t = code, per_byte
    return best


def encode(data: memoryview, codec: int) -> bytes:
    """data as blocks of the protocol's compressed payload format."""
    c = CODECS[codec]
    parts: list[bytes] = []
    for off in range(0, len(data), COMPRESS_BLOCK):
        raw = data[off:off + COMPRESS_BLOCK]
        z = c.compress(raw)
        if len(z) >= len(raw):
            z = bytes(raw)                             # stored: this block does not compress
        parts += [BLOCK_HEADER.pack(len(z), len(raw)), z]
    return b"".join(parts)


def compress_reply(payload: bytes | memoryview, link_bps: float, codecs: tuple[int, ...],
                   always: bool = False) -> tuple[Any, int]:
    """(what to send, codec): the payload compressed when it pays (choose), or always (with the first negotiated
    codec, when at least COMPRESS_MIN_BYTES), else as it is with codec 0."""
    data = memoryview(payload).cast("B")
    if always:
        codec = next((c for c in codecs if c in CODECS), 0) if len(data) >= COMPRESS_MIN_BYTES else 0
    else:
        codec = choose(data, link_bps, codecs)
    if not codec:
        return payload, 0
    return encode(data, codec), codec
