"""The lockstep PTX interpreter.

Execution model
---------------
All threads of a launch chunk (whole CTAs, `EmuLimits.lanes_per_chunk` lanes at most) are one NumPy lane vector.
Lane order is thread order: lane = cta * threads_per_cta + (x + y*bx + z*bx*by). There is no padding: a CTA whose
size is not a multiple of 32 simply has a short last warp.

A kernel is compiled once (at module load): `.func` calls are inlined per call site (recursion is refused), the
flat body is split into basic blocks and each block becomes Python source, exec'd once. For every chunk,
`make(S)` binds the blocks to that chunk's state (registers are closure variables holding immutable NumPy arrays;
a write rebinds the name, a masked write builds a new array with np.where), giving two functions per block: a
converged version (every lane of the chunk is live and at this block: no masks at all) and a masked one.

Scheduling: per-lane PC (block index) and state (run / barrier / warp-wait / exited). While converged the
driver simply follows the block functions' return values; when lanes diverge it runs the block with the lowest PC
over the lanes sitting there (min-PC, which reconverges at NVVM's join points), and goes back to the converged path
as soon as every lane is live and at one PC again.

bar.sync/bar.red/barrier: lanes park; when nothing can run, every CTA whose non-exited lanes are all parked is
released (exited threads count as arrived). A CTA that cannot be released with nothing runnable is a deadlock
(cudaErrorLaunchFailure). Warp `.sync` operations wait until the non-exited lanes of their member mask are at
the same instruction (lanes still running elsewhere are waited for; lanes parked elsewhere are not).

Memory: global through DeviceMemory (every access checked by `check_access`); module `.global`/`.const` variables
live there too; shared is one uint8 array of `n_cta * shared_size` per chunk (32-bit shared addresses); local is one
uint8 array of `lanes * frame` (the kernel's local depots plus the parameter space of call sequences); kernel
parameters are read from the packed launch buffer; generic addresses are global addresses as they are, and shared
or local addresses plus a window base (cvta).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pyvgpu_daemon.errors import CudaError

from .limits import EmuLimits
from .ops import build_alu, is_alu
from .ops.common import DTYPES
from .ptx import ir
from .ptx.parser import float_bits_to_value

SH_WIN = 0x00FF_0000_0000_0000      # generic address of shared offset 0
LOC_WIN = 0x00FE_0000_0000_0000     # generic address of local offset 0
WIN_SIZE = 1 << 40

RUN, BAR, WAIT, EXIT = 0, 1, 2, 3

U = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
SI = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_TYPE_BITS = {"b8": 8, "s8": 8, "u8": 8, "b16": 16, "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "b32": 32,
              "s32": 32, "u32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "b64": 64, "s64": 64, "u64": 64,
              "f64": 64, "pred": 1, "b128": 128}
_SIGNED = {"s8", "s16", "s32", "s64"}

SPECIALS = {"%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
            "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid",
            "%gridid", "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge", "%lanemask_gt",
            "%clock", "%clock64", "%clock_hi", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi",
            "%dynamic_smem_size", "%total_smem_size", "%warpsize", "WARP_SZ"}

_LDST_MODS = {"ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt", "volatile", "relaxed", "acquire", "release", "weak",
              "cta", "gpu", "sys", "cluster", "mmio", "L1::evict_normal", "L1::evict_unchanged",
              "L1::evict_first", "L1::evict_last", "L1::no_allocate", "L2::64B", "L2::128B", "L2::256B"}
_SPACES = {"global", "shared", "local", "param", "const"}
_ATOM_SEM = {"relaxed", "acquire", "release", "acq_rel", "cta", "gpu", "sys", "cluster", "noftz"}
_ATOM_OPS = {"add", "min", "max", "and", "or", "xor", "exch", "cas", "inc", "dec"}


def _err_ptx(instr: ir.Instr, why: str) -> CudaError:
    return CudaError("cudaErrorInvalidPtx",
                     f"unsupported instruction {'.'.join((instr.opcode,) + instr.mods)} at line {instr.line}: {why}")


def _reg_width(t: str) -> int:
    b = _TYPE_BITS[t]
    if b == 1:
        return 1
    if b == 8:
        return 16
    if b == 128:
        raise CudaError("cudaErrorInvalidPtx", ".b128 registers are not supported")
    return b


def _fit(v, w, signed):
    """Resize an integer/float array to a register of width w bits (sign- or zero-extension, truncation)."""
    iw = v.dtype.itemsize * 8
    if iw == w:
        return v
    if iw < w:
        src = v.view(SI[iw] if signed else U[iw])
        return src.astype(SI[w] if signed else U[w]).view(U[w])
    return v.view(U[iw]).astype(U[w])


def _where(m, t, old):
    t = np.asarray(t)
    if old.dtype != t.dtype:
        old = old.view(t.dtype) if old.dtype.itemsize == t.dtype.itemsize else old.astype(t.dtype)
    return np.where(m, t, old)


def _scatter(old, sel, v):
    if old.dtype.itemsize == v.dtype.itemsize:
        new = old.view(v.dtype).copy()
    else:
        new = old.astype(v.dtype)
    new[sel] = v
    return new


# ====================================================================================== compile: inlining
@dataclass
class FlatKernel:
    name: str
    body: list                    # Instr | label
    regs: dict                    # name -> decl type
    locals: list                  # VarDecl (local, param, shared) with final names
    entry: ir.Function


def _inline(mod: ir.Module, entry: ir.Function, limits: EmuLimits) -> FlatKernel:
    body: list = []
    regs: dict[str, str] = {}
    locals_: list[ir.VarDecl] = []
    counter = [0]

    def regset(fn):
        out = {}
        for r in fn.regs:
            if r.count is None:
                out[r.name] = r.type
            else:
                for k in range(r.count):
                    out[f"{r.name}{k}"] = r.type
        return out

    def expand(fn: ir.Function, prefix: str, pmap: dict, end_label: str | None, stack: tuple):
        rs = regset(fn)
        for n, t in rs.items():
            regs[prefix + n] = t
        labels = {x for x in fn.body if isinstance(x, str)}
        localnames = {}
        for v in fn.locals:
            if v.space == "shared":
                nm = v.name if fn.is_entry else f"{fn.name}::{v.name}"
                if not any(lv.name == nm for lv in locals_):
                    locals_.append(ir.VarDecl(v.space, nm, v.type, v.align, v.count, v.init, v.extern))
                localnames[v.name] = nm
            else:
                nm = prefix + v.name
                locals_.append(ir.VarDecl(v.space, nm, v.type, v.align, v.count, v.init, v.extern))
                localnames[v.name] = nm

        def rn(o):
            if isinstance(o, ir.Reg):
                neg = o.name.startswith("!")
                n = o.name[1:] if neg else o.name
                if n in rs:
                    n = prefix + n
                return ir.Reg(("!" if neg else "") + n)
            if isinstance(o, ir.Sym):
                n = o.name
                if n in pmap:
                    return ir.Sym(pmap[n])
                if n in localnames:
                    return ir.Sym(localnames[n])
                if n in labels:
                    return ir.Sym(prefix + n)
                return o
            if isinstance(o, ir.Addr):
                return ir.Addr(rn(o.base) if o.base is not None else None, o.offset)
            if isinstance(o, ir.Vec):
                return ir.Vec(tuple(rn(e) for e in o.elems))
            return o

        for item in fn.body:
            if isinstance(item, str):
                body.append(prefix + item)
                continue
            ins = item
            guard = None
            if ins.guard is not None:
                g, neg = ins.guard
                guard = (prefix + g if g in rs else g, neg)
            if ins.opcode in ("ret", "exit") and not fn.is_entry and ins.opcode == "ret":
                body.append(ir.Instr("bra", ("uni",) if guard is None else (), [], [ir.Sym(end_label)], guard,
                                     ins.line, "ret"))
                continue
            if ins.opcode == "call":
                target = ins.srcs[0].name
                callee = mod.functions.get(target)
                if callee is not None and not callee.is_entry:
                    if target in stack:
                        raise CudaError("cudaErrorInvalidPtx",
                                        f"recursive call to {target} at line {ins.line} is not supported")
                    if len(stack) > limits.max_call_depth:
                        raise CudaError("cudaErrorInvalidPtx", f"call depth above {limits.max_call_depth}")
                    counter[0] += 1
                    site = counter[0]
                    cprefix = f"{target}@{site}:"
                    args = [rn(a) for a in ins.srcs[1:]]
                    rets = [rn(a) for a in ins.dsts]
                    if len(args) != len(callee.params) or len(rets) != len(callee.returns):
                        raise CudaError("cudaErrorInvalidPtx", f"call to {target} at line {ins.line}: "
                                                               f"argument count does not match its declaration")
                    cmap = {}
                    for p, a in zip(callee.params + callee.returns, args + rets):
                        if not isinstance(a, ir.Sym):
                            raise CudaError("cudaErrorInvalidPtx",
                                            f"call to {target} at line {ins.line}: register arguments unsupported")
                        cmap[p.name] = a.name
                    end = f"{cprefix}$END"
                    skip = None
                    if guard is not None:
                        skip = f"{cprefix}$SKIP"
                        body.append(ir.Instr("bra", (), [], [ir.Sym(skip)], (guard[0], not guard[1]), ins.line,
                                             "call guard"))
                    expand(callee, cprefix, cmap, end, stack + (target,))
                    body.append(end)
                    if skip:
                        body.append(skip)
                    continue
                new = ir.Instr("call", ins.mods, [rn(d) for d in ins.dsts],
                               [ins.srcs[0]] + [rn(s) for s in ins.srcs[1:]], guard, ins.line, ins.text)
                body.append(new)
                continue
            body.append(ir.Instr(ins.opcode, ins.mods, [rn(d) for d in ins.dsts], [rn(s) for s in ins.srcs],
                                 guard, ins.line, ins.text))

    expand(entry, "", {}, None, (entry.name,))
    return FlatKernel(entry.name, body, regs, locals_, entry)


# ====================================================================================== compile: layout
def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass
class Block:
    index: int
    instrs: list
    term: ir.Instr | None        # bra / ret / exit / bar / warp op (None: fall through)
    kind: str                    # 'plain' | 'bar' | 'warp'


_WARP_OPS = {"shfl", "vote", "redux", "activemask", "match"}


def _is_warp(ins: ir.Instr) -> bool:
    return ins.opcode in _WARP_OPS or (ins.opcode in ("bar", "barrier") and "warp" in ins.mods)


def _is_bar(ins: ir.Instr) -> bool:
    return ins.opcode in ("bar", "barrier") and "warp" not in ins.mods


def _split_blocks(body: list) -> tuple[list[Block], dict[str, int]]:
    blocks: list[Block] = []
    labels: dict[str, int] = {}
    cur: list = []
    pending_labels: list[str] = []

    def close(term, kind):
        nonlocal cur, pending_labels
        b = Block(len(blocks), cur, term, kind)
        for lb in pending_labels:
            labels[lb] = b.index
        pending_labels = []
        blocks.append(b)
        cur = []

    for item in body:
        if isinstance(item, str):
            if cur or pending_labels and False:
                close(None, "plain")
            pending_labels.append(item)
            continue
        if _is_warp(item):
            if cur:
                close(None, "plain")
            close(item, "warp")
            continue
        if _is_bar(item):
            close(item, "bar")
            continue
        if item.opcode in ("bra", "ret", "exit", "brx"):
            close(item, "plain")
            continue
        cur.append(item)
    if cur or pending_labels:
        close(ir.Instr("exit", (), [], [], None, 0, "end of body"), "plain")
    else:
        close(ir.Instr("exit", (), [], [], None, 0, "end of body"), "plain")
    return blocks, labels


# ====================================================================================== compile: code generation
class _Gen:
    def __init__(self, kern: "Kernel") -> None:
        self.k = kern
        self.ns: dict = {"np": np, "_where": _where, "_scatter": _scatter, "_fit": _fit, "CudaError": CudaError}
        self.nconst = 0
        self.specials_used: set[str] = set()
        self.param_consts: list[tuple[str, int, str]] = []    # (name, offset, type)
        self.reg_index: dict[str, int] = {n: i for i, n in enumerate(kern.flat.regs)}
        self.reg_width: dict[str, int] = {n: _reg_width(t) for n, t in kern.flat.regs.items()}
        self.written: set[str] = set()
        self.bar_sites: list = []

    def const(self, value, hint="c") -> str:
        self.nconst += 1
        name = f"_{hint}{self.nconst}"
        self.ns[name] = value
        return name

    def dt(self, t: str) -> str:
        return self.const(DTYPES[t].type if t in DTYPES else U[_TYPE_BITS[t]], "dt")

    def rvar(self, name: str) -> str:
        return f"r{self.reg_index[name]}"

    # ---------------------------------------------------------------- operands
    def imm(self, o: ir.Imm, t: str, ins: ir.Instr):
        bits = _TYPE_BITS.get(t, 32)
        if t == "pred":
            return np.bool_(bool(o.value))
        if t in ("f32", "f64", "f16"):
            if o.is_float_bits:
                w = 32 if len(o.text.lstrip("-")) == 10 else 64
                v = float_bits_to_value(o.value, w)
            else:
                v = float(o.value)
            with np.errstate(all="ignore"):
                return DTYPES[t].type(v)
        if o.is_float_bits or isinstance(o.value, float):
            if isinstance(o.value, float):
                raise _err_ptx(ins, f"float literal {o.text} for an integer operand")
            w = 32 if len(o.text.lstrip("-")) == 10 else 64
            v = o.value
        else:
            v = o.value
        v &= (1 << bits) - 1
        if t in _SIGNED and v >= 1 << (bits - 1):
            v -= 1 << bits
        return (SI[bits] if t in _SIGNED else U[bits])(v)

    def src(self, o, t: str, ins: ir.Instr) -> str:
        if isinstance(o, ir.Reg):
            name = o.name
            neg = name.startswith("!")
            if neg:
                name = name[1:]
            if name in self.reg_index:
                var = self.rvar(name)
                w = self.reg_width[name]
                if w == 1:
                    if t != "pred":
                        raise _err_ptx(ins, f"predicate register {name} used as .{t}")
                    return f"(~{var})" if neg else var
                if neg:
                    raise _err_ptx(ins, f"'!' on non-predicate register {name}")
                if t == "pred":
                    raise _err_ptx(ins, f"register {name} used as a predicate")
                tw = _TYPE_BITS[t]
                if tw == w:
                    return f"{var}.view({self.dt(t)})"
                if tw < w:
                    return f"{var}.view({self.const(U[w])}).astype({self.const(U[tw])}).view({self.dt(t)})"
                base = SI[w] if t in _SIGNED else U[w]
                return f"{var}.view({self.const(base)}).astype({self.dt(t)})"
            if name in SPECIALS:
                if name.startswith(("%clock", "%globaltimer")):
                    var = f"S.special({name!r})"     # read at each use: clocks advance
                else:
                    self.specials_used.add(name)
                    var = "sp_" + name.strip("%").replace(".", "_")
                if _TYPE_BITS.get(t) == 64 and name not in ("%clock64", "%globaltimer"):
                    return f"{var}.astype({self.dt(t)})"
                if _TYPE_BITS.get(t) == 32 and name in ("%clock64", "%globaltimer"):
                    return f"{var}.astype({self.const(np.uint32)}).view({self.dt(t)})"
                return f"{var}.view({self.dt(t)})"
            raise _err_ptx(ins, f"undeclared register {name}")
        if isinstance(o, ir.Imm):
            return self.const(self.imm(o, t, ins))
        if isinstance(o, (ir.Sym, ir.Addr)):
            base, off = (o, 0) if isinstance(o, ir.Sym) else (o.base, o.offset)
            if not isinstance(base, ir.Sym):
                raise _err_ptx(ins, "unexpected address operand")
            addr = self.k.sym_address(base.name, ins) + off
            bits = _TYPE_BITS.get(t, 64)
            return self.const((U[bits] if bits in U else np.uint64)(addr & ((1 << bits) - 1)))
        if isinstance(o, ir.Vec):
            raise _err_ptx(ins, "vector operand not allowed here")
        raise _err_ptx(ins, f"bad operand {o!r}")

    def is_array_src(self, o) -> bool:
        if isinstance(o, ir.Reg):
            return True
        return False

    def write(self, lines: list, o, t: str, val: str, g: str | None, ins: ir.Instr, is_array=True) -> None:
        """Assign `val` (typed t) to destination operand o under mask g (None = all lanes)."""
        if isinstance(o, ir.Reg) and o.name == "_":
            return
        if not isinstance(o, ir.Reg) or o.name not in self.reg_index:
            raise _err_ptx(ins, f"bad destination {o!r}")
        var = self.rvar(o.name)
        self.written.add(var)
        w = self.reg_width[o.name]
        if w == 1:
            if t != "pred":
                raise _err_ptx(ins, f"predicate register {o.name} written as .{t}")
        else:
            if t == "pred":
                raise _err_ptx(ins, f"register {o.name} written as a predicate")
            tw = _TYPE_BITS[t]
            if tw != w:
                val = f"_fit({val}, {w}, {t in _SIGNED})"
        if not is_array:
            val = f"np.full(T, {val})"
        if g is None:
            lines.append(f"{var} = {val}")
        else:
            lines.append(f"{var} = _where({g}, {val}, {var})")

    # ---------------------------------------------------------------- address operands
    def address(self, o, ins: ir.Instr, space: str):
        """-> (kind, expr, const_offset): kind 'reg' (expr = u64/u32 array), 'const' (absolute address in the
        space), 'kparam' (kernel parameter byte offset)."""
        if not isinstance(o, ir.Addr):
            raise _err_ptx(ins, "expected a [address] operand")
        if o.base is None:
            return "const", None, o.offset
        if isinstance(o.base, ir.Reg):
            name = o.base.name
            if name not in self.reg_index:
                raise _err_ptx(ins, f"undeclared address register {name}")
            w = self.reg_width[name]
            if w not in (32, 64):
                raise _err_ptx(ins, f"address register {name} is not 32 or 64 bits wide")
            return "reg", f"{self.rvar(name)}.view({self.const(U[w])})", o.offset
        sym = o.base.name
        if sym in self.k.kparams:
            return "kparam", None, self.k.kparams[sym] + o.offset
        return "const", None, self.k.sym_address(sym, ins) + o.offset


class Kernel:
    """One .entry compiled for the interpreter."""

    def __init__(self, mod: ir.Module, entry: ir.Function, symbols: dict[str, int], limits: EmuLimits):
        self.mod = mod
        self.limits = limits
        self.symbols = symbols                 # module .global/.const variable -> device address
        self.flat = _inline(mod, entry, limits)
        self.name = entry.name
        # kernel params
        self.kparams: dict[str, int] = {}
        self.param_layout: list[tuple[int, int]] = []
        off = 0
        for p in entry.params:
            a = p.align or min(p.size, 8) if p.count is None else (p.align or _TYPE_BITS[p.type] // 8)
            a = max(1, a)
            off = _align(off, a)
            self.kparams[p.name] = off
            self.param_layout.append((off, p.size))
            off += p.size
        self.param_size = off
        # shared layout: module-level shared variables used by this kernel, then function-level, then dynamic
        used_syms = set()
        for ins in self.flat.body:
            if isinstance(ins, ir.Instr):
                for o in ins.srcs + ins.dsts:
                    b = o.base if isinstance(o, ir.Addr) else o
                    if isinstance(b, ir.Sym):
                        used_syms.add(b.name)
        self.shared: dict[str, int] = {}
        self.local: dict[str, int] = {}
        self.dyn_shared_names: set[str] = set()
        soff = 0
        shared_decls = [v for v in mod.variables if v.space == "shared" and v.name in used_syms] + \
                       [v for v in self.flat.locals if v.space == "shared"]
        for v in shared_decls:
            if v.extern or v.count == 0:
                self.dyn_shared_names.add(v.name)
                continue
            soff = _align(soff, max(v.align, 1))
            self.shared[v.name] = soff
            soff += v.size
        self.static_shared = soff
        self.dyn_shared_base = _align(soff, 16)
        for n in self.dyn_shared_names:
            self.shared[n] = self.dyn_shared_base
        self.shared_inits = [(self.shared[v.name], v) for v in shared_decls if v.init and v.name in self.shared]
        loff = 0
        for v in self.flat.locals:
            if v.space in ("local", "param"):
                loff = _align(loff, max(v.align, 1))
                self.local[v.name] = loff
                loff += v.size
        self.local_size = loff
        self.frame = _align(max(loff, 16), 16)
        if self.frame > limits.max_local_bytes:
            raise CudaError("cudaErrorInvalidPtx", f"{self.name}: {self.frame} B of local memory per thread")
        self.maxntid = entry.maxntid
        self.num_regs = min(255, sum(2 if _reg_width(t) == 64 else 1 for t in self.flat.regs.values()))
        # which registers are ever read (atom results nobody reads take the fast path)
        self.read_regs: set[str] = set()
        for ins in self.flat.body:
            if isinstance(ins, ir.Instr):
                if ins.guard:
                    self.read_regs.add(ins.guard[0])
                for o in ins.srcs:
                    self._collect_reads(o)
                if ins.opcode == "mov" and ins.dsts and isinstance(ins.dsts[0], ir.Vec):
                    pass
        self.blocks, self.labels = _split_blocks(self.flat.body)
        self.bar_kinds: list[str] = []
        self._compile()

    def _collect_reads(self, o):
        if isinstance(o, ir.Reg):
            self.read_regs.add(o.name.lstrip("!"))
        elif isinstance(o, ir.Addr) and isinstance(o.base, ir.Reg):
            self.read_regs.add(o.base.name)
        elif isinstance(o, ir.Vec):
            for e in o.elems:
                self._collect_reads(e)

    def sym_address(self, name: str, ins: ir.Instr) -> int:
        if name in self.symbols:
            return self.symbols[name]
        if name in self.shared:
            return self.shared[name]
        if name in self.local:
            return self.local[name]
        if name in self.kparams:
            raise _err_ptx(ins, f"taking the address of kernel parameter {name} is not supported")
        if name in self.mod.functions or name in self.mod.externs:
            raise _err_ptx(ins, f"function pointers ({name}) are not supported")
        raise _err_ptx(ins, f"unknown symbol {name}")

    def sym_space(self, name: str) -> str:
        if name in self.symbols:
            return "global"
        if name in self.shared:
            return "shared"
        if name in self.local:
            return "local"
        if name in self.kparams:
            return "kparam"
        return "?"

    # ------------------------------------------------------------------------------------------ codegen
    def _compile(self) -> None:
        g = _Gen(self)
        self.gen = g
        funcs: list[str] = []
        for b in self.blocks:
            for masked in (False, True):
                funcs.append(self._gen_block(g, b, masked))
        # bar.red release handlers
        handlers = []
        for site, (dst, t) in enumerate(g.bar_sites):
            lines: list[str] = []
            g.write(lines, dst, t, "v", "mm", None)
            var = g.rvar(dst.name)
            handlers.append(f"    def h{site}(mm, v):\n        nonlocal {var}\n        " + "\n        ".join(lines))
        src = ["def make(S):", "    T = S.T", "    pcv = S.pc", "    stv = S.st"]
        for name in sorted(g.specials_used):
            src.append(f"    sp_{name.strip('%').replace('.', '_')} = S.special({name!r})")
        for name, w in g.reg_width.items():
            src.append(f"    {g.rvar(name)} = S.zeros[{w}]")
        for f in funcs:
            src.append(f)
        src.extend(handlers)
        blist = ", ".join(f"(c{b.index}, m{b.index})" for b in self.blocks)
        hlist = ", ".join(f"h{i}" for i in range(len(g.bar_sites)))
        src.append(f"    return [{blist}], [{hlist}]")
        self.source = "\n".join(src)
        try:
            code = compile(self.source, f"<ptx {self.name}>", "exec")
        except SyntaxError as e:  # a bug in the generator, not in the user's PTX
            raise CudaError("cudaErrorInvalidPtx", f"{self.name}: internal code generation error: {e}") from e
        exec(code, g.ns)
        self.make = g.ns["make"]

    def _gen_block(self, g: _Gen, b: Block, masked: bool) -> str:
        g.written = set()
        lines: list[str] = []
        nxt = b.index + 1
        for ins in b.instrs:
            self._gen_instr(g, ins, lines, masked)
        t = b.term
        if b.kind == "warp":
            self._gen_warp(g, t, lines, masked, nxt)
        elif b.kind == "bar":
            self._gen_bar(g, t, lines, masked, nxt)
        else:
            self._gen_term(g, t, lines, masked, nxt)
        name = f"{'m' if masked else 'c'}{b.index}"
        head = f"    def {name}({'m' if masked else ''}):"
        body = []
        if g.written:
            body.append("nonlocal " + ", ".join(sorted(g.written)))
        body.extend(lines)
        return head + "\n" + "\n".join("        " + ln for ln in body)

    def _guard(self, g: _Gen, ins: ir.Instr, masked: bool) -> str | None:
        if ins.guard is None:
            return "m" if masked else None
        name, neg = ins.guard
        if name not in g.reg_index or g.reg_width[name] != 1:
            raise _err_ptx(ins, f"guard {name} is not a predicate register")
        p = g.rvar(name)
        e = f"(~{p})" if neg else p
        return f"(m & {e})" if masked else e

    # ---------------------------------------------------------------- terminators
    def _gen_term(self, g, t: ir.Instr, lines, masked, nxt):
        if t is None:
            lines.append(f"pcv[m] = {nxt}" if masked else f"return {nxt}")
            return
        if t.opcode == "bra":
            if not t.srcs or not isinstance(t.srcs[0], ir.Sym) or t.srcs[0].name not in self.labels:
                raise _err_ptx(t, "branch to an unknown label")
            tgt = self.labels[t.srcs[0].name]
            for m_ in t.mods:
                if m_ != "uni":
                    raise _err_ptx(t, f"modifier .{m_}")
            if t.guard is None:
                lines.append(f"pcv[m] = {tgt}" if masked else f"return {tgt}")
                return
            p = self._guard(g, t, False)
            if masked:
                lines.append(f"_p = {p}")
                lines.append(f"pcv[m] = {nxt}")
                lines.append(f"pcv[m & _p] = {tgt}")
            else:
                lines.append(f"_p = {p}")
                lines.append("_n = np.count_nonzero(_p)")
                lines.append(f"if _n == T: return {tgt}")
                lines.append(f"if _n == 0: return {nxt}")
                lines.append(f"pcv[:] = np.where(_p, {tgt}, {nxt})")
                lines.append("return -1")
            return
        if t.opcode in ("ret", "exit"):
            if t.guard is None:
                lines.append("stv[m] = 3" if masked else "return -2")
                return
            p = self._guard(g, t, False)
            lines.append(f"_p = {p}")
            if masked:
                lines.append(f"pcv[m] = {nxt}")
                lines.append("stv[m & _p] = 3")
            else:
                lines.append("_n = np.count_nonzero(_p)")
                lines.append("if _n == T: return -2")
                lines.append(f"if _n == 0: return {nxt}")
                lines.append("stv[_p] = 3")
                lines.append(f"pcv[:] = {nxt}")
                lines.append("return -1")
            return
        raise _err_ptx(t, "unsupported control flow")

    def _gen_bar(self, g, t: ir.Instr, lines, masked, nxt):
        mods = [m for m in t.mods if m not in ("aligned", "cta")]
        if t.guard is not None:
            raise _err_ptx(t, "predicated barriers are not supported")
        red = None
        if mods and mods[0] in ("sync", "red") or t.opcode == "barrier" and mods and mods[0] in ("sync", "red"):
            kind = mods[0]
        elif not mods and t.opcode == "bar":
            kind = "sync"
        else:
            raise _err_ptx(t, "only bar.sync/bar.red/barrier.sync are supported")
        srcs = list(t.srcs)
        if kind == "red":
            if len(mods) != 3 or mods[1] not in ("popc", "and", "or") or mods[2] not in ("u32", "pred"):
                raise _err_ptx(t, "expected bar.red.{popc.u32,and.pred,or.pred}")
            red = mods[1]
            pred_op = srcs[-1]
            srcs = srcs[:-1]
        elif len(mods) != 1:
            raise _err_ptx(t, "unexpected modifiers")
        if not srcs or not isinstance(srcs[0], ir.Imm) or srcs[0].value != 0:
            bar_id = srcs[0].value if srcs and isinstance(srcs[0], ir.Imm) else None
            if bar_id is None:
                raise _err_ptx(t, "barrier id must be an immediate")
        if len(srcs) > 1:
            lines.append(f"S.check_bar_count({g.src(srcs[1], 'u32', t)}, {t.line})")
        if red is None:
            if masked:
                lines.append("stv[m] = 1")
                lines.append(f"pcv[m] = {nxt}")
            else:
                lines.append(f"return {nxt}")
            return
        p = g.src(pred_op, "pred", t)
        if masked:
            site = len(g.bar_sites)
            g.bar_sites.append((t.dsts[0], "u32" if red == "popc" else "pred"))
            self.bar_kinds.append(red)
            lines.append(f"S.barpred[m] = {p}[m]")
            lines.append(f"S.barsite[m] = {site}")
            lines.append("stv[m] = 1")
            lines.append(f"pcv[m] = {nxt}")
        else:
            lines.append(f"_v = S.cta_reduce({p}, {red!r}, None)")
            g.write(lines, t.dsts[0], "u32" if red == "popc" else "pred", "_v", None, t)
            lines.append(f"return {nxt}")

    def _gen_warp(self, g, t: ir.Instr, lines, masked, nxt):
        op = t.opcode
        if t.guard is not None and op != "activemask":
            gexpr = self._guard(g, t, masked)
        else:
            gexpr = "m" if masked else None
        mask_src = None
        if op == "bar":
            if t.mods not in (("warp", "sync"),):
                raise _err_ptx(t, "expected bar.warp.sync")
            mask_src = t.srcs[0]
        elif op == "shfl":
            if len(t.mods) != 3 or t.mods[0] != "sync" or t.mods[1] not in ("up", "down", "bfly", "idx") \
                    or t.mods[2] != "b32":
                raise _err_ptx(t, "expected shfl.sync.{up,down,bfly,idx}.b32")
            mask_src = t.srcs[3]
        elif op == "vote":
            if len(t.mods) != 3 or t.mods[0] != "sync" or (t.mods[1], t.mods[2]) not in (
                    ("ballot", "b32"), ("any", "pred"), ("all", "pred"), ("uni", "pred")):
                raise _err_ptx(t, "expected vote.sync.{ballot.b32,any.pred,all.pred,uni.pred}")
            mask_src = t.srcs[1]
        elif op == "redux":
            if len(t.mods) != 3 or t.mods[0] != "sync" or t.mods[1] not in (
                    "add", "min", "max", "and", "or", "xor") or t.mods[2] not in ("u32", "s32", "b32"):
                raise _err_ptx(t, "expected redux.sync.{add,min,max,and,or,xor}.{u32,s32,b32}")
            mask_src = t.srcs[1]
        elif op == "activemask":
            if t.mods != ("b32",):
                raise _err_ptx(t, "expected activemask.b32")
        elif op == "match":
            if len(t.mods) != 3 or t.mods[0] not in ("any", "all") or t.mods[1] != "sync" \
                    or t.mods[2] not in ("b32", "b64"):
                raise _err_ptx(t, "expected match.{any,all}.sync.{b32,b64}")
            if t.mods[0] == "any" and len(t.dsts) != 1:
                raise _err_ptx(t, "match.any has no predicate destination")
            mask_src = t.srcs[1]
        else:
            raise _err_ptx(t, "warp operation not supported")
        msk = g.src(mask_src, "u32", t) if mask_src is not None else "None"
        if masked and op != "activemask":       # activemask reports who is here; it never waits
            lines.append(f"m = S.warp_ready(m, {msk}, {nxt})")
            lines.append("if m is None: return")
            if gexpr is not None and gexpr != "m":
                gexpr = self._guard(g, t, True)
        if op == "bar":
            pass
        elif op == "shfl":
            a = g.src(t.srcs[0], "b32", t)
            b = g.src(t.srcs[1], "u32", t)
            c = g.src(t.srcs[2], "u32", t)
            lines.append(f"_d, _p = S.shfl({t.mods[1]!r}, {a}, {b}, {c}, {gexpr})")
            g.write(lines, t.dsts[0], "b32", "_d", gexpr, t)
            if len(t.dsts) > 1:
                g.write(lines, t.dsts[1], "pred", "_p", gexpr, t)
        elif op == "vote":
            p = g.src(t.srcs[0], "pred", t)
            lines.append(f"_d = S.vote({t.mods[1]!r}, {p}, {msk}, {gexpr})")
            g.write(lines, t.dsts[0], t.mods[2], "_d", gexpr, t)
        elif op == "redux":
            a = g.src(t.srcs[0], t.mods[2], t)
            lines.append(f"_d = S.redux({t.mods[1]!r}, {t.mods[2]!r}, {a}, {msk}, {gexpr})")
            g.write(lines, t.dsts[0], t.mods[2], "_d", gexpr, t)
        elif op == "match":
            a = g.src(t.srcs[0], t.mods[2], t)
            lines.append(f"_d, _p = S.match({t.mods[0]!r}, {a}, {msk}, {gexpr})")
            g.write(lines, t.dsts[0], "b32", "_d", gexpr, t)
            if len(t.dsts) > 1:
                g.write(lines, t.dsts[1], "pred", "_p", gexpr, t)
        elif op == "activemask":
            lines.append(f"_d = S.activemask({'m' if masked else None})")
            g.write(lines, t.dsts[0], "b32", "_d", self._guard(g, t, masked), t)
        if masked:
            lines.append(f"pcv[m] = {nxt}")
        else:
            lines.append(f"return {nxt}")

    # ---------------------------------------------------------------- straight-line instructions
    def _gen_instr(self, g: _Gen, ins: ir.Instr, lines: list, masked: bool) -> None:
        op = ins.opcode
        gexpr = self._guard(g, ins, masked)
        lines.append(f"# {ins.line}: {ins.text}")
        if is_alu(op):
            alu = build_alu(ins)
            srcs = [g.src(o, t, ins) for o, t in zip(ins.srcs, alu.src_types)]
            if len(srcs) != len(ins.srcs):
                raise _err_ptx(ins, f"expected {len(alu.src_types)} source operands")
            fn = g.const(alu.fn, "f")
            arr = any(g.is_array_src(o) for o in ins.srcs)
            if len(alu.dst_types) == 1:
                lines.append(f"_t = {fn}({', '.join(srcs)})")
                g.write(lines, ins.dsts[0], alu.dst_types[0], "_t", gexpr, ins, arr)
            else:
                lines.append(f"_t = {fn}({', '.join(srcs)})")
                for k, (d, t) in enumerate(zip(ins.dsts, alu.dst_types)):
                    g.write(lines, d, t, f"_t[{k}]", gexpr, ins, arr)
            return
        h = getattr(self, f"_i_{op}", None)
        if h is None:
            raise _err_ptx(ins, "the emulator does not implement this instruction")
        h(g, ins, lines, masked, gexpr)

    def _sel(self, lines, gexpr) -> str:
        if gexpr is None:
            return "None"
        lines.append(f"_s = np.flatnonzero({gexpr})")
        return "_s"

    def _i_mov(self, g, ins, lines, masked, gexpr):
        types = ins.types
        if len(types) != 1 or len(ins.mods) != 1:
            raise _err_ptx(ins, "expected mov.<type>")
        t = types[0]
        d, s = ins.dsts[0], ins.srcs[0]
        if isinstance(d, ir.Vec):          # unpack
            n = len(d.elems)
            tw = _TYPE_BITS[t]
            ew = tw // n
            if ew not in (8, 16, 32):
                raise _err_ptx(ins, "bad vector unpack")
            sv = g.src(s, f"b{tw}", ins)
            for k, e in enumerate(d.elems):
                if isinstance(e, ir.Reg) and e.name == "_":
                    continue
                val = f"({sv} >> {g.const(U[tw](k * ew))}).astype({g.const(U[ew])})"
                if ew == 8:
                    val = f"{val}.astype({g.const(np.uint16)})"
                g.write(lines, e, f"b{max(ew, 16)}" if ew == 8 else f"b{ew}", val, gexpr, ins)
            return
        if isinstance(s, ir.Vec):          # pack
            n = len(s.elems)
            tw = _TYPE_BITS[t]
            ew = tw // n
            parts = []
            for k, e in enumerate(s.elems):
                ev = g.src(e, f"b{ew}", ins)
                parts.append(f"({ev}).astype({g.const(U[tw])}) << {g.const(U[tw](k * ew))}")
            val = " | ".join(parts)
            arr = any(isinstance(e, ir.Reg) for e in s.elems)
            g.write(lines, d, f"b{tw}", f"({val})", gexpr, ins, arr)
            return
        if isinstance(s, ir.Sym) or isinstance(s, ir.Addr):
            v = g.src(s, t, ins)
            g.write(lines, d, t, v, gexpr, ins, False)
            return
        v = g.src(s, t, ins)
        g.write(lines, d, t, v, gexpr, ins, isinstance(s, ir.Reg))

    def _i_cvta(self, g, ins, lines, masked, gexpr):
        mods = list(ins.mods)
        to = False
        if mods and mods[0] == "to":
            to = True
            mods = mods[1:]
        if len(mods) != 2 or mods[0] not in ("global", "shared", "local", "const", "param") or \
                mods[1] not in ("u32", "u64"):
            raise _err_ptx(ins, "expected cvta[.to].{global,shared,local,const}.{u32,u64}")
        space, t = mods
        if space == "param":
            raise _err_ptx(ins, "cvta.param is not supported")
        s = ins.srcs[0]
        if isinstance(s, (ir.Sym, ir.Addr)):
            v = g.src(s, "u64", ins)
            arr = False
        else:
            v = g.src(s, t, ins)
            arr = isinstance(s, ir.Reg)
            if t == "u32":
                v = f"{v}.astype({g.const(np.uint64)})"
        win = {"shared": SH_WIN, "local": LOC_WIN}.get(space, 0)
        if win:
            wc = g.const(np.uint64(win))
            v = f"({v} - {wc})" if to else f"({v} + {wc})"
        if t == "u32":
            v = f"({v}).astype({g.const(np.uint32)})"
        g.write(lines, ins.dsts[0], t, v, gexpr, ins, arr)

    def _i_isspacep(self, g, ins, lines, masked, gexpr):
        if len(ins.mods) != 1 or ins.mods[0] not in ("global", "shared", "local", "const", "param"):
            raise _err_ptx(ins, "expected isspacep.{global,shared,local,const}")
        a = g.src(ins.srcs[0], "u64", ins)
        lines.append(f"_t = S.isspace({ins.mods[0]!r}, {a})")
        g.write(lines, ins.dsts[0], "pred", "_t", gexpr, ins)

    def _memmods(self, ins, extra=()):
        space = "generic"
        vec = 1
        t = None
        for m in ins.mods:
            if m in _SPACES:
                space = m
            elif m in ("v2", "v4", "v8"):
                vec = int(m[1:])
            elif m in _TYPE_BITS and m != "pred":
                if t is not None:
                    raise _err_ptx(ins, "two types")
                t = m
            elif m in _LDST_MODS or m in extra:
                pass
            else:
                raise _err_ptx(ins, f"unknown modifier .{m}")
        if t is None:
            raise _err_ptx(ins, "missing type")
        if t == "b128":
            raise _err_ptx(ins, ".b128 memory accesses are not supported")
        return space, vec, t

    def _addr_expr(self, g, ins, addr_op, space):
        kind, expr, off = g.address(addr_op, ins, space)
        return kind, expr, off

    def _i_ld(self, g, ins, lines, masked, gexpr, ldu=False):
        space, vec, t = self._memmods(ins)
        if ldu:
            space = "global" if space == "generic" else space
        d = ins.dsts[0]
        dsts = list(d.elems) if isinstance(d, ir.Vec) else [d]
        if len(dsts) != vec:
            raise _err_ptx(ins, "vector size does not match the destination")
        kind, expr, off = self._addr_expr(g, ins, ins.srcs[0], space)
        tb = _TYPE_BITS[t]
        if kind == "kparam":
            if space != "param":
                raise _err_ptx(ins, "kernel parameter accessed outside the param space")
            for k, e in enumerate(dsts):
                o = off + k * (tb // 8)
                if o + tb // 8 > self.param_size:
                    raise _err_ptx(ins, "parameter read past the end of the parameter list")
                lines.append(f"_v = S.param({o}, {g.dt(t)})")
                g.write(lines, e, t, "_v", gexpr, ins, False)
            return
        if space == "param":
            space = "local"      # call-sequence parameters live in the local frame
        if space == "const":
            space = "global"
        sel = self._sel(lines, gexpr)
        a = expr if kind == "reg" else "None"
        lines.append(f"_vs = S.load({space!r}, {a}, {off}, {g.dt(t)}, {vec}, {sel})")
        for k, e in enumerate(dsts):
            if isinstance(e, ir.Reg) and e.name == "_":
                continue
            if not isinstance(e, ir.Reg) or e.name not in g.reg_index:
                raise _err_ptx(ins, "bad load destination")
            var = g.rvar(e.name)
            g.written.add(var)
            w = g.reg_width[e.name]
            val = f"_vs[{k}]"
            if w == 1:
                raise _err_ptx(ins, "load into a predicate")
            if tb != w:
                val = f"_fit({val}, {w}, {t in _SIGNED})"
            if sel == "None":
                lines.append(f"{var} = {val}")
            else:
                lines.append(f"{var} = _scatter({var}, _s, {val})")

    def _i_ldu(self, g, ins, lines, masked, gexpr):
        self._i_ld(g, ins, lines, masked, gexpr, ldu=True)

    def _i_st(self, g, ins, lines, masked, gexpr):
        space, vec, t = self._memmods(ins)
        if space == "param":
            space = "local"
        if space == "const":
            raise _err_ptx(ins, "stores to the const space are illegal")
        s = ins.srcs[1]
        srcs = list(s.elems) if isinstance(s, ir.Vec) else [s]
        if len(srcs) != vec:
            raise _err_ptx(ins, "vector size does not match the source")
        kind, expr, off = self._addr_expr(g, ins, ins.srcs[0], space)
        if kind == "kparam":
            raise _err_ptx(ins, "stores to kernel parameters are not supported")
        vals = [g.src(o, t, ins) for o in srcs]
        sel = self._sel(lines, gexpr)
        a = expr if kind == "reg" else "None"
        lines.append(f"S.store({space!r}, {a}, {off}, {g.dt(t)}, [{', '.join(vals)}], {sel})")

    def _i_atom(self, g, ins, lines, masked, gexpr, red=False):
        space = "generic"
        op = None
        t = None
        for m in ins.mods:
            if m in ("global", "shared"):
                space = m
            elif m in _ATOM_OPS:
                op = m
            elif m in _TYPE_BITS and m not in ("pred", "b128"):
                t = m
            elif m in _ATOM_SEM:
                pass
            else:
                raise _err_ptx(ins, f"unknown modifier .{m}")
        if op is None or t is None:
            raise _err_ptx(ins, "missing operation or type")
        okt = {"add": {"u32", "s32", "u64", "f32", "f64"}, "min": {"u32", "s32", "u64", "s64"},
               "max": {"u32", "s32", "u64", "s64"}, "and": {"b32", "b64"}, "or": {"b32", "b64"},
               "xor": {"b32", "b64"}, "exch": {"b32", "b64"}, "cas": {"b32", "b64"}, "inc": {"u32"},
               "dec": {"u32"}}
        if t not in okt[op]:
            raise _err_ptx(ins, f"atomic {op} on .{t} is not supported")
        srcs = ins.srcs
        kind, expr, off = self._addr_expr(g, ins, srcs[0], space)
        if kind == "kparam":
            raise _err_ptx(ins, "atomics on parameters")
        b = g.src(srcs[1], t, ins)
        c = g.src(srcs[2], t, ins) if op == "cas" else "None"
        live = (not red) and ins.dsts and isinstance(ins.dsts[0], ir.Reg) and ins.dsts[0].name != "_" \
            and ins.dsts[0].name in self.read_regs
        sel = self._sel(lines, gexpr)
        a = expr if kind == "reg" else "None"
        lines.append(f"_t = S.atom({space!r}, {op!r}, {g.dt(t)}, {a}, {off}, {b}, {c}, {sel}, {bool(live)})")
        if live:
            e = ins.dsts[0]
            var = g.rvar(e.name)
            g.written.add(var)
            val = "_t"
            if _TYPE_BITS[t] != g.reg_width[e.name]:
                val = f"_fit(_t, {g.reg_width[e.name]}, {t in _SIGNED})"
            if sel == "None":
                lines.append(f"{var} = {val}")
            else:
                lines.append(f"{var} = _scatter({var}, _s, {val})")

    def _i_red(self, g, ins, lines, masked, gexpr):
        self._i_atom(g, ins, lines, masked, gexpr, red=True)

    def _noop(self, g, ins, lines, masked, gexpr):
        lines.append("pass")

    _i_membar = _noop
    _i_fence = _noop
    _i_nanosleep = _noop
    _i_prefetch = _noop
    _i_prefetchu = _noop
    _i_pmevent = _noop
    _i_discard = _noop

    def _i_trap(self, g, ins, lines, masked, gexpr):
        sel = self._sel(lines, gexpr)
        lines.append(f"S.trap({sel}, {ins.line})")

    _i_brkpt = _i_trap

    def _i_call(self, g, ins, lines, masked, gexpr):
        target = ins.srcs[0].name
        args = ins.srcs[1:]
        for a in args + ins.dsts:
            if not isinstance(a, ir.Sym) or a.name not in self.local:
                raise _err_ptx(ins, f"call to {target}: arguments must be .param variables")
        sel = self._sel(lines, gexpr)
        offs = [self.local[a.name] for a in args]
        if target == "vprintf":
            if len(args) != 2:
                raise _err_ptx(ins, "vprintf takes 2 arguments")
            lines.append(f"_n = S.vprintf({offs[0]}, {offs[1]}, {sel})")
            if ins.dsts:
                lines.append(f"S.store('local', None, {self.local[ins.dsts[0].name]}, {g.const(np.int32)}, "
                             f"[_n], {sel})")
            return
        if target == "__assertfail":
            if len(args) != 5:
                raise _err_ptx(ins, "__assertfail takes 5 arguments")
            lines.append(f"S.assertfail({offs}, {sel})")
            return
        raise _err_ptx(ins, f"call to undefined or external function {target}")


# ====================================================================================== runtime
class Chunk:
    """State of one chunk of CTAs during a launch: the `S` of the generated code."""

    def __init__(self, launch: "Launch", cta0: int, ncta: int) -> None:
        k = launch.kernel
        self.launch = launch
        self.mem = launch.mem
        self.kernel = k
        cs = launch.ctasize
        T = ncta * cs
        self.T = T
        self.ncta = ncta
        self.cta0 = cta0
        self.ctasize = cs
        self.pc = np.zeros(T, np.int32)
        self.st = np.zeros(T, np.int8)
        self.zeros = {1: np.zeros(T, bool), 16: np.zeros(T, np.uint16), 32: np.zeros(T, np.uint32),
                      64: np.zeros(T, np.uint64)}
        self.barpred = np.zeros(T, bool)
        self.barsite = np.zeros(T, np.int32)
        geo = launch.geometry(ncta)      # lane-layout arrays shared by every chunk of this size (read-only)
        lin = geo["lin"]
        self.lin_in_cta = geo["lin_in_cta"]
        self.cta_local = geo["cta_local"]
        self._special: dict[str, np.ndarray] = geo["special"]
        self.laneid = geo["laneid"]
        self.warp = geo["warp"]
        self.nwarps = ncta * ((cs + 31) // 32)
        self.warp_first = geo["warp_first"]
        self.shared_size = launch.shared_size
        self.smem = np.zeros(max(ncta * self.shared_size, 16), np.uint8)
        for off, v in k.shared_inits:
            raw = _init_bytes(v, launch.symbols)
            for c in range(ncta):
                self.smem[c * self.shared_size + off:c * self.shared_size + off + len(raw)] = raw
        self.frame = k.frame
        if "cta_off" not in geo:
            geo["cta_off"] = self.cta_local * self.shared_size
            geo["lane_off"] = lin * self.frame
        self.cta_off = geo["cta_off"]
        self.lmem = np.zeros(T * self.frame, np.uint8)
        self.lane_off = geo["lane_off"]
        self.views: dict = {}
        self._acache: dict = {}
        self._own_special: dict = {}
        self.forced = False

    # ---------------------------------------------------------------- special registers
    def special(self, name: str) -> np.ndarray:
        s = self._special.get(name)
        if s is None:
            s = self._own_special.get(name)
        if s is not None:
            return s
        L = self.launch
        bx, by, bz = L.block
        gx, gy, gz = L.grid
        T = self.T
        lin = self.lin_in_cta
        cta = self.cta_local + self.cta0
        if name == "%tid.x":
            v = lin % bx
        elif name == "%tid.y":
            v = (lin // bx) % by
        elif name == "%tid.z":
            v = lin // (bx * by)
        elif name in ("%ntid.x", "%ntid.y", "%ntid.z"):
            v = np.full(T, L.block["xyz".index(name[-1])])
        elif name == "%ctaid.x":
            v = cta % gx
        elif name == "%ctaid.y":
            v = (cta // gx) % gy
        elif name == "%ctaid.z":
            v = cta // (gx * gy)
        elif name in ("%nctaid.x", "%nctaid.y", "%nctaid.z"):
            v = np.full(T, L.grid["xyz".index(name[-1])])
        elif name == "%laneid":
            v = self.laneid
        elif name == "%warpid":
            v = lin // 32
        elif name == "%nwarpid":
            v = np.full(T, 32)
        elif name in ("%warpsize", "WARP_SZ"):
            v = np.full(T, 32)
        elif name == "%smid":
            v = cta % L.sm_count
        elif name == "%nsmid":
            v = np.full(T, L.sm_count)
        elif name == "%gridid":
            v = np.full(T, L.grid_id)
        elif name.startswith("%lanemask_"):
            ln = self.laneid.astype(np.uint64)
            one = np.uint64(1)
            kind = name[10:]
            v = {"eq": one << ln, "lt": (one << ln) - one, "le": ((one << ln) << one) - one,
                 "ge": ~((one << ln) - one), "gt": ~(((one << ln) << one) - one)}[kind] & np.uint64(0xFFFFFFFF)
        elif name in ("%clock", "%clock64", "%clock_hi", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"):
            # Not cached: a clock must advance. Derived from the launch's executed-instruction count.
            self.launch.clock_bump += 16      # each read advances, even within one block
            c = (self.launch.steps + self.launch.clock_bump) * 4 + 1000
            if name.startswith("%globaltimer"):
                c = time.time_ns()
            if name in ("%clock64", "%globaltimer"):
                return np.full(T, c, np.uint64)
            if name.endswith("_hi"):
                c >>= 32
            return np.full(T, c & 0xFFFFFFFF, np.uint32)
        elif name == "%dynamic_smem_size":
            v = np.full(T, L.dyn_shared)
        elif name == "%total_smem_size":
            v = np.full(T, self.shared_size)
        else:
            raise CudaError("cudaErrorInvalidPtx", f"special register {name} is not supported")
        v = np.ascontiguousarray(v).astype(np.uint32)
        if name.startswith("%ctaid") or name == "%smid":
            self._own_special[name] = v
        else:
            self._special[name] = v
        return v

    # ---------------------------------------------------------------- params
    def param(self, off: int, dt):
        return np.frombuffer(self.launch.params, dtype=dt, count=1, offset=off)[0]

    # ---------------------------------------------------------------- memory
    def _view(self, buf: np.ndarray, dt) -> np.ndarray:
        key = (id(buf), dt)
        v = self.views.get(key)
        if v is None:
            isz = np.dtype(dt).itemsize
            n = buf.size - buf.size % isz
            v = buf[:n].view(dt)
            self.views[key] = v
        return v

    def resolve(self, space: str, addr, off: int, size: int, write: bool, sel, vsize: int):
        """-> list of (buffer, byte offsets, positions) covering the accessed lanes; checks bounds/alignment.
        positions: indices into the accessed-lane list (None = all, in order)."""
        T = self.T
        if addr is None:
            n = T if sel is None else len(sel)
            a = np.full(n, off, np.int64).view(np.uint64) if space == "generic" or space == "global" \
                else np.full(n, off, np.int64)
        else:
            a = addr if sel is None else addr[sel]
            if off:
                a = a + a.dtype.type(off & ((1 << (a.dtype.itemsize * 8)) - 1))
        if space == "global":
            a = a.astype(np.uint64, copy=False)
            self.mem.check_access(a, vsize, write)
            return [(self.mem.heap, (a - np.uint64(self.mem.base)).view(np.int64), None)]
        if space == "shared":
            a = a.astype(np.int64, copy=False) if a.dtype != np.uint64 else a.view(np.int64)
            self._check_window(a, vsize, self.shared_size, "shared", write)
            co = self.cta_off if sel is None else self.cta_off[sel]
            return [(self.smem, co + a, None)]
        if space == "local":
            a = a.astype(np.int64, copy=False) if a.dtype != np.uint64 else a.view(np.int64)
            self._check_window(a, vsize, self.frame, "local", write)
            lo = self.lane_off if sel is None else self.lane_off[sel]
            return [(self.lmem, lo + a, None)]
        if space == "generic":
            a = a.astype(np.uint64, copy=False)
            lanes = np.arange(len(a)) if sel is None else sel
            out = []
            is_sh = (a >= np.uint64(SH_WIN)) & (a < np.uint64(SH_WIN + WIN_SIZE))
            is_lo = (a >= np.uint64(LOC_WIN)) & (a < np.uint64(LOC_WIN + WIN_SIZE))
            if not is_sh.any() and not is_lo.any():
                return self.resolve("global", a, 0, size, write, None, vsize)
            is_gl = ~(is_sh | is_lo)
            for kind, msk, win in (("global", is_gl, 0), ("shared", is_sh, SH_WIN), ("local", is_lo, LOC_WIN)):
                if not msk.any():
                    continue
                pos = np.flatnonzero(msk)
                sub = a[pos] - np.uint64(win)
                if kind == "global":
                    self.mem.check_access(sub, vsize, write)
                    out.append((self.mem.heap, (sub - np.uint64(self.mem.base)).view(np.int64), pos))
                else:
                    s = sub.view(np.int64)
                    limit = self.shared_size if kind == "shared" else self.frame
                    self._check_window(s, vsize, limit, kind, write)
                    base = self.cta_off if kind == "shared" else self.lane_off
                    out.append((self.smem if kind == "shared" else self.lmem, base[lanes[pos]] + s, pos))
            return out
        raise CudaError("cudaErrorInvalidPtx", f"memory space {space} not supported")

    def _check_window(self, a, size, limit, what, write):
        if a.size == 0:
            return
        lo = int(a.min())
        hi = int(a.max())
        if lo < 0 or hi + size > limit:
            bad = int(a[(a < 0) | (a + size > limit)][0])
            raise CudaError("cudaErrorIllegalAddress",
                            f"out-of-range {size}-byte {what} {'store' if write else 'load'} at {what} offset "
                            f"{bad:#x} (window is {limit} bytes)")
        if size > 1 and (a & (size - 1)).any():
            bad = int(a[(a & (size - 1)) != 0][0])
            raise CudaError("cudaErrorMisalignedAddress",
                            f"misaligned {size}-byte {what} {'store' if write else 'load'} at {what} offset {bad:#x}")

    def _window_index(self, space, addr, off, isz, vsize):
        """Fast path for converged shared/local accesses through a register: per address array (registers are
        immutable) remember its int64 form, range and low bits, so each further access with another constant
        offset costs one add. Returns element indices into the space's buffer, or None to take the slow path."""
        key = (addr.__array_interface__["data"][0], addr.dtype, space)
        ent = self._acache.get(key)
        if ent is None or ent[0].shape != addr.shape:
            a64 = addr.astype(np.int64)
            if space == "shared" and addr.dtype == np.uint64:
                a64 = addr.view(np.int64)
            base = self.cta_off if space == "shared" else self.lane_off
            ent = (addr, int(a64.min()), int(a64.max()), int(np.bitwise_or.reduce(a64 & 15)), base + a64, {})
            if len(self._acache) > 32:
                self._acache.clear()
            self._acache[key] = ent
        _, lo, hi, low, bb, q = ent
        limit = self.shared_size if space == "shared" else self.frame
        if lo + off < 0 or hi + off + vsize > limit or off % vsize or (low & (vsize - 1)):
            return None
        sh = isz.bit_length() - 1
        qa = q.get(sh)
        if qa is None:
            qa = q[sh] = bb >> sh
        return qa, off >> sh

    def load(self, space, addr, off, dt, nvec, sel):
        isz = np.dtype(dt).itemsize
        if sel is None and addr is not None and (space == "shared" or space == "local") and isz > 1:
            hit = self._window_index(space, addr, off, isz, isz * nvec)
            if hit is not None:
                idx, c = hit
                v = self._view(self.smem if space == "shared" else self.lmem, dt)
                return [v[c + k:].take(idx) for k in range(nvec)]
        parts = self.resolve(space, addr, off, isz, False, sel, isz * nvec)
        n = self.T if sel is None else len(sel)
        if len(parts) == 1 and parts[0][2] is None:
            buf, boff, _ = parts[0]
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1) if isz > 1 else boff
            if nvec == 1:
                return [v.take(idx)]
            return [v.take(idx + k) for k in range(nvec)]
        outs = [np.empty(n, dt) for _ in range(nvec)]
        for buf, boff, pos in parts:
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1) if isz > 1 else boff
            for k in range(nvec):
                outs[k][pos] = v.take(idx + k)
        return outs

    def store(self, space, addr, off, dt, vals, sel):
        isz = np.dtype(dt).itemsize
        if sel is None and addr is not None and (space == "shared" or space == "local") and isz > 1:
            hit = self._window_index(space, addr, off, isz, isz * len(vals))
            if hit is not None:
                idx, c = hit
                v = self._view(self.smem if space == "shared" else self.lmem, dt)
                for k, x in enumerate(vals):
                    x = np.asarray(x)
                    if x.dtype != dt:
                        x = x.astype(dt) if x.ndim == 0 or x.dtype.itemsize != isz else x.view(dt)
                    v[c + k:][idx] = x
                return
        parts = self.resolve(space, addr, off, isz, True, sel, isz * len(vals))
        n = self.T if sel is None else len(sel)
        for buf, boff, pos in parts:
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1) if isz > 1 else boff
            for k, x in enumerate(vals):
                x = np.asarray(x)
                if x.ndim == 0:
                    vv = x.astype(dt)
                else:
                    vv = x if sel is None else x[sel]
                    if pos is not None:
                        vv = vv[pos]
                    if vv.dtype != dt:
                        vv = vv.astype(dt) if vv.dtype.itemsize != isz else vv.view(dt)
                v[idx + k] = vv

    def isspace(self, space, a):
        a = a.astype(np.uint64, copy=False)
        sh = (a >= np.uint64(SH_WIN)) & (a < np.uint64(SH_WIN + WIN_SIZE))
        lo = (a >= np.uint64(LOC_WIN)) & (a < np.uint64(LOC_WIN + WIN_SIZE))
        if space == "shared":
            return sh
        if space == "local":
            return lo
        if space in ("global", "const"):
            return ~(sh | lo)
        return np.zeros(a.shape, bool)

    # ---------------------------------------------------------------- atomics
    def atom(self, space, op, dt, addr, off, b, c, sel, live):
        isz = np.dtype(dt).itemsize
        parts = self.resolve(space, addr, off, isz, True, sel, isz)
        n = self.T if sel is None else len(sel)
        b = np.broadcast_to(np.asarray(b, dtype=dt) if np.ndim(b) == 0 else b, (self.T,))
        b = b if sel is None else b[sel]
        if c is not None:
            c = np.broadcast_to(np.asarray(c, dtype=dt) if np.ndim(c) == 0 else c, (self.T,))
            c = c if sel is None else c[sel]
        old = np.empty(n, dt) if live else None
        for buf, boff, pos in parts:
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1)
            bb = b if pos is None else b[pos]
            cc = None if c is None else (c if pos is None else c[pos])
            res = _atomic(v, idx, op, bb.astype(dt, copy=False), cc, live)
            if live:
                if pos is None:
                    old = res
                else:
                    old[pos] = res
        return old

    # ---------------------------------------------------------------- barriers and warps
    def check_bar_count(self, cnt, line):
        c = np.asarray(cnt)
        if (c != self.ctasize).any():
            raise CudaError("cudaErrorInvalidPtx",
                            f"line {line}: barriers with a thread count other than the CTA size are not supported")

    def cta_reduce(self, p, kind, _unused):
        r = np.asarray(p).reshape(self.ncta, self.ctasize)
        if kind == "popc":
            v = r.sum(1, dtype=np.uint32)
        elif kind == "and":
            v = r.all(1)
        else:
            v = r.any(1)
        return np.repeat(v, self.ctasize)

    def warp_ready(self, m, mask, nxt):
        """Keep the lanes of m whose warp's other live member lanes are here too; park the others (WAIT)."""
        st = self.st
        live = st != EXIT
        if mask is None:
            member = live
        else:
            mk = np.broadcast_to(mask, (self.T,)).astype(np.uint64)
            member = live & (((mk >> self.laneid.astype(np.uint64)) & np.uint64(1)) != 0)
        # Wait for member lanes still running elsewhere, and for lanes parked at another warp operation unless
        # every lane was just woken because nothing else could run (then the op goes ahead with those present).
        missing = member & ~m & ((st == RUN) | ((st == WAIT) & (not self.forced)))
        if not missing.any():
            self.forced = False
            return m
        badw = np.zeros(self.nwarps, bool)
        badw[self.warp[missing]] = True
        park = m & badw[self.warp]
        st[park] = WAIT
        m = m & ~park
        return m if m.any() else None

    def shfl(self, mode, a, b, c, m):
        T = self.T
        lane = self.laneid.astype(np.int64)
        b = np.broadcast_to(np.asarray(b).astype(np.int64) & 31, (T,))      # bval = b[4:0] (ISA pseudo-code)
        c = np.broadcast_to(np.asarray(c).astype(np.int64), (T,))
        clamp = c & 31
        seg = (c >> 8) & 31
        maxl = (lane & seg) | (clamp & ~seg)
        minl = lane & seg
        if mode == "up":
            j = lane - b
            p = j >= maxl
        elif mode == "down":
            j = lane + b
            p = j <= maxl
        elif mode == "bfly":
            j = lane ^ b
            p = j <= maxl
        else:
            j = minl | (b & ~seg)
            p = j <= maxl
        j = np.where(p, j, lane)
        src = self.warp_first + j
        cta_end = (self.cta_local + 1) * self.ctasize
        ok = src < cta_end
        src = np.where(ok, src, np.arange(T))
        a = np.broadcast_to(np.asarray(a), (T,))
        return a.take(src), p

    def _warp_sum(self, vals, act):
        return np.bincount(self.warp, weights=np.where(act, vals, 0).astype(np.float64), minlength=self.nwarps)

    def _active(self, mask, m):
        act = np.ones(self.T, bool) if m is None else (m if m.dtype == bool else self._mask_from_sel(m))
        if mask is not None:
            mk = np.broadcast_to(np.asarray(mask).astype(np.uint64), (self.T,))
            act = act & (((mk >> self.laneid.astype(np.uint64)) & np.uint64(1)) != 0)
        return act

    def _mask_from_sel(self, m):
        out = np.zeros(self.T, bool)
        out[m] = True
        return out

    def vote(self, mode, p, mask, m):
        act = self._active(mask, m)
        p = np.broadcast_to(np.asarray(p, bool), (self.T,))
        if mode == "ballot":
            bits = np.left_shift(np.uint64(1), self.laneid.astype(np.uint64)).astype(np.float64)
            s = self._warp_sum(bits, act & p)
            return s.astype(np.uint64).astype(np.uint32)[self.warp]
        n_act = np.bincount(self.warp, weights=act.astype(np.float64), minlength=self.nwarps)
        n_true = np.bincount(self.warp, weights=(act & p).astype(np.float64), minlength=self.nwarps)
        if mode == "any":
            r = n_true > 0
        elif mode == "all":
            r = n_true == n_act
        else:
            r = (n_true == 0) | (n_true == n_act)
        return r[self.warp]

    def redux(self, op, t, a, mask, m):
        act = self._active(mask, m)
        a = np.broadcast_to(np.asarray(a), (self.T,))
        idx = np.flatnonzero(act)
        out = np.zeros(self.T, a.dtype)
        if idx.size == 0:
            return out
        w = self.warp[idx]
        starts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
        vals = a[idx]
        if op == "add":
            r = np.add.reduceat(vals.astype(np.int64), starts).astype(a.dtype)
        else:
            uf = {"min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
                  "xor": np.bitwise_xor}[op]
            r = uf.reduceat(vals, starts)
        full = np.zeros(self.nwarps, a.dtype)
        full[w[starts]] = r
        return full[self.warp]

    def match(self, mode, a, mask, m):
        """match.any: the mask of active member lanes of the warp holding the same value; match.all: the member
        mask when all active members agree (and the predicate), else 0."""
        act = self._active(mask, m)
        a = np.broadcast_to(np.asarray(a), (self.T,))
        idx = np.flatnonzero(act)
        d = np.zeros(self.T, np.uint32)
        p = np.zeros(self.T, bool)
        if idx.size == 0:
            return d, p
        w = self.warp[idx]
        vals = a[idx].astype(np.uint64, copy=False) if a.dtype.itemsize == 8 else a[idx].astype(np.uint64)
        bits = np.left_shift(np.uint64(1), self.laneid[idx].astype(np.uint64)).astype(np.float64)
        if mode == "any":
            _, key = np.unique(np.stack([w.astype(np.uint64), vals]), axis=1, return_inverse=True)
            key = key.reshape(-1)
            sums = np.bincount(key, weights=bits)
            d[idx] = sums[key].astype(np.uint64).astype(np.uint32)
            return d, p
        wmask = np.bincount(w, weights=bits, minlength=self.nwarps)
        vmin = np.full(self.nwarps, np.iinfo(np.uint64).max, np.uint64)
        vmax = np.zeros(self.nwarps, np.uint64)
        np.minimum.at(vmin, w, vals)
        np.maximum.at(vmax, w, vals)
        same = (vmin == vmax)[w]
        d[idx] = np.where(same, wmask[w].astype(np.uint64).astype(np.uint32), 0)
        p[idx] = same
        return d, p

    def activemask(self, m):
        act = np.ones(self.T, bool) if m is None else m
        return self.vote("ballot", act, None, None)

    # ---------------------------------------------------------------- printf / assert / trap
    def vprintf(self, fmt_off, args_off, sel):
        from .printf import format_printf
        fmts = self.load("local", None, fmt_off, np.uint64, 1, sel)[0]
        argps = self.load("local", None, args_off, np.uint64, 1, sel)[0]
        lanes = np.arange(self.T) if sel is None else sel
        nargs = np.zeros(len(lanes), np.int32)
        for k, lane in enumerate(lanes.tolist()):
            text, na = format_printf(self, lane, int(fmts[k]), int(argps[k]))
            self.launch.stdout += text
            nargs[k] = na
        return nargs if sel is None else _expand(nargs, sel, self.T)

    def read_cstring(self, lane: int, addr: int, limit: int = 1 << 16) -> bytes:
        buf, off = self.byte_span(lane, addr, 1)
        n = buf.size
        stop = min(n, off + limit)
        chunk = buf[off:stop].tobytes()
        z = chunk.find(b"\0")
        if z < 0:
            if stop >= n:
                raise CudaError("cudaErrorIllegalAddress", f"unterminated string at {addr:#x}")
            z = len(chunk)
        return chunk[:z]

    def byte_span(self, lane: int, addr: int, size: int):
        """(uint8 buffer, offset) for a generic address seen by one lane; checked."""
        a = np.array([addr], np.uint64)
        parts = self.resolve("generic", a, 0, 1, False, None, 1)
        buf, boff, _ = parts[0]
        o = int(boff[0])
        if buf is self.smem:
            o = o - int(self.cta_off[0]) + int(self.cta_off[lane])
        elif buf is self.lmem:
            o = o - int(self.lane_off[0]) + int(self.lane_off[lane])
        return buf, o

    def read_bytes(self, lane: int, addr: int, size: int) -> bytes:
        buf, o = self.byte_span(lane, addr, size)
        if o + size > buf.size:
            raise CudaError("cudaErrorIllegalAddress", f"read past the end of memory at {addr:#x}")
        return buf[o:o + size].tobytes()

    def assertfail(self, offs, sel):
        lanes = np.arange(self.T) if sel is None else sel
        if len(lanes) == 0:
            return
        vals = [self.load("local", None, o, np.uint64 if k != 2 and k != 4 else np.uint32, 1, sel)[0]
                for k, o in enumerate(offs)]
        L = self.launch
        first = None
        for k, lane in enumerate(lanes.tolist()):
            msg = self.read_cstring(lane, int(vals[0][k])).decode("utf-8", "replace")
            fil = self.read_cstring(lane, int(vals[1][k])).decode("utf-8", "replace")
            line = int(vals[2][k])
            func = self.read_cstring(lane, int(vals[3][k])).decode("utf-8", "replace")
            bx, by, _ = L.block
            gx, gy, _ = L.grid
            cta = self.cta0 + lane // self.ctasize
            t = lane % self.ctasize
            text = (f"{fil}:{line}: {func}: block: [{cta % gx},{(cta // gx) % gy},{cta // (gx * gy)}], "
                    f"thread: [{t % bx},{(t // bx) % by},{t // (bx * by)}] Assertion `{msg}` failed.\n")
            L.stdout += text.encode()
            if first is None:
                first = text.strip()
        raise CudaError("cudaErrorAssert", f"device-side assert in {self.kernel.name}: {first}")

    def trap(self, sel, line):
        if sel is None or len(sel):
            raise CudaError("cudaErrorLaunchFailure", f"{self.kernel.name}: trap executed (PTX line {line})")

    # ---------------------------------------------------------------- driver
    def run(self) -> None:
        L = self.launch
        limits = L.limits
        blocks, handlers = self.kernel.make(self)
        C = [b[0] for b in blocks]
        M = [b[1] for b in blocks]
        sizes = [len(b.instrs) + 1 for b in self.kernel.blocks]
        pc, st = self.pc, self.st
        T = self.T
        cur = 0
        conv = True
        steps = L.steps
        max_steps = limits.max_vector_instructions
        deadline = L.deadline
        check_every = 0
        big = np.int32(1 << 30)
        last_p = -1
        loops = 0
        with np.errstate(all="ignore"):
            while True:
                check_every += 1
                if check_every >= 64:
                    check_every = 0
                    L.steps = steps
                    if steps > max_steps:
                        raise CudaError("cudaErrorLaunchTimeout",
                                        f"{self.kernel.name}: instruction budget of {max_steps} vector "
                                        f"instructions exhausted (runaway loop or spin-wait?)")
                    if time.monotonic() > deadline:
                        raise CudaError("cudaErrorLaunchTimeout",
                                        f"{self.kernel.name}: ran longer than {limits.max_seconds} s")
                if conv:
                    steps += sizes[cur]
                    r = C[cur]()
                    if r >= 0:
                        cur = r
                        continue
                    if r == -2:
                        break
                    conv = False
                    continue
                runm = st == RUN
                if not runm.any():
                    if not self._release(handlers):
                        break
                    continue
                P = int(np.where(runm, pc, big).min())
                # Starvation escape: lanes looping at low PCs (a spin-wait on a flag) would keep lanes at higher
                # PCs (the ones that set the flag) from ever running under strict min-PC. After a long run of
                # backward steps, run the highest-PC group once; any order is a legal schedule.
                if P <= last_p:
                    loops += 1
                    if loops > 128:
                        loops = 0
                        P = int(np.where(runm, pc, -1).max())
                else:
                    loops = 0
                last_p = P
                m = runm & (pc == P)
                if P >= len(M):
                    raise CudaError("cudaErrorLaunchFailure", f"{self.kernel.name}: fell off the end of the code")
                if m.all():
                    conv = True
                    cur = P
                    continue
                steps += sizes[P]
                L.steps = steps
                M[P](m)
        L.steps = steps

    def _release(self, handlers) -> bool:
        st = self.st
        wait = st == WAIT
        if wait.any():
            st[wait] = RUN
            self.forced = True
            return True
        bar = st == BAR
        if not bar.any():
            return False        # every lane exited
        alive = st != EXIT
        cs = self.ctasize
        nbar = bar.reshape(self.ncta, cs).sum(1)
        nalive = alive.reshape(self.ncta, cs).sum(1)
        ok = (nbar == nalive) & (nbar > 0)
        if not ok.any():
            bad = int(np.flatnonzero(nbar > 0)[0]) + self.cta0
            raise CudaError("cudaErrorLaunchFailure",
                            f"{self.kernel.name}: deadlock: CTA {bad} waits at a barrier that some of its live "
                            f"threads can never reach")
        rel = bar & np.repeat(ok, cs)
        if handlers:
            sites = np.unique(self.barsite[rel])
            for s in sites.tolist():
                mm = rel & (self.barsite == s)
                # reduction over all parked lanes of each CTA (all of them reach the same bar.red)
                p = self.barpred & mm
                pr = p.reshape(self.ncta, cs)
                mr = mm.reshape(self.ncta, cs)
                red_kind = self.kernel.bar_kinds[s]
                if red_kind == "popc":
                    v = np.repeat(pr.sum(1, dtype=np.uint32), cs)
                elif red_kind == "and":
                    v = np.repeat(~((mr & ~pr).any(1)), cs)
                else:
                    v = np.repeat(pr.any(1), cs)
                handlers[s](mm, v)
        st[rel] = RUN
        return True


def _expand(vals, sel, T):
    out = np.zeros(T, vals.dtype)
    out[sel] = vals
    return out


def _atomic(v: np.ndarray, idx: np.ndarray, op: str, b: np.ndarray, c, live: bool):
    """Apply atomics in lane order; return old values (if live)."""
    n = idx.size
    if n == 0:
        return np.empty(0, v.dtype)
    dt = v.dtype
    if not live and op in ("add", "min", "max", "and", "or", "xor", "exch"):
        if op == "exch":
            v[idx] = b          # last lane in order wins, as in serial order
            return None
        uf = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
              "xor": np.bitwise_xor}[op]
        uf.at(v, idx, b)
        return None
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    first = np.r_[True, sidx[1:] != sidx[:-1]]
    gstart = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    rank = np.arange(n) - gstart
    maxrank = int(rank.max())
    if maxrank == 0:
        old = v.take(idx)
        new = _apply(op, old, b, c, dt)
        v[idx] = new
        return old
    if op == "add" and dt.kind in "iu":
        sb = b[order].astype(dt)
        cs = np.cumsum(sb, dtype=dt)
        excl = cs - sb
        base_excl = excl[gstart]
        init = v.take(sidx)
        old_sorted = (init + (excl - base_excl)).astype(dt)
        last = np.r_[sidx[1:] != sidx[:-1], True]
        v[sidx[last]] = (old_sorted[last] + sb[last]).astype(dt)
        old = np.empty(n, dt)
        old[order] = old_sorted
        return old
    if op == "exch":
        sb = b[order]
        init = v.take(sidx)
        old_sorted = np.where(first, init, np.r_[sb[:1], sb[:-1]])
        last = np.r_[sidx[1:] != sidx[:-1], True]
        v[sidx[last]] = sb[last]
        old = np.empty(n, dt)
        old[order] = old_sorted
        return old if live else None
    if op == "add" and dt.kind == "f":
        starts = np.flatnonzero(first)
        if len(starts) <= maxrank:
            # few, heavily contended addresses: one sequential accumulate per address (serial rounding, in
            # thread order), exactly what applying the adds one by one gives
            ends = np.r_[starts[1:], n]
            sb = b[order].astype(dt)
            old_sorted = np.empty(n, dt)
            for s0, e0 in zip(starts.tolist(), ends.tolist()):
                a = int(sidx[s0])
                seq = np.empty(e0 - s0 + 1, dt)
                seq[0] = v[a]
                seq[1:] = sb[s0:e0]
                acc = np.add.accumulate(seq, dtype=dt)
                old_sorted[s0:e0] = acc[:-1]
                v[a] = acc[-1]
            old = np.empty(n, dt)
            old[order] = old_sorted
            return old
    # rounds: lanes of rank r touch distinct addresses
    byrank = np.argsort(rank, kind="stable")
    counts = np.bincount(rank)
    old = np.empty(n, dt)
    pos = 0
    for r in range(maxrank + 1):
        cnt = int(counts[r])
        lanes = order[byrank[pos:pos + cnt]]
        pos += cnt
        ii = idx[lanes]
        o = v.take(ii)
        old[lanes] = o
        v[ii] = _apply(op, o, b[lanes], None if c is None else c[lanes], dt)
    return old


def _apply(op, old, b, c, dt):
    with np.errstate(all="ignore"):
        if op == "add":
            return (old + b).astype(dt)
        if op == "min":
            return np.minimum(old, b)
        if op == "max":
            return np.maximum(old, b)
        if op == "and":
            return old & b
        if op == "or":
            return old | b
        if op == "xor":
            return old ^ b
        if op == "exch":
            return b.astype(dt)
        if op == "cas":
            return np.where(old == b, c, old).astype(dt)
        if op == "inc":
            return np.where(old >= b, dt.type(0), old + dt.type(1)).astype(dt)
        if op == "dec":
            return np.where((old == 0) | (old > b), b, old - dt.type(1)).astype(dt)
    raise CudaError("cudaErrorInvalidPtx", f"atomic {op}")


def _init_bytes(v: ir.VarDecl, symbols: dict) -> bytes:
    """The initial bytes of a variable (short initializers zero-fill the rest)."""
    size = v.size
    out = bytearray(size)
    if not v.init:
        return bytes(out)
    esz = _TYPE_BITS[v.type] // 8
    t = v.type
    pos = 0
    for e in v.init:
        if pos + esz > size:
            break
        if isinstance(e, tuple) and e[0] == "bits":
            _, bits, is32 = e
            if t in ("f32", "b32", "u32", "s32") and not is32:
                val = float_bits_to_value(bits, 64)
                out[pos:pos + 4] = np.float32(val).tobytes()
            elif t == "f64" and is32:
                out[pos:pos + 8] = np.float64(float_bits_to_value(bits, 32)).tobytes()
            else:
                out[pos:pos + esz] = (bits & ((1 << (8 * esz)) - 1)).to_bytes(esz, "little")
        elif isinstance(e, float):
            if t in ("f32",):
                out[pos:pos + 4] = np.float32(e).tobytes()
            elif t == "f64":
                out[pos:pos + 8] = np.float64(e).tobytes()
            elif t == "f16":
                out[pos:pos + 2] = np.float16(e).tobytes()
            else:
                raise CudaError("cudaErrorInvalidPtx", f"float initializer for .{t} variable {v.name}")
        elif isinstance(e, int):
            if t == "f32":
                out[pos:pos + 4] = np.float32(e).tobytes()
            elif t == "f64":
                out[pos:pos + 8] = np.float64(e).tobytes()
            else:
                out[pos:pos + esz] = (e & ((1 << (8 * esz)) - 1)).to_bytes(esz, "little")
        elif isinstance(e, str):
            name, _, off = e.partition("+")
            if name not in symbols:
                raise CudaError("cudaErrorInvalidPtx", f"initializer of {v.name} refers to unknown symbol {name}")
            val = symbols[name] + (int(off) if off else 0)
            out[pos:pos + esz] = (val & ((1 << (8 * esz)) - 1)).to_bytes(esz, "little")
        pos += esz
    return bytes(out)


class Launch:
    def __init__(self, kernel: Kernel, mem, symbols, grid, block, shmem, params: bytes, limits: EmuLimits,
                 sm_count: int = 40, grid_id: int = 1):
        self.kernel = kernel
        self.mem = mem
        self.symbols = symbols
        self.grid = tuple(int(x) for x in grid)
        self.block = tuple(int(x) for x in block)
        self.ctasize = self.block[0] * self.block[1] * self.block[2]
        self.params = bytes(params)
        self.limits = limits
        self.sm_count = sm_count
        self.grid_id = grid_id
        self.dyn_shared = int(shmem)
        self.shared_size = _align(kernel.dyn_shared_base + self.dyn_shared if (kernel.dyn_shared_names or shmem)
                                  else kernel.static_shared, 16) or 16
        self.stdout = bytearray()
        self._geo: dict = {}
        self.clock_bump = 0
        self.steps = 0
        self.deadline = time.monotonic() + limits.max_seconds

    def geometry(self, ncta: int) -> dict:
        g = self._geo.get(ncta)
        if g is None:
            cs = self.ctasize
            T = ncta * cs
            lin = np.arange(T, dtype=np.int64)
            lin_in_cta = lin % cs
            cta_local = lin // cs
            laneid = (lin_in_cta % 32).astype(np.uint32)
            warp = cta_local * ((cs + 31) // 32) + lin_in_cta // 32
            g = {"lin": lin, "lin_in_cta": lin_in_cta, "cta_local": cta_local, "laneid": laneid, "warp": warp,
                 "warp_first": lin - laneid.astype(np.int64), "special": {}}
            self._geo = {ncta: g}     # keep one geometry (the full-chunk one, or the tail)
        return g

    def run(self) -> bytes:
        k = self.kernel
        ncta_total = self.grid[0] * self.grid[1] * self.grid[2]
        per = max(1, self.limits.lanes_per_chunk // self.ctasize)
        # bound the chunk's local memory to ~256 MB
        per = max(1, min(per, (256 << 20) // max(1, self.ctasize * k.frame)))
        cta = 0
        try:
            while cta < ncta_total:
                n = min(per, ncta_total - cta)
                Chunk(self, cta, n).run()
                cta += n
        except CudaError as e:
            e.stdout = bytes(self.stdout)
            raise
        return bytes(self.stdout)
