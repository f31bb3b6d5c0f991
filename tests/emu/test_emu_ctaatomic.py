"""Stage 3 for kernels whose CTAs talk (translator/ctaatomic.py with ctagen.py): atomics of every operation and
type on shared, global and generic memory, volatile and acquire/release global accesses, fences, bar.red, and CTAs
run one after the other with a CTA that waits for a later one set aside. Each kernel (tests/cuda/emu_cta_talk.cu
as nvcc builds it, or PTX written here) runs a CTA at a time and on the lockstep NumPy path, each in a memory of
its own, and is compared bit for bit (or the same error) and with a host model."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctaatomic, ctagen, threadgen
from pyvgpu_daemon.errors import CudaError, code_of

from test_emu_threadgen import HEAD, _module

CTA = dict(native="on")
OFF = dict(native="off")


def _talk_ptx() -> str:
    from harness import ptx_of
    return ptx_of("emu_cta_talk.cu").decode()


def _run(ptx: str, name: str, mode: dict, grid: int, block: int, params, **kw):
    """(read-back, the kernel's CTA code or None) of one launch in a memory of its own."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem, **kw)
    raw, read = params(mem)
    mod.launch(name, (grid, 1, 1), (block, 1, 1), 0, raw)
    code = mod.kernel(name).native_make() if mode is CTA else None
    return read(mem), code if isinstance(code, ctagen.CtaCode) else None


def _both(ptx, name, grid, block, params, **kw):
    on, code = _run(ptx, name, CTA, grid, block, params, **kw)
    off, _ = _run(ptx, name, OFF, grid, block, params, **kw)
    assert code is not None, "the kernel did not run a CTA at a time"
    return on, off, code


def _u32(m: DeviceMemory, a: int, n: int) -> np.ndarray:
    return np.frombuffer(bytes(m.read(a, 4 * n)), np.uint32).copy()


# ---------------------------------------------------------------- atomics
@pytest.mark.parametrize("grid, lanes", [(1, 65536), (7, 65536), (7, 256)], ids=["one CTA", "one chunk", "7 chunks"])
@pytest.mark.parametrize("served", [False, True], ids=["C", "served by Python"])
def test_histogram_against_the_host(grid, lanes, served):
    """CUB's histogram shape: atom.shared.add per byte, then atom.global.add.u32 and .u64 of the CTAs' counts;
    served: the counters lie in a reserved range, so every global atomic suspends to Python."""
    data = np.random.default_rng(grid).integers(0, 1 << 16, 5000, dtype=np.uint32)

    def params(mem):
        a = mem.alloc(data.nbytes)
        mem.write(a, data.tobytes())
        owner = mem
        if served:
            owner = DeviceMemory((1 << 40) + (1 << 30), 1 << 22)
            mem.add_region(owner)
        b, t = owner.alloc(1024), owner.alloc(8)
        return struct.pack("<QQQi", a, b, t, data.size), \
            lambda m: np.r_[_u32(m, b, 256), np.frombuffer(bytes(m.read(t, 8)), np.uint64).astype(np.uint32)]
    on, off, code = _both(_talk_ptx(), "histo", grid, 128, params, lanes_per_chunk=lanes)
    exp = np.bincount(np.r_[data & 255, (data >> 8) & 255], minlength=256).astype(np.uint32)
    assert (on[:256] == exp).all() and on[256] == 2 * data.size and (on == off).all()
    assert (code.suspended > 0) == served


def _every_op_host(data: np.ndarray, grid: int, block: int):
    """every_op's shared 32-bit atomics, its global add and counters as serial application in thread order per
    instruction (ops/atomic's order, a GPU's one legal order): (old values [i, 0..9], o[16], the final shared
    words per CTA, g32)."""
    M = 0xFFFFFFFF
    old = np.zeros((grid * block, 10), np.uint64)
    finals, g32 = [], np.zeros(grid + 1, np.uint64)
    s13_before = None
    for c in range(grid):
        s = [int(data[t]) * 7 & M for t in range(16)]
        vs = [int(data[c * block + t]) for t in range(block)]
        s13_before = s[13]

        def sgn(x):
            return x - (1 << 32) if x >> 31 else x
        ops = [
            lambda t, v: (v & 3, lambda o: (o + v) & M),
            lambda t, v: (4 + (v & 3), lambda o: o if sgn(o) < sgn((v - 1000) & M) else (v - 1000) & M),
            lambda t, v: (8, lambda o: max(o, v)),
            lambda t, v: (9, lambda o: o & (v | 0x0F0F0F0F)),
            lambda t, v: (10, lambda o: o | (v & 0x01010101)),
            lambda t, v: (11, lambda o: o ^ v),
            lambda t, v: (12, lambda o: v),
            lambda t, v: (13, lambda o: v if o == (v if t & 2 else s13_before) else o),
            lambda t, v: (14, lambda o: 0 if o >= 37 else o + 1),
            lambda t, v: (15, lambda o: 29 if o == 0 or o > 29 else o - 1),
        ]
        for j, op in enumerate(ops):
            for t, v in enumerate(vs):
                k, f = op(t, v)
                old[c * block + t, j] = s[k]
                s[k] = f(s[k])
        finals.append(s)
        g32[c] = sum(vs) & M
    g32[grid] = grid * block
    return old, finals, g32


@pytest.mark.parametrize("tick", [None, 5], ids=["plain", "suspended every 5"])
def test_every_operation_and_type(monkeypatch, tick):
    """add/min/max/and/or/xor/exch/cas/inc/dec on u32/s32, add and min on u64/s64, add on f32/f64 (shared),
    add/max/exch/add on u32/u64/f32/f64 (global), a red: the old values every thread read and what memory holds
    after, bit for bit with the lockstep path; the 32-bit ones and the f32 add also against serial application."""
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    grid, block = 3, 64
    data = np.random.default_rng(3).integers(0, 1 << 32, grid * block, dtype=np.uint32)

    def params(mem):
        a = mem.alloc(data.nbytes)
        mem.write(a, data.tobytes())
        n32 = grid + 1 + 16 * grid
        g32, g64, gf, gd, old = (mem.alloc(x) for x in (4 * n32, 8 * grid, 4 * grid, 8 * grid, 80 * data.size))
        return struct.pack("<6Q", a, g32, g64, gf, gd, old), \
            lambda m: (_u32(m, g32, n32), bytes(m.read(g64, 8 * grid)) + bytes(m.read(gf, 4 * grid)) +
                       bytes(m.read(gd, 8 * grid)), _u32(m, old, 20 * data.size).reshape(-1, 20))
    # (its f32/f64 adds keep the other paths: ctaatomic.emit; stage 3's integer atomics of every width are
    # test_emu_stage3_review7's)
    on, code = _run(_talk_ptx(), "every_op", CTA, grid, block, params)
    off, _ = _run(_talk_ptx(), "every_op", OFF, grid, block, params)
    assert code is None
    assert (on[0] == off[0]).all() and on[1] == off[1] and (on[2] == off[2]).all()
    old, finals, g32 = _every_op_host(data, grid, block)
    assert (on[2][:, :10] == old).all()
    assert (on[0][:grid + 1] == g32).all()
    assert (on[0][grid + 1:].reshape(grid, 16) == np.array(finals, np.uint64)).all()
    for c in range(grid):                   # o[16]: the CTA's global word, added in thread order
        vs = data[c * block:(c + 1) * block]
        assert (on[2][c * block:(c + 1) * block, 16] == (np.cumsum(vs, dtype=np.uint32) - vs)).all()
        acc, seen = np.float32(0.5), []     # o[13]: the shared f32 add, in thread order, rounded each time
        for v in vs:
            seen.append(acc)
            acc = np.float32(acc + np.uint32((int(v) & 0x007FFFFF) | 0x3F000000).view(np.float32))
        assert (on[2][c * block:(c + 1) * block, 13] == np.array(seen, np.float32).view(np.uint32)).all()


# PTX written here: a global store, a barrier, then a global atomic at the pointer plus `off` bytes, a shared
# atomic at `soff` bytes into a 64-byte variable, and a red of its result (both kinds of fault, and red).
FAULTS = HEAD + """
.visible .entry faults(.param .u64 p, .param .u64 off, .param .u32 soff)
{
  .reg .b32 %r<8>; .reg .b64 %rd<6>;
  .shared .align 4 .b8 sm[64];
  ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [off]; ld.param.u32 %r1, [soff];
  cvta.to.global.u64 %rd3, %rd1;
  mov.u32 %r2, %tid.x;
  mov.u32 %r5, %ctaid.x;
  mov.u32 %r6, %ntid.x;
  mad.lo.s32 %r5, %r5, %r6, %r2;
  mul.wide.u32 %rd4, %r5, 4;
  add.s64 %rd3, %rd3, %rd4;
  st.global.u32 [%rd3], %r5;
  bar.sync 0;
  add.s64 %rd5, %rd3, %rd2;
  atom.global.add.u32 %r3, [%rd5], 1;
  mov.u32 %r5, sm;
  add.u32 %r6, %r5, %r1;
  and.b32 %r7, %r2, 7;
  shl.b32 %r7, %r7, 2;
  add.u32 %r6, %r6, %r7;
  atom.shared.add.u32 %r4, [%r6], %r3;
  red.global.add.u32 [%rd3], %r4;
  ret;
}
"""


@pytest.mark.parametrize("off, soff", [(0, 0), (2, 0), (1 << 30, 0), (0, 62), (0, 1 << 20)],
                         ids=["none", "misaligned global", "unallocated global", "misaligned shared",
                              "shared out of range"])
def test_atomic_faults_as_the_lockstep_path(off, soff):
    """The same error (or result) and the same memory left behind: the stores before the fault made (one CTA:
    which other CTAs ran before a fault differs between the paths, as between GPUs)."""
    def params(mem):
        p = mem.alloc(4 * 96)
        return struct.pack("<QQI", p, off, soff), lambda m: _u32(m, p, 96)
    res = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(FAULTS, mode, mem)
        raw, read = params(mem)
        try:
            mod.launch("faults", (1, 1, 1), (96, 1, 1), 0, raw)
            err = None
        except CudaError as e:
            err = (e.code, e.message)
        res.append((err, read(mem)))
        if mode is CTA:
            assert isinstance(mod.kernel("faults").native_make(), ctagen.CtaCode)
    assert res[0][0] == res[1][0] and (res[0][1] == res[1][1]).all()
    assert (res[0][0] is None) == (off == 0 and soff == 0)
    if res[0][0] is None:       # each thread's word: its index + 1 (atom) + the old sum of its shared slot
        i = np.arange(96)
        before = np.array([sum(k for k in range(x) if (k & 7) == (x & 7)) for x in i])
        assert (res[0][1] == i + 1 + before).all()


HALF = HEAD + """
.visible .entry half(.param .u64 p)
{
  .reg .b16 %h<3>; .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd2, %rd1;
  bar.sync 0;
  mov.b16 %h1, 0x3C00;
  atom.global.add.noftz.f16 %h2, [%rd2], %h1;
  ret;
}
"""


def test_half_precision_adds_keep_the_other_paths():
    """ops/atomic's half adds have no C form here: the kernel runs as before, with the same sum (64 x 1.0)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(HALF, CTA, mem)
    p = mem.alloc(4)
    mod.launch("half", (2, 1, 1), (32, 1, 1), 0, struct.pack("<Q", p))
    assert not isinstance(mod.kernel("half").native_make(), ctagen.CtaCode)
    assert np.frombuffer(bytes(mem.read(p, 2)), np.float16)[0] == 64.0


# ---------------------------------------------------------------- CTAs that talk
def test_decoupled_look_back_against_the_host():
    """Tile numbers from an atomic counter, aggregates and inclusive sums published with volatile stores and
    fences, a walk back spinning on earlier tiles' flags (the onesweep kernel's shape), in chunks of 16 CTAs and
    in one: every thread's tile prefix is the host's."""
    grid, block = 40, 256
    data = np.random.default_rng(4).integers(0, 1000, grid * block, dtype=np.uint32)

    def params(mem):
        a, o = mem.alloc(data.nbytes), mem.alloc(data.nbytes)
        mem.write(a, data.tobytes())
        c, f, ag, inc = (mem.alloc(4 * grid) for _ in range(4))
        return struct.pack("<6Q", a, o, c, f, ag, inc), lambda m: _u32(m, o, data.size)
    sums = data.reshape(grid, block).sum(1, dtype=np.uint32)
    exp = np.repeat(np.cumsum(sums, dtype=np.uint32) - sums, block)
    for lanes in (16 * block, 65536):
        on, off, _ = _both(_talk_ptx(), "lookback", grid, block, params, lanes_per_chunk=lanes)
        assert (on == exp).all() and (on == off).all()


@pytest.mark.parametrize("tick", [None, 64], ids=["default slices", "short slices"])
def test_a_cta_waiting_for_a_later_one_completes(monkeypatch, tick):
    """CTA 0 spins until the chunk's last CTA sets a flag, then all meet at a hand-made grid barrier (an atomic
    arrival count read with ld.acquire): a CTA at a time, each waiting CTA is set aside and the others run, and
    the launch ends with the lockstep path's result within an instruction budget a spin would exhaust."""
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    grid = 8

    def params(mem):
        f, c, o = mem.alloc(8), mem.alloc(4), mem.alloc(4 * (grid + 1))
        return struct.pack("<QQQ", f, c, o), lambda m: _u32(m, o, grid + 1)
    # (one thread: every CTA but the last is then set aside at least once; on two, a CTA whose thread waits for a
    # CPU while the other thread runs through the rest need not be: test_emu_ctatalk2 runs this kernel there)
    on, off, code = _both(_talk_ptx(), "wait_later", grid, 64, params, max_vector_instructions=2_000_000,
                          talk_threads=1)
    assert on[0] == 12345 and (on[1:] == grid).all() and (on == off).all()
    assert code.set_aside >= grid - 1


def test_a_cta_waiting_for_a_later_chunk_times_out_on_both_paths(monkeypatch):
    """Chunks run one at a time in CTA order on both paths: CTA 0 waiting for a CTA of a later chunk exhausts the
    launch's instruction budget on both, with the same error."""
    monkeypatch.setattr(threadgen, "TICK_EVERY", 256)
    errs = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(_talk_ptx(), mode, mem, lanes_per_chunk=4 * 64, max_vector_instructions=20_000)
        f, c, o = mem.alloc(8), mem.alloc(4), mem.alloc(36)
        with pytest.raises(CudaError) as ei:
            mod.launch("wait_later", (8, 1, 1), (64, 1, 1), 0, struct.pack("<QQQ", f, c, o))
        errs.append(ei.value.code)
    assert errs[0] == errs[1] == code_of("cudaErrorLaunchTimeout")


@pytest.mark.parametrize("block", [96, 33], ids=["3 warps", "33 threads"])
def test_bar_red_against_the_host(block):
    """__syncthreads_or / _and / _count: each CTA's reduction of its threads' predicates, every thread."""
    grid = 4
    data = np.random.default_rng(block).integers(0, 100, grid * block, dtype=np.uint32)
    data[5] = 77

    def params(mem):
        a, o = mem.alloc(data.nbytes), mem.alloc(3 * data.nbytes)
        mem.write(a, data.tobytes())
        return struct.pack("<QQ", a, o), lambda m: _u32(m, o, 3 * data.size).reshape(-1, 3)
    on, off, _ = _both(_talk_ptx(), "bar_reduce", grid, block, params)
    d = data.reshape(grid, block)
    exp = np.stack([np.repeat((d == 77).any(1), block), np.repeat((d != 5).all(1), block),
                    np.repeat((d & 1).sum(1), block)], 1)
    assert (on == exp).all() and (on == off).all()


DIVERGED_RED = HEAD + """
.visible .entry dred(.param .u64 p)
{
  .reg .pred %p<5>; .reg .b32 %r<8>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd2, %rd2, %rd3;
  and.b32 %r2, %r1, 3;
  setp.eq.s32 %p1, %r2, 1;
  setp.eq.s32 %p4, %r1, 13;
  @%p4 bra DONE;
  setp.lt.u32 %p2, %r1, 40;
  @%p2 bra LOW;
  bar.red.popc.u32 %r3, 0, %p1;
  bra OUT;
LOW:
  bar.red.popc.u32 %r3, 0, !%p1;
  add.u32 %r3, %r3, 1000;
OUT:
  st.global.u32 [%rd2], %r3;
DONE:
  ret;
}
"""


def test_bar_red_diverged_sites_and_an_exited_thread():
    """Threads at two bar.red sites of one barrier and one exited: each site counts its own parked threads'
    predicates (runtime/barriers.py's release), as on the lockstep path."""
    def params(mem):
        p = mem.alloc(4 * 64)
        return struct.pack("<Q", p), lambda m: _u32(m, p, 64)
    on, off, _ = _both(DIVERGED_RED, "dred", 1, 64, params)
    t = np.arange(64)
    low, high = (t < 40) & (t != 13), t >= 40
    exp = np.where(low, 1000 + (low & ((t & 3) != 1)).sum(), (high & ((t & 3) == 1)).sum())
    exp[13] = 0
    assert (on == exp).all() and (on == off).all()


def test_eligibility():
    """Atomics, volatile and scoped accesses, fences and bar.red run here; calls (printf) do not."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(_talk_ptx(), CTA, mem)
    for name in ("histo", "every_op", "lookback", "wait_later", "bar_reduce"):
        assert ctagen.eligible_reason(mod.kernel(name)) is None, name
        assert mod.kernel(name).independent_ctas == (name == "bar_reduce")
    call = HEAD + """
.extern .func (.param .b32 r) vprintf(.param .b64 f, .param .b64 a);
.global .align 1 .b8 fmt[2] = {65, 0};
.visible .entry k()
{
  .reg .b64 %rd<3>; .reg .b32 %r<2>;
  bar.sync 0;
  cvta.global.u64 %rd1, fmt;
  mov.u64 %rd2, 0;
  { .param .b64 a0; st.param.b64 [a0], %rd1; .param .b64 a1; st.param.b64 [a1], %rd2; .param .b32 rv;
    call.uni (rv), vprintf, (a0, a1); ld.param.b32 %r1, [rv]; }
  ret;
}
"""
    assert ctaatomic.sharing_reason(_module(call, CTA, mem).kernel("k")) is not None


LANEMASKS = HEAD + """
.visible .entry masks(.param .u64 p)
{
  .reg .b32 %r<9>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x;
  mov.u32 %r7, %tid.y;
  mov.u32 %r8, %ntid.x;
  mad.lo.s32 %r1, %r7, %r8, %r1;
  mul.wide.u32 %rd3, %r1, 32;
  add.s64 %rd2, %rd2, %rd3;
  mov.u32 %r2, %lanemask_eq;
  mov.u32 %r3, %lanemask_lt;
  mov.u32 %r4, %lanemask_le;
  mov.u32 %r5, %lanemask_ge;
  mov.u32 %r6, %lanemask_gt;
  BARRIER
  st.global.v4.u32 [%rd2], {%r2, %r3, %r4, %r5};
  st.global.u32 [%rd2+16], %r6;
  ret;
}
"""


@pytest.mark.parametrize("barrier", [True, False], ids=["a CTA at a time", "a thread at a time"])
def test_lanemasks(barrier):
    """%lanemask_eq/lt/le/ge/gt (CUB's onesweep reads %lanemask_le) of a 2-D block with a partial last warp, as
    runtime/special.py computes them from the lane in the warp."""
    ptx = LANEMASKS.replace("BARRIER", "bar.sync 0;" if barrier else "")
    out = []
    for mode in (CTA, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(ptx, mode, mem)
        p = mem.alloc(32 * 200)
        mod.launch("masks", (1, 1, 1), (20, 10, 1), 0, struct.pack("<Q", p))
        out.append(_u32(mem, p, 8 * 200).reshape(-1, 8)[:, :5])
        if mode is CTA:
            code = mod.kernel("masks").native_make()
            assert isinstance(code, ctagen.CtaCode if barrier else threadgen.ThreadCode)
    lane = np.arange(200, dtype=np.uint64) % 32
    eq = np.uint64(1) << lane
    exp = np.stack([eq, eq - 1, (eq << np.uint64(1)) - 1, ~(eq - 1), ~((eq << np.uint64(1)) - 1)], 1) & 0xFFFFFFFF
    assert (out[0] == exp).all() and (out[0] == out[1]).all()


def test_accesses_other_ctas_see_are_c11_atomics():
    """The C code stays correct with other CTAs running on another OS thread (module docstring): global atomics
    as one atomic read-modify-write (a fetch-op, a CAS loop), volatile/acquire loads and volatile/release stores as
    __atomic loads and stores of their order, __threadfence as a sequentially consistent fence; the shared
    histogram's atomics plain (one OS thread runs a CTA), its global ones atomic."""
    ptx = _talk_ptx()
    srcs = {}
    for name, args, grid in (("wait_later", 3, 2), ("histo", 4, 2), ("lookback", 6, 2)):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(ptx, CTA, mem, max_vector_instructions=2_000_000)
        bufs = [mem.alloc(1 << 12) for _ in range(args)]
        for b in bufs:
            mem.write(b, bytes(1 << 12))
        raw = struct.pack(f"<{args}Q", *bufs) if name != "histo" else struct.pack("<QQQi", *bufs[:3], 16)
        mod.launch(name, (grid, 1, 1), (64, 1, 1), 0, raw)
        assert isinstance(mod.kernel(name).native_make(), ctagen.CtaCode)
        srcs[name] = mod.kernel(name).native_source
    wait = srcs["wait_later"]
    assert "__atomic_fetch_add(" in wait and "__ATOMIC_ACQUIRE)" in wait and "__ATOMIC_RELEASE)" in wait
    assert "__atomic_thread_fence(__ATOMIC_SEQ_CST)" in wait and "__atomic_load_n(" in wait
    look = srcs["lookback"]
    assert look.count("__atomic_store_n(") >= 4 and "__atomic_thread_fence(__ATOMIC_SEQ_CST)" in look
    histo = srcs["histo"]
    assert histo.count("__atomic_fetch_add(") == 2      # the global u32 and u64 adds; 2 shared adds plain


@pytest.mark.parametrize("cs", [256, 64, 1])
def test_set_aside_copies_every_array_of_the_cta(cs):
    """A CTA set aside keeps every byte of its arrays and of what it holds once (CtaRegisters: neighbours less than
    MERGE_GAP apart copied as one span, padding with them; far ones apart), and gets them back on another thread's
    register file, however they lie (widths 1-8 bytes, 64 bytes of padding at a capacity of 256 threads; a CTA of
    fewer threads; an array far from the rest; something held once between)."""
    cap = 256
    arrays, off = [], 0
    for w in (4, 4, 1, 8, 8, 2, 4, 1, 8):
        arrays.append((off, w))
        off += cap * w + 64
    arrays.append((off + 3 * ctaatomic.MERGE_GAP, 4))          # far from the rest: a span of its own
    once = [(off + 16, 24)]
    regs = ctaatomic.CtaRegisters(off + 3 * ctaatomic.MERGE_GAP + 4 * cap + 64, arrays, talking=True, once=once)
    rng = np.random.default_rng(cs)
    mine = rng.integers(0, 256, regs.nbytes, dtype=np.uint8)
    want = mine.copy()
    saved = regs.save(mine, cs)
    assert 2 <= len(saved) <= 3                                  # (merged, not one copy an array; far ones apart)
    mine[:] = 0                                                  # (its thread runs other CTAs meanwhile)
    other = rng.integers(0, 256, regs.nbytes, dtype=np.uint8)   # another thread's register file resumes it
    regs.restore(other, cs, saved)
    for o, n in [(o, w * cs) for o, w in arrays] + once:
        assert other[o:o + n].tobytes() == want[o:o + n].tobytes(), (o, n)
