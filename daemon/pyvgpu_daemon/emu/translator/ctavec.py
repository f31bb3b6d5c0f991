"""A large CTA-at-a-time kernel's converged ALU loops as vector code (ctagen.py): W threads a step in GCC's generic
vectors.

A large kernel's loop of ALU instructions (ctagen.kernel_source) is one scalar loop over the threads at its block,
a thread an iteration: at LEAN_O1 the compiler does not vectorise it (a guarded write, a select, is not if-converted
at -O1; -O2 -ftree-vectorize with ivdep would, at a compile time a cold run cannot pay). CUB's onesweep spends half
its native launch time in such loops (bench/README.md, "fifteenth step: onesweep's launch CPU"), all of them run
converged. So a loop whose instructions all have a form here gets a converged copy written as vectors (`loop_code`):
W threads a step, each instruction over W threads' elements, the scalar loop for the last n % W threads and for a
diverged CTA. Generic vectors, no target builtins or flags of its own: native.FLAGS' -march=native picks the
registers (x86-64's SSE2 at least), and GCC lowers a vector wider than them into several.

The forms give the scalar C forms' bits (cgen.py, which a differential test ties to the NumPy ops), lane for lane:
- the covered instructions: mov, and/or/xor/not, add/sub (no .sat/.cc), shl/shr (immediate or register count with
  ops/bits.build_shift's clamp: a count >= 32 gives 0, or sign fill for shr.s32), setp (integer compares, with
  .and/.or/.xor of a predicate), selp, popc and clz (bit tricks: SSE2 has neither), all on 32-bit registers and
  types (b32, u32, s32) and predicates; another type, width or instruction keeps the loop scalar (`NoVec`);
- a predicate is computed as a 32-bit vector of 0 or 1 (a vector compare's -1 made 1) and stored as its bytes;
- a guarded instruction keeps the old value where its guard is false (a mask select: C has no vector `?:`);
- the order of reads and writes within a thread is the scalar loop's: every instruction reads its registers'
  arrays (its guard and setp's c once, before its first write, as cgen reads them) and writes its results back at once (two registers may share an array: ctaregs.py), and threads are
  independent (a register's element belongs to its thread; a register kept once per CTA may be read, broadcast,
  but a loop that writes one stays scalar; C locals are vector locals, written before they are read: ctagen._locals).
"""
from __future__ import annotations

import numpy as np

from ..ptx import ir
from ..ptx.types import TYPES

W = 8                         # threads a vector step (bench/README.md, "sixteenth step": 8 against 4)

# Vector types and helpers (loads and stores through memcpy: the register arrays' elements are not aligned to a
# vector). __builtin_convertvector is GCC 9's and clang's; an older GCC builds the widened vector element by element.
PRELUDE = f"""
typedef uint32_t pv_u32 __attribute__((vector_size({4 * W})));
typedef int32_t pv_i32 __attribute__((vector_size({4 * W})));
typedef uint8_t pv_u8 __attribute__((vector_size({W})));
#define ZV ((pv_u32){{0}})
static inline pv_u32 PVL(const void *p) {{ pv_u32 x; memcpy(&x, p, sizeof x); return x; }}
static inline void PVS(void *p, pv_u32 x) {{ memcpy(p, &x, sizeof x); }}
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9)
static inline pv_u32 PVLP(const uint8_t *p) {{ pv_u8 x; memcpy(&x, p, sizeof x); return __builtin_convertvector(x, pv_u32); }}
static inline void PVSP(uint8_t *p, pv_u32 x) {{ pv_u8 y = __builtin_convertvector(x, pv_u8); memcpy(p, &y, sizeof y); }}
#else
static inline pv_u32 PVLP(const uint8_t *p) {{ pv_u32 x; for (int k = 0; k < {W}; k++) x[k] = p[k]; return x; }}
static inline void PVSP(uint8_t *p, pv_u32 x) {{ for (int k = 0; k < {W}; k++) p[k] = (uint8_t)x[k]; }}
#endif
/* popc and clz of each element (ops/bits.py: clz of 0 is 32): SSE2 has neither instruction */
static inline pv_u32 PVPOPC(pv_u32 x) {{
    x = x - ((x >> 1) & 0x55555555u); x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0f0f0f0fu; x = x + (x >> 8); x = x + (x >> 16); return x & 0x3fu;
}}
static inline pv_u32 PVCLZ(pv_u32 x) {{
    x |= x >> 1; x |= x >> 2; x |= x >> 4; x |= x >> 8; x |= x >> 16; return 32u - PVPOPC(x);
}}
"""

_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
        "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}
_LOGIC = {"and": "&", "or": "|", "xor": "^"}
_WORD = ("b32", "u32", "s32")


def _truth(x: str) -> str:
    """1 where a vector expression is not 0, else 0."""
    return f"(pv_u32)(-({x} != ZV))"


class NoVec(Exception):
    """The loop has an instruction, operand or register without a vector form here: it stays scalar."""


class VecEmitter:
    """The vector statements of one loop's step (W threads from lic on) of a CtaEmitter `e` (its registers' arrays,
    C locals and registers kept once)."""

    def __init__(self, e) -> None:
        self.e = e
        self.lines: list[str] = []
        self.tmp = 0
        self.locals: dict[str, str] = {}       # a C local register -> its vector local
        self.guard_v: str | None = None        # the guard's value before the instruction, where it overwrites it

    def fresh(self) -> str:
        self.tmp += 1
        return f"pvt{self.tmp}"

    def _width(self, name: str) -> int:
        w = self.e.regs.get(name)
        if w not in (1, 32):
            raise NoVec
        return w

    def src(self, o, t: str, ins: ir.Instr) -> str:
        """A vector expression (pv_u32) of operand o read as type t (a 32-bit one, or pred: a predicate's bytes,
        0 or 1 as every write makes them)."""
        if isinstance(o, ir.Imm):
            v = self.e.imm(o, t, ins)
            if t == "pred":
                return f"((pv_u32){{0}} + {1 if v else 0}u)"
            return f"((pv_u32){{0}} + UINT32_C({int(np.asarray(v).view(np.uint32)):#x}))"
        if not isinstance(o, ir.Reg):
            raise NoVec
        neg = o.name.startswith("!")
        name = o.name[1:] if neg else o.name
        w = self._width(name)
        if (w == 1) != (t == "pred"):
            raise NoVec
        if neg and w != 1:
            raise NoVec
        if name in self.e.local:
            if name not in self.locals:
                raise NoVec                    # (read before written in the loop: ctagen._locals has none)
            x = self.locals[name]
        elif name in self.e.uniform:
            x = f"((pv_u32){{0}} + {self.e.array(name)}[0])"
        else:
            x = f"{'PVLP' if w == 1 else 'PVL'}(&{self.e.array(name)}[lic])"
        return f"({x} ^ 1u)" if neg else x

    def write(self, d, value: str, ins: ir.Instr, pred: bool = False) -> None:
        """d = value (a 32-bit vector; for a predicate made 0 or 1 as cgen's write makes it: value != 0), kept
        where a guard is false (a guard holds where its byte is not 0, negated where it is 0)."""
        if isinstance(d, ir.Reg) and d.name == "_":
            return
        if not isinstance(d, ir.Reg) or d.name.startswith("!") or d.name not in self.e.regs:
            raise NoVec
        w = self._width(d.name)
        if (w == 1) != pred or d.name in self.e.uniform:
            raise NoVec
        x = self.fresh()
        self.lines.append(f"pv_u32 {x} = {_truth(value) if pred else value};")
        if ins.guard is not None:
            g, gneg = ins.guard
            if self._width(g) != 1:
                raise NoVec
            m = self.fresh()
            # the guard's mask: -1 where it holds
            gv = self.guard_v or self.src(ir.Reg(g), "pred", ins)
            self.lines.append(f"pv_u32 {m} = (pv_u32)({gv} {'==' if gneg else '!='} ZV); "
                              f"{x} = ({x} & {m}) | ({self.src(d, 'pred' if pred else 'u32', ins)} & ~{m});")
        if d.name in self.e.local:
            if d.name not in self.locals:
                self.locals[d.name] = self.fresh()
                self.lines.append(f"pv_u32 {self.locals[d.name]};")
            self.lines.append(f"{self.locals[d.name]} = {x};")
        else:
            self.lines.append(f"{'PVSP' if pred else 'PVS'}(&{self.e.array(d.name)}[lic], {x});")

    def emit(self, ins: ir.Instr) -> None:
        h = _FORMS.get(ins.opcode)
        if h is None:
            raise NoVec
        if ir.guard_overwritten(ins):
            # (the guard is read before the instruction: its first destination may be the guard, cgen.emit)
            if self._width(ins.guard[0]) != 1:
                raise NoVec
            self.guard_v = self.fresh()
            self.lines.append(f"pv_u32 {self.guard_v} = {self.src(ir.Reg(ins.guard[0]), 'pred', ins)};")
        try:
            h(self, ins)
        finally:
            self.guard_v = None


def _one_type(ins: ir.Instr, allowed) -> tuple[str, set[str]]:
    types = [m for m in ins.mods if m in TYPES]
    if len(types) != 1 or types[0] not in allowed:
        raise NoVec
    return types[0], set(ins.mods) - set(types)


def _mov(v: VecEmitter, ins: ir.Instr) -> None:
    t, flags = _one_type(ins, _WORD + ("pred",))
    if flags or len(ins.srcs) != 1:
        raise NoVec
    v.write(ins.dsts[0], v.src(ins.srcs[0], t, ins), ins, t == "pred")


def _logic(v: VecEmitter, ins: ir.Instr) -> None:
    t, flags = _one_type(ins, _WORD + ("pred",))
    if flags:
        raise NoVec
    p = t == "pred"
    if ins.opcode == "not":
        a = v.src(ins.srcs[0], t, ins)
        v.write(ins.dsts[0], f"({a} ^ 1u)" if p else f"(~{a})", ins, p)
        return
    a, b = (v.src(s, t, ins) for s in ins.srcs[:2])
    v.write(ins.dsts[0], f"({a} {_LOGIC[ins.opcode]} {b})", ins, p)


def _add_sub(v: VecEmitter, ins: ir.Instr) -> None:
    t, flags = _one_type(ins, ("u32", "s32"))
    if flags:
        raise NoVec
    a, b = (v.src(s, "u32", ins) for s in ins.srcs[:2])
    v.write(ins.dsts[0], f"({a} {'+' if ins.opcode == 'add' else '-'} {b})", ins)


def _shift(v: VecEmitter, ins: ir.Instr) -> None:
    """ops/bits.build_shift's clamp (cgen._shift): a count >= 32 gives 0, or sign fill for shr.s32."""
    left = ins.opcode == "shl"
    t, flags = _one_type(ins, ("b32",) if left else _WORD)
    if flags:
        raise NoVec
    a = v.src(ins.srcs[0], "u32", ins)
    op = "<<" if left else ">>"
    arith = t == "s32" and not left
    c = ins.srcs[1]
    if isinstance(c, ir.Imm):
        k = int(np.asarray(v.e.imm(c, "u32", ins)).view(np.uint32))
        if arith:
            r = f"(pv_u32)((pv_i32){a} >> {min(k, 31)})"
        else:
            r = f"({a} {op} {k})" if k < 32 else "((pv_u32){0})"
    else:
        cv, m = v.fresh(), v.fresh()
        v.lines.append(f"pv_u32 {cv} = {v.src(c, 'u32', ins)}; pv_u32 {m} = (pv_u32)({cv} < ZV + 32u);")
        if arith:
            r = f"(pv_u32)((pv_i32){a} >> (pv_i32)(({cv} & {m}) | (31u & ~{m})))"
        else:
            r = f"(({a} {op} ({cv} & 31u)) & {m})"
    v.write(ins.dsts[0], r, ins)


def _setp(v: VecEmitter, ins: ir.Instr) -> None:
    """Integer compares (cgen._setp): the vector compare's -1/0 made 1/0; .and/.or/.xor with c read once, before
    the writes (`setp.lt.and.s32 %p1|%p2, a, b, %p1` combines both with the old %p1)."""
    t, flags = _one_type(ins, _WORD)
    boolop = flags & set(_LOGIC)
    rest = flags - boolop
    if len(rest) != 1 or len(boolop) > 1 or next(iter(rest)) not in _CMP:
        raise NoVec
    op = next(iter(rest))
    a, b = (v.src(s, "u32", ins) for s in ins.srcs[:2])
    if t == "s32":
        a, b = f"(pv_i32){a}", f"(pv_i32){b}"
    rv = v.fresh()
    v.lines.append(f"pv_u32 {rv} = (pv_u32)(-({a} {_CMP[op]} {b}));")
    results = [rv, f"({rv} ^ 1u)"][:len(ins.dsts)]
    if boolop:
        c = v.fresh()
        v.lines.append(f"pv_u32 {c} = {v.src(ins.srcs[2], 'pred', ins)};")
        results = [f"({x} {_LOGIC[next(iter(boolop))]} {c})" for x in results]
    for d, x in zip(ins.dsts, results):
        v.write(d, x, ins, True)


def _selp(v: VecEmitter, ins: ir.Instr) -> None:
    _one_type(ins, _WORD)
    if set(ins.mods) - set(_WORD):
        raise NoVec
    a, b = (v.src(s, "u32", ins) for s in ins.srcs[:2])
    m = v.fresh()
    v.lines.append(f"pv_u32 {m} = (pv_u32)({v.src(ins.srcs[2], 'pred', ins)} != ZV);")
    v.write(ins.dsts[0], f"(({a} & {m}) | ({b} & ~{m}))", ins)


def _count_bits(v: VecEmitter, ins: ir.Instr) -> None:
    t, flags = _one_type(ins, ("b32",))
    if flags:
        raise NoVec
    a = v.src(ins.srcs[0], "u32", ins)
    v.write(ins.dsts[0], f"{'PVPOPC' if ins.opcode == 'popc' else 'PVCLZ'}({a})", ins)


_FORMS = {"mov": _mov, "and": _logic, "or": _logic, "xor": _logic, "not": _logic, "add": _add_sub,
          "sub": _add_sub, "shl": _shift, "shr": _shift, "setp": _setp, "selp": _selp, "popc": _count_bits,
          "clz": _count_bits}


def loop_code(e, body: list[ir.Instr]) -> str | None:
    """The C statements of one vector step of an ALU loop (W threads from lic on), or None (an instruction without
    a vector form here)."""
    v = VecEmitter(e)
    try:
        for ins in body:
            v.emit(ins)
    except NoVec:
        return None
    return " ".join(v.lines)
