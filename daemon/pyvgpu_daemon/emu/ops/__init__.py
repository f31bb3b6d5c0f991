"""ALU instruction semantics: pure, vectorised NumPy functions built once per instruction.

    op = build_alu(instr)          # at module load time; CudaError(cudaErrorInvalidPtx) if unsupported
    result = op.fn(*sources)       # sources read as op.src_types (arrays, or NumPy scalars for immediates)
                                   # result: one array per entry of op.dst_types (a tuple when there are two)

Families (one module each):
- integer.py: add sub (.sat.s32) mul/mad (.lo .hi .wide; 16/32/64-bit, mul.hi.64 exact) mul24 mad24 div rem abs
  neg min max sad.
- bits.py: and or xor not cnot (b16/b32/b64/pred) shl shr (count clamped) shf (.l/.r .wrap/.clamp) popc clz bfind
  (.shiftamt) brev bfe bfi prmt (generic mode) lop3 dp4a dp2a slct bmsk szext.
- floating.py: f32/f64 add sub mul fma mad div rcp sqrt with .rn/.rz/.rm/.rp (exact), .ftz, .sat; div/rcp/sqrt
  .approx/.full; rsqrt ex2 lg2 sin cos tanh .approx; abs neg min max (.NaN) copysign testp.
- half.py: f16/bf16/f16x2/bf16x2 add sub mul fma (.rn .ftz .sat .relu) neg abs min max, ex2/tanh .approx.
- compare.py: setp (every comparison incl. unordered, num, nan; p|q; .and/.or/.xor with a predicate source; .ftz;
  f16x2 per half) set (integer masks / 1.0) selp.
- video.py: the scalar (vadd vsub vabsdiff vmin vmax vshl vshr vmad vset) and SIMD (vadd2/4 vsub2/4 vavrg2/4
  vabsdiff2/4 vmin2/4 vmax2/4 vset2/4) video instructions with their operand selectors, .sat, secondary
  operations and merges.
- convert.py: cvt int<->int (.sat), float->int (.rni .rzi .rmi .rpi, saturating, NaN -> 0), int->float (.rn .rz .rm
  .rp), float<->float (f16 bf16 f32 f64, .ftz .sat .relu, same-type .rni...), cvt.rn{.relu}.{f16x2,bf16x2}.f32.

Refused with cudaErrorInvalidPtx (naming the instruction and its line): any other opcode or modifier, e.g. the
carry chain (add.cc, addc, madc: it needs a CC register the interpreter does not model), prmt's special modes,
.satfinite, mixed-precision add/fma (add.f32.f16), packed integer types (.u16x2), min/max with three operands or
.xorsign/.abs, cvt to/from tf32/e4m3/e5m2.

Known deviations from hardware (everything else is bit-exact):
- NaN results are the GPU's (floating.py: f32 canonical 0x7FFFFFFF, f64 the first NaN operand quieted, measured
  on a real GPU); f32 abs/neg of a NaN, f64 sub, min/max.f64 of two NaNs and conversions of NaN are set from
  the ISA and reports, and pinned by tools/gpu_probes/diff_kernels.cu on the next real-GPU run.
- .approx functions: see floating.py (within the ISA's error bounds of the exact value, not bit-equal to silicon).
- Integer division by zero (unspecified in the ISA): quotient all ones, remainder = dividend.
- min/max order -0 below +0.

Every fn runs with floating-point warnings silenced, so results do not depend on the caller's np.errstate.
Micro-benchmark: python bench/emu_ops_bench.py
Atomics (atom, red) are in atomic.py: they read and write memory, so the runtime applies them, not build_alu.
Warp matrix fragments and products (wmma, mma.sync) are in matrix.py, used by runtime/matrix.py.
"""
from __future__ import annotations

from typing import Callable

from ...errors import CudaError
from ..ptx import ir
from . import bits, compare, convert, floating, half, integer, video
from .common import AluOp, Unsupported

__all__ = ["AluOp", "build_alu", "is_alu", "ALU_OPCODES"]

_FLOAT = {"f32", "f64"}


def _types(instr):
    return instr.types


def _is_float(instr):
    return any(t in _FLOAT for t in _types(instr))


def _is_half(instr):
    return any(t in half.HALF_TYPES for t in _types(instr))


def _by_type(int_b, float_b, half_b=None):
    def build(instr):
        if _is_half(instr):
            if half_b is None:
                raise Unsupported("half type")
            return half_b(instr)
        if _is_float(instr):
            if float_b is None:
                raise Unsupported("float type")
            return float_b(instr)
        if int_b is None:
            raise Unsupported("integer type")
        return int_b(instr)
    return build


_BUILDERS: dict[str, Callable[[ir.Instr], AluOp]] = {
    "add": _by_type(lambda i: integer.build_add_sub(i, False), lambda i: floating.build_arith(i, "add"),
                    lambda i: half.build_half_arith(i, "add")),
    "sub": _by_type(lambda i: integer.build_add_sub(i, True), lambda i: floating.build_arith(i, "sub"),
                    lambda i: half.build_half_arith(i, "sub")),
    "mul": _by_type(integer.build_mul, lambda i: floating.build_arith(i, "mul"),
                    lambda i: half.build_half_arith(i, "mul")),
    "mad": _by_type(integer.build_mad, floating.build_fma, lambda i: half.build_half_arith(i, "fma")),
    "fma": _by_type(None, floating.build_fma, lambda i: half.build_half_arith(i, "fma")),
    "mul24": integer.build_mul24,
    "mad24": integer.build_mad24,
    "div": _by_type(integer.build_div, floating.build_div),
    "rem": integer.build_rem,
    "abs": _by_type(lambda i: integer.build_abs_neg(i, False), lambda i: floating.build_abs_neg(i, False),
                    lambda i: half.build_half_neg_abs(i, False)),
    "neg": _by_type(lambda i: integer.build_abs_neg(i, True), lambda i: floating.build_abs_neg(i, True),
                    lambda i: half.build_half_neg_abs(i, True)),
    "min": _by_type(lambda i: integer.build_min_max(i, False), lambda i: floating.build_min_max(i, False),
                    lambda i: half.build_half_min_max(i, False)),
    "max": _by_type(lambda i: integer.build_min_max(i, True), lambda i: floating.build_min_max(i, True),
                    lambda i: half.build_half_min_max(i, True)),
    "sad": integer.build_sad,
    "and": lambda i: bits.build_logic(i, "and"),
    "or": lambda i: bits.build_logic(i, "or"),
    "xor": lambda i: bits.build_logic(i, "xor"),
    "not": bits.build_not,
    "cnot": bits.build_cnot,
    "shl": lambda i: bits.build_shift(i, True),
    "shr": lambda i: bits.build_shift(i, False),
    "shf": bits.build_shf,
    "popc": bits.build_popc,
    "clz": bits.build_clz,
    "bfind": bits.build_bfind,
    "brev": bits.build_brev,
    "bfe": bits.build_bfe,
    "bfi": bits.build_bfi,
    "prmt": bits.build_prmt,
    "lop3": bits.build_lop3,
    "dp4a": bits.build_dp4a,
    "dp2a": bits.build_dp2a,
    "slct": bits.build_slct,
    "bmsk": bits.build_bmsk,
    "szext": bits.build_szext,
    "copysign": floating.build_copysign,
    "testp": floating.build_testp,
    "rcp": floating.build_rcp,
    "sqrt": floating.build_sqrt,
    "rsqrt": floating.build_rsqrt,
    "ex2": _by_type(None, floating.build_transcendental, half.build_half_approx),
    "lg2": floating.build_transcendental,
    "sin": floating.build_transcendental,
    "cos": floating.build_transcendental,
    "tanh": _by_type(None, floating.build_transcendental, half.build_half_approx),
    "setp": compare.build_setp,
    "set": compare.build_set,
    "selp": compare.build_selp,
    "cvt": convert.build_cvt,
    **{op: video.build_video for op in video.VIDEO_OPCODES},
}

ALU_OPCODES = frozenset(_BUILDERS)


def is_alu(opcode: str) -> bool:
    """True for the opcodes whose semantics live here (the interpreter handles everything else)."""
    return opcode in _BUILDERS


def _name(instr: ir.Instr) -> str:
    return ".".join((instr.opcode,) + tuple(instr.mods))


def build_alu(instr: ir.Instr) -> AluOp:
    """The AluOp of one instruction; CudaError(cudaErrorInvalidPtx) naming it and its line if unsupported."""
    builder = _BUILDERS.get(instr.opcode)
    if builder is None:
        raise CudaError("cudaErrorInvalidPtx", f"unsupported instruction {_name(instr)} at line {instr.line}")
    try:
        op = builder(instr)
    except Unsupported as e:
        raise CudaError("cudaErrorInvalidPtx",
                        f"unsupported instruction {_name(instr)} at line {instr.line} ({e})") from None
    return op
