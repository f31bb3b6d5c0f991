"""Straight-line instructions: what code each one becomes inside a block function.

ALU instructions (ops/, `build_alu`) become one call of their pure NumPy function and register writes. The
others are emitted here, one function per opcode family (EMITTERS): mov (with vector pack/unpack), cvta,
isspacep, ld/ldu/st (every state space; kernel parameters are read from the launch buffer, call-sequence .param
variables live in the local frame), atom/red (operation and type checked against ops/atomic.py), the memory
hints that are no-ops on the emulator (membar, fence, prefetch, ...), griddepcontrol (programmatic dependent launch:
a launch starts only once the device's earlier work is done, so `.wait` has nothing to wait for and
`.launch_dependents` nothing to release), trap/brkpt, calls to the system functions nvcc emits (vprintf,
__assertfail, malloc, free), the texture and surface instructions (translator/textures.py) and wmma.load/store
(translator/matrix.py).
Anything else is cudaErrorInvalidPtx naming it and its line.
"""
from __future__ import annotations

import numpy as np

from ..layout import LOC_WIN, SH_WIN, formal_offsets
from ..ops import build_alu, is_alu
from ..ops.atomic import ATOMIC_OPS, ATOMIC_SEMANTICS, ATOMIC_TYPES, op_name
from ..ptx import ir
from ..ptx.types import BITS, UINT
from .codegen import Codegen, err_ptx
from .matrix import FORM as MATRIX_FORM, emit_wmma_memory
from .textures import EMITTERS as TEXTURE_EMITTERS, FORMS as TEXTURE_FORMS

_LDST_MODS = {"ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt", "volatile", "relaxed", "acquire", "release", "weak",
              "cta", "gpu", "sys", "cluster", "mmio", "L1::evict_normal", "L1::evict_unchanged",
              "L1::evict_first", "L1::evict_last", "L1::no_allocate", "L2::64B", "L2::128B", "L2::256B"}
_SPACES = {"global", "shared", "local", "param", "const"}


def emit(g: Codegen, ins: ir.Instr, lines: list, masked: bool) -> None:
    gexpr = g.guard(ins, masked)
    lines.append(f"# {ins.line}: {ins.text}")
    if gexpr is not None and ir.guard_overwritten(ins):
        lines.append(f"_g = {gexpr}")      # (the guard before the instruction: a destination overwrites it)
        gexpr = "_g"
    if is_alu(ins.opcode):
        _emit_alu(g, ins, lines, gexpr)
        return
    h = EMITTERS.get(ins.opcode)
    if h is None:
        raise err_ptx(ins, "the emulator does not implement this instruction")
    h(g, ins, lines, gexpr)


def _emit_alu(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    alu = build_alu(ins)
    srcs = [g.src(o, t, ins) for o, t in zip(ins.srcs, alu.src_types)]
    if len(srcs) != len(ins.srcs):
        raise err_ptx(ins, f"expected {len(alu.src_types)} source operands")
    fn = g.const(getattr(alu.fn, "quiet_inner", alu.fn), "f")     # the runtime already silences fp errors
    arr = any(g.is_array_src(o) for o in ins.srcs)
    lines.append(f"_t = {fn}({', '.join(srcs)})")
    if len(alu.dst_types) == 1:
        g.write(lines, ins.dsts[0], alu.dst_types[0], "_t", gexpr, ins, arr)
    else:
        for k, (d, t) in enumerate(zip(ins.dsts, alu.dst_types)):
            g.write(lines, d, t, f"_t[{k}]", gexpr, ins, arr)


# ---------------------------------------------------------------------------------------------- moves
def _mov_form(ins: ir.Instr) -> str:
    types = ins.types
    if len(types) != 1 or len(ins.mods) != 1:
        raise err_ptx(ins, "expected mov.<type>")
    return types[0]


def _mov(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    t = _mov_form(ins)
    d, s = ins.dsts[0], ins.srcs[0]
    if isinstance(d, ir.Vec):
        _mov_unpack(g, ins, lines, gexpr, BITS[t])
    elif isinstance(s, ir.Vec):
        _mov_pack(g, ins, lines, gexpr, BITS[t])
    elif isinstance(s, (ir.Sym, ir.Addr)):
        g.write(lines, d, t, g.src(s, t, ins), gexpr, ins, g.is_array_src(s))
    else:
        g.write(lines, d, t, g.src(s, t, ins), gexpr, ins, isinstance(s, ir.Reg))


def _mov_unpack(g: Codegen, ins: ir.Instr, lines: list, gexpr, tw: int) -> None:
    d, s = ins.dsts[0], ins.srcs[0]
    ew = tw // len(d.elems)
    if ew not in (8, 16, 32):
        raise err_ptx(ins, "bad vector unpack")
    sv = g.src(s, f"b{tw}", ins)
    for k, e in enumerate(d.elems):
        if isinstance(e, ir.Reg) and e.name == "_":
            continue
        val = f"({sv} >> {g.const(UINT[tw](k * ew))}).astype({g.const(UINT[ew])})"
        if ew == 8:
            val = f"{val}.astype({g.const(np.uint16)})"
        g.write(lines, e, f"b{max(ew, 16)}" if ew == 8 else f"b{ew}", val, gexpr, ins)


def _mov_pack(g: Codegen, ins: ir.Instr, lines: list, gexpr, tw: int) -> None:
    d, s = ins.dsts[0], ins.srcs[0]
    ew = tw // len(s.elems)
    parts = []
    for k, e in enumerate(s.elems):
        ev = g.src(e, f"b{ew}", ins)
        parts.append(f"({ev}).astype({g.const(UINT[tw])}) << {g.const(UINT[tw](k * ew))}")
    arr = any(isinstance(e, ir.Reg) for e in s.elems)
    g.write(lines, d, f"b{tw}", f"({' | '.join(parts)})", gexpr, ins, arr)


# ---------------------------------------------------------------------------------------------- address spaces
def _cvta_form(ins: ir.Instr) -> tuple[bool, str, str]:
    """(to, space, type) of a cvta."""
    mods = list(ins.mods)
    to = bool(mods) and mods[0] == "to"
    if to:
        mods = mods[1:]
    if len(mods) != 2 or mods[0] not in ("global", "shared", "local", "const", "param") or \
            mods[1] not in ("u32", "u64"):
        raise err_ptx(ins, "expected cvta[.to].{global,shared,local,const,param}.{u32,u64}")
    return to, mods[0], mods[1]


def _cvta(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    to, space, t = _cvta_form(ins)
    s = ins.srcs[0]
    if isinstance(s, (ir.Sym, ir.Addr)):
        v = g.src(s, "u64", ins)
        arr = g.is_array_src(s)
    else:
        v = g.src(s, t, ins)
        arr = isinstance(s, ir.Reg)
        if t == "u32":
            v = f"{v}.astype({g.const(np.uint64)})"
    if space == "param":
        v = f"_cvta_param({v}, {to})"
    else:
        win = {"shared": SH_WIN, "local": LOC_WIN}.get(space, 0)
        if win:
            wc = g.const(np.uint64(win))
            v = f"({v} - {wc})" if to else f"({v} + {wc})"
    if t == "u32":
        v = f"({v}).astype({g.const(np.uint32)})"
    g.write(lines, ins.dsts[0], t, v, gexpr, ins, arr)


def _isspacep_form(ins: ir.Instr) -> None:
    if len(ins.mods) != 1 or ins.mods[0] not in ("global", "shared", "local", "const", "param"):
        raise err_ptx(ins, "expected isspacep.{global,shared,local,const}")


def _isspacep(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    _isspacep_form(ins)
    a = g.src(ins.srcs[0], "u64", ins)
    lines.append(f"_t = {g.rt('isspace')}({ins.mods[0]!r}, {a})")
    g.write(lines, ins.dsts[0], "pred", "_t", gexpr, ins)


# ---------------------------------------------------------------------------------------------- loads and stores
def _memmods(ins: ir.Instr) -> tuple[str, int, str]:
    """(space, vector length, type) of a ld/ldu/st."""
    space = "generic"
    vec = 1
    t = None
    for m in ins.mods:
        if m in _SPACES:
            space = m
        elif m in ("shared::cta", "shared::cluster", "param::entry", "param::func"):
            space = m.partition("::")[0]      # every CTA is a cluster of one; .param either kind
        elif m in ("v2", "v4", "v8"):
            vec = int(m[1:])
        elif m in BITS and m != "pred":
            if t is not None:
                raise err_ptx(ins, "two types")
            t = m
        elif m not in _LDST_MODS:
            raise err_ptx(ins, f"unknown modifier .{m}")
    if t is None:
        raise err_ptx(ins, "missing type")
    if t == "b128":
        raise err_ptx(ins, ".b128 memory accesses are not supported")
    return space, vec, t


def _elements(ins: ir.Instr, operand, vec: int, what: str) -> list:
    """The registers/values of a ld destination or st source, one per vector element."""
    elems = list(operand.elems) if isinstance(operand, ir.Vec) else [operand]
    if len(elems) != vec:
        raise err_ptx(ins, f"vector size does not match the {what}")
    return elems


def _ld(g: Codegen, ins: ir.Instr, lines: list, gexpr, ldu: bool = False) -> None:
    space, vec, t = _memmods(ins)
    if ldu:
        space = "global" if space == "generic" else space
    dsts = _elements(ins, ins.dsts[0], vec, "destination")
    kind, expr, off = g.address(ins.srcs[0], ins)
    if kind == "kparam":
        _ld_kparam(g, ins, lines, gexpr, space, t, dsts, off)
        return
    if space == "param" and kind != "reg":
        space = "local"      # call-sequence .param variables live in the local frame
    if space == "const":
        space = "global"
    sel = g.sel(lines, gexpr)
    a = expr if kind in ("reg", "frame") else "None"
    lines.append(f"_vs = {g.rt('load')}({space!r}, {a}, {off}, {g.dt(t)}, {vec}, {sel})")
    for k, e in enumerate(dsts):
        if isinstance(e, ir.Reg) and e.name == "_":
            continue
        if not isinstance(e, ir.Reg) or e.name not in g.reg_index:
            raise err_ptx(ins, "bad load destination")
        if g.reg_width[e.name] == 1:
            raise err_ptx(ins, "load into a predicate")
        g.write_selected(lines, e, t, f"_vs[{k}]", sel)


def _ld_kparam(g: Codegen, ins: ir.Instr, lines: list, gexpr, space: str, t: str, dsts: list, off: int) -> None:
    if space != "param":
        raise err_ptx(ins, "kernel parameter accessed outside the param space")
    size = BITS[t] // 8
    for k, e in enumerate(dsts):
        o = off + k * size
        if o + size > g.k.layout.param_size:
            raise err_ptx(ins, "parameter read past the end of the parameter list")
        lines.append(f"_v = {g.rt('param')}({o}, {g.dt(t)})")
        g.write(lines, e, t, "_v", gexpr, ins, False)


def _ldu(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    _ld(g, ins, lines, gexpr, ldu=True)


def _st_form(ins: ir.Instr) -> tuple[str, int, str]:
    space, vec, t = _memmods(ins)
    if space == "const":
        raise err_ptx(ins, "stores to the const space are illegal")
    return space, vec, t


def _st(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    space, vec, t = _st_form(ins)
    srcs = _elements(ins, ins.srcs[1], vec, "source")
    kind, expr, off = g.address(ins.srcs[0], ins)
    if kind == "kparam":
        raise err_ptx(ins, "stores to kernel parameters are illegal (they are read-only)")
    if space == "param" and kind != "reg":
        space = "local"
    vals = [g.src(o, t, ins) for o in srcs]
    sel = g.sel(lines, gexpr)
    a = expr if kind in ("reg", "frame") else "None"
    lines.append(f"{g.rt('store')}({space!r}, {a}, {off}, {g.dt(t)}, [{', '.join(vals)}], {sel})")


# ---------------------------------------------------------------------------------------------- atomics
def _atom_mods(ins: ir.Instr) -> tuple[str, str, str]:
    """(space, operation, type) of an atom/red."""
    space = "generic"
    op = t = None
    for m in ins.mods:
        if m in ("global", "shared", "shared::cta", "shared::cluster"):
            space = m.partition("::")[0]        # every CTA is a cluster of one
        elif m in ATOMIC_OPS:
            op = m
        elif m in BITS and m not in ("pred", "b128"):
            t = m
        elif m not in ATOMIC_SEMANTICS:
            raise err_ptx(ins, f"unknown modifier .{m}")
    if op is None or t is None:
        raise err_ptx(ins, "missing operation or type")
    if t not in ATOMIC_TYPES[op]:
        raise err_ptx(ins, f"atomic {op} on .{t} is not supported")
    return space, op, t


def _atom(g: Codegen, ins: ir.Instr, lines: list, gexpr, red: bool = False) -> None:
    space, op, t = _atom_mods(ins)
    srcs = ins.srcs
    kind, expr, off = g.address(srcs[0], ins)
    if kind == "kparam":
        raise err_ptx(ins, "atomics on parameters")
    b = g.src(srcs[1], t, ins)
    c = g.src(srcs[2], t, ins) if op == "cas" else "None"
    # An atom whose result nobody reads takes the unordered fast path, as red does.
    live = (not red) and bool(ins.dsts) and isinstance(ins.dsts[0], ir.Reg) and ins.dsts[0].name != "_" \
        and ins.dsts[0].name in g.k.read_regs
    sel = g.sel(lines, gexpr)
    a = expr if kind in ("reg", "frame") else "None"
    lines.append(f"_t = {g.rt('atom')}({space!r}, {op_name(op, t)!r}, {g.dt(t)}, {a}, {off}, {b}, {c}, {sel}, "
                 f"{live})")
    if live:
        g.write_selected(lines, ins.dsts[0], t, "_t", sel)


def _red(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    _atom(g, ins, lines, gexpr, red=True)


# ---------------------------------------------------------------------------------------------- the rest
def _noop(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    lines.append("pass")


def _griddepcontrol_form(ins: ir.Instr) -> None:
    if ins.mods not in (("wait",), ("launch_dependents",)) or ins.srcs or ins.dsts:
        raise err_ptx(ins, "expected griddepcontrol.wait or griddepcontrol.launch_dependents")


def _griddepcontrol(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    _griddepcontrol_form(ins)
    lines.append("pass")


def _trap(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    sel = g.sel(lines, gexpr)
    lines.append(f"{g.rt('trap')}({sel}, {ins.line})")


# Device heap calls (runtime/calls.py): the function nvcc calls and its argument count (new/delete lower to these).
MALLOCS = {"malloc": 1, "__cuda_syscall_aligned_malloc": 2}


def _call(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    target = ins.srcs[0].name
    args = ins.srcs[1:]
    local = g.k.layout.local
    for a in args + ins.dsts:
        if not isinstance(a, ir.Sym) or a.name not in local:
            raise err_ptx(ins, f"call to {target}: arguments must be .param variables")
    sel = g.sel(lines, gexpr)
    offs = [g.frame_address(a.name) for a in args]
    if target == "vprintf":
        if len(args) != 2:
            raise err_ptx(ins, "vprintf takes 2 arguments")
        lines.append(f"_n = {g.rt('vprintf')}({offs[0]}, {offs[1]}, {sel})")
        if ins.dsts:
            kind, expr, off = g.address(ir.Addr(ins.dsts[0]), ins)
            a = expr if kind == "frame" else "None"
            lines.append(f"{g.rt('store')}('local', {a}, {off}, {g.const(np.int32)}, [_n], {sel})")
        return
    if target in MALLOCS:
        if len(args) != MALLOCS[target] or len(ins.dsts) != 1:
            raise err_ptx(ins, f"{target} takes {MALLOCS[target]} arguments and returns a pointer")
        kind, expr, off = g.address(ir.Addr(ins.dsts[0]), ins)
        a = expr if kind == "frame" else "None"
        lines.append(f"_p = {g.rt('malloc')}([{', '.join(offs)}], {sel})")
        lines.append(f"{g.rt('store')}('local', {a}, {off}, {g.const(np.uint64)}, [_p], {sel})")
        return
    if target == "free":
        if len(args) != 1:
            raise err_ptx(ins, "free takes 1 argument")
        lines.append(f"{g.rt('free')}({offs[0]}, {sel})")
        return
    if target == "__assertfail":
        if len(args) != 5:
            raise err_ptx(ins, "__assertfail takes 5 arguments")
        lines.append(f"{g.rt('assertfail')}([{', '.join(offs)}], {sel})")
        return
    raise err_ptx(ins, f"call to undefined or external function {target}")


def _oreturn(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    """The first instruction after an out-of-line call: restore the caller's live registers from its frame and copy
    the return values from the callee's frame (at the same address it had: the caller's frame end)."""
    site = ins.meta
    sel = g.sel(lines, gexpr)
    regs = g.k.saved[site.index]
    if regs:
        widths = [g.reg_width[r] for r in regs]
        lines.append(f"_r = {g.rt('unspill')}({g.save_area(site.ctx)}, {widths}, {sel})")
        for k, r in enumerate(regs):
            w = g.reg_width[r]
            g.write_selected(lines, ir.Reg(r), "pred" if w == 1 else f"b{w}", f"_r[{k}]", sel)
    if site.rets:
        lines.append(f"_nf = {g.callee_frame(site.ctx)}")
        offs = formal_offsets(site.sig.params + site.sig.returns)[len(site.sig.params):]
        for name, p, off in zip(site.rets, site.sig.returns, offs):
            lines.append(f"{g.rt('lcopy')}({g.frame_address(name)}, _nf + {g.const(np.uint64(off))}, {p.size}, "
                         f"{sel})")


EMITTERS = {
    "mov": _mov, "cvta": _cvta, "isspacep": _isspacep, "ld": _ld, "ldu": _ldu, "st": _st, "atom": _atom,
    "red": _red, "trap": _trap, "brkpt": _trap, "call": _call, "oreturn": _oreturn,
    **{op: _noop for op in ("membar", "fence", "nanosleep", "prefetch", "prefetchu", "pmevent", "discard")},
    "griddepcontrol": _griddepcontrol,
    **TEXTURE_EMITTERS,
    "wmma": emit_wmma_memory,
}

# What each emitter requires of an instruction's opcode and modifiers alone (translator/support.py checks these at
# module load, before any kernel is translated); raises err_ptx like the emitter would.
FORMS = {
    "mov": _mov_form, "cvta": _cvta_form, "isspacep": _isspacep_form, "ld": _memmods, "ldu": _memmods,
    "st": _st_form, "atom": _atom_mods, "red": _atom_mods, "griddepcontrol": _griddepcontrol_form, **TEXTURE_FORMS,
    "wmma": MATRIX_FORM, "mma": MATRIX_FORM,
}
