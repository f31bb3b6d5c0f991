"""The compiled frame path (daemon/pyvgpu_daemon/framepath.py, csrc/daemon/frame.c) against the Python one: the
same frames replayed into a daemon with each (PYVGPU_DAEMON_COMPILED=1 and =0) give the same replies and the same
daemon state, byte for byte.

Corpus: (1) the sessions of every CUDA test program the suite runs against one emulated daemon, captured through
the interposer or libvcuda with the arguments its tests use (tools/capture_frames.py --all; its CORPUS table,
xz-compressed in tests/daemon/frames/ with MANIFEST.json: the protocol version and the spec line of every op they
send, so a stale corpus is refused by name); (2) a framework-like stream of fire-and-forget launches, memsets,
event records and stream waits on two devices with every kind of failure in it; (3) both mutated the way
tests/security/test_fuzz_frames.py mutates captured traffic (argument-level boundary values, byte-level flips and
cuts), with a fixed seed (of the captured sessions, those of MUTATED). Replies are compared whole (header fields,
result, payload, printf output), with what is timing and not state taken out: event times' milliseconds (their
handles and record counts stay), EVENT_ELAPSED's value, heartbeat notices, HELLO's answer (device uuids, session
ids). State: after each session's frames, DEVICE_SYNC on each device and STATUS's figures of the session (objects,
memory, ops, bytes; not its scheduler timings) are part of what is compared. The compiled daemon must also have
taken most of the FAST frames (STATUS "frame_path"), or the test would compare Python to itself. Backends: the
emulated GPU (its small ops run on the loop), and the chain (the cuda backend over pyvgpu's driver: its runs are
worker jobs through DeviceContext.run_fast), or PYVGPU_TEST_BACKEND's alone (a real GPU: scripts/gpu-check.sh); on
an asynchronous device when work completes is timing, so event times and cudaErrorNotReady answers are left out
there. The captured sessions are replayed on the emulated GPU whatever the backend (they name the addresses and
handles an emulated daemon gave), in lockstep (each request that wants a reply answered before the frames after
it are sent, as the program waited), each meeting the errors its program met at capture; CI runs that replay in
its first pass only (scripts/test.sh: it starts daemons of both paths itself).

Test programs not in the corpus (capture_frames.LEFT_OUT, each with its reason): device_time.cu and emu_ml.cu
(their kernels are loaded directly, not run as programs), drv_procaddr.c and nvml_check.c (no frames). harden.cu
is captured in its printf, long and idle cases (grid is the launch time limit), api_faults.cu in its fork case
(midcopy needs a patched daemon), api_multihost.cu in its managed case (churn's threads free blocks of each
other's sessions as they run: its sessions replay only interleaved as they ran, which is timing). Programs on two
daemons (api_multihost.cu, api_parallel.cu, examples/dp_train with its digits set prepared by the capture tool)
drive each daemon's GPU from its own thread or average through the client, so each daemon's session stands alone
and is replayed alone."""
from __future__ import annotations

import json
import logging
import random
import socket
import struct
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest

from harness import CHAIN_BACKENDS, CUDA_SRC, PUT_PTX, ROOT, TEST_BACKEND, Daemon, frame, start_daemon
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import (ENV_DAEMON_COMPILED, ERROR_CODES, FRAME_PREFIX_BYTES, OP_BY_CODE, OP_BY_NAME, OPS,
                             PROTOCOL_VERSION)
from pyvgpu_daemon import framepath

sys.path.insert(0, str(ROOT / "tools"))
import capture_frames  # noqa: E402  (the corpus's table: what is captured, how, and what is left out)

FRAMES = capture_frames.OUT
STALE = ("the frame corpus is stale: capture it again "
         "(PYTHONPATH=$PWD:$PWD/daemon python tools/capture_frames.py --all)")
# captured sessions replayed mutated too (the rest are replayed as captured): programs whose frames cover the
# runtime's ops (memory, kernels, graphs, device queries, asynchronous copies, warp code)
MUTATED = ("wire_async", "api_kernels", "api_memory-4096", "api_graph", "api_device", "emu_warp")
SEED = 22
NOT_READY = ERROR_CODES["cudaErrorNotReady"]
STATUS_ID = (1 << 62) + 1
# figures of a session's device in STATUS that are its state (the rest are the scheduler's timings and job counts)
STATE_KEYS = ("device", "memory", "allocations", "modules", "streams", "events", "graphs", "managed", "arrays",
              "textures", "ops", "waited", "sticky_error", "memory_used", "bytes_htod", "bytes_dtoh", "bytes_dtod")


@dataclass
class Pair:
    """Two daemons of one backend, one with each frame path, and what a comparison of them may take as exact."""
    on: Daemon
    off: Daemon
    devs: tuple[int, ...]        # the devices the sessions use
    strict: bool                 # emulated: completion is synchronous, so event times' records and queries compare


# emu here; the chain too (the cuda backend, whose ops are not run on the loop: runs go to the worker and through
# DeviceContext.run_fast there); a real GPU's daemons with PYVGPU_TEST_BACKEND=cuda (scripts/gpu-check.sh)
BACKENDS = CHAIN_BACKENDS if TEST_BACKEND == "emu" else (TEST_BACKEND,)


def start_pair(backend: str, work: Path) -> Pair:
    """Two daemons of the backend, one forced to the Python path (two devices each where the backend is emulated;
    one GPU on a real one)."""
    extra = ("--emu-devices", str(capture_frames.REPLAY_DEVICES)) if backend in ("emu", "chain") else ()
    on = start_daemon(work, *extra, backend=backend, env={ENV_DAEMON_COMPILED: "1"})
    try:
        off = start_daemon(work, *extra, backend=backend, env={ENV_DAEMON_COMPILED: "0"})
    except BaseException:
        on.stop()
        raise
    return Pair(on, off, tuple(range(capture_frames.REPLAY_DEVICES)) if extra else (0,), backend == "emu")


def stop_pair(pair: Pair) -> None:
    pair.on.stop()
    pair.off.stop()
    assert "frame path: compiled" in pair.on.log_text(), pair.on.log_tail()
    assert "frame path: Python" in pair.off.log_text(), pair.off.log_tail()


@pytest.fixture(scope="module", params=BACKENDS)
def daemons(request, tmp_path_factory):
    """(compiled, python): two daemons of the backend, one forced to the Python path."""
    pair = start_pair(request.param, tmp_path_factory.mktemp(f"framepath-{request.param}"))
    try:
        yield pair
    finally:
        stop_pair(pair)


# ---------------------------------------------------------------------------------------------- replay
def request(op: str, req_id: int, *args: Any, payload: bytes = b"") -> bytes:
    return frame([OP_BY_NAME[op].code, req_id, len(payload), *args], payload)


def hello() -> bytes:
    return request("HELLO", 1, {"version": PROTOCOL_VERSION, "client": "framepath", "va_base": 1 << 44})


def split(stream: bytes) -> tuple[list[bytes], bytes]:
    """Whole frames of a byte stream (well-formed prefixes, any header), and what follows the last one."""
    out, pos = [], 0
    while len(stream) - pos >= FRAME_PREFIX_BYTES:
        n = struct.unpack_from("<I", stream, pos)[0]
        end = pos + FRAME_PREFIX_BYTES + n
        if n == 0 or end > len(stream):
            break
        try:
            header = msgpack.unpackb(stream[pos + FRAME_PREFIX_BYTES:end], strict_map_key=False)
            plen = wire.payload_field(header[2], 1 << 64)[0]        # an int, or [wire, raw, codec]
        except Exception:  # noqa: BLE001 - a mutated header: the frame is what its prefix says
            plen = 0
        end += plen
        out.append(stream[pos:end])
        pos = end
    return out, stream[pos:]


def alone(port: int, timeout: float = 20.0) -> None:
    """Wait until no other session holds a device of the daemon: a session that just ended may still be giving its
    memory back, and a real driver's allocations share the daemon's address window (a chain's MALLOC would then
    answer another address on one path than on the other)."""
    deadline = time.monotonic() + timeout
    while True:
        with Client.connect("127.0.0.1", port) as c:
            busy = [x for x in c.status()["sessions"] if not x["self"] and x["devices"]]
        if not busy:
            return
        assert time.monotonic() < deadline, f"sessions still open after {timeout} s: {busy}"
        time.sleep(0.02)


def replay(port: int, data: bytes, devices: tuple[int, ...], strict: bool = True, lockstep: bool = False) -> list[Any]:
    """Send a session's bytes (its HELLO first) and DEVICE_SYNC on each device; once every sync is answered (all
    the device work before it has run), STATUS; → the normalized replies, up to STATUS's or the session's end.
    lockstep (a captured program's session): each request that wants a reply is answered before the frames after it
    are sent, as the program waited for it (its fire-and-forget frames go together, as runs): a program that
    ordered work on two devices by such a wait is replayed in its order, not with the devices racing."""
    alone(port)
    syncs = {(1 << 62) - 1 - d: d for d in devices}
    tail = b"".join(request("DEVICE_SYNC", rid, d) for rid, d in syncs.items())
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    replies: list[Any] = []
    answered = Answered()
    with s:
        wire.parse_server_hello(wire.recv_header(s))
        batches = waited_batches(data) if lockstep else [(data, 0)]
        sender = threading.Thread(target=_send, args=(s, batches + [(tail, 0)], answered), daemon=True)
        sender.start()
        waiting = set(syncs)
        while True:
            try:
                rep, payload, out = wire.recv_reply(s)
            except (ConnectionError, OSError, wire.ProtocolError) as exc:
                replies.append(("closed", type(exc).__name__))
                answered.close()
                break
            answered.add(rep.req_id)
            if rep.req_id == 0 and rep.err == 0:
                continue                            # a heartbeat: timing, not state
            if rep.req_id == STATUS_ID:
                me = [x for x in rep.result["sessions"] if x["self"]][0]
                replies.append(("state", [{k: d[k] for k in STATE_KEYS} for d in me["devices"]]))
                break
            times = rep.event_times and [0.0 if i % 3 == 2 else v for i, v in enumerate(rep.event_times)]
            err = rep.err
            if not strict:                          # an asynchronous device: when work completes is timing
                times = None
                err = 0 if err == NOT_READY else err
            result = rep.result
            if isinstance(result, dict) and "devices" in result:
                result = "hello"                    # the daemons' device uuids and session ids differ
            elif isinstance(result, float):
                result = "f64"                      # EVENT_ELAPSED: a time
            replies.append((rep.req_id, err, rep.payload_len, result, zlib.crc32(payload), bytes(out), times))
            if rep.req_id in waiting:
                waiting.discard(rep.req_id)
                if not waiting:
                    sender.join(20)
                    s.sendall(request("STATUS", STATUS_ID))
        answered.close()
        sender.join(20)
    # replies of one device come in order; two devices' may interleave either way: compared in req_id order
    ends = [r for r in replies if isinstance(r[0], str)]
    return sorted((r for r in replies if not isinstance(r[0], str)), key=lambda r: r[0]) + ends


class Answered:
    """The request ids answered so far in a replay (lockstep's sender waits on them)."""

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._closed = False
        self._cond = threading.Condition()

    def add(self, req_id: int) -> None:
        with self._cond:
            self._ids.add(req_id)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait(self, req_id: int, timeout: float = 60.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: req_id in self._ids or self._closed, timeout), \
                f"request {req_id} not answered in {timeout} s"


def waited_batches(data: bytes) -> list[tuple[bytes, int]]:
    """A session's frames in batches, each ending at a frame that wants a reply: (bytes, its request id; 0 for the
    last batch, and for what follows the last whole frame)."""
    frames, rest = split(data)
    out, batch = [], bytearray()
    for f in frames:
        batch += f
        rid = msgpack.unpackb(f[4:4 + struct.unpack_from("<I", f)[0]], strict_map_key=False)[1]
        if rid:
            out.append((bytes(batch), rid))
            batch = bytearray()
    return out + [(bytes(batch) + rest, 0)]


def _send(s: socket.socket, batches: list[tuple[bytes, int]], answered: Answered) -> None:
    try:
        for data, rid in batches:
            s.sendall(data)
            if rid:
                answered.wait(rid)
    except OSError:
        pass                                  # the daemon ended the session (a malformed frame): its notice says so


def compare(pair: Pair, data: bytes, what: str, lockstep: bool = False) -> list[Any]:
    with ThreadPoolExecutor(2) as both:          # the two daemons are two processes: they replay side by side
        on = both.submit(replay, pair.on.port, data, pair.devs, pair.strict, lockstep)
        off = both.submit(replay, pair.off.port, data, pair.devs, pair.strict, lockstep)
        got, want = on.result(), off.result()
    if ended(got) or ended(want):
        # The daemon ended the session (a malformed frame): which replies of work still running were written
        # before the end is timing on either path; the end itself (its reason) and every reply both got must agree.
        assert ended(got) == ended(want), f"{what}: {ended(got)} against {ended(want)}"
        mine, theirs = by_id(got), by_id(want)
        for k in mine.keys() & theirs.keys():           # (a mutated req_id may repeat: in order, as far as both go)
            n = min(len(mine[k]), len(theirs[k]))
            assert mine[k][:n] == theirs[k][:n], f"{what}: request {k}"
        return got
    assert got == want, f"{what}: the compiled path's replies differ from the Python path's"
    return got


def by_id(replies: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for r in replies:
        if isinstance(r[0], int) and r[0]:
            out.setdefault(r[0], []).append(r)
    return out


def ended(replies: list[Any]) -> list[Any]:
    """The notices by which the daemon ended the session (req_id 0, err != 0, the reason)."""
    return [r[:4] for r in replies if r[0] == 0]


def frames_taken(port: int) -> int:
    """The frames the daemon's compiled path took so far (STATUS "frame_path")."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    with s:
        wire.parse_server_hello(wire.recv_header(s))
        s.sendall(hello() + request("STATUS", 2))
        wire.recv_reply(s)
        rep, _, _ = wire.recv_reply(s)
    return rep.result["frame_path"].get("frames", 0)


# ---------------------------------------------------------------------------------------------- corpus
def framework_session(devs: tuple[int, ...]) -> bytes:
    """The set-up of a framework-like session (replies wanted): memory, a stream, an event, a module per device."""
    out = bytearray(hello())
    rid = 10
    for dev in devs:
        out += request("MALLOC", rid, dev, 1 << 16)
        out += request("STREAM_CREATE", rid + 1, dev, 0, 0)
        out += request("EVENT_CREATE", rid + 2, dev, 0)
        out += request("MODULE_LOAD", rid + 3, dev, 1, payload=PUT_PTX)
        rid += 4
    # handles and addresses the daemon gives are deterministic: the first of each kind, per device
    return bytes(out)


def fast_stream(rng: random.Random, h: dict[int, dict[str, int]], n: int) -> bytes:
    """n pipelined ops, most of them FAST and fire-and-forget, on the devices of h (80% on the first): failures,
    waited requests and synchronizations among them."""
    out = bytearray()
    rid = 1000
    devs = sorted(h)
    for i in range(n):
        dev = devs[0] if rng.random() < 0.8 or len(devs) == 1 else devs[1]
        d = h[dev]
        ptr, s, e, put = d["ptr"], d["stream"], d["event"], d["put"]
        r = rng.random()
        at = rng.randrange(0, 1 << 16, 4)
        if r < 0.3:
            params = struct.pack("<QI", ptr + at, i) + b"\0" * 4
            out += request("LAUNCH", 0, dev, put, [1, 1, 1], [1, 1, 1], 0, rng.choice((0, s)), payload=params)
        elif r < 0.5:
            out += request("MEMSET", 0, dev, ptr + at, i & 0xFF, rng.choice((4, 16, 0)), rng.choice((0, s)))
        elif r < 0.65:
            out += request("EVENT_RECORD", 0, dev, e, rng.choice((0, s)))
        elif r < 0.75:
            out += request("STREAM_WAIT_EVENT", 0, dev, rng.choice((0, s)), e, 0)
        elif r < 0.82:
            out += request("MEMCPY_DTOD", 0, dev, ptr + at, ptr + rng.randrange(0, 1 << 16, 4), 4, 0)
        elif r < 0.88:
            out += request("MEMCPY_HTOD", 0, dev, ptr + at, s, payload=rng.randbytes(4))
        elif r < 0.93:                         # failures: bad range, unknown handles, short parameters
            out += rng.choice((
                request("MEMSET", 0, dev, ptr + (1 << 16), 1, 4, 0),
                request("EVENT_RECORD", 0, dev, 0x7777, 0),
                request("STREAM_WAIT_EVENT", 0, dev, 0x5555, e, 0),
                request("LAUNCH", 0, dev, put, [1, 1, 1], [1, 1, 1], 0, 0, payload=b"\0" * 3),
                request("LAUNCH", 0, dev, 999, [1, 1, 1], [1, 1, 1], 0, 0, payload=b"\0" * 16),
                request("MEMCPY_DTOD", 0, dev, ptr, ptr + (1 << 16) - 2, 4, 0),
                request("MEMSET", 0, 7, ptr, 1, 4, 0)))            # no such device
        elif r < 0.97:                         # waited requests in the middle of runs
            rid += 1
            out += rng.choice((request("STREAM_QUERY", rid, dev, s), request("MEM_GET_INFO", rid, dev),
                               request("EVENT_QUERY", rid, dev, e),
                               request("MEMCPY_DTOH", rid, dev, ptr + at, 8, 0)))
        else:
            rid += 1
            out += request("DEVICE_SYNC", rid, dev)
    return bytes(out)


def handles(pair: Pair) -> dict[int, dict[str, int]]:
    """The pointers and handles framework_session's set-up gets (the same on both daemons: checked)."""
    got = []
    for d in (pair.on, pair.off):
        alone(d.port)
        s = socket.create_connection(("127.0.0.1", d.port), timeout=20)
        with s:
            wire.parse_server_hello(wire.recv_header(s))
            s.sendall(framework_session(pair.devs))
            reps = {r.req_id: r.result for r in (wire.recv_reply(s)[0] for _ in range(1 + 4 * len(pair.devs)))}
        got.append({dev: {"ptr": reps[10 + 4 * i], "stream": reps[11 + 4 * i], "event": reps[12 + 4 * i],
                          "put": reps[13 + 4 * i]["kernels"]["put"]["id"]} for i, dev in enumerate(pair.devs)})
    assert got[0] == got[1]
    return got[0]


def boundary(rng: random.Random, v: Any) -> Any:
    return rng.choice([-1, 1 << 63, (1 << 64) - 1, (1 << 31), -(1 << 31) - 1, True, None, 1.5, "x", [1, 2], b"",
                       [1, 1], [1, 1, 1, 1], [-1, 1, 1], [1 << 32, 1, 1], 0, v + 1 if type(v) is int else 0])


def mutate(rng: random.Random, data: bytes) -> bytes:
    """test_fuzz_frames's mutations: an argument of a frame replaced by a boundary value, or bytes flipped, cut or
    spliced; the first frame (the HELLO) is kept."""
    frames, rest = split(data)
    out = bytearray(frames[0])
    for f in frames[1:]:
        r = rng.random()
        if r < 0.04:
            try:
                n = struct.unpack_from("<I", f)[0]
                header = msgpack.unpackb(f[4:4 + n], strict_map_key=False)
                payload = f[4 + n:]
                if isinstance(header, list) and len(header) > 3:
                    k = rng.randrange(1, len(header)) if rng.random() < 0.9 else rng.randrange(len(header))
                    header[k] = boundary(rng, header[k])
                    f = frame(header, payload)
            except Exception:  # noqa: BLE001 - a frame msgpack cannot decode stays as it is
                pass
        elif r < 0.05:
            b = bytearray(f)
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
            f = bytes(b)
        elif r < 0.052:
            f = f[:rng.randrange(len(f))]
        out += f
    return bytes(out + rest)


def manifest() -> dict[str, Any]:
    assert capture_frames.MANIFEST.exists(), f"{capture_frames.MANIFEST} is missing: {STALE}"
    return json.loads(capture_frames.MANIFEST.read_text())


# ---------------------------------------------------------------------------------------------- tests
def test_framework_stream_same_on_both_paths(daemons):
    rng = random.Random(SEED)
    h = handles(daemons)
    before = frames_taken(daemons.on.port)
    setup = framework_session(daemons.devs)
    data = setup + fast_stream(rng, h, 6000 if daemons.strict else 2000)
    got = compare(daemons, data, "framework-like stream")
    assert got[-1][0] == "state" and any(r[1] for r in got if isinstance(r[0], int)), got[-3:]
    frames = split(data)[0][len(split(setup)[0]):]
    fast = sum(1 for f in frames if OP_BY_CODE[msgpack.unpackb(f[4:4 + struct.unpack_from("<I", f)[0]])[0]].fast)
    assert frames_taken(daemons.on.port) - before >= fast // 2, "the compiled path took few of the FAST frames"


def test_mutated_framework_streams_same_on_both_paths(daemons):
    rng = random.Random(SEED + 1)
    h = handles(daemons)
    for k in range(12 if daemons.strict else 4):
        data = mutate(rng, framework_session(daemons.devs) + fast_stream(rng, h, 400))
        compare(daemons, data, f"mutated framework stream {k}")


def test_corpus_is_current():
    """The corpus was captured with this protocol: its version, and the spec line (code, name, arguments and their
    wire types, payload) of every op it sends, are today's; it holds what CORPUS lists, file for file."""
    m = manifest()
    assert m["protocol_version"] == PROTOCOL_VERSION, \
        f"{STALE}: captured with protocol {m['protocol_version']}, the spec's is {PROTOCOL_VERSION}"
    changed = [f"{code} ({OP_BY_CODE[int(code)].name if int(code) in OP_BY_CODE else 'no longer in the spec'})"
               for code, digest in m["spec"].items()
               if int(code) not in OP_BY_CODE or capture_frames.digest(capture_frames.spec_line(int(code))) != digest]
    assert not changed, f"{STALE}: the spec lines of ops {', '.join(changed)} changed since the capture"
    wanted = {p.name for p in capture_frames.CORPUS}
    assert set(m["programs"]) == wanted, \
        f"{STALE}: not captured {sorted(wanted - set(m['programs']))}, " \
        f"no longer listed {sorted(set(m['programs']) - wanted)}"
    files = {f.name for f in FRAMES.glob("*.frames.*")}
    listed = {s for e in m["programs"].values() for s in e["sessions"]}
    assert files == listed, \
        f"{STALE}: files {sorted(files - listed)} not in MANIFEST.json, {sorted(listed - files)} missing"


def test_corpus_covers_every_test_program():
    """Every program under tests/cuda is in the corpus or left out with a reason (drv_kernels.cu is the driver
    programs' kernel image, not a program)."""
    covered = {Path(p.source).name for p in capture_frames.CORPUS} | set(capture_frames.LEFT_OUT) | {"drv_kernels.cu"}
    programs = {p.name for p in CUDA_SRC.iterdir() if p.suffix in (".cu", ".c")}
    assert not programs - covered, f"tests/cuda programs neither in tools/capture_frames.py's CORPUS nor in its " \
                                   f"LEFT_OUT: {sorted(programs - covered)}"


def errors(replies: list[Any]) -> int:
    """How many requests of a replay were answered with an error."""
    return sum(1 for r in replies if isinstance(r[0], int) and r[0] and r[1])


@pytest.fixture(scope="module")
def emu_daemons(tmp_path_factory):
    """(compiled, python) on the emulated GPU, whatever PYVGPU_TEST_BACKEND is: the captured frames name the
    addresses and handles an emulated daemon gave the programs. A chain's cuda backend gives others (its driver's
    address windows), so there most captured requests fail on both paths (measured: 1,874 of 2,815 replies, 58 on
    the emulated GPU; 63 of 70 sessions meet more errors than at capture), a comparison of refusals; the generated
    streams above, which learn their handles from the daemons, compare the chain's two paths."""
    pair = start_pair("emu", tmp_path_factory.mktemp("framepath-captured"))
    try:
        yield pair
    finally:
        stop_pair(pair)


def test_captured_programs_same_on_both_paths(emu_daemons, tmp_path):
    """Every captured session, in lockstep (as its program waited), on both paths. A program that depends on what
    the daemon numbers daemon-wide (texture objects: MANIFEST.json's "fresh", measured at capture by a second
    replay) is replayed into a pair of its own: in the shared pair its frames would name the values the program got
    from a fresh daemon, not the ones this one gives. On the emulated GPU each
    session meets the errors its program met at capture (MANIFEST.json): more would mean frames naming what this
    daemon does not hold (a stale corpus, or a replay that no longer reproduces the program), which would make the
    comparison one of two refusals."""
    daemons = emu_daemons
    rng = random.Random(SEED + 2)
    before = frames_taken(daemons.on.port)
    replayed = 0
    for program, entry in manifest()["programs"].items():
        fresh = entry["fresh"]
        pair = start_pair("emu", tmp_path) if fresh else daemons
        try:
            for name, want_errors in zip(entry["sessions"], entry["errors"]):
                data = capture_frames.session(name)
                got = compare(pair, data, name, lockstep=True)
                replayed += 1
                assert errors(got) == want_errors, \
                    f"{name}: {errors(got)} requests failed, {want_errors} at capture: {STALE}"
                if program in MUTATED:
                    for k in range(3):
                        compare(pair, mutate(rng, data), f"{name} mutated ({k})")
        finally:
            if fresh:
                stop_pair(pair)
    assert replayed >= len(capture_frames.CORPUS)
    assert frames_taken(daemons.on.port) - before >= 1000, "the compiled path took few of the captured FAST frames"


def lifecycle_ops(dev: int) -> list[tuple[str, int, tuple, bytes]]:
    """The ops that create and free what FAST ops resolve, in the order invalidating_stream sends them:
    (op, request id, arguments after dev, payload); request id 0 is fire-and-forget."""
    return [("MALLOC", 50, (1 << 12,), b""), ("EVENT_CREATE", 51, (0,), b""), ("STREAM_CREATE", 52, (0, 0), b""),
            ("MODULE_LOAD", 53, (2,), PUT_PTX),
            ("EVENT_DESTROY", 0, ("e2",), b""), ("STREAM_DESTROY", 0, ("s2",), b""), ("MODULE_UNLOAD", 0, (2,), b""),
            ("FREE", 54, ("p2",), b""), ("EVENT_CREATE", 55, (0,), b""), ("MALLOC", 56, (1 << 12,), b"")]


def made(port: int, devs: tuple[int, ...]) -> dict[str, int]:
    """The handles and addresses a session gets for lifecycle_ops after framework_session's set-up, each op waited
    for in turn (a daemon hands them out in order: a session pipelining the same ops gets the same ones)."""
    dev = devs[0]
    names = {50: "p2", 51: "e2", 52: "s2", 53: "put2", 55: "e3", 56: "p3"}
    got: dict[str, int] = {}
    alone(port)
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    with s:
        wire.parse_server_hello(wire.recv_header(s))
        s.sendall(framework_session(devs))
        for _ in range(1 + 4 * len(devs)):
            wire.recv_reply(s)
        for op, rid, args, payload in lifecycle_ops(dev):
            s.sendall(request(op, rid or 99, dev, *(got.get(a, a) for a in args), payload=payload))
            rep = wire.recv_reply(s)[0]
            assert rep.err == 0, (op, rep.err)
            if rid in names:
                got[names[rid]] = rep.result["kernels"]["put"]["id"] if op == "MODULE_LOAD" else rep.result
    return got


def invalidating_stream(h: dict[int, dict[str, int]], k: dict[str, int], dev: int) -> bytes:
    """Runs of FAST frames with an op that creates or frees what they resolve between them, all pipelined (nothing
    waited for until the end): the FAST ops after each must meet the new state, as on the per-op path (the event,
    stream and kernel gone, the memory freed, new ones there), each failure answered by the DEVICE_SYNC after it."""
    d = h[dev]
    ptr, put = d["ptr"], d["put"]
    lifecycle = lifecycle_ops(dev)

    def life(i: int) -> bytes:
        op, rid, args, payload = lifecycle[i]
        return request(op, rid, dev, *(k.get(a, a) for a in args), payload=payload)

    def launch(func: int, at: int, v: int, stream: int) -> bytes:
        return request("LAUNCH", 0, dev, func, [1, 1, 1], [1, 1, 1], 0, stream,
                       payload=struct.pack("<QI", at, v) + b"\0" * 4)
    rid = iter(range(2000, 3000))

    def sync() -> bytes:
        return request("DEVICE_SYNC", next(rid), dev)
    p2, e2, s2, put2, e3, p3 = (k[n] for n in ("p2", "e2", "s2", "put2", "e3", "p3"))
    out = bytearray(framework_session(tuple(h)))
    out += life(0) + life(1) + life(2) + life(3)               # created, replies not waited for
    out += (request("MEMSET", 0, dev, p2, 0x21, 64, s2) + launch(put2, p2 + 4, 5, s2)
            + request("EVENT_RECORD", 0, dev, e2, s2) + request("STREAM_WAIT_EVENT", 0, dev, 0, e2, 0)
            + request("MEMCPY_DTOD", 0, dev, ptr + 512, p2, 64, 0)
            + request("MEMCPY_HTOD", 0, dev, p2 + 128, s2, payload=b"\x33" * 16))
    out += life(4)                                              # EVENT_DESTROY
    out += request("EVENT_RECORD", 0, dev, e2, s2) + request("MEMSET", 0, dev, p2 + 256, 0x44, 8, s2) + sync()
    out += request("STREAM_WAIT_EVENT", 0, dev, s2, e2, 0) + sync()
    out += life(5)                                              # STREAM_DESTROY
    out += request("MEMSET", 0, dev, p2 + 264, 0x55, 8, s2) + launch(put2, p2 + 8, 6, 0) + sync()
    out += life(6)                                              # MODULE_UNLOAD
    out += launch(put2, p2 + 12, 7, 0) + request("MEMSET", 0, dev, p2 + 272, 0x66, 8, 0) + sync()
    out += request("MEMCPY_DTOD", 0, dev, ptr + 1024, p2, 512, 0) + life(7)   # FREE, its reply not waited for
    out += request("MEMSET", 0, dev, p2, 0x77, 8, 0) + sync()
    out += request("MEMCPY_DTOD", 0, dev, ptr, p2, 8, 0) + sync()
    out += request("MEMCPY_HTOD", 0, dev, p2, 0, payload=b"\x88" * 8) + sync()
    out += life(8) + life(9)                                    # a new event and new memory
    out += (request("EVENT_RECORD", 0, dev, e3, 0) + request("MEMSET", 0, dev, p3, 0x99, 32, 0)
            + launch(put, p3 + 4, 8, 0) + request("STREAM_WAIT_EVENT", 0, dev, 0, e3, 0)
            + request("MEMCPY_DTOD", 0, dev, ptr + 2048, p3, 32, 0) + sync())
    out += request("MEMCPY_DTOH", next(rid), dev, ptr, 4096, 0)
    return bytes(out)


def test_creating_and_freeing_between_runs_same_on_both_paths(daemons):
    """fastrun checks a run's ops before any of them runs (OpFlag.FAST: no FAST op creates or frees); an op that
    does, sent between FAST frames without a wait, ends the run, and the ops after it meet what it did."""
    h = handles(daemons)
    dev = daemons.devs[0]
    k = made(daemons.on.port, daemons.devs)
    assert made(daemons.off.port, daemons.devs) == k
    before = frames_taken(daemons.on.port)
    data = invalidating_stream(h, k, dev)
    got = compare(daemons, data, "creating and freeing between runs")
    errs = [r[1] for r in got if isinstance(r[0], int) and 2000 <= r[0] < 3000]
    names = {v: n for n, v in ERROR_CODES.items()}
    want = ["cudaErrorInvalidResourceHandle"] * 3 + ["cudaErrorInvalidDeviceFunction"] + ["cudaErrorInvalidValue"] * 3
    assert [names.get(e, e) for e in errs[:7]] == want and errs[7] == 0, errs
    assert len(errs) == 9 and errs[8] == 0                    # the final read of the memory
    assert frames_taken(daemons.on.port) - before >= 10, "the compiled path took few of the FAST frames"


# ---------------------------------------------------------------------------------------------- the decoder alone
def test_decoder_gives_what_msgpack_gives(monkeypatch):
    """Every frame the C decoder takes decodes to the values msgpack gives the Python path; what it refuses (a
    value out of its kind's range, a req_id, an unknown op, a short or padded header, a payload not all there) it
    leaves untouched, and the run stops there."""
    monkeypatch.setenv(ENV_DAEMON_COMPILED, "1")          # (also in CI's second pass, which forces daemons off)
    fp = framepath.load()
    assert fp is not None, "libpvframe is built with the client libraries (cmake --build build/dev)"
    rng = random.Random(SEED + 3)
    fast = [spec for spec in OPS if spec.fast]
    taken = refused = 0
    for _ in range(3000):
        spec = rng.choice(fast)
        args: list[Any] = []
        for a in spec.args:
            if a.type == "dim3":
                args.append([rng.choice((1, 7, 65535, (1 << 32) - 1)) for _ in range(3)])
            elif a.type == "i32":
                args.append(rng.choice((0, -1, 127, -32, 255, -(1 << 31), (1 << 31) - 1)))
            elif a.type == "u32":
                args.append(rng.choice((0, 1, 300, (1 << 32) - 1)))
            else:
                args.append(rng.choice((0, 1, 200, 70000, 1 << 40, (1 << 63) - 1)))
        if rng.random() < 0.3:
            k = rng.randrange(len(args))
            args[k] = boundary(rng, args[k])
        payload = rng.randbytes(rng.choice((0, 4, 16))) if spec.payload_in else b""
        req_id = 0 if rng.random() < 0.9 else rng.randrange(1, 1 << 20)
        data = bytearray(frame([spec.code, req_id, len(payload), *args], payload))
        want = wire.parse_request(wire.unpack_header(bytes(data[4:4 + struct.unpack_from("<I", data)[0]])))
        got = fp.scan(data, 0, len(data), 1 << 16)
        if got:
            taken += 1
            (gspec, gargs, off, plen, end), = got
            assert (gspec, gargs, bytes(data[off:off + plen]), end) == \
                (OP_BY_CODE[want.op], want.args, payload, len(data)), (spec.name, args)
            assert want.req_id == 0
        else:
            refused += 1
        assert bool(got) == (req_id == 0 and all(takes(a.type, v) for a, v in zip(spec.args, args))), \
            (spec.name, req_id, args)
    assert taken > 1500 and refused > 300
    # a run stops at the first frame it does not take, and never takes a frame whose bytes are not all there
    good = frame([OP_BY_NAME["EVENT_RECORD"].code, 0, 0, 0, 4097, 0])
    other = frame([OP_BY_NAME["MEM_GET_INFO"].code, 5, 0, 0])
    data = bytearray(good + good + other + good)
    assert len(fp.scan(data, 0, len(data), 1 << 16)) == 2
    assert fp.scan(data, 0, len(good) - 1, 1 << 16) == []
    padded = bytearray(good[:4]) + good[4:] + b"\0"
    padded[0] += 1                                # a header with a byte after its array
    assert fp.scan(padded, 0, len(padded), 1 << 16) == []


def takes(kind: str, v: Any) -> bool:
    """Whether the decoder takes v for an argument of this wire type (pv_frame.h: the rest is the Python path's)."""
    def within(x: Any, lo: int, hi: int) -> bool:
        return type(x) is int and lo <= x <= hi
    if kind == "dim3":
        return type(v) is list and len(v) == 3 and all(within(x, 0, (1 << 32) - 1) for x in v)
    return within(v, *{"i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1),
                       "i64": (-(1 << 63), (1 << 63) - 1)}.get(kind, (0, (1 << 63) - 1)))


def test_forced_off_and_unloadable_fall_back(monkeypatch, caplog):
    caplog.set_level(logging.INFO, "pyvgpu.daemon")
    monkeypatch.setenv(ENV_DAEMON_COMPILED, "0")
    assert framepath.load() is None
    monkeypatch.setenv(ENV_DAEMON_COMPILED, "1")
    import pyvgpu

    def missing(name: str):
        raise FileNotFoundError(f"{name} not found")
    monkeypatch.setattr(pyvgpu, "lib_path", missing)
    assert framepath.load() is None
    lines = [r.getMessage() for r in caplog.records]
    assert any("PYVGPU_DAEMON_COMPILED=0" in m for m in lines)
    assert any("did not load" in m and "libpvframe.so not found" in m for m in lines)
