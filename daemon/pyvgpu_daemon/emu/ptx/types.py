"""PTX types: the one table of their names, widths, signedness, NumPy storage and register classes.

Every part of the emulator reads these facts from here: the IR and the parser (type names, sizes of variables and
parameters), the translator (register classes, operand views, immediates), the runtime and the instruction
semantics in ops/ (NumPy dtypes).

Storage: f32 float32, f64 float64, f16 float16, s8..s64 int8..int64, u8..u64/b8..b64 uint8..uint64, pred bool,
bf16 uint16 (raw bits), f16x2/bf16x2 uint32 (raw bits). b128 and tf32 have names and widths but no storage.
"""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.errors import CudaError

# PTX scalar types the project knows; anything else in a type position is a parse error.
INT_TYPES = ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "b8", "b16", "b32", "b64", "b128")
FLOAT_TYPES = ("f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "tf32")
TYPES = frozenset(INT_TYPES + FLOAT_TYPES + ("pred",))

SIGNED = frozenset({"s8", "s16", "s32", "s64"})
UNSIGNED = frozenset({"u8", "u16", "u32", "u64", "b8", "b16", "b32", "b64"})
INTS = SIGNED | UNSIGNED

# Bit width of every type an instruction may name as a register or memory type (pred: 1; tf32 is not one).
BITS: dict[str, int] = {
    "b8": 8, "s8": 8, "u8": 8, "b16": 16, "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "b32": 32, "s32": 32,
    "u32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "b64": 64, "s64": 64, "u64": 64, "f64": 64, "pred": 1,
    "b128": 128,
}

# Bytes one element of a variable, parameter or vector element occupies (pred: 1).
BYTES: dict[str, int] = {t: max(1, b // 8) for t, b in BITS.items()}

# NumPy scalar types by width, and their dtypes.
UINT: dict[int, type] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
SINT: dict[int, type] = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
UNSIGNED_OF: dict[int, np.dtype] = {w: np.dtype(t) for w, t in UINT.items()}
SIGNED_OF: dict[int, np.dtype] = {w: np.dtype(t) for w, t in SINT.items()}

DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32), "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "b8": np.dtype(np.uint8), "b16": np.dtype(np.uint16), "b32": np.dtype(np.uint32), "b64": np.dtype(np.uint64),
    "pred": np.dtype(np.bool_), "bf16": np.dtype(np.uint16), "f16x2": np.dtype(np.uint32),
    "bf16x2": np.dtype(np.uint32),
}


def width(t: str) -> int:
    """Bit width of a PTX type that has NumPy storage (pred counts as 1)."""
    return 1 if t == "pred" else DTYPES[t].itemsize * 8


def scalar_type(t: str) -> type:
    """The NumPy scalar type that holds a value of PTX type t (raw bits for types without a NumPy float)."""
    return DTYPES[t].type if t in DTYPES else UINT[BITS[t]]


def reg_width(t: str) -> int:
    """Register class of a declared register type: 1 (pred), 16, 32 or 64 bits; .b8 registers are 16 bits wide,
    as in ptxas. .b128 registers are refused."""
    b = BITS[t]
    if b == 1:
        return 1
    if b == 8:
        return 16
    if b == 128:
        raise CudaError("cudaErrorInvalidPtx", ".b128 registers are not supported")
    return b
