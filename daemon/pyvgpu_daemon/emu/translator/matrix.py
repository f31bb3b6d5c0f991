"""Warp matrix instructions: wmma.load / wmma.store (straight-line, per lane: instrs.EMITTERS) and wmma.mma /
mma.sync (warp operations: control.py waits for the warp, then calls emit_mma). What the fragments hold and the
product are ops/matrix.py's; runtime/matrix.py moves the values.

Accepted (sm_75): wmma m16n16k16 / m32n8k16 / m8n32k16 with f16 A/B and f16/f32 C/D or s8/u8 A/B and s32 C/D;
mma.sync m16n8k8 .row.col f16 -> f16/f32 and m8n8k16 .row.col s8/u8 -> s32. Everything else of the family (bf16,
tf32, f64, sub-byte and 1-bit types, m8n8k4, sm_80+ shapes, ldmatrix) is cudaErrorInvalidPtx naming it.
"""
from __future__ import annotations

from ..ops import matrix as mx
from ..ptx import ir
from .codegen import Codegen, err_ptx

_SPACES = ("global", "shared", "generic")
_AB_TYPES = ("f16", "s8", "u8")
_CD_TYPES = {"f16": ("f16", "f32"), "s8": ("s32",), "u8": ("s32",)}


def is_matrix_warp_op(ins: ir.Instr) -> bool:
    """wmma.mma and mma (cfg.is_warp): they exchange data between the lanes of a warp."""
    return ins.opcode == "mma" or (ins.opcode == "wmma" and ins.mods[:1] == ("mma",))


def _refuse(ins: ir.Instr, what: str):
    return err_ptx(ins, f"{ins.text}: {what} (the emulated sm_75 offers wmma m16n16k16/m32n8k16/m8n32k16 with "
                        f"f16 or s8/u8 inputs and mma.sync m16n8k8 f16, m8n8k16 s8/u8)")


def _vec(ins: ir.Instr, o, n: int, what: str) -> list:
    elems = list(o.elems) if isinstance(o, ir.Vec) else [o]
    if len(elems) != n:
        raise err_ptx(ins, f"{what}: {len(elems)} registers, the fragment has {n}")
    for e in elems:
        if not isinstance(e, ir.Reg):
            raise err_ptx(ins, f"{what}: fragments are registers")
    return elems


def _memory_form(ins: ir.Instr):
    """wmma.{load.{a,b,c},store.d}.sync.aligned.layout.shape{.space}.type -> (op, which, layout, shape, space,
    type)."""
    mods = list(ins.mods)
    if len(mods) < 7 or mods[0] not in ("load", "store") or mods[2:4] != ["sync", "aligned"]:
        raise _refuse(ins, "expected wmma.{load,store}.<matrix>.sync.aligned.<layout>.<shape>[.<space>].<type>")
    op, which, layout, shape = mods[0], mods[1], mods[4], mods[5]
    rest = mods[6:]
    space = rest.pop(0) if len(rest) == 2 else "generic"
    if len(rest) != 1 or space not in _SPACES or layout not in ("row", "col"):
        raise _refuse(ins, "unsupported form")
    etype = rest[0]
    if shape not in mx.WMMA_SHAPES:
        raise _refuse(ins, f"shape {shape}")
    if (op, which) not in (("load", "a"), ("load", "b"), ("load", "c"), ("store", "d")):
        raise _refuse(ins, f"wmma.{op}.{which}")
    if etype not in (_AB_TYPES if which in "ab" else ("f16", "f32", "s32")):
        raise _refuse(ins, f"type .{etype} for matrix {which}")
    return op, which, layout, shape, space, etype


def emit_wmma_memory(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    if ins.mods[:1] == ("mma",):
        raise err_ptx(ins, "wmma.mma outside a warp block")          # cfg makes it a block terminator
    op, which, layout, shape, space, etype = _memory_form(ins)
    frag = mx.wmma_fragment(shape, which, etype)
    if op == "load":
        if len(ins.dsts) != 1 or len(ins.srcs) != 2:
            raise err_ptx(ins, "expected wmma.load {fragment}, [address], stride")
        regs, addr, stride = _vec(ins, ins.dsts[0], frag.nregs, "destination"), ins.srcs[0], ins.srcs[1]
    else:
        if len(ins.srcs) != 3:
            raise err_ptx(ins, "expected wmma.store [address], {fragment}, stride")
        addr, regs, stride = ins.srcs[0], _vec(ins, ins.srcs[1], frag.nregs, "source"), ins.srcs[2]
    kind, expr, off = g.address(addr, ins)
    if kind == "kparam":
        raise err_ptx(ins, "wmma on kernel parameters")
    sel = g.sel(lines, gexpr)
    a = expr if kind in ("reg", "frame") else "None"
    st = g.src(stride, "u32", ins)
    spec = (shape, which, etype, layout)
    if op == "load":
        lines.append(f"_vs = {g.rt('wmma_load')}({spec!r}, {space!r}, {a}, {off}, {st}, {sel})")
        for k, e in enumerate(regs):
            g.write_selected(lines, e, "b32", f"_vs[{k}]", sel)
    else:
        vals = ", ".join(g.src(e, "b32", ins) for e in regs)
        lines.append(f"{g.rt('wmma_store')}({spec!r}, {space!r}, {a}, {off}, {st}, [{vals}], {sel})")


def _mma_form(ins: ir.Instr):
    """-> (kind, shape, atype, btype, ctype, dtype, satfinite) of wmma.mma or mma.sync."""
    mods = [m for m in ins.mods if m != "satfinite"]
    sat = len(mods) != len(ins.mods)
    if ins.opcode == "wmma":
        # wmma.mma.sync.aligned.alayout.blayout.shape.dtype.ctype (f16) / .shape.s32.atype.btype.s32 (integer)
        if mods[:3] != ["mma", "sync", "aligned"] or len(mods) < 8:
            raise _refuse(ins, "expected wmma.mma.sync.aligned.<alayout>.<blayout>.<shape>.<types>")
        if mods[3] not in ("row", "col") or mods[4] not in ("row", "col"):
            raise _refuse(ins, "layouts")
        shape, types, kind = mods[5], mods[6:], "wmma"
        if shape not in mx.WMMA_SHAPES:
            raise _refuse(ins, f"shape {shape}")
    else:
        # mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype
        if mods[:2] != ["sync", "aligned"] or len(mods) != 9 or mods[3:5] != ["row", "col"]:
            raise _refuse(ins, "expected mma.sync.aligned.<shape>.row.col.<dtype>.<atype>.<btype>.<ctype>")
        shape, kind = mods[2], "mma"
        if shape not in mx.MMA_SHAPES:
            raise _refuse(ins, f"shape {shape}")
        d, a, b, c = mods[5:9]
        types = [d, c] if (a, b) == ("f16", "f16") else [d, a, b, c]
    if len(types) == 2 and types[0] in ("f16", "f32") and types[1] in ("f16", "f32"):
        dtype, ctype, atype, btype = types[0], types[1], "f16", "f16"
    elif len(types) == 4 and types[0] == types[3] == "s32" and types[1] in ("s8", "u8") and types[2] in ("s8", "u8"):
        dtype, atype, btype, ctype = types
    else:
        raise _refuse(ins, f"types .{'.'.join(types)}")
    if (kind, shape) == ("mma", "m16n8k8") and atype != "f16" or (kind, shape) == ("mma", "m8n8k16") and \
            atype == "f16":
        raise _refuse(ins, f"types .{'.'.join(types)} for {shape}")
    return kind, shape, atype, btype, ctype, dtype, sat


def FORM(ins: ir.Instr) -> None:
    """What a wmma or mma instruction requires of its modifiers (checked at module load: translator/support.py)."""
    if is_matrix_warp_op(ins):
        _mma_form(ins)
    else:
        _memory_form(ins)


def emit_mma(g: Codegen, t: ir.Instr, lines: list, masked: bool, gexpr, msk) -> None:
    spec = _mma_form(t)
    kind, shape, atype, btype, ctype, dtype, _ = spec
    frag = mx.wmma_fragment if kind == "wmma" else mx.mma_fragment
    if len(t.dsts) != 1 or len(t.srcs) != 3:
        raise err_ptx(t, "expected d, a, b, c fragments")
    d = _vec(t, t.dsts[0], frag(shape, "d", dtype).nregs, "d")
    srcs = []
    for o, which, et in zip(t.srcs, "abc", (atype, btype, ctype)):
        regs = _vec(t, o, frag(shape, which, et).nregs, which)
        srcs.append("[" + ", ".join(g.src(e, "b32", t) for e in regs) + "]")
    lines.append(f"_d = {g.rt('matrix_mma')}({spec!r}, {srcs[0]}, {srcs[1]}, {srcs[2]}, {gexpr})")
    for k, e in enumerate(d):
        g.write(lines, e, "b32", f"_d[{k}]", gexpr, t)
