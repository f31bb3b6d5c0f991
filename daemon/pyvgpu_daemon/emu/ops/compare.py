"""Comparisons and selection: setp, set, selp.

Ordered float comparisons (eq ne lt le gt ge) are false when either operand is NaN; the unordered ones
(equ neu ltu leu gtu geu) are true then; num = neither is NaN, nan = either is NaN. lo/ls/hi/hs are the
unsigned spellings of lt/le/gt/ge. With `p|q` the second destination gets the complement of the comparison
(combined with c the same way). set writes all ones (integer dtypes; per 16-bit half for the x2 source types)
or 1.0 (float dtypes), else 0.
"""
from __future__ import annotations

import numpy as np

from ..ptx.types import DTYPES, INTS
from .common import AluOp, Unsupported, ftz, one_of, quiet, split_mods, select
from .half import HALF_TYPES, base_fmt, decode, lanes, unlanes

CMP = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs",
       "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
BOOL = ("and", "or", "xor")
_ALIAS = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


def _cmp_fn(op: str, is_float: bool):
    op = _ALIAS.get(op, op)
    if op == "eq":
        return np.equal
    if op == "ne":
        return (lambda a, b: np.less(a, b) | np.greater(a, b)) if is_float else np.not_equal
    if op in ("lt", "le", "gt", "ge"):
        return {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}[op]
    if not is_float:
        raise Unsupported(f".{op} on an integer type")
    if op == "neu":
        return np.not_equal
    if op == "equ":
        return lambda a, b: ~(np.less(a, b) | np.greater(a, b))
    if op in ("ltu", "leu", "gtu", "geu"):
        inv = {"ltu": np.greater_equal, "leu": np.greater, "gtu": np.less_equal, "geu": np.less}[op]
        return lambda a, b: ~inv(a, b)
    if op == "num":
        return lambda a, b: np.equal(a, a) & np.equal(b, b)
    if op == "nan":
        return lambda a, b: np.not_equal(a, a) | np.not_equal(b, b)
    raise Unsupported(op)


def _prep(stype: str, do_ftz: bool):
    """fn(x) -> values comparable with NumPy for one lane (non-x2 types)."""
    if stype == "bf16":
        return lambda x: decode(x, "bf16")
    if do_ftz and stype in ("f32", "f64", "f16"):
        return ftz
    return None


def _parse(instr, nbool_extra=0):
    types, flags = split_mods(instr, CMP + BOOL + ("ftz",))
    cmp = one_of(flags, CMP)
    if cmp is None:
        raise Unsupported("comparison operator")
    boolop = one_of(flags, BOOL)
    return types, cmp, boolop, "ftz" in flags


def _combine(r, boolop, c):
    if boolop is None:
        return r
    return {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[boolop](r, c)


def _lane_results(stype, cmp, do_ftz):
    """fn(a, b) -> list of bool arrays (one per 16-bit lane for x2 types, else one)."""
    is_float = stype in ("f32", "f64") or stype in HALF_TYPES
    cf = _cmp_fn(cmp, is_float)
    if stype in ("f16x2", "bf16x2"):
        fmt = base_fmt(stype)

        def lanes_fn(a, b):
            out = []
            for x, y in zip(lanes(stype, a), lanes(stype, b)):
                xa, ya = decode(x, fmt), decode(y, fmt)
                if do_ftz:
                    tiny = 2.0 ** -14
                    xa = np.where(np.abs(xa) < tiny, 0.0, xa)
                    ya = np.where(np.abs(ya) < tiny, 0.0, ya)
                out.append(cf(xa, ya))
            return out
        return lanes_fn
    prep = _prep(stype, do_ftz)
    if prep is None:
        return lambda a, b: [cf(a, b)]
    return lambda a, b: [cf(prep(a), prep(b))]


def build_setp(instr):
    types, cmp, boolop, do_ftz = _parse(instr)
    if len(types) != 1 or types[0] not in DTYPES or types[0] == "pred":
        raise Unsupported("type")
    t = types[0]
    lane_fn = _lane_results(t, cmp, do_ftz)
    ndst = max(1, len(instr.dsts))
    srcs = (t, t) + (("pred",) if boolop else ())
    x2 = t in ("f16x2", "bf16x2")
    if x2 and ndst != 2:
        raise Unsupported("setp on x2 types needs p|q")

    if x2:
        def fn(a, b, c=None):
            lo, hi = lane_fn(a, b)
            return _combine(lo, boolop, c), _combine(hi, boolop, c)
    elif ndst == 2:
        def fn(a, b, c=None):
            r = lane_fn(a, b)[0]
            return _combine(r, boolop, c), _combine(~r, boolop, c)
    else:
        if boolop is None and t not in ("bf16",) and not do_ftz:
            is_float = t in ("f32", "f64", "f16")
            f = _cmp_fn(cmp, is_float)
            return AluOp(quiet(f) if is_float else f, srcs, ("pred",))   # integer compares never warn

        def fn(a, b, c=None):
            return _combine(lane_fn(a, b)[0], boolop, c)
    return AluOp(quiet(fn), srcs, ("pred",) * ndst)


_ONE_BITS = {"f16": np.uint16(0x3C00), "bf16": np.uint16(0x3F80)}


def build_set(instr):
    types, cmp, boolop, do_ftz = _parse(instr)
    if len(types) != 2:
        raise Unsupported("set needs .dtype.stype")
    dtype, stype = types
    if stype not in DTYPES or stype == "pred":
        raise Unsupported("stype")
    lane_fn = _lane_results(stype, cmp, do_ftz)
    srcs = (stype, stype) + (("pred",) if boolop else ())
    x2 = stype in ("f16x2", "bf16x2")

    if x2:
        if dtype in ("u32", "s32"):
            def encode_lanes(rs):
                lo, hi = (np.where(r, np.uint16(0xFFFF), np.uint16(0)) for r in rs)
                return unlanes("f16x2", [lo, hi]).view(DTYPES[dtype])
        elif dtype in ("f16x2", "bf16x2"):
            one = _ONE_BITS[base_fmt(dtype)]

            def encode_lanes(rs):
                return unlanes(dtype, [np.where(r, one, np.uint16(0)) for r in rs])
        else:
            raise Unsupported("dtype")
    else:
        if dtype in INTS:
            dt = DTYPES[dtype]
            allones = dt.type(-1) if dtype.startswith("s") else dt.type(np.iinfo(dt).max)
            zero = dt.type(0)

            def encode_lanes(rs):
                return np.where(rs[0], allones, zero)
        elif dtype == "f32":
            def encode_lanes(rs):
                return np.where(rs[0], np.float32(1.0), np.float32(0.0))
        elif dtype in ("f16", "bf16"):
            one = _ONE_BITS[dtype]

            def encode_lanes(rs):
                bits = np.where(rs[0], one, np.uint16(0))
                return bits.view(np.float16) if dtype == "f16" else bits
        else:
            raise Unsupported("dtype")

    def fn(a, b, c=None):
        rs = [_combine(r, boolop, c) for r in lane_fn(a, b)]
        return encode_lanes(rs)
    return AluOp(quiet(fn), srcs, (dtype,))


def build_selp(instr):
    types, _ = split_mods(instr, ())
    if len(types) != 1 or types[0] not in DTYPES or types[0] == "pred":
        raise Unsupported("type")
    t = types[0]
    return AluOp(lambda a, b, c: select(c, a, b), (t, t, "pred"), (t,))
