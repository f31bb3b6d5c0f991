"""Stage 3's runs of accesses through one register (ctagen.py's loops with suspension sites).

CUB's onesweep loads its 46 keys (and values) of a thread through one base register at constant offsets (0x0, 0x80,
... 0x1680), each checked against its pointer's allocation hint (threadgen's TG) with a suspension site of its own:
about 15 instructions an access where the load and the register's store are 2; and it reads its 46 digits' keys
back from shared memory through one register at 0x0, 0x400, ... with ALU instructions between (TSC's window check
each; its hottest loop, 3.9 % of a launch: bench/README.md, "sixteenth step"). A run: unguarded accesses of one
space (global through a 64-bit register, shared through a 32- or 64-bit one) and size through one register that
none of the run's instructions writes (registers are not memory: no store can change it), every offset a multiple
of the size apart, only ALU instructions between them. It is checked once: the range [base + least offset, base +
greatest offset + size) inside the hint's allocation (global) or the CTA's window (shared), the base aligned to the
size, then plain accesses (and the ALU instructions); where the check fails (no hint yet, another allocation, a
fault ahead) the run's existing code, each access checked and suspending, runs instead: it faults on exactly the
access the scalar code faults on, with its address and kind.
"""
from __future__ import annotations

import dataclasses

from pyvgpu_daemon.errors import CudaError

from ..ptx import ir
from .cgen import PURE_OPCODES, NoC, address_expr, ctype, load_form
from .liveness import reads_writes
from . import ctaatomic
from .threadgen import ThreadEmitter, store_form

MIN_RUN = 2                 # accesses in a run worth one check
MAX_SPAN = 1 << 16          # the greatest offset less the least (bytes): a run's range is one allocation's part


@dataclasses.dataclass(frozen=True)
class Access:
    """An access a run may hold: its space ("global", "shared"), base register, offset and size (bytes, all its
    elements)."""
    space: str
    base: str
    off: int
    size: int


def _access(e: ThreadEmitter, ins: ir.Instr) -> Access | None:
    if ins.opcode not in ("ld", "ldu", "st") or ins.guard is not None or "mmio" in ins.mods or ctaatomic.handles(ins):
        return None
    a = ins.srcs[0]
    if not isinstance(a, ir.Addr) or not isinstance(a.base, ir.Reg):
        return None
    try:
        kind, _, off = e.address(a, ins)
        if ins.opcode == "st":
            space, size, _, vals = store_form(e, ins)
            vsize, dsts = size * len(vals), []
        else:
            space, _, dsts, size, _ = load_form(e, ins)
            vsize = size * len(dsts)
    except (NoC, CudaError):        # (the access's own emission raises what it raises)
        return None
    width = e.regs.get(a.base.name)
    if kind != "reg" or vsize & (vsize - 1) or not (space == "global" and width == 64 or
                                                    space == "shared" and width in (32, 64)):
        return None
    if any(isinstance(d, ir.Reg) and d.name == a.base.name for d in dsts):
        return None                 # (it writes its own base: the run's base would change)
    return Access(space, a.base.name, off, vsize)


def _between(e: ThreadEmitter, ins: ir.Instr, base: str) -> bool:
    """Whether an instruction may lie between two accesses of a run through `base`: an ALU instruction (no access,
    no suspension) that does not write it."""
    return ins.opcode in PURE_OPCODES and not ctaatomic.handles(ins) and \
        base not in reads_writes(ins, e.regs, True)[1]


def run_length(e: ThreadEmitter, body: list[ir.Instr], i: int) -> int:
    """How many instructions from body[i] form one run: accesses through one register of one space and size, every
    offset a multiple of the size apart, ALU instructions between them (_between), ending at its last access (0:
    fewer than MIN_RUN accesses)."""
    first = _access(e, body[i])
    if first is None:
        return 0
    lo = hi = first.off
    count, end, j = 1, i, i + 1
    while j < len(body):
        ins = body[j]
        a = _access(e, ins) if ins.opcode in ("ld", "ldu", "st") else None
        if a is not None and (a.space, a.base, a.size) == (first.space, first.base, first.size) and \
                not (a.off - first.off) % a.size and max(hi, a.off) - min(lo, a.off) <= MAX_SPAN:
            lo, hi = min(lo, a.off), max(hi, a.off)
            count, end = count + 1, j
        elif not _between(e, ins, first.base):
            break
        j += 1
    return end - i + 1 if count >= MIN_RUN else 0


def emit_run(e: ThreadEmitter, run: list[ir.Instr]) -> None:
    """Emit a run (run_length): one range check, plain accesses; the run's usual code where the check fails."""
    accesses = {id(ins): a for ins in run if (a := _access(e, ins)) is not None}
    first = accesses[id(run[0])]
    lo = min(a.off for a in accesses.values())
    span = max(a.off for a in accesses.values()) - lo
    ga, gp = e.fresh("ga"), e.fresh("gp")
    if first.space == "global":
        hint = e.hint((first.base, first.size))     # (the hint the accesses' own checks keep)
        cond = (f"{hint}lim > UINT64_C({span:#x}) && {ga} - {hint}lo < {hint}lim - UINT64_C({span:#x}) && "
                f"!({ga} & UINT64_C({first.size - 1:#x}))")
        at = f"(uint8_t *)(uintptr_t)({ga} + hd)"
    else:                                           # (TSC's check: the offset inside the CTA's window)
        cond = (f"(int64_t){ga} >= 0 && (int64_t){ga} <= shl - {first.size + span} && "
                f"!({ga} & UINT64_C({first.size - 1:#x}))")
        at = f"sb + {ga}"
    start = len(e.lines)
    saved = dict(e.checked)
    try:
        for ins in run:
            a = accesses.get(id(ins))
            if a is None:
                e.emit(ins)
            else:
                _plain(e, ins, gp, a.off - lo)
        plain = " ".join(e.lines[start:])
        del e.lines[start:]
        e.checked = dict(saved)
        for ins in run:
            e.emit(ins)
        checked = " ".join(e.lines[start:])
    finally:
        del e.lines[start:]
    # (the pointers the usual code checked are declared in its branch: later accesses may not reuse them)
    e.checked = {key: p for key, p in e.checked.items() if saved.get(key) == p}
    e.lines.append(f"{{ uint64_t {ga} = {address_expr(e, run[0], 'reg', lo)}; "
                   f"if (__builtin_expect({cond}, 1)) {{ uint8_t *{gp} = {at}; {plain} }} else {{ {checked} }} }}")


def _plain(e: ThreadEmitter, ins: ir.Instr, gp: str, at: int) -> None:
    """An access of a run whose range passed: at `at` bytes past gp, as threadgen's _tld/_tst make it there."""
    if ins.opcode == "st":
        _, size, ct, vals = store_form(e, ins)
        svs = [e.fresh("sv") for _ in vals]
        e.lines.append("{ " + " ".join(f"{ct} {x} = {v};" for x, v in zip(svs, vals)) + " " +
                       " ".join(f"memcpy({gp} + {at + k * size}, &{x}, {size});" for k, x in enumerate(svs)) + " }")
        return
    _, _, dsts, size, lt = load_form(e, ins)
    xs = [e.fresh("tx") for _ in dsts]
    e.lines.append(" ".join(f"{ctype(lt)} {x}; memcpy(&{x}, {gp} + {at + k * size}, {size});"
                            for k, x in enumerate(xs)))
    for d, x in zip(dsts, xs):
        if isinstance(d, ir.Reg) and d.name == "_":
            continue
        e.write(d, lt, x, ins)
