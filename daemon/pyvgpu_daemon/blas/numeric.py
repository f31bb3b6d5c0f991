"""Element types of the emulated cuBLAS: storage dtypes, compute dtypes, bf16, scalars.

cudaDataType values map to the NumPy dtype of one stored element. NumPy has no bfloat16, so CUDA_R_16BF is stored
as its raw uint16 bits and converted here (a bf16 is the top half of a float32; rounding to bf16 is
round-to-nearest-even, as __float2bfloat16 does) rather than pulling in another dependency for two functions.

Compute precision: fp16 and bf16 inputs are computed in float32 (cuBLAS's CUBLAS_COMPUTE_32F; for
CUBLAS_COMPUTE_16F the products are also formed in float32 and rounded to fp16 once at the end, at least as
accurate as a GPU's fp16 accumulation). float32/float64/complex data compute in their own precision.
"""
from __future__ import annotations

import numpy as np

from pyvgpu.cublas_spec import COMPUTE, DTYPE

STORAGE: dict[int, np.dtype] = {
    DTYPE["CUDA_R_16F"].value: np.dtype(np.float16),
    DTYPE["CUDA_R_16BF"].value: np.dtype(np.uint16),
    DTYPE["CUDA_R_32F"].value: np.dtype(np.float32),
    DTYPE["CUDA_R_64F"].value: np.dtype(np.float64),
    DTYPE["CUDA_C_32F"].value: np.dtype(np.complex64),
    DTYPE["CUDA_C_64F"].value: np.dtype(np.complex128),
    DTYPE["CUDA_R_32I"].value: np.dtype(np.int32),
    DTYPE["CUDA_R_64I"].value: np.dtype(np.int64),
}
BF16 = DTYPE["CUDA_R_16BF"].value
_F64_COMPUTES = {COMPUTE[n] for n in COMPUTE if n.startswith("CUBLAS_COMPUTE_64F")}


def storage(dtype: int) -> np.dtype:
    return STORAGE[dtype]


def compute_dtype(dtype: int, compute: int | None = None) -> np.dtype:
    """NumPy dtype the arithmetic on `dtype` data runs in: GEMM's by its compute type, the other routines' in the
    data's own precision (fp16/bf16 widened to float32)."""
    st = STORAGE[dtype]
    if compute is None:
        return np.dtype(np.float32) if st.itemsize == 2 else st
    wide = compute in _F64_COMPUTES
    if st.kind == "c":
        return np.dtype(np.complex128 if wide else np.complex64)
    return np.dtype(np.float64 if wide else np.float32)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bf16 bits (nearest even; NaN stays a quiet NaN with its sign)."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    if nan.any():
        rounded = np.where(nan, ((u >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16), rounded)
    return rounded


def load(view: np.ndarray, dtype: int, into: np.dtype) -> np.ndarray:
    """Stored elements as `into` values (a copy unless they already are `into`)."""
    if dtype == BF16:
        return bf16_to_f32(view).astype(into, copy=False)
    return view.astype(into, copy=False)


def store(view: np.ndarray, values: np.ndarray | np.generic, dtype: int) -> None:
    """Write computed values into stored elements, rounding to the storage type."""
    if dtype == BF16:
        view[...] = f32_to_bf16(np.asarray(values, dtype=np.float32))
    else:
        view[...] = values


def decode(raw: bytes | memoryview | np.ndarray, dtype: int) -> np.generic:
    """One stored element (its bytes) as a NumPy scalar of its compute type (bf16 -> float32)."""
    st = STORAGE[dtype]
    value = np.frombuffer(bytes(raw), dtype=st, count=1)
    if dtype == BF16:
        return bf16_to_f32(value)[0]
    return value[0]


def encode(value: np.generic | float | complex | int, dtype: int) -> bytes:
    """The stored bytes of one value."""
    if dtype == BF16:
        return f32_to_bf16(np.array([value], dtype=np.float32)).tobytes()
    return np.array([value], dtype=STORAGE[dtype]).tobytes()
