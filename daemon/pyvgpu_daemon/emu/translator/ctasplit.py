"""A large CTA-at-a-time kernel (ctagen.py) as several C functions: its blocks in regions of consecutive blocks, each
region a function of its own that the kernel's function calls from its dispatch.

The C compiler's cost grows faster than linearly with one function's size (its data-flow passes over the whole
control-flow graph: PRE, live registers, CSE after reload; bench/README.md, "Issue 19 part 6, twelfth step"): CUB's
onesweep kernel as one function (1,920 blocks) did not compile in 300 s. Split into regions of about REGION_BYTES
of C, the cost is about linear in the kernel's size.

The code of a block is the same text as in one function (ctagen.kernel_source); only what surrounds it differs. The
kernel's function keeps the scheduler (sched, barrier and warp releases, the CTA loop, suspending and resuming) and
calls the region of block P at its dispatch; the state the blocks share with it (FRAME: the loop position, the
block run, the threads at it, the instruction count, the CTA, the return code) is in a frame struct, copied into
the region function's locals at its start and back at its end, and so are the allocation hints of the region's
accesses (threadgen's TG: a cache, zero at each call of the kernel's function as before). What is constant during
a call (the launch's shape, the parameters' pointers, shared memory's bounds) the region computes again from its
arguments. A region jumps between its own blocks as the one function does (its own dispatch: the tick check, then
the block); it returns to the kernel's function to run a block of another region, to schedule (a step that diverged,
parked or exited threads), at a suspension (its site's number in st, as before: resuming calls the region holding
the site, which jumps to it) and at the CTA's end. The region functions go into UNITS translation units of their own
(each with the library's prelude and the frame's type), which native.load compiles JOBS at once and links with the
kernel function's: onesweep's build took 30.7 s of wall time at load 9 against 66.9 s in one unit at load 4.6.
"""
from __future__ import annotations

import dataclasses
import re

from . import ctaaffine

# Above this many bytes of block code a kernel is split (below, one function: no call per dispatch, and the C of
# small kernels as it was); regions hold about REGION_BYTES each (bench/README.md, "twelfth step": GCC's time per
# byte is about flat up to 64 KB in one function)
SPLIT_BYTES = 96 << 10
REGION_BYTES = 48 << 10
# The region functions in this many translation units beside the kernel function's (native.load compiles them
# JOBS at once: two compiler processes get two shares of a loaded machine's CPU)
UNITS = 4
JOBS = 2

# The kernel function's variables the blocks read and write (ctagen.kernel_source declares them: int64_t)
FRAME = ("rc", "cnt", "lim", "cl", "cta", "ib", "j", "n", "lic", "i", "P", "conv")
RET_DISPATCH, RET_SCHED, RET_SUSPEND, RET_DONE = 0, 1, 2, 3

_IDENT = re.compile(r"[A-Za-z_]\w*")
_HINT = re.compile(r"\bhint(\d+)l(?:o|im)\b")
_KPARAM = re.compile(r"uint8_t \*(kp\d+) = TKP\(")


@dataclasses.dataclass
class Region:
    first: int                  # its first block
    end: int                    # one past its last block
    sites: range                # its suspension sites (ctagen's R<k> labels)
    code: str                   # its blocks' C
    tail: list[str]             # its suspension sites' cold code (S<k> labels)


def regions(lines: list[str], marks: list[tuple[int, int, int]], sites: int, tail: list[str],
            region_bytes: int | None = None) -> list[Region]:
    """Consecutive blocks in regions of about region_bytes (REGION_BYTES) of C each. marks: per block, where its
    code starts in `lines`, the number of suspension sites and of tail entries before it (ctagen.kernel_source)."""
    region_bytes = REGION_BYTES if region_bytes is None else region_bytes
    ends = marks[1:] + [(len(lines), sites, len(tail))]
    out: list[Region] = []
    first, size = 0, 0
    for b, (mark, nxt) in enumerate(zip(marks, ends)):
        size += sum(len(x) for x in lines[mark[0]:nxt[0]])
        if size >= region_bytes or b == len(marks) - 1:
            m0 = marks[first]
            out.append(Region(first, b + 1, range(m0[1] + 1, nxt[1] + 1), "\n    ".join(lines[m0[0]:nxt[0]]),
                              tail[m0[2]:nxt[2]]))
            first, size = b + 1, 0
    return out


@dataclasses.dataclass
class Split:
    """The C of a split kernel: `declarations` (the frame's type and the region functions' prototypes, before the
    kernel's function), `units` (translation units of region functions, each with the frame's type: the kernel
    function's unit and these are compiled each on its own and linked), and the kernel function's parts: `frame`
    (declared among its locals), `resume` (statements resuming at suspension site st[resume_word]), `dispatch`
    (statements running block P's region, then going on as the region answered)."""
    declarations: str
    units: list[str]
    frame: str
    resume: str
    dispatch: str


def split(name: str, rs: list[Region], nhints: int, header: str, prologue: list[str], decls: list[str],
          local_decls: dict[str, str], scratch: str, resume_word: int, attempts: list[str] = ()) -> Split:
    """header: C statements every function of the kernel starts with (the heap's base, the launch's shape);
    prologue: threadgen's per-call statements (kernel parameters' pointers), each kept where a region uses it;
    decls: the constant declarations of the kernel's function (shared memory's bounds, the register file's
    arrays); local_decls: C-local register name -> its declaration; scratch: the warp operations' arrays;
    attempts: ctaaffine's per-call flags (FIRST_FLAG at the call's start), kept in the frame as the hints are."""
    fr = f"{name}_fr"
    args = "i0, n0, M, X, st, rf, &F"
    typedef = (f"typedef struct {{ int64_t {', '.join(FRAME)}; uint8_t *sb; uint64_t h[{2 * nhints + 2}]; "
               f"uint32_t a[{len(attempts) + 1}]; }} {fr};\n")
    functions = [_region_function(f"{name}_r{k}", fr, r, header, prologue, decls, local_decls, scratch,
                                  list(attempts)) for k, r in enumerate(rs)]
    # (consecutive regions, about the same bytes per unit)
    total, units, size = sum(map(len, functions)), [[]], 0
    for f in functions:
        if size >= total / UNITS * len(units):
            units.append([])
        units[-1].append(f)
        size += len(f)
    protos = "".join(f"{_SIGNATURE.format(fn=f'{name}_r{k}', fr=fr)};\n" for k in range(len(rs)))
    put = " ".join(f"F.{v} = {v};" for v in FRAME) + " F.sb = sb;"
    get = " ".join(f"{v} = F.{v};" for v in FRAME)
    at_site = " ".join(f"case {r.sites.start} ... {r.sites.stop - 1}: rr = {name}_r{k}({args}, "
                       f"(int64_t)st[{resume_word}]); break;" for k, r in enumerate(rs) if len(r.sites))
    at_block = " ".join(f"case {r.first} ... {r.end - 1}: rr = {name}_r{k}({args}, 0); break;"
                        for k, r in enumerate(rs))
    return Split(
        typedef + protos, [typedef + "\n".join(u) + "\n" for u in units],
        f"{fr} F = {{0}}; int64_t rr = 0;" +
        "".join(f" F.a[{k}] = {ctaaffine.FIRST_FLAG};" for k in range(len(attempts))),
        f"{put} switch (st[{resume_word}]) {{ {at_site} default: return -1; }} goto answered;",
        f"{put} switch (P) {{ {at_block} default: return -2; }}\n"
        f"    answered: {get}\n"
        f"        if (rr == {RET_DISPATCH}) goto dispatch; if (rr == {RET_SCHED}) goto sched; "
        f"if (rr == {RET_SUSPEND}) goto suspend; if (rr != {RET_DONE}) return rr;")


_SIGNATURE = ("__attribute__((noinline, visibility(\"hidden\"))) int64_t {fn}(int64_t i0, int64_t n0, "
              "const MemCtx *restrict M, const TX *restrict X, uint64_t *restrict st, uint8_t *restrict rf, "
              "{fr} *restrict F, int64_t res)")


def _region_function(fn: str, fr: str, r: Region, header: str, prologue: list[str], decls: list[str],
                     local_decls: dict[str, str], scratch: str, attempts: list[str]) -> str:
    used = set(_IDENT.findall(r.code)) | set(_IDENT.findall(" ".join(r.tail)))
    hints = sorted({int(h) for h in _HINT.findall(r.code)})
    pro = [x for x in prologue if (m := _KPARAM.search(x)) and {m[1], m[1] + "k", m[1] + "o"} & used]
    loc = [d for v, d in local_decls.items() if v in used]
    att = [(k, a) for k, a in enumerate(attempts) if a in used]
    loc += [f"uint32_t {a} = F->a[{k}];" for k, a in att]
    if any(v.startswith("W_") for v in used):
        loc.append(scratch)
    ind = "\n    "
    cases = " ".join(f"case {k}: goto R{k};" for k in r.sites)
    blocks = " ".join(f"case {k}: goto B{k};" for k in range(r.first, r.end))
    return (f"{_SIGNATURE.format(fn=fn, fr=fr)} {{\n"
            + "".join(f"    uint64_t hint{h}lo = F->h[{2 * h}], hint{h}lim = F->h[{2 * h + 1}];\n" for h in hints)
            + header + "".join(f"    {x}\n" for x in pro) +
            f"    {ind.join(decls + loc)}\n"
            f"    int64_t {', '.join(f'{v} = F->{v}' for v in FRAME)}, ret = {RET_DISPATCH};\n"
            f"    uint8_t *sb = F->sb; const int64_t shl = M->shsize;\n"
            f"    (void)i0; (void)n0; (void)i; (void)cta; (void)sb; (void)shl; (void)cl; (void)ib;\n"
            f"    if (res) switch (res) {{ {cases} default: ret = -1; goto out; }}\n"
            f"dispatch:\n"
            f"    if (cnt >= lim) goto out;\n"
            f"    switch (P) {{ {blocks} default: goto out; }}\n"
            f"    {r.code}\n"
            f"sched: __attribute__((unused)); ret = {RET_SCHED}; goto out;\n"
            f"cta_done: __attribute__((unused)); ret = {RET_DONE}; goto out;\n"
            + "".join(f"{x}\n" for x in r.tail) +
            f"suspend: __attribute__((unused)); ret = {RET_SUSPEND};\n"
            f"out:\n"
            f"    {' '.join(f'F->{v} = {v};' for v in FRAME)}\n"
            + "".join(f"    F->h[{2 * h}] = hint{h}lo; F->h[{2 * h + 1}] = hint{h}lim;\n" for h in hints)
            + "".join(f"    F->a[{k}] = {a};\n" for k, a in att) +
            f"    return ret;\n}}\n")
