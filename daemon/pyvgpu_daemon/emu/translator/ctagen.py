"""CTA-at-a-time native code ("stage 3"): a kernel with `__syncthreads()` as one C function that runs a CTA at a
time, its threads inner.

The lockstep interpreter passes every register through arrays of a whole chunk (64K lanes: larger than L2) at every
instruction; threadgen.py's thread mode runs a thread at a time and saves and restores its registers at every
barrier. Both cost 3-6 ns per thread and phase on scan_batches' kernels (bench/README.md, "Issue 19 part 6"). Here
a CTA's registers are arrays of ctasize elements (structure of arrays, which stay in L1/L2), and the CTA runs as
the lockstep scheduler runs a chunk (runtime/chunk.py, runtime/barriers.py), restricted to its own threads:
- each thread has a PC (its block) and a state (running, parked at a barrier, exited); a step runs the block with
  the lowest PC among the running threads, for the threads at it (SIMT), then their terminator sets their PCs;
- when no thread runs, the parked ones are released (`bar.sync 0` for all threads: the plain barrier, which an
  exited thread counts as having reached); when none is parked either, the CTA is done;
- while every thread of the CTA runs at one PC (converged), no PC array is read or written.
Restricted to one CTA, the lockstep chunk's steps are exactly these (each of its steps runs, for each CTA, that
CTA's lowest PC or nothing), except that a chunk's starvation escape (runtime/chunk.py: after a long run of
backward diverged steps the highest PC runs once) is counted over the chunk: a kernel whose threads exchange data
without a barrier under divergence that long could see another order (a race, undefined on a GPU).

Within a block the instructions run as loops over the threads at it. Memory keeps the lockstep order: a loop holds
at most one store, or only loads, of the memory threads share (global, shared, generic), so every store is made
and every load reads memory as the lockstep NumPy code's instruction-after-instruction, lane-after-lane order has
it, volatile shared accesses included (warp-synchronous code gets the lockstep answer, which is a GPU warp's).
ALU instructions (cgen.py's C forms, which a differential test ties to the NumPy ops) and accesses private to a
thread (local memory, parameters, constants) join any loop. A loop of ALU instructions only is emitted twice, a
converged copy over 0..ctasize-1 (vectorised by the C compiler) and one over the list of the threads at the block; a
loop with accesses once, over the threads at the block or all of them (its suspension sites are most of a large
kernel's C), and one whose accesses are all unguarded shared, global or kernel-parameter ones gets a second copy,
converged, without suspensions, that checks them without a branch (_fast_code: shared offsets against the CTA's
window, global addresses against the allocation their pointer used last, a global store's loop checked in a first
pass and stored in a second; a bad access runs the loop again with suspensions, which serves it or raises its
fault). A guarded branch of a converged CTA counts its guard in a vectorised loop first and writes PCs only when
the CTA splits. Registers are arrays at constant offsets from one base pointer (CtaEmitter); one used in a single
loop only and never across a suspension is a C local (_locals); one every thread of the CTA holds alike (its
position, parameters and what the first block computes from them only: _uniform) is one element, kept once.

Loads and stores are threadgen.py's (every access checked as runtime/spaces.py checks it; one the C code cannot
serve suspends with R_SLOW, Python serves it or raises its error, and the function resumes after it, inside the
loop: nothing is run twice). Registers are in memory Python owns (threadgen.ThreadCode.run's barrier array), so a
suspension saves only the loop's position. Before each step the function counts the thread-instructions it ran
and suspends with R_TICK every CtaCode.tick_scale * threadgen.TICK_EVERY of them, so the launch's budget, deadline,
cancellation and fair-sharing turn apply as for the thread code (ThreadCode._run_chunk). PYVGPU_EMU_CTAGEN=0 turns
it off.

A large kernel (over LARGE_INSTRUCTIONS: CUB's radix-sort kernels) is emitted for the C compiler's time: each loop
once (no converged copy, no copy without suspensions: at -O1 neither paid for itself; but a loop of ALU
instructions with vector forms gets converged vector steps written out, ctavec.py, which -O1 does not make), its
guarded branches as calls of BRANCH, its blocks in region functions (ctasplit.py), compiled at the optimisation level its size gets
(OPT_BY_SIZE); one whose compile-time estimate exceeds MAX_COMPILE_S keeps the other paths.

Eligible (eligible_reason): threadgen's rules but its warp-synchronous one (the lockstep order is kept here), that
is no call, or barrier other than `bar.sync 0` or `bar.red` on barrier 0 for all threads unguarded; every instruction
with a C form. Atomics, volatile and scoped accesses and fences are ctaatomic.py's (an atomic is a loop's one store;
CTAs that talk run one after the other, one that waits set aside). bar.red reduces at once when the CTA is
converged; diverged, a thread parks with its site and predicate, and the release reduces each site's parked threads
(runtime/barriers.py's rule). Warp operations (shfl, vote, redux, match, activemask, bar.warp.sync; not wmma/mma)
are ctawarp.py's: a thread waiting at one is parked (T_WAIT), and when no thread of the CTA runs the waiting ones
are woken first (the lockstep chunk's `forced` release), then barriers.
"""
from __future__ import annotations

import dataclasses

from pyvgpu_daemon.errors import CudaError

from .. import native
from ..ptx import ir
from ..ptx.predefined import SPECIAL_REGISTERS
from .cfg import SHARING_MODS
from .cgen import PURE_OPCODES, NoC, address_expr, ctype, load_form, utype
from .liveness import AnyRegister, reads_writes
from . import control, ctaaffine, ctaatomic, ctaregs, ctarun, ctasplit, ctavec, ctawarp, threadgen
from .ctaatomic import ACCESS_OPCODES
from .threadgen import (K_SHARED, PRELUDE_T, R_DONE, R_TICK, ST_CNT, ST_CTA, ST_I, ST_LIC, ST_NARR, ST_PH, ST_REGS,
                        ST_RESUME, ThreadCode, ThreadEmitter, _SHAPE, _shared_space, _special_c)

# A shared access of the CTA whose shared memory starts at sb (runtime/spaces.py's check, as threadgen's TS: the
# offset inside the CTA's window, aligned to the access size); the CTA's base is read once per CTA, not per access.
PRELUDE_C = PRELUDE_T + f"""
static inline uint8_t *TSC(uint8_t *sb, int64_t lim, uint64_t off, uint64_t s, int64_t *k, uint64_t *o) {{
    *k = {K_SHARED}; *o = off;
    int64_t x = (int64_t)off;
    return (x < 0 || x > lim - (int64_t)s || (x & (int64_t)(s - 1))) ? 0 : sb + x;
}}
"""
# A guarded branch's terminator in a large kernel (kernel_source): the guard g[lic * gi] (gi 0: kept once per CTA),
# negated where neg; the block the CTA goes on at when it stays converged, else -1 (each thread's PC written)
PRELUDE_C += """
static __attribute__((noinline)) int64_t BRANCH(const uint8_t *g, int64_t gi, int neg, int64_t cs, int64_t conv,
        int64_t n, const int32_t *act, int32_t *pc, int32_t tgt, int32_t nxt) {
    int64_t tk = 0, lic;
    if (conv) {
        uint32_t tu = 0;
        for (lic = 0; lic < cs; lic++) tu += ((neg ? !g[lic * gi] : g[lic * gi]) != 0);
        if (tu == 0 || tu == cs) return tu ? tgt : nxt;
    }
    for (int64_t j = 0; j < n; j++) {
        lic = conv ? j : act[j];
        int64_t y = neg ? !g[lic * gi] : g[lic * gi];
        pc[lic] = y ? tgt : nxt; tk += y;
    }
    if (conv && (tk == 0 || tk == n)) return tk ? tgt : nxt;
    return -1;
}
"""
FLAGS = ("-mtune=generic",)      # (threadgen.FLAGS: the same reason; the converged ALU loops still vectorise)




@dataclasses.dataclass(frozen=True)
class OptLevel:
    """The optimisation level of sources of at least `size` bytes, and the compiler's seconds per MB of them there
    (measured on the 2-core machine, idle: bench/emu_stage3_compile_bench.py, bench/README.md "twelfth step")."""
    size: int
    flags: tuple[str, ...]
    s_per_mb: float
    # the level used where the compiler refuses `flags` (native.accepts): its -O level alone, at that level's cost
    fallback: OptLevel | None = None


# -O1's passes that cost a large source's build CPU and not its launches: with them off CUB's onesweep (2.4 MB) builds
# in half the compiler CPU and runs a launch as fast (bench/README.md, "fifteenth step: onesweep's build CPU"). GCC's
# time report spreads -O1 over many passes (dominator opts with their jump threading, CCP, FRE, alias walking,
# register allocation's regions); turned off together they halve it. Kept on, as they pay a launch back (7 % slower
# without them): DSE, copy propagation, if-conversion, loop invariant motion, branch probabilities and block order.
# (Optimisation passes only: the C's results are the same with or without them.)
LEAN_O1 = ("-O1", "-fno-tree-dominator-opts", "-fno-tree-ccp", "-fno-tree-fre", "-fno-tree-pta", "-fno-tree-sink",
           "-fno-ivopts", "-fno-tree-forwprop", "-fno-tree-reassoc", "-fno-tree-slsr", "-fno-tree-ch",
           "-fno-tree-loop-optimize", "-fno-move-loop-invariants", "-fno-ipa-modref", "-fno-ipa-pure-const",
           "-fno-ipa-reference", "-fno-sched-interblock", "-fno-shrink-wrap", "-fno-split-wide-types",
           "-fno-asynchronous-unwind-tables", "-fira-region=one")
# Largest first. LEAN_O1 for CUB's onesweep (2.4 MB): 7.3 s of compiler CPU against -O1's 15.0 s (both at load 11),
# -O2's 35 s (1.3x slower a launch); and from 128 KB: CUB's histogram (0.28 MB in 4 units) 0.5 s against -O2's 1.5 s
# (2.9 s at -O3), as fast a launch (0.017 s), 100 launches in radix_sort_thrust (bench/README.md, "sixteenth step").
# (native.FLAGS has -O3: a later -O wins.) A compiler that refuses LEAN_O1's -f flags builds at the level before it:
# -O1 (7.0 s/MB, "fifteenth step: onesweep's build CPU") from 1 MB, -O2 (15.0) from 128 KB.
OPT_BY_SIZE = (OptLevel(1 << 20, LEAN_O1, 3.0, OptLevel(1 << 20, ("-O1",), 7.0)),
               OptLevel(128 << 10, LEAN_O1, 3.0, OptLevel(128 << 10, ("-O2",), 15.0)), OptLevel(0, (), 40.0))
# A kernel of at least QUICK_MIN_INSTRS PTX instructions and blocks (the launch policy's count: runtime/launch.py) whose
# library is not cached is built twice in the background (translator/kernel.py): first at QUICK's level, its launches
# running that while the build at its size's level (OPT_BY_SIZE: LEAN_O1 there) runs, which alone stays cached.
# CUB's onesweep (10,549): -Og 5.7 s of compiler CPU, 0.092 s a launch against -O1's 0.089 s (LEAN_O1's as -O1's) and
# the NumPy code's 0.42 s (-O0: 3.1 s, 0.29 s a launch); a program that launches it often enough pays for the full
# build later, perhaps in a later run (kernel.py: the full build's rent; bench/README.md, "fourteenth step:
# radix_sort_thrust cold" and "fifteenth step: tier policy").
QUICK = OptLevel(0, ("-Og",), 2.4)
QUICK_MIN_INSTRS = 3000
# ... and whose full level compiles in at least 1 / QUICK_MAX_SHARE times the quick level's time: a quick tier that
# costs about what the full build does only delays the full code by its own build (LEAN_O1's 3.0 s/MB against -Og's
# 2.4: onesweep builds at LEAN_O1 at once, and runs 0.080 s a launch from the first native launch on instead of -Og's
# 0.085-0.092; bench/README.md, "fifteenth step: this stop as a whole").
QUICK_MAX_SHARE = 0.5
# A kernel whose source's compile-time estimate is larger keeps the other paths (the build would hold native.py's
# build lock that long in every daemon run that loads it: a failed or slow build is not remembered across runs)
MAX_COMPILE_S = 60.0


def _size(source: str | list[str]) -> int:
    return len(source) if isinstance(source, str) else sum(map(len, source))


def opt_level(source: str | list[str]) -> OptLevel:
    """The level a source (or translation units: their bytes together) is built at: its size's (OPT_BY_SIZE), or
    where the compiler refuses that level's flags (native.accepts: LEAN_O1's are GCC 12's, and -fno-ipa-modref an
    error to GCC before 11 or to clang: every build at that level failed, and was remembered) its fallback, the -O
    level alone, with that level's cost: the estimates (compile_seconds, MAX_COMPILE_S, QUICK_MAX_SHARE) are of the
    build that runs."""
    level = next(o for o in OPT_BY_SIZE if _size(source) >= o.size)
    if len(level.flags) > 1 and not native.accepts(level.flags):
        return level.fallback or dataclasses.replace(level, flags=tuple(f for f in level.flags
                                                                        if f.startswith("-O"))[-1:])
    return level


def flags(source: str | list[str]) -> tuple[str, ...]:
    """The compiler's extra flags for a kernel's source: FLAGS and its level's (opt_level)."""
    return FLAGS + opt_level(source).flags


def quick_flags(instrs: int, source: str | list[str] | None = None) -> tuple[str, ...] | None:
    """The compiler's extra flags of a quick tier for a kernel of `instrs` instructions and blocks (and, given, its
    source or translation units), or None (none: its build at its size's level is short enough, or not much longer
    than the quick tier's)."""
    if instrs < QUICK_MIN_INSTRS:
        return None
    if source is not None and QUICK.s_per_mb > QUICK_MAX_SHARE * opt_level(source).s_per_mb:
        return None
    return FLAGS + QUICK.flags


# The state array's words (threadgen's ST_* where they mean the same; the others reused): the loop position j in
# ST_LIC, the CTA in the chunk in ST_CTA, the block run (P) in ST_PH, the threads at it (n) in ST_NARR, converged
# in ST_REGS.
ST_J, ST_CL, ST_P, ST_N, ST_CONV = ST_LIC, ST_CTA, ST_PH, ST_NARR, ST_REGS
ST_FORCED = ST_REGS + 1          # the CTA's `forced` flag (ctawarp.py): in the state, which a CTA set aside keeps
STATE_WORDS = ST_REGS + 2
RES_DISPATCH = 1 << 30           # a resume site: the step that was about to run (after an R_TICK)
# a thread's state in the CTA's ts array
T_RUN, T_BAR, T_EXIT, T_WAIT = 0, 1, 2, 3      # (T_WAIT: parked at a warp operation, ctawarp.py)
# The register file (bytes): the threads' PCs, the list of the threads at the block run, the threads' states, the
# bar.red site each parked thread waits at (0: a plain barrier) and its predicate, then one array per register
# (CtaEmitter.array); sized for the kernel's largest CTA (cta_cap), so that every offset is a constant
MAX_CTA = 1024
RF_PC = 0


@dataclasses.dataclass(frozen=True)
class RegisterFile:
    """The fixed arrays' byte offsets in the register file of a kernel whose CTAs have at most `cap` threads (each
    array 64 bytes past the end of the last: see CtaEmitter.array)."""
    cap: int

    @property
    def act(self) -> int:
        return 4 * self.cap + 64

    @property
    def ts(self) -> int:
        return 8 * self.cap + 128

    @property
    def rsite(self) -> int:
        return 9 * self.cap + 192

    @property
    def rpred(self) -> int:
        return 10 * self.cap + 256

    @property
    def fixed(self) -> int:
        """Where the registers' arrays start."""
        return 11 * self.cap + 320


def cta_cap(kernel) -> int:
    """The most threads a CTA of the kernel has: its .maxntid / .reqntid (a launch with more is refused:
    limits.check_launch) or MAX_CTA, rounded up to 64 (every array stays aligned to 64 bytes). A register array
    holds that many elements: CUB's onesweep kernel (.maxntid 256, 3,100 register arrays) touched a 12 MB register
    file with a 4 KB stride between arrays at 1024 (bench/README.md, "thirteenth step")."""
    n = MAX_CTA
    if getattr(kernel, "maxntid", None):
        n = 1
        for d in kernel.maxntid:
            n *= d
    return min(MAX_CTA, -(-max(n, 1) // 64) * 64)


# A kernel of more instructions is "large" (kernel_source: its loops without memory accesses and with them emitted
# once, guarded branches as calls of BRANCH): CUB's histogram kernel (692) and onesweep kernel (8,629) are
LARGE_INSTRUCTIONS = 400
PRELUDE_C += ctawarp.prelude({"T_RUN": T_RUN, "T_WAIT": T_WAIT})
PRELUDE_C += ctaatomic.PRELUDE
PRELUDE_C += ctavec.PRELUDE
# A large kernel's converged ALU loops as vector code (ctavec.py; False: scalar loops only, as before)
VECTOR_ALU = True
# The scheduler's list of the running threads at block p of a diverged CTA (act: ascending, as the scalar loop
# makes it), their count returned. With AVX-512 16 threads a step: a mask of those at p compressed into their
# indices (vpcompressd, register form: its memory form is slow on AMD's Zen 4), stored whole at act + n (below
# act + cs, since n <= lic); the scalar loop the rest. GCC's builtins, not <immintrin.h>: that header adds about
# 0.2 s of CPU to every translation unit's build; another compiler takes the scalar loop. addOffsets made the list
# three times per CTA, 256 threads one by one: about a fifth of its function (bench/README.md, "thirteenth step").
PRELUDE_C += f"""
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 7 && defined(__AVX512F__) && defined(__AVX512BW__) && \\
    defined(__AVX512VL__)
#define ACTS_AVX512 1
typedef int acts_v16si __attribute__((vector_size(64)));
typedef char acts_v16qi __attribute__((vector_size(16)));
#endif
static inline int64_t ACTS(const uint8_t *restrict ts, const int32_t *restrict pc, int32_t p, int64_t cs,
        int32_t *restrict act) {{
    int64_t n = 0, lic = 0;
#ifdef ACTS_AVX512
    acts_v16si idx = {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}, v, c;
    const acts_v16si pv = {{p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p}}, zero = {{0}};
    const acts_v16qi run = {{{", ".join([str(T_RUN)] * 16)}}};
    acts_v16qi t;
    for (; lic + 16 <= cs; lic += 16) {{
        memcpy(&v, pc + lic, 64); memcpy(&t, ts + lic, 16);
        const unsigned m = (unsigned)__builtin_ia32_pcmpeqd512_mask(v, pv, 0xFFFF) &
            (unsigned)__builtin_ia32_pcmpeqb128_mask(t, run, 0xFFFF);
        c = __builtin_ia32_compresssi512_mask(idx, zero, (uint16_t)m);
        memcpy(act + n, &c, 64);
        n += __builtin_popcount(m);
        idx += 16;
    }}
#endif
    for (; lic < cs; lic++) if (ts[lic] == {T_RUN} && pc[lic] == p) act[n++] = (int32_t)lic;
    return n;
}}
"""

# The scheduler's passes over a CTA (kernel_source's `sched`): the lowest PC of its running threads (INT32_MAX: none)
# with the threads at a barrier and those parked at a warp operation counted (SLOW), then the running threads at
# that PC (SCOUNT). 8 threads a step in GCC's generic vectors (each compare -1 or 0 a lane): -O1 does not vectorise
# the loops, and onesweep's diverged steps spent 5 % of its native time in them (bench/README.md, "fourteenth step");
# another compiler, and the last cs % 8 threads, the scalar loop.
PRELUDE_C += f"""
#if defined(__GNUC__) && (__GNUC__ >= 9 || defined(__clang__))
#define SCHED_VEC 1
typedef int32_t sched_v8si __attribute__((vector_size(32)));
typedef uint8_t sched_v8qi __attribute__((vector_size(8)));
#endif
static inline int32_t SLOW(const uint8_t *restrict ts, const int32_t *restrict pc, int64_t cs, int32_t *nb,
        int32_t *nw) {{
    int32_t lo = INT32_MAX, b = 0, w = 0; int64_t lic = 0;
#ifdef SCHED_VEC
    const sched_v8si none = (sched_v8si){{0}} + INT32_MAX, run = (sched_v8si){{0}} + {T_RUN},
        bar = (sched_v8si){{0}} + {T_BAR}, wait = (sched_v8si){{0}} + {T_WAIT};
    sched_v8si lov = none, bv = {{0}}, wv = {{0}};
    for (; lic + 8 <= cs; lic += 8) {{
        sched_v8qi t8; sched_v8si p; memcpy(&t8, ts + lic, 8); memcpy(&p, pc + lic, 32);
        const sched_v8si t = __builtin_convertvector(t8, sched_v8si), r = t == run;
        p = (p & r) | (none & ~r);
        const sched_v8si lt = p < lov;
        lov = (p & lt) | (lov & ~lt); bv -= t == bar; wv -= t == wait;
    }}
    for (int k = 0; k < 8; k++) {{ lo = lov[k] < lo ? lov[k] : lo; b += bv[k]; w += wv[k]; }}
#endif
    for (; lic < cs; lic++) {{
        const int32_t t = ts[lic], p = t == {T_RUN} ? pc[lic] : INT32_MAX;
        lo = p < lo ? p : lo; b += t == {T_BAR}; w += t == {T_WAIT};
    }}
    *nb = b; *nw = w;
    return lo;
}}
static inline int32_t SCOUNT(const uint8_t *restrict ts, const int32_t *restrict pc, int64_t cs, int32_t p) {{
    int32_t n = 0; int64_t lic = 0;
#ifdef SCHED_VEC
    const sched_v8si run = (sched_v8si){{0}} + {T_RUN}, pv = (sched_v8si){{0}} + p;
    sched_v8si nv = {{0}};
    for (; lic + 8 <= cs; lic += 8) {{
        sched_v8qi t8; sched_v8si q; memcpy(&t8, ts + lic, 8); memcpy(&q, pc + lic, 32);
        nv -= (__builtin_convertvector(t8, sched_v8si) == run) & (q == pv);
    }}
    for (int k = 0; k < 8; k++) n += nv[k];
#endif
    for (; lic < cs; lic++) n += (ts[lic] == {T_RUN}) & (pc[lic] == p);
    return n;
}}
"""


def eligible_reason(kernel) -> str | None:
    """Why a kernel cannot run a CTA at a time (None: it can, as far as its blocks go; the C forms decide the
    rest): threadgen's rules but the warp-synchronous one, whose order this code keeps, and with atomics,
    volatile or scoped accesses and fences allowed (ctaatomic.py) and warp operations (ctawarp.py)."""
    return threadgen.blocks_reason(kernel, ctaatomic.sharing_reason, bar_red=True, warp_ok=ctawarp.supported)


def preferred_reason(kernel, threadgen_on: bool = True) -> str | None:
    """Why an eligible kernel is left to the other paths (None: a CTA at a time is where it runs fastest, as
    measured: bench/emu_barrier_modes_bench.py, bench/README.md "Issue 19 part 6, seventh step"). A kernel without
    a barrier runs a thread at a time (threadgen.py: no steps to schedule, registers in C locals), and so does one
    with a loop between two barriers where thread mode is on (threadgen.slower_reason: a grid-stride sum before a
    block reduction ran 1.25x faster there); the rest (short phases between barriers: scan_batches' scanTiles) ran
    1.7x faster than the lockstep native code and 2.7x faster than a thread at a time. A kernel with warp
    operations (which thread mode refuses) runs here, barriers or not: the reduction sample's warp reductions ran
    1.6-2.6x faster than the lockstep native code (bench/emu_warp_modes_bench.py, bench/README.md "ninth step")."""
    if not any(b.kind in ("bar", "warp") for b in kernel.blocks):
        return "no barrier (a thread at a time is faster)"
    if threadgen_on and threadgen.eligible_reason(kernel) is None and threadgen.slower_reason(kernel) is None:
        return "a loop between two barriers (a thread at a time is faster)"
    return None


def _shared_memory(ins: ir.Instr) -> str | None:
    """'st' / 'ld' for an access of memory other threads may access (global, shared, generic), None for one
    private to a thread or read-only (local, parameters, constants) or no access."""
    if ins.opcode in ctaatomic.ATOMIC_OPCODES:
        return "st"                    # (a read-modify-write: the loop's one store)
    if ins.opcode not in ("ld", "ldu", "st"):
        return None
    if any(m in ("local", "param", "const") for m in ins.mods):
        return None
    return "st" if ins.opcode == "st" else "ld"


def _loops(instrs: list[ir.Instr], regs) -> list[list[ir.Instr]]:
    """A block's instructions in loops over its threads: each holds at most one store, or only loads, of shared
    memory (module docstring), so that thread-after-thread order within a loop is the lockstep order."""
    out: list[list[ir.Instr]] = [[]]
    kinds: set[str] = set()
    for ins in instrs:
        k = _shared_memory(ins)
        if k is not None and (("st" in kinds) or (k == "st" and kinds)):
            out.append([])
            kinds = set()
        out[-1].append(ins)
        if k is not None:
            kinds.add(k)
    # a loop that could not run twice (_fast_code) ends after its last access when its start could
    split = []
    for x in out:
        k = max((i for i, ins in enumerate(x) if ins.opcode in ACCESS_OPCODES), default=-1)
        if 0 <= k < len(x) - 1 and not _rerunnable(x, regs) and _rerunnable(x[:k + 1], regs):
            split += [x[:k + 1], x[k + 1:]]
        elif x:
            split.append(x)
    return split


class CtaEmitter(ThreadEmitter):
    """threadgen's emitter with each register an array over the CTA's threads at a constant offset in the register
    file (`((uint32_t *)(rf + OFF))[lic]`: one base pointer, whatever the number of registers) or, for one used
    inside one loop only (_locals), a C local; suspensions save only the loop's position (the registers are in
    memory Python owns)."""

    def __init__(self, regs, imm, address, kernel, local: set[str], uniform: set[str] = frozenset(),
                 rf: RegisterFile = RegisterFile(MAX_CTA)) -> None:
        super().__init__(regs, imm, address, kernel)
        self.local = local
        self.uniform = uniform                  # registers kept once per CTA (_uniform)
        self.rf = rf                            # the register file's layout (its arrays' elements: rf.cap)
        self.offsets: dict[str, int] = {}       # register -> its array's byte offset in rf
        self.shared: dict[str, tuple[int, int]] = {}   # register -> the array it shares (ctaregs.shared_arrays)
        self._slots: dict[object, int] = {}     # an array (a register's name, or a shared array's key) -> offset
        self.rf_bytes = rf.fixed
        self.shared_sizes: set[int] = set()     # access sizes of _fast_shared_offset (their bounds: kernel_source)
        self.loop_sizes: set[int] = set()       # those of the loop being emitted (_fast_code)
        self.loop_conds: set[str] = set()       # C conditions of its loop without suspensions (hints, parameters)
        # a contiguous attempt (ctaaffine.py): its accesses' bases by id(access), the body being emitted ("first",
        # "affine", "affcheck"; "" the usual passes), the range checks "first" made, the attempts' flags
        self.affine: bool = True
        self.aff: dict[int, str] = {}
        self.aff_mode = ""
        self.aff_ranges: list[str] = []
        self.aff_flags: list[str] = []

    def var(self, name: str) -> str:
        v = super().var(name)
        if name.startswith("__") or name in self.local:
            return v
        return f"{self.array(name)}[{0 if name in self.uniform else 'lic'}]"

    def array(self, name: str) -> str:
        """The C expression of a register's array (rf.cap elements; each array 64 bytes past a multiple of 64 bytes
        times its elements from the last, so that the arrays' elements of one thread fall in different sets of the
        L1 cache; a register kept once per CTA has 64 bytes: every array stays aligned to 64)."""
        if name not in self.offsets:
            key = self.shared.get(name, name)
            if key not in self._slots:
                self._slots[key] = self.rf_bytes
                self.rf_bytes += 64 if name in self.uniform else self.rf.cap * _bytes(self.regs[name]) + 64
            self.offsets[name] = self._slots[key]
        return f"(({utype(self.regs[name])} *)(rf + {self.offsets[name]}))"

    def emit(self, ins: ir.Instr) -> None:
        if ctaatomic.handles(ins):
            ctaatomic.emit(self, ins)
            written = reads_writes(ins, self.regs, True)[1]
            if written:
                self.checked = {key: p for key, p in self.checked.items() if key[1] not in written}
            return
        super().emit(ins)

    def suspend(self, rc: int, request: str = "", live=None) -> str:
        self.sites += 1
        k = self.sites
        self.tail.append(f"S{k}: __attribute__((cold)); st[{ST_RESUME}] = {k}; rc = {rc}; goto suspend;")
        stale = "".join(f" {p} = 0;" for p in self.checked.values())
        return f"{request} goto S{k}; R{k}: ;{stale}"


# The special registers every thread of a CTA reads alike (its position in the grid, the shapes)
UNIFORM_SPECIALS = frozenset(f"%{k}.{a}" for k in ("ntid", "ctaid", "nctaid") for a in "xyz")


def _uniform(kernel, address) -> set[str]:
    """The registers every thread of a CTA holds alike, kept once per CTA (CtaEmitter.var: element 0 of their
    array): UNIFORM_SPECIALS, and each register with one definition in the kernel, in its first block (which every
    thread of a CTA runs first, together: a CTA starts converged there), unguarded, a PURE_OPCODES instruction or a
    load of a kernel parameter by name, all of whose register sources are such registers (computed earlier in that
    block). Every thread that writes one writes the same value, and none reads it before the CTA's first step. A
    register read before it is written (live into the first block: each thread reads its own 0 there, as on the
    lockstep path) is not one: kept once, a thread would read what an earlier thread of the loop wrote (review7)."""
    every = AnyRegister()
    entry = set(kernel.live[0]) if kernel.live else set()
    defs: dict[str, int] = {}
    for b in kernel.blocks:
        for ins in b.instrs + ([b.term] if b.term is not None else []):
            for w in reads_writes(ins, every, False)[1]:
                defs[w] = defs.get(w, 0) + 1
    uni = set(UNIFORM_SPECIALS)
    for ins in kernel.blocks[0].instrs if kernel.blocks else []:
        reads, writes = reads_writes(ins, every, False)
        if ins.guard is not None or not writes or any(defs.get(w) != 1 or w in uni or w in entry for w in writes):
            continue
        if ins.opcode in ("ld", "ldu"):
            try:
                if "param" not in ins.mods or address(ins.srcs[0], ins)[0] != "kparam":
                    continue
            except CudaError:
                continue
        elif ins.opcode not in PURE_OPCODES:
            continue
        if all(r in uni for r in reads):
            uni |= set(writes)
    return uni


def _locals(kernel, loops: dict[int, list[list[ir.Instr]]], regs) -> set[str]:
    """The registers that can be C locals: each used in one loop only (not live into any block, not a
    terminator's guard), written there before any read, unguarded, and not written before a suspension site
    (a load or store) and read after it (a suspension loses locals)."""
    bad: set[str] = set().union(*kernel.live) if kernel.live else set()
    where: dict[str, tuple[int, int]] = {}
    for bi, ls in loops.items():
        for li, instrs in enumerate(ls):
            first: dict[str, int] = {}
            last: dict[str, int] = {}
            sites = [k for k, x in enumerate(instrs) if x.opcode in ACCESS_OPCODES]
            for k, ins in enumerate(instrs):
                reads, writes = reads_writes(ins, regs, True)
                if ins.opcode in ctaatomic.ATOMIC_OPCODES:
                    bad.update(reads)      # (an atomic reads its operands after its suspension: ctaatomic.emit)
                for r in reads:
                    if r not in first:
                        bad.add(r)
                    last[r] = k
                for r in writes:
                    first.setdefault(r, k)
                for r in reads + writes:
                    if where.setdefault(r, (bi, li)) != (bi, li):
                        bad.add(r)
            for r, f in first.items():
                if any(f < x < last.get(r, f) for x in sites):
                    bad.add(r)
    for b in kernel.blocks:
        if b.term is not None:
            reads, writes = reads_writes(b.term, regs, True)
            bad |= set(reads) | set(writes)     # (a warp operation reads other threads' registers)
    return set(where) - bad


# A loop with suspension sites, converged or not: one copy (the scalar loop costs the same either way, and its
# suspension sites are most of a large kernel's C); resuming sets lic from j as it does
_SLOW_LOOP = "for (j = 0; j < n; j++) { lic = conv ? j : act[j]; i = ib + lic;"


def kernel_source(kernel, g, name: str) -> tuple[str | list[str], int, int]:
    """(`int64_t name(int64_t i0, int64_t n, const MemCtx *M, const TX *X, uint64_t *st, uint8_t *rf)`: the CTAs of
    lanes i0..n-1 of the chunk (whole CTAs) one after the other, from the start (st[ST_RESUME] 0) or resumed where
    it suspended; R_DONE when all ran, else R_SLOW / R_TICK with st filled (threadgen's protocol); the length of its
    state array; the bytes of its register file `rf`). Raises NoC when the kernel is not
    eligible or some instruction has no C form, or its source's compile-time estimate (without attempts) is over
    MAX_COMPILE_S. Loops get contiguous attempts (ctaaffine.py) unless the kernel has over
    ctaaffine.MAX_INSTRUCTIONS instructions or they make the source larger than ctaaffine.MAX_BYTES or its estimate
    over MAX_COMPILE_S (then it is made again without them)."""
    affine = sum(len(b.instrs) for b in kernel.blocks) <= ctaaffine.MAX_INSTRUCTIONS
    out = _kernel_source(kernel, g, name, affine)
    if affine and (_size(out[0]) > ctaaffine.MAX_BYTES or _compile_too_long(out[0])):
        out = _kernel_source(kernel, g, name, False)
    if _compile_too_long(out[0]):
        raise NoC
    return out


def compile_seconds(src: str | list[str]) -> float:
    """A source's (or translation units') compile-time estimate at its size's level (opt_level), idle CPU seconds."""
    return _size(src) / 1e6 * opt_level(src).s_per_mb


def _compile_too_long(src: str | list[str]) -> bool:
    """Whether a source's (or translation units') compile-time estimate (opt_level) is over MAX_COMPILE_S."""
    return compile_seconds(src) > MAX_COMPILE_S


def _kernel_source(kernel, g, name: str, affine: bool) -> tuple[str | list[str], int, int]:
    if eligible_reason(kernel) is not None:
        raise NoC
    regs = threadgen.register_widths(kernel, g)
    if any(w > 64 for w in regs.values()):
        raise NoC
    labels = kernel.labels
    real = g.reg_width
    loops = {b.index: _loops(b.instrs, real) for b in kernel.blocks}
    # a large kernel: each loop without memory accesses once and guarded branches as calls of BRANCH (the converged
    # copy that vectorises costs more compile time than it saves at run time: bench/README.md, "twelfth step")
    large = sum(len(b.instrs) + 1 for b in kernel.blocks) > LARGE_INSTRUCTIONS
    # (CTAs that talk are set aside with their registers' arrays, CtaRegisters: no register is kept once for them)
    uniform = _uniform(kernel, g.address) if kernel.independent_ctas else set()
    rfl = RegisterFile(cta_cap(kernel))
    e = CtaEmitter(regs, g.imm, g.address, kernel, _locals(kernel, loops, real), uniform, rfl)
    e.affine = affine
    entry = (set(kernel.live[0]) if kernel.live else set()) | ctawarp.read_across(kernel, regs)
    if large:
        # (registers never live together in a thread share an array, ctaregs.py: a large kernel's loops never
        # run a thread twice)
        own = e.local | e.uniform | entry | set(SPECIAL_REGISTERS)
        e.shared = ctaregs.shared_arrays(kernel, regs, set(regs) - own, _bytes)
    nblocks = len(kernel.blocks)
    lines: list[str] = []
    out = lines.append
    reds: list[str] = []                   # bar.red sites 1, 2, ...: their release code (_bar_red)
    marks: list[tuple[int, int, int]] = []  # per block: where its code starts in lines, e.sites and e.tail then
    for b in kernel.blocks:
        marks.append((len(lines), e.sites, len(e.tail)))
        if b.kind == "plain" and b.term is not None and b.term.opcode not in ("bra", "ret", "exit"):
            raise NoC
        out(f"B{b.index}: cnt += n * {len(b.instrs) + 1};")
        for body in loops[b.index]:
            code = _body_code(e, body)
            # (a large kernel has none: at -O1 a loop with suspensions alone ran its launch faster, and the copies
            # cost compile time; bench/README.md, "twelfth step")
            fast = None if large or not any(x.opcode in ("ld", "ldu", "st") for x in body) or \
                any(x.opcode in ctaatomic.ATOMIC_OPCODES for x in body) else _fast_code(e, body, real)
            if fast is not None:
                # converged: a pass without suspensions that the compiler may vectorise; an access it could not
                # make (a fault ahead, an address outside the allocation its pointer last used) runs the loop again
                # with them (fast_code: the loop can run twice); a global store's loop checks every address in a
                # first pass and stores in a second, so that a bad access leaves memory as the loop found it
                # (ivdep: the compiler cannot tell the register file, shared memory and the heap apart through
                # their byte pointers; they are distinct, and in a loop holds one store at most: _loops)
                loop = '_Pragma("GCC ivdep") for (lic = 0; lic < cs; lic++)'
                passes = (f"{loop} {{ {fast[0]} }}" if fast[2] is None else
                          f"{loop} {{ {fast[2]} }} if (!bad) {{ {loop} {{ {fast[0]} }} }}")
                if fast[4] is not None:    # (contiguous accesses first, the usual passes when they are not)
                    passes = f"{ctaaffine.DECLS} {fast[4]} if (dev) {{ {passes} }}"
                out(f"{{ uint32_t bad = 1; if (conv && {fast[1]}) {{ bad = 0; {fast[3]} {passes} }} "
                    f"if (bad) {{ {_SLOW_LOOP} {_shared_at_cta(code)} }} }} }}")
            elif any(x.opcode in ACCESS_OPCODES for x in body):
                out(f"{_SLOW_LOOP} {_shared_at_cta(code)} }}")
            elif large:
                out(_large_alu_loop(e, body, code))
            else:
                once, rest = _once_first(e, body, real)
                out(f"if (conv) {{ {_body_code(e, once)} for (lic = 0; lic < cs; lic++) {{ {_body_code(e, rest)} }} }} "
                    f"else {{ for (j = 0; j < n; j++) {{ lic = act[j]; {code} }} }}")
        t = b.term
        nxt = b.index + 1
        if b.kind == "warp":
            out(ctawarp.block_code(e, t, nxt))
            continue
        if t is None:
            out(f"P = {nxt}; if (conv) goto dispatch; for (j = 0; j < n; j++) pc[act[j]] = {nxt}; goto sched;")
            continue
        if b.kind == "bar":                # (eligible_reason: bar.sync or bar.red 0 for all threads, unguarded)
            # converged: every thread arrives, the barrier completes at once (bar.red reduces at once); diverged,
            # the threads park, at a bar.red with its predicate and site (_bar_red)
            conv_red, park = _bar_red(e, t, reds)
            out(f"if (conv) {{ {conv_red} P = {nxt}; goto dispatch; }} "
                f"for (j = 0; j < n; j++) {{ lic = act[j]; {park} ts[lic] = {T_BAR}; pc[lic] = {nxt}; }} goto sched;")
            continue
        guard = None
        if t.guard is not None:
            gname, gneg = t.guard
            if gname not in regs or regs[gname] != 1:
                raise NoC
            guard = f"({'!' if gneg else ''}{e.var(gname)})"
        if t.opcode in ("ret", "exit"):
            if guard is None:
                out(f"if (conv) goto cta_done; for (j = 0; j < n; j++) ts[act[j]] = {T_EXIT}; goto sched;")
            else:
                out(f"for (j = 0; j < n; j++) {{ lic = conv ? j : act[j]; "
                    f"if {guard} ts[lic] = {T_EXIT}; else pc[lic] = {nxt}; }} conv = 0; goto sched;")
            continue
        if any(m != "uni" for m in t.mods) or not t.srcs or not isinstance(t.srcs[0], ir.Sym) or \
                t.srcs[0].name not in labels:
            raise NoC
        tgt = labels[t.srcs[0].name]
        if guard is None:
            out(f"P = {tgt}; if (conv) goto dispatch; for (j = 0; j < n; j++) pc[act[j]] = {tgt}; goto sched;")
        elif large:
            gname, gneg = t.guard
            g = e.var(gname)
            out(f"{{ int64_t t = BRANCH(&{g[:g.rindex('[')]}[0], {int(gname not in e.uniform)}, {int(gneg)}, cs, conv, "
                f"n, act, pc, {tgt}, {nxt}); if (t >= 0) {{ P = t; goto dispatch; }} conv = 0; goto sched; }}")
        else:
            # converged: the guard read first (a loop the compiler vectorises: whether any thread takes it and
            # whether all do, byte reductions, 64 threads a vector step, not a 32-bit count), the CTA stays
            # converged when it is uniform; else every PC written (branch-free: a select did not vectorise;
            # ivdep: the PCs and the registers are distinct parts of rf) and the threads at the lower of the two
            # blocks run next, as the scheduler would choose them (every thread of a converged CTA runs, so its
            # scans would find that block): a branch that splits the CTA leaves it diverged
            lo = min(tgt, nxt)
            out(f"{{ int64_t tk = 0; if (conv) {{ uint8_t tany = 0, tall = 1; for (lic = 0; lic < cs; lic++) "
                f"{{ const uint8_t y = ({guard}) != 0; tany |= y; tall &= y; }} "
                f"if (!tany || tall) {{ P = tany ? {tgt} : {nxt}; goto dispatch; }} "
                f'_Pragma("GCC ivdep") for (lic = 0; lic < cs; lic++) {{ const int32_t y = ({guard}) != 0; '
                f"pc[lic] = {nxt} ^ ({tgt ^ nxt} & -y); }} "
                f"P = {lo}; n = ACTS(ts, pc, {lo}, cs, act); conv = 0; goto dispatch; }} "
                f"for (j = 0; j < n; j++) {{ lic = act[j]; int64_t y = {guard}; "
                f"pc[lic] = y ? {tgt} : {nxt}; tk += y; }} "
                f"if (conv && (tk == 0 || tk == n)) {{ P = tk ? {tgt} : {nxt}; goto dispatch; }} "
                f"conv = 0; goto sched; }}")
    # a CTA starts: its position's special registers, and the registers read before written (zero, as the
    # lockstep runtime's) set; every thread at block 0, running
    named = [(r, v) for r, v in e.names.items() if not r.startswith("__")]
    local_decls = {v: f"{utype(regs[r])} {v} = 0;" for r, v in named if r in e.local}
    consts: list[str] = []
    for z in sorted(e.shared_sizes):
        consts.append(f"const uint32_t shlim{z} = M->shsize >= {z} ? (uint32_t)(M->shsize - {z} > 0xFFFFFFFF ? "
                     f"0xFFFFFFFF : M->shsize - {z}) : 0, shok{z} = M->shsize >= {z};")
    aff = [f"uint32_t {f} = {ctaaffine.FIRST_FLAG};" for f in e.aff_flags]     # (ctaaffine.attempt)
    views = [f"int32_t *restrict pc = (int32_t *)(rf + {RF_PC}), *restrict act = (int32_t *)(rf + {rfl.act});",
             f"uint8_t *restrict ts = rf + {rfl.ts}; uint64_t *restrict wf = st + {ST_FORCED}; (void)wf;"]
    decls = list(local_decls.values()) + consts + aff + views
    consts += views
    # threads parked at warp operations: woken (forced) when no thread of the CTA runs, before any barrier's release
    warps = any(b.kind == "warp" for b in kernel.blocks)
    if warps:
        decls.append(ctawarp.SCRATCH)
    wake = (f"                if (nwait) {{ for (lic = 0; lic < cs; lic++) if (ts[lic] == {T_WAIT}) ts[lic] = {T_RUN}; "
            f"wf[0] = 1; goto sched; }}\n") if warps else ""
    # each thread's starting registers, and those of the CTA's registers kept once (set once, before its threads')
    init: list[str] = []
    once: list[str] = []
    for r, value in [(r, f"({utype(regs[r])}){_special_c(r)}") for r, v in named if r in SPECIAL_REGISTERS] + \
            [(r, "0") for r, v in named if r not in SPECIAL_REGISTERS and r in entry and r not in e.local]:
        (once if r in e.uniform and r not in e.local else init).append(f"{e.var(r)} = {value};")
    header = (f"    const uintptr_t hd = (uintptr_t)M->heap - (uintptr_t)M->base; (void)hd;\n"
              f"    uint8_t *const hb = (uint8_t *)hd; (void)hb;    /* (heap - base: + a global address, its byte) */\n"
              f"{_SHAPE}")
    ind = "\n    "
    split = sum(map(len, lines)) > ctasplit.SPLIT_BYTES
    if split:
        # (a large kernel: its blocks in functions of their own, ctasplit.py; the scheduler stays here)
        sp = ctasplit.split(name, ctasplit.regions(lines, marks, e.sites, e.tail), e.hints, header, e.prologue,
                            consts, local_decls, ctawarp.SCRATCH, ST_RESUME, e.aff_flags)
        pre, hints, prologue, decls = sp.declarations, "", [], consts + [sp.frame]
        resume, dispatch, tail = sp.resume, sp.dispatch, []
    else:
        cases = " ".join(f"case {k}: goto R{k};" for k in range(1, e.sites + 1))
        blocks = " ".join(f"case {k}: goto B{k};" for k in range(nblocks))
        pre, prologue, tail = "", e.prologue, e.tail
        hints = "".join(f"    uint64_t hint{k}lo = 0, hint{k}lim = 0;\n" for k in range(e.hints))
        resume = f"switch (st[{ST_RESUME}]) {{ {cases} default: return -1; }}"
        dispatch = f"switch (P) {{ {blocks} default: return -2; }}\n        " + "\n        ".join(lines)
    src = (f"{pre}int64_t {name}(int64_t i0, int64_t n0, const MemCtx *restrict M, const TX *restrict X, "
           f"uint64_t *restrict st, uint8_t *restrict rf) {{\n{hints}"
           f"{header}"
           + "".join(f"    {x}\n" for x in prologue) +
           f"    {ind.join(decls)}\n"
           f"    int64_t rc = {R_DONE}, cnt = 0, lim = X->every, cl = i0 / cs, c1 = n0 / cs, cta = 0, ib = 0;\n"
           f"    int64_t j = 0, n = 0, lic = 0, i = 0, P = 0, conv = 0;\n"
           f"    uint8_t *sb = 0; const int64_t shl = M->shsize;\n"
           f"    (void)i; (void)cta; (void)sb; (void)shl;\n"
           f"    if (cs > {rfl.cap}) return -1;     /* (the register file's arrays hold {rfl.cap} threads) */\n"
           f"    if (st[{ST_RESUME}]) {{\n"
           f"        cl = (int64_t)st[{ST_CL}]; cnt = (int64_t)st[{ST_CNT}]; lim = cnt + X->every;\n"
           f"        j = (int64_t)st[{ST_J}]; n = (int64_t)st[{ST_N}]; P = (int64_t)st[{ST_P}];\n"
           f"        conv = (int64_t)st[{ST_CONV}]; cta = X->cta0 + cl; ib = cl * cs;\n"
           f"        sb = M->smem + M->cta_off[ib];\n"
           f"        if (st[{ST_RESUME}] == {RES_DISPATCH}) goto dispatch;\n"
           f"        lic = conv ? j : act[j]; i = ib + lic;\n"
           f"        {resume}\n"
           f"    }}\n"
           f"    for (; cl < c1; cl++) {{\n"
           f"        cta = X->cta0 + cl; ib = cl * cs; sb = M->smem + M->cta_off[ib];\n"
           f"        {' '.join(once)} for (lic = 0; lic < cs; lic++) {{ pc[lic] = 0; ts[lic] = {T_RUN}; {' '.join(init)} }}\n"
           f"        conv = 1; P = 0; n = cs; wf[0] = 0;\n"
           f"        goto dispatch;\n"
           f"    sched: ;\n"
           f"        {{   /* the lowest PC of the running threads; none: release the parked ones, or the CTA is done */\n"
           f"            int64_t lo = INT64_MAX, nbar = 0, nwait = 0; (void)nwait;\n"
           f"            {{  /* (a PC is a block's index, below INT32_MAX) */\n"
           f"                int32_t nb = 0, nw = 0; const int32_t lo32 = SLOW(ts, pc, cs, &nb, &nw);\n"
           f"                if (lo32 != INT32_MAX) lo = lo32;\n"
           f"                nbar = nb; nwait = nw; (void)nw;\n"
           f"            }}\n"
           f"            if (lo == INT64_MAX) {{\n"
           f"{wake}"
           f"                if (!nbar) goto cta_done;\n"
           + "".join(f"                {{ /* bar.red site {k + 1} */ {code} }}\n" for k, code in enumerate(reds)) +
           f"                for (lic = 0; lic < cs; lic++) if (ts[lic] == {T_BAR}) ts[lic] = {T_RUN};\n"
           f"                goto sched;\n"
           f"            }}\n"
           f"            P = lo; n = 0;\n"
           f"            /* the threads at P counted first: all of them, the CTA is converged and its list of threads\n"
           f"               is not read; else the list made */\n"
           f"            {{ const int32_t n32 = SCOUNT(ts, pc, cs, (int32_t)P); n = n32; conv = n32 == cs; }}\n"
           f"            if (!conv) n = ACTS(ts, pc, (int32_t)P, cs, act);\n"
           f"        }}\n"
           f"    dispatch:\n"
           f"        if (cnt >= lim) {{ st[{ST_RESUME}] = {RES_DISPATCH}; rc = {R_TICK}; goto suspend; }}\n"
           f"        {dispatch}\n"
           f"    cta_done: ;\n"
           f"    }}\n"
           f"    st[{ST_CNT}] = (uint64_t)cnt; st[{ST_RESUME}] = 0;\n"
           f"    return {R_DONE};\n"
           + "".join(f"{x}\n" for x in tail) +
           f"suspend:\n"
           f"    st[{ST_I}] = (uint64_t)i; st[{ST_CNT}] = (uint64_t)cnt; st[{ST_CL}] = (uint64_t)cl; "
           f"st[{ST_J}] = (uint64_t)j;\n"
           f"    st[{ST_N}] = (uint64_t)n; st[{ST_P}] = (uint64_t)P; st[{ST_CONV}] = (uint64_t)conv;\n"
           f"    return rc;\n}}\n")
    fixed = [(RF_PC, 4), (rfl.act, 4), (rfl.ts, 1), (rfl.rsite, 1), (rfl.rpred, 1)]
    arrays = sorted({off: _bytes(regs[r]) for r, off in e.offsets.items()}.items())   # (shared arrays once)
    regfile = ctaatomic.CtaRegisters(e.rf_bytes, fixed + arrays, talking=not kernel.independent_ctas,
        instructions=sum(len(b.instrs) + 1 for b in kernel.blocks))
    if split:
        src = [src] + sp.units              # (translation units: the kernel function's first)
    return src, STATE_WORDS, regfile


def _large_alu_loop(e: CtaEmitter, body: list[ir.Instr], code: str) -> str:
    """A large kernel's loop of ALU instructions: the scalar loop over the threads at the block (code: a thread's
    part), after a converged CTA's vector steps where every instruction has a vector form (ctavec.py: W threads a
    step; the scalar loop runs the last n % W threads)."""
    step = ctavec.loop_code(e, body) if VECTOR_ALU else None
    if step is None:
        return f"for (j = 0; j < n; j++) {{ lic = conv ? j : act[j]; {code} }}"
    return (f"j = 0; if (conv) {{ for (lic = 0; lic + {ctavec.W} <= n; lic += {ctavec.W}) {{ {step} }} j = lic; }} "
            f"for (; j < n; j++) {{ lic = conv ? j : act[j]; {code} }}")


def _bar_red(e: CtaEmitter, t: ir.Instr, reds: list[str]) -> tuple[str, str]:
    """(C code of a barrier block's converged release, C code parking thread lic at it) where it is a bar.red (a
    new site in `reds`, with the code releasing its parked threads), else ("", code marking a plain barrier's
    site when the kernel has bar.red sites). The reduction is runtime/barriers.py's: over the CTA's threads
    (converged: every one), or over the threads parked at the site when the CTA is released; popc counts the
    true predicates (u32), and/or reduce them (pred)."""
    kind, red, _a, _cnt, pred_op = control.bar_form(t)
    if red is None:
        return "", f"(rf + {e.rf.rsite})[lic] = 0;"
    if len(reds) >= 255:
        raise NoC
    k = len(reds) + 1
    p = e.src(pred_op, "pred", t)
    tt = "u32" if red == "popc" else "pred"
    start = len(e.lines)
    e.write(t.dsts[0], tt, "acc", ir.Instr(t.opcode, t.mods, t.dsts, t.srcs, None, t.line, t.text))
    write = " ".join(e.lines[start:])
    del e.lines[start:]
    step = {"popc": "acc += x;", "and": "acc &= x;", "or": "acc |= x;"}[red]
    init = "1" if red == "and" else "0"
    conv = (f"{{ uint32_t acc = {init}; for (lic = 0; lic < cs; lic++) {{ uint32_t x = {p}; {step} }} "
            f"for (lic = 0; lic < cs; lic++) {{ {write} }} }}")
    site, pred = f"(rf + {e.rf.rsite})", f"(rf + {e.rf.rpred})"
    at = f"ts[lic] == {T_BAR} && {site}[lic] == {k}"
    reds.append(f"uint32_t acc = {init}; for (lic = 0; lic < cs; lic++) if ({at}) {{ uint32_t x = {pred}[lic]; "
                f"{step} }} for (lic = 0; lic < cs; lic++) if ({at}) {{ {write} }}")
    return conv, f"{site}[lic] = {k}; {pred}[lic] = {p};"


def _fast_code(e: CtaEmitter, body: list[ir.Instr], regs) -> tuple[str, str, str | None, str] | None:
    """(C code of a loop's body without suspension sites, the C condition for running it, C code of its checking
    pass or None, C code run once before them: _once_first) or None (not possible). Each access is unguarded and one _fast_kind serves, checked without a
    branch: a bad access sets `bad` and reads at a valid address instead (shared offset 0, the allocation of its
    pointer's hint); a bad shared store writes at offset 0 (a bad shared access is a fault, which running the loop
    again with suspensions then raises, and a faulted launch's shared memory is gone with it), while a global
    store's loop is checked in a first pass (the third element: the body without the store) and stored in a second
    only when every address passed. No register is read before it is written in the loop, so that running the loop
    again from its first thread computes the same (a loop holds one store at most: _loops; made again, its stores
    leave memory as they were)."""
    accesses = [ins for ins in body if ins.opcode in ("ld", "ldu", "st")]
    if not _rerunnable(body, regs) or any(_fast_kind(e, ins) is None for ins in accesses):
        return None
    e.loop_sizes, e.loop_conds = set(), set()
    once, rest = _once_first(e, body, regs)
    pre = _body_code(e, once, fast=True)
    code = _body_code(e, rest, fast=True)
    check = None
    if any(ins.opcode == "st" and _fast_kind(e, ins) == "global" for ins in accesses):
        check = _body_code(e, rest, fast="check")
    # (a window smaller than an access: no offset 0 to read or write at, the loop with suspensions serves; a pointer
    # without a hint yet: that loop makes one)
    conds = [f"shok{z}" for z in sorted(e.loop_sizes)] + sorted(e.loop_conds)
    return code, " && ".join(conds) or "1", check, pre, _affine_attempt(e, rest)


def _affine_attempt(e: CtaEmitter, rest: list[ir.Instr]) -> str | None:
    """The C code of a loop's contiguous attempt (ctaaffine.py), or None (no access it could make contiguous)."""
    cands = ctaaffine.candidates(e, rest, _fast_kind) if e.affine else []
    if not cands:
        return None
    e.aff = {id(ins): e.fresh("ab") for ins in cands}
    e.aff_ranges = []
    try:
        first = _body_code(e, rest, fast="first")
        ranges = list(e.aff_ranges)
        affine = _body_code(e, rest, fast="affine")
        store = any(ins.opcode == "st" for ins in cands)
        affcheck = _body_code(e, rest, fast="affcheck") if store else None
    finally:
        bases, e.aff, e.aff_ranges = list(e.aff.values()), {}, []
    flag = e.fresh("aff")
    e.aff_flags.append(flag)
    return ctaaffine.attempt(first, '_Pragma("GCC ivdep")', affine, affcheck, bases, ranges, flag, MAX_CTA)


def _once_first(e: CtaEmitter, body: list[ir.Instr], regs) -> tuple[list[ir.Instr], list[ir.Instr]]:
    """(the instructions of a converged loop that write registers kept once per CTA only, the others): the first
    run once, before the loop over the threads (a store into one element inside that loop keeps the compiler from
    vectorising it). Where the loop can run twice (_rerunnable: no register it writes is read before it is
    written) every read of such a register in the loop comes after its one definition there, and that definition
    reads only such registers (_uniform): computed first, each reads what it read in the loop."""
    if not _rerunnable(body, regs):
        return [], body
    once = [ins for ins in body if ins.opcode != "st" and _writes_once(e, ins, regs)]
    return once, [ins for ins in body if not any(ins is x for x in once)]


def _writes_once(e: CtaEmitter, ins: ir.Instr, regs) -> bool:
    writes = reads_writes(ins, regs, True)[1]
    return bool(writes) and all(w in e.uniform for w in writes)


def _fast_kind(e: CtaEmitter, ins: ir.Instr) -> str | None:
    """How a loop without suspensions makes an access: 'shared' (its CTA's window), 'global' (a global or constant
    address inside the allocation its pointer used last: threadgen's hint), 'kparam' (a kernel parameter by name,
    the same bytes for every thread); None: only with suspensions (guarded, local, generic, a sharing access)."""
    if ins.guard is not None:
        return None
    if _shared_space(ins):
        return "shared"
    if set(ins.mods) & SHARING_MODS:
        return None
    try:
        space = threadgen.store_form(e, ins)[0] if ins.opcode == "st" else load_form(e, ins)[0]
        kind = e.address(ins.srcs[0], ins)[0]
    except (NoC, CudaError):
        return None
    if kind == "kparam":
        return "kparam" if space == "param" and ins.opcode != "st" else None
    if kind in ("reg", "const") and (space == "global" or (space == "const" and ins.opcode != "st")):
        return "global"
    return None


def _body_code(e: CtaEmitter, body: list[ir.Instr], fast: bool | str = False) -> str:
    """The C code of one thread's part of a loop (with suspension sites of its own: each copy of a loop is emitted
    anew); fast: accesses without them (_fast_code), "check": global stores only checked (_fast_global_store);
    "first", "affine", "affcheck": the bodies of a contiguous attempt (ctaaffine.py)."""
    e.label()                          # (a pointer checked in another loop is another thread's)
    start = len(e.lines)
    e.aff_mode = fast if fast in ("first", "affine", "affcheck") else ""
    if not fast:                       # (each resumption resets only the pointers a later access may reuse)
        e.reusable = _reused(body)
    try:
        i = 0
        while i < len(body):
            ins = body[i]
            i += 1
            if ins.opcode in ("ld", "ldu", "st") and "mmio" in ins.mods:
                raise NoC              # (volatile and scoped accesses: plain ones here, ctaatomic.py)
            run = 0 if fast else ctarun.run_length(e, body, i - 1)
            if run:                    # (accesses through one register: one range check, ctarun.py)
                ctarun.emit_run(e, body[i - 1:i - 1 + run])
                i += run - 1
                continue
            kind = _fast_kind(e, ins) if fast and ins.opcode in ("ld", "ldu", "st") else None
            if kind == "shared":
                (_fast_shared_store if ins.opcode == "st" else _fast_shared_load)(e, ins)
            elif kind == "kparam":
                _fast_kparam_load(e, ins)
            elif kind == "global":
                (_fast_global_store if ins.opcode == "st" else _fast_global_load)(
                    e, ins, fast in ("check", "first", "affcheck"))
            else:
                e.emit(ins)
        return " ".join(e.lines[start:])
    finally:
        del e.lines[start:]
        e.aff_mode = ""
        e.reusable = None


def _reused(body: list[ir.Instr]) -> set[str]:
    """The address operands (threadgen.reuse_key) of more than one access of a loop's body."""
    seen: set[str] = set()
    again: set[str] = set()
    for ins in body:
        if ins.opcode in ("ld", "ldu", "st") and ins.srcs:
            k = threadgen.reuse_key(ins)
            (again if k in seen else seen).add(k)
    return again


def _rerunnable(body: list[ir.Instr], regs) -> bool:
    """Whether running a loop's body again for a thread computes the same: no register it writes is read before
    it is written."""
    every = set().union(*(reads_writes(x, regs, True)[1] for x in body))
    written: set[str] = set()
    for ins in body:
        reads, writes = reads_writes(ins, regs, True)
        if any(r in every and r not in written for r in reads):
            return False
        written |= set(writes)
    return True


def _fast_shared_load(e: CtaEmitter, ins: ir.Instr) -> None:
    """An unguarded shared load checked as runtime/spaces.py checks it (inside the CTA's window, aligned to the
    access size) without a branch: a bad access sets `bad` and reads zeros at offset 0 instead. Offsets from 32-bit
    registers stay 32-bit and the masks arithmetic, so that the compiler makes the loads a vector gather."""
    space, t, dsts, size, lt = load_form(e, ins)
    o, ok = _fast_shared_offset(e, ins, size * len(dsts))
    for k, d in enumerate(dsts):
        if isinstance(d, ir.Reg) and d.name == "_":
            continue
        x, ut = e.fresh("fx"), utype(8 * size)
        e.lines.append(f"{ut} {x}b; memcpy(&{x}b, sb + {o}i + {k * size}, {size}); "
                       f"{ctype(lt)} {x} = ({ctype(lt)})({x}b & (({ut})0 - {ok}));")
        e.write(d, lt, x, ins)


def _fast_shared_offset(e: CtaEmitter, ins: ir.Instr, vsize: int) -> tuple[str, str]:
    """C statements of a shared access's checked offset (`o`i: 0 for a bad access) and its check (`ok`: 1 or 0)."""
    try:
        kind, _, off = e.address(ins.srcs[0], ins)
    except CudaError:
        raise NoC from None
    if kind not in ("reg", "const"):
        raise NoC
    e.shared_sizes.add(vsize)
    e.loop_sizes.add(vsize)
    o, ok = e.fresh("fo"), e.fresh("fk")
    ab = e.aff.get(id(ins))
    narrow = kind == "reg" and e.regs.get(ins.srcs[0].base.name) == 32
    if ab is not None and e.aff_mode in ("affine", "affcheck"):
        # (the attempt's offset; the thread's own compared with it, but in a store's second pass, after affcheck)
        if ins.opcode != "st" or e.aff_mode == "affcheck":
            if narrow:
                a = f"(uint32_t)({e.src(ir.Reg(ins.srcs[0].base.name), 'u32', ins)} + UINT32_C({off & 0xFFFFFFFF:#x}))"
                e.lines.append(ctaaffine.compare32(a, f"(uint32_t){ctaaffine.affine_offset(ab, vsize)}"))
            else:
                e.lines.append(ctaaffine.compare64(f"(uint64_t)({address_expr(e, ins, kind, off)})",
                                                   ctaaffine.affine_offset(ab, vsize)))
        e.lines.append(f"uint64_t {o}i = {ctaaffine.affine_offset(ab, vsize)};")
        return o, "1"
    if narrow:
        a = f"(uint32_t)({e.src(ir.Reg(ins.srcs[0].base.name), 'u32', ins)} + UINT32_C({off & 0xFFFFFFFF:#x}))"
        e.lines.append(f"uint32_t {o} = {a}; uint32_t {ok} = ({o} <= shlim{vsize}) & "
                       f"(({o} & {vsize - 1}u) == 0) & shok{vsize}; bad |= {ok} ^ 1; "
                       f"int32_t {o}i = (int32_t)({o} & (0u - {ok}));")
    else:
        a = address_expr(e, ins, kind, off)
        e.lines.append(f"int64_t {o} = (int64_t)({a}); uint32_t {ok} = ({o} >= 0) & ({o} <= shl - {vsize}) & "
                       f"(({o} & {vsize - 1}) == 0); bad |= {ok} ^ 1; int64_t {o}i = {ok} ? {o} : 0;")
    if ab is not None and e.aff_mode == "first":
        e.lines.append(ctaaffine.record(ab, o))
        e.aff_ranges.append(ctaaffine.shared_range(ab, vsize))
    return o, ok


def _fast_shared_store(e: CtaEmitter, ins: ir.Instr) -> None:
    """An unguarded shared store as _fast_shared_load checks it (a bad one writes at offset 0: _fast_code); the
    values as threadgen's stores make them (store_form)."""
    space, size, ct, vals = threadgen.store_form(e, ins)
    vec = len(vals)
    o, ok = _fast_shared_offset(e, ins, size * vec)
    if e.aff_mode in ("first", "affcheck"):
        return                         # (an attempt's address only: ctaaffine.py)
    for k, v in enumerate(vals):
        x = e.fresh("fv")
        e.lines.append(f"{ct} {x} = {v}; memcpy(sb + {o}i + {k * size}, &{x}, {size});")


def _fast_global_address(e: CtaEmitter, ins: ir.Instr, vsize: int, check: bool = True) -> str:
    """C statements of a global access's host pointer (returned: the heap's base `hb` and an offset, which the
    compiler makes a vector gather) checked as threadgen's TG checks an address against its pointer's hint
    (inside that allocation, aligned to the access size) without a branch: a bad address sets `bad` and points at
    the allocation's start instead (masks, not a select). check False: the address passed a checking pass already
    (a store's second pass)."""
    try:
        kind, _, off = e.address(ins.srcs[0], ins)
    except CudaError:
        raise NoC from None
    hint = e.hint((ins.srcs[0].base.name if kind == "reg" else off, vsize))
    e.loop_conds.add(f"{hint}lim")
    a, p = e.fresh("ga"), e.fresh("gp")
    ab = e.aff.get(id(ins))
    if ab is not None and e.aff_mode in ("affine", "affcheck"):
        # (the attempt's address; the thread's own compared with it, but in a store's second pass, after affcheck)
        if ins.opcode != "st" or e.aff_mode == "affcheck":
            e.lines.append(ctaaffine.compare64(f"(uint64_t)({address_expr(e, ins, kind, off)})",
                                               ctaaffine.affine_offset(ab, vsize)))
        return f"(hb + {ctaaffine.affine_offset(ab, vsize)})"
    e.lines.append(f"uint64_t {a} = (uint64_t)({address_expr(e, ins, kind, off)});")
    if ab is not None and e.aff_mode == "first":
        e.lines.append(ctaaffine.record(ab, a))
        e.aff_ranges.append(ctaaffine.global_range(ab, vsize, hint))
    if not check:
        return f"(hb + {a})"
    ok = e.fresh("gk")
    e.lines.append(f"uint32_t {ok} = ({a} - {hint}lo < {hint}lim) & (({a} & {vsize - 1}) == 0); bad |= {ok} ^ 1; "
                   f"uint64_t {p} = {a} ^ (({a} ^ {hint}lo) & ((uint64_t){ok} - 1));")
    return f"(hb + {p})"


def _fast_global_load(e: CtaEmitter, ins: ir.Instr, check_pass: bool = False) -> None:
    """An unguarded global (or constant) load through _fast_global_address (a bad one reads the allocation's
    first bytes: the loop runs again with suspensions)."""
    space, t, dsts, size, lt = load_form(e, ins)
    _fast_read(e, ins, _fast_global_address(e, ins, size * len(dsts)), dsts, size, lt)


def _fast_kparam_load(e: CtaEmitter, ins: ir.Instr) -> None:
    """A kernel parameter by name: its bytes checked once per launch (threadgen.kparam_pointer; the loop runs when
    they are inside the parameters)."""
    space, t, dsts, size, lt = load_form(e, ins)
    try:
        off = e.address(ins.srcs[0], ins)[2]
    except CudaError:
        raise NoC from None
    p = threadgen.kparam_pointer(e, off, size * len(dsts))
    e.loop_conds.add(f"({p} != 0)")
    _fast_read(e, ins, p, dsts, size, lt)


def _fast_read(e: CtaEmitter, ins: ir.Instr, p: str, dsts: list, size: int, lt: str) -> None:
    """Each element of a load at pointer p, widened or narrowed to its register (as threadgen's loads)."""
    for k, d in enumerate(dsts):
        if isinstance(d, ir.Reg) and d.name == "_":
            continue
        x = e.fresh("fx")
        e.lines.append(f"{ctype(lt)} {x} = 0; memcpy(&{x}, {p} + {k * size}, {size});")
        e.write(d, lt, x, ins)


def _fast_global_store(e: CtaEmitter, ins: ir.Instr, check_pass: bool = False) -> None:
    """An unguarded global store: in the first pass its address only checked, in the second (run only when every
    address of the loop passed the first) stored without a check."""
    space, size, ct, vals = threadgen.store_form(e, ins)
    p = _fast_global_address(e, ins, size * len(vals), check=check_pass)
    if check_pass:
        e.lines.append(f"(void){p};")
        return
    for k, v in enumerate(vals):
        x = e.fresh("fv")
        e.lines.append(f"{ct} {x} = {v}; memcpy({p} + {k * size}, &{x}, {size});")


def _shared_at_cta(code: str) -> str:
    """threadgen's shared accesses (TS: the window of lane i's CTA) with the CTA's window read once (TSC)."""
    return code.replace("TS(M, i, ", "TSC(sb, shl, ")


def _bytes(bits: int) -> int:
    """Bytes of a register's element (cgen.utype)."""
    return 8 if bits > 32 else 4 if bits > 16 else 2 if bits > 8 else 1


class CtaCode(ThreadCode):
    """A kernel's CTA-at-a-time function (kernel_source). It runs through ThreadCode's driver (run, _run_chunk: the
    same suspensions, accounting and unfit rule), with its register file where the thread code has its barrier
    array."""

    res_dispatch = RES_DISPATCH

    @property
    def tick_scale(self) -> int:
        """R_TICK every 16 * threadgen.TICK_EVERY thread-instructions (2^22: about 0.4-2 ms of vectorised loops,
        10-20 ms at worst in scalar diverged ones): a thread-instruction costs 0.1-0.4 ns here against 1-6 ns a
        thread at a time, and at 2^18 the returns to Python (accounting, the turn, the chunk's MemCtx, the
        allocation hints found again) took a third of scan_batches' chunk time in the daemon (py-spy:
        bench/README.md, "tenth step"). CTAs that talk: every ctaatomic.TALK_TICK_SCALE * TICK_EVERY (2^20), their
        slice before a waiting CTA is set aside counted in thread-instructions (ctaatomic._slice_ticks)."""
        return ctaatomic.TALK_TICK_SCALE if self.registers.talking else 16

    def __init__(self, fn, name: str, state: int, registers: ctaatomic.CtaRegisters) -> None:
        super().__init__(fn, name, state)
        self.registers = registers
        self.rf_bytes = registers.nbytes
        self.set_aside = 0            # CTAs set aside while others ran (ctaatomic.run_talking), all chunks together
        self.helped = 0               # CTAs (and resumptions) a helper thread ran (ctaatomic._Talk), all chunks together

    def state_words(self, ctasize: int) -> int:
        return self.state + (self.rf_bytes + 7) // 8

    def _run_chunk(self, S, L, T, st, ctx, txp, stp, told) -> None:
        try:
            if self.registers.talking:       # CTAs that talk: one at a time, set aside when they wait
                ctaatomic.run_talking(self, S, L, T, st, ctx, txp, stp)
            else:
                super()._run_chunk(S, L, T, st, ctx, txp, stp, told)
        except CudaError as e:
            if str(e).endswith("native code returned -2"):   # (dispatch: a PC past the last block)
                raise CudaError("cudaErrorLaunchFailure", f"{self.name}: fell off the end of the code") from None
            raise
