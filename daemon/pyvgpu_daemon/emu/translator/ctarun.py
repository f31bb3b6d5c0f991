"""Stage 3's runs of global accesses through one register (ctagen.py's loops with suspension sites).

CUB's onesweep loads its 46 keys (and values) of a thread through one base register at constant offsets (0x0, 0x80,
... 0x1680), each checked against its pointer's allocation hint (threadgen's TG) with a suspension site of its own:
about 15 instructions an access where the load and the register's store are 2 (bench/README.md, "sixteenth step").
A run of such accesses, consecutive in a block and unguarded, through one 64-bit register that none of them writes
(registers are not memory: no store can change it), is checked once: the range [base + least offset, base + greatest
offset + size) inside the hint's allocation, the base aligned to the size (every offset a multiple of it apart), then
plain accesses; where the check fails (no hint yet, another allocation, a fault ahead) the run's existing code, each
access checked and suspending, runs instead: it faults on exactly the access the scalar code faults on.
"""
from __future__ import annotations

from pyvgpu_daemon.errors import CudaError

from ..ptx import ir
from .cgen import NoC, address_expr, ctype, load_form
from . import ctaatomic
from .threadgen import ThreadEmitter, store_form

MIN_RUN = 2                 # accesses in a run worth one check
MAX_SPAN = 1 << 16          # the greatest offset less the least (bytes): a run's range is one allocation's part


def _key(e: ThreadEmitter, ins: ir.Instr) -> tuple[str, str, int, int] | None:
    """(load or store, base register, offset, access size) of an access a run may hold, else None."""
    if ins.opcode not in ("ld", "ldu", "st") or ins.guard is not None or "mmio" in ins.mods or ctaatomic.handles(ins):
        return None
    a = ins.srcs[0]
    if not isinstance(a, ir.Addr) or not isinstance(a.base, ir.Reg) or e.regs.get(a.base.name) != 64:
        return None
    try:
        kind, _, off = e.address(a, ins)
        if ins.opcode == "st":
            space, size, _, vals = store_form(e, ins)
            vsize, dsts = size * len(vals), []
        else:
            space, _, dsts, size, _ = load_form(e, ins)
            vsize = size * len(dsts)
    except (NoC, CudaError):        # (the access's own emission raises what it raises)
        return None
    if kind != "reg" or space != "global" or vsize & (vsize - 1):
        return None
    if any(isinstance(d, ir.Reg) and d.name == a.base.name for d in dsts):
        return None                 # (it writes its own base: the run's base would change)
    return ("st" if ins.opcode == "st" else "ld", a.base.name, off, vsize)


def run_length(e: ThreadEmitter, body: list[ir.Instr], i: int) -> int:
    """How many accesses from body[i] form one run (0: fewer than MIN_RUN)."""
    first = _key(e, body[i])
    if first is None:
        return 0
    kind, base, off0, vsize = first
    lo = hi = off0
    n = 1
    while i + n < len(body):
        k = _key(e, body[i + n])
        if k is None or k[:2] != (kind, base) or k[3] != vsize or (k[2] - off0) % vsize:
            break
        if max(hi, k[2]) - min(lo, k[2]) > MAX_SPAN:
            break
        lo, hi = min(lo, k[2]), max(hi, k[2])
        n += 1
    return n if n >= MIN_RUN else 0


def emit_run(e: ThreadEmitter, run: list[ir.Instr]) -> None:
    """Emit a run (run_length): one range check, plain accesses; the run's usual code where the check fails."""
    keys = [_key(e, ins) for ins in run]
    _, base, _, vsize = keys[0]
    lo = min(k[2] for k in keys)
    span = max(k[2] for k in keys) - lo
    hint = e.hint((base, vsize))            # (the hint the accesses' own checks keep)
    ga, gp = e.fresh("ga"), e.fresh("gp")
    start = len(e.lines)
    saved = dict(e.checked)
    try:
        for ins, k in zip(run, keys):
            _plain(e, ins, gp, k[2] - lo)
        plain = " ".join(e.lines[start:])
        del e.lines[start:]
        for ins in run:
            e.emit(ins)
        checked = " ".join(e.lines[start:])
    finally:
        del e.lines[start:]
    # (the pointers the usual code checked are declared in its branch: later accesses may not reuse them)
    e.checked = {key: p for key, p in e.checked.items() if saved.get(key) == p}
    cond = (f"{hint}lim > UINT64_C({span:#x}) && {ga} - {hint}lo < {hint}lim - UINT64_C({span:#x}) && "
            f"!({ga} & UINT64_C({vsize - 1:#x}))")
    e.lines.append(f"{{ uint64_t {ga} = {address_expr(e, run[0], 'reg', lo)}; "
                   f"if (__builtin_expect({cond}, 1)) {{ uint8_t *{gp} = (uint8_t *)(uintptr_t)({ga} + hd); {plain} }} "
                   f"else {{ {checked} }} }}")


def _plain(e: ThreadEmitter, ins: ir.Instr, gp: str, at: int) -> None:
    """An access of a run whose range passed: at `at` bytes past gp, as threadgen's _tld/_tst make it there."""
    if ins.opcode == "st":
        _, size, ct, vals = store_form(e, ins)
        svs = [e.fresh("sv") for _ in vals]
        e.lines.append("{ " + " ".join(f"{ct} {x} = {v};" for x, v in zip(svs, vals)) + " " +
                       " ".join(f"memcpy({gp} + {at + k * size}, &{x}, {size});" for k, x in enumerate(svs)) + " }")
        return
    _, _, dsts, size, lt = load_form(e, ins)
    xs = [e.fresh("tx") for _ in dsts]
    e.lines.append(" ".join(f"{ctype(lt)} {x}; memcpy(&{x}, {gp} + {at + k * size}, {size});"
                            for k, x in enumerate(xs)))
    for d, x in zip(dsts, xs):
        if isinstance(d, ir.Reg) and d.name == "_":
            continue
        e.write(d, lt, x, ins)
