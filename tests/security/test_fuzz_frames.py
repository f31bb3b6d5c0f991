"""A fuzzer driven by real traffic (issue 11, part 6): the frames unmodified CUDA programs send are captured through
a recording proxy, then replayed into fresh sessions with mutations at the argument level (boundary integers,
neighbouring pointers, wrong types, huge containers) and at the byte level (flipped, cut, spliced bytes).

While it runs a victim session holds bytes on the same device; at the end those bytes are intact, the daemon is
alive, serves a new client, grew its resident memory by less than a bound, and logged no internal error.
Bounded in count and time: PYVGPU_FUZZ_SESSIONS (default 300) sessions or PYVGPU_FUZZ_SECONDS (default 25),
whichever ends first; PYVGPU_FUZZ_SEED picks the sequence (default 11; the failing seed is in the message).
"""
from __future__ import annotations

import os
import random
import socket
import threading
import time

import msgpack
import pytest

from harness import frame, interposer_env, raw_session, rss, run_cuda
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import FRAME_PREFIX_BYTES, OP_BY_CODE, OP_BY_NAME

SESSIONS = int(os.environ.get("PYVGPU_FUZZ_SESSIONS", "300"))
SECONDS = float(os.environ.get("PYVGPU_FUZZ_SECONDS", "25"))
SEED = int(os.environ.get("PYVGPU_FUZZ_SEED", "11"))
RSS_BOUND = 400 << 20


# ---------------------------------------------------------------------------------------------- capture
class RecordingProxy:
    """Forwards one client connection to the daemon and keeps every byte the client sent."""

    def __init__(self, upstream_port: int) -> None:
        self.sent = bytearray()
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(1)
        self.port = self.srv.getsockname()[1]
        self.upstream_port = upstream_port
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        client, _ = self.srv.accept()
        daemon = socket.create_connection(("127.0.0.1", self.upstream_port))

        def pump(src: socket.socket, dst: socket.socket, keep: bytearray | None) -> None:
            try:
                while data := src.recv(1 << 16):
                    if keep is not None:
                        keep += data
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        back = threading.Thread(target=pump, args=(daemon, client, None), daemon=True)
        back.start()
        pump(client, daemon, self.sent)
        back.join(10)
        client.close()
        daemon.close()
        self.srv.close()


def split_frames(stream: bytes) -> list[tuple[list, bytes]]:
    """The request frames of a recorded client stream, HELLO first."""
    out, pos = [], 0
    while pos + FRAME_PREFIX_BYTES <= len(stream):
        n = wire.header_length(stream[pos:pos + FRAME_PREFIX_BYTES])
        header = wire.unpack_header(stream[pos + FRAME_PREFIX_BYTES:pos + FRAME_PREFIX_BYTES + n])
        start = pos + FRAME_PREFIX_BYTES + n
        plen = header[2]
        out.append((header, bytes(stream[start:start + plen])))
        pos = start + plen
    return out


@pytest.fixture(scope="module")
def corpus(cuda_build, tmp_path_factory) -> list[list[tuple[list, bytes]]]:
    """One frame list per captured program run (HELLO and GOODBYE dropped)."""
    from harness import start_daemon
    d = start_daemon(tmp_path_factory.mktemp("capture"))
    runs = []
    try:
        for prog, args in (("api_kernels.cu", ()), ("api_memory.cu", ("65536",)), ("api_kernels.cu", ("fault",))):
            proxy = RecordingProxy(d.port)
            env = {**interposer_env([d]), "PYVGPU_HOSTS": f"127.0.0.1:{proxy.port}"}
            run_cuda(cuda_build(prog), [], *args, env=env, timeout=600)
            proxy.thread.join(30)
            frames = [f for f in split_frames(bytes(proxy.sent)) if OP_BY_CODE[f[0][0]].name not in ("HELLO", "GOODBYE")]
            assert len(frames) > 20, (prog, len(frames))
            runs.append(frames)
    finally:
        d.stop()
    return runs


# ---------------------------------------------------------------------------------------------- mutation
def boundary_values(rng: random.Random, v) -> list:
    vals = [0, 1, -1, 2, 255, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, -(1 << 63), (1 << 64) - 1,
            None, True, 1.5, float("nan"), "x", "é" * 3, b"", b"\xff" * 9, [], {}, [[[[[]]]]], [1] * 300,
            {"k": [None] * 50}, "a" * 5000]
    if isinstance(v, int) and not isinstance(v, bool):
        vals += [v + d for d in (-4096, -256, -8, -1, 1, 8, 255, 256, 4096, 1 << 20, 1 << 40)]
        vals += [(v + (1 << 64) - 8) % (1 << 64), v * 2, v // 2]
    if isinstance(v, list):
        vals += [v[:-1], v + v, [x * 65536 for x in v if isinstance(x, int)], [0] * len(v)]
    return vals


def mutate_args(rng: random.Random, header: list) -> list:
    """Mostly an argument (what reaches the handlers), sometimes op / req_id / payload length or the arity."""
    h = list(header)
    k = rng.randrange(3, len(h)) if len(h) > 3 and rng.random() < 0.85 else rng.randrange(len(h))
    choice = rng.choice(boundary_values(rng, h[k]))
    if k == 2 and isinstance(choice, int) and choice > (1 << 30):
        choice = 1 << 20                    # a huge announced payload is another test's subject (test_bounds)
    h[k] = choice
    if rng.random() < 0.05:
        h.append(rng.choice(boundary_values(rng, 0)))      # wrong arity
    return h


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.5 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif r < 0.7 and b:
            del b[rng.randrange(len(b)):]                   # cut
        elif r < 0.85:
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.randbytes(rng.randint(1, 16))
        elif b:
            i = rng.randrange(len(b))
            b[i:i] = b[i:i + rng.randint(1, 64)]            # splice a repeat
    return bytes(b)


def encode(header: list, payload: bytes) -> bytes:
    try:
        return frame(header, payload[:header[2]] if isinstance(header[2], int) and header[2] >= 0 else payload)
    except (TypeError, ValueError, OverflowError, IndexError):
        return frame([OP_BY_NAME["PING"].code, 0, 0])


def mutated_session(rng: random.Random, frames: list[tuple[list, bytes]]) -> bytes:
    """A prefix of a captured run, each frame mutated with some probability."""
    upto = rng.randint(1, len(frames))
    out = bytearray()
    for header, payload in frames[:upto]:
        r = rng.random()
        if r < 0.15:
            header = mutate_args(rng, header)
            out += encode(header, payload)
        elif r < 0.22:
            out += mutate_bytes(rng, encode(header, payload))
        else:
            out += encode(header, payload)
    return bytes(out)


def play(port: int, data: bytes) -> None:
    """Send one mutated session, read whatever comes back for a moment, hang up."""
    try:
        s = raw_session(port, client="fuzz", timeout=5)
    except (OSError, wire.ProtocolError, AssertionError):
        return
    with s:
        s.settimeout(0.02)
        view = memoryview(data)
        deadline = time.monotonic() + 3
        while view and time.monotonic() < deadline:
            try:
                view = view[s.send(view[:1 << 16]):]
            except (socket.timeout, BlockingIOError):
                pass
            except OSError:
                return
            try:
                if not s.recv(1 << 20):
                    return
            except (socket.timeout, BlockingIOError):
                pass
            except OSError:
                return
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            try:
                if not s.recv(1 << 20):
                    return
            except socket.timeout:
                pass
            except OSError:
                return


# ---------------------------------------------------------------------------------------------- the test
def test_mutated_real_traffic_leaves_the_daemon_and_others_intact(daemon_factory, corpus):
    d = daemon_factory("--emu-memory", "1G")
    rng = random.Random(SEED)
    victim = Client.connect("127.0.0.1", d.port)
    secret = rng.randbytes(1 << 16)
    vptr = victim.call("MALLOC", 0, len(secret))[1]
    assert victim.call("MEMCPY_HTOD", 0, vptr, 0, payload=secret)[0] == 0
    time.sleep(0.2)
    base = rss(d.proc.pid)
    peak = base
    t0 = time.monotonic()
    played = 0
    try:
        while played < SESSIONS and time.monotonic() - t0 < SECONDS:
            play(d.port, mutated_session(rng, rng.choice(corpus)))
            played += 1
            if played % 10 == 0:
                peak = max(peak, rss(d.proc.pid))
                assert d.proc.poll() is None, f"seed {SEED}: daemon died after {played} sessions"
                err, _, back = victim.call("MEMCPY_DTOH", 0, vptr, len(secret), 0)
                assert err == 0 and back == secret, f"seed {SEED}: victim's bytes changed after {played} sessions"
        assert played >= 20, played
        err, _, back = victim.call("MEMCPY_DTOH", 0, vptr, len(secret), 0)
        assert err == 0 and back == secret, f"seed {SEED}"
    finally:
        victim.close()
    with Client.connect("127.0.0.1", d.port, timeout=30) as c:          # a new client is served
        p = c.call("MALLOC", 0, 4096)[1]
        c.call("MEMCPY_HTOD", 0, p, 0, payload=b"n" * 4096)
        assert c.call("MEMCPY_DTOH", 0, p, 4096, 0)[2] == b"n" * 4096
    peak = max(peak, rss(d.proc.pid))
    print(f"fuzz: {played} sessions in {time.monotonic() - t0:.1f} s, rss +{(peak - base) >> 20} MiB")
    assert peak - base < RSS_BOUND, f"seed {SEED}: daemon grew {(peak - base) >> 20} MiB over {played} sessions"
    log = d.log_text()
    for bad in ("Traceback", "internal error", "raised unexpectedly", "job raised"):
        assert bad not in log, f"seed {SEED}: {bad!r} in the daemon log:\n" + log[log.find(bad) - 2000:][:6000]


def test_capture_parses_back_to_real_ops(corpus):
    ops = {OP_BY_CODE[h[0]].name for run in corpus for h, _ in run}
    assert {"MALLOC", "MODULE_LOAD", "LAUNCH", "MEMCPY_HTOD", "MEMCPY_DTOH", "DEVICE_SYNC", "FREE"} <= ops, ops
    assert any(msgpack.packb(h) for run in corpus for h, _ in run)
