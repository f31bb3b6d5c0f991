"""The arguments of one cuBLAS call on the emulated GPU, as NumPy views over the device heap.

A routine asks for what it reads or writes, by the argument names of its family in pyvgpu/cublas_spec.py, and
gets a view whose shape, leading dimension / increment and batch stride come from that table. A view is made (and
its memory checked) only when asked for, so an operand cuBLAS does not read (A when alpha == 0, C when
beta == 0) is never touched. Every view lies inside one live allocation of the session's device, else the call
fails with cudaErrorIllegalAddress (sticky, as the fault of a cuBLAS kernel is on a GPU); a pointer not aligned to
its element is cudaErrorMisalignedAddress.

Shapes and strides come from layout.py (column-major matrices with their leading dimension, strided batches,
vectors with negative increments walking backwards).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import layout, numeric
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.errors import CudaError

HostValue = (bytes, bytearray, memoryview)


class BlasError(Exception):
    """A call cuBLAS refuses with a status (not a device fault): the status goes back to the client."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{_STATUS_NAME.get(status, status)}: {message}")


_STATUS_NAME = {value: name for value, name, _ in spec.STATUSES}


@dataclass
class BlasLimits:
    # Multiply-adds one call may cost (the family's `work` expression): beyond it the call fails with
    # CUBLAS_STATUS_EXECUTION_FAILED before anything runs, instead of occupying the device's worker for minutes.
    # 2**36 is a 4096^3 GEMM, tens of seconds of NumPy on one core.
    max_work: int = int(os.environ.get("PYVGPU_EMU_BLAS_MAX_WORK", 1 << 36))
    # Pointers one batched call may name (GEMM_BATCHED's batchCount).
    max_batch_pointers: int = 1 << 20


class HeapViews:
    """NumPy views of one device's heap for a library call named `label`: every view lies inside one live
    allocation (else cudaErrorIllegalAddress) and starts aligned to its element (else
    cudaErrorMisalignedAddress). The cuBLAS routines (Operands) and cuBLASLt's matmul (lt.py) view through it."""

    def __init__(self, memory: DeviceMemory, label: str) -> None:
        self.memory = memory
        self.label = label

    def _checked(self, lo: int, hi: int, what: str) -> tuple[np.ndarray, int]:
        """(heap, offset) of [lo, hi), which must lie inside one live allocation (of the device's heap, or of one of
        its reserved ranges: DeviceMemory.region_at)."""
        mem = self.memory.region_at(lo)
        hit = mem.allocation_at(lo)
        if hit is None or hi > hit[0] + hit[1]:
            raise CudaError("cudaErrorIllegalAddress",
                            f"{self.label} {what}: [{lo:#x}, {hi:#x}) is not inside one live allocation")
        return mem.heap, lo - mem.base

    def _aligned(self, addr: int, st: np.dtype, what: str) -> None:
        align = st.itemsize // 2 if st.kind == "c" else st.itemsize
        if addr % align:
            raise CudaError("cudaErrorMisalignedAddress", f"{self.label} {what} at {addr:#x}")

    def view(self, addr: int, st: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...],
             what: str) -> np.ndarray:
        """A view of elements at addr + sum(index * stride) (strides in elements, any sign)."""
        reach = layout.span(shape, strides)
        if reach is None:
            return np.empty(tuple(max(n, 0) for n in shape), dtype=st)
        lo, hi = reach
        self._aligned(addr, st, what)
        heap, off0 = self._checked(addr + lo * st.itemsize, addr + (hi + 1) * st.itemsize, what)
        return np.ndarray(shape, dtype=st, buffer=heap, offset=off0 - lo * st.itemsize,
                          strides=tuple(s * st.itemsize for s in strides))


class Operands(HeapViews):
    def __init__(self, fam: spec.Family, memory: DeviceMemory, args: Mapping[str, Any],
                 derived: Mapping[str, int]) -> None:
        super().__init__(memory, fam.name)
        self.fam = fam
        self.args = args
        self.names = {**{k: v for k, v in args.items() if isinstance(v, int)}, **derived}
        self.result: bytes | None = None

    # ------------------------------------------------------------------------------------------ plain values
    def __getitem__(self, name: str) -> int:
        return self.names[name]

    def dtype(self, name: str) -> int:
        """cudaDataType of a data, scalar or result argument."""
        arg = self.fam.arg(name)
        return self.names[arg.dtype]

    def expr(self, text: spec.Expr) -> int:
        return int(spec.evaluate(text, self.names))

    def vec(self, name: str) -> np.ndarray | None:
        """The vector's view; None for an optional vector given as NULL."""
        arg = self.fam.arg(name)
        assert isinstance(arg, spec.Vector)
        if arg.optional and self.args[name] == 0:
            return None
        st = numeric.storage(self.dtype(name))
        first, shape, strides = layout.vector(self.expr(arg.n), self.expr(arg.inc))
        return self.view(self.args[name] + first * st.itemsize, st, shape, strides, name)

    def mat(self, name: str) -> np.ndarray:
        """(rows, cols) view; (batch, rows, cols) for a strided-batch matrix."""
        arg = self.fam.arg(name)
        assert isinstance(arg, spec.Matrix)
        st = numeric.storage(self.dtype(name))
        batch = None if arg.batch is None else self[arg.batch]
        shape, strides = layout.matrix(self.expr(arg.rows), self.expr(arg.cols), self[arg.ld], batch,
                                       self[arg.stride] if arg.stride else 0)
        return self.view(self.args[name], st, shape, strides, name)

    def mats(self, name: str) -> list[np.ndarray]:
        """The matrices of a device array of device pointers."""
        arg = self.fam.arg(name)
        assert isinstance(arg, spec.MatrixArray)
        count = self[arg.count]
        if count <= 0:
            return []
        if count > LIMITS.max_batch_pointers:
            raise BlasError(spec.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"],
                            f"{count} batch pointers > {LIMITS.max_batch_pointers}")
        ptrs = self.view(self.args[name], np.dtype(np.uint64), (count,), (1,), name).copy()
        shape, strides = layout.matrix(self.expr(arg.rows), self.expr(arg.cols), self.expr(arg.ld))
        st = numeric.storage(self.dtype(name))
        return [self.view(int(p), st, shape, strides, f"{name}[{i}]") for i, p in enumerate(ptrs)]

    def scalar(self, name: str) -> np.generic:
        """alpha/beta/c/s: the host value sent with the call, or the element at the device address."""
        value, t = self.args[name], self.dtype(name)
        st = numeric.storage(t)
        if isinstance(value, HostValue):
            if len(value) != st.itemsize:
                raise BlasError(spec.INVALID_VALUE, f"{name}: {len(value)} bytes for a {st} scalar")
            return numeric.decode(value, t)
        return numeric.decode(self.view(value, st, (1,), (1,), name).tobytes(), t)

    def set_result(self, name: str, value: Any) -> None:
        """Host pointer mode (the argument is None): the reply carries the bytes; else they go to the device."""
        t = self.dtype(name)
        raw = numeric.encode(value, t)
        if self.args[name] is None:
            self.result = raw
        else:
            self._aligned(self.args[name], numeric.storage(t), name)
            self.view(self.args[name], np.dtype(np.uint8), (len(raw),), (1,), name)[:] = np.frombuffer(raw, np.uint8)


LIMITS = BlasLimits()
