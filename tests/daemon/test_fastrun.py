"""Runs of FAST ops (daemon/pyvgpu_daemon/fastrun.py, DeviceContext.run_fast): the same results, op for op, as the
per-op path (dispatch.execute of each op sent fire-and-forget), errors included: failed checks, failures inside the
backend's run, a sticky error that fails everything after it, zero-byte ops. Two emulated devices receive the same
ops, one per op and one as runs; their memory, latched and sticky errors and figures must be equal."""
from __future__ import annotations

import asyncio
import dataclasses
import struct
from dataclasses import fields
from typing import Any

import pytest

from harness import PUT_PTX
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME, OPS
from pyvgpu_daemon import fastrun
from pyvgpu_daemon.backends.base import FAST_METHODS, FastOp
from pyvgpu_daemon.backends.emu import EmuBackend
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.handlers.registry import DECODED, FAST, Call, positional
from pyvgpu_daemon.kinds import Live
from pyvgpu_daemon.session import Session

MIB = 1 << 20


class Device:
    """One session on its own emulated device, driven without a server."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: EmuLimits | None = None) -> None:
        self.backend = EmuBackend(memory=64 * MIB, limits=limits)
        self.session = Session(1, "test", self.backend, 1)
        self.session.va_base = 1 << 40
        self.st = self.session.device(0, loop)

    def call(self, op: str, *args: Any, payload: bytes = b"") -> dispatch.Outcome:
        out = dispatch.execute(self.session, self.st, self.backend, OP_BY_NAME[op], [0, *args], payload, False)
        assert out is not None
        return out

    def state(self, ptr: int, n: int) -> tuple[Any, ...]:
        st = self.st
        figures = (st.deferred, st.sticky, st.ops, st.waited, st.bytes_htod, st.bytes_dtoh, st.bytes_dtod,
                   dict(st.event_times.records))
        sync = self.call("DEVICE_SYNC").err      # answers (and clears) the latched error
        return figures, sync, bytes(self.call("MEMCPY_DTOH", ptr, n, 0).payload)


@pytest.fixture
def pair():
    loop = asyncio.new_event_loop()
    devs = [Device(loop), Device(loop)]
    try:
        yield devs
    finally:
        for d in devs:
            d.st.worker.stop()
        loop.close()


def setup(d: Device) -> dict[str, Any]:
    ptr = d.call("MALLOC", 4096).result
    stream = d.call("STREAM_CREATE", 0, 0).result
    event = d.call("EVENT_CREATE", 0).result
    kernels = d.call("MODULE_LOAD", 1, payload=PUT_PTX).result["kernels"]
    return {"ptr": ptr, "stream": stream, "event": event, "put": kernels["put"]["id"]}


def ops_of(h: dict[str, Any], sticky: bool) -> list[tuple[str, list[Any], bytes]]:
    """A framework-like sequence with every kind of failure in it."""
    ptr, s, e, put = h["ptr"], h["stream"], h["event"], h["put"]

    def launch(func: int, v: int, at: int = 0, params: bytes | None = None) -> tuple[str, list[Any], bytes]:
        return ("LAUNCH", [0, func, [1, 1, 1], [1, 1, 1], 0, s],
                struct.pack("<QI", ptr + at, v) + b"\0" * 4 if params is None else params)
    seq = [
        ("MEMSET", [0, ptr, 0x11, 64, s], b""),
        launch(put, 7),
        ("EVENT_RECORD", [0, e, s], b""),
        ("STREAM_WAIT_EVENT", [0, 0, e, 0], b""),
        ("MEMCPY_DTOD", [0, ptr + 128, ptr, 64, 0], b""),
        ("MEMSET", [0, ptr + 4096, 1, 4, 0], b""),            # out of range: a check fails (latched)
        ("MEMCPY_HTOD", [0, ptr + 256, s], b"\x5a" * 32),
        ("EVENT_RECORD", [0, 0x7777, s], b""),                 # unknown event
        ("MEMSET", [0, ptr + 300, 2, 0, s], b""),              # zero bytes: nothing to run
        launch(put, 9, params=b"\0" * 3),                      # short parameter buffer
        ("MEMSET", [0, ptr + 512, 3, 16, 12345], b""),        # unknown stream
        ("MEMCPY_DTOD", [0, ptr + 1024, ptr, 1 << 20, 0], b""),  # source out of range
        launch(put, 11, at=4),
        ("EVENT_RECORD", [0, e, 0], b""),
    ]
    if sticky:
        seq += [launch(put, 13, at=1 << 30),                   # a fault: sticky
                ("MEMSET", [0, ptr, 0x22, 64, s], b""),        # fails with the sticky error
                ("EVENT_RECORD", [0, e, s], b"")]
    return seq


@pytest.mark.parametrize("sticky", [False, True], ids=["latched", "sticky"])
def test_runs_equal_per_op(pair, sticky):
    per_op, runs = pair
    h = setup(per_op)
    assert setup(runs) == h
    seq = ops_of(h, sticky)
    for name, args, payload in seq:
        assert dispatch.execute(per_op.session, per_op.st, per_op.backend, OP_BY_NAME[name], args, payload,
                                True) is None
    # as runs of 1, 3 and the rest, as a framepath would cut them
    cut = [seq[:1], seq[1:4], seq[4:]]
    for part in cut:
        fastrun.execute_run(runs.session, runs.st, runs.backend, [(OP_BY_NAME[n], a, p) for n, a, p in part])
    got = runs.state(h["ptr"], 4096)
    assert got == per_op.state(h["ptr"], 4096)
    assert got[0][0] != 0 and (got[0][1] != 0) == sticky        # something was latched; sticky only when asked
    assert got[1] == got[0][0]                                  # the synchronizing call answers the latched error
    assert sticky or got[2][:4] == struct.pack("<I", 7) and got[2][4:8] == struct.pack("<I", 11) \
        and got[2][8:64] == bytes([0x11]) * 56 and got[2][128:192] == struct.pack("<I", 7) + bytes([0x11]) * 60 and got[2][256:288] == b"\x5a" * 32


def test_backend_failure_inside_a_run(pair, monkeypatch):
    """A run_fast that reports op k's failure: k is latched, k+1.. handed back and run."""
    per_op, runs = pair
    h = setup(per_op)
    setup(runs)
    ctx = runs.st.ctx
    calls: list[int] = []
    original = type(ctx).run_fast

    def run_fast(self, ops):
        calls.append(len(ops))
        return original(self, ops)
    monkeypatch.setattr(type(ctx), "run_fast", run_fast)
    real_fill = ctx.mem.fill             # what the emulator's memset does (its run_fast calls it directly)
    bad = h["ptr"] + 8

    def fill(ptr, value, size):
        if ptr == bad:
            raise CudaError("cudaErrorNotReady", "injected")
        real_fill(ptr, value, size)
    ctx.mem.fill = fill
    ops = [(OP_BY_NAME["MEMSET"], [0, h["ptr"] + 8 * i, i, 8, 0], b"") for i in range(6)]
    fastrun.execute_run(runs.session, runs.st, runs.backend, ops)
    assert calls == [6, 4]                # one call; after op 1's failure the other four in a second one
    assert runs.st.deferred == ERROR_CODES["cudaErrorNotReady"]
    assert runs.st.ops == 4 + 6
    assert runs.call("DEVICE_SYNC").err == ERROR_CODES["cudaErrorNotReady"]
    got = bytes(runs.call("MEMCPY_DTOH", h["ptr"], 48, 0).payload)
    assert got == bytes(8) + bytes([0] * 8) + b"".join(bytes([i]) * 8 for i in range(2, 6))


def test_every_fast_op_has_a_preparer_naming_a_fast_method(pair):
    """Each FAST op of the spec has a preparer, and what it makes names a method of FAST_METHODS."""
    assert {spec.code for spec in OPS if spec.fast} == set(FAST)
    d = pair[0]
    h = setup(d)
    seen = set()
    for name, args, payload in ops_of(h, False):
        spec = OP_BY_NAME[name]
        try:
            fop = FAST[spec.code][0](Call(d.session, d.st, payload), *positional(spec, d.st, args))
        except CudaError:
            continue
        if fop is not None:
            assert isinstance(fop, FastOp) and fop.method in FAST_METHODS
            seen.add(name)
    assert seen == {spec.name for spec in OPS if spec.fast}


def test_decoded_arguments_convert_as_positional_does(pair):
    """registry.DECODED (arguments libpvframe decoded: of their wire kind and in range, handles still to resolve)
    gives what registry.positional gives, for every FAST op with valid handles, boundary values and a dim3; an
    unknown handle is refused with the same error both ways."""
    d = pair[0]
    h = setup(d)
    big = (1 << 63) - 1                   # the largest u64 libpvframe hands over (larger ones take the Python path)
    cases = [*((OP_BY_NAME[n], a) for n, a, _ in ops_of(h, False)),
             (OP_BY_NAME["MEMSET"], [0, big, -(1 << 31), big, h["stream"]]),
             (OP_BY_NAME["LAUNCH"], [0, h["put"], [0, (1 << 32) - 1, 7], [1, 2, 3], big, 0]),
             (OP_BY_NAME["STREAM_WAIT_EVENT"], [0, h["stream"], h["event"], (1 << 32) - 1])]
    assert {spec.name for spec, _ in cases} == {spec.name for spec in OPS if spec.fast}

    def both(spec, args):
        out = []
        for convert in (lambda: positional(spec, d.st, args), lambda: DECODED[spec.code](d.st, args)):
            try:
                out.append(("ok", convert()))
            except CudaError as exc:
                out.append(("refused", exc.code, exc.message))
        return out
    refused = 0
    for spec, args in cases:
        a, b = both(spec, args)
        assert a == b, (spec.name, args)
        refused += a[0] == "refused"
    assert refused == 2                   # the unknown event and the unknown stream of ops_of


def objects(d: Device) -> tuple[Any, ...]:
    """What a FAST op's checks resolve, and what creating or freeing anything changes: every table of live objects
    (the object itself, by identity), module globals, managed and VMM ranges, bytes held, the next handle, the
    device's free memory."""
    st = d.st
    tables = {f.name: {k: id(v) for k, v in t.items()} for f in fields(st)
              if isinstance(t := getattr(st, f.name), Live)}
    vmm = None if st.vmm is None else repr(st.vmm)
    return (tables, dict(st.variables), list(st._starts), sorted(st.managed.ranges), vmm, st.held, st.var_bytes,
            st.graph_bytes, dict(st.stream_priority), st._next_handle, st.ctx.mem_info())


def test_fast_ops_never_create_or_free(pair):
    """fastrun checks a run's ops before any of them runs, sound only while no FAST op creates or frees what the
    others resolve (the rule on OpFlag.FAST, which op() enforces on the spec line): each FAST op, run as the
    per-op path runs it and as a run, with success and with a failed check, leaves every table as it was."""
    per_op, runs = pair
    h = setup(per_op)
    setup(runs)
    seq = ops_of(h, False)
    assert {n for n, _, _ in seq} == {spec.name for spec in OPS if spec.fast}
    for name, args, payload in seq:
        before = objects(per_op), objects(runs)
        dispatch.execute(per_op.session, per_op.st, per_op.backend, OP_BY_NAME[name], args, payload, True)
        fastrun.execute_run(runs.session, runs.st, runs.backend, [(OP_BY_NAME[name], args, payload)])
        assert (objects(per_op), objects(runs)) == before, f"{name} {args} created or freed something"
    assert per_op.st.ops == runs.st.ops == 4 + len(seq)


@pytest.mark.parametrize("sticky", [False, True], ids=["latched", "sticky"])
def test_runs_of_launches_equal_per_op(pair, sticky):
    """The emulator runs a run's launches of one function and configuration back to back, sharing their set-up
    (EmuContext.run_fast): each still gets its own parameters, in order, its printf output in order, its own
    failure (a short parameter buffer in the middle of a stretch; a fault that makes the device sticky, after
    which the rest of the stretch fails), and records between launches are timed after the launches before them."""
    from test_daemon_kernels import PTX as KERNELS_PTX       # add_one(p, n) and hello(v) (printf)
    per_op, runs = pair
    h = setup(per_op)
    assert setup(runs) == h
    made = [(d.call("MODULE_LOAD", 2, payload=KERNELS_PTX.encode()).result["kernels"]["hello"]["id"],
             d.call("EVENT_CREATE", 0).result) for d in pair]
    assert made[0] == made[1]
    (h["hello"], e2), = made[:1]
    ptr, s, e = h["ptr"], h["stream"], h["event"]

    def put(v: int, at: int, grid: int = 1, params: bytes | None = None) -> tuple[str, list[Any], bytes]:
        return ("LAUNCH", [0, h["put"], [grid, 1, 1], [1, 1, 1], 0, s],
                struct.pack("<QI", ptr + at, v) + b"\0" * 4 if params is None else params)

    def hello(v: int) -> tuple[str, list[Any], bytes]:
        return ("LAUNCH", [0, h["hello"], [2, 1, 1], [1, 1, 1], 0, s], struct.pack("<I", v))
    seq = [("EVENT_RECORD", [0, e, s], b""), ("EVENT_RECORD", [0, e2, s], b""),
           *(put(100 + i, 4 * i) for i in range(5)),            # one stretch: five launches, five values
           hello(1), hello(2), hello(3),                          # printf output in launch order
           put(7, 64, grid=2),                                    # another configuration of the same function
           put(8, 68), put(9, 72, params=b"\0" * 3), put(10, 76),  # a refused launch inside a stretch
           ("EVENT_RECORD", [0, e, 0], b""),
           ("MEMSET", [0, ptr + 128, 0x33, 8, s], b""), put(11, 80), put(12, 84)]
    if sticky:
        seq += [put(13, 88), put(14, 1 << 30), put(15, 92), put(16, 96),   # a fault in a stretch: sticky
                ("EVENT_RECORD", [0, e, s], b"")]                           # (the rest fail with it: figures)
    for name, args, payload in seq:
        assert dispatch.execute(per_op.session, per_op.st, per_op.backend, OP_BY_NAME[name], args, payload,
                                True) is None
    fastrun.execute_run(runs.session, runs.st, runs.backend, [(OP_BY_NAME[n], a, p) for n, a, p in seq])
    out = [d.st.ctx.take_stdout() for d in pair]
    assert out[0] == out[1] == b"".join(b"hello %d from block %d\n" % (v, b) for v in (1, 2, 3) for b in (0, 1))
    got = runs.state(ptr, 4096)
    assert got == per_op.state(ptr, 4096)
    assert got[0][0] != 0 and (got[0][1] != 0) == sticky
    if sticky:                            # the device is lost: every later op fails, its memory unreadable
        assert got[2] == b""
        return
    mem = got[2]
    assert [struct.unpack_from("<I", mem, 4 * i)[0] for i in range(5)] == [100, 101, 102, 103, 104]
    assert struct.unpack_from("<4I", mem, 64) == (7, 8, 0, 10) and mem[128:136] == b"\x33" * 8
    assert struct.unpack_from("<2I", mem, 80) == (11, 12)
    assert runs.call("EVENT_ELAPSED", e2, e).result > 0    # e's last record came after the launches after e2's


def test_runs_of_launches_with_translations_dropped():
    """A run whose launches alternate between two kernels that the code budget cannot hold both translations of
    (each translation drops the other's: emu/codebudget.py): the run's plans are looked up again after a drop, so
    every launch runs its own kernel, as op by op; a configuration the emulator refuses fails alone, in order."""
    from test_daemon_kernels import PTX as KERNELS_PTX       # add_one(p, n) and hello(v) (printf)
    loop = asyncio.new_event_loop()
    limits = dataclasses.replace(EmuLimits(), max_code_bytes=600_000)    # one translation of the two at a time
    pair = [Device(loop, limits), Device(loop, limits)]
    try:
        per_op, runs = pair
        made = []
        for d in pair:
            ptr = d.call("MALLOC", 64).result
            kernels = d.call("MODULE_LOAD", 1, payload=KERNELS_PTX.encode()).result["kernels"]
            made.append((ptr, kernels["add_one"]["id"], kernels["hello"]["id"]))
        assert made[0] == made[1]
        ptr, add_one, hello = made[0]

        def add(grid: int = 1, block: int = 1) -> tuple[str, list[Any], bytes]:
            return ("LAUNCH", [0, add_one, [grid, 1, 1], [block, 1, 1], 0, 0], struct.pack("<QI", ptr, 1) + bytes(4))

        def say(v: int) -> tuple[str, list[Any], bytes]:
            return ("LAUNCH", [0, hello, [1, 1, 1], [1, 1, 1], 0, 0], struct.pack("<I", v))
        seq = [add(), say(5), add(), add(), say(6), add(grid=2), add(block=2048), add(), say(7), add()]
        for name, args, payload in seq:
            dispatch.execute(per_op.session, per_op.st, per_op.backend, OP_BY_NAME[name], args, payload, True)
        fastrun.execute_run(runs.session, runs.st, runs.backend, [(OP_BY_NAME[n], a, p) for n, a, p in seq])
        out = [d.st.ctx.take_stdout() for d in pair]
        assert out[0] == out[1] == b"hello 5 from block 0\nhello 6 from block 0\nhello 7 from block 0\n"
        drops = [d.st.ctx._code.drops for d in pair]
        assert drops[0] == drops[1] >= 4                     # translations were dropped inside the run
        got = [(d.st.deferred, d.st.sticky, d.st.ops, d.call("DEVICE_SYNC").err,
                bytes(d.call("MEMCPY_DTOH", ptr, 4, 0).payload)) for d in pair]
        assert got[0] == got[1]
        assert got[0][0] == ERROR_CODES["cudaErrorInvalidConfiguration"] and got[0][1] == 0
        assert struct.unpack("<I", got[0][4])[0] == 6          # the six add_one launches the emulator accepted
    finally:
        for d in pair:
            d.st.worker.stop()
        loop.close()
