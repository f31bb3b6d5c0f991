"""Logic and bit manipulation: and or xor not cnot shl shr shf popc clz brev bfind bfe bfi prmt."""
from __future__ import annotations

import numpy as np

from ..ptx import ir
from .common import DTYPES, SIGNED, SIGNED_OF, UNSIGNED_OF, AluOp, Unsupported, one_of, split_mods, width

_LOGIC_T = {"b16", "b32", "b64", "pred", "b8", "u16", "u32", "u64", "s16", "s32", "s64"}


def _one_type(types, allowed):
    if len(types) != 1 or types[0] not in allowed:
        raise Unsupported("type")
    return types[0]


def build_logic(instr, op):
    types, _ = split_mods(instr, ())
    t = _one_type(types, _LOGIC_T)
    if t == "pred":
        uf = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
    else:
        uf = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    return AluOp(uf, (t, t), (t,))


def build_not(instr):
    types, _ = split_mods(instr, ())
    t = _one_type(types, _LOGIC_T)
    return AluOp(np.logical_not if t == "pred" else np.invert, (t,), (t,))


def build_cnot(instr):
    types, _ = split_mods(instr, ())
    t = _one_type(types, {"b16", "b32", "b64"})
    dt = DTYPES[t]
    return AluOp(lambda a: np.equal(a, 0).astype(dt), (t,), (t,))


def _imm_count(instr, idx):
    """The value of an immediate shift-count operand, or None for a register."""
    if idx < len(instr.srcs) and isinstance(instr.srcs[idx], ir.Imm) and isinstance(instr.srcs[idx].value, int):
        return instr.srcs[idx].value & 0xFFFFFFFF
    return None


def build_shift(instr, left):
    types, _ = split_mods(instr, ())
    allowed = {"b16", "b32", "b64"} if left else {"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"}
    t = _one_type(types, allowed)
    w = width(t)
    dt = DTYPES[t]
    uf = np.left_shift if left else np.right_shift
    imm = _imm_count(instr, 1)
    if imm is not None:
        # immediate count: fold the clamp at build time (count >= width gives 0, or sign fill for shr.s)
        if imm >= w:
            if left or t not in SIGNED:
                zero = dt.type(0)
                return AluOp(lambda a, b: np.multiply(a, zero), (t, "u32"), (t,))
            c = dt.type(w - 1)
        else:
            c = dt.type(imm)
        return AluOp(lambda a, b: uf(a, c), (t, "u32"), (t,))
    wmax = np.uint32(w)
    if dt == np.dtype(np.uint32):
        # NumPy already returns 0 for uint32 counts >= 32
        return AluOp(lambda a, b: uf(a, np.minimum(b, wmax)), (t, "u32"), (t,))

    def fn(a, b):
        return uf(a, np.minimum(b, wmax).astype(dt))
    return AluOp(fn, (t, "u32"), (t,))


def build_shf(instr):
    types, flags = split_mods(instr, {"l", "r", "wrap", "clamp"})
    _one_type(types, {"b32"})
    d = one_of(flags, ("l", "r"))
    mode = one_of(flags, ("wrap", "clamp"))
    if d is None or mode is None:
        raise Unsupported("shf needs .l/.r and .wrap/.clamp")
    s32 = np.uint64(32)
    m32 = np.uint64(0xFFFFFFFF)

    def fn(a, b, c):
        v = (np.asarray(b, np.uint64) << s32) | np.asarray(a, np.uint64)
        n = np.minimum(c, np.uint32(32)) if mode == "clamp" else np.bitwise_and(c, np.uint32(31))
        n = np.asarray(n, np.uint64)
        if d == "l":
            return ((v << n) >> s32).astype(np.uint32)
        return ((v >> n) & m32).astype(np.uint32)
    return AluOp(fn, ("b32", "b32", "u32"), ("b32",))


def build_popc(instr):
    types, _ = split_mods(instr, ())
    t = _one_type(types, {"b32", "b64"})
    return AluOp(lambda a: np.bitwise_count(a).astype(np.uint32), (t,), ("u32",))


def _bitlen(u, w):
    """Number of significant bits of unsigned values (0 for 0), as int64."""
    if w <= 32:
        # float64 holds every 32-bit value exactly; frexp's exponent is the bit length
        return np.frexp(np.asarray(u, np.float64))[1].astype(np.int64)
    hi = np.asarray(u >> np.uint64(32), np.float64)
    lo = np.asarray(u & np.uint64(0xFFFFFFFF), np.float64)
    bh = np.frexp(hi)[1].astype(np.int64)
    bl = np.frexp(lo)[1].astype(np.int64)
    return np.where(bh > 0, bh + 32, bl)


def build_clz(instr):
    types, _ = split_mods(instr, ())
    t = _one_type(types, {"b32", "b64"})
    w = width(t)
    return AluOp(lambda a: (w - _bitlen(a, w)).astype(np.uint32), (t,), ("u32",))


def build_bfind(instr):
    types, flags = split_mods(instr, {"shiftamt"})
    t = _one_type(types, {"u32", "u64", "s32", "s64"})
    w = width(t)
    ut = UNSIGNED_OF[w]
    shiftamt = "shiftamt" in flags

    def fn(a):
        a = np.asarray(a)
        if t in SIGNED:
            u = np.where(a < 0, np.invert(a), a).view(ut)
        else:
            u = a
        pos = _bitlen(u, w) - 1                    # -1 when no bit found
        if shiftamt:
            pos = np.where(pos >= 0, (w - 1) - pos, -1)
        return pos.astype(np.int64).astype(np.uint32)  # -1 -> 0xFFFFFFFF
    return AluOp(fn, (t,), ("u32",))


def _brev_steps(w):
    steps = []
    s = 1
    while s < w:
        pat = 0
        for i in range(w):
            if (i // s) % 2 == 0:
                pat |= 1 << i
        steps.append((s, pat))
        s *= 2
    return steps


def build_brev(instr):
    types, _ = split_mods(instr, ())
    t = _one_type(types, {"b32", "b64"})
    dt = DTYPES[t]
    steps = [(dt.type(s), dt.type(m), dt.type(~m & ((1 << width(t)) - 1))) for s, m in _brev_steps(width(t))]

    def fn(a):
        x = np.asarray(a, dt)
        for s, m, nm in steps:
            x = ((x & m) << s) | ((x & nm) >> s)
        return x
    return AluOp(fn, (t,), (t,))


def _mask(n, ut):
    """(1 << n) - 1 for n in 0..w (n == w gives all ones)."""
    w = ut.itemsize * 8
    n = np.asarray(n, ut)
    one = ut.type(1)
    m = np.left_shift(one, np.minimum(n, ut.type(w - 1))) - one
    return np.where(n >= w, ut.type(np.iinfo(ut).max), m)


def build_bfe(instr):
    types, _ = split_mods(instr, ())
    t = _one_type(types, {"u32", "u64", "s32", "s64"})
    w = width(t)
    ut = UNSIGNED_OF[w]
    dt = DTYPES[t]
    signed = t in SIGNED

    def fn(a, b, c):
        a = np.asarray(a, dt)
        u = a.view(ut)
        pos = np.asarray(b, np.int64) & 0xFF
        ln = np.asarray(c, np.int64) & 0xFF
        pc = np.minimum(pos, w)
        shifted = np.where(pc >= w, ut.type(0), u >> np.minimum(pc, w - 1).astype(ut))
        eff = np.minimum(ln, w - pc)
        m = _mask(eff, ut)
        field = shifted & m
        if signed:
            sidx = np.minimum(pos + ln - 1, w - 1)
            sbit = ((u >> np.maximum(sidx, 0).astype(ut)) & ut.type(1)).astype(bool) & (ln > 0)
            field = np.where(sbit, field | ~m, field)
        return field.view(dt)
    return AluOp(fn, (t, "u32", "u32"), (t,))


def build_bfi(instr):
    types, _ = split_mods(instr, ())
    t = _one_type(types, {"b32", "b64"})
    w = width(t)
    ut = UNSIGNED_OF[w]

    def fn(a, b, c, d):
        a = np.asarray(a, ut)
        b = np.asarray(b, ut)
        pos = np.asarray(c, np.int64) & 0xFF
        ln = np.asarray(d, np.int64) & 0xFF
        inside = pos < w
        pc = np.minimum(pos, w - 1).astype(ut)
        m = _mask(np.minimum(ln, w - np.minimum(pos, w)), ut) << pc
        r = (b & ~m) | ((a << pc) & m)
        return np.where(inside, r, b)
    return AluOp(fn, (t, t, "u32", "u32"), (t,))


def build_prmt(instr):
    types, flags = split_mods(instr, ())   # only the generic (default) mode
    _one_type(types, {"b32"})
    s32 = np.uint64(32)

    def fn(a, b, c):
        src = (np.asarray(b, np.uint64) << s32) | np.asarray(a, np.uint64)
        c = np.asarray(c, np.uint32)
        out = np.zeros(np.broadcast(src, c).shape, np.uint32)
        for i in range(4):
            ctl = (c >> np.uint32(4 * i)) & np.uint32(0xF)
            sel = (ctl & np.uint32(7)).astype(np.uint64)
            byte = ((src >> (sel * np.uint64(8))) & np.uint64(0xFF)).astype(np.uint32)
            rep = (ctl & np.uint32(8)) != 0
            byte = np.where(rep, np.where(byte & np.uint32(0x80), np.uint32(0xFF), np.uint32(0)), byte)
            out |= byte << np.uint32(8 * i)
        return out
    return AluOp(fn, ("b32", "b32", "b32"), ("b32",))
