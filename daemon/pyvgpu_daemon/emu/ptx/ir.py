"""The PTX intermediate representation shared by the parser (ptx/parser.py), the translator (translator/) and
the instruction semantics (ops/). Type names and sizes come from ptx/types.py.

The parser turns text into these dataclasses and nothing else; the translator turns them into Python block code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from .types import BYTES, TYPES


@dataclass(frozen=True)
class Reg:
    """A register or special register by its full name: '%r1', '%tid.x', '%SPL', or a scope-local 'low'."""
    name: str


@dataclass(frozen=True)
class Imm:
    """An immediate. `value` is a Python int for integer literals (as written, sign included) and for
    0f/0d literals the raw IEEE bits (`is_float_bits` set); decimal float literals give a float."""
    value: Union[int, float]
    is_float_bits: bool = False
    text: str = ""


@dataclass(frozen=True)
class Sym:
    """A module-level symbol used as a value: a variable's address, a function name, a label."""
    name: str


@dataclass(frozen=True)
class Addr:
    """A memory operand `[base+offset]`; base is a Reg, a Sym (variable or parameter name) or None (absolute).
    Texture and surface instructions name their object and coordinates as `[object, {c0, c1, ...}]`: `coords`."""
    base: Union[Reg, Sym, None]
    offset: int = 0
    coords: Union["Vec", None] = None


@dataclass(frozen=True)
class Vec:
    """A vector operand `{a, b, c, d}`; elements may be registers, immediates or '_' (Reg('_'))."""
    elems: tuple["Operand", ...]


Operand = Union[Reg, Imm, Sym, Addr, Vec]


@dataclass
class Instr:
    """One instruction. `mods` holds every dot-suffix in source order: 'add.rn.f32' -> opcode 'add',
    mods ('rn', 'f32'); 'ld.global.v4.f32' -> ('global', 'v4', 'f32'). `dsts` has two entries for
    'setp ... p|q' and 'shfl ... d|p'. `guard` is (predicate register name, negated)."""
    opcode: str
    mods: tuple[str, ...]
    dsts: list[Operand]
    srcs: list[Operand]
    guard: tuple[str, bool] | None = None
    line: int = 0
    text: str = ""                        # the source text, for error messages
    proto: str | None = None              # indirect call: the .callprototype / .calltargets label it names
    meta: object = None                   # the translator's annotations of its pseudo-instructions (inline.py)
    # Video instructions (vadd, vadd2, vmad, ...): each operand's selector in operand order (destinations, then
    # sources): 'b0', 'h1', 'h10', 'b3210', ... or '' for none, a leading '-' for a negated operand (vmad);
    # `%r2.b0` is Reg('%r2') with selector 'b0'. Empty for every other instruction.
    sel: tuple[str, ...] = ()

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(m for m in self.mods if m in TYPES)


def guard_overwritten(ins: Instr) -> bool:
    """Whether a guarded instruction writes its guard before its last destination (`@%p1 setp.lt.s32 %p1|%p2`):
    the guard is read once, before the instruction, so the later destinations' writes need its old value."""
    if ins.guard is None:
        return False
    names = [getattr(x, "name", None) for o in ins.dsts[:-1] for x in (o.elems if isinstance(o, Vec) else [o])]
    return ins.guard[0] in names


@dataclass
class RegDecl:
    """`.reg .f32 %f<12>;` -> RegDecl('f32', '%f', 12); `.reg .pred p;` -> RegDecl('pred', 'p', None)."""
    type: str
    name: str
    count: int | None


@dataclass
class VarDecl:
    """A .global/.const/.shared/.local variable. `init` holds the initializer's elements as written (ints,
    float bits or symbol names for address initializers); a short initializer zero-fills the rest."""
    space: str                            # 'global' | 'const' | 'shared' | 'local'
    name: str
    type: str                             # element type, e.g. 'b8', 'f32'
    align: int
    count: int | None                     # array length; None for a scalar; 0 for `[]` (extern dynamic shared)
    init: list[Union[int, float, str]] | None = None
    extern: bool = False
    attributes: tuple[str, ...] = ()       # e.g. ('managed',)

    @property
    def size(self) -> int:
        return BYTES[self.type] * (self.count if self.count else 1)


@dataclass
class Param:
    """An .entry/.func parameter: `.param .align 8 .b8 p[16]` -> Param('p', 'b8', 8, 16)."""
    name: str
    type: str
    align: int | None
    count: int | None

    @property
    def size(self) -> int:
        return BYTES[self.type] * (self.count or 1)


@dataclass(frozen=True)
class Signature:
    """The parameter lists of a call: a .func's declaration or a `.callprototype` (names `_` in prototypes)."""
    returns: tuple[Param, ...]
    params: tuple[Param, ...]


@dataclass
class Function:
    """An .entry (kernel) or .func. `body` interleaves Instr and label strings in source order; inline-asm
    scope registers are already renamed to unique names by the parser."""
    name: str
    is_entry: bool
    params: list[Param]
    returns: list[Param]
    regs: list[RegDecl] = field(default_factory=list)
    locals: list[VarDecl] = field(default_factory=list)     # .local and function-scope .shared declarations
    body: list[Union[Instr, str]] = field(default_factory=list)
    maxntid: tuple[int, ...] | None = None
    line: int = 0
    prototypes: dict[str, Signature] = field(default_factory=dict)    # `label: .callprototype ...`
    call_targets: dict[str, list[str]] = field(default_factory=dict)  # `label: .calltargets f, g`
    branch_targets: dict[str, list[str]] = field(default_factory=dict)  # `label: .branchtargets L1, L2`

    @property
    def signature(self) -> Signature:
        return Signature(tuple(self.returns), tuple(self.params))


@dataclass
class Module:
    version: str
    target: str                            # e.g. 'sm_75'
    address_size: int
    variables: list[VarDecl] = field(default_factory=list)
    functions: dict[str, Function] = field(default_factory=dict)
    externs: set[str] = field(default_factory=set)          # declared-only functions: vprintf, __assertfail, ...
    facts: dict = field(default_factory=dict)               # what the translator derives once per module
