"""Warp-level conformance cases: PTX kernels that drive each data-exchanging warp instruction with run-time member
masks, divergent paths, exited lanes and partial warps, and a host model of each written from the PTX ISA text.

Every case is one thread block of `nthreads` threads running kernel `k(.param .u64 inp, .param .u64 out)`. Thread
t reads 8 words at inp + 32 t: a, b, c, membermask, group, pred, guard, a_hi; and writes 2 words at out + 8 t: the
instruction's result and its predicate (1/0). Threads of group 0 exit at once; group 1 and group 2 execute the
instruction on two divergent paths (path 1 first in program order), each with its own member mask, which holds
the lanes of its own group and possibly some exited lanes (the ISA waits only for non-exited member threads).
The result registers start as 0xDEADBEEF / false, so a lane whose guard is false keeps them.

Where the ISA calls a value unpredictable (a shuffle whose source lane does not execute it: inactive, guarded
off, exited, outside the member mask, or past the end of a short warp), the model gives what NVIDIA's GPUs are
reported to give, 0; tests/differential/run.py compares the emulator with a real GPU on these cases.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INIT = 0xDEADBEEF
WORDS_IN, WORDS_OUT = 8, 2


@dataclass(frozen=True)
class Form:
    """One instruction form: its PTX (operands %r2 a, %r3 b, %r4 c, %r5 membermask, %p1 pred, %rd6 = a_hi:a;
    results in %r10 and %p5), whether the guard %p2 applies to it, and the oldest target that has the
    instruction (a GPU's JIT refuses PTX whose .target lacks one: redux.sync needs sm_80)."""
    name: str
    ptx: str
    guarded: bool = False
    target: str = "sm_75"


def _forms() -> list[Form]:
    f = []
    for mode in ("up", "down", "bfly", "idx"):
        f.append(Form(f"shfl.{mode}", f"shfl.sync.{mode}.b32 %r10|%p5, %r2, %r3, %r4, %r5;"))
        f.append(Form(f"shfl.{mode}.guarded", f"@%p2 shfl.sync.{mode}.b32 %r10|%p5, %r2, %r3, %r4, %r5;", True))
    f.append(Form("shfl.down.imm", "shfl.sync.down.b32 %r10|%p5, %r2, 3, 31, %r5;"))
    f.append(Form("shfl.idx.width8", "shfl.sync.idx.b32 %r10|%p5, %r2, %r3, 0x181f, %r5;"))
    f.append(Form("vote.ballot", "vote.sync.ballot.b32 %r10, %p1, %r5;"))
    f.append(Form("vote.ballot.not", "vote.sync.ballot.b32 %r10, !%p1, %r5;"))
    for mode in ("any", "all", "uni"):
        f.append(Form(f"vote.{mode}", f"vote.sync.{mode}.pred %p5, %p1, %r5;"))
    for op, t in (("add", "u32"), ("add", "s32"), ("min", "u32"), ("min", "s32"), ("max", "u32"), ("max", "s32"),
                  ("and", "b32"), ("or", "b32"), ("xor", "b32")):
        f.append(Form(f"redux.{op}.{t}", f"redux.sync.{op}.{t} %r10, %r2, %r5;", target="sm_80"))
    f.append(Form("match.any.b32", "match.any.sync.b32 %r10, %r2, %r5;"))
    f.append(Form("match.all.b32", "match.all.sync.b32 %r10|%p5, %r2, %r5;"))
    f.append(Form("match.any.b64", "match.any.sync.b64 %r10, %rd6, %r5;"))
    f.append(Form("match.all.b64", "match.all.sync.b64 %r10|%p5, %rd6, %r5;"))
    f.append(Form("activemask", "activemask.b32 %r10;"))
    # bar.warp.sync orders shared-memory accesses: each lane stores a, syncs with its group, reads lane b's slot
    f.append(Form("bar.warp.sync", "st.shared.u32 [%r20], %r2;\n  bar.warp.sync %r5;\n  ld.shared.u32 %r10, [%r21];"))
    return f


FORMS = {f.name: f for f in _forms()}

_KERNEL = """.version 9.0
.target {target}
.address_size 64

.visible .entry k(.param .u64 inp, .param .u64 out)
{{
  .reg .b32 %r<24>; .reg .pred %p<8>; .reg .b64 %rd<12>;
  .shared .align 4 .b8 slots[4096];
  ld.param.u64 %rd1, [inp];
  ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 32;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.v4.u32 {{%r2, %r3, %r4, %r5}}, [%rd4];
  ld.global.v4.u32 {{%r6, %r7, %r8, %r9}}, [%rd4+16];
  mov.b64 %rd6, {{%r2, %r9}};
  mul.wide.u32 %rd7, %r1, 8;
  add.s64 %rd5, %rd2, %rd7;
  setp.ne.u32 %p1, %r7, 0;
  setp.ne.u32 %p2, %r8, 0;
  mov.u32 %r10, {init};
  setp.ne.u32 %p5, %r10, {init};
  mov.u32 %r11, slots;
  shl.b32 %r12, %r1, 2;
  add.s32 %r20, %r11, %r12;
  and.b32 %r13, %r1, -32;
  and.b32 %r14, %r3, 31;
  add.s32 %r15, %r13, %r14;
  shl.b32 %r16, %r15, 2;
  add.s32 %r21, %r11, %r16;
  setp.eq.u32 %p3, %r6, 0;
  @%p3 bra $L_exit;
  setp.eq.u32 %p4, %r6, 2;
  @%p4 bra $L_path2;
  {op}
  bra.uni $L_store;
$L_path2:
  {op}
$L_store:
  selp.u32 %r17, 1, 0, %p5;
  st.global.v2.u32 [%rd5], {{%r10, %r17}};
$L_exit:
  ret;
}}
"""


def kernel_ptx(form: Form) -> str:
    return _KERNEL.format(op=form.ptx, init=INIT, target=form.target)


@dataclass
class Case:
    form: Form
    nthreads: int
    inp: np.ndarray          # uint32 [nthreads, WORDS_IN]

    @property
    def name(self) -> str:
        return self.form.name


def make_case(form: Form, seed: int, nthreads: int | None = None) -> Case:
    """Random operands, groups and member masks (run-time values) for one block of nthreads threads."""
    rng = np.random.default_rng(seed)
    n = int(nthreads or rng.integers(1, 97))
    inp = np.zeros((n, WORDS_IN), np.uint32)
    small = rng.random() < 0.5                      # few distinct values: match/redux/vote see agreement
    a = rng.integers(0, 4, n) if small else rng.integers(0, 1 << 32, n)
    inp[:, 0] = a
    inp[:, 7] = rng.integers(0, 2, n) if small else rng.integers(0, 1 << 32, n)    # a_hi for the .b64 forms
    inp[:, 1] = rng.integers(0, 64, n)              # b: lane or offset, b[4:0] used
    seg = rng.choice([0, 0x10, 0x18, 0x1C, 0x1E])
    inp[:, 2] = rng.integers(0, 32, n) | (seg << 8) | (rng.integers(0, 2, n) << 16)   # stray bits ignored
    p_true = rng.choice([0.0, 0.5, 1.0])
    inp[:, 5] = rng.random(n) < p_true
    inp[:, 6] = rng.random(n) < 0.7
    groups = rng.choice(3, n, p=rng.dirichlet([1, 2, 2]))
    inp[:, 4] = groups
    # member masks: per warp and group, the group's lanes plus some exited lanes of the warp
    for w0 in range(0, n, 32):
        lanes = np.arange(w0, min(n, w0 + 32))
        bits = np.uint64(1) << (lanes - w0).astype(np.uint64)
        for g in (1, 2):
            own = int(bits[groups[lanes] == g].sum())
            exited = bits[groups[lanes] == 0]
            extra = int(exited[rng.random(exited.size) < 0.5].sum())
            inp[lanes[groups[lanes] == g], 3] = own | extra
    return Case(form, n, inp)


# ---------------------------------------------------------------------------------------------- the ISA model
def model(case: Case) -> np.ndarray:
    """The expected output words [nthreads, 2] of a case, lane by lane from the PTX ISA's definitions."""
    n, inp = case.nthreads, case.inp.astype(np.int64)
    out = np.zeros((n, WORDS_OUT), np.uint32)
    name = case.form.name
    for t in range(n):
        g = inp[t, 4]
        if g == 0:
            continue                                            # exited: writes nothing
        w0 = t - t % 32
        warp = range(w0, min(n, w0 + 32))
        guard = bool(inp[t, 6]) if case.form.guarded else True
        # the threads executing this instruction with t: its group (path), guard true
        execs = {u for u in warp if inp[u, 4] == g and (bool(inp[u, 6]) or not case.form.guarded)}
        mask = int(inp[t, 3])
        members = [u for u in warp if mask >> (u - w0) & 1 and u in execs]
        d, p = INIT, False
        if not guard:
            pass
        elif name.startswith("shfl"):
            d, p = _shfl(case, t, execs)
        elif name.startswith("vote"):
            pred = [bool(inp[u, 5]) != name.endswith(".not") for u in members]
            mode = name.split(".")[1]
            if mode == "ballot":
                d = sum(1 << (u - w0) for u, q in zip(members, pred) if q)
            else:
                p = any(pred) if mode == "any" else all(pred) if mode == "all" else len(set(pred)) <= 1
        elif name.startswith("redux"):
            d = _redux(name, [int(inp[u, 0]) for u in members])
        elif name.startswith("match"):
            key = (lambda u: int(inp[u, 0]) | int(inp[u, 7]) << 32) if name.endswith("b64") else \
                (lambda u: int(inp[u, 0]))
            if ".any" in name:
                d = sum(1 << (u - w0) for u in members if key(u) == key(t))
            else:
                p = len({key(u) for u in members}) <= 1
                d = mask if p else 0
        elif name == "activemask":
            d = sum(1 << (u - w0) for u in warp if inp[u, 4] == g)
        elif name == "bar.warp.sync":
            src = w0 + int(inp[t, 1]) % 32
            d = int(inp[src, 0]) if src < n and src in execs and mask >> (src - w0) & 1 else None
        out[t] = (d if d is not None else 0), int(p)
        if d is None:
            out[t, 0] = DONT_CARE
    return out


DONT_CARE = 0xFFFFFFFF
"""bar.warp.sync reads a slot another path may write too: such a lane's value is not checked (the model gives
DONT_CARE, compare() skips it)."""


def shfl_source(mode: str, lane: int, b: int, c: int) -> tuple[int, bool]:
    """shfl.sync's pseudo-code (PTX ISA 9.0, "shfl.sync"): (the source lane, whether it is in range); out of range,
    the lane itself."""
    bval, cval, segmask = b & 31, c & 31, (c >> 8) & 31
    max_lane = (lane & segmask) | (cval & ~segmask)
    min_lane = lane & segmask
    if mode == "up":
        j = lane - bval
        pval = j >= max_lane
    elif mode == "down":
        j = lane + bval
        pval = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        pval = j <= max_lane
    else:
        j = min_lane | (bval & ~segmask)
        pval = j <= max_lane
    return (j if pval else lane), pval


def _shfl(case: Case, t: int, execs: set) -> tuple[int, bool]:
    """shfl.sync's pseudo-code (PTX ISA 9.0, "shfl.sync"), source values of lanes not executing it: 0."""
    inp, name = case.inp.astype(np.int64), case.form.name
    lane = t % 32
    w0 = t - lane
    mode = name.split(".")[1]
    if name == "shfl.down.imm":
        b, c = 3, 31
    elif name == "shfl.idx.width8":
        b, c = int(inp[t, 1]), 0x181F
    else:
        b, c = int(inp[t, 1]), int(inp[t, 2])
    j, pval = shfl_source(mode, lane, b, c)
    src = w0 + j
    return (int(inp[src, 0]) if src in execs else 0), pval


def _redux(name: str, vals: list[int]) -> int:
    op, t = name.split(".")[1:3]
    if not vals:
        return 0
    if t == "s32":
        vals = [v - (1 << 32) if v >= 1 << 31 else v for v in vals]
    if op == "add":
        r = sum(vals)
    elif op == "min":
        r = min(vals)
    elif op == "max":
        r = max(vals)
    else:
        r = vals[0]
        for v in vals[1:]:
            r = r & v if op == "and" else r | v if op == "or" else r ^ v
    return r & 0xFFFFFFFF


def compare(got: np.ndarray, exp: np.ndarray) -> list[str]:
    """Lanes where an output differs from the expected one (DONT_CARE values skipped), as readable lines."""
    diffs = []
    for t in range(exp.shape[0]):
        for k in range(WORDS_OUT):
            if exp[t, k] != DONT_CARE and got[t, k] != exp[t, k]:
                diffs.append(f"thread {t} word {k}: got {int(got[t, k]):#010x}, expected {int(exp[t, k]):#010x}")
    return diffs


def fixed_cases(per_form: int = 2) -> list[Case]:
    """The differential set: per form, `per_form` cases from fixed seeds (one of 32 threads, one partial)."""
    cases = []
    for i, form in enumerate(FORMS.values()):
        for s in range(per_form):
            cases.append(make_case(form, 1000 * i + s, 32 if s == 0 else None))
    return cases
