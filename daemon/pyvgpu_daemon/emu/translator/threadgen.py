"""Thread-at-a-time native code: a whole kernel as one C function that runs the chunk's threads one after the other.

The interpreter runs a chunk in lockstep, one array per register over all its lanes (NumPy calls, or cgen.py's
native runs). For a kernel of millions of threads doing a few loads and stores each, every instruction is a pass
over arrays larger than the caches (bench/README.md, "Issue 19 part 6, fourth step"). Here each thread's registers
are C locals, control flow is gotos, and one loop runs thread after thread.

Only kernels that cannot tell the difference get it (`eligible_reason`): no warp operation, no barrier but
`bar.sync 0` for all threads (__syncthreads: a CTA then runs in phases, kernel_source), every instruction with a C
form (cgen.py's ALU forms, which a differential test ties to the NumPy ops; the loads and stores below; the special
registers of a thread's position), control flow of branches and exit only, and nothing that lets threads observe
each other's order (Kernel.independent_ctas: no atomics, fences, volatile or scoped accesses, calls; volatile
shared accesses only where no thread can read another's store between two barriers: _warp_synchronous_reason).
Such a kernel's results are the lockstep interpreter's, bit for bit, except where threads race without
synchronisation (undefined on a GPU). A kernel with barriers runs so only where that is faster (slower_reason).

The function never calls out: it *suspends*. It saves the thread's registers and its position in a state array
(`st`, layout ST_*) and returns R_SLOW or R_TICK; Python does what was asked and calls it again, and it resumes
where it stopped (a switch to the site's label). So no Python code runs on the thread of a C call (an error is
raised where the launch runs), and a suspension saves only the registers live at its site.
- Memory: every load and store is checked as runtime/spaces.py checks it (cgen's MemCtx: alignment to the access
  size, every byte inside one live allocation or inside its window). An access the C code cannot serve (a fault, a
  reserved VMM range, a peer's memory, mapped host memory) suspends with R_SLOW; `_slow_access` serves that one
  access as runtime/spaces.py does, or raises the error it always raises. After a fault the launch stops with that
  error, the context sticky-broken as after a GPU fault, with the stores before it made.
- Bounds: it counts the thread-instructions it runs and suspends with R_TICK every TICK_EVERY of them, at a backward
  branch or a thread's end: the launch's instruction budget, deadline, cancellation and turn (fair sharing between
  sessions) are checked there (Launch.account) as after the interpreter's steps, so an endless loop stops as before.
"""
from __future__ import annotations

import ctypes

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..layout import LOC_WIN, PAR_WIN, SH_WIN, WIN_SIZE
from ..native import log
from ..ptx import ir
from ..ptx.predefined import SPECIAL_REGISTERS
from ..ptx.types import BITS, SIGNED
from .cgen import PRELUDE, CEmitter, NoC, address_expr, ctype, load_form, store_value, utype
from .instrs import _memmods
from . import control
from .cfg import shares_across_ctas
from .liveness import reads_writes, successors

# Extra compiler flags (emu/native.py): with -march=native's own tuning on this host's AVX-512 CPU, GCC 12 spilled the
# kernel function's many live integers into vector registers, which made it 2x slower than with generic tuning
# (instruction selection only: the same IEEE semantics).
FLAGS = ("-mtune=generic",)

UNFIT_SLOW_MIN, UNFIT_SLOW_SHARE = 64, 1 / 16   # ThreadCode.unfit: more accesses served by Python than this
TICK_EVERY = 1 << 18            # thread-instructions between two R_TICK suspensions (about 0.1-1 ms)

# Return codes of the kernel function
R_DONE, R_SLOW, R_TICK = 0, 2, 3
# The state array (uint64): the site to resume at (0: start), thread, thread-instructions so far, the thread's
# position in its CTA and its CTA, an R_SLOW request (kind, address, size, store?, 16 bytes of value), the CTA's
# barrier phase (0: its threads run from the start; 1: they resume from the barrier array) and how many of its
# threads have arrived at a barrier in this phase, registers.
ST_RESUME, ST_I, ST_CNT, ST_LIC, ST_CTA, ST_KIND, ST_ADDR, ST_SIZE, ST_WRITE, ST_VAL, ST_PH, ST_NARR, ST_REGS = \
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13

# Memory kinds of an R_SLOW request: what its address is an address of.
K_GLOBAL, K_SHARED, K_LOCAL, K_PARAM, K_KPARAM = range(5)

# The special registers a thread's position gives (computed per thread from the chunk's geometry, as
# runtime/special.py computes them per lane); a kernel reading any other is not eligible.
_POSITION = {f"%{k}.{a}" for k in ("tid", "ntid", "ctaid", "nctaid") for a in "xyz"} | {
    "%laneid", "%warpid", "%nwarpid", "%nsmid", "%smid"} | {f"%lanemask_{k}" for k in ("eq", "lt", "le", "ge", "gt")}

PRELUDE_T = PRELUDE + f"""
typedef struct {{ int64_t cs, bx, by, bz, gx, gy, gz, cta0, nsm, every; }} TX;
/* a global access: first the allocation of the previous access through the same pointer with the same size (lo,
 * lim: a - lo < lim holds for the addresses whose s bytes lie in it; lim 0: none), locals of the kernel function
 * (stores through uint8_t pointers cannot alias them); else a search, out of line. hd: heap - base. Each resolver
 * returns the address of an access of s bytes, or 0 with (*k, *o) saying what to ask Python for. */
typedef struct {{ uint8_t *p; uint64_t lo, hi; }} Hit;
static __attribute__((noinline)) Hit GMISS(const MemCtx *M, uint64_t a, uint64_t s) {{
    Span h = {{1, 0}}; Hit r; r.p = (uint8_t *)PGS(M, a, s, &h); r.lo = h.lo; r.hi = h.hi; return r;
}}
static __attribute__((noinline)) uint8_t *TGMISS(const MemCtx *M, uint64_t a, uint64_t s, uint64_t *lo,
        uint64_t *lim, int64_t *k, uint64_t *o) {{
    *k = {K_GLOBAL}; *o = a;
    Hit r = GMISS(M, a, s);
    if (r.p) {{ *lo = r.lo; *lim = r.hi - r.lo - s + 1; }}
    return r.p;
}}
/* (the hint's check inlined wherever the compiler optimises, -Og included: called there, it was a tenth of onesweep's
 * time at -Og, bench/README.md "fifteenth step"; its miss out of line. (*k, *o) are read only where it returns 0) */
#ifdef __OPTIMIZE__
#define TG_INLINE __attribute__((always_inline))
#else
#define TG_INLINE
#endif
static inline TG_INLINE uint8_t *TG(const MemCtx *M, uintptr_t hd, uint64_t a, uint64_t s, uint64_t *lo,
        uint64_t *lim, int64_t *k, uint64_t *o) {{
    if (__builtin_expect(a - *lo < *lim && !(a & (s - 1)), 1)) return (uint8_t *)(uintptr_t)(a + hd);
    return TGMISS(M, a, s, lo, lim, k, o);
}}
static inline uint8_t *TS(const MemCtx *M, int64_t i, uint64_t off, uint64_t s, int64_t *k, uint64_t *o) {{
    *k = {K_SHARED}; *o = off; return (uint8_t *)PS(M, (int64_t)off, (int64_t)s, i);
}}
static inline uint8_t *TL(const MemCtx *M, int64_t i, uint64_t off, uint64_t s, int64_t *k, uint64_t *o) {{
    *k = {K_LOCAL}; *o = off; return (uint8_t *)PL(M, (int64_t)off, (int64_t)s, i);
}}
static inline uint8_t *TP(const MemCtx *M, uint64_t off, uint64_t s, int64_t *k, uint64_t *o) {{
    *k = {K_PARAM}; *o = off; return (uint8_t *)PP(M, (int64_t)off, (int64_t)s);
}}
static inline uint8_t *TGEN(const MemCtx *M, uintptr_t hd, int64_t i, uint64_t a, uint64_t s, uint64_t *lo,
                            uint64_t *lim, int64_t *k, uint64_t *o) {{
    if (a - UINT64_C({SH_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return TS(M, i, a - UINT64_C({SH_WIN:#x}), s, k, o);
    if (a - UINT64_C({LOC_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return TL(M, i, a - UINT64_C({LOC_WIN:#x}), s, k, o);
    if (a - UINT64_C({PAR_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return TP(M, a - UINT64_C({PAR_WIN:#x}), s, k, o);
    return TG(M, hd, a, s, lo, lim, k, o);
}}
/* a generic store: the kernel-parameter window is read-only (Python raises the store's error) */
static inline uint8_t *TGENW(const MemCtx *M, uintptr_t hd, int64_t i, uint64_t a, uint64_t s, uint64_t *lo,
                             uint64_t *lim, int64_t *k, uint64_t *o) {{
    if (a - UINT64_C({PAR_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) {{ *k = {K_PARAM}; *o = a - UINT64_C({PAR_WIN:#x}); return 0; }}
    return TGEN(M, hd, i, a, s, lo, lim, k, o);
}}
static inline uint8_t *TPR(const MemCtx *M, int64_t i, uint64_t a, uint64_t s, int64_t *k, uint64_t *o) {{
    if (a - UINT64_C({PAR_WIN:#x}) < UINT64_C({WIN_SIZE:#x})) return TP(M, a - UINT64_C({PAR_WIN:#x}), s, k, o);
    return TL(M, i, a, s, k, o);
}}
static inline uint8_t *TKP(const MemCtx *M, uint64_t off, uint64_t s, int64_t *k, uint64_t *o) {{
    /* a kernel parameter by name (runtime/special.ParamBuffer.scalar: any alignment) */
    *k = {K_KPARAM}; *o = off;
    return off + s <= (uint64_t)M->psize ? (uint8_t *)M->pbuf + off : 0;
}}
"""


def eligible_reason(kernel) -> str | None:
    """Why a kernel cannot run a thread at a time (None: it can, as far as its blocks go; the C forms decide the
    rest)."""
    return blocks_reason(kernel) or _warp_synchronous_reason(kernel)


def blocks_reason(kernel, sharing=None, bar_red: bool = False, warp_ok=None) -> str | None:
    """Why a kernel's blocks cannot run as whole-kernel C code (this module's and ctagen.py's): a sharing access
    (`sharing`, default _sharing_reason; ctagen.py passes ctaatomic.sharing_reason), a call, a barrier other than
    `bar.sync 0` for all threads (or `bar.red` on barrier 0 for all threads, where bar_red: ctagen.py), a warp
    operation (but those warp_ok(terminator) accepts: ctawarp.supported for ctagen.py), another terminator than a
    branch or exit (None: none of those)."""
    why = (sharing or _sharing_reason)(kernel)
    if why is not None:
        return why
    if kernel.flat.calls or kernel.flat.out_of_line:
        return "out-of-line calls"
    for b in kernel.blocks:
        if b.kind == "bar" and not _plain_sync(kernel, b.term, bar_red):
            return f"a barrier other than bar.sync 0 for all threads at line {b.term.line}"
        if b.kind == "warp" and not (warp_ok is not None and warp_ok(b.term)):
            return f"a warp operation at line {b.term.line}"
        if b.kind == "plain" and b.term is not None and b.term.opcode not in ("bra", "ret", "exit"):
            return f"{b.term.opcode} at line {b.term.line}"
    return None


def slower_reason(kernel) -> str | None:
    """Why an eligible kernel would run slower a thread at a time than as lockstep native code (None: it would
    not, as far as its shape tells). A thread arriving at a barrier saves the registers live there and resumes by
    restoring them, about as costly as the lockstep code's pass over a chunk for a few instructions: a kernel whose
    phases between barriers are a few instructions each ran at half the speed (scan_batches' scanTiles, a log-step
    scan of 4-7 instructions per phase: 0.5-0.65x of the lockstep native code), one that loops between two barriers
    2.1x faster (a grid-stride sum before a block reduction); bench/README.md, "Issue 19 part 6, sixth step". So a
    kernel with barriers runs a thread at a time only where a loop runs between two barriers (its build costs a
    compiler run of its own; the lockstep code vectorises short phases across lanes)."""
    blocks = kernel.blocks
    if not any(b.kind == "bar" for b in blocks):
        return None
    n = len(blocks)
    # the CFG without the edges out of barriers: a cycle there is a loop inside one phase
    succ = [[] if b.kind == "bar" else successors(b, kernel.labels, n) for b in blocks]
    state = [0] * n                    # 0 unvisited, 1 on the stack, 2 done
    for root in range(n):
        if state[root]:
            continue
        stack = [(root, iter(succ[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state[nxt] == 1:
                return None
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
    return "barriers with no loop between two of them (a thread at a time is no faster there)"


def _plain_sync(kernel, t: ir.Instr, bar_red: bool = False) -> bool:
    """`bar.sync 0` / `barrier.sync 0` for all threads, unguarded (__syncthreads): the lockstep runtime's plain path
    (runtime/barriers.py: a CTA goes on once each of its threads waits at some such barrier or has exited), which
    the thread code reproduces; bar.red, ids, counts and bar.arrive stay with the runtime."""
    if kernel.named_barriers:
        return False
    try:
        return control.plain_barrier(t) and (bar_red or control.bar_form(t)[1] is None)
    except CudaError:
        return False


def _shared_space(ins: ir.Instr) -> bool:
    return any(m in ("shared", "shared::cta") for m in ins.mods)


def _sharing_reason(kernel) -> str | None:
    """Kernel.independent_ctas (cfg.shares_across_ctas; its volatile shared accesses: _warp_synchronous_reason
    decides)."""
    for b in kernel.blocks:
        for ins in b.instrs + ([b.term] if b.term is not None else []):
            if shares_across_ctas(ins):
                return "atomics, fences, volatile or scoped accesses, or calls"
    return None


def _warp_synchronous_reason(kernel) -> str | None:
    """Why a kernel's volatile shared loads might see another order of the CTA's threads than the lockstep
    interpreter gives them (None: they cannot). Between two barriers the thread code runs one thread after another,
    the interpreter instruction by instruction over all of them; the two agree on every program whose threads do
    not exchange data between barriers. Warp-synchronous code does (`volatile` shared memory read by another lane of
    the warp without a barrier, as old reductions and scans do), and a GPU's warps give it the lockstep answer.
    So a volatile shared load is allowed only where no store to shared (or generic) memory may come before it or
    after it between the same barriers: then it reads what was there at the barrier in both orders.

    A thread reading back its own store is left out on purpose: which stores are a thread's own needs the address
    to differ between the lanes of every warp, which depends on the block's shape (%tid.x repeats within a warp of
    an 8x4 block, %tid.y within a warp of a 32x8 one) and on values (a loaded index, a register multiplier), and a
    rule that tried (review5) let through shapes where a GPU warp and the lockstep path read another lane's value.
    Such kernels run as lockstep code, with the GPU's answer."""
    blocks, n = kernel.blocks, len(kernel.blocks)
    succ = [successors(b, kernel.labels, n) for b in blocks]
    preds: list[list[int]] = [[] for _ in blocks]
    for i, ss in enumerate(succ):
        for j in ss:
            preds[j].append(i)

    def instrs(b):
        return b.instrs if b.kind == "bar" or b.term is None else b.instrs + [b.term]

    def stores(b) -> bool:
        return any(_stores(x) for x in instrs(b))

    # forward: whether a store may have happened since the last barrier where a block starts (a block of kind
    # "bar" ends at a barrier)
    before = [False] * n
    changed = True
    while changed:
        changed = False
        for b in blocks:
            v = any(blocks[p].kind != "bar" and (before[p] or stores(blocks[p])) for p in preds[b.index])
            if v != before[b.index]:
                before[b.index] = v
                changed = True
    # backward: whether a store may follow before the next barrier where a block ends
    ahead = [False] * n
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            v = b.kind != "bar" and any(ahead[x] or stores(blocks[x]) for x in succ[b.index])
            if v != ahead[b.index]:
                ahead[b.index] = v
                changed = True
    for b in blocks:
        seq = instrs(b)
        for k, ins in enumerate(seq):
            if ins.opcode in ("ld", "ldu") and "volatile" in ins.mods and _shared_space(ins):
                if before[b.index] or ahead[b.index] or any(_stores(x) for x in seq[:k] + seq[k + 1:]):
                    return (f"a volatile shared load at line {ins.line} may read another thread's store between "
                            f"two barriers (warp-synchronous code)")
    return None


def _stores(ins: ir.Instr) -> bool:
    """A store that may write shared memory (the shared space, or generic addresses)."""
    if ins.opcode != "st":
        return False
    return _shared_space(ins) or not any(m in ("global", "local", "param", "const") for m in ins.mods)


class ThreadEmitter(CEmitter):
    """cgen's C forms with loads and stores that happen at once (thread-at-a-time: no lockstep order to keep) and a
    slow path into Python for an access the C code cannot serve."""

    def __init__(self, regs, imm, address, kernel) -> None:
        super().__init__(regs, imm, address)
        self.kernel = kernel
        self.tmp = 0
        self.hint_of: dict = {}
        self.sites = 0                    # suspension sites (R1, R2, ...: `suspend`)
        self.restores: dict[int, list[str]] = {}   # site -> the registers it saved
        self.tail: list[str] = []         # each site's saving code (after the thread loop)
        self.slots: dict[str, int] = {}   # register -> its word in the state array
        self.live: set[str] = set()       # registers live at the instruction being emitted (kernel_source)
        self.kparams: dict = {}           # (offset, size) -> the pointer to a kernel parameter's bytes (or 0)
        self.prologue: list[str] = []     # statements before the thread loop
        # (space, base register or None, offset, size) -> the C pointer of an unguarded access made earlier in the
        # block, through the same unchanged register: another access there needs no new check (0: not served by the
        # C code: the check runs again)
        self.checked: dict = {}
        # the address operands (reuse_key) of accesses a later access of the code being emitted may reuse, None:
        # any; only their pointers are kept in `checked` (and reset at each later suspension site's resumption)
        self.reusable: set | None = None

    def emit(self, ins: ir.Instr) -> None:
        if ins.opcode in ("ld", "ldu"):
            _tld(self, ins)
        elif ins.opcode == "st":
            _tst(self, ins)
        else:
            if any(isinstance(o, (ir.Sym, ir.Addr)) for o in ins.srcs) and ins.opcode in ("mov", "cvta"):
                ins = _constant_address(self, ins)
            super().emit(ins)
        written = reads_writes(ins, self.regs, True)[1]
        if written:
            self.checked = {key: p for key, p in self.checked.items() if key[1] not in written}

    def label(self) -> None:
        """A block starts: another path may lead here, so no earlier check holds."""
        self.checked = {}

    def hint(self, base) -> str:
        """The allocation hint (TG's lo, lim) of the global and generic accesses of one size through one base register
        (or at one constant address): accesses through one pointer mostly stay in one allocation."""
        if base not in self.hint_of:
            self.hint_of[base] = f"hint{self.hints}"
            self.hints += 1
        return self.hint_of[base]

    def suspend(self, rc: int, request: str = "", live: set[str] | None = None) -> str:
        """C statements suspending the function at a new site (R_SLOW: `request` fills the request fields): the
        registers live there (`live`, else those of the instruction being emitted) saved, each in its slot; then
        that site's resume label: after it, no pointer checked before the suspension holds (their locals are not
        saved). Saving only live registers keeps dead ones out of the hot code's registers."""
        self.sites += 1
        k = self.sites
        live = sorted(self.live if live is None else live)
        self.restores[k] = live
        save = " ".join(f"st[{self.slot(r)}] = (uint64_t){self.var(r)};" for r in live)
        # the saving out of the hot code (a cold label after the thread loop: registers are the function's locals)
        self.tail.append(f"S{k}: __attribute__((cold)); {save} st[{ST_RESUME}] = {k}; rc = {rc}; goto suspend;")
        stale = "".join(f" {p} = 0;" for p in self.checked.values())
        return f"{request} goto S{k}; R{k}: ;{stale}"

    def slot(self, r: str) -> int:
        if r not in self.slots:
            self.slots[r] = ST_REGS + len(self.slots)
        return self.slots[r]

    def fresh(self, stem: str) -> str:
        self.tmp += 1
        return f"{stem}{self.tmp}"


def _constant_address(e: ThreadEmitter, ins: ir.Instr) -> ir.Instr:
    """mov/cvta of a variable's address (`mov.u64 %rd, smem;`): the constant the NumPy code uses (Codegen.src)."""
    o = ins.srcs[0]
    base, off = (o, 0) if isinstance(o, ir.Sym) else (o.base, o.offset)
    if not isinstance(base, ir.Sym) or e.kernel.frame_of(base.name) is not None:
        raise NoC
    try:
        a = e.kernel.sym_address(base.name, ins) + off
    except CudaError:
        raise NoC from None
    bits = 64
    for m in ins.mods:
        if m in BITS and m != "pred":
            bits = BITS[m]
    return ir.Instr(ins.opcode, ins.mods, ins.dsts, [ir.Imm(a & ((1 << bits) - 1))] + list(ins.srcs[1:]),
                    ins.guard, ins.line, ins.text)


def _access(e: ThreadEmitter, ins: ir.Instr, space: str, vsize: int, store: bool) -> tuple[str, str, str]:
    """(C statements declaring pointer p, kind k and slow-path address o of a checked access, p, the guard test)."""
    try:
        kind, _, off = e.address(ins.srcs[0], ins)
    except CudaError:
        raise NoC from None
    k, o, p = e.fresh("tk"), e.fresh("to"), e.fresh("tp")
    if kind == "kparam":
        if space != "param" or store:
            raise NoC                      # the NumPy code reports it
        where = f"{kparam_pointer(e, off, vsize)}; {k} = {K_KPARAM}; {o} = UINT64_C({off:#x})"
    else:
        if kind not in ("reg", "const"):
            raise NoC
        if space == "param" and kind != "reg":
            space = "local"                # call-sequence .param variables live in the local frame
        if space == "const":
            if store:
                raise NoC
            space = "global"
        a = address_expr(e, ins, kind, off)
        if space in ("global", "generic"):
            hint = e.hint((ins.srcs[0].base.name if kind == "reg" else off, vsize))
            fn = "TG(M, hd" if space == "global" else "TGENW(M, hd, i" if store else "TGEN(M, hd, i"
            where = f"{fn}, {a}, {vsize}, &{hint}lo, &{hint}lim, &{k}, &{o})"
        elif space == "shared":
            where = f"TS(M, i, {a}, {vsize}, &{k}, &{o})"
        elif space == "local":
            where = f"TL(M, i, {a}, {vsize}, &{k}, &{o})"
        elif space == "param":
            if store:
                raise NoC                  # kernel parameters are read-only; call sequences are out of line
            where = f"TPR(M, i, {a}, {vsize}, &{k}, &{o})"
        else:
            raise NoC
    if ins.guard is not None and e.regs.get(ins.guard[0]) != 1:
        raise NoC
    decl = f"int64_t {k}; uint64_t {o}; uint8_t *{p} = {where};"
    if ins.guard is None:
        # (a generic load's check does not hold for a store: the parameter window is read-only)
        key = (space, ins.srcs[0].base.name if kind == "reg" else None, off, vsize, store and space == "generic")
        old = e.checked.get(key)
        if old is not None:
            decl = f"int64_t {k}; uint64_t {o}; uint8_t *{p} = {old}; if (!{p}) {p} = {where};"
        if e.reusable is None or reuse_key(ins) in e.reusable:
            e.checked[key] = p
    return decl, p, (k, o)


def reuse_key(ins: ir.Instr) -> str:
    """An access's address operand as written: accesses whose keys differ never reuse each other's check."""
    return repr(ins.srcs[0])


def kparam_pointer(e: ThreadEmitter, off: int, vsize: int) -> str:
    """The C pointer to vsize bytes of the kernel parameters at off (0: past them, Python raises the error): the
    same bytes for every thread, checked once before the thread loop (a kernel's parameters are read-only)."""
    kp = e.kparams.get((off, vsize))
    if kp is None:
        kp = e.kparams[(off, vsize)] = f"kp{len(e.kparams)}"
        e.prologue.append(f"int64_t {kp}k; uint64_t {kp}o; uint8_t *{kp} = TKP(M, UINT64_C({off:#x}), {vsize}, "
                          f"&{kp}k, &{kp}o);")
    return kp


def _tld(e: ThreadEmitter, ins: ir.Instr) -> None:
    """ld/ldu of any space, as instrs._ld: the access checked as a whole, one element per destination, widened or
    narrowed to its register (CEmitter.write)."""
    space, t, dsts, size, lt = load_form(e, ins)
    vsize = size * len(dsts)
    decl, p, slow = _access(e, ins, space, vsize, False)
    xs = [e.fresh("tx") for _ in dsts]
    body = [f"{ctype(lt)} {x} = 0;" for x in xs]
    ask = _request(slow, vsize, False)
    load = (f"if (__builtin_expect({p} != 0, 1)) {{ " +
            " ".join(f"memcpy(&{x}, {p} + {k * size}, {size});" for k, x in enumerate(xs)) +
            f" }} else {{ {e.suspend(R_SLOW, ask)} {p} = 0; " +
            " ".join(f"memcpy(&{x}, (uint8_t *)(st + {ST_VAL}) + {k * size}, {size});" for k, x in enumerate(xs)) +
            " }")
    if ins.guard is None:
        body += [decl, load]          # the pointer at the body's level: later accesses may reuse it (checked)
    else:
        body.append(f"if ({'!' if ins.guard[1] else ''}{e.var(ins.guard[0])}) {{ {decl} {load} }}")
    e.lines.extend(body)
    for d, x in zip(dsts, xs):
        if isinstance(d, ir.Reg) and d.name == "_":
            continue
        e.write(d, lt, x, ins)


def _tst(e: ThreadEmitter, ins: ir.Instr) -> None:
    """st of the global, shared, local and generic spaces, as instrs._st: the access checked as a whole, each
    element the source's low bits (registers sign- or zero-extended from a narrower width, as Codegen.src reads
    them)."""
    space, size, ct, vals = store_form(e, ins)
    vec = len(vals)
    decl, p, slow = _access(e, ins, space, size * vec, True)
    guard = "1" if ins.guard is None else f"{'!' if ins.guard[1] else ''}{e.var(ins.guard[0])}"
    svs = [e.fresh("sv") for _ in vals]
    values = " ".join(f"{ct} {x} = {v};" for x, v in zip(svs, vals))
    fast = " ".join(f"memcpy({p} + {k * size}, &{x}, {size});" for k, x in enumerate(svs))
    fill = " ".join(f"memcpy((uint8_t *)(st + {ST_VAL}) + {k * size}, &{x}, {size});" for k, x in enumerate(svs))
    ask = _request(slow, size * vec, True) + " " + fill
    store = (f"{{ {values} if (__builtin_expect({p} != 0, 1)) {{ {fast} }} else {{ {e.suspend(R_SLOW, ask)} "
             f"{p} = 0; }} }}")
    if ins.guard is None:
        e.lines += [decl, store]
    else:
        e.lines.append(f"if ({guard}) {{ {decl} {store} }}")


def store_form(e: CEmitter, ins: ir.Instr) -> tuple[str, int, str, list[str]]:
    """(space, element size, the C type of an element's bits, each element's C value) of a st with a C form here
    (NoC otherwise)."""
    try:
        space, vec, t = _memmods(ins)
    except CudaError:
        raise NoC from None
    if space == "const" or t in ("f16", "bf16", "f16x2", "bf16x2") or vec > 4:
        raise NoC
    srcs = list(ins.srcs[1].elems) if isinstance(ins.srcs[1], ir.Vec) else [ins.srcs[1]]
    if len(srcs) != vec:
        raise NoC
    size = BITS[t] // 8
    ct = f"uint{8 * size}_t"
    vals = []
    for o in srcs:
        if isinstance(o, ir.Imm):
            v = e.src(o, t, ins)
            vals.append(f"B{BITS[t]}({v})" if t in ("f32", "f64") else f"({ct})({v})")
            continue
        vals.append(f"({ct})({store_value(e, o, t, ins)})")
    return space, size, ct, vals


def _request(slow: tuple[str, str], size: int, store: bool) -> str:
    """C statements filling an R_SLOW request (ST_KIND..ST_WRITE) of an access whose resolver set (kind, address)."""
    k, o = slow
    return f"st[{ST_KIND}] = (uint64_t){k}; st[{ST_ADDR}] = {o}; st[{ST_SIZE}] = {size}; st[{ST_WRITE}] = {int(store)};"


def _special_c(name: str) -> str:
    """The C expression of a position special register for thread i (runtime/special.py's values)."""
    kind, _, axis = name[1:].partition(".")
    if kind in ("ntid", "nctaid"):
        return {"ntid": "b", "nctaid": "g"}[kind] + axis
    if kind in ("tid", "ctaid"):
        lin, d = ("lic", "b") if kind == "tid" else ("cta", "g")
        if axis == "x":       # (a 1-D block or grid: no division)
            return f"({d}1 ? {lin} : {lin} % {d}x)"
        if axis == "y":
            return f"(({lin} / {d}x) % {d}y)"
        return f"({lin} / ({d}x * {d}y))"
    if kind.startswith("lanemask_"):      # (runtime/special.py's _lanemask: bits of the lanes below, at, above)
        eq = "((uint64_t)1 << (lic % 32))"
        return {"lanemask_eq": eq, "lanemask_lt": f"({eq} - 1)", "lanemask_le": f"(({eq} << 1) - 1)",
                "lanemask_ge": f"(~({eq} - 1) & 0xFFFFFFFFu)", "lanemask_gt": f"(~(({eq} << 1) - 1) & 0xFFFFFFFFu)"}[kind]
    return {"%laneid": "(lic % 32)", "%warpid": "(lic / 32)", "%nwarpid": "32", "%nsmid": "X->nsm",
            "%smid": "(cta % X->nsm)"}[name]


# the launch's shape as locals of the kernel function (_special_c's names)
_SHAPE = ("    const int64_t bx = X->bx, by = X->by, bz = X->bz, gx = X->gx, gy = X->gy, gz = X->gz, cs = X->cs;\n"
          "    const int b1 = by * bz == 1, g1 = gy * gz == 1; (void)bx; (void)by; (void)bz; (void)gx; (void)gy;\n"
          "    (void)gz; (void)b1; (void)g1;\n")


def register_widths(kernel, g) -> dict[str, int]:
    """The bits of every register the generated code holds: the kernel's own and the special registers it reads
    (shared by this generator and ctagen.py). Raises NoC for a special register without a C form (_POSITION)."""
    regs = dict(g.reg_width)
    specials = sorted({o.name for b in kernel.blocks for ins in b.instrs + ([b.term] if b.term else [])
                       for o in _operands(ins) if isinstance(o, ir.Reg) and o.name in SPECIAL_REGISTERS})
    for sp in specials:
        if sp not in _POSITION:
            raise NoC
        regs[sp] = BITS[SPECIAL_REGISTERS[sp]]
    return regs


def kernel_source(kernel, g, name: str) -> tuple[str, int, int]:
    """(`int64_t name(int64_t i0, int64_t n, const MemCtx *M, const TX *X, uint64_t *st, uint64_t *bs)`: threads
    i0..n-1 of the chunk one after the other, from the start (st[ST_RESUME] 0) or resumed where it suspended; R_DONE
    when all ran, else R_SLOW / R_TICK with st filled (module docstring); the length of its state array; the words
    per thread of its barrier array `bs` (0: the kernel has no barrier)). Raises NoC when the kernel is not
    eligible.

    Barriers (`bar.sync 0`, eligible_reason): a CTA runs in phases. In a phase each of its threads runs, one after
    the other, until it exits or arrives at a barrier; arriving, it saves its resume site and the registers live
    there in its record of bs (ctasize records; 0: exited) and the next thread goes. When the CTA's last thread
    ends a phase in which some thread arrived, the CTA starts a new phase: each thread resumes at its own site, an
    exited one is skipped; a phase in which no thread arrived ends the CTA. This is the lockstep runtime's plain
    barrier (runtime/barriers.py): the CTA goes on once every thread waits at some barrier or has exited."""
    if eligible_reason(kernel) is not None:
        raise NoC
    regs = register_widths(kernel, g)
    e = ThreadEmitter(regs, g.imm, g.address, kernel)
    labels = kernel.labels
    real = g.reg_width
    nblocks = len(kernel.blocks)
    parks: dict[int, list[str]] = {}       # barrier site -> the registers live there (restored from bs)
    # a thread's record in bs (32-bit words): its resume site (0: exited), then each register live at some barrier,
    # one word (two for 64 bits): small records keep a CTA's records in the L1 cache
    bslots: dict[str, int] = {}

    def bslot(r: str) -> int:
        if r not in bslots:
            if regs[r] > 64:
                raise NoC
            bslots[r] = 1 + sum((_width(regs[x]) + 3) // 4 for x in bslots)
        return bslots[r]
    clean = _clean_at_barriers(kernel, real)
    saves = {b.index: (set(kernel.live[b.index + 1]) if b.index + 1 < nblocks else set()) - clean[b.index]
             for b in kernel.blocks if b.kind == "bar"}
    phase_live = _live_in_phase(kernel, real, saves)
    for b in kernel.blocks:
        e.lines.append(f"B{b.index}: ; cnt += {len(b.instrs) + 1};")
        e.label()
        # the registers live before each instruction: what a suspension there (before its result is written) saves
        cur: set[str] = set().union(*(kernel.live[x] for x in successors(b, labels, nblocks)))
        if b.term is not None and b.kind == "plain":
            cur |= set(reads_writes(b.term, real, True)[0])
        at: list[set[str]] = []
        for ins in reversed(b.instrs):
            reads, writes = reads_writes(ins, real, True)
            cur = (cur - set(writes)) | set(reads)
            at.append(cur)
        at.reverse()
        for ins, live in zip(b.instrs, at):
            mods = set(ins.mods)
            if ins.opcode in ("ld", "ldu", "st") and (mods & {"relaxed", "acquire", "release", "mmio"} or
                                                       ("volatile" in mods and not _shared_space(ins))):
                raise NoC
            e.live = live
            e.emit(ins)
        t = b.term
        if t is None:
            continue
        if b.kind == "bar":                # (eligible_reason: bar.sync 0 for all threads, unguarded)
            k = len(parks) + 1
            live = sorted(kernel.live[b.index + 1]) if b.index + 1 < nblocks else []
            # resuming restores what the thread reads before its next barrier; the rest stays in bs until a later
            # barrier's resumption restores it (unchanged, it needs no saving: _clean_at_barriers)
            parks[k] = [r for r in live if b.index + 1 < nblocks and r in phase_live[b.index + 1]]
            # (a register unchanged since this thread saved it at an earlier barrier is in bs already)
            save = " ".join(f"memcpy(bt + {bslot(r)}, &{e.var(r)}, {_width(regs[r])});" for r in live
                            if r in saves[b.index])
            e.lines.append(f"{{ uint32_t *bt = bs + lic * BW; {save} bt[0] = {k}; narr++; goto next; }} P{k}: ;")
            continue
        test = ""
        if t.guard is not None:
            gname, gneg = t.guard
            if gname not in e.regs or e.regs[gname] != 1:
                raise NoC
            test = f"if ({'!' if gneg else ''}{e.var(gname)}) "
        if t.opcode in ("ret", "exit"):
            e.lines.append(f"{test}goto done;")
            continue
        if any(m != "uni" for m in t.mods) or not t.srcs or not isinstance(t.srcs[0], ir.Sym) or \
                t.srcs[0].name not in labels:
            raise NoC
        tgt = labels[t.srcs[0].name]
        if tgt <= b.index:                 # a backward branch: the launch's bounds are checked here
            e.label()
            e.lines.append(f"{test}{{ if (cnt >= lim) {{ {e.suspend(R_TICK, live=kernel.live[tgt])} }} "
                           f"goto B{tgt}; }}")
        else:
            e.lines.append(f"{test}goto B{tgt};")
    e.label()
    end_tick = e.suspend(R_TICK, live=set())
    named = [(r, v) for r, v in e.names.items() if not r.startswith("__")]
    decls = [f"{utype(regs[r])} {v} = 0;" for r, v in named]
    start = [f"{v} = ({utype(regs[r])}){_special_c(r) if r in SPECIAL_REGISTERS else 0};" for r, v in named]
    # resuming: the position's special registers from the thread's position, the site's registers from its slots
    restore = [f"{v} = ({utype(regs[r])}){_special_c(r)};" for r, v in named if r in SPECIAL_REGISTERS]
    cases = " ".join(f"case {k}: " + "".join(f"{e.var(r)} = ({utype(regs[r])})st[{e.slot(r)}]; " for r in live) +
                     f"goto R{k};" for k, live in e.restores.items())
    bw = 1 + sum((_width(regs[x]) + 3) // 4 for x in bslots) if parks else 0
    hints = "".join(f"    uint64_t hint{k}lo = 0, hint{k}lim = 0;\n" for k in range(e.hints))
    ind = "\n    "
    if parks:
        # a new phase: the thread resumes at its barrier (its position's registers set by `start`), or is skipped
        pcases = " ".join(f"case {k}: " + "".join(f"memcpy(&{e.var(r)}, bt + {bslot(r)}, {_width(regs[r])}); "
                                                   for r in live) + f"goto P{k};" for k, live in parks.items())
        # (before `start`: a resumed thread's dead registers need no zeroing)
        start.insert(0, f"if (ph) {{ const uint32_t *bt = bs + lic * BW; switch (bt[0]) {{ case 0: goto next; "
                        f"{pcases} default: return -1; }} }}")
        start.insert(0, f"if (ph) {{ {' '.join(restore)} }}")
        exited = f"bs[lic * BW] = 0;"
        # the CTA's last thread ends a phase: another phase from its first thread if one arrived at a barrier
        cta_end = "if (lic == cs - 1) { if (narr) { narr = 0; ph = 1; i -= cs; lic = -1; } else ph = 0; }"
    else:
        exited = cta_end = ""
    body = "\n        ".join(start + e.lines)
    src = (f"int64_t {name}(int64_t i0, int64_t n, const MemCtx *restrict M, const TX *restrict X, "
           f"uint64_t *restrict st, uint32_t *restrict bs) {{\n{hints}"
           f"    const uintptr_t hd = (uintptr_t)M->heap - (uintptr_t)M->base; (void)hd; (void)bs;\n{_SHAPE}"
           f"    enum {{ BW = {bw} }};\n"
           + "".join(f"    {x}\n" for x in e.prologue) +
           f"    {ind.join(decls)}\n"
           f"    int64_t rc = {R_DONE}, cnt = 0, lim = X->every, lic = i0 % cs - 1, cta = X->cta0 + i0 / cs, i = i0;\n"
           f"    int64_t ph = 0, narr = 0; (void)ph; (void)narr;\n"
           f"    if (st[{ST_RESUME}]) {{\n"
           f"        i = (int64_t)st[{ST_I}]; cnt = (int64_t)st[{ST_CNT}]; lim = cnt + X->every;\n"
           f"        lic = (int64_t)st[{ST_LIC}]; cta = (int64_t)st[{ST_CTA}];\n"
           f"        ph = (int64_t)st[{ST_PH}]; narr = (int64_t)st[{ST_NARR}];\n"
           f"        {(ind + '    ').join(restore)}\n"
           f"        switch (st[{ST_RESUME}]) {{ {cases} default: return -1; }}\n"
           f"    }}\n"
           f"    for (; i < n; i++) {{\n"
           f"        if (++lic == cs) {{ lic = 0; cta++; }}\n"
           f"        {body}\n"
           f"    done: ;\n"
           f"        {exited}\n"
           f"    next: ;\n"
           f"        if (cnt >= lim) {{ {end_tick} }}\n"
           f"        {cta_end}\n"
           f"    }}\n"
           f"    st[{ST_CNT}] = (uint64_t)cnt; st[{ST_RESUME}] = 0;\n"
           f"    return {R_DONE};\n"
           + "".join(f"{x}\n" for x in e.tail) +
           f"suspend:\n"
           f"    st[{ST_I}] = (uint64_t)i; st[{ST_CNT}] = (uint64_t)cnt; st[{ST_LIC}] = (uint64_t)lic; "
           f"st[{ST_CTA}] = (uint64_t)cta; st[{ST_PH}] = (uint64_t)ph; st[{ST_NARR}] = (uint64_t)narr;\n"
           f"    return rc;\n}}\n")
    return src, ST_REGS + len(e.slots), bw


def _width(bits: int) -> int:
    """Bytes of a register's C variable in a bs record (cgen.utype: 8, 16, 32 or 64 bits; at least a word)."""
    return 8 if bits > 32 else 4 if bits > 16 else 2 if bits > 8 else 1


def _live_in_phase(kernel, regs, saves: dict[int, set[str]]) -> list[set[str]]:
    """Per block, the registers some path from its start reads before it reaches a barrier or the thread's end,
    a barrier reading the registers it saves (`saves`: the C variables must hold them there) (liveness with every
    barrier an end)."""
    blocks, n = kernel.blocks, len(kernel.blocks)
    succ = [[] if b.kind == "bar" else successors(b, kernel.labels, n) for b in blocks]
    seqs = [b.instrs + ([b.term] if b.term is not None and b.kind == "plain" else []) for b in blocks]
    live: list[set[str]] = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            cur = set(saves[b.index]) if b.kind == "bar" else set().union(*(live[x] for x in succ[b.index]))
            for ins in reversed(seqs[b.index]):
                reads, writes = reads_writes(ins, regs, True)
                cur = (cur - set(writes)) | set(reads)
            if cur != live[b.index]:
                live[b.index] = cur
                changed = True
    return live


def _clean_at_barriers(kernel, regs) -> dict[int, set[str]]:
    """Per barrier block, the registers that hold, on every path to its barrier, the value this thread saved in its
    bs record at an earlier barrier (saved or restored there, not written since): the barrier needs not save them
    again. A thread's first barrier saves everything live (nothing is clean at the kernel's entry)."""
    blocks, n = kernel.blocks, len(kernel.blocks)
    preds: list[list[int]] = [[] for _ in blocks]
    for b in blocks:
        for j in successors(b, kernel.labels, n):
            preds[j].append(b.index)
    writes = [set().union(*(reads_writes(ins, regs, True)[1] for ins in b.instrs)) if b.instrs else set()
              for b in blocks]
    out: list = [None] * n                 # None: not reached yet (every register)
    at_end: dict[int, set[str]] = {}
    changed = True
    while changed:
        changed = False
        for b in blocks:
            cin = set() if b.index == 0 else None
            for p in preds[b.index]:
                if out[p] is not None:
                    cin = set(out[p]) if cin is None else cin & out[p]
            if cin is None:
                continue
            c = cin - writes[b.index]
            if b.kind == "bar":
                at_end[b.index] = c
                c = set(kernel.live[b.index + 1]) if b.index + 1 < n else set()
            elif b.term is not None:
                c = c - set(reads_writes(b.term, regs, True)[1])
            if c != out[b.index]:
                out[b.index] = c
                changed = True
    return {i: at_end.get(i, set()) for i in range(n)}


def _operands(ins: ir.Instr):
    for o in list(ins.srcs) + list(ins.dsts):
        if isinstance(o, ir.Vec):
            yield from o.elems
        elif isinstance(o, ir.Addr):
            yield o.base
        else:
            yield o


class TX(ctypes.Structure):
    """The C TX of PRELUDE_T (same fields, same order)."""
    _fields_ = [(f, ctypes.c_int64) for f in ("cs", "bx", "by", "bz", "gx", "gy", "gz", "cta0", "nsm", "every")]


class ThreadCode:
    """A kernel's thread-at-a-time function (kernel_source), run over one chunk by `run`."""

    def __init__(self, fn, name: str, state: int, bar_words: int = 0) -> None:
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p]
        self.fn = fn
        self.name = name
        self.state = state            # words of its state array
        self.bar_words = bar_words    # 32-bit words per thread of its barrier array (0: no barrier)
        self.suspended = 0            # R_SLOW suspensions (accesses served by Python), all chunks together
        # Set once a chunk had more accesses served by Python than UNFIT_SLOW_SHARE of its threads (e.g. a kernel
        # over mapped or managed memory, which the C code never serves): one Python call per access is far slower
        # than the lockstep NumPy code, so later chunks and launches of the kernel run there (runtime/chunk.py).
        self.unfit = False

    tick_scale = 1                    # R_TICK every TICK_EVERY * tick_scale thread-instructions

    def state_words(self, ctasize: int) -> int:
        """The words of the state array and the barrier array after it for CTAs of ctasize threads."""
        return self.state + (ctasize * self.bar_words + 1) // 2

    def run(self, S) -> None:
        """Every thread of chunk S; a fault or a bound of the launch raises its error here."""
        L = S.launch
        T = S.T
        # the state array, then the barrier array: one record per thread of a CTA (kernel_source), owned here so
        # that it outlives a suspension in the middle of a phase; bounded by the kernel's registers times 1024.
        # The chunk keeps both for its next CTAs and launches (of one plan: the same grid, block and code), zeroed
        # (a new 100 KB array a chunk cost more than its zeroing: fresh pages each time)
        kept = S.code_state
        if kept is not None and kept[0] is self:
            _, st, tx, txp = kept
            st.fill(0)
            tx.cta0 = S.cta0
        else:
            st = np.zeros(self.state_words(S.ctasize), np.uint64)
            tx = TX(cs=S.ctasize, bx=L.block[0], by=L.block[1], bz=L.block[2], gx=L.grid[0], gy=L.grid[1],
                    gz=L.grid[2], cta0=S.cta0, nsm=L.sm_count, every=TICK_EVERY * self.tick_scale)
            txp = ctypes.addressof(tx)
            S.code_state = (self, st, tx, txp)
        ctx, stp = S.memctx(), st.ctypes.data
        told = 0                      # vector instructions the launch was told of (thread-instructions / lanes)
        slow0 = self.suspended
        try:
            self._run_chunk(S, L, T, st, ctx, txp, stp, told)
        finally:
            if not self.unfit and self.suspended - slow0 > max(UNFIT_SLOW_MIN, T * UNFIT_SLOW_SHARE):
                self.unfit = True
                log.info("emulated GPU: %s: %d of a chunk's accesses served by Python; its later chunks run as "
                         "lockstep code", self.name, self.suspended - slow0)

    def _run_chunk(self, S, L, T, st, ctx, txp, stp, told) -> None:
        while True:
            rc = self.fn(0, T, ctx, txp, stp, stp + 8 * self.state)
            steps = int(st[ST_CNT]) // T - told
            if steps > 0 or rc != R_SLOW:      # (at its end too, as the lockstep scheduler does: Launch.run)
                told += max(steps, 0)
                L.account(self.name, max(steps, 0))
            if rc == R_DONE:
                return
            if rc == R_SLOW:
                self.suspended += 1
                _slow_access(S, int(st[ST_I]), int(st[ST_KIND]), int(st[ST_WRITE]), int(st[ST_ADDR]),
                             int(st[ST_SIZE]), stp + 8 * ST_VAL)
            elif rc != R_TICK:
                raise CudaError("cudaErrorLaunchFailure", f"{self.name}: native code returned {rc}")
            ctx = S.memctx()          # (the slow path may have changed nothing; cheap when it did not)


W_ATOMIC = 2                    # st[ST_WRITE] of an atomic (ctaatomic.py): resolved as a store, its address handed back


def _slow_access(S, lane: int, kind: int, write: int, addr: int, size: int, buf: int) -> None:
    """One access the C code could not serve, as runtime/spaces.py serves it (or raises its fault); write
    W_ATOMIC: checked as a store, and the host address of its bytes put in `buf` for the C code's
    read-modify-write (ctaatomic.py: one suspension per atomic, the bytes never copied)."""
    if kind == K_GLOBAL:
        heap, boff, _ = S._global(np.array([addr], np.uint64), size, write != 0, None)[0]
        at = heap.ctypes.data + int(boff[0])
        if int(boff[0]) + size > heap.size:
            raise IndexError("global access past the end of its memory")
    elif kind == K_KPARAM:
        pb = S.launch.param_buffer.buf
        if addr + size > pb.size:
            raise IndexError(f"kernel parameter read at offset {addr:#x} past the parameters' {pb.size} bytes")
        at = pb.ctypes.data + addr
    else:
        what = {K_SHARED: "shared", K_LOCAL: "local", K_PARAM: "param"}[kind]
        lanes = np.array([lane])
        b, boff = S._window_part(what, np.array([addr], np.uint64), write != 0, size, lanes)
        at = b.ctypes.data + int(boff[0])
    if write == W_ATOMIC:
        ctypes.c_uint64.from_address(buf).value = at
    elif write:
        ctypes.memmove(at, buf, size)
    else:
        ctypes.memmove(buf, at, size)
