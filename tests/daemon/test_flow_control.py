"""Flow control that always resumes (issue 23, part 1): the daemon stops reading a connection while 64 KiB wait
unconsumed in its buffer, and reading is on again whenever the session waits for input.

Before the fix, a burst of small frames that filled the read buffer exactly (whole frames, 64 KiB) was consumed by
the data callback and nothing resumed reading: the next request was never read and the client timed out.
"""
from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest

from harness import raw_session
from mixed_load import failed, htod_payload, run_clients
from pyvgpu import wire
from pyvgpu.protocol import OP_BY_NAME
from pyvgpu_daemon.stream import FrameStream

HTOD = OP_BY_NAME["MEMCPY_HTOD"].code
DTOH = OP_BY_NAME["MEMCPY_DTOH"].code
MALLOC = OP_BY_NAME["MALLOC"].code
REGION = 64 << 10


def request(s: socket.socket, op: int, req_id: int, args: list, payload: bytes = b"") -> None:
    wire.send_parts(s, wire.encode_request(op, req_id, args, payload))


def reply(s: socket.socket) -> tuple[wire.Reply, bytes]:
    while True:
        rep, payload, _ = wire.recv_reply(s)
        if not rep.is_notice:
            return rep, payload
        assert rep.err == 0, f"the daemon ended the session: {rep.result}"


def burst(ptr: int, frame: int, total: int, model: bytearray, check_tiles: bool = True) -> bytes:
    """total/frame fire-and-forget copies of exactly `frame` bytes each into [ptr, ptr+REGION), applied to model."""
    plen = htod_payload(frame)
    out = []
    for i in range(total // frame):
        off = (i * 977) % (REGION - plen)
        data = bytes([(i * 31 + j) & 255 for j in range(7)]) * (plen // 7 + 1)
        data = data[:plen]
        model[off:off + plen] = data
        out.append(b"".join(bytes(p) for p in wire.encode_request(HTOD, 0, [0, ptr + off, 0], data)))
    blob = b"".join(out)
    assert len(blob) == total and (total % FrameStream.PAUSE_AT == 0 or not check_tiles)
    return blob


@pytest.mark.parametrize("frame", [64, 256, 4096])
def test_burst_of_whole_frames_then_silence(daemon_factory, frame):
    """Bursts of fire-and-forget frames that tile the 64 KiB read buffer, then silence: the next request (sent
    after a pause, so it lands in a read of its own) is answered, with every byte of the burst in place."""
    d = daemon_factory("--emu-devices", "1", "--compress", "off")
    s = raw_session(d.port, timeout=10)
    request(s, MALLOC, 1, [0, REGION])
    rep, _ = reply(s)
    assert rep.err == 0
    ptr = rep.result
    model = bytearray(REGION)
    request(s, OP_BY_NAME["MEMSET"].code, 2, [0, ptr, 0, REGION, 0])
    assert reply(s)[0].err == 0
    for round_ in range(3):
        s.sendall(burst(ptr, frame, 4 * FrameStream.PAUSE_AT, model))
        time.sleep(0.3)                   # silence: the daemon has read and handled all of it
        t0 = time.monotonic()
        request(s, DTOH, 10 + round_, [0, ptr, REGION, 0])
        rep, data = reply(s)              # the socket's 10 s timeout: a stalled session raises here
        assert rep.err == 0 and rep.req_id == 10 + round_
        assert data == bytes(model), f"round {round_}: the burst's bytes differ"
        assert time.monotonic() - t0 < 5
    s.close()


def frame_bytes(op: int, req_id: int, args: list, payload: bytes = b"") -> bytes:
    return b"".join(bytes(p) for p in wire.encode_request(op, req_id, args, payload))


def test_burst_ending_in_a_request_then_next_request(daemon_factory):
    """128 KiB of whole frames whose last one is a request: its reply comes from that read; the client's next
    request, sent only after the reply, must be read too."""
    d = daemon_factory("--emu-devices", "1", "--compress", "off")
    s = raw_session(d.port, timeout=10)
    request(s, MALLOC, 1, [0, REGION])
    ptr = reply(s)[0].result
    request(s, OP_BY_NAME["MEMSET"].code, 2, [0, ptr, 0, REGION, 0])
    assert reply(s)[0].err == 0
    model = bytearray(REGION)
    sync = frame_bytes(OP_BY_NAME["DEVICE_SYNC"].code, 3, [0])
    total = 2 * FrameStream.PAUSE_AT
    copies = (total - len(sync) - 300) // 256
    filler = total - len(sync) - copies * 256              # one more copy, of a size that makes the whole 128 KiB
    blob = burst(ptr, 256, copies * 256, model, check_tiles=False)
    plen = htod_payload(filler)
    model[:plen] = b"\x5a" * plen
    s.sendall(blob + frame_bytes(HTOD, 0, [0, ptr, 0], b"\x5a" * plen) + sync)
    rep, _ = reply(s)
    assert rep.err == 0 and rep.req_id == 3
    time.sleep(0.2)
    request(s, DTOH, 4, [0, ptr, REGION, 0])
    rep, data = reply(s)
    assert rep.err == 0 and rep.req_id == 4 and data == bytes(model)
    s.close()


class _Transport(asyncio.Transport):
    """A transport that records pause/resume (FrameStream outside a socket)."""
    def __init__(self) -> None:
        super().__init__()
        self.paused = False

    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def pause_reading(self):
        assert not self.paused
        self.paused = True

    def resume_reading(self):
        assert self.paused
        self.paused = False


def feed(s: FrameStream, data: bytes) -> None:
    while data:
        buf = s.get_buffer(-1)
        n = min(len(buf), len(data))
        buf[:n] = data[:n]
        s.buffer_updated(n)
        data = data[n:]


def test_never_paused_while_the_reader_waits():
    """FrameStream alone: whatever consumes the buffer (the data callback, the reader), reading is paused only while
    64 KiB are unconsumed and nobody waits for bytes."""
    frames = frame_bytes(HTOD, 0, [0, 1 << 40, 0], b"\0" * htod_payload(64)) * 1024
    assert len(frames) == FrameStream.PAUSE_AT

    def take_frame(s: FrameStream) -> None:
        header, _ = s.header_now()
        assert s.payload_now(header[2]) is not None

    async def main():
        t = _Transport()
        s = FrameStream(lambda _s: None)
        s.connection_made(t)
        # 1. the reader waits for a frame; the data callback consumes every whole frame (as Connection.frames_now)
        def consume_all():
            while (got := s.peek_header()) is not None and s.buffered(got[1] + got[0][2]):
                take_frame(s)
        s.on_data = consume_all
        reader = asyncio.ensure_future(s.read_header(None, 5))
        await asyncio.sleep(0)
        feed(s, frames)
        assert not s.buffered(1) and not t.paused, "paused with nothing buffered while the reader waits"
        reader.cancel()
        s.on_data = None
        # 2. nobody consumes: paused at 64 KiB; taking frames resumes reading at RESUME_AT, not before
        feed(s, frames)
        assert t.paused
        while s.buffered(FrameStream.RESUME_AT + 1):
            assert t.paused
            take_frame(s)
        assert not t.paused, "consumed down to RESUME_AT and still paused"
        # 3. paused again; a reader that needs more than is buffered resumes reading at once
        feed(s, frames[:FrameStream.PAUSE_AT - FrameStream.RESUME_AT])
        assert t.paused
        big = asyncio.ensure_future(s.readexactly(FrameStream.PAUSE_AT + 100, None))
        await asyncio.sleep(0)
        assert not t.paused, "a reader waits for bytes with reading paused"
        big.cancel()
    asyncio.run(main())


def test_mixed_load_32_clients(daemon_factory):
    """32 concurrent CUDA clients x 1000 mixed operations (bursts that tile the read buffer among them), every
    byte read back checked: no client fails, no session times out (bench/load_bench.py runs it 10 times)."""
    d = daemon_factory("--emu-devices", "1", "--compress", "off")
    runs = run_clients(d, 32, 1000, seed0=1000, timeout=300)
    bad = failed(runs)
    assert not bad, f"{len(bad)} of 32 clients failed; first:\n{bad[0].output[-2000:]}\n{d.log_tail()}"
    assert all(r.ops == 1000 and r.checked > 0 for r in runs)
    log = d.log_text()
    assert not re.search(r"timed out|Traceback|internal error", log), log[-3000:]
