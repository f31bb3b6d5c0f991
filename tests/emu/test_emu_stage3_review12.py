"""review12: stage 3 and the paths beside it attacked where this stop changed them (vector ALU steps, memory loops,
the talk path, the cache key): each test compares the native paths with the lockstep NumPy path and a host model,
bit for bit, and fails on the code before its fix."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu import native
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen

from pyvgpu_daemon.errors import CudaError

from test_emu_ctagen import CTA, _both, _cta_code, _run, every_barrier_kernel  # noqa: F401 (autouse fixture)
from test_emu_coldkey import _daemon, _inputs, _records, _want, generated  # noqa: F401 (fixture)
from test_emu_coldkey import _run as _run_fmix
from test_emu_threadgen import HEAD, _module

# the paths: CTA at a time (ctagen), a thread at a time (threadgen), the lockstep path's runs of C (cgen), NumPy
PATHS = {"cta": dict(native="on"), "thread": dict(native="on", ctagen=False),
         "runs": dict(native="on", ctagen=False, threadgen=False), "numpy": dict(native="off")}


def _check_path(ptx: str, path: str) -> None:
    """The kernel runs on the path named (not on another one that declined it)."""
    mod = _module(ptx, PATHS[path], DeviceMemory(1 << 40, 1 << 24))
    code = mod.kernel("k").native_make() if path != "numpy" else None
    want = {"cta": ctagen.CtaCode, "thread": threadgen.ThreadCode}.get(path)
    assert want is None or type(code) is want, (path, type(code))
    assert path != "runs" or (code is not None and not isinstance(code, threadgen.ThreadCode))


def _guard_kernel(body: str) -> str:
    """Each thread: a, b from `in`; %p1 = a odd; body; out = (%p1, %p2) as words."""
    return HEAD + """
.visible .entry k(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<8>; .reg .b32 %r<40>; .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [in];
  mov.u32 %r30, %tid.x;
  mul.wide.u32 %rd3, %r30, 8;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.v2.u32 {%r1, %r2}, [%rd4];
  mul.wide.u32 %rd5, %r30, 8;
  add.s64 %rd6, %rd1, %rd5;
  and.b32 %r3, %r1, 1;
  setp.ne.u32 %p1, %r3, 0;
  setp.ne.u32 %p2, %r3, 1;
  bar.sync 0;
""" + body + """
  bar.sync 0;
  selp.u32 %r10, 1, 0, %p1;
  selp.u32 %r11, 1, 0, %p2;
  st.global.v2.u32 [%rd6], {%r10, %r11};
  ret;
}
"""


# (PTX, the host model of (%p1, %p2) from p1 = a odd, p2 = a even, lt = a < b): every source and the guard are read
# before the instruction writes (PTX), here where a destination is also the combining predicate c or the guard
SETP_CASES = {
    "c is the first destination": ("  setp.lt.u32.and %p1|%p2, %r1, %r2, %p1;\n",
                                   lambda p1, p2, lt: (lt & p1, ~lt & p1)),
    "c is the first destination (or)": ("  setp.lt.u32.or %p1|%p2, %r1, %r2, %p1;\n",
                                        lambda p1, p2, lt: (lt | p1, ~lt | p1)),
    "the guard is the first destination": ("  @%p1 setp.lt.u32 %p1|%p2, %r1, %r2;\n",
                                            lambda p1, p2, lt: (np.where(p1, lt, p1), np.where(p1, ~lt, p2))),
    "negated guard, first destination": ("  @!%p1 setp.lt.u32.xor %p1|%p2, %r1, %r2, %p1;\n",
                                         lambda p1, p2, lt: (np.where(~p1, lt ^ p1, p1), np.where(~p1, ~lt ^ p1, p2))),
}


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(SETP_CASES))
def test_setp_reads_its_combining_predicate_and_guard_before_it_writes(monkeypatch, case, path, large):
    """`setp.lt.and.u32 %p1|%p2, a, b, %p1` combines both results with the old %p1, and `@%p1 setp %p1|%p2` guards
    both writes with the old %p1: the C code read them again after the first write (cgen's setp and guarded writes;
    the lockstep path's guard too), a silent wrong %p2 in some threads."""
    if large:
        monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)
    monkeypatch.setattr(threadgen, "slower_reason", lambda kernel: None)     # (thread mode takes the kernel)
    body, model = SETP_CASES[case]
    n = 45
    rng = np.random.default_rng(len(case))
    data = rng.integers(0, 1 << 32, (n, 2), dtype=np.uint64).astype(np.uint32)

    def params(mem: DeviceMemory):
        out, src = mem.alloc(8 * n), mem.alloc(8 * n)
        mem.write(src, data.tobytes())
        return struct.pack("<QQ", out, src), \
            lambda m: np.frombuffer(bytes(m.read(out, 8 * n)), np.uint32).reshape(n, 2).copy()
    got, _ = _run(_guard_kernel(body), "k", PATHS[path], 1, n, params)
    _check_path(_guard_kernel(body), path)
    p1 = (data[:, 0] & 1) != 0
    want = np.stack(model(p1, ~p1, data[:, 0] < data[:, 1]), axis=1).astype(np.uint32)
    assert (got == want).all()


# ---------------------------------------------------------------- random ALU blocks (vecalu12's vector steps)
_NR, _NP = 12, 6
_SPECIAL = [0, 1, 2, 7, 31, 32, 33, 40, 255, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, 0xFFFFFFFF]


def _random_alu(rng: np.random.Generator, count: int) -> str:
    """`count` instructions of the forms stage 3's vector steps cover (32-bit and predicate mov, logic, add/sub,
    shifts with counts past the width and negative ones, integer setp with both destinations and c, selp, popc,
    clz), random registers (a destination that is also a source, the guard or c), random guards, immediates of
    PTX's edge values, a register kept once per CTA (%r20, a parameter) and %tid.x."""
    def reg() -> str:
        return f"%r{rng.integers(1, _NR + 1)}"

    def pred() -> str:
        return f"%p{rng.integers(1, _NP + 1)}"

    def src() -> str:
        x = rng.random()
        if x < 0.15:
            return str(int(rng.choice(_SPECIAL + [-1, -5, 3])))
        return "%r20" if x < 0.2 else "%tid.x" if x < 0.25 else reg()

    lines = []
    for _ in range(count):
        k = int(rng.integers(0, 11))
        w = ("b32", "u32", "s32")[rng.integers(0, 3)]
        if k == 0:
            ins = f"mov.{w} {reg()}, {src()};"
        elif k == 1 and rng.random() < 0.3:
            ins = f"{('and', 'or', 'xor')[rng.integers(0, 3)]}.pred {pred()}, {pred()}, " \
                  f"{'!' if rng.random() < .3 else ''}{pred()};"
        elif k == 1:
            ins = f"{('and', 'or', 'xor')[rng.integers(0, 3)]}.{w} {reg()}, {src()}, {src()};"
        elif k == 2:
            ins = f"not.pred {pred()}, {pred()};" if rng.random() < .3 else f"not.{w} {reg()}, {src()};"
        elif k == 3:
            ins = f"{('add', 'sub')[rng.integers(0, 2)]}.{('u32', 's32')[rng.integers(0, 2)]} {reg()}, {src()}, {src()};"
        elif k == 4:
            c = str(int(rng.choice([0, 1, 5, 31, 32, 33, 40, 255, 0xFFFFFFFF]))) if rng.random() < .4 else src()
            ins = f"shl.b32 {reg()}, {src()}, {c};" if rng.random() < .4 else f"shr.{w} {reg()}, {src()}, {c};"
        elif k in (5, 6):
            cmp = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs")[rng.integers(0, 10)]
            bo = ("", ".and", ".or", ".xor")[rng.integers(0, 4)]
            d = f"{pred()}|{pred()}" if rng.random() < .5 else pred()
            c = f", {'!' if rng.random() < .3 else ''}{pred()}" if bo else ""
            ins = f"setp.{cmp}.{w}{bo} {d}, {src()}, {src()}{c};"
        elif k == 7:
            ins = f"selp.{w} {reg()}, {src()}, {src()}, {pred()};"
        elif k == 8:
            ins = f"{('popc', 'clz')[rng.integers(0, 2)]}.b32 {reg()}, {src()};"
        elif k == 9:
            ins = f"mov.pred {pred()}, {pred() if rng.random() < .8 else int(rng.integers(0, 2))};"
        else:
            r = reg()
            ins = f"shr.s32 {r}, {r}, {r};"
        if rng.random() < 0.3:
            ins = f"@{'!' if rng.random() < .4 else ''}{pred()} {ins}"
        lines.append("  " + ins)
    return "\n".join(lines)


def _random_kernel(body: str) -> str:
    """Each thread loads _NR words, sets _NP predicates from their low bits; the threads below `lim` skip the
    block (the CTA diverged there), the others run it; every register and predicate is stored."""
    loads = "".join(f"  ld.global.u32 %r{k}, [%rd4+{4 * (k - 1)}];\n" for k in range(1, _NR + 1))
    preds = "".join(f"  and.b32 %r30, %r{k}, 1;\n  setp.ne.u32 %p{k}, %r30, 0;\n" for k in range(1, _NP + 1))
    stores = "".join(f"  st.global.u32 [%rd6+{4 * (k - 1)}], %r{k};\n" for k in range(1, _NR + 1)) + "".join(
        f"  selp.u32 %r30, 1, 0, %p{k};\n  st.global.u32 [%rd6+{4 * (_NR + k - 1)}], %r30;\n"
        for k in range(1, _NP + 1))
    return HEAD + f"""
.visible .entry k(.param .u64 out, .param .u64 in, .param .u32 u, .param .u32 lim)
{{
  .reg .pred %p<20>; .reg .b32 %r<40>; .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [in];
  ld.param.u32 %r20, [u];
  ld.param.u32 %r22, [lim];
  mov.u32 %r21, %tid.x;
  mov.u32 %r31, %ntid.x;
  mov.u32 %r32, %ctaid.x;
  mad.lo.s32 %r33, %r32, %r31, %r21;
  mul.wide.u32 %rd3, %r33, {4 * _NR};
  add.s64 %rd4, %rd2, %rd3;
{loads}{preds}  mul.wide.u32 %rd5, %r33, {4 * (_NR + _NP)};
  add.s64 %rd6, %rd1, %rd5;
  bar.sync 0;
  setp.lt.u32 %p19, %r21, %r22;
  @%p19 bra ALT;
{body}
  bra JOIN;
ALT:
  xor.b32 %r1, %r1, 12345;
JOIN:
  bar.sync 0;
{stores}  ret;
}}
"""


@pytest.mark.parametrize("seed, cs, lim", [(1, 9, 0), (2, 23, 0), (3, 16, 0), (4, 37, 5), (5, 8, 0), (6, 31, 0),
                                           (7, 44, 0), (8, 13, 2)])
def test_random_alu_blocks_of_a_large_kernel_keep_the_lockstep_bits(monkeypatch, seed, cs, lim):
    """A large kernel's ALU block (its vector steps where every instruction has a vector form: ctavec.py), run by
    CTAs of sizes that are and are not multiples of the vector width, converged and diverged: the lockstep path's
    bits for every register and predicate."""
    monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)
    rng = np.random.default_rng(seed)
    ptx = _random_kernel(_random_alu(rng, 40))
    ctas, n = 2, 2 * cs
    data = rng.integers(0, 1 << 32, (n, _NR), dtype=np.uint64).astype(np.uint32)
    pick = rng.random((n, _NR)) < 0.4
    data[pick] = rng.choice(np.array(_SPECIAL, np.uint32), int(pick.sum()))
    u = int(rng.choice(_SPECIAL))

    def params(mem: DeviceMemory):
        out, src = mem.alloc(4 * (_NR + _NP) * n), mem.alloc(4 * _NR * n)
        mem.write(src, data.tobytes())
        return struct.pack("<QQII", out, src, u, lim), \
            lambda m: np.frombuffer(bytes(m.read(out, 4 * (_NR + _NP) * n)), np.uint32).reshape(n, -1).copy()
    on, off, code = _both(ptx, "k", ctas, cs, params)
    assert code is not None
    assert (on == off).all(), np.argwhere(on != off)[:8].tolist()


# ---------------------------------------------------------------- a kernel's record (coldkey12's native.record)
@pytest.mark.parametrize("depth", [100_000, native.MAX_RECORD_BYTES // 2 - 8], ids=["deep", "as deep as the bound"])
def test_a_record_nested_past_the_parsers_recursion_limit_is_a_miss(generated, tmp_path, depth):
    """A record of deeply nested JSON (within MAX_RECORD_BYTES): json.loads raises RecursionError, not ValueError;
    it escaped native.record, the kernel's build failed and its launches ran as NumPy code from then on, in every
    daemon that read the record, instead of a miss that generates the C and writes the record again."""
    x = _inputs()
    want = _want(x)
    mod, mem = _daemon()
    assert _run_fmix(mod, mem, x) == want and generated == [1]
    [path] = _records(tmp_path)
    path.write_text("[" * depth + "]" * depth)
    mod2, mem2 = _daemon()
    assert _run_fmix(mod2, mem2, x) == want and generated == [2]
    assert native.record(path.stem) is not None                      # (written again)


# ---------------------------------------------------------------- runs through one register (memloop12's ctarun.py)
# Each thread g owns 32 bytes of buf: %rd5 = buf + 8 + 32 g (+ delta for thread `who` of CTA `cta`): a run of global
# loads through %rd5 (16, 0, 8: its least offset not its first), then stores and loads at offsets -8 .. 16 (a load
# reading what a store wrote; ALU between); then shared stores and loads through a 64-bit register (sh + 16 tid at
# 0, 4, 8); out[g] a mix.
STORE_RUNS = HEAD + """
.visible .entry st(.param .u64 out, .param .u64 buf, .param .u64 delta, .param .u32 who, .param .u32 cta)
{
  .reg .pred %p<4>; .reg .b32 %r<40>; .reg .b64 %rd<16>;
  .shared .align 8 .b8 sh[1024];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [buf]; ld.param.u64 %rd9, [delta];
  ld.param.u32 %r10, [who]; ld.param.u32 %r11, [cta];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 32;
  setp.eq.u32 %p1, %r1, %r10;
  setp.eq.and.u32 %p1, %r3, %r11, %p1;
  selp.b64 %rd10, %rd9, 0, %p1;
  add.s64 %rd4, %rd2, %rd3;
  add.s64 %rd5, %rd4, %rd10;
  bar.sync 0;
  ld.global.u32 %r24, [%rd5+16];
  ld.global.u32 %r25, [%rd5];
  ld.global.u32 %r20, [%rd5+8];
  add.s32 %r21, %r20, %r4;
  st.global.u32 [%rd5+-8], %r21;
  ld.global.u32 %r22, [%rd5+-8];
  xor.b32 %r23, %r22, 0x5555;
  st.global.u32 [%rd5+16], %r23;
  ld.global.u32 %r26, [%rd5+16];
  xor.b32 %r24, %r24, %r26;
  bar.sync 0;
  mov.u64 %rd11, sh;
  cvt.u64.u32 %rd12, %r1;
  shl.b64 %rd12, %rd12, 4;
  add.s64 %rd13, %rd11, %rd12;
  st.shared.u32 [%rd13+8], %r24;
  ld.shared.u32 %r26, [%rd13+8];
  st.shared.u32 [%rd13], %r25;
  add.s32 %r27, %r26, 1;
  st.shared.u32 [%rd13+4], %r27;
  ld.shared.u32 %r28, [%rd13+4];
  ld.shared.u32 %r29, [%rd13];
  bar.sync 0;
  mad.lo.s32 %r30, %r28, 3, %r29;
  mad.lo.s32 %r30, %r22, 5, %r30;
  mul.wide.u32 %rd14, %r4, 4;
  add.s64 %rd7, %rd1, %rd14;
  st.global.u32 [%rd7], %r30;
  ret;
}
"""
_SG, _SB = 4, 64


def _store_runs(mode: dict, delta: int, who: int, cta: int):
    """(out's and buf's words, or the error's code and message; the CTA code or None)."""
    n = _SG * _SB
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(STORE_RUNS, mode, mem)
    out, buf = mem.alloc(4 * n), mem.alloc(32 * n)
    mem.write(buf, (np.arange(8 * n, dtype=np.uint32) * np.uint32(2654435761)).tobytes())
    try:
        mod.launch("st", (_SG, 1, 1), (_SB, 1, 1), 0, struct.pack("<QQqII", out, buf + 8, delta, who, cta))
        result = (np.frombuffer(bytes(mem.read(out, 4 * n)), np.uint32).copy(),
                  np.frombuffer(bytes(mem.read(buf, 32 * n)), np.uint32).copy())
    except CudaError as e:
        result = (e.code, e.message)
    return result, (_cta_code(mod, "st") if mode is CTA else None)


@pytest.mark.parametrize("large", [True, False], ids=["large", "small"])
@pytest.mark.parametrize("tick", [None, 5], ids=["plain", "suspended every 5"])
@pytest.mark.parametrize("delta, who, cta", [(0, 0, 0), (8, 63, 3), (12, 63, 3), (16, 63, 3), (-8, 0, 0),
                                             (4, 7, 1), (2, 7, 1), (-(1 << 30), 3, 2)],
                         ids=["inside", "the run past the end", "the run 4 past", "the run 8 past",
                              "before: the previous allocation", "shifted", "misaligned", "far before"])
def test_runs_of_stores_and_loads_keep_the_lockstep_bits_and_errors(monkeypatch, large, tick, delta, who, cta):
    """A run whose first access is not its least offset, past its allocation's end by 0-8 bytes or before it, beside
    global stores at negative offsets and loads of what they wrote, and a 64-bit shared base (ctarun.py): the
    lockstep path's memory and results, or its error (the access that faults, its address and kind)."""
    if large:
        monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    on, code = _store_runs(CTA, delta, who, cta)
    off, _ = _store_runs(PATHS["numpy"], delta, who, cta)
    assert code is not None
    if isinstance(off[0], np.ndarray):
        assert isinstance(on[0], np.ndarray), on
        assert (on[0] == off[0]).all() and (on[1] == off[1]).all()
    else:
        assert on == off
