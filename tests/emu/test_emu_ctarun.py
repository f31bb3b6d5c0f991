"""Stage 3's runs of accesses through one register (translator/ctarun.py: one range check of the run, then plain
accesses; each access checked and suspending where the check fails). Every case against the lockstep path: its
bits, or its error (the access that faults, its address and kind). Global loads: a run that crosses the end of its
allocation (into nothing: a fault on the first bad access; into the next allocation: no fault), before its start,
misaligned, in another allocation, a base register changed between two runs and one that a load of the block
writes. Shared loads with ALU instructions between them: at the window's last word, one past it, before the window,
misaligned. In loops with suspensions only (a large kernel) and as a small kernel's loop with suspensions (its
converged loop's fallback), with and without a suspension every 7 thread-instructions."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen
from pyvgpu_daemon.emu.translator.codegen import Codegen
from pyvgpu_daemon.errors import CudaError, code_of

from test_emu_ctagen import CTA, OFF, _cta_code
from test_emu_threadgen import HEAD, _module

GRID, BLOCK = 4, 64
N = GRID * BLOCK
STRIDE = 4 * N                  # bytes between a thread's loads: in[g], in[g + N], in[g + 2N], in[g + 3N]

# out[g] = in[g] + 3 in[g + N] + 5 in[g + 2N] + 7 in[g + 3N] (four loads through %rd5: one run); then %rd5 moves
# by 4 bytes and two more loads (another run through the changed register) add 11 in[g + 1] + 13 in[g + N + 1];
# then a 64-bit load writes %rd5 itself (a run ends before it) and two loads through the new value (in's address
# again, from the pointer table) add 17 in[0] + 19 in[N]; a barrier (a CTA at a time). Thread `who` of CTA `cta`
# adds `delta` to its base.
RUNS = HEAD + """
.visible .entry runs(.param .u64 out, .param .u64 in, .param .u64 delta, .param .u32 who, .param .u32 cta,
                     .param .u64 table)
{
  .reg .pred %p<4>; .reg .b32 %r<40>; .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in]; ld.param.u64 %rd9, [delta];
  ld.param.u32 %r10, [who]; ld.param.u32 %r11, [cta]; ld.param.u64 %rd12, [table];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  setp.eq.u32 %p1, %r1, %r10;
  setp.eq.and.u32 %p1, %r3, %r11, %p1;
  selp.b64 %rd10, %rd9, 0, %p1;
  add.s64 %rd4, %rd2, %rd3;
  add.s64 %rd5, %rd4, %rd10;
  ld.global.u32 %r20, [%rd5];
  ld.global.u32 %r21, [%rd5+1024];
  ld.global.u32 %r22, [%rd5+2048];
  ld.global.u32 %r23, [%rd5+3072];
  add.s64 %rd5, %rd5, 4;
  ld.global.u32 %r24, [%rd5];
  ld.global.u32 %r25, [%rd5+1024];
  ld.global.u64 %rd5, [%rd12];
  ld.global.u32 %r26, [%rd5];
  ld.global.u32 %r27, [%rd5+1024];
  bar.sync 0;
  mad.lo.s32 %r30, %r21, 3, %r20;
  mad.lo.s32 %r30, %r22, 5, %r30;
  mad.lo.s32 %r30, %r23, 7, %r30;
  mad.lo.s32 %r30, %r24, 11, %r30;
  mad.lo.s32 %r30, %r25, 13, %r30;
  mad.lo.s32 %r30, %r26, 17, %r30;
  mad.lo.s32 %r30, %r27, 19, %r30;
  add.s64 %rd7, %rd1, %rd3;
  st.global.u32 [%rd7], %r30;
  ret;
}
"""


def _launch(mode: dict, delta, who: int, cta: int, after: bool):
    """(out's words, or the error's code and message; the CTA code or None). in is allocated last (nothing after
    it) or, `after`, followed by another allocation; delta "end": the bad thread's last load of the first run just
    past in's end, its others inside; "other": its base in the next allocation."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(RUNS, mode, mem)
    data = np.arange(4 * N, dtype=np.uint32) * 7 + 3
    out, table = mem.alloc(4 * N), mem.alloc(8)
    src = mem.alloc(4 * 4 * N)
    nxt = mem.alloc(4 * 4 * N) if after else None
    mem.write(src, data.tobytes())
    if nxt is not None:
        mem.write(nxt, (data + 1000).tobytes())
    mem.write(table, struct.pack("<Q", src))
    g = cta * BLOCK + who
    if delta == "end":              # base + 3 * STRIDE == the end of in, the run's other loads inside it
        delta = 4 * 4 * N - 3 * STRIDE - 4 * g
    elif delta == "other":
        delta = 4 * 4 * N
    try:
        mod.launch("runs", (GRID, 1, 1), (BLOCK, 1, 1), 0,
                   struct.pack("<QQqIIQ", out, src, delta, who & 0xFFFFFFFF, cta, table))
        result = np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32).copy()
    except CudaError as e:
        result = (e.code, e.message)
    return result, (_cta_code(mod, "runs") if mode is CTA else None)


@pytest.fixture(autouse=True)
def every_barrier_kernel(monkeypatch):
    """A CTA at a time (ctagen.preferred_reason: thread mode would take this kernel by default)."""
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)


@pytest.fixture(params=["large", "small"])
def large(request, monkeypatch):
    if request.param == "large":        # (loops with suspensions only: CUB's onesweep's form)
        monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)
    return request.param


@pytest.mark.parametrize("tick", [None, 7], ids=["plain", "suspended every 7"])
@pytest.mark.parametrize("delta, who, cta, after, fault", [
    (0, 0, 0, False, None),
    ("end", 5, 2, False, "cudaErrorIllegalAddress"), ("end", 0, 0, False, "cudaErrorIllegalAddress"),
    ("end", 63, 3, False, "cudaErrorIllegalAddress"), ("end", 5, 2, True, None), ("end", 0, 0, True, None),
    (-(1 << 20), 9, 2, False, "cudaErrorIllegalAddress"), (2, 17, 1, False, "cudaErrorMisalignedAddress"),
    ("other", 33, 2, True, None), ("other", 0, 0, True, None)],
    ids=["none bad", "past its end, a later CTA", "past its end, the first thread", "past its end, the last thread",
         "into the next allocation", "into the next allocation, the first thread", "before it", "misaligned",
         "another allocation", "another allocation, the first thread"])
def test_a_run_of_loads_through_one_register(monkeypatch, large, tick, delta, who, cta, after, fault):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    _same_as_lockstep(*_launch(CTA, delta, who, cta, after), _launch(OFF, delta, who, cta, after)[0], fault)


def _same_as_lockstep(on, code, off, fault: str | None) -> None:
    """A CTA-at-a-time launch's result `on` (its code `code`) is the lockstep path's `off`: the same memory, or the
    same error (the same access faults, with its address and kind), `fault`'s."""
    assert code is not None, "the kernel did not run a CTA at a time"
    if fault is None:
        assert not isinstance(on, tuple), on
        assert (on == off).all(), np.nonzero(on != off)
        return
    assert isinstance(on, tuple) and isinstance(off, tuple) and on == off
    assert on[0] == code_of(fault)


def test_the_runs_are_checked_once(large):
    """The kernel's loads make three runs (the changed base register starts another; the load that writes it ends
    one), each with one range check of its span."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    k = _module(RUNS, CTA, mem).kernel("runs")
    src = ctagen.kernel_source(k, Codegen(k), "fn")[0]
    text = src if isinstance(src, str) else "".join(src)
    spans = sorted(s for s in ("0xc00", "0x400") for _ in range(text.count(f"lim > UINT64_C({s})")))
    assert spans == ["0x400", "0x400", "0xc00"]


# Shared memory: every thread stores 16 words of in (sh[t + 64 k] = in[64 k + t + 1024 c], c its CTA); after a
# barrier, four loads through %r8 = sh + 4 t (+ delta for thread `who` of CTA `cta`) at 0, 1024, 2048, 3072 bytes
# with ALU instructions between them (one run), %r8 moved by 4 bytes, two more (another run); out[g] their mix.
SHARED = HEAD + """
.visible .entry shruns(.param .u64 out, .param .u64 in, .param .u32 delta, .param .u32 who, .param .u32 cta)
{
  .reg .pred %p<4>; .reg .b32 %r<40>; .reg .b64 %rd<16>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in]; ld.param.u32 %r9, [delta];
  ld.param.u32 %r10, [who]; ld.param.u32 %r11, [cta];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mad.lo.s32 %r5, %r3, 1024, %r1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r7, %r6, %r7;
""" + "".join(f"""  ld.global.u32 %r12, [%rd4+{256 * k}];
  st.shared.u32 [%r7+{256 * k}], %r12;
""" for k in range(16)) + """  bar.sync 0;
  setp.eq.u32 %p1, %r1, %r10;
  setp.eq.and.u32 %p1, %r3, %r11, %p1;
  selp.b32 %r13, %r9, 0, %p1;
  add.s32 %r8, %r7, %r13;
  ld.shared.u32 %r20, [%r8];
  shr.u32 %r30, %r20, 3;
  ld.shared.u32 %r21, [%r8+1024];
  mad.lo.s32 %r30, %r21, 3, %r30;
  ld.shared.u32 %r22, [%r8+2048];
  and.b32 %r31, %r22, 255;
  mad.lo.s32 %r30, %r31, 5, %r30;
  ld.shared.u32 %r23, [%r8+3072];
  mad.lo.s32 %r30, %r23, 7, %r30;
  add.s32 %r8, %r8, 4;
  ld.shared.u32 %r24, [%r8];
  xor.b32 %r30, %r30, %r24;
  ld.shared.u32 %r25, [%r8+1024];
  mad.lo.s32 %r30, %r25, 13, %r30;
  mul.wide.u32 %rd5, %r4, 4;
  add.s64 %rd7, %rd1, %rd5;
  st.global.u32 [%rd7], %r30;
  ret;
}
"""


def _launch_shared(mode: dict, delta, who: int, cta: int):
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(SHARED, mode, mem)
    data = np.arange(1024 * GRID, dtype=np.uint32) * 2654435761 + 12345
    out, src = mem.alloc(4 * N), mem.alloc(4 * 1024 * GRID)
    mem.write(src, data.tobytes())
    if delta in ("edge", "past the edge"):  # the bad thread's last load of the first run at the window's last word
        delta = 4096 - 4 - 3072 - 4 * who + (4 if delta == "past the edge" else 0)
    try:
        mod.launch("shruns", (GRID, 1, 1), (BLOCK, 1, 1), 0,
                   struct.pack("<QQIII", out, src, delta & 0xFFFFFFFF, who & 0xFFFFFFFF, cta))
        result = np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32).copy()
    except CudaError as e:
        result = (e.code, e.message)
    return result, (_cta_code(mod, "shruns") if mode is CTA else None)


@pytest.mark.parametrize("tick", [None, 7], ids=["plain", "suspended every 7"])
@pytest.mark.parametrize("delta, who, cta, fault", [
    (0, 0, 0, None), ("edge", 5, 2, None), ("edge", 0, 0, None), ("edge", 63, 3, None),
    ("past the edge", 5, 2, "cudaErrorIllegalAddress"), ("past the edge", 0, 0, "cudaErrorIllegalAddress"),
    ("past the edge", 63, 3, "cudaErrorIllegalAddress"), (-4, 0, 1, "cudaErrorIllegalAddress"),
    (-(1 << 20), 9, 2, "cudaErrorIllegalAddress"), (2, 17, 1, "cudaErrorMisalignedAddress")],
    ids=["none bad", "at the window's edge", "at the edge, the first thread", "at the edge, the last thread",
         "past the edge", "past the edge, the first thread", "past the edge, the last thread",
         "before the window", "far before it", "misaligned"])
def test_a_run_of_shared_loads_with_alu_between(monkeypatch, large, tick, delta, who, cta, fault):
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    _same_as_lockstep(*_launch_shared(CTA, delta, who, cta), _launch_shared(OFF, delta, who, cta)[0], fault)


def test_the_shared_runs_are_checked_once(large):
    mem = DeviceMemory(1 << 40, 1 << 24)
    k = _module(SHARED, CTA, mem).kernel("shruns")
    src = ctagen.kernel_source(k, Codegen(k), "fn")[0]
    text = src if isinstance(src, str) else "".join(src)
    assert text.count("<= shl - 3076") == 1 and text.count("<= shl - 1028") == 1


# out[g] loaded twice (its pointer checked once, reused by the second load) around loads of in through other
# registers (each with a suspension site of its own), then stored.
REUSE = HEAD + """
.visible .entry reuse(.param .u64 out, .param .u64 in)
{
  .reg .b32 %r<20>; .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  bar.sync 0;
  ld.global.u32 %r5, [%rd4];
  ld.global.u32 %r6, [%rd5];
  add.s64 %rd6, %rd5, 1024;
  ld.global.u32 %r7, [%rd6];
  ld.global.u32 %r8, [%rd4];
  add.s32 %r5, %r5, %r6;
  add.s32 %r5, %r5, %r7;
  mad.lo.s32 %r5, %r8, 3, %r5;
  st.global.u32 [%rd4], %r5;
  ret;
}
"""


def test_a_reused_pointer_is_reset_at_every_resumption_before_its_reuse(large):
    """A pointer checked once and reused by a later access of the loop (`tpB = tpA; if (!tpB) ...`) is reset at
    every suspension site's resumption between them (the function's locals do not survive a suspension); the other
    pointers are not (each resumption resets only those a later access may reuse: no O(n^2) lists)."""
    import re
    mem = DeviceMemory(1 << 40, 1 << 24)
    k = _module(REUSE, CTA, mem).kernel("reuse")
    src = ctagen.kernel_source(k, Codegen(k), "fn")[0]
    text = src if isinstance(src, str) else "".join(src)
    reuses = re.findall(r"uint8_t \*(tp\d+) = (tp\d+); if \(!\1\)", text)
    assert reuses, "no pointer reused"
    for b, a in reuses:
        between = text[text.index(f"uint8_t *{a} = "):text.index(f"uint8_t *{b} = ")]
        sites = re.findall(r"R\d+: ;((?: tp\d+ = 0;)*)", between)
        assert sites and all(f" {a} = 0;" in s for s in sites), (a, b, sites)
    for resets in re.findall(r"R\d+: ;((?: tp\d+ = 0;)*)", text):   # (the last: the access's own pointer)
        assert all(p in {x for pair in reuses for x in pair} for p in re.findall(r"(tp\d+) = 0;", resets)[:-1]), \
            resets
    on, _ = _run_reuse(CTA)
    assert (on == _run_reuse(OFF)[0]).all()


def _run_reuse(mode: dict):
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(REUSE, mode, mem)
    data = np.arange(2 * N, dtype=np.uint32) * 5 + 1
    out, src = mem.alloc(4 * N), mem.alloc(4 * 2 * N)
    mem.write(src, data.tobytes())
    mem.write(out, data[:N].tobytes())
    mod.launch("reuse", (GRID, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<QQ", out, src))
    return np.frombuffer(bytes(mem.read(out, 4 * N)), np.uint32).copy(), None
