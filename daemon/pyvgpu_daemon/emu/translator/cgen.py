"""C for runs of ALU instructions: the native path of the interpreter (emu/native.py builds and loads it).

A *run* is a stretch of consecutive instructions of a converged block that all have a C form here. The code
generator (codegen.py, kernel.py) replaces each run of at least MIN_RUN instructions by one call of a C function
that loops over the lanes: registers the run reads become input arrays, registers it writes that anything after
it reads become output arrays, everything else stays in C locals. The loop has no calls and no branches besides
selects, so the C compiler vectorises it (AVX2/AVX-512 with -march=native), typically 20-50x the speed of the
same instructions as NumPy calls.

Every C form gives exactly the bits the instruction's NumPy function in ops/ gives (a differential test checks
each one on random and special values): IEEE single/double add, sub, mul, div, sqrt and fused multiply-add are
correctly rounded in both; .ftz flushes operands and results as ops/common.ftz does; min/max follow
ops/floating._minmax; ex2/lg2.approx.f32 are the same double-precision steps as ops/floating.ex2_f32/lg2_f32.
Loads (ld/ldu of the global, const, shared, local, param and generic spaces, through a register or at a constant
address) are part of runs too: the C function gets the chunk's memory (MemCtx: the device heap and its live
allocations, the parameter buffer, shared and local memory with each lane's base) and checks every access as
runtime/spaces.py does (alignment to the access size, every byte inside one live allocation or inside its window).
Shared and local stores are part of runs too, after the run's loads (a load after a store starts the next run):
the lane loop checks each store and keeps its pointers and values, and the stores happen after the loop, store
by store and lane by lane, as the lockstep NumPy code makes them. So a run's loads read memory as it was when the
run began, whatever the lane order: the same values as the lockstep NumPy code. An access it cannot serve (out of
range, misaligned, an address in a reserved range or a peer's memory) makes the function return 1 with nothing
written but its fresh output arrays; the generated code then runs the run's instructions as NumPy code, which
serves the access or raises the fault it is (kernel.py, `_emit_run`), so an error is the same error as without
native code.
Instructions without such a form (sin, cos, tanh .approx, which use NumPy's own float32 kernels; directed
rounding; half precision; global and generic stores, whose coalesced NumPy form beats a scalar C loop; atomics,
control and warp operations) end a run and stay NumPy calls.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..layout import LOC_WIN, PAR_WIN, SH_WIN, WIN_SIZE
from ..ops.floating import EX2_CLAMP, EX2_COEFFS, LG2_COEFFS, LG2_SCALE, SQRT2
from ..ptx import ir
from ..ptx.types import BITS, SIGNED, TYPES
from .instrs import _memmods
from .liveness import reads_writes

MIN_RUN = 2                     # launches with native code have >= 2**18 threads: a call beats two NumPy ops
LOAD_RUN_LANES = 8192           # Run.choose_lanes
LOAD_RUN_LONG = 8

PRELUDE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>
static inline float F32(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }
static inline uint32_t B32(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }
static inline double F64(uint64_t x) { double f; memcpy(&f, &x, 8); return f; }
static inline uint64_t B64(double f) { uint64_t x; memcpy(&x, &f, 8); return x; }
/* ops/common.ftz: x * (|x| >= smallest normal) keeps NaN and inf, turns subnormals into zeros of their sign */
static inline float FTZ32(float x) { return x * (float)(fabsf(x) >= FLT_MIN); }
static inline double FTZ64(double x) { return x * (double)(fabs(x) >= DBL_MIN); }
/* ops/common.canon_nan32 and nan_first64: the GPU's NaN results (f32: canonical; f64: the first NaN operand
 * quieted, else the default NaN), written out so that no operand order the compiler picks can change them */
static inline float CAN32(float r) { return r != r ? F32(UINT32_C(0x7fffffff)) : r; }
static inline double Q64(double x) { return F64(B64(x) | UINT64_C(0x0008000000000000)); }
static inline double NAN64(double r, double a, double b, double c) {
    return r == r ? r : a != a ? Q64(a) : b != b ? Q64(b) : c != c ? Q64(c) : F64(UINT64_C(0xfff8000000000000));
}
"""

# The chunk's memory as loads in runs see it (MemCtx below is its ctypes twin; runtime/spaces.py fills it). Each
# helper returns the address of an access of s bytes (a power of two) or 0 when runtime/spaces.py would not serve it
# from there: misaligned, outside every live allocation of the heap or outside its window. The global check is
# DeviceMemory.check_access's (every byte inside one live allocation), with the allocation of the previous lane as a
# first guess.
PRELUDE += f"""typedef struct {{
    uint8_t *heap; uint64_t base, cap;
    const uint64_t *starts, *ends; int64_t nalloc;
    const uint8_t *pbuf; int64_t psize;
    uint8_t *smem; int64_t shsize; const int64_t *cta_off;
    uint8_t *lmem; int64_t frame; const int64_t *lane_off;
}} MemCtx;
typedef struct {{ uint64_t lo, hi; }} Span;       /* a live allocation inside the heap: [lo, hi) */
static const uint8_t *PGS(const MemCtx *M, uint64_t a, uint64_t s, Span *h) {{
    if (a & (s - 1)) return 0;
    int64_t lo = 0, hi = M->nalloc;
    while (lo < hi) {{ int64_t mid = (lo + hi) >> 1; if (M->starts[mid] <= a) lo = mid + 1; else hi = mid; }}
    int64_t k = lo - 1;
    if (k < 0 || a >= M->ends[k] || M->ends[k] - a < s) return 0;
    if (M->starts[k] < M->base || M->ends[k] - M->base > M->cap) return 0;
    h->lo = M->starts[k]; h->hi = M->ends[k];
    return M->heap + (a - M->base);
}}
/* the allocation of the previous access first: one compare per bound for a warp reading one array */
static inline const uint8_t *PG(const MemCtx *M, uint64_t a, uint64_t s, Span *h) {{
    if (!(a & (s - 1)) && a >= h->lo && a < h->hi && h->hi - a >= s) return M->heap + (a - M->base);
    return PGS(M, a, s, h);
}}
static inline const uint8_t *PW(uint8_t *buf, int64_t limit, int64_t base, int64_t off, int64_t s) {{
    if (off < 0 || off > limit - s || (off & (s - 1))) return 0;
    return buf + base + off;
}}
/* shared and local accesses without a branch (so that the C compiler vectorises the lane loop): an access
 * runtime/spaces.py would not serve sets *bad (the run then declines after its loop) and reads zeros instead */
static const uint8_t ZERO16[16];
static inline const uint8_t *PWV(uint8_t *buf, int64_t limit, int64_t base, int64_t off, int64_t s, int64_t *bad) {{
    int64_t ok = (off >= 0) & (off <= limit - s) & ((off & (s - 1)) == 0);
    *bad |= ok ^ 1;
    return ok ? buf + base + off : ZERO16;
}}
static inline const uint8_t *PSV(const MemCtx *M, int64_t off, int64_t s, int64_t i, int64_t *bad) {{
    return PWV(M->smem, M->shsize, M->cta_off[i], off, s, bad);
}}
static inline const uint8_t *PLV(const MemCtx *M, int64_t off, int64_t s, int64_t i, int64_t *bad) {{
    return PWV(M->lmem, M->frame, M->lane_off[i], off, s, bad);
}}
static inline const uint8_t *PS(const MemCtx *M, int64_t off, int64_t s, int64_t i) {{
    return PW(M->smem, M->shsize, M->cta_off[i], off, s);
}}
static inline const uint8_t *PL(const MemCtx *M, int64_t off, int64_t s, int64_t i) {{
    return PW(M->lmem, M->frame, M->lane_off[i], off, s);
}}
static inline const uint8_t *PP(const MemCtx *M, int64_t off, int64_t s) {{
    return PW((uint8_t *)M->pbuf, M->psize, 0, off, s);
}}
/* generic addresses: the shared, local and kernel-parameter windows (emu/layout.py), else global */
static inline const uint8_t *PGEN(const MemCtx *M, uint64_t a, uint64_t s, int64_t i, Span *hint) {{
    if (a - UINT64_C({SH_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return PS(M, (int64_t)(a - UINT64_C({SH_WIN:#x})), s, i);
    if (a - UINT64_C({LOC_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return PL(M, (int64_t)(a - UINT64_C({LOC_WIN:#x})), s, i);
    if (a - UINT64_C({PAR_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return PP(M, (int64_t)(a - UINT64_C({PAR_WIN:#x})), s);
    return PG(M, a, s, hint);
}}
/* .param addresses in registers: a kernel parameter's (its window), else a call sequence's variable (local) */
static inline const uint8_t *PPR(const MemCtx *M, uint64_t a, uint64_t s, int64_t i) {{
    if (a - UINT64_C({PAR_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return PP(M, (int64_t)(a - UINT64_C({PAR_WIN:#x})), s);
    return PL(M, (int64_t)a, s, i);
}}
"""


class MemCtx(ctypes.Structure):
    """The C MemCtx of PRELUDE (same fields, same order)."""
    _fields_ = [("heap", ctypes.c_void_p), ("base", ctypes.c_uint64), ("cap", ctypes.c_uint64),
                ("starts", ctypes.c_void_p), ("ends", ctypes.c_void_p), ("nalloc", ctypes.c_int64),
                ("pbuf", ctypes.c_void_p), ("psize", ctypes.c_int64),
                ("smem", ctypes.c_void_p), ("shsize", ctypes.c_int64), ("cta_off", ctypes.c_void_p),
                ("lmem", ctypes.c_void_p), ("frame", ctypes.c_int64), ("lane_off", ctypes.c_void_p)]


def _horner(var: str, coeffs: tuple, acc: str) -> str:
    """C statements of ops/floating's Horner loops: acc = c[-1]; acc = acc * var + c[k] downwards."""
    steps = [f"double {acc} = {coeffs[-1].hex()};"]
    steps += [f"{acc} = {acc} * {var} + {c.hex()};" for c in coeffs[-2::-1]]
    return " ".join(steps)


# ops/floating.ex2_f32 and lg2_f32, step for step (same constants, same order, no contraction: -ffp-contract=off).
PRELUDE += f"""static inline float EX2F(float x) {{
    double d = (double)x; int nan = d != d;
    d = nan ? 0.0 : d; d = d < -{EX2_CLAMP!r} ? -{EX2_CLAMP!r} : d; d = d > {EX2_CLAMP!r} ? {EX2_CLAMP!r} : d;
    double n = rint(d); double f = d - n;
    {_horner("f", EX2_COEFFS, "p")}
    double r = p * F64((uint64_t)((int64_t)n + 1023) << 52);
    return nan ? F32(UINT32_C(0x7fffffff)) : (float)r;
}}
static inline float LG2F(float x) {{
    double d = (double)x; uint64_t bits = B64(d);
    int64_t e = (int64_t)((bits >> 52) & 0x7ff) - 1023;
    double m = F64((bits & UINT64_C(0x000fffffffffffff)) | UINT64_C(0x3ff0000000000000));
    int big = m > {SQRT2.hex()};
    m = big ? m * 0.5 : m; e = big ? e + 1 : e;
    double s = (m - 1.0) / (m + 1.0); double z = s * s;
    {_horner("z", LG2_COEFFS, "q")}
    float r = (float)((double)e + (s * q) * {LG2_SCALE.hex()});
    r = d == 0.0 ? -INFINITY : r; r = d == INFINITY ? INFINITY : r;
    return (d < 0.0 || d != d) ? F32(UINT32_C(0x7fffffff)) : r;
}}
static inline float EX2FZ(float x) {{ float r = EX2F(x); return r < FLT_MIN ? 0.0f : r; }}
"""

_INT_C = {("s", 16): "int16_t", ("u", 16): "uint16_t", ("s", 32): "int32_t", ("u", 32): "uint32_t",
          ("s", 64): "int64_t", ("u", 64): "uint64_t", ("u", 8): "uint8_t", ("s", 8): "int8_t"}
_FLOAT_T = {"f32": "float", "f64": "double"}
_FLOAT_SUFFIX = {"f32": "f", "f64": ""}


def utype(w: int) -> str:
    """C storage type of a register of width w (predicates: one byte, 0 or 1)."""
    return "uint8_t" if w == 1 else f"uint{w}_t"


def ctype(t: str) -> str:
    """C type a PTX type's value is computed in."""
    if t in _FLOAT_T:
        return _FLOAT_T[t]
    if t == "pred":
        return "uint8_t"
    return _INT_C[("s" if t in SIGNED else "u", BITS[t])]


class NoC(Exception):
    """The instruction has no C form."""


@dataclass
class Run:
    """A run of instructions compiled to one C function."""
    index: int
    instrs: list
    inputs: list[str]             # registers read before the run writes them (in order of first use)
    outputs: list[str]            # registers the run writes that code after it may read
    source: str = ""              # the C function
    mem: bool = False             # it loads: its function takes the chunk's MemCtx and may fail (NumPy code then)
    max_lanes: int | None = None  # a run that loads: most lanes it runs as C (None: any number)
    scratch: int = 0              # a run that stores: its function's scratch arrays (8 bytes per lane each)

    def choose_lanes(self, e: "CEmitter") -> None:
        """C for a run that loads, for any chunk when its loads gather (shared, local, .param through a register:
        NumPy indexes every lane) or it is long; else only for chunks of at most LOAD_RUN_LANES: over more lanes,
        NumPy's coalesced and same-address global loads (a copy, a fill) and its vectorised runs beat one scalar C
        loop of checked loads (bench/README.md, "Issue 19 part 6")."""
        self.mem = e.mem
        self.scratch = sum(1 + len(els) for _, els, _ in e.stores)
        self.max_lanes = None if not e.mem or e.gathers or len(self.instrs) >= LOAD_RUN_LONG else LOAD_RUN_LANES


class CEmitter:
    """C statements for one run; `regs`: register name -> width (1, 16, 32, 64), `imm`: the code generator's
    immediate conversion (codegen.Codegen.imm), `address`: its address operands (codegen.Codegen.address; None:
    loads have no C form). `mem`: whether the run loads (its function takes the MemCtx and may fail)."""

    def __init__(self, regs: dict[str, int], imm, address=None) -> None:
        self.regs = regs
        self.imm = imm
        self.address = address
        self.names: dict[str, str] = {}
        self.lines: list[str] = []
        self.mem = False
        self.gathers = False          # it loads from shared, local or .param memory through a register
        self.hints = 0                # global/generic accesses: one Span hint each (its allocation last time)
        self.stores: list[tuple[str, list[tuple[str, str]], int]] = []   # (pointers, [(values, C type)], size)
        self.guard_c: str | None = None   # the guard's value before the instruction, where it overwrites it (emit)

    def var(self, name: str) -> str:
        if name not in self.names:
            self.names[name] = f"v{len(self.names)}"
        return self.names[name]

    # ---------------------------------------------------------------- operands
    def src(self, o, t: str, ins: ir.Instr) -> str:
        """The C expression of operand o read as PTX type t."""
        if isinstance(o, ir.Imm):
            v = self.imm(o, t, ins)
            if t == "pred":
                return "1" if v else "0"
            w = BITS[t]
            bits = int(np.asarray(v).view({16: np.uint16, 32: np.uint32, 64: np.uint64}[w])) if w > 8 else int(v)
            lit = f"UINT{w}_C({bits:#x})" if w > 8 else f"{bits}u"
            return self._from_bits(lit, t, w)
        if not isinstance(o, ir.Reg):
            raise NoC
        neg = o.name.startswith("!")
        name = o.name[1:] if neg else o.name
        if name not in self.regs:
            raise NoC                      # special registers are not run inputs
        w = self.regs[name]
        v = self.var(name)
        if w == 1 or t == "pred":
            if not (w == 1 and t == "pred"):
                raise NoC
            return f"(uint8_t)({v} ^ 1)" if neg else v
        if neg:
            raise NoC
        tw = BITS[t]
        if tw == w:
            return self._from_bits(v, t, w)
        if t in _FLOAT_T:
            raise NoC                      # a float read from a register of another width
        if tw < w:
            return self._from_bits(f"({utype(tw)}){v}", t, tw)
        signed = t in SIGNED
        ext = f"({_INT_C[('s', w)]}){v}" if signed else v
        return f"({ctype(t)}){ext}"

    @staticmethod
    def _from_bits(bits: str, t: str, w: int) -> str:
        if t == "f32":
            return f"F32({bits})"
        if t == "f64":
            return f"F64({bits})"
        return f"({ctype(t)}){bits}"

    def write(self, o, t: str, value: str, ins: ir.Instr) -> None:
        """Assign a value computed as PTX type t to destination register o (register-width fitting as
        codegen._fit; a guarded instruction keeps the old value in the lanes its guard excludes)."""
        if isinstance(o, ir.Reg) and o.name == "_":
            return
        if not isinstance(o, ir.Reg) or o.name not in self.regs:
            raise NoC
        w = self.regs[o.name]
        if (w == 1) != (t == "pred"):
            raise NoC
        tw = 1 if t == "pred" else BITS[t]
        if t == "pred":
            bits = f"(uint8_t)(({value}) != 0)"
        elif t == "f32":
            bits = f"B32({value})"
        elif t == "f64":
            bits = f"B64({value})"
        else:
            bits = f"({utype(tw)})({value})"
        if w != 1 and tw != w:
            if tw < w and t in SIGNED:
                bits = f"({utype(w)})({_INT_C[('s', w)]})({_INT_C[('s', tw)]}){bits}"
            else:
                bits = f"({utype(w)}){bits}"
        v = self.var(o.name)
        if ins.guard is None:
            self.lines.append(f"{v} = {bits};")
        else:
            g, gneg = ins.guard
            if g not in self.regs or self.regs[g] != 1:
                raise NoC
            self.lines.append(f"{v} = ({'!' if gneg else ''}{self.guard_c or self.var(g)}) ? {bits} : {v};")

    # ---------------------------------------------------------------- instructions
    def emit(self, ins: ir.Instr) -> None:
        h = _EMITTERS.get(ins.opcode)
        if h is None:
            raise NoC
        if ir.guard_overwritten(ins):
            g = ins.guard[0]
            if g not in self.regs or self.regs[g] != 1:
                raise NoC
            # (the guard is read before the instruction: its first destination may be the guard itself)
            self.guard_c = self.var(f"__g{len(self.lines)}")
            self.lines.append(f"const uint8_t {self.guard_c} = {self.var(g)};")
        try:
            h(self, ins)
        finally:
            self.guard_c = None


def _types_and_flags(ins: ir.Instr) -> tuple[tuple[str, ...], frozenset[str]]:
    return tuple(m for m in ins.mods if m in TYPES), frozenset(m for m in ins.mods if m not in TYPES)


def _one_type(ins, allowed) -> tuple[str, frozenset[str]]:
    types, flags = _types_and_flags(ins)
    if len(types) != 1 or types[0] not in allowed:
        raise NoC
    return types[0], flags


_INTS = ("u16", "s16", "u32", "s32", "u64", "s64")
_SIGN = {"f32": "UINT32_C(0x80000000)", "f64": "UINT64_C(0x8000000000000000)"}
_LOGIC = ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "pred")


def _unsigned(t: str) -> str:
    return t if t in ("pred",) or t[0] in "ub" else "u" + t[1:]


def _ftz(e: "CEmitter", x: str, t: str, on: bool) -> str:
    return f"FTZ{t[1:]}({x})" if on else x


def _mov(e: CEmitter, ins: ir.Instr) -> None:
    t, flags = _one_type(ins, _LOGIC + ("f32", "f64"))
    d, s = ins.dsts[0], ins.srcs[0]
    if not flags and t in ("b32", "b64") and (isinstance(d, ir.Vec) or isinstance(s, ir.Vec)):
        _mov_vector(e, ins, BITS[t])
        return
    if flags or not isinstance(d, ir.Reg) or isinstance(s, (ir.Vec, ir.Sym, ir.Addr)):
        raise NoC
    e.write(d, t, e.src(s, t, ins), ins)


def _mov_vector(e: CEmitter, ins: ir.Instr, tw: int) -> None:
    """mov.b32/b64 packing elements into a register or unpacking one into elements, as instrs._mov_pack and
    _mov_unpack (an element of 8 bits written as b16)."""
    d, s = ins.dsts[0], ins.srcs[0]
    if isinstance(d, ir.Vec) == isinstance(s, ir.Vec):
        raise NoC
    vec = d if isinstance(d, ir.Vec) else s
    ew = tw // len(vec.elems)
    if ew not in (8, 16, 32) or ew * len(vec.elems) != tw:
        raise NoC
    if isinstance(s, ir.Vec):
        parts = [f"((uint{tw}_t)({e.src(x, f'b{ew}', ins)}) << {k * ew})" for k, x in enumerate(s.elems)]
        e.write(d, f"b{tw}", f"({' | '.join(parts)})", ins)
        return
    e.unpacks = getattr(e, "unpacks", 0) + 1
    x = f"mvx{e.unpacks}"
    e.lines.append(f"const uint{tw}_t {x} = {e.src(s, f'b{tw}', ins)};")
    for k, el in enumerate(d.elems):
        if isinstance(el, ir.Reg) and el.name == "_":
            continue
        e.write(el, f"b{max(ew, 16)}", f"(uint{ew}_t)({x} >> {k * ew})", ins)


def _cvta(e: CEmitter, ins: ir.Instr) -> None:
    """cvta[.to].{global,const,shared,local}.u64 of a register: generic addresses are the global ones; shared and
    local addresses are offset by their windows (instrs._cvta)."""
    mods = list(ins.mods)
    to = bool(mods) and mods[0] == "to"
    mods = mods[1:] if to else mods
    if mods[1:] != ["u64"] or mods[0] not in ("global", "const", "shared", "local") or \
            not isinstance(ins.srcs[0], ir.Reg):
        raise NoC
    v = e.src(ins.srcs[0], "u64", ins)
    win = {"shared": SH_WIN, "local": LOC_WIN}.get(mods[0], 0)
    if win:
        v = f"({v} {'-' if to else '+'} UINT64_C({win:#x}))"
    e.write(ins.dsts[0], "u64", v, ins)


def _float_arith(e: CEmitter, ins: ir.Instr) -> None:
    """add / sub / mul .rn (default) {.ftz} on f32, f64."""
    t, flags = _one_type(ins, ("f32", "f64"))
    if not flags <= {"rn", "ftz"} or ("ftz" in flags and t != "f32"):
        raise NoC
    z = "ftz" in flags
    a, b = (_ftz(e, e.src(s, t, ins), t, z) for s in ins.srcs[:2])
    if ins.opcode == "sub" and z:
        # ops/floating._addsub negates b and adds (a NaN b keeps its flipped sign), where plain sub subtracts
        w = BITS[t]
        r = f"({a} + F{w}(B{w}({b}) ^ {_SIGN[t]}))"
    else:
        r = f"({a} {dict(add='+', sub='-', mul='*')[ins.opcode]} {b})"
    e.write(ins.dsts[0], t, _gpu_nan(_ftz(e, r, t, z), t, a, b), ins)


def _gpu_nan(r: str, t: str, *operands: str) -> str:
    """r with the GPU's NaN results (ops/common.gpu_nans); operands: the C expressions of the f64 operands."""
    if t == "f32":
        return f"CAN32({r})"
    ops = list(operands) + ["0.0"] * (3 - len(operands))
    return f"NAN64({r}, {', '.join(ops)})"


def _int_arith(e: CEmitter, ins: ir.Instr) -> None:
    """add / sub (no .sat / .cc), mul and mad .lo / .wide / .hi on 16-, 32- and 64-bit integers."""
    t, flags = _one_type(ins, _INTS)
    w = BITS[t]
    ut = _unsigned(t)
    if ins.opcode in ("add", "sub"):
        if flags:
            raise NoC
        a, b = (e.src(s, ut, ins) for s in ins.srcs[:2])
        op = "+" if ins.opcode == "add" else "-"
        e.write(ins.dsts[0], ut, f"({ctype(ut)})({a} {op} {b})", ins)
        return
    if len(flags) != 1 or not flags <= {"lo", "wide", "hi"}:
        raise NoC
    mode = next(iter(flags))
    if mode == "lo":
        a, b = (e.src(s, ut, ins) for s in ins.srcs[:2])
        if w < 32:      # C promotes 16-bit operands to int, where 0xFFFF * 0xFFFF overflows (undefined)
            a, b = f"(uint32_t){a}", f"(uint32_t){b}"
        r, rt = f"({ctype(ut)})({a} * {b})", ut
    elif mode == "wide":
        if w == 64:
            raise NoC
        wt = ("s" if t in SIGNED else "u") + str(2 * w)
        a, b = (f"({ctype(wt)}){e.src(s, t, ins)}" for s in ins.srcs[:2])
        uwt = _unsigned(wt)
        r, rt = f"({ctype(uwt)})(({ctype(uwt)}){a} * ({ctype(uwt)}){b})", uwt
    else:
        a, b = (e.src(s, t, ins) for s in ins.srcs[:2])
        if w == 64:
            wide = "__int128" if t in SIGNED else "unsigned __int128"
        else:
            wide = ctype(("s" if t in SIGNED else "u") + str(2 * w))
        r, rt = f"({ctype(t)})((({wide}){a} * ({wide}){b}) >> {w})", t
    if ins.opcode == "mad":
        c = e.src(ins.srcs[2], rt, ins)
        urt = _unsigned(rt)
        r, rt = f"({ctype(urt)})(({ctype(urt)})({r}) + ({ctype(urt)}){c})", urt
    e.write(ins.dsts[0], rt, r, ins)


def _arith(e: CEmitter, ins: ir.Instr) -> None:
    types, _ = _types_and_flags(ins)
    if types and types[0] in ("f32", "f64"):
        if ins.opcode == "mad":
            _fma(e, ins)
        else:
            _float_arith(e, ins)
    else:
        _int_arith(e, ins)


def _fma(e: CEmitter, ins: ir.Instr) -> None:
    """fma.rn / mad{.rn} {.ftz}: correctly rounded fused multiply-add (C99 fma/fmaf)."""
    t, flags = _one_type(ins, ("f32", "f64"))
    if ins.opcode == "fma" and "rn" not in flags:
        raise NoC
    if not flags <= {"rn", "ftz"} or ("ftz" in flags and t != "f32"):
        raise NoC
    z = "ftz" in flags
    a, b, c = (_ftz(e, e.src(s, t, ins), t, z) for s in ins.srcs[:3])
    e.write(ins.dsts[0], t, _gpu_nan(_ftz(e, f"fma{_FLOAT_SUFFIX[t]}({a}, {b}, {c})", t, z), t, a, b, c), ins)


def _div(e: CEmitter, ins: ir.Instr) -> None:
    """div.rn / .full (f32; .rn for f64) {.ftz}: IEEE division (ops/floating._div); div.approx.f32: a * (1/b) with a
    subnormal reciprocal flushed (ops/floating._div_approx)."""
    types, _ = _types_and_flags(ins)
    if types and types[0] in _INTS:
        _int_divrem(e, ins)
        return
    if not types or types[0] not in ("f32", "f64"):
        raise NoC
    t, flags = _one_type(ins, ("f32", "f64"))
    mode = flags - {"ftz"}
    if len(mode) != 1 or not mode <= ({"rn", "approx", "full"} if t == "f32" else {"rn"}):
        raise NoC
    if "ftz" in flags and t != "f32":
        raise NoC
    z = "ftz" in flags
    a, b = (_ftz(e, e.src(s, t, ins), t, z) for s in ins.srcs[:2])
    q = f"({a} * FTZ32(1.0f / {b}))" if "approx" in mode else f"({a} / {b})"
    e.write(ins.dsts[0], t, _gpu_nan(_ftz(e, q, t, z), t, a, b), ins)


def _int_divrem(e: CEmitter, ins: ir.Instr) -> None:
    """div / rem of 16-, 32- and 64-bit integers as ops/integer._divrem: by zero the quotient is all ones and the
    remainder the dividend; MIN / -1 = MIN, MIN % -1 = 0; otherwise C's truncating division."""
    t, flags = _one_type(ins, _INTS)
    if flags:
        raise NoC
    w, ct = BITS[t], ctype(t)
    a, b = (e.src(s, t, ins) for s in ins.srcs[:2])
    x, y = f"(({ct}){a})", f"(({ct}){b})"
    rem = ins.opcode == "rem"
    if t in SIGNED:
        mn = f"(({ct})((uint{w}_t)1 << {w - 1}))"
        odd = f"({x} == {mn} && {y} == ({ct})-1)"
        r = (f"({y} == 0 ? {x} : {odd} ? ({ct})0 : ({ct})({x} % {y}))" if rem else
             f"({y} == 0 ? ({ct})-1 : {odd} ? {mn} : ({ct})({x} / {y}))")
    else:
        r = f"({y} == 0 ? {x} : ({ct})({x} % {y}))" if rem else f"({y} == 0 ? ({ct})~({ct})0 : ({ct})({x} / {y}))"
    e.write(ins.dsts[0], t, r, ins)


def _unary_float(e: CEmitter, ins: ir.Instr, fn, allowed_modes, ftz_types=("f32",)) -> None:
    t, flags = _one_type(ins, ("f32", "f64"))
    mode = flags - {"ftz"}
    if not mode <= allowed_modes[t] or len(mode) != (1 if allowed_modes[t] else 0):
        raise NoC
    if "ftz" in flags and t not in ftz_types:
        raise NoC
    z = "ftz" in flags
    a = _ftz(e, e.src(ins.srcs[0], t, ins), t, z)
    e.write(ins.dsts[0], t, _gpu_nan(_ftz(e, fn(a, t), t, z), t, a), ins)


def _rcp(e: CEmitter, ins: ir.Instr) -> None:
    # rcp.rn (f32, f64), rcp.approx{.ftz}.f32: 1 / a (ops/floating.build_rcp); rcp.approx.ftz.f64 (its upper
    # word only) stays a NumPy call
    _unary_float(e, ins, lambda a, t: f"(({ctype(t)})1 / {a})", {"f32": {"rn", "approx"}, "f64": {"rn"}})


def _sqrt(e: CEmitter, ins: ir.Instr) -> None:
    # sqrt.rn (f32, f64), sqrt.approx.f32, {.ftz}.f32: IEEE square root
    _unary_float(e, ins, lambda a, t: f"sqrt{_FLOAT_SUFFIX[t]}({a})", {"f32": {"rn", "approx"}, "f64": {"rn"}})


def _rsqrt(e: CEmitter, ins: ir.Instr) -> None:
    # rsqrt.approx{.ftz}.f32: 1 / sqrt(a) in single precision (ops/floating.build_rsqrt)
    t, flags = _one_type(ins, ("f32",))
    if "approx" not in flags:
        raise NoC
    _unary_float(e, ins, lambda a, t: f"(1.0f / sqrtf({a}))", {"f32": {"approx"}})


def _ex2_lg2(e: CEmitter, ins: ir.Instr) -> None:
    # ex2/lg2.approx{.ftz}.f32 (ops/floating._approx32: lg2 flushes its input, ex2 results below FLT_MIN)
    t, flags = _one_type(ins, ("f32",))
    if "approx" not in flags or not flags <= {"approx", "ftz"}:
        raise NoC
    a = e.src(ins.srcs[0], t, ins)
    if ins.opcode == "lg2":
        v = f"LG2F({_ftz(e, a, t, 'ftz' in flags)})"
        v = _ftz(e, v, t, "ftz" in flags)
    else:
        v = f"EX2F({a})"
        if "ftz" in flags:
            v = f"EX2FZ({a})"
    e.write(ins.dsts[0], t, v, ins)


def _abs_neg(e: CEmitter, ins: ir.Instr) -> None:
    types, _ = _types_and_flags(ins)
    if types and types[0] in ("f32", "f64"):
        t, flags = _one_type(ins, ("f32", "f64"))
        if not flags <= {"ftz"} or ("ftz" in flags and t != "f32"):
            raise NoC
        a = _ftz(e, e.src(ins.srcs[0], t, ins), t, "ftz" in flags)
        w = BITS[t]
        bits = f"B{w}({a})"
        r = f"({bits} ^ {_SIGN[t]})" if ins.opcode == "neg" else f"({bits} & ~{_SIGN[t]})"
        r = f"F{w}({r})"
        # ops/floating.build_abs_neg: f32 NaN canonical; f64 NaN quieted, its sign unchanged
        e.write(ins.dsts[0], t, f"CAN32({r})" if t == "f32" else f"({a} != {a} ? Q64({a}) : {r})", ins)
        return
    t, flags = _one_type(ins, ("s16", "s32", "s64"))
    if flags:
        raise NoC
    ut = _unsigned(t)
    a = e.src(ins.srcs[0], ut, ins)
    neg = f"({ctype(ut)})(({ctype(ut)})0 - {a})"
    if ins.opcode == "neg":
        e.write(ins.dsts[0], ut, neg, ins)
    else:
        e.write(ins.dsts[0], ut, f"(({ctype(t)}){a} < 0 ? {neg} : {a})", ins)


def _min_max(e: CEmitter, ins: ir.Instr) -> None:
    types, _ = _types_and_flags(ins)
    is_max = ins.opcode == "max"
    if types and types[0] in ("f32", "f64"):
        _float_min_max(e, ins, is_max)
        return
    t, flags = _one_type(ins, _INTS)
    if flags:
        raise NoC
    a, b = (e.src(s, t, ins) for s in ins.srcs[:2])
    e.write(ins.dsts[0], t, f"({a} {'>' if is_max else '<'} {b} ? {a} : {b})", ins)


def _float_min_max(e: CEmitter, ins: ir.Instr, is_max: bool) -> None:
    """ops/floating._minmax: fmin/fmax (NaN-ignoring; .NaN propagates), -0 below +0, NaN results canonical."""
    t, flags = _one_type(ins, ("f32", "f64"))
    if not flags <= {"ftz", "NaN"} or (flags and t == "f64"):
        raise NoC
    w = BITS[t]
    z = "ftz" in flags
    a, b = (_ftz(e, e.src(s, t, ins), t, z) for s in ins.srcs[:2])
    va, vb = e.var(f"__a{len(e.lines)}"), e.var(f"__b{len(e.lines)}")
    e.lines.append(f"{ctype(t)} {va} = {a}, {vb} = {b};")
    # written out, not fmin/fmax: vectorised, those may become min instructions that mishandle NaN operands
    pick = f"({va} {'>' if is_max else '<'} {vb} ? {va} : {vb})"
    if "NaN" in flags:
        base = f"(({va} != {va} || {vb} != {vb}) ? ({va} + {vb}) : {pick})"
    else:
        base = f"({vb} != {vb} ? {va} : ({va} != {va} ? {vb} : {pick}))"
    zero = f"(B{w}({va}) {'&' if is_max else '|'} B{w}({vb}))"
    canon = "UINT32_C(0x7FFFFFFF)" if w == 32 else "UINT64_C(0x7FFFFFFFFFFFFFFF)"
    r = f"(({va} == 0 && {vb} == 0) ? F{w}({zero}) : {base})"
    e.write(ins.dsts[0], t, f"(({r}) != ({r}) ? F{w}({canon}) : ({r}))", ins)


def _logic(e: CEmitter, ins: ir.Instr) -> None:
    t, flags = _one_type(ins, _LOGIC)
    if flags:
        raise NoC
    ut = _unsigned(t)
    if ins.opcode == "not":
        a = e.src(ins.srcs[0], ut, ins)
        e.write(ins.dsts[0], ut, f"({a} ^ 1)" if t == "pred" else f"({ctype(ut)})~{a}", ins)
        return
    a, b = (e.src(s, ut, ins) for s in ins.srcs[:2])
    op = {"and": "&", "or": "|", "xor": "^"}[ins.opcode]
    e.write(ins.dsts[0], ut, f"({ctype(ut)})({a} {op} {b})", ins)


def _count_bits(e: CEmitter, ins: ir.Instr) -> None:
    """popc / clz .b32 .b64 (ops/bits.py: a u32 count; clz of 0 is the width)."""
    t, flags = _one_type(ins, ("b32", "b64"))
    if flags:
        raise NoC
    ut = _unsigned(t)
    a = e.src(ins.srcs[0], ut, ins)
    ll = "ll" if t == "b64" else ""
    if ins.opcode == "popc":
        r = f"(uint32_t)__builtin_popcount{ll}({a})"
    else:
        r = f"({a} ? (uint32_t)__builtin_clz{ll}({a}) : {BITS[t]}u)"
    e.write(ins.dsts[0], "u32", r, ins)


def _shift(e: CEmitter, ins: ir.Instr) -> None:
    """shl / shr with ops/bits.build_shift's clamp: counts >= width give 0 (sign fill for shr.s)."""
    left = ins.opcode == "shl"
    t, flags = _one_type(ins, ("b16", "b32", "b64") if left else ("b16", "b32", "b64", "u16", "u32", "u64",
                                                                  "s16", "s32", "s64"))
    if flags:
        raise NoC
    w = BITS[t]
    a = e.src(ins.srcs[0], t, ins)
    c = e.src(ins.srcs[1], "u32", ins)
    if left:
        r = f"({c} >= {w}u ? ({ctype(t)})0 : ({ctype(t)})({a} << {c}))"
    elif t in SIGNED:
        r = f"({ctype(t)})({a} >> ({c} >= {w}u ? {w - 1}u : {c}))"
    else:
        r = f"({c} >= {w}u ? ({ctype(t)})0 : ({ctype(t)})({a} >> {c}))"
    e.write(ins.dsts[0], t, r, ins)


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
        "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}


# ops/compare._cmp_fn in C: float ne is ordered; the u-forms are true when either operand is NaN
_FCMP = {"eq": "({a} == {b})", "lt": "({a} < {b})", "le": "({a} <= {b})", "gt": "({a} > {b})",
         "ge": "({a} >= {b})", "ne": "({a} < {b} || {a} > {b})", "neu": "({a} != {b})",
         "equ": "!({a} < {b} || {a} > {b})", "ltu": "!({a} >= {b})", "leu": "!({a} > {b})", "gtu": "!({a} <= {b})",
         "geu": "!({a} < {b})", "num": "({a} == {a} && {b} == {b})", "nan": "({a} != {a} || {b} != {b})"}


def _compare(t: str, op: str, a: str, b: str) -> str:
    form = _FCMP.get(op) if t in ("f32", "f64") else (f"({{a}} {_CMP[op]} {{b}})" if op in _CMP else None)
    if form is None:
        raise NoC
    return form.format(a=a, b=b)


def _setp(e: CEmitter, ins: ir.Instr) -> None:
    types, flags = _types_and_flags(ins)
    if len(types) != 1 or types[0] not in _INTS + ("b16", "b32", "b64", "f32", "f64"):
        raise NoC
    t = types[0]
    if t[0] == "b":
        t = "u" + t[1:]
    boolop = flags & {"and", "or", "xor"}
    rest = flags - boolop - {"ftz"}
    if len(rest) != 1 or len(boolop) > 1 or ("ftz" in flags and t != "f32"):
        raise NoC
    op = next(iter(rest))
    z = "ftz" in flags
    a, b = (_ftz(e, e.src(s, t, ins), t, z) for s in ins.srcs[:2])
    r = _compare(t, op, a, b)
    rv = e.var(f"__p{len(e.lines)}")
    e.lines.append(f"uint8_t {rv} = (uint8_t)({r});")
    results = [rv, f"(uint8_t)({rv} ^ 1)"][:len(ins.dsts)]
    if boolop:
        # (c read once, before the writes: `setp.lt.and.s32 %p1|%p2, a, b, %p1` combines both with the old %p1)
        c = e.var(f"__c{len(e.lines)}")
        e.lines.append(f"const uint8_t {c} = {e.src(ins.srcs[2], 'pred', ins)};")
        cop = {"and": "&", "or": "|", "xor": "^"}[next(iter(boolop))]
        results = [f"({x} {cop} {c})" for x in results]
    for d, x in zip(ins.dsts, results):
        e.write(d, "pred", x, ins)


def _selp(e: CEmitter, ins: ir.Instr) -> None:
    t, flags = _one_type(ins, _INTS + ("b16", "b32", "b64", "f32", "f64"))
    if flags:
        raise NoC
    ut = "u" + t[1:] if t[0] in "sbf" else t
    a, b = (e.src(s, ut, ins) for s in ins.srcs[:2])
    c = e.src(ins.srcs[2], "pred", ins)
    e.write(ins.dsts[0], ut, f"({c} ? {a} : {b})", ins)


def _cvt(e: CEmitter, ins: ir.Instr) -> None:
    """cvt between integers (no .sat), integer -> float .rn, f32 -> f64, f64 -> f32 .rn: C conversions round to
    nearest (the default MXCSR mode) exactly as NumPy's astype does."""
    types, flags = _types_and_flags(ins)
    if len(types) != 2:
        raise NoC
    dt, st = types
    ints = _INTS + ("u8", "s8", "b16", "b32", "b64")
    if dt in ints and st in ints:
        if flags:
            raise NoC
        dt2 = "u" + dt[1:] if dt[0] == "b" else dt
        st2 = "u" + st[1:] if st[0] == "b" else st
        if BITS[dt2] == 8 or BITS[st2] == 8:
            raise NoC
        a = e.src(ins.srcs[0], st2, ins)
        e.write(ins.dsts[0], dt2, f"({ctype(dt2)}){a}", ins)
        return
    if dt in ("f32", "f64") and st in _INTS + ("b32", "b64"):
        if flags != {"rn"} or st[0] == "b":
            raise NoC
        a = e.src(ins.srcs[0], st, ins)
        e.write(ins.dsts[0], dt, f"({ctype(dt)}){a}", ins)
        return
    if (dt, st) == ("f64", "f32") and not flags:
        e.write(ins.dsts[0], dt, f"(double){e.src(ins.srcs[0], st, ins)}", ins)
        return
    if (dt, st) == ("f32", "f64") and flags == {"rn"}:
        e.write(ins.dsts[0], dt, f"(float){e.src(ins.srcs[0], st, ins)}", ins)
        return
    raise NoC


def _where(e: CEmitter, ins: ir.Instr, space: str, vsize: int, write: bool) -> tuple[str, bool]:
    """(the C expression of the checked address of a ld/st's access of vsize bytes, whether it is never null). A null
    address: runtime/spaces.py would not serve the access from there; the run then declines and the NumPy code
    serves it or raises its fault. Unguarded shared and local accesses are never null: a bad one sets the
    function's `bad` instead (PWV), so that their lane loops have no branch. Each global and generic access has its
    own allocation hint."""
    try:
        kind, _, off = e.address(ins.srcs[0], ins)
    except CudaError:                      # an operand the NumPy code refuses: it reports it
        raise NoC from None
    if kind not in ("reg", "const"):
        raise NoC      # call-frame variables; kernel parameters by name stay uniform NumPy scalars (S.param)
    if space == "param" and kind != "reg":
        space = "local"
    a = address_expr(e, ins, kind, off)
    hint = f"&hint{e.hints}"
    if space in ("global", "const"):
        e.hints += 1
        where = f"PG(M, {a}, {vsize}, {hint})"
    elif space == "generic":
        e.hints += 1
        where = f"PGEN(M, {a}, {vsize}, i, {hint})"
    elif space == "param":
        where = f"PPR(M, {a}, {vsize}, i)"
    elif ins.guard is None:
        where = f"{'PSV' if space == 'shared' else 'PLV'}(M, (int64_t){a}, {vsize}, i, &bad)"
    else:
        where = f"{'PS' if space == 'shared' else 'PL'}(M, (int64_t){a}, {vsize}, i)"
    e.gathers = e.gathers or (kind == "reg" and space in ("shared", "local", "param", "generic"))
    never_null = ins.guard is None and space in ("shared", "local")
    return (f"(uint8_t *){where}" if write else where), never_null


def store_value(e: CEmitter, o, t: str, ins: ir.Instr) -> str:
    """The C expression of a st's source register as the store's type t writes it: its bits (floats of their own
    width), sign- or zero-extended from a narrower register as codegen.src reads it."""
    if not isinstance(o, ir.Reg) or o.name.startswith("!") or o.name not in e.regs or e.regs[o.name] == 1:
        raise NoC
    w = e.regs[o.name]
    if t in ("f32", "f64"):
        if w != BITS[t]:
            raise NoC
        return e.src(o, "u" + str(w), ins)
    return e.src(o, t if t[0] == "s" and BITS[t] > w else "u" + str(BITS[t]), ins)


def address_expr(e: CEmitter, ins: ir.Instr, kind: str, off: int) -> str:
    """The C expression (uint64_t) of an access's address: its base register + offset, wrapping at the register's
    width (32 or 64 bits, as the NumPy code adds them), or a constant address."""
    if kind != "reg":
        return f"UINT64_C({off & ((1 << 64) - 1):#x})"
    base = ins.srcs[0].base.name
    w = e.regs.get(base)
    if w not in (32, 64):
        raise NoC
    return f"(uint64_t)(uint{w}_t)({e.src(ir.Reg(base), f'u{w}', ins)} + UINT{w}_C({off & ((1 << w) - 1):#x}))"


def _pointer(e: CEmitter, ins: ir.Instr, decl: str, p: str, where: str, never_null: bool) -> str:
    """The C statement setting an access's pointer `p` (declared by `decl`): null where the guard excludes the lane;
    the function declines (returns 1) at a null one the guard lets through, unless it is never null (_where)."""
    if never_null:
        return f"{decl} = {where};"
    if ins.guard is None:
        return f"{decl} = {where}; if (!{p}) return 1;"
    g, gneg = ins.guard
    if g not in e.regs or e.regs[g] != 1:
        raise NoC
    return f"{decl} = 0; if ({'!' if gneg else ''}{e.var(g)}) {{ {p} = {where}; if (!{p}) return 1; }}"


def load_form(e: CEmitter, ins: ir.Instr) -> tuple[str, str, list, int, str]:
    """(space, type, destinations, element size, the type each element is read as: its bits, signed for the
    sign-extending types) of a ld/ldu with a C form (NoC otherwise): destinations are non-predicate registers,
    floats of their own width."""
    if not isinstance(ins.dsts[0], (ir.Reg, ir.Vec)):
        raise NoC
    try:
        space, vec, t = _memmods(ins)
    except CudaError:
        raise NoC from None                # the NumPy code reports it
    if t in ("f16", "bf16", "f16x2", "bf16x2") or vec > 4:
        raise NoC
    if ins.opcode == "ldu" and space == "generic":
        space = "global"
    dsts = list(ins.dsts[0].elems) if isinstance(ins.dsts[0], ir.Vec) else [ins.dsts[0]]
    if len(dsts) != vec:
        raise NoC
    for d in dsts:
        if isinstance(d, ir.Reg) and d.name == "_":
            continue
        if not isinstance(d, ir.Reg) or d.name not in e.regs or e.regs[d.name] == 1:
            raise NoC
        if t in ("f32", "f64") and e.regs[d.name] != BITS[t]:
            raise NoC
    return space, t, dsts, BITS[t] // 8, t if t in SIGNED and t[0] == "s" else "u" + str(BITS[t])


def _ld(e: CEmitter, ins: ir.Instr) -> None:
    """ld/ldu{.space}{.v2,.v4}.type of a register address (+ offset) or a constant address, as instrs._ld does it:
    the access checked as a whole (vector size), then one element per destination, widened or narrowed to its
    register as codegen.write does. Caching hints and memory-order qualifiers change nothing in a run, which holds
    no store (its loads see memory as it was when it began, as the lockstep NumPy code's do)."""
    if e.address is None:
        raise NoC
    space, t, dsts, size, lt = load_form(e, ins)
    where, never_null = _where(e, ins, space, size * len(dsts), False)
    e.mem = True
    p = e.var(f"__ld{len(e.lines)}")
    e.lines.append(_pointer(e, ins, f"const uint8_t *{p}", p, where, never_null))
    for k, d in enumerate(dsts):
        if isinstance(d, ir.Reg) and d.name == "_":
            continue
        x = e.var(f"__lx{len(e.lines)}_{k}")
        src = f"memcpy(&{x}, {p} + {k * size}, {size});"
        if not never_null:
            src = f"if ({p}) {src}"
        e.lines.append(f"{ctype(lt)} {x} = 0; {src}")
        e.write(d, lt, x, ins)


def _st(e: CEmitter, ins: ir.Instr) -> None:
    """st.shared / st.local{.v2,.v4}.type as instrs._st does it: the access checked as a whole (vector size), each
    element the source register's low bits (sign- or zero-extended from a narrower register, as codegen.src
    reads it). The lane loop only checks the address and keeps pointer and values; the stores happen after it,
    instruction by instruction and element by element over the lanes in order (_storing_function), as the
    lockstep NumPy code makes them: a later lane's store to the same bytes is the one that stays. plan_runs ends
    a run before a load that follows a store, so no load of a run sees a store of it. Global and generic stores
    stay NumPy code: their coalesced stores (one slice per chunk) beat a scalar C loop of checked stores."""
    if e.address is None:
        raise NoC
    try:
        space, vec, t = _memmods(ins)
    except CudaError:
        raise NoC from None                # the NumPy code reports it
    if space not in ("shared", "local") or t in ("f16", "bf16", "f16x2", "bf16x2") or vec > 4:
        raise NoC
    srcs = list(ins.srcs[1].elems) if isinstance(ins.srcs[1], ir.Vec) else [ins.srcs[1]]
    if len(srcs) != vec:
        raise NoC
    size = BITS[t] // 8
    vals = [store_value(e, o, t, ins) for o in srcs]
    where, never_null = _where(e, ins, space, size * vec, True)
    e.mem = True
    j = len(e.stores)
    p = f"__sp{j}[i]"
    e.lines.append(_pointer(e, ins, p, p, where, never_null))
    ct = f"uint{8 * size}_t"
    for k, v in enumerate(vals):
        e.lines.append(f"__sv{j}_{k}[i] = ({ct})({v});")
    e.stores.append((f"__sp{j}", [(f"__sv{j}_{k}", ct) for k in range(vec)], size))


_EMITTERS = {
    "ld": _ld, "ldu": _ld, "st": _st,
    "mov": _mov, "cvta": _cvta, "add": _arith, "sub": _arith, "mul": _arith, "mad": _arith, "fma": _fma, "div": _div, "rem": _int_divrem,
    "rcp": _rcp, "sqrt": _sqrt, "rsqrt": _rsqrt, "ex2": _ex2_lg2, "lg2": _ex2_lg2, "abs": _abs_neg, "neg": _abs_neg, "min": _min_max,
    "max": _min_max, "and": _logic, "or": _logic, "xor": _logic, "not": _logic, "shl": _shift, "shr": _shift,
    "setp": _setp, "selp": _selp, "cvt": _cvt, "popc": _count_bits, "clz": _count_bits,
}
# the C forms whose result is a function of their operands only (no memory, no thread position)
PURE_OPCODES = frozenset(_EMITTERS) - {"ld", "ldu", "st"}


def c_body(instrs: list, regs: dict[str, int], imm, address=None) -> CEmitter:
    """The C statements of a run (NoC if an instruction has no C form; loads only with `address`)."""
    e = CEmitter(regs, imm, address)
    for ins in instrs:
        e.emit(ins)
    return e


def function_source(run: Run, e: CEmitter, regs: dict[str, int], name: str) -> str:
    """`void name(int64_t n, <input arrays>, <output arrays>)`: the run over lanes 0..n-1; a run that loads is
    `int64_t name(int64_t n, const MemCtx *M, <input arrays>, <output arrays>)`, 0 when it ran, 1 when an access
    needs the NumPy code (module docstring)."""
    params = ["int64_t n"] + (["const MemCtx *restrict M"] if e.mem else [])
    params += [f"const {utype(regs[r])} *restrict in{k}" for k, r in enumerate(run.inputs)]
    params += [f"{utype(regs[r])} *restrict out{k}" for k, r in enumerate(run.outputs)]
    body = [f"{utype(regs[r])} {e.var(r)} = in{k}[i];" for k, r in enumerate(run.inputs)]
    declared = set(run.inputs)
    for r, v in e.names.items():
        if r not in declared and not r.startswith("__"):
            body.append(f"{utype(regs[r])} {v} = 0;")
    body += e.lines
    body += [f"out{k}[i] = {e.var(r)};" for k, r in enumerate(run.outputs)]
    inner = "\n        ".join(body)
    if e.stores:
        return _storing_function(name, params, inner, e)
    if e.mem:
        hints = "".join(f"    Span hint{k} = {{1, 0}}; (void)hint{k};\n" for k in range(e.hints))
        return (f"int64_t {name}({', '.join(params)}) {{\n{hints}    int64_t bad = 0; (void)bad;\n"
                f"    for (int64_t i = 0; i < n; i++) {{\n        {inner}\n    }}\n    return bad != 0;\n}}\n")
    return (f"void {name}({', '.join(params)}) {{\n    for (int64_t i = 0; i < n; i++) {{\n        {inner}\n"
            f"    }}\n}}\n")


def _storing_function(name: str, params: list[str], inner: str, e: CEmitter) -> str:
    """A run with stores: the lane loop checks every access and keeps each store's pointer and values (in the
    caller's scratch: 8 bytes per lane and array, NativeRun.scratch); only when every lane's accesses passed do the
    stores happen, store by store, element by element, lane by lane (_st). A declined run has written nothing: its
    NumPy code runs from the same memory."""
    arrays = [(sp, "uint8_t *") for sp, _, _ in e.stores] + [(v, ct) for _, els, _ in e.stores for v, ct in els]
    decl = "".join(f"    {ct} *{v} = ({ct} *)(scr + (size_t)n * {8 * k});\n" for k, (v, ct) in enumerate(arrays))
    hints = "".join(f"    Span hint{k} = {{1, 0}}; (void)hint{k};\n" for k in range(e.hints))
    writes = []
    for sp, els, size in e.stores:
        for k, (v, _) in enumerate(els):
            writes.append(f"    for (int64_t i = 0; i < n; i++) if ({sp}[i]) memcpy({sp}[i] + {k * size}, "
                          f"&{v}[i], {size});\n")
    params = params[:2] + ["uint8_t *restrict scr"] + params[2:]
    return (f"int64_t {name}({', '.join(params)}) {{\n{hints}{decl}    int64_t bad = 0;\n"
            f"    for (int64_t i = 0; i < n; i++) {{\n        {inner}\n    }}\n    if (bad) return 1;\n"
            f"{''.join(writes)}    return 0;\n}}\n")


class NativeRun:
    """Generated code's handle on one run's C function: run(T, *input register arrays) -> output arrays (one per
    output register, of its width: uint16/32/64, bool for predicates); a run that loads takes the chunk's MemCtx
    address after T and answers None when an access needs the NumPy code. ctypes releases the GIL during the
    call."""
    __slots__ = ("fn", "in_sizes", "out_dtypes", "mem", "declined", "scratch")

    def __init__(self, fn, in_widths: list[int], out_widths: list[int], mem: bool = False, scratch: int = 0) -> None:
        fn.restype = ctypes.c_int64 if mem else None
        fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * (len(in_widths) + len(out_widths) + mem + (scratch > 0))
        self.fn = fn
        self.mem = mem
        self.scratch = 8 * scratch    # bytes per lane of a storing run's pointers and values (_storing_function)
        self.declined = 0             # calls whose accesses the C code left to the NumPy code
        self.in_sizes = tuple(1 if w == 1 else w // 8 for w in in_widths)
        self.out_dtypes = tuple(np.dtype(np.bool_) if w == 1 else np.dtype(f"uint{w}") for w in out_widths)

    def __call__(self, T: int, *ins):
        if self.mem:
            ctx, ins = ins[0], ins[1:]
        ptrs = []
        keep = []
        for a, size in zip(ins, self.in_sizes):
            if a.itemsize != size or a.shape != (T,):
                raise RuntimeError(f"native run input of {a.itemsize} B x {a.shape}, expected {size} B x {T}")
            if not a.flags.c_contiguous:
                a = _expanded(a, T) if a.strides == (0,) else np.ascontiguousarray(a)
                keep.append(a)
            ptrs.append(_address(a))
        outs = [np.empty(T, dt) for dt in self.out_dtypes]
        if self.mem:
            if self.scratch:
                ctx = (ctx, _scratch(self.scratch * T))
            else:
                ctx = (ctx,)
            if self.fn(T, *ctx, *ptrs, *(_address(o) for o in outs)):
                self.declined += 1
                return None
            return outs
        self.fn(T, *ptrs, *(_address(o) for o in outs))
        return outs


# Scratch of storing runs, one buffer per thread (chunks of a launch may run on several threads), grown to the
# largest need (lanes of a chunk x 8 bytes x arrays of the run: a few MiB at most); reused, since a fresh buffer of
# that size per call costs its page faults every time.
_SCRATCH = threading.local()


def _scratch(nbytes: int) -> int:
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < nbytes:
        buf = _SCRATCH.buf = np.empty(max(nbytes, 1 << 16), np.uint8)
    return buf.ctypes.data


# Uniform registers (stride-0 views: parameters, constants) expanded to T lanes, by value: every chunk of a launch
# passes the same ones, and the C code only reads its inputs. Cleared when full (atomic: no lock between threads).
_UNIFORMS: dict[tuple, np.ndarray] = {}
_UNIFORMS_MAX = 64


def _expanded(a: np.ndarray, T: int) -> np.ndarray:
    key = (a.dtype.str, a[:1].tobytes(), T)
    c = _UNIFORMS.get(key)
    if c is None:
        if len(_UNIFORMS) >= _UNIFORMS_MAX:
            _UNIFORMS.clear()
        c = _UNIFORMS[key] = np.ascontiguousarray(a)
    return c


def _address(a: np.ndarray) -> int:
    """The data address of a contiguous array (from_buffer: 0.3 us, 6x faster than a.ctypes.data; read-only
    arrays refuse it)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def plan_runs(instrs: list, term, regs: dict[str, int], imm, global_regs: set[str],
              address=None) -> list[tuple[int, int, Run]]:
    """The runs of a block's instruction list: (start, end, Run) for each stretch of at least MIN_RUN
    instructions with a C form (loads too, with `address`: codegen.Codegen.address)."""
    ok = []
    for ins in instrs:
        try:
            c_body([ins], regs, imm, address)
            ok.append(True)
        except NoC:
            ok.append(False)
    spans = []
    i = 0
    while i < len(instrs):
        if not ok[i]:
            i += 1
            continue
        j = i
        stored = False             # a load after a store of the run starts the next run (_st)
        while j < len(instrs) and ok[j] and not (stored and instrs[j].opcode in ("ld", "ldu")):
            stored = stored or instrs[j].opcode == "st"
            j += 1
        if j - i >= MIN_RUN:
            spans.append((i, j))
        i = j
    out = []
    for start, end in spans:
        inputs: list[str] = []
        written: list[str] = []
        for ins in instrs[start:end]:
            reads, writes = reads_writes(ins, regs, True)
            for r in reads:
                if r not in written and r not in inputs:
                    inputs.append(r)
            for r in writes:
                if r not in written:
                    written.append(r)
        later: set[str] = set()
        for ins in instrs[end:] + ([term] if term is not None else []):
            later.update(reads_writes(ins, regs, True)[0])
        outputs = [r for r in written if r in global_regs or r in later]
        out.append((start, end, Run(len(out), instrs[start:end], inputs, outputs)))
    return out
