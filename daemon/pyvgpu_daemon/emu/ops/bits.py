"""Logic and bit manipulation: and or xor not cnot shl shr shf popc clz brev bfind bfe bfi prmt lop3 dp4a dp2a slct
bmsk szext."""
from __future__ import annotations

import numpy as np

from ..ptx import ir
from ..ptx.types import DTYPES, SIGNED, UNSIGNED_OF, width
from .common import AluOp, Unsupported, one_of, split_mods

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


def build_lop3(instr):
    """lop3.b32 d, a, b, c, immLut: bit i of d = bit (a_i<<2 | b_i<<1 | c_i) of immLut (immLut must be an
    immediate)."""
    types, _ = split_mods(instr, ())
    _one_type(types, {"b32"})
    if len(instr.srcs) != 4 or not isinstance(instr.srcs[3], ir.Imm):
        raise Unsupported("lop3 needs an immediate lookup table")
    lut = int(instr.srcs[3].value) & 0xFF
    ones = np.uint32(0xFFFFFFFF)

    def fn(a, b, c, _lut=None):
        a = np.asarray(a, np.uint32)
        b = np.asarray(b, np.uint32)
        c = np.asarray(c, np.uint32)
        out = np.zeros(np.broadcast(a, b, c).shape, np.uint32)
        na, nb, nc = a ^ ones, b ^ ones, c ^ ones
        for i in range(8):
            if lut >> i & 1:
                out |= (a if i & 4 else na) & (b if i & 2 else nb) & (c if i & 1 else nc)
        return out
    return AluOp(fn, ("b32", "b32", "b32", "b32"), ("b32",))


def _fields(x, bits, signed):
    """The 32 // bits fields of the b32 x, lowest first, as int64 (sign-extended when signed)."""
    x = np.asarray(x, np.uint32)
    mask, sign = (1 << bits) - 1, 1 << (bits - 1)
    out = []
    for i in range(32 // bits):
        v = ((x >> np.uint32(bits * i)) & np.uint32(mask)).astype(np.int64)
        out.append((v ^ sign) - sign if signed else v)
    return out


def build_dp4a(instr):
    """dp4a.atype.btype d, a, b, c: d = c + sum of the four byte products (bytes sign/zero-extended by type),
    modulo 2**32; d and c are .u32 when both types are .u32, else .s32."""
    types, _ = split_mods(instr, ())
    if len(types) != 2 or any(t not in ("u32", "s32") for t in types):
        raise Unsupported("type")
    at, bt = types
    ct = "u32" if at == bt == "u32" else "s32"

    def fn(a, b, c):
        pa, pb = _fields(a, 8, at == "s32"), _fields(b, 8, bt == "s32")
        acc = np.asarray(c).astype(np.int64)
        for x, y in zip(pa, pb):
            acc = acc + x * y
        return (acc & 0xFFFFFFFF).astype(np.uint32).view(DTYPES[ct])
    return AluOp(fn, (at, bt, ct), (ct,))


def build_dp2a(instr):
    """dp2a.{lo,hi}.atype.btype d, a, b, c: d = c + a.h0*b.byte[k] + a.h1*b.byte[k+1], k = 0 (.lo) or 2 (.hi)."""
    types, flags = split_mods(instr, {"lo", "hi"})
    part = one_of(flags, ("lo", "hi"))
    if part is None or len(types) != 2 or any(t not in ("u32", "s32") for t in types):
        raise Unsupported("dp2a form")
    at, bt = types
    ct = "u32" if at == bt == "u32" else "s32"
    k = 0 if part == "lo" else 2

    def fn(a, b, c):
        ha, bb = _fields(a, 16, at == "s32"), _fields(b, 8, bt == "s32")
        acc = np.asarray(c).astype(np.int64) + ha[0] * bb[k] + ha[1] * bb[k + 1]
        return (acc & 0xFFFFFFFF).astype(np.uint32).view(DTYPES[ct])
    return AluOp(fn, (at, bt, ct), (ct,))


_SLCT_D = {"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64"}


def build_slct(instr):
    """slct.dtype.s32 d, a, b, c: d = c >= 0 ? a : b;  slct{.ftz}.dtype.f32: the same on a float c (NaN -> b)."""
    types, flags = split_mods(instr, {"ftz"})
    if len(types) != 2 or types[0] not in _SLCT_D or types[1] not in ("s32", "f32"):
        raise Unsupported("type")
    dt, ct = types
    zero = np.int32(0) if ct == "s32" else np.float32(0)
    # .ftz only changes the sign of a flushed subnormal c, and -0 >= 0 anyway: no effect on the choice
    return AluOp(lambda a, b, c: np.where(np.greater_equal(c, zero), a, b), (dt, dt, ct), (dt,))


def _clamp_or_wrap(instr) -> bool:
    """True for .clamp, False for .wrap (bmsk, szext)."""
    _, flags = split_mods(instr, {"clamp", "wrap"})
    mode = one_of(flags, ("clamp", "wrap"))
    if mode is None:
        raise Unsupported("missing .clamp/.wrap")
    return mode == "clamp"


def build_bmsk(instr):
    """bmsk.{clamp,wrap}.b32 d, a, b: a mask of b ones from bit a (PTX ISA pseudo-code, computed in 64 bits)."""
    clamp = _clamp_or_wrap(instr)
    _one_type(split_mods(instr, {"clamp", "wrap"})[0], {"b32"})
    ones = np.uint64(0xFFFFFFFF)

    def fn(a, b):
        a = np.asarray(a, np.uint32).astype(np.uint64)
        b = np.asarray(b, np.uint32).astype(np.uint64)
        a1 = a & np.uint64(31)
        b1 = b & np.uint64(31)
        s = a1 + b1
        mask0 = (ones << a1) & ones
        mask1 = (ones << s) & ones
        zero1 = s >= np.uint64(32)
        if clamp:
            mask0 = np.where(a >= np.uint64(32), np.uint64(0), mask0)
            zero1 = zero1 | (a >= np.uint64(32)) | (b >= np.uint64(32))
        mask1 = np.where(zero1, np.uint64(0), np.where(b1 == 0, ones, mask1))
        return (mask0 & ~mask1 & ones).astype(np.uint32)
    return AluOp(fn, ("b32", "u32"), ("b32",))


def build_szext(instr):
    """szext.{clamp,wrap}.{u32,s32} d, a, b: the low N bits of a zero- or sign-extended, N = b mod 32 (.wrap) or
    min(b, 32) (.clamp); 0 when N is 0."""
    clamp = _clamp_or_wrap(instr)
    t = _one_type(split_mods(instr, {"clamp", "wrap"})[0], {"u32", "s32"})

    def fn(a, b):
        a = np.asarray(a).view(np.uint32).astype(np.uint64) if np.ndim(a) else np.uint64(np.uint32(a))
        b = np.asarray(b, np.uint32).astype(np.uint64)
        n = np.minimum(b, np.uint64(32)) if clamp else b & np.uint64(31)
        low = a & ((np.uint64(1) << n) - np.uint64(1))
        if t == "s32":
            sign = (n > 0) & (((a >> np.maximum(n, np.uint64(1)) - np.uint64(1)) & np.uint64(1)) == 1)
            low = np.where(sign, low | (np.uint64(0xFFFFFFFF) << n), low)
        return (low & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(DTYPES[t])
    return AluOp(fn, (t, "u32"), (t,))
