"""A large kernel's converged ALU loops as vector code (translator/ctavec.py): W threads a step, the scalar loop for
the last n % W threads and for a diverged CTA. A kernel with every covered operation family (logic, add/sub, shifts
by immediate and register counts over PTX's clamp, integer compares with predicate combinations, selp, popc, clz,
predicate logic, guarded writes, C locals, registers kept once per CTA, special registers) runs its ALU blocks
converged and diverged, in CTAs of sizes that are and are not multiples of W, one function and split into region
functions (ctasplit.py); every result is the lockstep NumPy path's, bit for bit, and a host model's."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, ctasplit, ctavec

from test_emu_ctagen import _both, every_barrier_kernel  # noqa: F401 (autouse fixture)
from test_emu_threadgen import HEAD

# One ALU block (a, b, c, s: the thread's four input words; T: a temporary used in this block only, a C local).
# Results r100..r125, predicates p1..p17 stored as words r130..r146.
ALU = """
  and.b32 %r100, %rA, %rB;
  or.b32 %r101, %rA, %rC;
  xor.b32 %r102, %rB, %rC;
  not.b32 %r103, %rA;
  add.s32 %r104, %rA, %rB;
  sub.s32 %r105, %rA, %rC;
  add.u32 %r106, %rB, -12345;
  shl.b32 %r107, %rA, %rS;
  shr.u32 %r108, %rA, %rS;
  shr.s32 %r109, %rA, %rS;
  shr.b32 %r110, %rB, %rS;
  shl.b32 %r111, %rA, 7;
  shr.u32 %r112, %rA, 9;
  shr.s32 %r113, %rA, 31;
  shr.s32 %r114, %rB, 40;
  shl.b32 %r115, %rB, 32;
  popc.b32 %r116, %rA;
  clz.b32 %r117, %rB;
  clz.b32 %r118, %rS;
  setp.lt.s32 %p1, %rA, %rB;
  setp.lo.u32 %p2, %rA, %rB;
  setp.eq.u32 %p3, %rC, %rS;
  setp.ge.s32.and %p4|%p5, %rA, %rC, %p1;
  setp.ne.u32.or %p6, %rB, 0, %p2;
  setp.gt.s32.xor %p7|%p8, %rA, %rS, %p3;
  setp.hs.u32 %p14, %rC, %rA;
  and.pred %p9, %p1, %p2;
  or.pred %p10, %p3, %p4;
  xor.pred %p11, %p5, %p6;
  not.pred %p12, %p7;
  mov.pred %p13, %p8;
  selp.b32 %r119, %rA, %rB, %p9;
  mov.u32 %r120, %rC;
  @%p11 not.b32 %r120, %rA;
  @!%p12 add.s32 %r120, %r120, 5;
  @%p1 setp.le.s32 %p13, %rA, %rC;
  @!%p2 shr.s32 %r120, %r120, %rS;
  mov.u32 %r121, %tid.x;
  add.s32 %r122, %r190, %r121;
  add.s32 %rT, %rA, %rS;
  xor.b32 %rT, %rT, %rB;
  shl.b32 %rT, %rT, 3;
  sub.s32 %r123, %rT, %rC;
  setp.ls.u32 %p1, %rS, 31;
  setp.hi.u32 %p2, %rS, 100;
  selp.u32 %r124, 7, %rA, %p1;
  selp.s32 %r125, %rB, -1, %p2;
  setp.ne.u32 %p15, %rA, %rB;
  setp.lo.u32.and %p15|%p16, %rC, %rS, %p15;
  mov.pred %p17, %p3;
  @%p15 setp.hi.u32 %p15|%p17, %rA, %rC;
""" + "".join(f"  selp.u32 %r{129 + k}, 1, 0, %p{k};\n" for k in range(1, 18))
OUTS = list(range(100, 126)) + list(range(130, 147))

# Threads below `lim` take ALT (the second block), the others the first: both diverged when 0 < lim < the CTA's
# size; then every result stored at JOIN (converged again).
KERNEL = HEAD + f"""
.visible .entry alu(.param .u64 out, .param .u64 in, .param .u32 lim)
{{
  .reg .pred %p<24>; .reg .b32 %r<200>; .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [in];
  ld.param.u32 %r190, [lim];
  mov.u32 %r191, %ntid.x;
  mov.u32 %r192, %ctaid.x;
  mov.u32 %r193, %tid.x;
  mad.lo.s32 %r194, %r192, %r191, %r193;
  mul.wide.u32 %rd3, %r194, 16;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.v4.u32 {{%r1, %r2, %r3, %r4}}, [%rd4];
  mul.wide.u32 %rd5, %r194, {4 * len(OUTS)};
  add.s64 %rd6, %rd1, %rd5;
  bar.sync 0;
  setp.lt.u32 %p23, %r193, %r190;
  @%p23 bra ALT;
{ALU.replace('%rA', '%r1').replace('%rB', '%r2').replace('%rC', '%r3').replace('%rS', '%r4').replace('%rT', '%r150')}
  bra JOIN;
ALT:
{ALU.replace('%rA', '%r2').replace('%rB', '%r3').replace('%rC', '%r1').replace('%rS', '%r4').replace('%rT', '%r151')}
JOIN:
  bar.sync 0;
""" + "".join(f"  st.global.u32 [%rd6+{4 * k}], %r{r};\n" for k, r in enumerate(OUTS)) + """
  ret;
}
"""

_M = 0xFFFFFFFF


def _model(a: int, b: int, c: int, s: int, tid: int, lim: int) -> list[int]:
    """The ALU block's results for one thread (Python integers; PTX's shift clamp), in OUTS' order."""
    def i32(x):
        return x - (1 << 32) if x & 0x80000000 else x

    def sar(x, k):
        return (i32(x) >> min(k, 31)) & _M

    def shl(x, k):
        return (x << k) & _M if k < 32 else 0

    def shr(x, k):
        return x >> k if k < 32 else 0

    r = [a & b, a | c, b ^ c, ~a & _M, (a + b) & _M, (a - c) & _M, (b - 12345) & _M, shl(a, s), shr(a, s),
         sar(a, s), shr(b, s), shl(a, 7), a >> 9, sar(a, 31), sar(b, 40), 0, bin(a).count("1"),
         32 - b.bit_length(), 32 - s.bit_length()]
    p = [None] * 15
    p[1] = i32(a) < i32(b)
    p[2] = a < b
    p[3] = c == s
    p[4], p[5] = (i32(a) >= i32(c)) and p[1], (not i32(a) >= i32(c)) and p[1]
    p[6] = (b != 0) or p[2]
    p[7], p[8] = (i32(a) > i32(s)) != p[3], (not i32(a) > i32(s)) != p[3]
    p[14] = c >= a
    p[9], p[10], p[11], p[12], p[13] = p[1] and p[2], p[3] or p[4], p[5] != p[6], not p[7], p[8]
    r.append(a if p[9] else b)
    x = c
    if p[11]:
        x = ~a & _M
    if not p[12]:
        x = (x + 5) & _M
    if p[1]:
        p[13] = i32(a) <= i32(c)
    if not p[2]:
        x = sar(x, s)
    r += [x, tid, (lim + tid) & _M, ((shl(((a + s) & _M) ^ b, 3)) - c) & _M]
    p[1], p[2] = s <= 31, s > 100
    r += [7 if p[1] else a, b if p[2] else _M]
    p += [None] * 3
    # (c and the guard read before the writes: cgen.emit, ir.guard_overwritten)
    c0 = a != b
    p[15], p[16] = (c < s) and c0, (not c < s) and c0
    p[17] = p[3]
    if p[15]:
        p[15], p[17] = a > c, not a > c
    return r + [int(bool(p[k])) for k in range(1, 18)]


SPECIAL = [0, 1, 2, 7, 31, 32, 33, 40, 255, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, _M]


def _inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 32, (n, 4), dtype=np.uint64).astype(np.uint32)
    pick = rng.random((n, 4)) < 0.4
    x[pick] = rng.choice(np.array(SPECIAL, np.uint32), int(pick.sum()))
    x[:, 3] = np.where(rng.random(n) < 0.5, x[:, 3] % 40, x[:, 3])     # (shift counts: mostly around the width)
    return x


@pytest.fixture(autouse=True)
def large(monkeypatch):
    """The kernel emitted as a large kernel (ctagen.LARGE_INSTRUCTIONS: one copy of each loop, the ALU ones with
    their vector steps)."""
    monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)


def _launch(cs: int, lim: int, ctas: int = 2, seed: int = 1):
    n = cs * ctas
    data = _inputs(n, seed + cs + lim)

    def params(mem: DeviceMemory):
        out, src = mem.alloc(4 * len(OUTS) * n), mem.alloc(16 * n)
        mem.write(src, data.tobytes())
        return struct.pack("<QQI", out, src, lim), \
            lambda m: np.frombuffer(bytes(m.read(out, 4 * len(OUTS) * n)), np.uint32).reshape(n, len(OUTS)).copy()
    on, off, code = _both(KERNEL, "alu", ctas, cs, params)
    return data, on, off, code


def _expected(data: np.ndarray, cs: int, lim: int) -> np.ndarray:
    rows = []
    for i, (a, b, c, s) in enumerate(data.tolist()):
        tid = i % cs
        rows.append(_model(b, c, a, s, tid, lim) if tid < lim else _model(a, b, c, s, tid, lim))
    return np.array(rows, np.uint32)


@pytest.mark.parametrize("split", [False, True], ids=["one function", "regions"])
@pytest.mark.parametrize("cs, lim", [(64, 0), (37, 0), (5, 0), (256, 0), (64, 21), (37, 13), (37, 36), (3, 1)])
def test_alu_blocks_converged_and_diverged_keep_the_lockstep_bits(monkeypatch, split, cs, lim):
    """CTAs of cs threads, the threads below lim in the second ALU block (0: every thread in the first, converged;
    else both blocks diverged): the lockstep path's bits and the host model's; the vector steps are in the C."""
    if split:
        monkeypatch.setattr(ctasplit, "SPLIT_BYTES", 0)
        monkeypatch.setattr(ctasplit, "REGION_BYTES", 1)
    data, on, off, code = _launch(cs, lim)
    assert code is not None
    assert (on == off).all()
    assert (on == _expected(data, cs, lim)).all()


def test_the_vector_steps_are_emitted_for_covered_loops_only():
    """Both ALU blocks get vector steps (every instruction covered); with VECTOR_ALU off the C has none and the
    results are the same."""
    from test_emu_ctagen import _module
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(KERNEL, dict(native="on"), mem)
    k = mod.kernel("alu")
    assert isinstance(k.native_make(), ctagen.CtaCode)
    step = f"lic += {ctavec.W}"
    assert k.native_source.count(step) >= 2
    # (the block of loads, the loop of stores and mad/mul.wide stay scalar)
    assert "PVPOPC(" in k.native_source and "PVCLZ(" in k.native_source


def test_vector_alu_off_gives_the_same_bits(monkeypatch):
    data, on, off, _ = _launch(37, 13)
    monkeypatch.setattr(ctagen, "VECTOR_ALU", False)
    _, scalar, _, _ = _launch(37, 13)
    assert (on == scalar).all() and (on == off).all()
