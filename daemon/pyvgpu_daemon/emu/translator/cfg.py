"""Basic blocks of a flat kernel body.

A block is a run of straight-line instructions ended by its terminator: a branch (bra, brx), ret/exit, an
out-of-line call or return (ocall, oret: inline.py), a CTA barrier
(bar.sync/bar.red/barrier: kind 'bar', the lanes park there) or a warp operation (shfl, vote, redux, match,
activemask, bar.warp.sync: kind 'warp', in a block of its own because it waits for its warp). A label starts a
new block; a block without terminator falls through to the next one, and the body ends with an implicit exit.
`labels` maps every label to the index of the block it starts.

A run of more than MAX_BLOCK_INSTRS straight-line instructions is cut into blocks that fall through to each other:
a scheduler step (one block over a chunk's lanes) stays short, so the launch deadline is checked often enough
whatever the kernel (runtime/launch.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ptx import ir

# What lets one CTA observe another (or order its effects against another's): then chunks run one at a time
# (kernel._independent_ctas).
SHARING_OPCODES = frozenset({"atom", "red", "membar", "fence", "call", "trap", "brkpt", "mbarrier", "cp"})
SHARING_MODS = frozenset({"volatile", "relaxed", "acquire", "release", "acq_rel", "mmio", "sys", "gpu"})


def shares_across_ctas(ins: ir.Instr) -> bool:
    """Whether an instruction lets its CTA observe another or order its effects against another's: an atomic,
    fence, call or bulk copy, or a volatile or scoped access, except a volatile load or store of the CTA's own
    shared memory (warp-synchronous code: only the CTA's threads see it)."""
    if ins.opcode in SHARING_OPCODES:
        return True
    mods = SHARING_MODS & set(ins.mods)
    return bool(mods) and not (mods == {"volatile"} and ins.opcode in ("ld", "st")
                               and any(m in ("shared", "shared::cta") for m in ins.mods))


@dataclass
class Block:
    index: int
    instrs: list
    term: ir.Instr | None        # bra / ret / exit / bar / warp op (None: fall through)
    kind: str                    # 'plain' | 'bar' | 'warp'


MAX_BLOCK_INSTRS = 256

WARP_OPS = frozenset({"shfl", "vote", "redux", "activemask", "match"})
BRANCHES = frozenset({"bra", "ret", "exit", "brx", "ocall", "oret"})


def is_warp(ins: ir.Instr) -> bool:
    return ins.opcode in WARP_OPS or (ins.opcode in ("bar", "barrier") and "warp" in ins.mods) \
        or ins.opcode == "mma" or (ins.opcode == "wmma" and ins.mods[:1] == ("mma",))     # translator/matrix.py


def is_bar(ins: ir.Instr) -> bool:
    return ins.opcode in ("bar", "barrier") and "warp" not in ins.mods


def split_blocks(body: list) -> tuple[list[Block], dict[str, int]]:
    blocks: list[Block] = []
    labels: dict[str, int] = {}
    cur: list = []
    pending_labels: list[str] = []

    def close(term, kind):
        nonlocal cur, pending_labels
        b = Block(len(blocks), cur, term, kind)
        for lb in pending_labels:
            labels[lb] = b.index
        pending_labels = []
        blocks.append(b)
        cur = []

    for item in body:
        if isinstance(item, str):
            if cur:
                close(None, "plain")
            pending_labels.append(item)
        elif is_warp(item):
            if cur:
                close(None, "plain")
            close(item, "warp")
        elif is_bar(item):
            close(item, "bar")
        elif item.opcode in BRANCHES:
            close(item, "plain")
        else:
            cur.append(item)
            if len(cur) >= MAX_BLOCK_INSTRS:
                close(None, "plain")
    close(ir.Instr("exit", (), [], [], None, 0, "end of body"), "plain")
    return blocks, labels
