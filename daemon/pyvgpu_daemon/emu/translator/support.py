"""Whether the translator implements an instruction, decided from the instruction alone (no kernel, no registers):
what a module load checks for every opcode the module uses, before any kernel is translated (emu/module.py), so
that PTX the emulator cannot run is refused at load, by name and line, as a JIT compiler would refuse it.

`check` raises the cudaErrorInvalidPtx the emitters would raise for the instruction's opcode and modifiers (ALU
semantics: ops/build_alu; memory, atomics, moves, textures: instrs.FORMS; barriers and warp operations:
control.check_form). Barriers are the one family whose immediate operands decide it (ids, thread counts): every
barrier statement of a module is checked (OPERAND_CHECKED); for the rest one statement per opcode text stands for
all. What depends on operands and registers (a vector's length, a load into a predicate) is checked when the kernel
is translated.
"""
from __future__ import annotations

from ..ops import build_alu, is_alu
from ..ptx import ir
from .cfg import BRANCHES, WARP_OPS
from .codegen import err_ptx
from .control import check_form
from .instrs import EMITTERS, FORMS

OPERAND_CHECKED = frozenset({"bar", "barrier"})
_BARRIERS_AND_WARPS = OPERAND_CHECKED | WARP_OPS


def check(ins: ir.Instr) -> None:
    """Raise cudaErrorInvalidPtx (naming the instruction and its line) unless the translator implements it."""
    op = ins.opcode
    if is_alu(op):
        build_alu(ins)
    elif op in _BARRIERS_AND_WARPS:
        check_form(ins)
    elif op in FORMS:
        FORMS[op](ins)
    elif op not in EMITTERS and op not in BRANCHES:
        raise err_ptx(ins, "the emulator does not implement this instruction")
