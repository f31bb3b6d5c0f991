"""The video instructions (ops/video.py) against a host model written lane by lane from the PTX ISA's pseudo-code
("Video Instructions"), corrected where the GPU does otherwise (an H100 ran tests/cuda/emu_video.cu; the forms were
read in ptxas's sm_90 code: the .h1 merge, vset's c, vmad's 64-bit signed arithmetic, scalar .sat and .min/.max),
on random registers with every selector, .sat, secondary operation, merge, mask and type combination; and their PTX
syntax (operand selectors, vmad's negated operands) through the parser."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from pyvgpu_daemon.emu.ops import build_alu
from pyvgpu_daemon.emu.ptx.parser import parse

N = 64
RNG = random.Random(19)
SPECIAL = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x00FF00FF, 32, 31]


def regs() -> list[int]:
    return SPECIAL + [RNG.getrandbits(32) for _ in range(N - len(SPECIAL))]


def instr(text: str):
    """The one instruction of a kernel `text` (registers %r0..%r9)."""
    mod = parse(f".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry k()\n{{\n"
                f".reg .b32 %r<10>;\n{text};\nret;\n}}\n")
    return next(i for i in mod.functions["k"].body if not isinstance(i, str) and i.opcode != "ret")


def run(text: str, a, b, c=None) -> list[int]:
    ins = instr(text)
    op = build_alu(ins)
    args = [np.array(a, np.uint32), np.array(b, np.uint32)] + ([np.array(c, np.uint32)] if c is not None else [])
    return np.asarray(op.fn(*args)).astype(np.int64).tolist()


# ------------------------------------------------------------------------------------------------ the model
def sx(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >> (bits - 1) else v


def part(x: int, t: str, sel: str) -> int:
    """partSelectSignExtend"""
    signed = t == "s32"
    if not sel:
        return sx(x, 32, signed)
    k = int(sel[1])
    return sx(x >> (8 * k), 8, signed) if sel[0] == "b" else sx(x >> (16 * k), 16, signed)


def clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def opt_saturate(tmp: int, sat: bool, sign: bool, dsel: str, shift: bool) -> int:
    """.sat as ptxas for sm_90 lowers it (an H100 gave its numbers, run 3; the ISA clamps to the field's range by
    .dtype): a shift clamps the s34 value to s32 (.s32) or only above 2^32 - 1 (.u32), a field takes the low bits;
    any other operation without a field: s32 (.s32), or only below 0 (.u32); with a field, a value outside [0, 2^32)
    is 2^32 - 1, then clamped (unsigned) to the field's largest value by .dtype."""
    if not sat:
        return tmp
    bits = 8 if dsel.startswith("b") else 16 if dsel.startswith("h") else 32
    m32 = (1 << 32) - 1
    if shift or bits == 32:
        if sign:
            return clamp(tmp, -(1 << 31), (1 << 31) - 1)
        return min(tmp, m32) if shift else (0 if tmp < 0 else tmp & m32)
    u = m32 if tmp < 0 or tmp > m32 else tmp
    return min(u, (1 << (bits - 1)) - 1 if sign else (1 << bits) - 1)


def secondary(secop: str, tmp: int, c: int, sign: bool) -> int:
    """ptxas's .add/.min/.max: .min/.max compare the result's low 32 bits sign-extended with c signed by .dtype, as
    64-bit unsigned values for .u32 (c zero-extended: a result with bit 31 set is the larger)."""
    if secop == "add":
        return tmp + c
    t32 = tmp & 0xFFFFFFFF
    kt = sx(t32, 32, True) if sign else sx(t32, 32, True) & ((1 << 64) - 1)
    kc = sx(c, 32, sign)
    return t32 if (kt < kc if secop == "min" else kt > kc) else c


def opt_merge(dsel: str, tmp: int, c: int) -> int:
    # the ISA shifts tmp's low half into .h1; the GPU keeps tmp's bits 16-31 there
    masks = {"h0": (0xFFFF, 0, 0xFFFF0000), "h1": (0xFFFF0000, 0, 0x0000FFFF), "b0": (0xFF, 0, 0xFFFFFF00),
             "b1": (0xFF, 8, 0xFFFF00FF), "b2": (0xFF, 16, 0xFF00FFFF), "b3": (0xFF, 24, 0x00FFFFFF)}
    if not dsel:
        return tmp
    m, sh, keep = masks[dsel]
    return ((tmp & m) << sh) | (keep & c)


def model_scalar(op, dt, at, bt, sat, secop, mode, dsel, asel, bsel, a, b, c):
    ta = part(a, at, asel)
    tb = part(b, "u32" if op in ("vshl", "vshr") else bt, bsel)
    if op in ("vshl", "vshr"):
        tb = min(tb, 32) if mode == "clamp" else tb & 0x1F
    tmp = {"vadd": lambda: ta + tb, "vsub": lambda: ta - tb, "vabsdiff": lambda: abs(ta - tb),
           "vmin": lambda: min(ta, tb), "vmax": lambda: max(ta, tb), "vshl": lambda: ta << tb,
           "vshr": lambda: ta >> tb}[op]()
    tmp = sx(tmp, 34, True)                                  # the signed 34-bit intermediate
    tmp = opt_saturate(tmp, sat, dt == "s32", dsel, op in ("vshl", "vshr"))
    if secop:
        tmp = secondary(secop, tmp, c, dt == "s32")
    else:
        tmp = opt_merge(dsel, tmp, c)
    return tmp & 0xFFFFFFFF


def model_vmad(dt, at, bt, negs, po, sat, scale, asel, bsel, a, b, c):
    """The GPU's vmad (ptxas: IMAD.WIDE): the selected operands as signed 32-bit values, c sign-extended, a 64-bit
    sum (the ISA: zero-extended .u32 operands, 128 bits); .sat as the ISA's signedFinal says."""
    ta, tb = sx(part(a, at, asel), 32, True), sx(part(b, bt, bsel), 32, True)
    signed_final = at == "s32" or bt == "s32" or (negs[0] ^ negs[1]) or negs[2]
    tmp = ta * tb
    lsb = 0
    if po:
        lsb = 1
    elif negs[0] ^ negs[1]:
        tmp = -tmp - 1
        lsb = 1
    elif negs[2]:
        c = ~c & 0xFFFFFFFF
        lsb = 1
    v = tmp + sx(c, 32, True) + lsb
    result = v >> scale
    if sat:
        if signed_final:
            result = clamp(result, -(1 << 31), (1 << 31) - 1)
        else:
            result = clamp(sx(((v & ((1 << 64) - 1)) >> scale), 64, True), 0, (1 << 32) - 1)
    return result & 0xFFFFFFFF


def model_simd(op, n, dt, at, bt, cmp, sat, acc, mask, asel, bsel, a, b, c):
    bits = 32 // n
    ab = (b << 32) | a

    def extract(sel, t, default):
        digits = (sel or default)[1:]
        return [sx(ab >> (bits * int(d)), bits, t == "s32") for d in reversed(digits)]
    va = extract(asel, at, "h10" if n == 2 else "b3210")
    vb = extract(bsel, bt, "h32" if n == 2 else "b7654")
    vc = [(c >> (bits * i)) & ((1 << bits) - 1) for i in range(n)]
    t = []
    for i in range(n):
        x, y = va[i], vb[i]
        if op == "vset":
            v = int({"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[cmp])
        else:
            v = {"vadd": x + y, "vsub": x - y, "vavrg": (x + y + 1) >> 1 if x + y >= 0 else (x + y) >> 1,
                 "vabsdiff": abs(x - y), "vmin": min(x, y), "vmax": max(x, y)}[op]
        if sat:
            v = clamp(v, -(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dt == "s32" else clamp(v, 0, (1 << bits) - 1)
        t.append(v)
    m = [True] * n if not mask else [str(i) in mask[1:] for i in range(n)]
    if acc:
        d = c
        for i in range(n):
            d += t[i] if m[i] else 0
    else:
        d = 0
        for i in range(n):
            d |= ((t[i] if m[i] else vc[i]) & ((1 << bits) - 1)) << (bits * i)
    return d & 0xFFFFFFFF


# ------------------------------------------------------------------------------------------------ tests
TYPES = ["u32", "s32"]
SCALAR_SELS = ["", "b0", "b1", "b2", "b3", "h0", "h1"]


@pytest.mark.parametrize("op", ["vadd", "vsub", "vabsdiff", "vmin", "vmax", "vshl", "vshr"])
def test_scalar_video_instructions(op):
    rng = random.Random(op)
    a, b, c = regs(), regs(), regs()
    shift = op in ("vshl", "vshr")
    cases = 0
    for dt, at, bt in itertools.product(TYPES, TYPES, ["u32"] if shift else TYPES):
        for _ in range(6):
            sat = rng.random() < 0.5
            kind = rng.choice(["plain", "secop", "merge"])
            secop = rng.choice(["add", "min", "max"]) if kind == "secop" else None
            dsel = rng.choice(SCALAR_SELS[1:]) if kind == "merge" else ""
            asel, bsel = rng.choice(SCALAR_SELS), rng.choice(SCALAR_SELS)
            mode = rng.choice(["clamp", "wrap"]) if shift else None
            mods = ".".join([op, dt, at, bt] + (["sat"] if sat else []) + ([mode] if mode else []) +
                            ([secop] if secop else []))
            ops = f"%r1{'.' + dsel if dsel else ''}, %r2{'.' + asel if asel else ''}, %r3{'.' + bsel if bsel else ''}"
            three = kind != "plain"
            got = run(f"{mods} {ops}{', %r4' if three else ''}", a, b, c if three else None)
            want = [model_scalar(op, dt, at, bt, sat, secop, mode, dsel, asel, bsel, x, y, z)
                    for x, y, z in zip(a, b, c)]
            assert got == want, f"{mods} {ops}"
            cases += 1
    assert cases >= 24


def test_vset_scalar():
    a, b, c = regs(), regs(), regs()
    for at, bt, cmp in itertools.product(TYPES, TYPES, ["eq", "ne", "lt", "le", "gt", "ge"]):
        for extra, dsel in (("", ""), (".add", ""), (".max", ""), ("", "b2")):
            text = f"vset.{at}.{bt}.{cmp}{extra} %r1{'.' + dsel if dsel else ''}, %r2.h1, %r3.b0" + \
                (", %r4" if extra or dsel else "")
            got = run(text, a, b, c if extra or dsel else None)
            want = []
            for x, y, z in zip(a, b, c):
                tmp = int(model_simd("vset", 1, "u32", at, bt, cmp, False, False, "", "", "", 0, 0, 0) * 0 +
                          {"eq": part(x, at, "h1") == part(y, bt, "b0"), "ne": part(x, at, "h1") != part(y, bt, "b0"),
                           "lt": part(x, at, "h1") < part(y, bt, "b0"), "le": part(x, at, "h1") <= part(y, bt, "b0"),
                           "gt": part(x, at, "h1") > part(y, bt, "b0"),
                           "ge": part(x, at, "h1") >= part(y, bt, "b0")}[cmp])
                if extra == ".add":
                    tmp += z
                elif extra == ".max":
                    tmp = max(tmp, sx(z, 32, at == "s32"))   # the GPU: c signed by .atype
                tmp = opt_merge(dsel, tmp, z)
                want.append(tmp & 0xFFFFFFFF)
            assert got == want, text


def test_vmad():
    a, b, c = regs(), regs(), regs()
    rng = random.Random(7)
    for dt, at, bt in itertools.product(TYPES, TYPES, TYPES):
        for negs in ((0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 0, 1)):
            for po, sat, scale in ((0, 0, 0), (0, 1, 0), (0, 0, 7), (0, 1, 15), (1, 0, 0), (1, 1, 15)):
                if po and any(negs):
                    continue
                asel, bsel = rng.choice(SCALAR_SELS), rng.choice(SCALAR_SELS)
                mods = ".".join(["vmad", dt, at, bt] + (["po"] if po else []) + (["sat"] if sat else []) +
                                ([f"shr{scale}"] if scale else []))
                ops = (f"{'-' if negs[0] else ''}%r2{'.' + asel if asel else ''}, "
                       f"{'-' if negs[1] else ''}%r3{'.' + bsel if bsel else ''}, {'-' if negs[2] else ''}%r4")
                got = run(f"{mods} %r1, {ops}", a, b, c)
                want = [model_vmad(dt, at, bt, negs, po, sat, scale, asel, bsel, x, y, z) for x, y, z in zip(a, b, c)]
                assert got == want, f"{mods} %r1, {ops}"


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("op", ["vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax", "vset"])
def test_simd_video_instructions(op, n):
    rng = random.Random(f"{op}{n}")
    a, b, c = regs(), regs(), regs()
    kind = "h" if n == 2 else "b"
    for dt, at, bt in itertools.product(TYPES, TYPES, TYPES):
        for _ in range(5):
            cmp = rng.choice(["eq", "ne", "lt", "le", "gt", "ge"]) if op == "vset" else None
            acc = rng.random() < 0.4
            sat = not acc and op != "vset" and rng.random() < 0.5
            digits = "0123" if n == 2 else "01234567"
            asel = rng.choice(["", kind + "".join(rng.choice(digits) for _ in range(n))])
            bsel = rng.choice(["", kind + "".join(rng.choice(digits) for _ in range(n))])
            mask = rng.choice(["", kind + "".join(sorted(rng.sample("0123"[:n], rng.randint(1, n)), reverse=True))])
            types = [at, bt] if op == "vset" else [dt, at, bt]
            mods = ".".join([f"{op}{n}", *types] + ([cmp] if cmp else []) + (["sat"] if sat else []) +
                            (["add"] if acc else []))
            text = (f"{mods} %r1{'.' + mask if mask else ''}, %r2{'.' + asel if asel else ''}, "
                    f"%r3{'.' + bsel if bsel else ''}, %r4")
            got = run(text, a, b, c)
            want = [model_simd(op, n, dt, at, bt, cmp, sat, acc, mask, asel, bsel, x, y, z)
                    for x, y, z in zip(a, b, c)]
            assert got == want, text


def test_selectors_and_negation_parse_and_bad_forms_are_refused():
    ins = instr("vmad.s32.s32.u32.sat %r0, -%r1.h1, %r2.b3, -%r3")
    assert [o.name for o in ins.dsts + ins.srcs] == ["%r0", "%r1", "%r2", "%r3"] and ins.sel == ("", "-h1", "b3", "-")
    ins = instr("vsub4.s32.s32.s32.sat %r1.b0, %r2.b3210, %r3.b7654, %r1")
    assert ins.sel == ("b0", "b3210", "b7654", "")
    from pyvgpu_daemon.errors import CudaError
    for bad in ("vadd.s32.s32.s32.sat.add %r1.b0, %r2, %r3, %r4",       # merge and secondary operation
                "vadd2.u32.u32.u32.sat.add %r1, %r2, %r3, %r4",         # .sat with the accumulate
                "vshl.u32.u32.s32.clamp %r1, %r2, %r3",                  # signed shift count
                "vadd4.u32.u32.u32 %r1, %r2.b3218, %r3, %r4",            # byte 8 of two registers
                "vmad.u32.u32.u32.po %r1, -%r2, %r3, %r4"):              # negation with .po
        with pytest.raises(CudaError):
            build_alu(instr(bad))


def test_what_an_h100_computed():
    """Results an H100 gave for tests/cuda/emu_video.cu (real-GPU run 2), where the ISA's pseudo-code says otherwise."""
    assert run("vabsdiff.u32.u32.u32 %r0.h1, %r1.h0, %r2.b3, %r3", [1, 0x7F], [1, 0x7F], [0x19871CF9, 0x4A4158B8]) \
        == [0x00001CF9, 0x000058B8]
    assert run("vmad.u32.u32.u32.shr15 %r0, %r1, %r2, %r3", [0, 0x80], [0, 0x80], [0xD7F4EAA8, 0xE005D85B]) \
        == [0xFFFFAFE9, 0xFFFFC00C]
    assert run("vset.s32.u32.lt.max %r0, %r1, %r2.b1, %r3", [0, 0xFF], [0, 0xFF], [0xD7F4EAA8, 0x972C97B6]) \
        == [0, 0]
