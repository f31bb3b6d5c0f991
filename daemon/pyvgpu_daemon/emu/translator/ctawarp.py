"""Warp operations in CTA-at-a-time code (ctagen.py, "stage 3"): shfl.sync, vote.sync, redux.sync, match.sync,
activemask and bar.warp.sync as C over the threads of a CTA at the warp block, with the lockstep path's semantics
(runtime/collective.py, translator/control.py's _emit_warp), bit for bit.

A warp operation is a block of its own (cfg.py: kind 'warp'). The step that runs it (the lowest PC of the CTA's
running threads, ctagen's scheduler) does, per warp of the CTA (consecutive groups of 32 threads; a CTA whose size
is not a multiple of 32 has a short last warp):
- waiting (Collectives.warp_ready; not for activemask, which never waits): a warp with a member thread that is not
  at the block and is running elsewhere, or parked at another warp operation (unless the CTA's parked threads were
  just all woken because nothing else could run: `forced`, then only running ones count), parks its threads at the
  block (T_WAIT); exited threads and threads at a barrier are never waited for. A thread's membership is bit
  %laneid of its own value of the member-mask operand (a register's value in a thread not at the block included,
  as the lockstep path reads it). `forced` is cleared by a step that parks no warp. When no thread of the CTA runs,
  the scheduler wakes the waiting ones first (ctagen.kernel_source), then releases barriers;
- the operation: every operand of every thread of the warp at the block read first, then the results written, so a
  destination that is also an operand reads the old value. The threads that execute it are those at the block
  whose guard holds; shfl reads 0 from a source lane that does not (NVIDIA's GPUs; runtime/collective.py), and
  vote/redux/match count the executing threads whose own member-mask bit is set.

Restricted to one CTA, these are the lockstep chunk's steps; the chunk's `forced` flag is the chunk's, here the
CTA's: a warp whose threads wait at different warp operations (undefined in the ISA) could be released in another
order when a chunk holds several CTAs. wmma/mma are not served here (eligible: the kernel keeps the other paths).
"""
from __future__ import annotations

import dataclasses

from ..ptx import ir
from .cgen import NoC, ctype
from .control import _canonical, _warp_mask_operand

# Opcodes served here (cfg.WARP_OPS and bar.warp.sync; not the matrix operations)
SERVED = frozenset({"shfl", "vote", "redux", "match", "activemask", "bar"})


def supported(t: ir.Instr) -> bool:
    """Whether a warp block's terminator runs in CTA-at-a-time code (its form is checked at module load:
    control.check_form)."""
    return t.opcode in SERVED and (t.opcode != "bar" or "warp" in t.mods)


def read_across(kernel, regs) -> set[str]:
    """The registers a warp operation reads in threads that are not at it (the member masks: waiting tests each
    thread's own mask bit). A CTA starts them at 0, as each lane's own registers start in the lockstep chunk:
    liveness, which follows one thread, does not see these reads."""
    out: list[str] = []
    for b in kernel.blocks:
        if b.kind == "warp" and supported(b.term):
            m = _warp_mask_operand(_canonical(b.term))
            if isinstance(m, ir.Reg) and m.name in regs:
                out.append(m.name)
    return set(out)


def block_code(e, t: ir.Instr, nxt: int, states: dict[str, int], forced: str) -> str:
    """C statements of a warp block (after its `B<k>:` label): conv / n / act / ts / pc / lic and the CTA's size
    `cs` as kernel_source has them; ends with `goto dispatch` (converged) or `goto sched`. `states`: the thread
    states' values (T_RUN, T_WAIT); `forced`: the C lvalue of the CTA's forced flag."""
    t = _canonical(t)
    op = t.opcode
    if not supported(t):
        raise NoC
    msk_op = _warp_mask_operand(t)
    e.label()
    plain = dataclasses.replace(t, guard=None)      # the writes: only executing threads are written
    if t.guard is not None:
        gname, gneg = t.guard
        if e.regs.get(gname) != 1:
            raise NoC
        guard = f"({'!' if gneg else ''}{e.var(gname)})"
    else:
        guard = None

    def mask_of() -> str:       # a thread's member mask (lic set): all ones without the operand
        return "0xFFFFFFFFu" if msk_op is None else f"(uint32_t)({e.src(msk_op, 'u32', t)})"

    run, wait = states["T_RUN"], states["T_WAIT"]
    out: list[str] = ["{ uint32_t W_h[32]; const int64_t W_nw = (cs + 31) >> 5; int64_t W_w, W_l;"]
    # the threads at the block, per warp
    out.append("if (conv) { for (W_w = 0; W_w < W_nw; W_w++) W_h[W_w] = cs - 32 * W_w >= 32 ? 0xFFFFFFFFu : "
               "(uint32_t)((UINT64_C(1) << (cs - 32 * W_w)) - 1); } "
               "else { for (W_w = 0; W_w < W_nw; W_w++) W_h[W_w] = 0; "
               "for (j = 0; j < n; j++) W_h[act[j] >> 5] |= 1u << (act[j] & 31);")
    if op != "activemask":
        # waiting: a warp with a member thread still to come parks its threads here
        out.append(
            f"uint32_t W_left = 0; int W_miss = 0; "
            f"for (W_w = 0; W_w < W_nw; W_w++) {{ const uint32_t h = W_h[W_w]; if (!h) continue; "
            f"const int64_t b0 = 32 * W_w, wn = cs - b0 < 32 ? cs - b0 : 32; "
            f"for (W_l = 0; W_l < wn; W_l++) {{ if ((h >> W_l) & 1) continue; lic = b0 + W_l; "
            f"const uint8_t s = ts[lic]; if (!(s == {run} || (!{forced} && s == {wait}))) continue; "
            f"if (!(({mask_of()} >> W_l) & 1)) continue; "
            f"for (int64_t q = 0; q < wn; q++) if ((h >> q) & 1) ts[b0 + q] = {wait}; "
            f"W_h[W_w] = 0; W_miss = 1; break; }} "
            f"W_left |= W_h[W_w]; }} "
            f"if (!W_miss) {forced} = 0; "
            f"if (!W_left) goto sched;")
    out.append("}")
    # the operation, per warp: operands of every thread first, then the results
    body = _OPS[op](e, t, plain, guard, mask_of)
    out.append(f"for (W_w = 0; W_w < W_nw; W_w++) {{ const uint32_t h = W_h[W_w]; if (!h) continue; "
               f"const int64_t b0 = 32 * W_w; (void)b0; {body} "
               f"if (!conv) for (W_l = 0; W_l < 32; W_l++) if ((h >> W_l) & 1) pc[b0 + W_l] = {nxt}; }}")
    out.append(f"if (conv) {{ P = {nxt}; goto dispatch; }} goto sched; }}")
    return " ".join(out)


def _lanes(bits: str, code: str) -> str:
    """C: code for each lane W_l of the warp in `bits` with lic its thread."""
    return f"for (W_l = 0; W_l < 32; W_l++) if (({bits} >> W_l) & 1) {{ lic = b0 + W_l; {code} }}"


def _executing(guard: str | None) -> str:
    """C declaring `ex`: the warp's threads at the block whose guard holds."""
    if guard is None:
        return "const uint32_t ex = h;"
    return "uint32_t ex = 0; " + _lanes("h", f"if {guard} ex |= 1u << W_l;")


def _members(mask_of) -> str:
    """C declaring `mem`: the executing threads whose own member mask has their lane's bit (runtime/collective.py's
    _active)."""
    return "uint32_t mem = 0; " + _lanes("ex", f"if (({mask_of()} >> W_l) & 1) mem |= 1u << W_l;")


def _write(e, t: ir.Instr, dst, typ: str, value: str) -> str:
    """C of one destination's write (the current lic), as the lockstep path writes it (CEmitter.write)."""
    start = len(e.lines)
    try:
        e.write(dst, typ, value, t)
        return " ".join(e.lines[start:])
    finally:
        del e.lines[start:]


def _bar(e, t, plain, guard, mask_of) -> str:
    return ""                   # bar.warp.sync: waiting is all it does


def _shfl(e, t, plain, guard, mask_of) -> str:
    a = e.src(t.srcs[0], "b32", t)
    b = e.src(t.srcs[1], "u32", t)
    c = e.src(t.srcs[2], "u32", t)
    mode = t.mods[1]
    # runtime/collective._shfl_lanes: the source lane j and the in-range predicate
    if mode == "up":
        src = "int32_t j = l - bv; int p = j >= maxl;"
    elif mode == "down":
        src = "int32_t j = l + bv; int p = j <= maxl;"
    elif mode == "bfly":
        src = "int32_t j = l ^ bv; int p = j <= maxl;"
    else:
        src = "int32_t j = minl | (bv & ~seg); int p = j <= maxl;"
    writes = _write(e, plain, t.dsts[0], "b32", "d")
    if len(t.dsts) > 1:
        writes += " " + _write(e, plain, t.dsts[1], "pred", "p")
    return (f"{_executing(guard)} uint32_t av[32], bb[32], cc[32]; "
            + _lanes("ex", f"av[W_l] = (uint32_t)({a}); bb[W_l] = (uint32_t)({b}); cc[W_l] = (uint32_t)({c});") +
            " " + _lanes("ex", "const int32_t l = (int32_t)W_l, bv = (int32_t)(bb[W_l] & 31), "
                               "clamp = (int32_t)(cc[W_l] & 31), seg = (int32_t)((cc[W_l] >> 8) & 31); "
                               "const int32_t maxl = (l & seg) | (clamp & ~seg), minl = l & seg; (void)minl; "
                               f"{src} if (!p) j = l; "
                               f"const uint32_t d = ((ex >> j) & 1) ? av[j] : 0u; {writes}"))


def _vote(e, t, plain, guard, mask_of) -> str:
    p = e.src(t.srcs[0], "pred", t)
    mode, typ = t.mods[1], t.mods[2]
    value = {"ballot": "bal", "any": "bal != 0", "all": "bal == mem",
             "uni": "bal == 0 || bal == mem"}[mode]
    return (f"{_executing(guard)} {_members(mask_of)} uint32_t bal = 0; "
            + _lanes("mem", f"if ({p}) bal |= 1u << W_l;") + " "
            + _lanes("ex", _write(e, plain, t.dsts[0], typ, value)))


def _redux(e, t, plain, guard, mask_of) -> str:
    kind, typ = t.mods[1], t.mods[2]
    ct = ctype(typ)
    a = e.src(t.srcs[0], typ, t)
    combine = {"add": "r = ({ct})((uint32_t)r + (uint32_t)x);", "min": "r = x < r ? x : r;", "max": "r = x > r ? x : r;",
               "and": "r &= x;", "or": "r |= x;", "xor": "r ^= x;"}[kind].format(ct=ct)
    # the reduction over the member threads in lane order (add wraps: runtime/collective's int64 sum cast back)
    return (f"{_executing(guard)} {_members(mask_of)} {ct} av[32]; "
            + _lanes("mem", f"av[W_l] = ({ct})({a});") + " "
            + f"{ct} r = 0; int first = 1; for (W_l = 0; W_l < 32; W_l++) if ((mem >> W_l) & 1) {{ "
              f"const {ct} x = av[W_l]; if (first) {{ r = x; first = 0; }} else {{ {combine} }} }} "
            + _lanes("ex", _write(e, plain, t.dsts[0], typ, "r")))


def _match(e, t, plain, guard, mask_of) -> str:
    mode, typ = t.mods[0], t.mods[2]
    ut = "uint64_t" if typ == "b64" else "uint32_t"
    a = e.src(t.srcs[0], typ, t)
    if mode == "any":
        # each member thread: the members holding its value; an executing non-member: 0
        compute = (f"uint32_t d = 0; if ((mem >> W_l) & 1) for (int q = 0; q < 32; q++) "
                   f"if (((mem >> q) & 1) && av[q] == av[W_l]) d |= 1u << q;")
        writes = _write(e, plain, t.dsts[0], "b32", "d")
        return (f"{_executing(guard)} {_members(mask_of)} {ut} av[32]; "
                + _lanes("mem", f"av[W_l] = ({ut})({a});") + " " + _lanes("ex", f"{compute} {writes}"))
    # all: the member threads agree: d = the thread's own member mask, p = 1; else 0 / 0; a non-member 0 / 0
    writes = _write(e, plain, t.dsts[0], "b32", "d")
    if len(t.dsts) > 1:
        writes += " " + _write(e, plain, t.dsts[1], "pred", "p")
    return (f"{_executing(guard)} {_members(mask_of)} {ut} av[32]; uint32_t mk[32]; "
            + _lanes("ex", f"av[W_l] = ({ut})({a}); mk[W_l] = {mask_of()};") + " "
            + "int same = 1; { int first = 1; " + ut + " W_v0 = 0; for (W_l = 0; W_l < 32; W_l++) "
              "if ((mem >> W_l) & 1) { if (first) { W_v0 = av[W_l]; first = 0; } else if (av[W_l] != W_v0) same = 0; } } "
            + _lanes("ex", f"const int in = (mem >> W_l) & 1; const uint32_t d = in && same ? mk[W_l] : 0u; "
                           f"const int p = in && same; (void)p; {writes}"))


def _activemask(e, t, plain, guard, mask_of) -> str:
    # the threads at the block (it never waits), written where the guard holds
    return _lanes("h", f"{'if ' + guard if guard else ''} {{ {_write(e, plain, t.dsts[0], 'b32', 'h')} }}")


_OPS = {"bar": _bar, "shfl": _shfl, "vote": _vote, "redux": _redux, "match": _match, "activemask": _activemask}
