"""A device heap and cuBLAS-style calls for testing the emulated cuBLAS (daemon/pyvgpu_daemon/blas) directly.

Operands are written column-major with their leading dimension / increment / batch stride, and every element the
routine must not touch (padding rows, the unreferenced triangle, gaps between batch entries) holds a sentinel
(NaN), so a stray read shows up as NaN in a result and a stray write as a changed sentinel. References are
computed in float64 / complex128 from the values as stored (after rounding to the storage type).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon import blas
from pyvgpu_daemon.blas import numeric
from pyvgpu_daemon.emu.memory import DeviceMemory

S, D, C, Z = (spec.DTYPE[n].value for n in ("CUDA_R_32F", "CUDA_R_64F", "CUDA_C_32F", "CUDA_C_64F"))
H, BF = spec.DTYPE["CUDA_R_16F"].value, spec.DTYPE["CUDA_R_16BF"].value
I32, I64 = spec.DTYPE["CUDA_R_32I"].value, spec.DTYPE["CUDA_R_64I"].value
PREFIX = {"S": S, "D": D, "C": C, "Z": Z}
# Unit roundoff of each storage type (2^-p): tolerances are stated in these units.
EPS = {S: 2.0 ** -24, D: 2.0 ** -53, C: 2.0 ** -24, Z: 2.0 ** -53, H: 2.0 ** -11, BF: 2.0 ** -8}
OP_N, OP_T, OP_C = 0, 1, 2


def is_complex(t: int) -> bool:
    return numeric.storage(t).kind == "c"


def wide(t: int) -> np.dtype:
    return np.dtype(np.complex128 if is_complex(t) else np.float64)


def assert_close(got: Any, ref: Any, t: int, k: int = 1, acc: int | None = None) -> None:
    """|got - ref| <= 8 * (u_out + k * u_acc) * max(1, max|ref|): one rounding of the output type plus k
    accumulated roundings of the arithmetic type (the inputs' own type unless `acc` says, e.g. float32 for
    fp16 GEMMs), with a factor 8 of slack; NaN where the reference has none fails."""
    got, ref = np.asarray(got), np.asarray(ref)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    tol = 8 * (EPS[t] + k * EPS[acc if acc is not None else t]) * scale
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def op(a: np.ndarray, trans: int) -> np.ndarray:
    if trans == OP_N:
        return a
    return a.conj().T if trans == OP_C else a.T


class Dev:
    """One emulated device's memory plus helpers to place and read operands."""

    def __init__(self, seed: int = 0, capacity: int = 64 << 20) -> None:
        self.mem = DeviceMemory(1 << 40, capacity)
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ values
    def rand(self, shape: tuple[int, ...] | int, t: int, scale: float = 1.0) -> np.ndarray:
        """Random values exactly representable in type t, as float64/complex128."""
        x = self.rng.standard_normal(shape) * scale
        if is_complex(t):
            x = x + 1j * self.rng.standard_normal(shape) * scale
        return self.decode(self.encode(x, t), t)

    @staticmethod
    def encode(x: np.ndarray, t: int) -> np.ndarray:
        if t == BF:
            return numeric.f32_to_bf16(np.asarray(x, dtype=np.float32))
        return np.asarray(x).astype(numeric.storage(t))

    @staticmethod
    def decode(raw: np.ndarray, t: int) -> np.ndarray:
        if t == BF:
            return numeric.bf16_to_f32(raw).astype(np.float64)
        return raw.astype(wide(t)) if numeric.storage(t).kind in "fc" else raw.astype(np.int64)

    def sentinel(self, count: int, t: int) -> np.ndarray:
        return self.encode(np.full(count, np.nan + (1j * np.nan if is_complex(t) else 0)), t)

    # ------------------------------------------------------------------ memory
    def put(self, buf: np.ndarray) -> int:
        ptr = self.mem.alloc(max(buf.nbytes, 1))
        self.mem.write(ptr, buf.tobytes())
        return ptr

    def raw(self, ptr: int, count: int, t: int) -> np.ndarray:
        st = numeric.storage(t)
        return np.frombuffer(bytes(self.mem.read(ptr, count * st.itemsize)), dtype=st).copy()

    def scalar(self, value: Any, t: int) -> int:
        """A scalar in device memory (device pointer mode)."""
        return self.put(self.encode(np.array([value]), t))

    def mat(self, a: np.ndarray, t: int, ld: int | None = None, batch_stride: int | None = None,
            fill: np.ndarray | None = None) -> int:
        """a: (rows, cols) or (batch, rows, cols); padding and gaps hold the sentinel (or `fill`)."""
        a3 = a[None] if a.ndim == 2 else a
        b, rows, cols = a3.shape
        ld = ld or max(rows, 1)
        span = ld * cols
        stride = batch_stride if batch_stride is not None else span
        total = max((b - 1) * stride + span, 1)
        buf = self.sentinel(total, t) if fill is None else fill.copy()
        for i in range(b):
            buf[i * stride:i * stride + span].reshape(cols, ld).T[:rows] = self.encode(a3[i], t)
        return self.put(buf)

    def get_mat(self, ptr: int, rows: int, cols: int, t: int, ld: int | None = None) -> np.ndarray:
        ld = ld or max(rows, 1)
        return self.decode(self.raw(ptr, ld * cols, t).reshape(cols, ld).T[:rows], t)

    def vec(self, x: np.ndarray, inc: int, t: int) -> int:
        n = len(x)
        buf = self.sentinel(1 + (n - 1) * abs(inc) if n else 1, t)
        if n:
            (buf[::inc] if inc > 0 else buf[::-inc])[:n] = self.encode(x if inc > 0 else x[::-1], t)
        return self.put(buf)

    def get_vec(self, ptr: int, n: int, inc: int, t: int) -> np.ndarray:
        if n <= 0:
            return np.zeros(0, wide(t))
        buf = self.raw(ptr, 1 + (n - 1) * abs(inc), t)
        got = buf[::inc] if inc > 0 else buf[::-inc][::-1]
        return self.decode(got[:n] if inc > 0 else got[-n:], t)

    # ------------------------------------------------------------------ calls
    def call(self, entry: str, **args: Any) -> bytes | None:
        """Call a cuBLAS entry point of the table: its bound arguments plus these, the way the C function would."""
        e = spec.ENTRY[entry.removesuffix("_64")]
        return blas.execute(e.family.name, self.mem, {**e.binding(entry.endswith("_64")), **args})


def host(value: Any, t: int) -> bytes:
    """A scalar in host pointer mode: its bytes travel with the call."""
    return Dev.encode(np.array([value]), t).tobytes()


def result_value(raw: bytes, t: int) -> Any:
    return Dev.decode(np.frombuffer(raw, dtype=numeric.storage(t)), t)[0]
