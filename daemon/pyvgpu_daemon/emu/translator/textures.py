"""Texture and surface instructions: tex (plain, .level and .grad fetch level 0: arrays have one level), tld4,
txq, suq, suld.b, sust.b. Each becomes one call of the chunk's texture unit (runtime/texunit.py) and register
writes of the selected lanes. The object is a 64-bit register or kernel parameter (texture references, the
pre-object API, are refused); coordinates are the `{...}` of the address operand."""
from __future__ import annotations

from ..ptx import ir
from ..ptx.types import BITS
from .codegen import Codegen, err_ptx

# geometry -> (coordinates the instruction carries, coordinates sampled, leading layer index)
_GEOMS = {"1d": (1, 1, False), "2d": (2, 2, False), "3d": (4, 3, False), "a1d": (2, 1, True),
          "a2d": (4, 2, True)}
_MODES = ("trap", "clamp", "zero")


def _handle(g: Codegen, ins: ir.Instr, addr) -> str:
    if not isinstance(addr, ir.Addr) or addr.offset:
        raise err_ptx(ins, "expected [object, ...] as the texture or surface operand")
    base = addr.base
    if isinstance(base, ir.Reg):
        return g.src(base, "u64", ins)
    if isinstance(base, ir.Sym) and base.name in g.k.layout.kparams:
        return f"{g.rt('param')}({g.k.layout.kparams[base.name]}, {g.dt('u64')})"
    raise err_ptx(ins, "texture and surface references (the pre-object API) are not supported")


def _geom(ins: ir.Instr) -> str:
    found = [m for m in ins.mods if m in _GEOMS]
    if len(found) != 1:
        raise err_ptx(ins, "unsupported texture geometry (cube maps, multisample and 2dms are not emulated)")
    return found[0]


def _coords(g: Codegen, ins: ir.Instr, addr: ir.Addr, geom: str, ctype: str) -> list[str]:
    carried, sampled, layered = _GEOMS[geom]
    if addr.coords is None or len(addr.coords.elems) != carried:
        raise err_ptx(ins, f"{geom} takes {carried} coordinates")
    elems = list(addr.coords.elems)
    out = [g.src(elems[0], "s32", ins)] if layered else []
    first = 1 if layered else 0
    out += [g.src(e, ctype, ins) for e in elems[first:first + sampled]]
    return out


def _write_vec(g: Codegen, ins: ir.Instr, lines: list, dst, t: str, sel: str, n: int) -> None:
    elems = dst.elems if isinstance(dst, ir.Vec) else (dst,)
    if len(elems) != n:
        raise err_ptx(ins, f"expected {n} destination registers")
    for k, e in enumerate(elems):
        if isinstance(e, ir.Reg) and e.name == "_":
            continue
        if not isinstance(e, ir.Reg) or e.name not in g.reg_index:
            raise err_ptx(ins, "bad destination register")
        g.write_selected(lines, e, t, f"_vs[{k}]", sel)


def _tex_form(ins: ir.Instr) -> tuple[str, str, str]:
    """(geometry, destination type, coordinate type) of a tex / tld4."""
    geom = _geom(ins)
    types = ins.types
    if "v4" not in ins.mods or len(types) != 2 or types[1] not in ("f32", "s32"):
        raise err_ptx(ins, "expected tex.<geometry>.v4.<type>.<f32|s32>")
    dtype, ctype = types
    if dtype not in ("f32", "s32", "u32"):
        raise err_ptx(ins, f"texture fetch into .{dtype}")
    return geom, dtype, ctype


def _tex(g: Codegen, ins: ir.Instr, lines: list, gexpr, gather: int | None = None) -> None:
    geom, dtype, ctype = _tex_form(ins)
    addr = ins.srcs[0]
    h = _handle(g, ins, addr)
    coords = _coords(g, ins, addr, geom, ctype)
    sel = g.sel(lines, gexpr)
    lines.append(f"_vs = {g.rt('tex')}({geom!r}, {dtype!r}, {h}, [{', '.join(coords)}], {gather}, {sel})")
    _write_vec(g, ins, lines, ins.dsts[0], dtype, sel, 4)


def _tld4_form(ins: ir.Instr) -> int:
    """The component a tld4 gathers."""
    comps = [m for m in ins.mods if m in ("r", "g", "b", "a")]
    if len(comps) != 1 or _geom(ins) != "2d":
        raise err_ptx(ins, "expected tld4.<r|g|b|a>.2d")
    _tex_form(ins)
    return "rgba".index(comps[0])


def _tld4(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    _tex(g, ins, lines, gexpr, _tld4_form(ins))


def _query(g: Codegen, ins: ir.Instr, lines: list, gexpr, prefix: str) -> None:
    what = [m for m in ins.mods if m != "b32" and m != "level"]
    if len(what) != 1 or ins.types != ("b32",):
        raise err_ptx(ins, "expected a single query and .b32")
    h = _handle(g, ins, ins.srcs[0])
    sel = g.sel(lines, gexpr)
    lines.append(f"_v = {g.rt('txq')}({prefix + what[0]!r}, {h}, {sel})")
    d = ins.dsts[0]
    if not isinstance(d, ir.Reg) or d.name not in g.reg_index:
        raise err_ptx(ins, "bad destination register")
    g.write_selected(lines, d, "u32", "_v", sel)


def _txq(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    _query(g, ins, lines, gexpr, "")


def _suq(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    _query(g, ins, lines, gexpr, "su:")


def _surface_mods(ins: ir.Instr) -> tuple[str, int, str, str]:
    """(geometry, vector width, element type, boundary mode) of suld.b / sust.b."""
    if "b" not in ins.mods:
        raise err_ptx(ins, "only unformatted (.b) surface access is emulated")
    geom = _geom(ins)
    vec = 4 if "v4" in ins.mods else 2 if "v2" in ins.mods else 1
    types = [t for t in ins.types if t.startswith("b")]
    if len(types) != 1 or BITS[types[0]] not in (8, 16, 32, 64):
        raise err_ptx(ins, "expected .b8, .b16, .b32 or .b64")
    modes = [m for m in ins.mods if m in _MODES]
    return geom, vec, types[0], modes[0] if modes else "trap"


def _surface_coords(g: Codegen, ins: ir.Instr, addr: ir.Addr, geom: str) -> list[str]:
    carried = _GEOMS[geom][0]
    if addr.coords is None or len(addr.coords.elems) != carried:
        raise err_ptx(ins, f"{geom} takes {carried} coordinates")
    return [g.src(e, "s32", ins) for e in addr.coords.elems]


def _suld(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    geom, vec, t, mode = _surface_mods(ins)
    addr = ins.srcs[0]
    h = _handle(g, ins, addr)
    coords = _surface_coords(g, ins, addr, geom)
    sel = g.sel(lines, gexpr)
    lines.append(f"_vs = {g.rt('suld')}({geom!r}, {g.dt(t)}, {vec}, {mode!r}, {h}, [{', '.join(coords)}], {sel})")
    _write_vec(g, ins, lines, ins.dsts[0], t, sel, vec)


def _sust(g: Codegen, ins: ir.Instr, lines: list, gexpr) -> None:
    geom, vec, t, mode = _surface_mods(ins)
    addr, vals = ins.srcs[0], ins.srcs[1]
    h = _handle(g, ins, addr)
    coords = _surface_coords(g, ins, addr, geom)
    elems = vals.elems if isinstance(vals, ir.Vec) else (vals,)
    if len(elems) != vec:
        raise err_ptx(ins, f"expected {vec} source values")
    srcs = [g.src(e, t, ins) for e in elems]
    sel = g.sel(lines, gexpr)
    lines.append(f"{g.rt('sust')}({geom!r}, {g.dt(t)}, {mode!r}, {h}, [{', '.join(coords)}], "
                 f"[{', '.join(srcs)}], {sel})")


EMITTERS = {"tex": _tex, "tld4": _tld4, "txq": _txq, "suq": _suq, "suld": _suld, "sust": _sust}
FORMS = {"tex": _tex_form, "tld4": _tld4_form, "suld": _surface_mods, "sust": _surface_mods}     # instrs.FORMS
