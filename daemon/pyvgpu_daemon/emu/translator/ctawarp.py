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

An unguarded vote whose member mask is the whole warp, in a converged CTA, needs none of this (no warp waits, every
thread executes it): each warp's ballot is made from the predicates and written in one pass (_converged_vote).
Likewise an unguarded shuffle in a converged CTA, whatever its member mask (a shuffle reads no mask but to wait):
one call over the CTA reading the operands' arrays and writing the results' (_converged_shfl); and a
bar.warp.sync in a converged CTA, guarded or not, has nothing to do (it only waits).

Restricted to one CTA, these are the lockstep chunk's steps; the chunk's `forced` flag is the chunk's, here the
CTA's: a warp whose threads wait at different warp operations (undefined in the ISA) could be released in another
order when a chunk holds several CTAs. wmma/mma are not served here (eligible: the kernel keeps the other paths).
"""
from __future__ import annotations

import dataclasses

from ..ptx import ir
from .cgen import NoC, utype
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


# The operations themselves, once per library (the generated code per warp block only gathers operands and writes
# results: a kernel with dozens of shuffles stays small for the C compiler). hm: per warp of the CTA, the threads at
# the block (bit l: thread 32w + l); g: per thread, its guard; mk: its member mask.
PRELUDE = r"""
#define WBIT(hm, t) (((hm)[(t) >> 5] >> ((t) & 31)) & 1)
static __attribute__((noinline)) int WREADY(uint32_t *hm, int64_t cs, int64_t conv, const int32_t *act, int64_t n,
                                            uint8_t *ts, uint64_t *wf, const uint32_t *mk, int waits) {
    const int64_t nw = (cs + 31) >> 5;
    if (conv) {
        for (int64_t w = 0; w < nw; w++)
            hm[w] = cs - 32 * w >= 32 ? 0xFFFFFFFFu : (uint32_t)((UINT64_C(1) << (cs - 32 * w)) - 1);
        return 1;
    }
    for (int64_t w = 0; w < nw; w++) hm[w] = 0;
    for (int64_t j = 0; j < n; j++) hm[act[j] >> 5] |= 1u << (act[j] & 31);
    if (!waits) return 1;
    uint32_t left = 0; int miss = 0;
    for (int64_t w = 0; w < nw; w++) {
        const uint32_t h = hm[w];
        if (!h) continue;
        const int64_t b0 = 32 * w, wn = cs - b0 < 32 ? cs - b0 : 32;
        for (int64_t l = 0; l < wn; l++) {
            if ((h >> l) & 1) continue;
            const uint8_t s = ts[b0 + l];
            if (!(s == %(run)d || (!*wf && s == %(wait)d))) continue;
            if (!((mk[b0 + l] >> l) & 1)) continue;
            for (int64_t q = 0; q < wn; q++) if ((h >> q) & 1) ts[b0 + q] = %(wait)d;
            hm[w] = 0; miss = 1; break;
        }
        left |= hm[w];
    }
    if (!miss) *wf = 0;
    return left != 0;
}
/* (bit loops without branches, masked after: the lanes' bits are data, a branch per lane mispredicts half the time;
 * an element of a lane not at the block is read, never used: the scratch arrays hold 1024) */
static inline uint32_t WEX(const uint32_t *hm, int64_t w, const uint8_t *g) {
    uint32_t ex = 0;
    for (int l = 0; l < 32; l++) ex |= (uint32_t)(g[32 * w + l] != 0) << l;
    return ex & hm[w];
}
static inline uint32_t WMEM(uint32_t ex, int64_t b0, const uint32_t *mk) {
    uint32_t m = 0;
    for (int l = 0; l < 32; l++) m |= ((mk[b0 + l] >> l) & 1u) << l;
    return m & ex;
}
/* a converged CTA's whole-warp ballot (_converged_vote): per warp, bit l of each of its lanes' result set where lane
 * l's predicate byte is nonzero (lanes past the CTA's last thread: none); with AVX2 a whole warp's 32 bytes compared
 * and their top bits taken at once (a tenth of the time a call), the result stored 8 lanes at a time; else and in a
 * partial warp 8 lanes at a time (each nonzero byte's top bit, gathered by a multiply), stored two at a time */
#if defined(__AVX2__)
typedef char WV8 __attribute__((vector_size(32)));
typedef uint32_t WV32 __attribute__((vector_size(32)));
#endif
static __attribute__((noinline)) void WBALLOT(const uint8_t *p, uint32_t *d, int64_t cs) {
    for (int64_t w0 = 0; w0 < cs; w0 += 32) {
        const int64_t nl = cs - w0 < 32 ? cs - w0 : 32;
#if defined(__AVX2__)
        if (nl == 32) {
            WV8 x; memcpy(&x, p + w0, 32);
            const WV32 bb = (WV32){0} + (uint32_t)__builtin_ia32_pmovmskb256((WV8)(x != (WV8){0}));
            memcpy(d + w0, &bb, 32); memcpy(d + w0 + 8, &bb, 32);
            memcpy(d + w0 + 16, &bb, 32); memcpy(d + w0 + 24, &bb, 32);
            continue;
        }
#endif
        uint32_t b = 0; int64_t l = 0;
        for (; l + 8 <= nl; l += 8) {
            uint64_t x; memcpy(&x, p + w0 + l, 8);
            x = (((x & UINT64_C(0x7F7F7F7F7F7F7F7F)) + UINT64_C(0x7F7F7F7F7F7F7F7F)) | x) & UINT64_C(0x8080808080808080);
            b |= (uint32_t)(((x >> 7) * UINT64_C(0x0102040810204080)) >> 56) << l;
        }
        for (; l < nl; l++) b |= (uint32_t)(p[w0 + l] != 0) << l;
        const uint64_t bb = (uint64_t)b << 32 | b;
        for (l = 0; l + 2 <= nl; l += 2) memcpy(d + w0 + l, &bb, 8);
        if (l < nl) d[w0 + l] = b;
    }
}
/* the source lane *j of lane l of a shfl.sync in `mode` (0 up, 1 down, 2 bfly, 3 idx; b its lane operand, c its
 * clamp and segment mask) and whether it lies in the lane's segment (else *j is l), as the PTX ISA's pseudocode */
static inline int WSRC(int mode, int32_t l, uint32_t b, uint32_t c, int32_t *j) {
    const int32_t bv = (int32_t)(b & 31), clamp = (int32_t)(c & 31), seg = (int32_t)((c >> 8) & 31);
    const int32_t maxl = (l & seg) | (clamp & ~seg), minl = l & seg;
    int q;
    if (mode == 0) { *j = l - bv; q = *j >= maxl; }
    else if (mode == 1) { *j = l + bv; q = *j <= maxl; }
    else if (mode == 2) { *j = l ^ bv; q = *j <= maxl; }
    else { *j = minl | (bv & ~seg); q = *j <= maxl; }
    if (!q) *j = l;
    return q;
}
/* shfl.sync (mode 0 up, 1 down, 2 bfly, 3 idx): runtime/collective._shfl_lanes; a source not executing it reads 0 */
static __attribute__((noinline)) void WSHFL(int mode, const uint32_t *hm, int64_t cs, const uint8_t *g,
        const uint32_t *a, const uint32_t *b, const uint32_t *c, uint32_t *d, uint8_t *p) {
    for (int64_t w = 0; w < (cs + 31) >> 5; w++) {
        const uint32_t ex = WEX(hm, w, g);
        const int64_t b0 = 32 * w;
        for (int32_t l = 0; l < 32; l++) {
            if (!((ex >> l) & 1)) continue;
            int32_t j; const int q = WSRC(mode, l, b[b0 + l], c[b0 + l], &j);
            d[b0 + l] = ((ex >> j) & 1) ? a[b0 + j] : 0u;
            p[b0 + l] = (uint8_t)q;
        }
    }
}
/* a converged CTA's unguarded shfl.sync (_converged_shfl): every lane of each warp executes it (lanes past the CTA's
 * last thread: none, a source there reads 0); WSHFL's lanes and results. a, b, c the operands' arrays or gathered
 * copies, d and p the results' arrays or scratch (d never a's: other lanes read a after d is written) */
static __attribute__((noinline)) void WSHFLC(int mode, int64_t cs, const uint32_t *a, const uint32_t *b,
        const uint32_t *c, uint32_t *d, uint8_t *p) {
    for (int64_t b0 = 0; b0 < cs; b0 += 32) {
        const int32_t nl = cs - b0 < 32 ? (int32_t)(cs - b0) : 32;
        for (int32_t l = 0; l < nl; l++) {
            int32_t j; const int q = WSRC(mode, l, b[b0 + l], c[b0 + l], &j);
            d[b0 + l] = j < nl ? a[b0 + j] : 0u;
            p[b0 + l] = (uint8_t)q;
        }
    }
}
/* vote.sync (mode 0 ballot, 1 any, 2 all, 3 uni) over the executing member threads */
static __attribute__((noinline)) void WVOTE(int mode, const uint32_t *hm, int64_t cs, const uint8_t *g,
        const uint32_t *mk, const uint8_t *pr, uint32_t *d) {
    for (int64_t w = 0; w < (cs + 31) >> 5; w++) {
        const uint32_t ex = WEX(hm, w, g);
        const int64_t b0 = 32 * w;
        const uint32_t mem = WMEM(ex, b0, mk);
        uint32_t bal = 0;
        for (int l = 0; l < 32; l++) bal |= (uint32_t)(pr[b0 + l] != 0) << l;
        bal &= mem;
        const uint32_t v = mode == 0 ? bal : mode == 1 ? bal != 0 : mode == 2 ? bal == mem : (bal == 0 || bal == mem);
        for (int l = 0; l < 32; l++) if ((ex >> l) & 1) d[b0 + l] = v;
    }
}
/* redux.sync (op 0 add, 1 min, 2 max, 3 and, 4 or, 5 xor; sgn: s32) over the executing member threads, in lane
 * order; 0 where none */
static __attribute__((noinline)) void WREDUX(int op, int sgn, const uint32_t *hm, int64_t cs, const uint8_t *g,
        const uint32_t *mk, const uint32_t *a, uint32_t *d) {
    for (int64_t w = 0; w < (cs + 31) >> 5; w++) {
        const uint32_t ex = WEX(hm, w, g);
        const int64_t b0 = 32 * w;
        const uint32_t mem = WMEM(ex, b0, mk);
        uint32_t r = 0; int first = 1;
        for (int l = 0; l < 32; l++) {
            if (!((mem >> l) & 1)) continue;
            const uint32_t x = a[b0 + l];
            if (first) { r = x; first = 0; continue; }
            if (op == 0) r += x;
            else if (op == 1) r = sgn ? ((int32_t)x < (int32_t)r ? x : r) : (x < r ? x : r);
            else if (op == 2) r = sgn ? ((int32_t)x > (int32_t)r ? x : r) : (x > r ? x : r);
            else if (op == 3) r &= x;
            else if (op == 4) r |= x;
            else r ^= x;
        }
        for (int l = 0; l < 32; l++) if ((ex >> l) & 1) d[b0 + l] = r;
    }
}
/* match.sync (all: .all, else .any): the executing member threads' values compared; a non-member 0 / 0 */
static __attribute__((noinline)) void WMATCH(int all, const uint32_t *hm, int64_t cs, const uint8_t *g,
        const uint32_t *mk, const uint64_t *a, uint32_t *d, uint8_t *p) {
    for (int64_t w = 0; w < (cs + 31) >> 5; w++) {
        const uint32_t ex = WEX(hm, w, g);
        const int64_t b0 = 32 * w;
        const uint32_t mem = WMEM(ex, b0, mk);
        int same = 1, first = 1; uint64_t v0 = 0;
        for (int l = 0; l < 32; l++) if ((mem >> l) & 1) {
            if (first) { v0 = a[b0 + l]; first = 0; } else if (a[b0 + l] != v0) same = 0;
        }
        for (int l = 0; l < 32; l++) {
            if (!((ex >> l) & 1)) continue;
            const int in = (mem >> l) & 1;
            uint32_t r = 0;
            if (all) r = in && same ? mk[b0 + l] : 0u;
            else if (in) for (int q = 0; q < 32; q++) if (((mem >> q) & 1) && a[b0 + q] == a[b0 + l]) r |= 1u << q;
            d[b0 + l] = r; p[b0 + l] = (uint8_t)(all && in && same);
        }
    }
}
"""

# The function's scratch arrays (one thread's operands and results per element, for the CTA; no suspension
# between their writing and reading, so they are plain locals)
SCRATCH = ("uint32_t W_h[32], W_a[1024], W_b[1024], W_c[1024], W_m[1024], W_d[1024]; uint64_t W_a64[1024]; "
           "uint8_t W_g[1024], W_p[1024]; (void)W_a; (void)W_b; (void)W_c; (void)W_m; (void)W_d; (void)W_a64; "
           "(void)W_g; (void)W_p;")


def prelude(states: dict[str, int]) -> str:
    return PRELUDE % {"run": states["T_RUN"], "wait": states["T_WAIT"]}


def block_code(e, t: ir.Instr, nxt: int) -> str:
    """C statements of a warp block (after its `B<k>:` label): conv / n / act / ts / pc / lic / cs / wf as
    kernel_source has them, SCRATCH declared; ends with `goto dispatch` (converged) or `goto sched`."""
    t = _canonical(t)
    op = t.opcode
    if not supported(t):
        raise NoC
    msk = _warp_mask_operand(t)
    e.label()
    plain = dataclasses.replace(t, guard=None)      # the writes: only executing threads are written
    guard = "1"
    if t.guard is not None:
        gname, gneg = t.guard
        if e.regs.get(gname) != 1:
            raise NoC
        guard = f"({'!' if gneg else ''}{e.var(gname)})"
    mask = "0xFFFFFFFFu" if msk is None else f"(uint32_t)({e.src(msk, 'u32', t)})"
    waits = op != "activemask"                    # activemask reports who is here; it never waits
    # the member masks of every thread (waiting reads those not at the block too)
    pre = (f"for (lic = 0; lic < cs; lic++) W_m[lic] = {mask}; " if waits or op in ("vote", "redux", "match") else "")
    at = "for (j = 0; j < n; j++) { lic = conv ? j : act[j]; if (!WBIT(W_h, lic)) continue; "
    gather, compute, writes = [f"W_g[lic] = (uint8_t){guard};"], "", []
    if op == "shfl":
        gather += [f"W_a[lic] = (uint32_t)({e.src(t.srcs[0], 'b32', t)});",
                   f"W_b[lic] = (uint32_t)({e.src(t.srcs[1], 'u32', t)});",
                   f"W_c[lic] = (uint32_t)({e.src(t.srcs[2], 'u32', t)});"]
        mode = ("up", "down", "bfly", "idx").index(t.mods[1])
        compute = f"WSHFL({mode}, W_h, cs, W_g, W_a, W_b, W_c, W_d, W_p);"
        writes = [(t.dsts[0], "b32", "W_d[lic]")] + ([(t.dsts[1], "pred", "W_p[lic]")] if len(t.dsts) > 1 else [])
    elif op == "vote":
        gather.append(f"W_p[lic] = (uint8_t)({e.src(t.srcs[0], 'pred', t)});")
        mode = ("ballot", "any", "all", "uni").index(t.mods[1])
        compute = f"WVOTE({mode}, W_h, cs, W_g, W_m, W_p, W_d);"
        writes = [(t.dsts[0], t.mods[2], "W_d[lic]")]
    elif op == "redux":
        typ = t.mods[2]
        gather.append(f"W_a[lic] = (uint32_t)({e.src(t.srcs[0], typ, t)});")
        kind = ("add", "min", "max", "and", "or", "xor").index(t.mods[1])
        compute = f"WREDUX({kind}, {int(typ == 's32')}, W_h, cs, W_g, W_m, W_a, W_d);"
        writes = [(t.dsts[0], typ, f"({utype(32) if typ != 's32' else 'int32_t'})W_d[lic]")]
    elif op == "match":
        typ = t.mods[2]
        gather.append(f"W_a64[lic] = (uint64_t)({e.src(t.srcs[0], typ, t)});")
        compute = f"WMATCH({int(t.mods[0] == 'all')}, W_h, cs, W_g, W_m, W_a64, W_d, W_p);"
        writes = [(t.dsts[0], "b32", "W_d[lic]")] + ([(t.dsts[1], "pred", "W_p[lic]")] if len(t.dsts) > 1 else [])
    elif op == "activemask":
        writes = [(t.dsts[0], "b32", "W_h[lic >> 5]")]
    write = " ".join(_write(e, plain, d, typ, v) for d, typ, v in writes)
    fast = _converged_vote(e, t, plain, msk, nxt) if op == "vote" else \
        _converged_shfl(e, t, plain, nxt) if op == "shfl" else \
        f"if (conv) {{ P = {nxt}; goto dispatch; }} " if op == "bar" else ""   # (converged: no warp waits)
    return (f"{{ {fast}{pre}if (!WREADY(W_h, cs, conv, act, n, ts, wf, W_m, {int(waits)})) goto sched; "
            f"{at}{' '.join(gather)} }} {compute} "
            f"{at}if (W_g[lic]) {{ {write} }} if (!conv) pc[lic] = {nxt}; }} "
            f"if (conv) {{ P = {nxt}; goto dispatch; }} goto sched; }}")


def _converged_vote(e, t: ir.Instr, plain: ir.Instr, msk, nxt: int) -> str:
    """C statements running an unguarded vote whose member mask is the whole warp (none, or the immediate
    0xFFFFFFFF) when the CTA is converged, then going on at block nxt; "" for other votes. Converged, no warp waits
    (WREADY: every thread is at the block) and every thread executes it, a member of its warp (lanes past the CTA's
    last thread are none): the ballot of each warp straight from the predicates, the result straight into the
    destination, one pass each instead of WREADY, the gathers, WVOTE and the writes (CUB's onesweep: 371 ballots a
    CTA, a third of its native time; bench/README.md, "thirteenth step")."""
    full = msk is None or (isinstance(msk, ir.Imm) and isinstance(msk.value, int) and
                           not msk.is_float_bits and msk.value & 0xFFFFFFFF == 0xFFFFFFFF)
    if t.guard is not None or not full:
        return ""
    src, dst = t.srcs[0], t.dsts[0]
    if t.mods[1] == "ballot" and _array(e, src, 1) and _array(e, dst, 32):
        # (a predicate's array and a 32-bit register's: WBALLOT, 8 lanes at a time; CUB's ballots are all such)
        return (f"if (conv) {{ WBALLOT((const uint8_t *){e.array(src.name)}, (uint32_t *){e.array(dst.name)}, cs); "
                f"P = {nxt}; goto dispatch; }} ")
    pred = e.src(src, "pred", t)
    mem = "(uint32_t)((UINT64_C(1) << (we - w0)) - 1)"
    v = {"ballot": "bal", "any": "(uint32_t)(bal != 0)", "all": f"(uint32_t)(bal == {mem})",
         "uni": f"(uint32_t)(bal == 0 || bal == {mem})"}[t.mods[1]]
    write = _write(e, plain, t.dsts[0], t.mods[2], "v")
    return (f"if (conv) {{ for (int64_t w0 = 0; w0 < cs; w0 += 32) {{ const int64_t we = cs - w0 < 32 ? cs : w0 + 32; "
            f"uint32_t bal = 0; for (lic = w0; lic < we; lic++) bal |= (uint32_t)(({pred}) != 0) << (lic - w0); "
            f"const uint32_t v = {v}; for (lic = w0; lic < we; lic++) {{ {write} }} }} P = {nxt}; goto dispatch; }} ")


def _converged_shfl(e, t: ir.Instr, plain: ir.Instr, nxt: int) -> str:
    """C statements running an unguarded shfl.sync when the CTA is converged, then going on at block nxt; "" for a
    guarded one. Converged, no warp waits whatever the member masks (WREADY) and every thread executes it (WSHFL
    reads no mask): WSHFLC over the CTA, reading the operands' arrays where they are 32-bit registers' (else
    gathered first) and writing the destinations' arrays where they are such and not the source's (else scratch
    copied after), instead of the mask pass, WREADY, the gathers over the running threads, WSHFL and the writes
    (CUB's onesweep: its warp scans' shuffles, a tenth of its native time; bench/README.md, "fourteenth step")."""
    if t.guard is not None:
        return ""
    pre, ins, post = [], [], []
    for o, scratch in zip(t.srcs[:3], ("W_a", "W_b", "W_c")):
        if _array(e, o, 32):
            ins.append(f"(const uint32_t *){e.array(o.name)}")
        else:
            pre.append(f"{scratch}[lic] = (uint32_t)({e.src(o, 'b32' if scratch == 'W_a' else 'u32', t)});")
            ins.append(scratch)
    d = t.dsts[0]
    p = t.dsts[1] if len(t.dsts) > 1 else None
    if _array(e, d, 32) and not (_array(e, t.srcs[0], 32) and e.array(d.name) == e.array(t.srcs[0].name)):
        outs = [f"(uint32_t *){e.array(d.name)}"]
    else:
        outs = ["W_d"]
        post.append(_write(e, plain, d, "b32", "W_d[lic]"))
    if p is None or _array(e, p, 1):
        outs.append("W_p" if p is None else f"(uint8_t *){e.array(p.name)}")
    else:
        outs.append("W_p")
        post.append(_write(e, plain, p, "pred", "W_p[lic]"))
    mode = ("up", "down", "bfly", "idx").index(t.mods[1])
    loop = "for (lic = 0; lic < cs; lic++)"
    return (f"if (conv) {{ {f'{loop} {{ {chr(32).join(pre)} }} ' if pre else ''}"
            f"WSHFLC({mode}, cs, {', '.join(ins)}, {', '.join(outs)}); "
            f"{f'{loop} {{ {chr(32).join(post)} }} ' if post else ''}P = {nxt}; goto dispatch; }} ")


def _array(e, o, bits: int) -> bool:
    """Whether operand o is a register of `bits` bits held in an array over the CTA's threads (ctagen.CtaEmitter:
    not a C local, not kept once per CTA), not negated."""
    return isinstance(o, ir.Reg) and o.name in e.regs and e.regs[o.name] == bits and o.name not in e.local and \
        o.name not in e.uniform


def _write(e, t: ir.Instr, dst, typ: str, value: str) -> str:
    """C of one destination's write (the current lic), as the lockstep path writes it (CEmitter.write)."""
    start = len(e.lines)
    try:
        e.write(dst, typ, value, t)
        return " ".join(e.lines[start:])
    finally:
        del e.lines[start:]
