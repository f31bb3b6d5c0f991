"""Stage 3's CTAs that talk on two threads (translator/ctaatomic.py: _Talk, the atomic C): CUB's onesweep and
histogram against host sorts and counts, a look-back scan across many CTAs, atomics' totals under contention, a
CTA waiting for a later one, a fault in one thread's CTA while the other spins, and the time limit of CTAs that
spin forever, and the default number of threads. Results that do not depend on the schedule are compared bit for bit (with the host, the one-thread
order, the lockstep path); each test checks that a helper thread ran CTAs (CtaCode.helped)."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pyvgpu_daemon.emu import limits
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.runtime.launch import Launch
from pyvgpu_daemon.emu.translator import ctaatomic, ctagen, threadgen
from pyvgpu_daemon.emu.translator.threadgen import R_TICK
from pyvgpu_daemon.errors import CudaError, code_of

from harness import ptx_of
from test_emu_ctaatomic import _talk_ptx, _u32
from test_emu_ctasplit import SORT, TILE, _onesweep as split_onesweep
from test_emu_threadgen import HEAD

TWO = dict(native="on", ctagen=True, talk_threads=2)
ONE = dict(native="on", ctagen=True, talk_threads=1)
OFF = dict(native="off", ctagen=False)


def _load(ptx: bytes | str, mode: dict, mem: DeviceMemory, **kw) -> EmuModule:
    return EmuModule.load(ptx.encode() if isinstance(ptx, str) else ptx, mem, limits=EmuLimits(**mode, **kw))


@pytest.fixture
def helper_first(monkeypatch):
    """The launching thread takes its first CTA only once a helper took one (or after 10 s): on a loaded machine a
    helper woken late may find no CTA left, and the test would have checked one thread only."""
    work = ctaatomic._Talk.work

    def work_after_a_helper(self, st=None):
        if st is not None:
            end = time.monotonic() + 10.0
            while not self.code.helped and self.queue and time.monotonic() < end:
                time.sleep(0.001)
        return work(self, st)

    monkeypatch.setattr(ctaatomic._Talk, "work", work_after_a_helper)


def _cta_code(mod: EmuModule, name: str) -> ctagen.CtaCode:
    code = mod.kernel(name).native_make()
    assert isinstance(code, ctagen.CtaCode), f"{name} did not run a CTA at a time"
    return code


# ---------------------------------------------------------------- CUB's kernels
def _onesweep(mode: dict, keys: np.ndarray, bit: int) -> tuple[list[bytes], object]:
    """test_emu_ctasplit._onesweep's pass, launched with `mode`'s limits: (every buffer it writes, the kernel)."""
    return split_onesweep(EmuLimits(**mode), keys, bit)


def test_cub_onesweep_on_two_threads_against_the_host(helper_first):
    """Eight CTAs (the last one partial) of a pass over bits 16..23 on two threads: the keys and values as a stable
    sort by the digit has them, and every buffer it writes (look-back words, tile counter) as the one-thread order
    writes them."""
    n = 7 * TILE + 3000
    keys = np.random.default_rng(11).integers(0, 1 << 32, n, dtype=np.uint32)
    order = np.argsort((keys >> 16) & 255, kind="stable")
    one, _ = _onesweep(ONE, keys, 16)
    got, kernel = _onesweep(TWO, keys, 16)
    assert got[0] == keys[order].tobytes() and got[1] == order.astype(np.uint32).tobytes()
    assert got == one
    assert kernel.native_make().helped, "no CTA ran on a helper thread"


def test_cub_histogram_on_two_threads_against_the_host(helper_first):
    """CUB's radix histogram (shared and global atomics), 40 CTAs on two threads: every digit count of the four
    passes as the host's bincount."""
    n = 40 * 8192
    keys = np.random.default_rng(5).integers(0, 1 << 32, n, dtype=np.uint32)
    exp = np.stack([np.bincount((keys >> (8 * p)) & 255, minlength=256) for p in range(4)]).astype(np.uint64)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _load(ptx_of(str(SORT)), TWO, mem)
    name = next(k for k in mod.kernels if "HistogramKernel" in k)
    src, bins = mem.alloc(4 * n), mem.alloc(8 * 4 * 256)
    mem.write(src, keys.tobytes())
    mem.write(bins, bytes(8 * 4 * 256))
    mod.launch(name, (40, 1, 1), (256, 1, 1), 0, struct.pack("<QQQiiB", bins, src, n, 0, 32, 0))
    assert bytes(mem.read(bins, 8 * 4 * 256)) == exp.tobytes()
    assert _cta_code(mod, name).helped, "no CTA ran on a helper thread"


# ---------------------------------------------------------------- tests/cuda/emu_cta_talk.cu
def test_a_look_back_scan_across_many_ctas(helper_first):
    """tests/cuda/emu_cta_talk.cu's decoupled look-back over 600 tiles on two threads (tile numbers from an atomic
    counter, volatile flags, fences): every thread's tile prefix is the host's."""
    grid, block = 600, 64
    data = np.random.default_rng(6).integers(0, 1000, grid * block, dtype=np.uint32)
    sums = data.reshape(grid, block).sum(1, dtype=np.uint32)
    exp = np.repeat(np.cumsum(sums, dtype=np.uint32) - sums, block)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _load(_talk_ptx(), TWO, mem)
    a, o = mem.alloc(data.nbytes), mem.alloc(data.nbytes)
    mem.write(a, data.tobytes())
    c, f, ag, inc = (mem.alloc(4 * grid) for _ in range(4))
    for x in (c, f):
        mem.write(x, bytes(4 * grid))
    mod.launch("lookback", (grid, 1, 1), (block, 1, 1), 0, struct.pack("<6Q", a, o, c, f, ag, inc))
    assert (_u32(mem, o, data.size) == exp).all()
    assert _cta_code(mod, "lookback").helped, "no CTA ran on a helper thread"


@pytest.mark.parametrize("mode", [TWO, ONE], ids=["two threads", "one thread"])
def test_a_cta_waiting_for_a_later_one_completes(mode):
    """CTA 0 spins until the chunk's last CTA sets a flag, then all meet at a hand-made grid barrier: it ends,
    with the lockstep path's result, on two threads and one."""
    grid = 12
    res = []
    for m in (mode, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(_talk_ptx(), m, mem, max_vector_instructions=20_000_000)
        f, c, o = mem.alloc(8), mem.alloc(4), mem.alloc(4 * (grid + 1))
        mod.launch("wait_later", (grid, 1, 1), (64, 1, 1), 0, struct.pack("<QQQ", f, c, o))
        res.append(_u32(mem, o, grid + 1))
    assert res[0][0] == 12345 and (res[0][1:] == grid).all() and (res[0] == res[1]).all()


# ---------------------------------------------------------------- PTX written here
# Every thread runs k rounds of global atomics on one set of words shared by every CTA: add (u32, a red of u64),
# inc (bound 0xFFFFFFFF: +1), max, min (s32), xor, an add through a generic address, and thread 0 of each CTA a
# compare-and-swap loop (an increment made by hand).
CONTEND = HEAD + """
.visible .entry contend(.param .u64 w, .param .u32 k)
{
  .reg .pred %p<3>; .reg .b32 %r<16>; .reg .b64 %rd<4>;
  ld.param.u64 %rd2, [w]; ld.param.u32 %r1, [k];
  cvta.to.global.u64 %rd1, %rd2;
  bar.sync 0;
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  neg.s32 %r12, %r5;
  mov.u32 %r6, 0;
LOOP:
  atom.global.add.u32 %r7, [%rd1], 1;
  red.global.add.u64 [%rd1+8], 3;
  atom.global.inc.u32 %r8, [%rd1+16], -1;
  atom.global.max.u32 %r8, [%rd1+20], %r5;
  atom.global.min.s32 %r8, [%rd1+24], %r12;
  atom.global.xor.b32 %r8, [%rd1+28], %r5;
  atom.add.u32 %r8, [%rd2+36], 2;
  setp.ne.u32 %p1, %r4, 0;
  @%p1 bra NEXT;
CAS:
  ld.volatile.global.u32 %r9, [%rd1+32];
  add.u32 %r10, %r9, 1;
  atom.global.cas.b32 %r11, [%rd1+32], %r9, %r10;
  setp.ne.u32 %p2, %r11, %r9;
  @%p2 bra CAS;
NEXT:
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p1, %r6, %r1;
  @%p1 bra LOOP;
  ret;
}
"""


def test_atomics_totals_under_contention(helper_first):
    """16 CTAs of 64 threads, 2001 rounds each, on two threads: every word's total is the host's (a
    read-modify-write that is not one atomic instruction loses updates when the other thread's CTA makes one at
    once)."""
    grid, block, k = 16, 64, 2001
    n = grid * block
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _load(CONTEND, TWO, mem)
    w = mem.alloc(64)
    mem.write(w, bytes(64))
    mod.launch("contend", (grid, 1, 1), (block, 1, 1), 0, struct.pack("<QI", w, k))
    got = bytes(mem.read(w, 40))
    add, red = struct.unpack_from("<IxxxxQ", got)
    inc, mx, mn, xr, cas, gen = struct.unpack_from("<IIiIII", got, 16)
    want_xor = 0
    for i in range(n):
        want_xor ^= i
    assert (add, red, inc, cas, gen) == (n * k, 3 * n * k, n * k, grid * k, 2 * n * k)
    assert (mx, mn, xr) == (n - 1, -(n - 1), want_xor)
    assert _cta_code(mod, "contend").helped, "no CTA ran on a helper thread"


# CTA 1 stores at p + off (off misaligned: a fault); every other CTA spins on a flag no one sets.
SPIN = HEAD + """
.visible .entry spin(.param .u64 flag, .param .u64 p, .param .u64 off)
{
  .reg .pred %p<3>; .reg .b32 %r<6>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [flag]; ld.param.u64 %rd2, [p]; ld.param.u64 %rd3, [off];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;
  bar.sync 0;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %tid.x;
  setp.ne.u32 %p1, %r1, 1;
  @%p1 bra SPIN;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r2;
  ret;
SPIN:
  ld.volatile.global.u32 %r3, [%rd1];
  setp.eq.u32 %p2, %r3, 0;
  @%p2 bra SPIN;
  ret;
}
"""


def _spin(mode: dict, off: int, **kw) -> tuple[CudaError, ctagen.CtaCode | None]:
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _load(SPIN, mode, mem, **kw)
    f, p = mem.alloc(4), mem.alloc(64 * 4 + 8)
    mem.write(f, bytes(4))
    with pytest.raises(CudaError) as ei:
        mod.launch("spin", (4, 1, 1), (64, 1, 1), 0, struct.pack("<QQQ", f, p, off))
    return ei.value, (_cta_code(mod, "spin") if mode is not OFF else None)


def test_a_fault_in_one_threads_cta_stops_the_other_spinning(monkeypatch, helper_first):
    """CTA 1 faults (a misaligned store) while CTA 0 spins on the other thread, never set aside (a slice past the
    budget): the launch fails with the fault, as on one thread and the lockstep path, not with the budget the spin
    would exhaust."""
    fault = code_of("cudaErrorMisalignedAddress")
    assert [_spin(m, 2, max_vector_instructions=3_000_000)[0].code for m in (ONE, OFF)] == [fault] * 2
    monkeypatch.setattr(ctaatomic, "SLICE_TICKS", 1 << 40)
    err, code = _spin(TWO, 2, max_vector_instructions=3_000_000)
    assert err.code == fault, err.message
    assert code.helped, "no CTA ran on a helper thread"


def test_ctas_spinning_forever_end_at_the_time_limit_on_two_threads():
    """Three CTAs spin forever on two threads (CTA 1 ends): the launch ends with cudaErrorLaunchTimeout at its
    deadline (a budget no spin reaches first) and at its instruction budget."""
    t0 = time.monotonic()
    err, code = _spin(TWO, 0, max_seconds=1.5, max_vector_instructions=1 << 60)
    assert err.code == code_of("cudaErrorLaunchTimeout") and "ran longer than" in err.message
    assert time.monotonic() - t0 < 60
    err, code = _spin(TWO, 0, max_vector_instructions=2_000_000)
    assert err.code == code_of("cudaErrorLaunchTimeout") and "instruction budget" in err.message


# ---------------------------------------------------------------- the default
def test_two_talking_threads_by_default_one_where_a_launch_has_one():
    """EmuLimits.talk_threads unset (0): 2 where a launch may use several threads, 1 where PYVGPU_EMU_THREADS (or
    EmuLimits.threads) is 1, so that a one-thread daemon keeps the one-thread order; a number set is kept."""
    assert EmuLimits(threads=4, talk_threads=0).talk_threads == 2
    assert EmuLimits(threads=1, talk_threads=0).talk_threads == 1
    assert EmuLimits(threads=4, talk_threads=1).talk_threads == 1
    assert EmuLimits(threads=1, talk_threads=3).talk_threads == 3
    probe = "from pyvgpu_daemon.emu.limits import EmuLimits as L; print(L().talk_threads, L(threads=1).talk_threads)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYVGPU_EMU_TALK_THREADS", "PYVGPU_EMU_THREADS")}
    env["PYTHONPATH"] = str(Path(limits.__file__).parents[2])      # (this tree's daemon package, not an installed one)
    got = [subprocess.run([sys.executable, "-c", probe], env={**env, **extra}, capture_output=True, text=True,
                          check=True).stdout.split() for extra in ({"PYVGPU_EMU_THREADS": "2"},
                                                                    {"PYVGPU_EMU_THREADS": "1"},
                                                                    {"PYVGPU_EMU_TALK_THREADS": "1"})]
    assert got == [["2", "1"], ["1", "1"], ["1", "1"]]


def _accounts_seen(monkeypatch) -> tuple[list[int], list[int]]:
    """([the launch's steps when Launch.account raised], [its steps at the last account that did not]), as launches
    run."""
    told, total = [], [0]
    account = Launch.account

    def account_seen(self, kernel: str, steps: int) -> None:
        try:
            account(self, kernel, steps)
        except CudaError:
            told.append(self.steps)
            raise
        total[0] = self.steps

    monkeypatch.setattr(Launch, "account", account_seen)
    return told, total


@pytest.mark.parametrize("mode", [ONE, TWO], ids=["one thread", "two threads"])
def test_a_runaway_talking_kernel_returns_every_tick_and_stops_within_one_of_its_budget(monkeypatch, mode):
    """Three CTAs spin forever (CTA 1 ends): a talking CTA returns to Python every TALK_TICK_SCALE * TICK_EVERY
    thread-instructions (R_TICK: fewer returns than at TICK_EVERY, bench/README.md "sixteenth step"), and each
    return is accounted, so the launch stops at its instruction budget having run past it by at most one tick a
    thread (as at TICK_EVERY, by four times as many thread-instructions)."""
    told, _ = _accounts_seen(monkeypatch)
    ticks = [0]
    make = ctagen.CtaCode.__init__

    def counted(self, *a, **kw):
        make(self, *a, **kw)
        fn = self.fn

        def fn_counted(*args):
            rc = fn(*args)
            ticks[0] += rc == R_TICK
            return rc
        self.fn = fn_counted
    monkeypatch.setattr(ctagen.CtaCode, "__init__", counted)
    budget = 3_000_000
    err, code = _spin(mode, 0, max_vector_instructions=budget)
    assert err.code == code_of("cudaErrorLaunchTimeout") and "instruction budget" in err.message
    assert code.tick_scale == ctaatomic.TALK_TICK_SCALE > 1
    every = threadgen.TICK_EVERY * ctaatomic.TALK_TICK_SCALE
    lanes = 4 * 64                                          # (one chunk: the launch's 4 CTAs of 64)
    threads = mode["talk_threads"]
    assert budget < told[0] <= budget + threads * (every // lanes + 8)
    # a spinning CTA's every return is a tick of `every` (each entry starts one: set aside at its slice's end, one
    # tick here); the thread that did not raise may have ended one more meanwhile
    assert told[0] * lanes // every - threads - 2 <= ticks[0] <= told[0] * lanes // every + threads
    assert ctaatomic._slice_ticks(code, 64) * every >= ctaatomic.SLICE_TICKS * threadgen.TICK_EVERY


@pytest.mark.parametrize("mode", [ONE, TWO], ids=["one thread", "two threads"])
def test_many_short_talking_ctas_stop_within_a_tick_of_their_budget(monkeypatch, mode):
    """256 CTAs of atomics, each far shorter than a tick: a thread tells the launch what it ran at a CTA's end only
    once it ran a tick's worth of steps since it last told (_Talk), so the launch still stops at its instruction
    budget, past it by at most a tick's steps and a CTA's a thread; with the budget its CTAs need, the totals are
    the host's."""
    told, total = _accounts_seen(monkeypatch)
    grid, block, k = 256, 64, 200

    def launch(budget: int) -> tuple[EmuModule, DeviceMemory, int]:
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _load(CONTEND, mode, mem, max_vector_instructions=budget, lanes_per_chunk=grid * block)
        w = mem.alloc(64)
        mem.write(w, bytes(64))
        mod.launch("contend", (grid, 1, 1), (block, 1, 1), 0, struct.pack("<Qi", w, k))
        return mod, mem, w

    mod, mem, w = launch(1 << 40)
    n = grid * block
    assert struct.unpack_from("<I", bytes(mem.read(w, 4)))[0] == n * k
    code = _cta_code(mod, "contend")
    lanes = grid * block
    due = threadgen.TICK_EVERY * code.tick_scale // lanes
    per_cta = 40 * k * block // lanes + 1                  # (a CTA's steps, at most: under 40 instructions a round)
    budget = total[0] // 3                                  # (the whole launch: about 2,400 steps)
    assert budget > 4 * (due + per_cta)
    with pytest.raises(CudaError) as ei:
        launch(budget)
    assert ei.value.code == code_of("cudaErrorLaunchTimeout") and "instruction budget" in ei.value.message
    assert budget < told[0] <= budget + mode["talk_threads"] * (due + per_cta)


@pytest.mark.parametrize("mode", [ONE, TWO], ids=["one thread", "two threads"])
def test_a_cancelled_launch_of_short_talking_ctas_stops_at_its_next_return(monkeypatch, mode):
    """The session's client leaves while 256 short CTAs of atomics run (each far shorter than the tick after which
    a thread tells the launch what it ran, _Talk): a thread notices at its next return from the C code, a CTA's end,
    not a tick's worth of steps later (which is more than the whole launch here: it ran to its end before)."""
    grid, block, k = 256, 64, 200
    cancel = threading.Event()
    ran = [0]
    fn_of = ctagen.CtaCode.__init__

    def counted(self, *a, **kw):
        fn_of(self, *a, **kw)
        fn = self.fn

        def fn_counted(*args):
            ran[0] += 1
            if ran[0] == 4:
                cancel.set()                # (the client is gone from the fourth return on)
            return fn(*args)
        self.fn = fn_counted
    monkeypatch.setattr(ctagen.CtaCode, "__init__", counted)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _load(CONTEND, mode, mem, max_vector_instructions=1 << 40, lanes_per_chunk=grid * block)
    w = mem.alloc(64)
    mem.write(w, bytes(64))
    with pytest.raises(CudaError) as ei:
        mod.launch("contend", (grid, 1, 1), (block, 1, 1), 0, struct.pack("<Qi", w, k), cancel=cancel)
    assert ei.value.code == code_of("cudaErrorLaunchTimeout") and "cancelled" in ei.value.message
    assert ran[0] <= 4 + 2 * mode["talk_threads"], ran[0]
    assert struct.unpack_from("<I", bytes(mem.read(w, 4)))[0] < grid * block * k // 4
