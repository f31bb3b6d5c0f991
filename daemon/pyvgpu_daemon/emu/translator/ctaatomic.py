"""Stage 3 (ctagen.py) for kernels whose CTAs talk: atomics, volatile and memory-model-scoped global accesses,
fences, and the CTAs run one after the other with a way to set one aside.

What a CTA at a time keeps of the lockstep order (ctagen.py's module docstring): within a block a loop over the
threads holds at most one store of memory threads share, and an atomic counts as that store, so the threads'
read-modify-writes happen in thread order, the lockstep path's lane order (ops/atomic.py applies a vector
atomic in lane order too). An atomic is checked as a store of its size (threadgen's resolvers: alignment, a live
allocation or the CTA's window); one the C code cannot serve suspends with st[ST_WRITE] = threadgen.W_ATOMIC,
Python checks it as runtime/spaces.py checks a store (or raises its fault) and hands back the address of its
bytes, and the C code does the read-modify-write there. Its semantics are ops/atomic.combine's, written in C
(every operation and type of ops/atomic.ATOMIC_TYPES but the float and half-precision adds, which keep the other
paths).

The C code is correct with other CTAs running at once on other OS threads (the PTX memory model mapped onto
C11's, as GCC's __atomic builtins compile it for x86-TSO): an atomic of global or generic memory is one atomic
read-modify-write (a fetch-op for add/and/or/xor/exch, one compare-and-swap for cas, a compare-and-swap loop of
combine's value for min/max/inc/dec) of the order its semantics give (.acquire/.release/.acq_rel; none, as
PTX's default .relaxed: relaxed); a shared one stays a plain read-modify-write (a CTA's threads run on one OS
thread; only they reach its shared memory). A volatile, relaxed or acquire load and a volatile, relaxed or
release store of memory other CTAs reach (cfg.shares_across_ctas: all but a volatile shared one) is an
__atomic_load_n / __atomic_store_n, relaxed (PTX's .volatile is a relaxed access of system scope) or of its
order, of each element, or of the whole vector where it is 2 to 16 bytes (a GPU makes an aligned vector access
whole, and CUB's look-back relies on it: PRELUDE); membar/fence is __atomic_thread_fence, sequentially consistent (membar.gl/.sys, fence.sc) or
acquire-release (fence.acq_rel), at CTA scope only the compiler's (__atomic_signal_fence); nanosleep is nothing.
Plain accesses stay plain: a kernel whose CTAs race on them has undefined results on a GPU too. An access
served by Python (R_SLOW) is a copy made while the C code waits, the same bytes at once.

CTAs that talk run in ascending order (CTA k starts no earlier than k - 1: a schedule a GPU may pick, and a
look-back over earlier CTAs finds them started or done) on EmuLimits.talk_threads threads (PYVGPU_EMU_TALK_THREADS;
by default 2, or 1 where EmuLimits.threads is 1; _Talk):
the launching thread and helpers of its crew (runtime/crew.py), each with a state array of its own, take CTAs from
one queue. A CTA that waits for a *later* one (a spin on a flag another CTA sets, a hand-made grid barrier among
the chunk's CTAs) would never finish where every thread runs such a CTA, where the lockstep path, which steps all
of a chunk's CTAs together, does. So a CTA that has run SLICE_TICKS * threadgen.TICK_EVERY thread-instructions
(counted in the C code's R_TICK suspensions, each TALK_TICK_SCALE * TICK_EVERY of them: _slice_ticks), and at least
as many as its threads running each instruction of the kernel once (CtaRegisters.instructions: a CTA of a large
straight-line kernel, CUB's onesweep, is not set aside before it had the time to finish, which cost more in copies
than its run), without finishing is set aside while others of its chunk wait in the queue: its threads' PCs and states and its registers
(CtaRegisters: ctasize elements of each array, neighbours in one copy) are copied into memory Python owns, the CTA
goes to the queue's end, and whichever thread is free resumes it on its own arrays (round robin) until all are done.
The memory is at most the chunk's CTAs times their registers, what the lockstep chunk holds for the same lanes; a
kernel that never finishes still ends at the launch's instruction budget or deadline (Launch.account), as on the
lockstep path. Chunks still run in CTA order, one at a time, as on the lockstep path: a CTA waiting for one of a
later chunk times out on both.

Determinism: on several threads the order in which CTAs' atomics and ordered accesses meet depends on the
schedule, as on a GPU (which CTA's atomic returns which old value; a float sum's rounding would too, but float
adds keep the other paths). A kernel whose results do not depend on it (a sort by CUB's onesweep, a look-back
scan, counters' totals, a histogram) gives the lockstep path's bits; one whose results do (old values stored,
a winner taken by exch) gives one result a GPU may give. PYVGPU_EMU_TALK_THREADS=1 (or PYVGPU_EMU_THREADS=1) keeps
the one-thread order, the CTAs one after the other as set out above, the same results run after run.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..ops.atomic import HALF_ADD
from ..ptx import ir
from ..ptx.types import BITS, SIGNED
from .cfg import SHARING_OPCODES, shares_across_ctas
from .cgen import NoC, ctype, load_form
from .instrs import _atom_mods
from . import threadgen
from .threadgen import R_DONE, R_SLOW, R_TICK, ST_CNT, ST_RESUME, ST_VAL, ST_WRITE, W_ATOMIC

SLICE_TICKS = 4                  # TICK_EVERYs of thread-instructions a CTA runs before it is set aside while others wait
# A talking CTA's R_TICK every TALK_TICK_SCALE * threadgen.TICK_EVERY thread-instructions (2^20: 0.1-0.4 ms of its
# loops; CtaCode.tick_scale): each return costs a ctypes call, the launch's accounting (its lock, deadline,
# cancellation and turn) and the loop's Python, a few microseconds with the interpreter's caches cold after the C
# code, and CUB's onesweep returned about 6 times a CTA at 2^18. 4: the slice stays what it was (SLICE_TICKS at
# 2^18 is one tick) and a runaway CTA still returns every 2^20, a quarter of what CTAs that do not talk run (16).
TALK_TICK_SCALE = 4
# What the C code serves of the instructions that let CTAs talk; the rest of cfg.SHARING_OPCODES (calls, traps,
# bulk copies, mbarriers) keeps the other paths.
ATOMIC_OPCODES = frozenset({"atom", "red"})
NOTHING_OPCODES = frozenset({"membar", "fence", "nanosleep"})
ACCESS_OPCODES = frozenset({"ld", "ldu", "st"}) | ATOMIC_OPCODES      # each may suspend (R_SLOW)

# An ordered vector access of 16 bytes made whole (_ordered_load/_ordered_store): CUB's decoupled look-back over
# 8-byte values stores and loads each tile's {status, value} as one st/ld.relaxed.v2.u64, and a GPU makes an aligned
# 16-byte access whole; elements made one by one, a CTA on the other OS thread read a new status beside an old
# value (a wrong prefix). With AVX an aligned 16-byte move is single-copy atomic on x86 (Intel SDM 3A 9.1.1, AMD
# APM 7.3.2), x86 orders it as TSO (acquire loads, release stores) and the compiler's fences keep it in place;
# else a 16-byte compare-and-swap (cmpxchg16b); on a machine with neither a kernel making such accesses is not built
# (its other paths serve).
# Both fault on a host address not 16-byte aligned (the daemon's end): such a one (a window of shared or local
# memory, which one OS thread reaches: the heap is page-aligned) takes two 8-byte accesses.
PRELUDE = r"""
#if defined(__x86_64__) && defined(__AVX__)
typedef uint64_t OV16 __attribute__((vector_size(16), aligned(16)));
#define OLD16_WHOLE(p, v) do { OV16 x_ = *(const volatile OV16 *)(p); memcpy((v), &x_, 16); } while (0)
#define OST16_WHOLE(p, v) do { OV16 x_; memcpy(&x_, (v), 16); *(volatile OV16 *)(p) = x_; } while (0)
#elif defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#define OLD16_WHOLE(p, v) do { unsigned __int128 x_ = __sync_val_compare_and_swap((unsigned __int128 *)(p), 0, 0); \
    memcpy((v), &x_, 16); } while (0)
#define OST16_WHOLE(p, v) do { unsigned __int128 o_ = 0, n_, r_; memcpy(&n_, (v), 16); \
    while ((r_ = __sync_val_compare_and_swap((unsigned __int128 *)(p), o_, n_)) != o_) o_ = r_; } while (0)
#endif
#ifdef OLD16_WHOLE
static inline void OLD16(const uint8_t *p, uint8_t *v) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__builtin_expect(((uintptr_t)p & 15) == 0, 1)) OLD16_WHOLE(p, v);
    else for (int k = 0; k < 16; k += 8) {
        uint64_t x = __atomic_load_n((const uint64_t *)(p + k), __ATOMIC_ACQUIRE); memcpy(v + k, &x, 8);
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
static inline void OST16(uint8_t *p, const uint8_t *v) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__builtin_expect(((uintptr_t)p & 15) == 0, 1)) OST16_WHOLE(p, v);
    else for (int k = 0; k < 16; k += 8) {
        uint64_t x; memcpy(&x, v + k, 8); __atomic_store_n((uint64_t *)(p + k), x, __ATOMIC_RELEASE);
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
#else       /* (a kernel using them does not build) */
#define OLD16(p, v) _Static_assert(0, "no whole 16-byte access (ctaatomic.PRELUDE)")
#define OST16(p, v) _Static_assert(0, "no whole 16-byte access (ctaatomic.PRELUDE)")
#endif
"""


def sharing_reason(kernel) -> str | None:
    """Why a kernel's CTAs talk in a way the C code does not serve (None: atomics, volatile or scoped accesses
    and fences only, or nothing): calls, traps, bulk copies, mbarriers, mmio accesses."""
    for b in kernel.blocks:
        for ins in b.instrs + ([b.term] if b.term is not None else []):
            if ins.opcode in SHARING_OPCODES - ATOMIC_OPCODES - NOTHING_OPCODES:
                return f"{ins.opcode} at line {ins.line}"
            if "mmio" in ins.mods:
                return f"an mmio access at line {ins.line}"
    return None


def handles(ins: ir.Instr) -> bool:
    """An atomic, a fence, or a load or store another CTA may see in order (volatile, relaxed, acquire, release,
    of memory other CTAs reach: cfg.shares_across_ctas; mmio ones keep the other paths)."""
    return ins.opcode in ATOMIC_OPCODES or ins.opcode in NOTHING_OPCODES or \
        (ins.opcode in ("ld", "ldu", "st") and "mmio" not in ins.mods and shares_across_ctas(ins))


def _order(ins: ir.Instr, default: str = "__ATOMIC_RELAXED") -> str:
    """The C11 order of an access's or atomic's PTX semantics (.volatile and none: relaxed; module docstring)."""
    mods = set(ins.mods)
    if "acq_rel" in mods:
        return "__ATOMIC_ACQ_REL"
    if "acquire" in mods:
        return "__ATOMIC_ACQUIRE"
    if "release" in mods:
        return "__ATOMIC_RELEASE"
    return default


def _fence(ins: ir.Instr) -> str:
    """membar/fence as a C fence: a CTA's threads run on one OS thread (cta scope: the compiler's order only);
    otherwise sequentially consistent (membar.gl/sys, fence.sc) or acquire-release (fence.acq_rel)."""
    if ins.opcode == "nanosleep":
        return ""
    mods = set(ins.mods)
    if "cta" in mods:
        return "__atomic_signal_fence(__ATOMIC_SEQ_CST);"
    return f"__atomic_thread_fence({'__ATOMIC_ACQ_REL' if 'acq_rel' in mods else '__ATOMIC_SEQ_CST'});"


def _ordered_load(e, ins: ir.Instr) -> None:
    """A volatile/relaxed/acquire ld of memory other CTAs reach: threadgen's checked load, each element read by
    one __atomic_load_n of its order, a vector of 2 to 16 bytes as a whole (PRELUDE), since another OS thread
    may run other CTAs meanwhile (run_talking)."""
    space, t, dsts, size, lt = load_form(e, ins)
    if size not in (1, 2, 4, 8):
        raise NoC
    ut, order = f"uint{8 * size}_t", _order(ins)
    decl, p, slow = threadgen._access(e, ins, space, size * len(dsts), False)
    xs = [e.fresh("tx") for _ in dsts]
    ask = threadgen._request(slow, size * len(dsts), False)
    total = size * len(dsts)
    if len(dsts) > 1 and total in (2, 4, 8, 16):       # (a vector made whole: PRELUDE; aligned to its size)
        whole = f"OLD16({p}, v);" if total == 16 else \
            f"{{ uint{8 * total}_t w = __atomic_load_n((uint{8 * total}_t *){p}, {order}); memcpy(v, &w, {total}); }}"
        fast = (f"{{ uint8_t v[{total}]; {whole} " +
                " ".join(f"memcpy(&{x}, v + {k * size}, {size});" for k, x in enumerate(xs)) + " }")
    else:
        fast = " ".join(f"{{ {ut} v = __atomic_load_n(({ut} *)({p} + {k * size}), {order}); "
                        f"memcpy(&{x}, &v, {size}); }}" for k, x in enumerate(xs))
    load = (f"if (__builtin_expect({p} != 0, 1)) {{ {fast}" +
            f" }} else {{ {e.suspend(R_SLOW, ask)} {p} = 0; " +
            " ".join(f"memcpy(&{x}, (uint8_t *)(st + {ST_VAL}) + {k * size}, {size});" for k, x in enumerate(xs)) +
            " }")
    body = [f"{ctype(lt)} {x} = 0;" for x in xs]
    if ins.guard is None:
        body += [decl, load]
    else:
        body.append(f"if ({'!' if ins.guard[1] else ''}{e.var(ins.guard[0])}) {{ {decl} {load} }}")
    e.lines.extend(body)
    for d, x in zip(dsts, xs):
        if not (isinstance(d, ir.Reg) and d.name == "_"):
            e.write(d, lt, x, ins)


def _ordered_store(e, ins: ir.Instr) -> None:
    """A volatile/relaxed/release st of memory other CTAs reach: each element one __atomic_store_n, a vector of 2
    to 16 bytes one store of the whole (PRELUDE)."""
    space, size, ct, vals = threadgen.store_form(e, ins)
    if size not in (1, 2, 4, 8):
        raise NoC
    order = _order(ins)
    decl, p, slow = threadgen._access(e, ins, space, size * len(vals), True)
    svs = [e.fresh("sv") for _ in vals]
    values = " ".join(f"{ct} {x} = {v};" for x, v in zip(svs, vals))
    total = size * len(vals)
    if len(vals) > 1 and total in (2, 4, 8, 16):       # (a vector made whole: PRELUDE; aligned to its size)
        fill_v = " ".join(f"memcpy(v + {k * size}, &{x}, {size});" for k, x in enumerate(svs))
        whole = "OST16(" + p + ", v);" if total == 16 else \
            f"{{ uint{8 * total}_t w; memcpy(&w, v, {total}); __atomic_store_n((uint{8 * total}_t *){p}, w, {order}); }}"
        fast = f"{{ uint8_t v[{total}]; {fill_v} {whole} }}"
    else:
        fast = " ".join(f"__atomic_store_n(({ct} *)({p} + {k * size}), {x}, {order});" for k, x in enumerate(svs))
    fill = " ".join(f"memcpy((uint8_t *)(st + {ST_VAL}) + {k * size}, &{x}, {size});" for k, x in enumerate(svs))
    ask = threadgen._request(slow, size * len(vals), True) + " " + fill
    store = (f"{{ {values} if (__builtin_expect({p} != 0, 1)) {{ {fast} }} else {{ {e.suspend(R_SLOW, ask)} "
             f"{p} = 0; }} }}")
    if ins.guard is None:
        e.lines += [decl, store]
    else:
        e.lines.append(f"if ({'!' if ins.guard[1] else ''}{e.var(ins.guard[0])}) {{ {decl} {store} }}")


def emit(e, ins: ir.Instr) -> None:
    """C for an atom/red (a checked read-modify-write; module docstring), a fence, or an ordered ld/st."""
    if ins.opcode in NOTHING_OPCODES:
        fence = _fence(ins)
        if fence:
            e.lines.append(fence)
        return
    if ins.opcode in ("ld", "ldu"):
        return _ordered_load(e, ins)
    if ins.opcode == "st":
        return _ordered_store(e, ins)
    try:
        space, op, t = _atom_mods(ins)
    except CudaError:
        raise NoC from None
    if t in HALF_ADD or (op == "add" and t in ("f32", "f64")):
        # (float adds: which NaN operand's payload a sum of two NaNs keeps is the operand order of the machine add;
        # the C compiler may swap a commutative add's operands where NumPy's `old + b` keeps the old value's, so
        # the two paths stored different NaNs (review7): the other paths serve them)
        raise NoC
    w = BITS[t]
    size, ut = w // 8, f"uint{w}_t"
    decl, p, slow = threadgen._access(e, ins, space, size, True)
    b = _operand(e, ins.srcs[1], t, ins)
    c = _operand(e, ins.srcs[2], t, ins) if op == "cas" else None
    ob, nb, q = e.fresh("ao"), e.fresh("an"), e.fresh("aq")
    ask = threadgen._request(slow, size, True).replace(f"st[{ST_WRITE}] = 1;", f"st[{ST_WRITE}] = {W_ATOMIC};")
    # the slow path's address is used once (the pointer stays 0: a later access through it checks again); one
    # copy of the read-modify-write (CUB's onesweep kernel has 92 atomics, each in two copies of its loop)
    code = (f"{decl} uint8_t *{q} = {p}; if (__builtin_expect(!{q}, 0)) {{ "
            f"{e.suspend(R_SLOW, ask)} {p} = 0; {q} = (uint8_t *)(uintptr_t)st[{ST_VAL}]; }} ")
    if space == "shared":          # (the CTA's own memory: one OS thread runs the CTA)
        code += (f"memcpy(&{ob}, {q}, {size}); {ut} {nb} = {_combine(op, t, ob, b, c)}; "
                 f"memcpy({q}, &{nb}, {size});")
    else:
        code += _shared_rmw(op, t, f"(({ut} *){q})", ob, nb, b, c, _order(ins))
    e.lines.append(f"{ut} {ob} = 0;")
    if ins.guard is None:
        e.lines.append(code)
    else:
        e.lines.append(f"if ({'!' if ins.guard[1] else ''}{e.var(ins.guard[0])}) {{ {code} }}")
    if ins.opcode == "atom" and ins.dsts:
        old = f"F{w}({ob})" if t in ("f32", "f64") else f"({ctype(t)}){ob}"
        e.write(ins.dsts[0], t, old, ins)


def _operand(e, o, t: str, ins: ir.Instr) -> str:
    """An atomic's operand as the bits of its type (ops/atomic: the lanes' operands cast to the memory's type)."""
    v = e.src(o, t, ins)
    w = BITS[t]
    return f"B{w}({v})" if t in ("f32", "f64") else f"(uint{w}_t)({v})"


_FETCH = {"add": "__atomic_fetch_add", "and": "__atomic_fetch_and", "or": "__atomic_fetch_or",
          "xor": "__atomic_fetch_xor", "exch": "__atomic_exchange_n"}


def _shared_rmw(op: str, t: str, q: str, ob: str, nb: str, b: str, c: str | None, order: str) -> str:
    """A read-modify-write of memory other CTAs (on another OS thread: run_talking) reach, as one atomic
    instruction: a fetch-op, or a compare-and-swap loop of _combine's value (min, max, inc, dec); the old value
    into ob."""
    fail = "__ATOMIC_ACQUIRE" if order in ("__ATOMIC_ACQUIRE", "__ATOMIC_ACQ_REL") else "__ATOMIC_RELAXED"
    if op in _FETCH:
        return f"{ob} = {_FETCH[op]}({q}, {b}, {order});"
    if op == "cas":
        return f"{ob} = {b}; __atomic_compare_exchange_n({q}, &{ob}, {c}, 0, {order}, {fail});"
    ut = f"uint{BITS[t]}_t"
    return (f"{ob} = __atomic_load_n({q}, __ATOMIC_RELAXED); {ut} {nb}; "
            f"do {{ {nb} = {_combine(op, t, ob, b, c)}; }} "
            f"while (!__atomic_compare_exchange_n({q}, &{ob}, {nb}, 1, {order}, {fail}));")


def _combine(op: str, t: str, ob: str, b: str, c: str | None) -> str:
    """ops/atomic.combine in C, on the bits of the old value and the operands (uint<w>_t)."""
    w = BITS[t]
    ut = f"uint{w}_t"
    if op == "add":
        return f"({ut})({ob} + {b})"
    if op in ("min", "max"):
        st = f"int{w}_t" if t in SIGNED else ut
        cmp = "<" if op == "min" else ">"
        return f"(({st}){ob} {cmp} ({st}){b} ? {ob} : {b})"
    if op in ("and", "or", "xor"):
        return f"({ut})({ob} {dict(zip(('and', 'or', 'xor'), '&|^'))[op]} {b})"
    if op == "exch":
        return b
    if op == "cas":
        return f"({ob} == {b} ? {c} : {ob})"
    if op == "inc":
        return f"({ob} >= {b} ? ({ut})0 : ({ut})({ob} + 1u))"
    if op == "dec":
        return f"(({ob} == 0 || {ob} > {b}) ? {b} : ({ut})({ob} - 1u))"
    raise NoC


# ---------------------------------------------------------------------------------------------- set aside
MERGE_GAP = 4096    # bytes between a CTA's arrays copied with them when it is set aside (one copy less costs more)


@dataclass
class CtaRegisters:
    """Where a CTA's state lies in ctagen's register file: (byte offset, bytes per thread) of each array (the
    threads' PCs, the threads at the block run, the threads' states, bar.red's sites and predicates, then every
    register's), and (byte offset, bytes) of what it holds once per CTA."""
    nbytes: int
    arrays: list[tuple[int, int]] = field(default_factory=list)
    talking: bool = False         # the kernel's CTAs talk (not Kernel.independent_ctas): run_talking runs them
    instructions: int = 0         # the kernel's instructions (run_talking's slice: module docstring)
    once: list[tuple[int, int]] = field(default_factory=list)
    _merged: dict[int, list[tuple[int, int]]] = field(default_factory=dict, repr=False, compare=False)

    def _spans(self, cs: int) -> list[tuple[int, int]]:
        """(byte offset, bytes) of what a CTA of cs threads holds, neighbours less than MERGE_GAP bytes apart as one
        span with the bytes between (arrays' padding, lanes past cs: nothing a CTA reads before writing it): CUB's
        onesweep has 251 arrays 64 bytes apart, whose copies one by one cost 0.2 ms a set-aside in NumPy's calls."""
        spans = self._merged.get(cs)
        if spans is None:
            spans = []
            for o, n in sorted([(o, w * cs) for o, w in self.arrays] + self.once):
                if spans and o - (spans[-1][0] + spans[-1][1]) < MERGE_GAP:
                    start = spans[-1][0]
                    spans[-1] = (start, max(spans[-1][1], o + n - start))
                else:
                    spans.append((o, n))
            self._merged[cs] = spans
        return spans

    def save(self, rf: np.ndarray, cs: int) -> list[np.ndarray]:
        return [rf[o:o + n].copy() for o, n in self._spans(cs)]

    def restore(self, rf: np.ndarray, cs: int, saved: list[np.ndarray]) -> None:
        for (o, n), a in zip(self._spans(cs), saved):
            rf[o:o + n] = a


def run_talking(code, S, L, T: int, st: np.ndarray, ctx, txp: int, stp: int) -> None:
    """The chunk's CTAs in ascending order on EmuLimits.talk_threads threads (one: one after the other), one set aside
    after its slice while others wait and resumed in turn (module docstring); faults, bounds and accesses served by
    Python as ThreadCode._run_chunk has them."""
    threads = min(L.limits.talk_threads, T // S.ctasize)
    if threads <= 1:
        _run_alone(code, S, L, T, st, ctx, txp, stp)
    else:
        _Talk(code, S, L, T, threads, txp).run(st)


def _slice_ticks(code, cs: int) -> int:
    """R_TICK suspensions (each code.tick_scale * TICK_EVERY thread-instructions) a CTA runs before it may be set
    aside: SLICE_TICKS * TICK_EVERY thread-instructions, and the kernel's instructions once a thread (module
    docstring), whatever the tick."""
    every = threadgen.TICK_EVERY
    return -(-max(SLICE_TICKS * every, code.registers.instructions * cs) // (every * code.tick_scale))


def _run_alone(code, S, L, T: int, st: np.ndarray, ctx, txp: int, stp: int) -> None:
    """One thread: the CTAs one after the other (talk_threads 1: the one-thread order, reproducible)."""
    cs = S.ctasize
    ncta = T // cs
    words = code.state
    rf = st[words:].view(np.uint8)
    rfp = stp + 8 * words
    queue = deque(range(ncta))
    slice_ticks = _slice_ticks(code, cs)
    aside: dict[int, tuple[np.ndarray, list[np.ndarray]]] = {}
    untold = 0                           # thread-instructions run and not yet told to the launch (< T)
    while queue:
        cl = queue.popleft()
        if cl in aside:
            words_saved, regs = aside.pop(cl)
            st[:words] = words_saved
            code.registers.restore(rf, cs, regs)
        else:
            st[:words] = 0
        ran = int(st[ST_CNT])
        ticks = 0
        while True:
            rc = code.fn(cl * cs, (cl + 1) * cs, ctx, txp, stp, rfp)
            cnt = int(st[ST_CNT])
            untold += cnt - ran
            ran = cnt
            steps, untold = divmod(untold, T)
            if steps > 0 or rc != R_SLOW:
                L.account(code.name, steps)
            if rc == R_DONE:
                break
            if rc == R_SLOW:
                code.suspended += 1
                threadgen._slow_access(S, int(st[threadgen.ST_I]), int(st[threadgen.ST_KIND]), int(st[ST_WRITE]),
                                       int(st[threadgen.ST_ADDR]), int(st[threadgen.ST_SIZE]), stp + 8 * ST_VAL)
                ctx = S.memctx()
            elif rc == R_TICK:
                ticks += 1
                if ticks >= slice_ticks and queue and int(st[ST_RESUME]) == code.res_dispatch:
                    aside[cl] = (st[:words].copy(), code.registers.save(rf, cs))
                    code.set_aside += 1
                    queue.append(cl)
                    break
            else:
                raise CudaError("cudaErrorLaunchFailure", f"{code.name}: native code returned {rc}")


@dataclass(slots=True)
class _Told:
    """What one talking thread ran and has not told the launch yet (_Talk: Launch.account)."""
    lanes: int = 0                # thread-instructions short of a whole step (< T)
    steps: int = 0                # steps (T thread-instructions each)


class _Talk:
    """A chunk's talking CTAs on several threads: this one and crew helpers (runtime/crew.py), each with a state
    array of its own (the chunk keeps the helpers': Chunk.talk_states), taking CTAs from one queue in ascending
    order; a CTA set aside goes to the queue's end with its saved state, and whichever thread is free resumes it
    on its own arrays. The first failure stops the others at their next return from the C code (each tick at the
    latest); the lowest CTA's failure is raised. Accounting (Launch.account: the budget, deadline, cancellation,
    the session's turn) is made under one lock, so one thread pausing for the turn pauses the other at its next
    tick; accesses served by Python under another (one at a time, as on one thread). A thread tells the launch at
    every tick, and at a CTA's end or an access only once it ran a tick's worth of steps since it last told (or
    the launch's check_at passed: its deadline, another session waiting, a shared device's next check; or the
    session's client left: the launch's cancel event, read at every return), so every
    bound holds within a tick's thread-instructions a thread, as at the ticks (_Told)."""

    def __init__(self, code, S, L, T: int, threads: int, txp: int) -> None:
        self.code, self.S, self.L, self.T = code, S, L, T
        self.cs = S.ctasize
        self.threads = threads
        self.queue = deque(range(T // self.cs))
        self.aside: dict[int, tuple[np.ndarray, list[np.ndarray]]] = {}
        self.lock = threading.Lock()
        self.ended = threading.Condition(self.lock)
        self.account_lock = threading.Lock()
        self.slow_lock = threading.Lock()
        self.failed: list[tuple[int, BaseException]] = []
        self.running = 0
        self.slice_ticks = _slice_ticks(code, self.cs)
        self.due = max(1, threadgen.TICK_EVERY * code.tick_scale // T)     # steps a thread tells at least this often
        self.txp = txp
        self.spare: list[np.ndarray] = []

    def run(self, st: np.ndarray) -> None:
        S = self.S
        kept = getattr(S, "talk_states", None)
        if kept is None or len(kept) < self.threads - 1 or kept[0].shape != st.shape:
            kept = S.talk_states = [np.zeros_like(st) for _ in range(self.threads - 1)]
        self.spare = list(kept[:self.threads - 1])
        self.L.offer_helpers(self.work, self.threads - 1)
        self.work(st)
        with self.lock:
            while self.running:
                self.ended.wait()
        if self.failed:
            raise min(self.failed, key=lambda f: f[0])[1]

    def work(self, st: np.ndarray | None = None) -> None:
        """Take CTAs until none is left (or one failed); st: this thread's state array (None: a helper's spare)."""
        took = False
        helper = st is None
        cl = -1
        told = _Told()
        arrays = None
        try:
            while True:
                with self.lock:
                    if self.failed or not self.queue:
                        break
                    cl = self.queue.popleft()
                    if not took:
                        took = True
                        self.running += 1
                        if st is None:
                            st = self.spare.pop()
                            st.fill(0)
                    saved = self.aside.pop(cl, None)
                    self.code.helped += helper
                if arrays is None:            # (this thread's state array, its register file and their addresses:
                    words = self.code.state   # once a launch, not once a CTA: st.ctypes alone costs 2-3 us)
                    stp = st.ctypes.data
                    arrays = (st, st[words:].view(np.uint8), stp, stp + 8 * words)
                self._cta(arrays, cl, saved, told)
            if told.steps and not self.failed:    # (what it did not tell yet: the budget and deadline checked)
                with self.account_lock:
                    self.L.account(self.code.name, told.steps)
        except BaseException as e:  # noqa: BLE001 - the launch's failure (the lowest CTA's), raised by run
            with self.lock:
                self.failed.append((cl, e))
        finally:
            if took:
                with self.lock:
                    self.running -= 1
                    if not self.running:
                        self.ended.notify_all()

    def _cta(self, arrays: tuple, cl: int, saved, told: "_Told") -> None:
        """CTA cl on this thread's state array (arrays: it, its register file's bytes, their addresses) until it is
        done, set aside, or another thread failed."""
        code, S, L, T, cs = self.code, self.S, self.L, self.T, self.cs
        st, rf, stp, rfp = arrays
        words = code.state
        if saved is not None:
            st[:words] = saved[0]
            code.registers.restore(rf, cs, saved[1])
        else:
            st[:words] = 0
        with self.slow_lock:
            # (the MemCtx this thread's C code reads, kept alive while it runs: another thread's slow access may
            # make S a new one)
            ctx, held = S.memctx(), [S._memctx]
        ran = int(st[ST_CNT])
        ticks = 0
        fn, lo, hi, txp, failed, due, clock = code.fn, cl * cs, (cl + 1) * cs, self.txp, self.failed, self.due, \
            time.monotonic
        gone = L.cancel.is_set if L.cancel is not None else bool    # (a client that left: told at the next return)
        while True:
            if failed:
                return
            rc = fn(lo, hi, ctx, txp, stp, rfp)
            cnt = int(st[ST_CNT])
            steps, told.lanes = divmod(told.lanes + cnt - ran, T)
            ran = cnt
            steps += told.steps
            if rc == R_TICK or steps >= due or clock() > L.check_at or gone():
                told.steps = 0
                with self.account_lock:
                    L.account(code.name, steps)
            else:
                told.steps = steps
            if rc == R_DONE:
                return
            if rc == R_SLOW:
                with self.slow_lock:
                    code.suspended += 1
                    threadgen._slow_access(S, int(st[threadgen.ST_I]), int(st[threadgen.ST_KIND]),
                                           int(st[ST_WRITE]), int(st[threadgen.ST_ADDR]),
                                           int(st[threadgen.ST_SIZE]), stp + 8 * ST_VAL)
                    ctx, held[0] = S.memctx(), S._memctx
            elif rc == R_TICK:
                ticks += 1
                if ticks >= self.slice_ticks and int(st[ST_RESUME]) == code.res_dispatch:
                    with self.lock:
                        if self.queue:
                            self.aside[cl] = (st[:words].copy(), code.registers.save(rf, cs))
                            code.set_aside += 1
                            self.queue.append(cl)
                            return
            else:
                raise CudaError("cudaErrorLaunchFailure", f"{code.name}: native code returned {rc}")
