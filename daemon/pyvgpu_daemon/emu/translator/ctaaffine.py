"""Contiguous accesses of a converged CTA (stage 3, ctagen.py): a loop without suspensions whose shared or global
addresses turn out to be one after the other, thread after thread, runs with plain vector loads and stores instead
of gathers and scatters.

ctagen's loops without suspensions (ctagen._fast_code) compute each thread's address and let the compiler make
the accesses gathers and scatters; on this machine's AVX-512 (AMD Zen 4) a 16-lane gather or scatter costs 5-10x
a contiguous vector access (bench/README.md, "eleventh step"). Most kernels address memory as `base + thread index
x access size` (scan_batches' uint4 loads and stores, its shared scan at the tile's width), which the compiler
cannot see: the base comes from registers. So such a loop gets, before its usual passes, an attempt that checks
that shape at run time:
- "first": the loop's body for thread 0 alone, its loads and address checks as the usual pass makes them, no
  store: each access's address is that thread's, the base (`ab`); when the CTA as a whole is not contiguous,
  the attempt is made again by smaller groups, each with the base of its first thread: powers of two that divide
  the CTA's size, the largest first, down to GROUP (16) threads (the fewer groups, the fewer scalar first runs);
- the range every thread would address from that base (base + stride x thread, the stride being the access's
  size) is checked whole against what the usual checks allow (the CTA's shared window; the allocation of the
  pointer's hint), aligned;
- "affine": the loop with each access at base + stride x thread, and each thread's own address compared with
  it (`dev`, `dew`); a loop with a store runs "affcheck" first (the comparisons only) and stores only when none
  differed.
When an address differs, or the range fails, the attempt's register writes are dropped by running the usual passes
(the loop can run twice: ctagen._rerunnable), which also serve every bad access as before; the attempt is not made
again at that size for that loop in this call of the function (`aff` flags: a kernel whose addresses are not
contiguous, such as the scan's narrowest tiles, pays one attempt per size and call). So every result is the usual
passes' or the same bits from the same addresses.
"""
from __future__ import annotations

from typing import Callable

from ..ptx import ir

# A kernel whose CTA-at-a-time source with these attempts is larger is built without them: each adds two or
# three copies of a loop's body, and the largest kernels' compile time grows faster than their size
# (ctagen.MAX_COMPILE_S).
MAX_BYTES = 160 << 10
# A kernel with more instructions is built without them at once (not generated twice: CUB's onesweep has 6,709).
MAX_INSTRUCTIONS = 400


def candidates(e, body: list[ir.Instr], fast_kind: Callable[[object, ir.Instr], str | None]) -> list[ir.Instr]:
    """The accesses of a loop without suspensions that an attempt makes contiguous: shared or global ones
    (fast_kind: ctagen._fast_kind, passed in, since ctagen imports this module) through a register every thread may
    hold differently (not kept once per CTA)."""
    out = []
    for ins in body:
        if ins.opcode not in ("ld", "ldu", "st") or fast_kind(e, ins) not in ("shared", "global"):
            continue
        src = ins.srcs[0]
        base = getattr(src, "base", None)
        if isinstance(base, ir.Reg) and base.name in e.regs and base.name not in e.uniform:
            try:
                if e.address(src, ins)[0] == "reg":
                    out.append(ins)
            except Exception:       # (an address the usual pass refuses: it refuses the loop too)
                continue
    return out


GROUP = 16                      # the fewest threads of a group with a base of its own (AVX-512: 16 lanes of 32 bits)
FIRST_FLAG = "UINT32_MAX"       # an attempt's flag at the start of a call: the CTA as one group first (attempt)

# The comparisons' accumulators, declared before an attempt: `dev` (32 bits) takes the comparisons of 32-bit
# addresses and the outcome, `dew` (64 bits) those of 64-bit addresses, folded into `dev` after each pass. One 64-bit
# accumulator for all made every comparison a 64-bit vector reduction (16 lanes as two vectors of 8, each 32-bit
# difference widened first): up to a quarter of a grouped tile's launch (bench/README.md, "thirteenth step").
DECLS = "uint32_t dev = 1; uint64_t dew = 0;"


def compare32(a: str, expected: str) -> str:
    """C statement (in "affine", "affcheck"): a thread's 32-bit address `a` compared with the attempt's."""
    return f"dev |= {a} ^ {expected};"


def compare64(a: str, expected: str) -> str:
    """C statement: a thread's 64-bit address `a` compared with the attempt's, every bit (an address that differs
    only above bit 31 is a difference: test_an_address_4_gib_off)."""
    return f"dew |= {a} ^ {expected};"


def shared_range(ab: str, vsize: int) -> str:
    """C condition: every offset of a group, its base `ab`g + vsize x thread, inside the CTA's window, aligned,
    below 2^32 (a 32-bit offset register compared in 32 bits cannot have wrapped)."""
    b = f"{ab}g"
    return (f"({b} <= UINT64_C(0xFFFFFFFF) && {b} + (uint64_t){vsize} * (uint64_t)gs <= UINT64_C(0xFFFFFFFF) && "
            f"{b} + (uint64_t){vsize} * (uint64_t)gs <= (uint64_t)shl && ({b} & {vsize - 1}) == 0)")


def global_range(ab: str, vsize: int, hint: str) -> str:
    """C condition: every address of a group, its base `ab`g + vsize x thread, inside the allocation of the
    pointer's hint (the first and the last checked as TG checks one: the range between them is inside), aligned."""
    b = f"{ab}g"
    last = f"{b} + (uint64_t){vsize} * (uint64_t)(gs - 1)"
    return (f"({b} - {hint}lo < {hint}lim && {b} <= UINT64_MAX - (uint64_t){vsize} * (uint64_t)gs && "
            f"{last} - {hint}lo < {hint}lim && ({b} & {vsize - 1}) == 0)")


def record(ab: str, o: str) -> str:
    """C statement (in "first"): the base of the group of the thread run, its own address."""
    return f"{ab}[lg / {GROUP}] = (uint64_t)({o});"


def affine_offset(ab: str, vsize: int) -> str:
    """C expression (uint64_t) of a thread's offset from its group's base."""
    return f"({ab}g + (uint64_t){vsize} * (uint64_t)(lic - lg))"


def attempt(first: str, loop_pragma: str, affine: str, affcheck: str | None, bases: list[str], ranges: list[str],
            flag: str, max_cta: int) -> str:
    """The C code of an attempt, run before a loop's usual passes (which run when `dev` is left set). `flag`: the
    size of the groups to try, each with the base of its first thread (FIRST_FLAG or any size from the CTA's up:
    the CTA as one group; then powers of two from below the CTA's size down to GROUP, those that divide it: the
    scan's tiles of 64-512 elements are contiguous by 16-128 threads); 0: no attempt. For each group its first
    thread's body (first), then the ranges, then the loop by groups (with a store: the comparisons first, the
    stores only when all matched); an attempt that fails steps the flag down to the next size (a group's first
    thread runs alone, scalar: the larger the groups, the fewer such runs)."""
    decl = " ".join(f"uint64_t {b}[{max_cta // GROUP}]; uint64_t {b}g = 0; (void){b}g;" for b in bases)
    load = " ".join(f"{b}g = {b}[lg / {GROUP}];" for b in bases)
    whole = f"for (lg = 0; lg < cs; lg += gs) {{ {load} {loop_pragma} for (lic = lg; lic < lg + gs; lic++)"
    # (groups of GROUP threads a loop of a constant count, which the compiler makes one vector step)
    part = f"for (lg = 0; lg < cs; lg += {GROUP}) {{ {load} {loop_pragma} for (lic = lg; lic < lg + {GROUP}; lic++)"

    def both(body: str) -> str:
        return f"if (gs != {GROUP}) {{ {whole} {{ {body} }} }} }} else {{ {part} {{ {body} }} }} }}"
    # (an access made as usual in those passes, not one of the attempt's, may set `bad`: counted as a difference)
    fold = "dev |= (uint32_t)(dew != 0);"
    passes = (f"{both(affine)} {fold}" if affcheck is None else
              f"{both(affcheck)} {fold} if (!dev && !bad) {{ {both(affine)} {fold} }}")
    # (the next size: the largest power of two below this one; below GROUP none. Every size but the CTA's is a
    # power of two of at least GROUP, so a group's index lg / GROUP is exact)
    step = f"{flag} = gs > {GROUP} ? UINT32_C(1) << (31 - __builtin_clz((uint32_t)gs - 1)) : 0;"
    return (f"if ({flag}) {{ {decl} int64_t lg = 0, gs = {flag} >= (uint64_t)cs ? cs : {flag}; "
            f"if (cs % gs == 0) {{ "
            f"for (lg = 0; lg < cs && !bad; lg += gs) {{ lic = lg; {first} }} "
            f"uint32_t rok = !bad; for (lg = 0; lg < cs && rok; lg += gs) {{ {load} rok = {' && '.join(ranges)}; }} "
            f"if (rok) {{ dev = 0; dew = 0; {passes} dev |= bad; }} }} "
            f"bad = 0; if (dev) {{ {step} }} }}")
