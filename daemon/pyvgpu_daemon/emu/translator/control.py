"""Block terminators: branches, ret/exit, CTA barriers and warp operations.

Converged code (every lane of the chunk here) returns the next block, DIVERGED after writing each lane's next
block to `pcv`, or ALL_EXITED; masked code (the lanes in `m`) writes `pcv[m]` / `stv[m]` and returns nothing.

- bra / ret / exit: a guarded branch or exit that splits the lanes diverges the chunk. brx.idx jumps through a
  table of labels, per lane.
- ocall / oret (inline.py): calls of out-of-line functions push a frame on the thread's call stack and jump to
  the callee (per lane for calls through a register); returns pop it and jump back, per lane.
- bar.sync / barrier.sync / bar.red on barrier 0 for all threads (Kernel.named_barriers False): converged, every
  lane of every CTA is here, so the barrier is a no-op and bar.red reduces at once (ChunkAPI.cta_reduce); masked,
  the lanes park (BAR) and the runtime releases a CTA when all its live lanes are parked, calling the bar.red
  site's release handler (`bar_sites`, `Kernel.bar_kinds`). Kernels with other barrier ids, thread counts,
  bar.arrive or guarded barriers hand every barrier to the runtime (ChunkAPI.bar_all, bar_wait:
  runtime/barriers.py).
- shfl / vote / redux / match / activemask / bar.warp.sync / wmma.mma / mma: masked, a warp operation first waits
  for the other member lanes of its warp (ChunkAPI.warp_ready); activemask never waits.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..chunk_api import ALL_EXITED, BAR, DIVERGED, EXIT
from ..ptx import ir
from ..layout import FN_STRIDE, FN_WIN, FRAME_HEADER, formal_offsets
from .cfg import Block
from .codegen import Codegen, err_ptx
from .inline import entry_label
from .matrix import emit_mma


def emit_terminator(g: Codegen, b: Block, lines: list, masked: bool) -> None:
    nxt = b.index + 1
    if b.kind == "warp":
        _emit_warp(g, b.term, lines, masked, nxt)
    elif b.kind == "bar":
        _emit_bar(g, b.term, lines, masked, nxt)
    elif b.term is None:
        lines.append(f"pcv[m] = {nxt}" if masked else f"return {nxt}")
    elif b.term.opcode == "bra":
        _emit_branch(g, b.term, lines, masked, nxt)
    elif b.term.opcode in ("ret", "exit"):
        _emit_exit(g, b.term, lines, masked, nxt)
    elif b.term.opcode == "brx":
        _emit_brx(g, b.term, lines, masked, nxt)
    elif b.term.opcode == "ocall":
        _emit_ocall(g, b.term, lines, masked, nxt)
    elif b.term.opcode == "oret":
        _emit_oret(g, b.term, lines, masked, nxt)
    else:
        raise err_ptx(b.term, "unsupported control flow")


def _emit_branch(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int) -> None:
    labels = g.k.labels
    if not t.srcs or not isinstance(t.srcs[0], ir.Sym) or t.srcs[0].name not in labels:
        raise err_ptx(t, "branch to an unknown label")
    tgt = labels[t.srcs[0].name]
    for m_ in t.mods:
        if m_ != "uni":
            raise err_ptx(t, f"modifier .{m_}")
    _emit_guarded(g, t, lines, masked, nxt, unguarded_masked=f"pcv[m] = {tgt}", taken_all=f"return {tgt}",
                  taken_masked=f"pcv[m & _p] = {tgt}", diverge=[f"pcv[:] = np.where(_p, {tgt}, {nxt})"])


def _emit_exit(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int) -> None:
    _emit_guarded(g, t, lines, masked, nxt, unguarded_masked=f"stv[m] = {EXIT}", taken_all=f"return {ALL_EXITED}",
                  taken_masked=f"stv[m & _p] = {EXIT}", diverge=[f"stv[_p] = {EXIT}", f"pcv[:] = {nxt}"])


def _emit_guarded(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int, *, unguarded_masked: str,
                  taken_all: str, taken_masked: str, diverge: list[str]) -> None:
    """A branch or exit, taken by the lanes of its guard `_p` (every lane when it has none). Converged code stays
    converged when all or none take it, else applies `diverge` and reports DIVERGED."""
    if t.guard is None:
        lines.append(unguarded_masked if masked else taken_all)
        return
    lines.append(f"_p = {g.guard(t, False)}")
    if masked:
        lines += [f"pcv[m] = {nxt}", taken_masked]
    else:
        lines += ["_n = np.count_nonzero(_p)", f"if _n == T: {taken_all}", f"if _n == 0: return {nxt}", *diverge,
                  f"return {DIVERGED}"]


def _emit_jump_table(lines: list, masked: bool) -> None:
    """Jump to the per-lane blocks in `_tb` (every lane's, or the masked lanes')."""
    if masked:
        lines.append("pcv[m] = _tb[m]")
    else:
        lines += ["if (_tb == _tb[0]).all(): return _tb.item(0)", "pcv[:] = _tb", f"return {DIVERGED}"]


def _emit_brx(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int) -> None:
    """brx.idx{.uni} index, targets: an indirect branch through a table of labels (lanes the guard excludes go on
    to the next block)."""
    if not t.mods or t.mods[0] != "idx" or any(m != "uni" for m in t.mods[1:]):
        raise err_ptx(t, "expected brx.idx{.uni}")
    idx = g.src(t.srcs[0], "u32", t)
    table = g.const(np.array([g.k.labels[e.name] for e in t.srcs[1].elems], np.int32), "brx")
    gexpr = g.guard(t, masked)
    lines.append(f"_tb = _brx_targets({idx}, {table}, {gexpr}, T, {t.line}, {nxt})")
    _emit_jump_table(lines, masked)


# ---------------------------------------------------------------------------------------------- calls
def _emit_ocall(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int) -> None:
    """A call of an out-of-line function (inline.py): check the targets, push the callee's frame (the caller's
    frame base and the block to return to, in its header), copy the arguments into it, save the caller's live
    registers in the caller's frame, and jump. The next block starts with the call's oreturn."""
    site, k = t.meta, g.k
    fp = g.fp
    m = "m" if masked else None
    sel = g.sel(lines, m)
    if isinstance(site.target, ir.Reg):
        table = np.full(max([(a - FN_WIN) // FN_STRIDE for a in k.fn_entry] or [-1]) + 1, -1, np.int32)
        for a, blk in k.fn_entry.items():
            table[(a - FN_WIN) // FN_STRIDE] = blk
        lines.append(f"_tb = _ocall_targets({g.src(site.target, 'u64', t)}, {g.const(table, 'fns')}, {m}, T, "
                     f"{t.line})")
        room = max([k.layout.frames[f].size for f in k.flat.out_of_line] or [FRAME_HEADER])
    else:
        room = k.layout.frames[site.target.name].size
    lines.append(f"_nf = {g.callee_frame(site.ctx)}")
    lines.append(f"{g.rt('spill')}(_nf, [{fp}, {g.const(np.uint64(nxt))}], {sel}, {room})")
    offs = formal_offsets(site.sig.params + site.sig.returns)
    for name, p, off in zip(site.args, site.sig.params, offs):
        lines.append(f"{g.rt('lcopy')}(_nf + {g.const(np.uint64(off))}, {g.frame_address(name)}, {p.size}, {sel})")
    regs = k.saved[site.index]
    if regs:
        lines.append(f"{g.rt('spill')}({g.save_area(site.ctx)}, [{', '.join(g.rvar(r) for r in regs)}], {sel})")
    g.written.add(fp)
    lines.append(f"{fp} = _where(m, _nf, {fp})" if masked else f"{fp} = _lanes(_nf, T)")   # fp: always live
    if isinstance(site.target, ir.Reg):
        _emit_jump_table(lines, masked)
    else:
        entry = k.labels[entry_label(site.target.name)]
        lines.append(f"pcv[m] = {entry}" if masked else f"return {entry}")


def _emit_oret(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int) -> None:
    """Return from an out-of-line function: pop its frame (the header holds the caller's frame base and the block
    after the call) and jump back; a guarded ret returns only the lanes of its guard."""
    fp = g.fp
    g.written.add(fp)
    pop = [f"_h = {g.rt('unspill')}({fp}, [64, 64], _s)", f"{fp} = _scatter({fp}, _s, _h[0])", "pcv[_s] = _h[1]"]
    if t.guard is None and not masked:
        lines += [f"_h = {g.rt('unspill')}({fp}, [64, 64], None)", f"{fp} = _h[0]", "_tb = _h[1]"]
        _emit_jump_table(lines, False)
    elif t.guard is None:
        lines += ["_s = np.flatnonzero(m)", *pop]
    elif masked:
        lines += [f"pcv[m] = {nxt}", f"_s = np.flatnonzero({g.guard(t, True)})", *pop]
    else:
        lines += [f"_p = {g.guard(t, False)}", f"if not _p.any(): return {nxt}", "_s = np.flatnonzero(_p)",
                  f"pcv[:] = {nxt}", *pop, f"return {DIVERGED}"]


# ---------------------------------------------------------------------------------------------- CTA barriers
def bar_form(t: ir.Instr):
    """-> (kind 'sync' / 'arrive' / 'red', reduction or None, barrier id operand, thread count operand or None,
    bar.red's predicate operand) of a barrier instruction (bar / barrier, {.cta}{.aligned})."""
    mods = [m for m in t.mods if m not in ("aligned", "cta")]
    if mods and mods[0] in ("sync", "red", "arrive"):
        kind = mods[0]
    elif not mods and t.opcode == "bar":
        kind = "sync"                      # `bar a` is bar.sync (PTX ISA 2.0 spelling)
    else:
        raise err_ptx(t, "expected bar/barrier .sync, .arrive or .red")
    srcs = list(t.srcs)
    red = pred_op = None
    if kind == "red":
        if len(mods) != 3 or mods[1] not in ("popc", "and", "or") or mods[2] != ("u32" if mods[1] == "popc" else "pred"):
            raise err_ptx(t, "expected bar.red.{popc.u32,and.pred,or.pred}")
        red = mods[1]
        if not srcs:
            raise err_ptx(t, "bar.red needs a predicate operand")
        pred_op = srcs[-1]
        srcs = srcs[:-1]
    elif len(mods) > 1:
        raise err_ptx(t, "unexpected modifiers")
    if not 1 <= len(srcs) <= 2:
        raise err_ptx(t, "expected a barrier id and an optional thread count")
    if kind == "arrive" and len(srcs) != 2:
        raise err_ptx(t, "bar.arrive needs a thread count")
    a = srcs[0]
    if isinstance(a, ir.Imm) and not 0 <= int(a.value) < 16:
        raise err_ptx(t, f"barrier id {a.value} (the ids are 0..15)")
    cnt = srcs[1] if len(srcs) > 1 else None
    if isinstance(cnt, ir.Imm) and (int(cnt.value) % 32 or (kind == "arrive" and int(cnt.value) == 0)):
        raise err_ptx(t, f"thread count {cnt.value} (a non-zero multiple of the warp size)")
    return kind, red, a, cnt, pred_op


def plain_barrier(t: ir.Instr) -> bool:
    """Barrier 0 for all threads, unguarded (`__syncthreads()` and its reductions): the runtime's plain path."""
    kind, _red, a, cnt, _p = bar_form(t)
    return kind != "arrive" and cnt is None and t.guard is None and isinstance(a, ir.Imm) and int(a.value) == 0


def _emit_bar(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int) -> None:
    kind, red, a, cnt, pred_op = bar_form(t)
    if not g.k.named_barriers:
        _emit_plain_bar(g, t, lines, masked, nxt, red, pred_op)
        return
    # named barriers, counts, bar.arrive, guards: runtime/barriers.py (bar_all, bar_wait)
    aexpr = g.src(a, "u32", t)
    bexpr = g.src(cnt, "u32", t) if cnt is not None else "None"
    gexpr = g.guard(t, masked)
    p = g.src(pred_op, "pred", t) if red else None
    site = _bar_site(g, t, red) if red else None
    call = f"{kind!r}, {aexpr}, {bexpr}, {t.line}"
    if masked:
        lines.append(f"pcv[m] = {nxt}")
        if red:
            lines += [f"{g.rt('barpred')}[m] = _uniform({p}, T)[m]", f"{g.rt('barsite')}[m] = {site}"]
        lines.append(f"{g.rt('bar_wait')}({gexpr}, {call})")
        return
    lines.append(f"pcv[:] = {nxt}")
    if red:
        lines += [f"{g.rt('barpred')}[:] = {p}", f"{g.rt('barsite')}[:] = {site}"]
    if gexpr is not None:                   # guarded: the lanes of the guard arrive, the others go on
        lines += [f"_p = {gexpr}", "if not _p.all():", f"    {g.rt('bar_wait')}(_p, {call})",
                  f"    return {DIVERGED}"]
    lines.append(f"if not {g.rt('bar_all')}({call}): return {DIVERGED}")
    if red:
        lines.append(f"_v = {g.rt('cta_reduce')}({p}, {red!r}, None)")
        g.write(lines, t.dsts[0], "u32" if red == "popc" else "pred", "_v", None, t)
    lines.append(f"return {nxt}")


def _bar_site(g: Codegen, t: ir.Instr, red: str) -> int:
    """The index of bar.red instruction t's release handler (one per instruction, shared by both block
    variants)."""
    key = id(t)
    if key not in g.bar_site_of:
        g.bar_site_of[key] = len(g.bar_sites)
        g.bar_sites.append((t.dsts[0], "u32" if red == "popc" else "pred"))
        g.k.bar_kinds.append(red)
    return g.bar_site_of[key]


def _emit_plain_bar(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int, red, pred_op) -> None:
    """Barrier 0 for all threads: converged, every lane is here, so it completes at once (bar.red reduces at
    once); masked, the lanes park (BAR) and the runtime releases a CTA when all its live lanes are parked."""
    if red is None:
        lines += [f"stv[m] = {BAR}", f"pcv[m] = {nxt}"] if masked else [f"return {nxt}"]
        return
    p = g.src(pred_op, "pred", t)
    if masked:
        site = _bar_site(g, t, red)
        lines += [f"{g.rt('barpred')}[m] = {p}[m]", f"{g.rt('barsite')}[m] = {site}", f"stv[m] = {BAR}",
                  f"pcv[m] = {nxt}"]
    else:
        lines.append(f"_v = {g.rt('cta_reduce')}({p}, {red!r}, None)")
        g.write(lines, t.dsts[0], "u32" if red == "popc" else "pred", "_v", None, t)
        lines.append(f"return {nxt}")


# ---------------------------------------------------------------------------------------------- warp operations
# opcode -> (does the modifier list fit, index of the member-mask operand or None, the error otherwise)
_WARP_FORMS = {
    "bar": (lambda m: m == ("warp", "sync"), 0, "expected bar.warp.sync"),
    "shfl": (lambda m: len(m) == 3 and m[0] == "sync" and m[1] in ("up", "down", "bfly", "idx") and m[2] == "b32",
             3, "expected shfl.sync.{up,down,bfly,idx}.b32"),
    "vote": (lambda m: len(m) == 3 and m[0] == "sync" and (m[1], m[2]) in (
        ("ballot", "b32"), ("any", "pred"), ("all", "pred"), ("uni", "pred")),
             1, "expected vote.sync.{ballot.b32,any.pred,all.pred,uni.pred}"),
    "redux": (lambda m: len(m) == 3 and m[0] == "sync" and m[1] in ("add", "min", "max", "and", "or", "xor")
              and m[2] in ("u32", "s32", "b32"), 1, "expected redux.sync.{add,min,max,and,or,xor}.{u32,s32,b32}"),
    "activemask": (lambda m: m == ("b32",), None, "expected activemask.b32"),
    "match": (lambda m: len(m) == 3 and m[0] in ("any", "all") and m[1] == "sync" and m[2] in ("b32", "b64"),
              1, "expected match.{any,all}.sync.{b32,b64}"),
    # the whole warp (.aligned); the forms are translator/matrix.py's
    "wmma": (lambda m: m[:1] == ("mma",), None, "expected wmma.mma"),
    "mma": (lambda m: True, None, ""),
}


def check_form(t: ir.Instr) -> None:
    """What a barrier or warp operation requires of its modifiers (and a barrier of its immediate operands),
    checked at module load (translator/support.py); raises err_ptx as the emitters do."""
    if t.opcode in ("bar", "barrier") and "warp" not in t.mods:
        bar_form(t)
    else:
        _warp_mask_operand(_canonical(t))


def _warp_mask_operand(t: ir.Instr):
    form = _WARP_FORMS.get(t.opcode)
    if form is None:
        raise err_ptx(t, "warp operation not supported")
    fits, mask_index, why = form
    if not fits(t.mods):
        raise err_ptx(t, why)
    if t.opcode == "match" and t.mods[0] == "any" and len(t.dsts) != 1:
        raise err_ptx(t, "match.any has no predicate destination")
    return None if mask_index is None else t.srcs[mask_index]


def _canonical(t: ir.Instr) -> ir.Instr:
    """shfl/vote/redux with .sync after the mode (`vote.ballot.sync.b32`, which ptxas accepts too) as the ISA's
    spelling `vote.sync.ballot.b32`."""
    if t.opcode in ("shfl", "vote", "redux") and "sync" in t.mods[1:]:
        return dataclasses.replace(t, mods=("sync",) + tuple(m for m in t.mods if m != "sync"))
    return t


def _emit_warp(g: Codegen, t: ir.Instr, lines: list, masked: bool, nxt: int) -> None:
    t = _canonical(t)
    op = t.opcode
    if t.guard is not None and op != "activemask":
        gexpr = g.guard(t, masked)
    else:
        gexpr = "m" if masked else None
    mask_src = _warp_mask_operand(t)
    msk = g.src(mask_src, "u32", t) if mask_src is not None else "None"
    if masked and op != "activemask":       # activemask reports who is here; it never waits
        lines.append(f"m = {g.rt('warp_ready')}(m, {msk}, {nxt})")
        lines.append("if m is None: return")
    _WARP_EMITTERS[op](g, t, lines, masked, gexpr, msk)
    lines.append(f"pcv[m] = {nxt}" if masked else f"return {nxt}")


def _warp_bar(g, t, lines, masked, gexpr, msk) -> None:
    pass                                    # bar.warp.sync: waiting (warp_ready) is all it does


def _warp_shfl(g, t, lines, masked, gexpr, msk) -> None:
    a = g.src(t.srcs[0], "b32", t)
    b = g.src(t.srcs[1], "u32", t)
    c = g.src(t.srcs[2], "u32", t)
    lines.append(f"_d, _p = {g.rt('shfl')}({t.mods[1]!r}, {a}, {b}, {c}, {gexpr})")
    _write_value_and_pred(g, t, lines, gexpr)


def _warp_vote(g, t, lines, masked, gexpr, msk) -> None:
    p = g.src(t.srcs[0], "pred", t)
    lines.append(f"_d = {g.rt('vote')}({t.mods[1]!r}, {p}, {msk}, {gexpr})")
    g.write(lines, t.dsts[0], t.mods[2], "_d", gexpr, t)


def _warp_redux(g, t, lines, masked, gexpr, msk) -> None:
    a = g.src(t.srcs[0], t.mods[2], t)
    lines.append(f"_d = {g.rt('redux')}({t.mods[1]!r}, {t.mods[2]!r}, {a}, {msk}, {gexpr})")
    g.write(lines, t.dsts[0], t.mods[2], "_d", gexpr, t)


def _warp_match(g, t, lines, masked, gexpr, msk) -> None:
    a = g.src(t.srcs[0], t.mods[2], t)
    lines.append(f"_d, _p = {g.rt('match')}({t.mods[0]!r}, {a}, {msk}, {gexpr})")
    _write_value_and_pred(g, t, lines, gexpr)


def _warp_activemask(g, t, lines, masked, gexpr, msk) -> None:
    lines.append(f"_d = {g.rt('activemask')}({'m' if masked else None})")
    g.write(lines, t.dsts[0], "b32", "_d", g.guard(t, masked), t)


def _write_value_and_pred(g: Codegen, t: ir.Instr, lines: list, gexpr) -> None:
    g.write(lines, t.dsts[0], "b32", "_d", gexpr, t)
    if len(t.dsts) > 1:
        g.write(lines, t.dsts[1], "pred", "_p", gexpr, t)


_WARP_EMITTERS = {"bar": _warp_bar, "shfl": _warp_shfl, "vote": _warp_vote, "redux": _warp_redux,
                  "match": _warp_match, "activemask": _warp_activemask, "wmma": emit_mma, "mma": emit_mma}
