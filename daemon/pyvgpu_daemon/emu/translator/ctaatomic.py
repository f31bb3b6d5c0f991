"""Stage 3 (ctagen.py) for kernels whose CTAs talk: atomics, volatile and memory-model-scoped global accesses,
fences, and the CTAs run one after the other with a way to set one aside.

What a CTA at a time keeps of the lockstep order (ctagen.py's module docstring): within a block a loop over the
threads holds at most one store of memory threads share, and an atomic counts as that store, so the threads'
read-modify-writes happen in thread order, the lockstep path's lane order (ops/atomic.py applies a vector
atomic in lane order too). An atomic is checked as a store of its size (threadgen's resolvers: alignment, a live
allocation or the CTA's window); one the C code cannot serve suspends with st[ST_WRITE] = threadgen.W_ATOMIC,
Python checks it as runtime/spaces.py checks a store (or raises its fault) and hands back the address of its
bytes, and the C code does the read-modify-write there. Its semantics are ops/atomic.combine's, written in C
(every operation and type of ops/atomic.ATOMIC_TYPES but the float and half-precision adds, which keep the other
paths).

Volatile, relaxed, acquire and release loads and stores are plain checked accesses here, and membar/fence and
nanosleep are nothing: the C function is the only code touching the launch's memory while it runs (a kernel
whose CTAs talk runs its chunks one at a time: Kernel.independent_ctas), so every load sees the last store in
this order, which is an order a GPU may give.

CTAs that talk run one after the other in ascending order (a schedule a GPU may pick: a look-back over earlier
CTAs finds them done). A CTA that waits for a *later* one (a spin on a flag another CTA sets, a hand-made grid
barrier among the chunk's CTAs) would never finish that way, where the lockstep path, which steps all of a
chunk's CTAs together, does. So a CTA that has run SLICE_TICKS of the C code's R_TICK suspensions (each
threadgen.TICK_EVERY thread-instructions), and at least as many thread-instructions as its threads running each
instruction of the kernel once (CtaRegisters.instructions: a CTA of a large straight-line kernel, CUB's onesweep,
is not set aside before it had the time to finish, which cost more in copies than its run), without finishing
is set aside while others of its chunk wait: its
threads' PCs and states and its registers (CtaRegisters: ctasize elements of each array) are copied into memory
Python owns, and the next CTA runs; set-aside CTAs resume in turn (round robin) until all are done. The memory is
at most the chunk's CTAs times their registers, what the lockstep chunk holds for the same lanes; a kernel that
never finishes still ends at the launch's instruction budget or deadline (Launch.account), as on the lockstep path.
Chunks still run in CTA order, one at a time, as on the lockstep path: a CTA waiting for one of a later chunk
times out on both.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..ops.atomic import HALF_ADD
from ..ptx import ir
from ..ptx.types import BITS, SIGNED
from .cfg import SHARING_OPCODES
from .cgen import NoC, ctype
from .instrs import _atom_mods
from . import threadgen
from .threadgen import R_DONE, R_SLOW, R_TICK, ST_CNT, ST_RESUME, ST_VAL, ST_WRITE, W_ATOMIC

SLICE_TICKS = 4                  # R_TICK suspensions a CTA runs before it is set aside while others wait
# What the C code serves of the instructions that let CTAs talk; the rest of cfg.SHARING_OPCODES (calls, traps,
# bulk copies, mbarriers) keeps the other paths.
ATOMIC_OPCODES = frozenset({"atom", "red"})
NOTHING_OPCODES = frozenset({"membar", "fence", "nanosleep"})
ACCESS_OPCODES = frozenset({"ld", "ldu", "st"}) | ATOMIC_OPCODES      # each may suspend (R_SLOW)


def sharing_reason(kernel) -> str | None:
    """Why a kernel's CTAs talk in a way the C code does not serve (None: atomics, volatile or scoped accesses
    and fences only, or nothing): calls, traps, bulk copies, mbarriers, mmio accesses."""
    for b in kernel.blocks:
        for ins in b.instrs + ([b.term] if b.term is not None else []):
            if ins.opcode in SHARING_OPCODES - ATOMIC_OPCODES - NOTHING_OPCODES:
                return f"{ins.opcode} at line {ins.line}"
            if "mmio" in ins.mods:
                return f"an mmio access at line {ins.line}"
    return None


def handles(ins: ir.Instr) -> bool:
    return ins.opcode in ATOMIC_OPCODES or ins.opcode in NOTHING_OPCODES


def emit(e, ins: ir.Instr) -> None:
    """C for an atom/red (a checked read-modify-write; module docstring) or a fence (nothing)."""
    if ins.opcode in NOTHING_OPCODES:
        return
    try:
        space, op, t = _atom_mods(ins)
    except CudaError:
        raise NoC from None
    if t in HALF_ADD or (op == "add" and t in ("f32", "f64")):
        # (float adds: which NaN operand's payload a sum of two NaNs keeps is the operand order of the machine add;
        # the C compiler may swap a commutative add's operands where NumPy's `old + b` keeps the old value's, so
        # the two paths stored different NaNs (review7): the other paths serve them)
        raise NoC
    w = BITS[t]
    size, ut = w // 8, f"uint{w}_t"
    decl, p, slow = threadgen._access(e, ins, space, size, True)
    b = _operand(e, ins.srcs[1], t, ins)
    c = _operand(e, ins.srcs[2], t, ins) if op == "cas" else None
    ob, nb, q = e.fresh("ao"), e.fresh("an"), e.fresh("aq")
    ask = threadgen._request(slow, size, True).replace(f"st[{ST_WRITE}] = 1;", f"st[{ST_WRITE}] = {W_ATOMIC};")
    # the slow path's address is used once (the pointer stays 0: a later access through it checks again); one
    # copy of the read-modify-write (CUB's onesweep kernel has 92 atomics, each in two copies of its loop)
    code = (f"{decl} uint8_t *{q} = {p}; if (__builtin_expect(!{q}, 0)) {{ "
            f"{e.suspend(R_SLOW, ask)} {p} = 0; {q} = (uint8_t *)(uintptr_t)st[{ST_VAL}]; }} "
            f"memcpy(&{ob}, {q}, {size}); {ut} {nb} = {_combine(op, t, ob, b, c)}; memcpy({q}, &{nb}, {size});")
    e.lines.append(f"{ut} {ob} = 0;")
    if ins.guard is None:
        e.lines.append(code)
    else:
        e.lines.append(f"if ({'!' if ins.guard[1] else ''}{e.var(ins.guard[0])}) {{ {code} }}")
    if ins.opcode == "atom" and ins.dsts:
        old = f"F{w}({ob})" if t in ("f32", "f64") else f"({ctype(t)}){ob}"
        e.write(ins.dsts[0], t, old, ins)


def _operand(e, o, t: str, ins: ir.Instr) -> str:
    """An atomic's operand as the bits of its type (ops/atomic: the lanes' operands cast to the memory's type)."""
    v = e.src(o, t, ins)
    w = BITS[t]
    return f"B{w}({v})" if t in ("f32", "f64") else f"(uint{w}_t)({v})"


def _combine(op: str, t: str, ob: str, b: str, c: str | None) -> str:
    """ops/atomic.combine in C, on the bits of the old value and the operands (uint<w>_t)."""
    w = BITS[t]
    ut = f"uint{w}_t"
    if op == "add":
        return f"({ut})({ob} + {b})"
    if op in ("min", "max"):
        st = f"int{w}_t" if t in SIGNED else ut
        cmp = "<" if op == "min" else ">"
        return f"(({st}){ob} {cmp} ({st}){b} ? {ob} : {b})"
    if op in ("and", "or", "xor"):
        return f"({ut})({ob} {dict(zip(('and', 'or', 'xor'), '&|^'))[op]} {b})"
    if op == "exch":
        return b
    if op == "cas":
        return f"({ob} == {b} ? {c} : {ob})"
    if op == "inc":
        return f"({ob} >= {b} ? ({ut})0 : ({ut})({ob} + 1u))"
    if op == "dec":
        return f"(({ob} == 0 || {ob} > {b}) ? {b} : ({ut})({ob} - 1u))"
    raise NoC


# ---------------------------------------------------------------------------------------------- set aside
@dataclass
class CtaRegisters:
    """Where a CTA's state lies in ctagen's register file: (byte offset, bytes per thread) of each array (the
    threads' PCs, the threads at the block run, the threads' states, bar.red's sites and predicates, then every
    register's), and (byte offset, bytes) of what it holds once per CTA."""
    nbytes: int
    arrays: list[tuple[int, int]] = field(default_factory=list)
    talking: bool = False         # the kernel's CTAs talk (not Kernel.independent_ctas): run_talking runs them
    instructions: int = 0         # the kernel's instructions (run_talking's slice: module docstring)
    once: list[tuple[int, int]] = field(default_factory=list)

    def _spans(self, cs: int):
        return [(o, w * cs) for o, w in self.arrays] + self.once

    def save(self, rf: np.ndarray, cs: int) -> list[np.ndarray]:
        return [rf[o:o + n].copy() for o, n in self._spans(cs)]

    def restore(self, rf: np.ndarray, cs: int, saved: list[np.ndarray]) -> None:
        for (o, n), a in zip(self._spans(cs), saved):
            rf[o:o + n] = a


def run_talking(code, S, L, T: int, st: np.ndarray, ctx, txp: int, stp: int) -> None:
    """The chunk's CTAs one after the other in ascending order, one set aside after SLICE_TICKS ticks while
    others wait and resumed in turn (module docstring); faults, bounds and accesses served by Python as
    ThreadCode._run_chunk has them."""
    cs = S.ctasize
    ncta = T // cs
    words = code.state
    rf = st[words:].view(np.uint8)
    rfp = stp + 8 * words
    queue = deque(range(ncta))
    slice_ticks = max(SLICE_TICKS, -(-code.registers.instructions * cs // threadgen.TICK_EVERY))
    aside: dict[int, tuple[np.ndarray, list[np.ndarray]]] = {}
    untold = 0                           # thread-instructions run and not yet told to the launch (< T)
    while queue:
        cl = queue.popleft()
        if cl in aside:
            words_saved, regs = aside.pop(cl)
            st[:words] = words_saved
            code.registers.restore(rf, cs, regs)
        else:
            st[:words] = 0
        ran = int(st[ST_CNT])
        ticks = 0
        while True:
            rc = code.fn(cl * cs, (cl + 1) * cs, ctx, txp, stp, rfp)
            cnt = int(st[ST_CNT])
            untold += cnt - ran
            ran = cnt
            steps, untold = divmod(untold, T)
            if steps > 0 or rc != R_SLOW:
                L.account(code.name, steps)
            if rc == R_DONE:
                break
            if rc == R_SLOW:
                code.suspended += 1
                threadgen._slow_access(S, int(st[threadgen.ST_I]), int(st[threadgen.ST_KIND]), int(st[ST_WRITE]),
                                       int(st[threadgen.ST_ADDR]), int(st[threadgen.ST_SIZE]), stp + 8 * ST_VAL)
                ctx = S.memctx()
            elif rc == R_TICK:
                ticks += 1
                if ticks >= slice_ticks and queue and int(st[ST_RESUME]) == code.res_dispatch:
                    aside[cl] = (st[:words].copy(), code.registers.save(rf, cs))
                    code.set_aside += 1
                    queue.append(cl)
                    break
            else:
                raise CudaError("cudaErrorLaunchFailure", f"{code.name}: native code returned {rc}")
