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
  store: each access's address is that thread's, the base (`ab`);
- the range every thread would address from that base (base + stride x thread, the stride being the access's
  size) is checked whole against what the usual checks allow (the CTA's shared window; the allocation of the
  pointer's hint), aligned;
- "affine": the loop with each access at base + stride x thread, and each thread's own address compared with
  it (`dev`); a loop with a store runs "affcheck" first (the comparisons only) and stores only when none
  differed.
When an address differs, or the range fails, the attempt's register writes are dropped by running the usual passes
(the loop can run twice: ctagen._rerunnable), which also serve every bad access as before; the attempt is not made
again for that loop in this call of the function (`aff` flags: a kernel whose addresses are not contiguous, such
as the scan's narrower tiles, pays one attempt per call). So every result is the usual passes' or the same bits
from the same addresses.
"""
from __future__ import annotations

from ..ptx import ir

# A kernel whose CTA-at-a-time source with these attempts is larger is built without them: each adds two or
# three copies of a loop's body, and the largest kernels' compile time grows faster than their size
# (ctagen.MAX_SOURCE_BYTES).
MAX_BYTES = 160 << 10


def candidates(e, body: list[ir.Instr]) -> list[ir.Instr]:
    """The accesses of a loop without suspensions that an attempt makes contiguous: shared or global ones
    (ctagen._fast_kind) through a register every thread may hold differently (not kept once per CTA)."""
    from .ctagen import _fast_kind
    out = []
    for ins in body:
        if ins.opcode not in ("ld", "ldu", "st") or _fast_kind(e, ins) not in ("shared", "global"):
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


def shared_range(ab: str, vsize: int) -> str:
    """C condition: every thread's shared offset ab + vsize x thread inside the CTA's window, aligned, below 2^32
    (a 32-bit offset register compared in 32 bits cannot have wrapped)."""
    return (f"({ab} <= UINT64_C(0xFFFFFFFF) && {ab} + (uint64_t){vsize} * (uint64_t)cs <= UINT64_C(0xFFFFFFFF) && "
            f"{ab} + (uint64_t){vsize} * (uint64_t)cs <= (uint64_t)shl && ({ab} & {vsize - 1}) == 0)")


def global_range(ab: str, vsize: int, hint: str) -> str:
    """C condition: every thread's address ab + vsize x thread inside the allocation of the pointer's hint (the
    first and the last thread's checked as TG checks one: the range between them is inside), aligned."""
    last = f"{ab} + (uint64_t){vsize} * (uint64_t)(cs - 1)"
    return (f"({ab} - {hint}lo < {hint}lim && {ab} <= UINT64_MAX - (uint64_t){vsize} * (uint64_t)cs && "
            f"{last} - {hint}lo < {hint}lim && ({ab} & {vsize - 1}) == 0)")


def affine_offset(ab: str, vsize: int) -> str:
    """C expression (uint64_t) of a thread's offset from the base of an attempt."""
    return f"({ab} + (uint64_t){vsize} * (uint64_t)lic)"


def attempt(first: str, loop: str, affine: str, affcheck: str | None, bases: list[str], ranges: list[str],
            flag: str) -> str:
    """The C code of an attempt, run before a loop's usual passes (which run when `dev` is left set): thread 0's
    body (first), the range check, then the loop at base + stride x thread (with a store: its comparisons first,
    the stores only when all matched)."""
    decl = "uint64_t " + ", ".join(f"{b} = 0" for b in bases) + ";"
    passes = (f"{loop} {{ {affine} }}" if affcheck is None else
              f"{loop} {{ {affcheck} }} if (!dev) {{ {loop} {{ {affine} }} }}")
    return (f"if ({flag}) {{ {decl} {{ lic = 0; {first} }} "
            f"if (!bad && {' && '.join(ranges)}) {{ dev = 0; {passes} }} bad = 0; if (dev) {flag} = 0; }}")
