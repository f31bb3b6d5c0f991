"""The video instructions (PTX ISA 9.0, "Video Instructions"): integer byte/half-word/word arithmetic on 32-bit
registers.

Scalar (vadd vsub vabsdiff vmin vmax vshl vshr vmad vset): the operands' bytes or half-words named by their
selectors (Instr.sel: .b0-.b3, .h0/.h1; none: the word) are sign- or zero-extended by .atype/.btype to 33 bits, the
operation gives a signed 34-bit result, .sat clamps it, then either a secondary operation with c (.add/.min/.max, c
signed by .dtype) or, with a destination selector, a merge into c's other bits; the low 32 bits are written. .sat
and .min/.max follow ptxas for sm_90 rather than the ISA's pseudo-code (_saturate, _finish; read from nvcc 13's
machine code, and a real H100 gave those numbers: vmax.u32.s32.s32.sat d.b2 of -1 is 0xff, vshl.s32...sat d.h0 of
127 << 31 is 0x0000, real-GPU run 3).
A merge into .h1 keeps the result's own bits 16-31 (not its low half shifted up, as the ISA's optMerge writes):
that is what the GPU does (ptxas for sm_90 merges .h1 with PRMT 0x3254; .b1-.b3 are shifted as the ISA says).
vshl/vshr take an unsigned shift count (.clamp: at most 32; .wrap: modulo 32). vmad is (a*b) + c with operand
negation (of the product when exactly one of a, b is negated, or of c), .po (+1), .shr7/.shr15 and .sat, computed
as the GPU does (ptxas: IMAD.WIDE): the selected operands as signed 32-bit values (a .u32 word >= 2^31 is negative),
c sign-extended, a 64-bit sum, shifted arithmetically; .sat clamps to s32 when a, b or the product is signed (the
ISA's signedFinal), else the sum (shifted logically when .shr) to [0, 2^32-1]. vset compares (.eq .ne .lt .le .gt
.ge) to 1 or 0; its secondary operation takes c signed when .atype is .s32 (as the GPU does; the ISA says unsigned).

SIMD (vadd2 vsub2 vavrg2 vabsdiff2 vmin2 vmax2 vset2 and the 4-way byte forms): each element is a half-word (byte)
selected from the four half-words (eight bytes) of b:a by .asel/.bsel (defaults .h10/.h32, .b3210/.b7654; the
rightmost digit names element 0), sign- or zero-extended by type; .sat clamps each result to 16 (8) bits of the
destination type; then either the results replace d's elements named by the destination mask (default all) and
c's elements fill the others, or (.add) the masked results are added to c. vavrg is (x + y + 1) >> 1 for a
non-negative sum, (x + y) >> 1 otherwise.

Every fn takes and returns raw 32-bit registers (uint32 lane vectors); the arithmetic is exact in int64 (vmad: in
Python integers, being 66 bits wide; it is rare).
"""
from __future__ import annotations

import numpy as np

from .common import AluOp, Unsupported

_SIGNED = {"s32": True, "u32": False}
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal}
_SECOP = ("add", "min", "max")
_M32 = np.int64(0xFFFFFFFF)


def _types(instr, n: int) -> list[bool]:
    """Signedness of the first n type modifiers (.u32/.s32)."""
    types = [m for m in instr.mods if m in _SIGNED]
    if len(types) != n:
        raise Unsupported("type")
    return [_SIGNED[t] for t in types[:n]]


def _flags(instr) -> set[str]:
    return {m for m in instr.mods if m not in ("u32", "s32")}


def _sel(instr, k: int) -> str:
    return instr.sel[k] if k < len(instr.sel) else ""


def _extend(v: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    if not signed:
        return v
    top = np.int64(1 << (bits - 1))
    return (v ^ top) - top


def _part(x, sel: str, signed: bool) -> np.ndarray:
    """The byte / half-word / word a scalar selector names, extended to int64."""
    v = np.asarray(x).astype(np.uint32).astype(np.int64)
    if not sel:
        return _extend(v, 32, signed)
    k = int(sel[1])
    if sel[0] == "b":
        return _extend((v >> (8 * k)) & 0xFF, 8, signed)
    return _extend((v >> (16 * k)) & 0xFFFF, 16, signed)


def _clamp(t: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return np.clip(t, lo, hi)


def _s34(t: np.ndarray) -> np.ndarray:
    """The signed 34-bit intermediate result (a shift may carry further bits: they are dropped)."""
    return _extend(np.asarray(t).astype(np.uint64).astype(np.int64) & ((1 << 34) - 1), 34, True)


def _saturate(t: np.ndarray, shift: bool, width: int, dsigned: bool) -> np.ndarray:
    """.sat of a scalar result as ptxas for sm_90 lowers it (what the GPU computes; the ISA clamps to the range of
    the destination's field by .dtype). A shift (t: the s34 value): .s32 clamps to s32, .u32 clamps only above
    (2^32 - 1; a negative value keeps its low bits), and a destination field takes the low bits unclamped. Any other
    operation (t exact): without a destination selector .s32 clamps to s32 and .u32 only below (0; a value above
    2^32 - 1 keeps its low bits); with one, a value outside [0, 2^32) becomes 2^32 - 1, which is then clamped,
    unsigned, to the field's largest value by .dtype (127 or 255, 32767 or 65535), so a negative result gives it."""
    if shift or width == 32:
        if dsigned:
            return np.clip(t, -(1 << 31), (1 << 31) - 1)
        return np.where(t > _M32, _M32, t) if shift else np.where(t < 0, 0, t & _M32)
    u = np.where((t < 0) | (t > _M32), _M32, t)
    return np.minimum(u, (1 << (width - 1)) - 1 if dsigned else (1 << width) - 1)


def _finish(tmp, c, dsel: str, secop: str | None, dsigned: bool) -> np.ndarray:
    """Secondary operation with c, or merge into c at the destination selector; the low 32 bits. As ptxas lowers
    it: .min/.max compare the result's low 32 bits as a signed value with c, signed by .dtype: for .u32 a 64-bit
    unsigned comparison of the result sign-extended with c zero-extended (a result with bit 31 set is the larger)."""
    if secop:
        cv = np.asarray(c).astype(np.uint32).astype(np.int64)
        if secop == "add":
            tmp = tmp + cv
        else:
            t32 = np.asarray(tmp) & _M32
            if dsigned:
                kt, kc = _extend(t32, 32, True), _extend(cv, 32, True)
            else:       # the sign-extended result: with bit 31 set it exceeds every zero-extended c
                kt, kc = np.where(t32 >> 31 == 1, t32 + (1 << 32), t32), cv
            pick_t = kt < kc if secop == "min" else kt > kc
            tmp = np.where(pick_t, t32, cv)
    elif dsel:
        cv = np.asarray(c).astype(np.uint32).astype(np.int64)
        bits, k = (8, int(dsel[1])) if dsel[0] == "b" else (16, int(dsel[1]))
        field = ((1 << bits) - 1) << (bits * k)
        shift = 0 if dsel == "h1" else bits * k     # the GPU's .h1 merge: see the module's docstring
        tmp = ((tmp << shift) & field) | (cv & (0xFFFFFFFF ^ field))
    return (np.asarray(tmp) & _M32).astype(np.uint32)


def _scalar_sources(instr, secop, dsel):
    n = 3 if (secop or dsel) else 2
    if len(instr.srcs) != n:
        raise Unsupported(f"{n} source operands expected")
    if any(s.startswith("-") for s in instr.sel):
        raise Unsupported("negated operand")
    return ("u32",) * n


def build_scalar(instr):
    """vadd vsub vabsdiff vmin vmax vshl vshr."""
    op = instr.opcode
    shift = op in ("vshl", "vshr")
    dsigned, asigned, bsigned = _types(instr, 3)
    flags = _flags(instr)
    mode = None
    if shift:
        mode = ({"clamp", "wrap"} & flags or {None}).pop()
        if mode is None or bsigned:
            raise Unsupported("vshl/vshr need .u32 counts and .clamp or .wrap")
    secop = next((f for f in _SECOP if f in flags), None)
    if flags - {"sat", "clamp", "wrap", *_SECOP} or sum(f in flags for f in _SECOP) > 1:
        raise Unsupported("modifier")
    dsel, asel, bsel = _sel(instr, 0), _sel(instr, 1), _sel(instr, 2)
    if dsel and secop:
        raise Unsupported("a destination selector and a secondary operation")
    if any(s and s not in ("b0", "b1", "b2", "b3", "h0", "h1") for s in (dsel, asel, bsel)):
        raise Unsupported("selector")
    srcs = _scalar_sources(instr, secop, dsel)
    sat = "sat" in flags
    width = 8 if dsel.startswith("b") else 16 if dsel.startswith("h") else 32

    def fn(a, b, c=None):
        ta = _part(a, asel, asigned)
        tb = _part(b, bsel, bsigned)
        if op == "vadd":
            t = ta + tb
        elif op == "vsub":
            t = ta - tb
        elif op == "vabsdiff":
            t = np.abs(ta - tb)
        elif op == "vmin":
            t = np.minimum(ta, tb)
        elif op == "vmax":
            t = np.maximum(ta, tb)
        else:
            tb = np.minimum(tb, 32) if mode == "clamp" else tb & 31
            if op == "vshl":
                t = _s34(ta.astype(np.uint64) << tb.astype(np.uint64))
            else:
                t = ta >> tb
        if sat:
            t = _saturate(t, shift, width, dsigned)
        return _finish(t, c, dsel, secop, dsigned)
    return AluOp(fn, srcs, ("u32",))


def build_vset(instr):
    asigned, bsigned = _types(instr, 2)
    flags = _flags(instr)
    cmp = [f for f in flags if f in _CMP]
    secop = next((f for f in _SECOP if f in flags), None)
    if len(cmp) != 1 or flags - {cmp[0], *_SECOP} or sum(f in flags for f in _SECOP) > 1:
        raise Unsupported("vset needs one comparison")
    dsel, asel, bsel = _sel(instr, 0), _sel(instr, 1), _sel(instr, 2)
    if dsel and secop:
        raise Unsupported("a destination selector and a secondary operation")
    srcs = _scalar_sources(instr, secop, dsel)
    f = _CMP[cmp[0]]

    def fn(a, b, c=None):
        t = f(_part(a, asel, asigned), _part(b, bsel, bsigned)).astype(np.int64)
        return _finish(t, c, dsel, secop, asigned)    # c signed by .atype, as on the GPU
    return AluOp(fn, srcs, ("u32",))


def build_vmad(instr):
    dsigned, asigned, bsigned = _types(instr, 3)
    flags = _flags(instr)
    if flags - {"po", "sat", "shr7", "shr15"} or {"shr7", "shr15"} <= flags:
        raise Unsupported("modifier")
    if len(instr.srcs) != 3:
        raise Unsupported("3 source operands expected")
    sels = [_sel(instr, k) for k in range(4)]
    if sels[0]:
        raise Unsupported("destination selector")
    neg = [s.startswith("-") for s in sels[1:]]
    asel, bsel, csel = (s.lstrip("-") for s in sels[1:])
    if csel or any(s and s not in ("b0", "b1", "b2", "b3", "h0", "h1") for s in (asel, bsel)):
        raise Unsupported("selector")
    po = "po" in flags
    if po and any(neg):
        raise Unsupported("negated operand with .po")
    neg_ab = neg[0] != neg[1]
    signed_final = asigned or bsigned or neg_ab or neg[2]
    scale = 7 if "shr7" in flags else 15 if "shr15" in flags else 0
    sat = "sat" in flags
    u32max = (1 << 32) - 1

    def fn(a, b, c):
        # exact in int64: |a*b| <= 2^62, plus a 32-bit c and 1
        ta = _extend(_part(a, asel, asigned) & _M32, 32, True)
        tb = _extend(_part(b, bsel, bsigned) & _M32, 32, True)
        cv = np.asarray(c).astype(np.uint32).astype(np.int64)
        tmp = ta * tb
        lsb = 1 if po else 0
        if neg_ab:
            tmp = ~tmp
            lsb = 1
        elif neg[2]:
            cv = cv ^ _M32
            lsb = 1
        v = tmp + _extend(cv, 32, True) + lsb
        r = v >> scale
        if sat:
            if signed_final:
                r = np.clip(r, -(1 << 31), (1 << 31) - 1)
            else:   # a negative sum shifted logically is huge; unshifted, it clamps to 0
                r = np.where(v < 0, u32max if scale else 0, np.clip(r, 0, u32max))
        return (r & _M32).astype(np.uint32)
    return AluOp(fn, ("u32", "u32", "u32"), ("u32",))


def _simd_sel(sel: str, kind: str, n: int, default: str) -> list[int]:
    """The element indices a SIMD selector names, element 0 first (its rightmost digit)."""
    sel = sel or default
    if sel[0] != kind or len(sel) != n + 1:
        raise Unsupported(f"selector .{sel}")
    return [int(ch) for ch in reversed(sel[1:])]


def _simd_mask(sel: str, kind: str, n: int) -> list[bool]:
    if not sel:
        return [True] * n
    if sel[0] != kind or any(int(ch) >= n for ch in sel[1:]) or len(set(sel[1:])) != len(sel[1:]):
        raise Unsupported(f"mask .{sel}")
    return [str(i) in sel[1:] for i in range(n)]


def build_simd(instr):
    """vadd2 vsub2 vavrg2 vabsdiff2 vmin2 vmax2 vset2 and vadd4 ... vset4."""
    op = instr.opcode[:-1]
    n = int(instr.opcode[-1])
    bits = 32 // n
    kind = "h" if n == 2 else "b"
    is_set = op == "vset"
    flags = _flags(instr)
    if is_set:
        asigned, bsigned = _types(instr, 2)
        dsigned = False
        cmp = [f for f in flags if f in _CMP]
        if len(cmp) != 1:
            raise Unsupported("vset needs one comparison")
        flags -= set(cmp)
        f = _CMP[cmp[0]]
    else:
        dsigned, asigned, bsigned = _types(instr, 3)
    if flags - {"sat", "add"} or {"sat", "add"} <= flags or (is_set and "sat" in flags):
        raise Unsupported("modifier")
    if len(instr.srcs) != 3 or any(s.startswith("-") for s in instr.sel):
        raise Unsupported("operands")
    mask = _simd_mask(_sel(instr, 0), kind, n)
    asel = _simd_sel(_sel(instr, 1), kind, n, "h10" if n == 2 else "b3210")
    bsel = _simd_sel(_sel(instr, 2), kind, n, "h32" if n == 2 else "b7654")
    if _sel(instr, 3):
        raise Unsupported("selector on c")
    if max(asel + bsel) >= 2 * n:
        raise Unsupported("selector")
    sat = "sat" in flags
    acc = "add" in flags
    fm = (1 << bits) - 1

    def fn(a, b, c):
        ab = (np.asarray(b).astype(np.uint32).astype(np.uint64) << np.uint64(32)) | \
            np.asarray(a).astype(np.uint32).astype(np.uint64)
        elem = [((ab >> np.uint64(bits * k)) & np.uint64(fm)).astype(np.int64) for k in range(2 * n)]
        cv = np.asarray(c).astype(np.uint32).astype(np.int64)
        out = cv if acc else np.zeros(np.shape(cv), np.int64)
        for i in range(n):
            x = _extend(elem[asel[i]], bits, asigned)
            y = _extend(elem[bsel[i]], bits, bsigned)
            if is_set:
                t = f(x, y).astype(np.int64)
            elif op == "vadd":
                t = x + y
            elif op == "vsub":
                t = x - y
            elif op == "vavrg":
                s = x + y
                t = np.where(s >= 0, (s + 1) >> 1, s >> 1)
            elif op == "vabsdiff":
                t = np.abs(x - y)
            elif op == "vmin":
                t = np.minimum(x, y)
            else:
                t = np.maximum(x, y)
            if sat:
                t = _clamp(t, bits, dsigned)
            if acc:
                if mask[i]:
                    out = out + t
            else:
                part = t if mask[i] else cv >> (bits * i)
                out = out | ((part & fm) << (bits * i))
        return (out & _M32).astype(np.uint32)
    return AluOp(fn, ("u32", "u32", "u32"), ("u32",))


def build_video(instr):
    if instr.opcode == "vmad":
        return build_vmad(instr)
    if instr.opcode == "vset":
        return build_vset(instr)
    if instr.opcode[-1] in "24":
        return build_simd(instr)
    return build_scalar(instr)


VIDEO_OPCODES = ("vadd", "vsub", "vabsdiff", "vmin", "vmax", "vshl", "vshr", "vmad", "vset",
                 "vadd2", "vsub2", "vavrg2", "vabsdiff2", "vmin2", "vmax2", "vset2",
                 "vadd4", "vsub4", "vavrg4", "vabsdiff4", "vmin4", "vmax4", "vset4")
