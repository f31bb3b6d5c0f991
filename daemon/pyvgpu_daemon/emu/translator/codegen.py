"""Code generation: a kernel's basic blocks become the Python source of one function `make(S)`.

    def make(S):                       # S: the chunk (a ChunkAPI, see emu/chunk_api.py)
        T = S.T; pcv = S.pc; stv = S.st
        sp_tid_x = S.special('%tid.x')  # special registers the kernel reads
        r0 = S.zeros[32]                # one closure variable per register, holding an immutable NumPy array
        def c0(): ...                   # block 0, converged: every lane of the chunk is live and here; returns
        def m0(m): ...                  #   the next block; masked: the lanes in m, sets pcv[m] / stv[m]
        def s0(_i): ...                 # sparse (some blocks): the masked body over lanes _i alone (kernel.py)
        ...
        def h0(mm, v): ...              # bar.red release handler of each diverged bar.red site
        def reset(): ...                # the registers back to S.zeros (a chunk reused by the next launch)
        return [(c0, m0, s0), ...], [h0, ...], reset      # (None for a block without a sparse function)

A register write rebinds its variable (`r3 = ...`), a masked write merges with np.where. Operands are views of
register arrays in the instruction's type; immediates, addresses and dtypes are constants in the namespace of the
generated code, which otherwise holds only `np` and the value helpers below. The chunk is reached only through
`Codegen.rt(member)`, which refuses anything ChunkAPI does not declare.

This module holds what every emitter uses: names, operands, register writes, guards. What code each instruction
becomes lives in control.py (branches, exit, barriers, warp operations) and instrs.py (straight-line
instructions); kernel.py assembles the blocks into `make` and compiles it.
"""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..chunk_api import MEMBERS
from ..layout import FN_STRIDE, FN_WIN, LOC_WIN, PAR_WIN, WIN_SIZE
from ..ops.common import select
from ..ptx import ir
from ..ptx.parser import float_bits_to_value
from ..ptx.predefined import CLOCKS, SPECIAL_REGISTERS
from .inline import FP
from ..ptx.types import BITS, DTYPES, SIGNED, SINT, UINT, reg_width, scalar_type

def err_ptx(instr: ir.Instr, why: str) -> CudaError:
    return CudaError("cudaErrorInvalidPtx",
                     f"unsupported instruction {'.'.join((instr.opcode,) + instr.mods)} at line {instr.line}: {why}")


# ---------------------------------------------------------------------------------------------- value helpers
def _fit(v, w, signed):
    """Resize an integer/float array to a register of width w bits (sign- or zero-extension, truncation)."""
    iw = v.dtype.itemsize * 8
    if iw == w:
        return v
    if iw < w:
        src = v.view(SINT[iw] if signed else UINT[iw])
        return src.astype(SINT[w] if signed else UINT[w]).view(UINT[w])
    return v.view(UINT[iw]).astype(UINT[w])


def _where(m, t, old):
    """A masked register write: t where m, else the register's old value (reinterpreted as t's type)."""
    t = np.asarray(t)
    if old.dtype != t.dtype:
        old = old.view(t.dtype) if old.dtype.itemsize == t.dtype.itemsize else old.astype(t.dtype)
    return select(m, t, old)


def _scatter(old, sel, v):
    """A register write of the selected lanes `sel` (values v, one per selected lane)."""
    if old.dtype.itemsize == v.dtype.itemsize:
        new = old.view(v.dtype).copy()
    else:
        new = old.astype(v.dtype)
    new[sel] = v
    return new


def _cvta_param(v, to: bool):
    """cvta.param / cvta.to.param: kernel parameter addresses (PAR_WIN + offset) are the same in both; a call
    sequence's .param variable is a local offset in the .param space and LOC_WIN + offset as a generic address."""
    v = np.asarray(v, np.uint64)
    in_par = (v >= np.uint64(PAR_WIN)) & (v < np.uint64(PAR_WIN + WIN_SIZE))
    moved = v - np.uint64(LOC_WIN) if to else v + np.uint64(LOC_WIN)
    return np.where(in_par, v, moved)


def _uniform(v, T: int):
    """A register holding the same value in every lane (an immediate, a kernel parameter, an address): a read-only
    stride-0 view of one element rather than T copies of it (registers are never written in place; native code
    copies it when it needs it contiguous)."""
    return np.broadcast_to(np.asarray(v), (T,))


def _lanes(v, T: int):
    """A frame base per lane: v itself, or the constant v in every lane."""
    return np.full(T, v, np.uint64) if np.ndim(v) == 0 else v


def _brx_targets(i, table, mask, T: int, line: int, nxt: int):
    """The block of each lane of brx.idx (lanes outside mask: nxt); an index outside the table is
    cudaErrorInvalidPc (the ISA leaves it undefined)."""
    i = np.broadcast_to(np.asarray(i).astype(np.int64), (T,))
    act = np.ones(T, bool) if mask is None else np.broadcast_to(mask, (T,))
    bad = act & ((i < 0) | (i >= len(table)))
    if bad.any():
        raise CudaError("cudaErrorInvalidPc", f"brx.idx at PTX line {line}: index {int(i[bad][0])} is outside "
                                              f"its {len(table)} targets")
    return np.where(act, table[np.clip(i, 0, len(table) - 1)], nxt)


def _ocall_targets(a, table, mask, T: int, line: int):
    """The entry block of each lane's callee for a call through a register (table: entry block per function
    index, -1 if not callable here); any other address is cudaErrorInvalidPc."""
    a = np.broadcast_to(np.asarray(a, np.uint64), (T,))
    act = np.ones(T, bool) if mask is None else mask
    rel = a - np.uint64(FN_WIN)
    ok = (a >= np.uint64(FN_WIN)) & (rel < np.uint64(len(table) * FN_STRIDE)) & (rel % np.uint64(FN_STRIDE) == 0)
    tb = np.where(ok, table[np.where(ok, rel // np.uint64(FN_STRIDE), 0).astype(np.int64)], -1)
    bad = act & (tb < 0)
    if bad.any():
        raise CudaError("cudaErrorInvalidPc", f"call through {int(a[bad][0]):#x} at PTX line {line}: not the "
                                              f"address of a device function of this module")
    return np.where(act, tb, 0)


NAMESPACE = {"np": np, "_where": _where, "_scatter": _scatter, "_fit": _fit, "_cvta_param": _cvta_param,
             "_uniform": _uniform, "_lanes": _lanes, "_brx_targets": _brx_targets, "_ocall_targets": _ocall_targets}


class Codegen:
    """The code generator of one kernel (`k`: the translator's Kernel, for its layout and symbols)."""

    def __init__(self, kern) -> None:
        self.k = kern
        self.ns: dict = dict(NAMESPACE)
        self.nconst = 0
        self.specials_used: set[str] = set()
        self.reg_index: dict[str, int] = {n: i for i, n in enumerate(kern.flat.regs)}
        self.reg_width: dict[str, int] = {n: reg_width(t) for n, t in kern.flat.regs.items()}
        self.written: set[str] = set()          # variables of `make` the current block function assigns
        self.local_defined: set[str] = set()    # block-local registers the current block function assigned
        self.bar_sites: list = []
        self.bar_site_of: dict[int, int] = {}     # id(bar.red instruction) -> its site
        self.touched: set[str] = set()          # variables of `make` (registers, sp_*, _z*) the current block uses

    # ---------------------------------------------------------------- names
    def const(self, value, hint="c") -> str:
        self.nconst += 1
        name = f"_{hint}{self.nconst}"
        self.ns[name] = value
        return name

    def dt(self, t: str) -> str:
        return self.const(scalar_type(t), "dt")

    def rvar(self, name: str) -> str:
        v = f"r{self.reg_index[name]}"
        self.touched.add(v)
        return v

    @staticmethod
    def rt(member: str) -> str:
        """The expression for a member of the chunk; only ChunkAPI's members exist for generated code."""
        if member not in MEMBERS:
            raise AssertionError(f"generated code may not use S.{member}: ChunkAPI does not declare it")
        return f"S.{member}"

    # ---------------------------------------------------------------- operands
    def imm(self, o: ir.Imm, t: str, ins: ir.Instr):
        bits = BITS.get(t, 32)
        if t == "pred":
            return np.bool_(bool(o.value))
        if t in ("f32", "f64", "f16"):
            if o.is_float_bits:
                v = float_bits_to_value(o.value, 32 if len(o.text.lstrip("-")) == 10 else 64)
            else:
                v = float(o.value)
            with np.errstate(all="ignore"):
                return DTYPES[t].type(v)
        if isinstance(o.value, float):
            raise err_ptx(ins, f"float literal {o.text} for an integer operand")
        v = o.value & ((1 << bits) - 1)
        if t in SIGNED and v >= 1 << (bits - 1):
            v -= 1 << bits
        return (SINT[bits] if t in SIGNED else UINT[bits])(v)

    def src(self, o, t: str, ins: ir.Instr) -> str:
        if isinstance(o, ir.Reg):
            neg = o.name.startswith("!")
            name = o.name[1:] if neg else o.name
            if name in self.reg_index:
                return self._src_reg(name, neg, t, ins)
            if name in SPECIAL_REGISTERS:
                return self._src_special(name, t, ins)
            raise err_ptx(ins, f"undeclared register {name}")
        if isinstance(o, ir.Imm):
            return self.const(self.imm(o, t, ins))
        if isinstance(o, (ir.Sym, ir.Addr)):
            base, off = (o, 0) if isinstance(o, ir.Sym) else (o.base, o.offset)
            if not isinstance(base, ir.Sym):
                raise err_ptx(ins, "unexpected address operand")
            bits = BITS.get(t, 64)
            if self.k.frame_of(base.name) is not None:      # a local of a call frame: frame base + offset
                v = self.frame_address(base.name, off)
                return v if bits == 64 else f"{v}.astype({self.const(UINT[bits])})"
            addr = self.k.sym_address(base.name, ins) + off
            return self.const((UINT[bits] if bits in UINT else np.uint64)(addr & ((1 << bits) - 1)))
        if isinstance(o, ir.Vec):
            raise err_ptx(ins, "vector operand not allowed here")
        raise err_ptx(ins, f"bad operand {o!r}")

    def _src_reg(self, name: str, neg: bool, t: str, ins: ir.Instr) -> str:
        var = self.rvar(name)
        w = self.reg_width[name]
        if w == 1:
            if t != "pred":
                raise err_ptx(ins, f"predicate register {name} used as .{t}")
            return f"(~{var})" if neg else var
        if neg:
            raise err_ptx(ins, f"'!' on non-predicate register {name}")
        if t == "pred":
            raise err_ptx(ins, f"register {name} used as a predicate")
        tw = BITS[t]
        if tw == w:
            return f"{var}.view({self.dt(t)})"
        if tw < w:
            return f"{var}.view({self.const(UINT[w])}).astype({self.const(UINT[tw])}).view({self.dt(t)})"
        base = SINT[w] if t in SIGNED else UINT[w]
        return f"{var}.view({self.const(base)}).astype({self.dt(t)})"

    def _src_special(self, name: str, t: str, ins: ir.Instr) -> str:
        if name in CLOCKS:
            var = f"{self.rt('special')}({name!r})"     # read at each use: clocks advance
        else:
            self.specials_used.add(name)
            var = "sp_" + name.strip("%").replace(".", "_")
            self.touched.add(var)
        st = SPECIAL_REGISTERS[name]
        if (st == "pred") != (t == "pred"):
            raise err_ptx(ins, f"special register {name} (.{st}) read as .{t}")
        if st == "pred":
            return var
        sw, tw = BITS[st], BITS[t]
        if sw == tw:
            return f"{var}.view({self.dt(t)})"
        return f"{var}.astype({self.const(UINT[tw])}).view({self.dt(t)})"    # zero-extend or truncate

    def is_array_src(self, o) -> bool:
        """Whether an operand's value differs per lane (registers; addresses of call-frame variables)."""
        if isinstance(o, ir.Reg):
            return True
        base = o.base if isinstance(o, ir.Addr) else o
        return isinstance(base, ir.Sym) and self.k.frame_of(base.name) is not None

    # ---------------------------------------------------------------- call frames (inline.py, layout.py)
    @property
    def fp(self) -> str:
        """The variable of the hidden frame-base register (uint64 local offsets)."""
        return self.rvar(FP)

    def save_area(self, ctx: str | None) -> str:
        """Where a context saves its registers around its calls (a local address)."""
        off = self.k.layout.frames[ctx].save_off
        return str(off) if ctx is None else f"({self.fp} + {self.const(np.uint64(off))})"

    def callee_frame(self, ctx: str | None) -> str:
        """The frame base of a function called from context ctx: the call stack's base for the kernel body, else
        right after the caller's own frame."""
        if ctx is None:
            return self.const(np.uint64(self.k.layout.frame))
        return f"({self.fp} + {self.const(np.uint64(self.k.layout.frames[ctx].size))})"

    def frame_address(self, name: str, off: int = 0) -> str:
        """The local address of a variable (+ off): a constant in the static frame, frame base + offset in a call
        frame."""
        o = self.k.layout.local[name] + off
        if self.k.frame_of(name) is None:
            return str(o)
        return f"({self.fp} + {self.const(np.uint64(o))})"

    def write(self, lines: list, o, t: str, val: str, g: str | None, ins: ir.Instr, is_array=True) -> None:
        """Assign `val` (typed t) to destination operand o under mask g (None = all lanes)."""
        if isinstance(o, ir.Reg) and o.name == "_":
            return
        if not isinstance(o, ir.Reg) or o.name not in self.reg_index:
            raise err_ptx(ins, f"bad destination {o!r}")
        var = self.rvar(o.name)
        w = self.reg_width[o.name]
        if w == 1:
            if t != "pred":
                raise err_ptx(ins, f"predicate register {o.name} written as .{t}")
        else:
            if t == "pred":
                raise err_ptx(ins, f"register {o.name} written as a predicate")
            if BITS[t] != w:
                val = f"_fit({val}, {w}, {t in SIGNED})"
        if not is_array:
            val = f"_uniform({val}, T)"
        if g is None or (g == "m" and not self._is_global(o.name)):
            # a block-local register under the block's own mask: the other lanes never read this value
            lines.append(f"{var} = {val}")
        else:
            lines.append(f"{var} = _where({g}, {val}, {self._old(o.name)})")
        self._assigned(o.name)

    def write_selected(self, lines: list, o: ir.Reg, t: str, val: str, sel: str) -> None:
        """Assign `val` (typed t, one value per selected lane, or per lane when sel is "None") to register o."""
        var = self.rvar(o.name)
        w = self.reg_width[o.name]
        if BITS[t] != w:
            val = f"_fit({val}, {w}, {t in SIGNED})"
        if sel == "None":
            lines.append(f"{var} = {val}")
        else:
            lines.append(f"{var} = _scatter({self._old(o.name)}, _s, {val})")
        self._assigned(o.name)

    # ---------------------------------------------------------------- register scopes
    # Registers live into some block are variables of `make` (closure cells, shared by the block functions, written
    # with `nonlocal`); every other register lives within one block and is a local variable of the block function
    # (faster, and far fewer cells for Python to compile: nvcc's PTX defines thousands of short-lived registers).
    def _is_global(self, name: str) -> bool:
        return name in self.k.global_regs

    def _assigned(self, name: str) -> None:
        if self._is_global(name):
            self.written.add(self.rvar(name))
        else:
            self.local_defined.add(name)

    def _old(self, name: str) -> str:
        """A register's value before a partial write: for a block-local register not yet assigned in this block,
        zeros (no lane reads that value)."""
        if self._is_global(name) or name in self.local_defined:
            return self.rvar(name)
        w = self.reg_width[name]
        self.touched.add(f"_z{w}")
        return f"_z{w}"

    # ---------------------------------------------------------------- address operands
    def address(self, o, ins: ir.Instr):
        """-> (kind, expr, const_offset): kind 'reg' (expr = u64/u32 array), 'frame' (expr = the frame base, a
        local variable of a call frame), 'const' (absolute address in the space), 'kparam' (kernel parameter byte
        offset)."""
        if not isinstance(o, ir.Addr):
            raise err_ptx(ins, "expected a [address] operand")
        if o.base is None:
            return "const", None, o.offset
        if isinstance(o.base, ir.Reg):
            name = o.base.name
            if name not in self.reg_index:
                raise err_ptx(ins, f"undeclared address register {name}")
            w = self.reg_width[name]
            if w not in (32, 64):
                raise err_ptx(ins, f"address register {name} is not 32 or 64 bits wide")
            return "reg", f"{self.rvar(name)}.view({self.const(UINT[w])})", o.offset
        sym = o.base.name
        kparams = self.k.layout.kparams
        if sym in kparams:
            return "kparam", None, kparams[sym] + o.offset
        if self.k.frame_of(sym) is not None:
            return "frame", self.fp, self.k.layout.local[sym] + o.offset
        return "const", None, self.k.sym_address(sym, ins) + o.offset

    # ---------------------------------------------------------------- guards
    def guard(self, ins: ir.Instr, masked: bool) -> str | None:
        """The lane mask expression an instruction runs under (None: every lane of a converged block)."""
        if ins.guard is None:
            return "m" if masked else None
        name, neg = ins.guard
        if name not in self.reg_index or self.reg_width[name] != 1:
            raise err_ptx(ins, f"guard {name} is not a predicate register")
        p = self.rvar(name)
        e = f"(~{p})" if neg else p
        return f"(m & {e})" if masked else e

    @staticmethod
    def sel(lines: list, gexpr: str | None) -> str:
        """The selection (`_s`, lane indices) of a guard, for memory operations; "None" for all lanes."""
        if gexpr is None:
            return "None"
        lines.append(f"_s = np.flatnonzero({gexpr})")
        return "_s"
