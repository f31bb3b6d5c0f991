"""Registers sharing arrays in stage 3's register file (translator/ctagen.py, a CTA at a time): two registers that are
never live together in one thread may hold their values in the same array, each thread in its own element.

ctagen gives every register that is not a C local its own array of a CTA's threads. PTX from nvcc names a value per
register (CUB's onesweep kernel: 8,035 registers, 3,129 arrays, at most 165 live into any block), so a CTA touched
about 3 MB of register arrays, past the L2 cache, at every step (bench/README.md, "thirteenth step"). Here the arrays
are allocated as a compiler allocates registers: the interference of the registers over the kernel's control-flow
graph (liveness.py's live-in sets, walked back through each block's instructions), then a greedy colouring, one
array per colour and element size.

Element lic of an array is only ever read and written by thread lic, at its own position in the kernel, whatever
the other threads do (a CTA diverged runs each block for the threads at it), so liveness along one thread's path is
the whole condition, with these exceptions, which keep an array of their own (`fixed`):
- registers read in threads that are not at the instruction: warp operations' member masks (ctawarp.read_across);
- registers set for every thread when a CTA starts: the special registers and those read before written (live
  into the first block: each thread reads its own 0 there, as on the lockstep path);
- registers kept once per CTA (ctagen._uniform) and C locals (ctagen._locals): not arrays at all.
And conservatively: an instruction's destinations interfere with its own sources (the C of an instruction need not
read every operand before it writes a destination). Only kernels whose loops never run a thread twice share
arrays: ctagen's large kernels (a loop's converged copy without suspensions runs its body again after a bad access,
reading what the first pass read: a register read there may not share with one written after it).
"""
from __future__ import annotations

from .liveness import reads_writes, successors


def shared_arrays(kernel, regs: dict[str, int], candidates: set[str], size) -> dict[str, tuple[int, int]]:
    """register -> (its element's bytes, its array's number among those of that size), for each of `candidates`
    (registers of `regs` that hold arrays, none of them `fixed` in the module docstring's sense); `size(bits)`: the
    bytes of a register's element. Registers with the same pair never interfere."""
    index = {r: k for k, r in enumerate(sorted(candidates))}
    names = sorted(candidates)
    adj: list[set[int]] = [set() for _ in names]
    order: dict[str, int] = {}              # a register -> where it is first seen (the colouring's order)
    n = len(kernel.blocks)
    for b in kernel.blocks:
        live = {index[r] for s in successors(b, kernel.labels, n) for r in kernel.live[s] if r in index}
        for ins in reversed(b.instrs + ([b.term] if b.term is not None else [])):
            reads, writes = reads_writes(ins, regs, True)
            rs = [index[r] for r in reads if r in index]
            ws = [index[w] for w in writes if w in index]
            for k in ws:                    # (an instruction's destinations interfere with each other too)
                adj[k].update(live, rs, ws)
            if ins.guard is None:
                live.difference_update(ws)
            live.update(rs)
        for ins in b.instrs + ([b.term] if b.term is not None else []):
            for r in sum(reads_writes(ins, regs, True), []):
                if r in index:
                    order.setdefault(r, len(order))
    for k, ns in enumerate(adj):            # (symmetric)
        ns.discard(k)
        for x in ns:
            adj[x].add(k)
    colour: dict[int, tuple[int, int]] = {}
    for r in sorted(index, key=lambda r: order.get(r, len(order))):
        k = index[r]
        z = size(regs[r])
        taken = {colour[x][1] for x in adj[k] if x in colour and colour[x][0] == z}
        c = 0
        while c in taken:
            c += 1
        colour[k] = (z, c)
    return {r: colour[index[r]] for r in names}
