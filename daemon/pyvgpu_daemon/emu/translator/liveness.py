"""Register liveness over a kernel's basic blocks: which registers hold values a later instruction may read.

Used to save only the live registers around out-of-line calls (inline.py: ocall / oreturn): the registers live
into the block after a call (where oreturn restores them) are the caller's values the call must preserve. The
analysis is the classic backward data-flow over the CFG of cfg.py. A guarded write may leave the old value, so
it does not end a register's liveness; calls do not count as writes (the callee's writes to its own activation's
registers are what the saving undoes).
"""
from __future__ import annotations

from ..ptx import ir
from .cfg import Block


class AnyRegister:
    """A register table that holds every name (reads_writes over registers of any kind)."""
    def __contains__(self, name) -> bool:
        return True


def operand_registers(o, regs, into: list) -> None:
    """Append the registers operand o names (a register, an address's base and coordinates, a vector's elements)
    to `into`."""
    if isinstance(o, ir.Reg):
        n = o.name.lstrip("!")
        if n in regs:
            into.append(n)
    elif isinstance(o, ir.Addr):
        if isinstance(o.base, ir.Reg):
            operand_registers(o.base, regs, into)
        if o.coords is not None:              # texture and surface coordinates
            operand_registers(o.coords, regs, into)
    elif isinstance(o, ir.Vec):
        for e in o.elems:
            operand_registers(e, regs, into)


def reads_writes(ins: ir.Instr, regs, guarded_write_reads: bool) -> tuple[list[str], list[str]]:
    """(registers the instruction reads, in order; registers it writes). With guarded_write_reads a guarded
    write also reads its destination (the lanes the guard excludes keep the old value)."""
    reads: list[str] = []
    if ins.guard is not None:
        operand_registers(ir.Reg(ins.guard[0]), regs, reads)
    for o in ins.srcs:
        operand_registers(o, regs, reads)
    writes: list[str] = []
    for o in ins.dsts:
        operand_registers(o, regs, writes)
    if guarded_write_reads and ins.guard is not None:
        reads += [w for w in writes if w not in reads]
    return reads, writes


def _use_def(b: Block, regs: dict) -> tuple[set[str], set[str]]:
    """(registers read before any write in the block, registers certainly written in it)."""
    use: set[str] = set()
    kill: set[str] = set()
    for ins in b.instrs + ([b.term] if b.term is not None else []):
        reads, writes = reads_writes(ins, regs, False)
        use |= set(reads) - kill
        if ins.guard is None:
            kill |= set(writes)
    return use, kill


def successors(b: Block, labels: dict[str, int], nblocks: int) -> list[int]:
    t = b.term
    nxt = [b.index + 1] if b.index + 1 < nblocks else []
    if t is None or b.kind != "plain":
        return nxt
    if t.opcode == "bra":
        tgt = [labels[t.srcs[0].name]]
        return tgt + nxt if t.guard is not None else tgt
    if t.opcode == "brx":
        tgt = [labels[e.name] for e in t.srcs[1].elems]
        return tgt + nxt if t.guard is not None else tgt
    if t.opcode in ("ret", "exit", "oret"):
        return nxt if t.guard is not None else []
    return nxt                      # ocall: the call returns to the next block


def live_in(blocks: list[Block], labels: dict[str, int], regs: dict) -> list[set[str]]:
    """The registers live on entry to each block."""
    n = len(blocks)
    ud = [_use_def(b, regs) for b in blocks]
    succ = [successors(b, labels, n) for b in blocks]
    live: list[set[str]] = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out: set[str] = set()
            for s in succ[i]:
                out |= live[s]
            use, kill = ud[i]
            new = use | (out - kill)
            if new != live[i]:
                live[i] = new
                changed = True
    return live
