"""cuBLASLt matmuls for testing the emulated one (daemon blas/lt.py) and libvcublasLt against it: a problem
(types, shapes, orders, batches, epilogue, scalars) made into LT_MATMUL's arguments over a blas_harness.Dev heap,
and its float64/complex128 reference from the values as stored.

Matrices are placed with a leading dimension above the minimum and batch strides with a gap; padding and gaps hold
NaN (a stray read shows as NaN in D, a stray write as a changed sentinel).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blas_harness import BF, C, D, EPS, H, S, Dev, host, is_complex, wide
from pyvgpu import cublas_spec as blas
from pyvgpu import cublaslt_spec as spec

EPI = spec.ENUMS["cublasLtEpilogue_t"]
C32F, C64F, C16F = (blas.COMPUTE[n] for n in ("CUBLAS_COMPUTE_32F", "CUBLAS_COMPUTE_64F", "CUBLAS_COMPUTE_16F"))
# (A/B type, C/D type, compute, scale): the combinations frameworks use (fp32, fp16 and bf16 with fp32 compute,
# fp16/bf16 in with fp32 out) and the wide ones.
TYPE_SETS = [(S, S, C32F, S), (H, H, C32F, S), (BF, BF, C32F, S), (H, S, C32F, S), (BF, S, C32F, S),
             (D, D, C64F, D), (C, C, C32F, C), (H, H, C16F, H)]
COL, ROW = spec.ORDER_COL, spec.ORDER_ROW


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x * x)


@dataclass
class Matrix:
    values: np.ndarray        # (batch, rows, cols) as stored (float64/complex128)
    t: int
    order: int
    ld: int
    stride: int
    ptr: int = 0

    @property
    def span(self) -> int:
        b, rows, cols = self.values.shape
        return self.ld * (cols if self.order == COL else rows)

    def buffer(self, dev: Dev) -> np.ndarray:
        b, rows, cols = self.values.shape
        total = max((b - 1) * self.stride + self.span, 1)
        buf = dev.sentinel(total, self.t)
        for i in range(b):
            block = buf[i * self.stride:i * self.stride + self.span]
            grid = block.reshape(cols, self.ld).T if self.order == COL else block.reshape(rows, self.ld)
            grid[:rows, :cols] = dev.encode(self.values[i], self.t)
        return buf

    def read(self, dev: Dev) -> np.ndarray:
        b, rows, cols = self.values.shape
        total = max((b - 1) * self.stride + self.span, 1)
        buf = dev.decode(dev.raw(self.ptr, total, self.t), self.t)
        out = np.empty(self.values.shape, dtype=wide(self.t))
        for i in range(b):
            block = buf[i * self.stride:i * self.stride + self.span]
            grid = block.reshape(cols, self.ld).T if self.order == COL else block.reshape(rows, self.ld)
            out[i] = grid[:rows, :cols]
        return out


def layout(dev: Dev, values: np.ndarray, t: int, order: int, batch: int) -> Matrix:
    _, rows, cols = values.shape
    ld = (rows if order == COL else cols) + 2
    span = ld * (cols if order == COL else rows)
    return Matrix(values, t, order, ld, span + 3 if batch > 1 else 0)


@dataclass
class Problem:
    ab: int
    cd: int
    compute: int
    scale: int
    m: int
    n: int
    k: int
    batch: int = 1
    transa: int = 0
    transb: int = 0
    orders: tuple[int, int, int] = (COL, COL, COL)     # A, B, C/D
    epilogue: int = EPI["CUBLASLT_EPILOGUE_DEFAULT"]
    alpha: complex = 1.0
    beta: complex = 0.0
    pmode: int = 0
    in_place: bool = True                 # D is C (PyTorch's calls)
    seed: int = 0
    bias_type: int = -1
    mats: dict[str, Matrix] = field(default_factory=dict)
    bias: np.ndarray | None = None        # (batch, len) as stored
    aux: np.ndarray | None = None         # GELU: (batch, m, n) values; ReLU: (batch, m, n) booleans
    aux_ld: int = 0
    ptrs: dict[str, int] = field(default_factory=dict)

    @property
    def epi(self) -> spec.Epilogue:
        return spec.EPILOGUE[self.epilogue]

    @property
    def bias_t(self) -> int:
        return self.cd if self.bias_type == -1 else self.bias_type

    def place(self, dev: Dev) -> dict[str, Any]:
        """Operands on the heap; returns LT_MATMUL's arguments."""
        m, n, k, b = self.m, self.n, self.k, self.batch
        a_shape = (m, k) if self.transa == 0 else (k, m)
        b_shape = (k, n) if self.transb == 0 else (n, k)
        self.mats["A"] = layout(dev, dev.rand((b, *a_shape), self.ab), self.ab, self.orders[0], b)
        self.mats["B"] = layout(dev, dev.rand((b, *b_shape), self.ab), self.ab, self.orders[1], b)
        self.mats["C"] = layout(dev, dev.rand((b, m, n), self.cd), self.cd, self.orders[2], b)
        for x in "ABC":
            self.mats[x].ptr = dev.put(self.mats[x].buffer(dev))
        if self.in_place:
            self.mats["D"] = self.mats["C"]
        else:
            d = self.mats["C"]
            self.mats["D"] = Matrix(np.zeros_like(d.values), d.t, d.order, d.ld, d.stride)
            self.mats["D"].ptr = dev.put(self.mats["D"].buffer(dev))
        args = self.args()
        epi = self.epi
        if epi.bias:
            length = n if epi.bias == "b" else m
            stride = length + 1 if b > 1 else 0
            self.bias = dev.rand((b, length), self.bias_t)
            buf = dev.sentinel(max((b - 1) * stride + length, 1), self.bias_t)
            for i in range(b):
                buf[i * stride:i * stride + length] = dev.encode(self.bias[i], self.bias_t)
            args.update(bias=dev.put(buf), bias_stride=stride)
        aux = spec.epi_aux(self.epilogue)
        if aux:
            q = spec.RELU_MASK_LD_MULTIPLE if aux == 1 else spec.GELU_AUX_LD_MULTIPLE
            self.aux_ld = (m + q) // q * q
            stride = self.aux_ld * n if b > 1 else 0
            if aux == 1:
                self.aux = dev.rng.random((b, m, n)) < 0.5
                mask = np.full(max(stride * b, self.aux_ld * n) // 8, 0xA5, dtype=np.uint8)   # padding: a pattern
                for i in range(b):
                    for j in range(n):
                        start = (i * stride + j * self.aux_ld) // 8
                        mask[start:start + (m + 7) // 8] = np.packbits(self.aux[i, :, j], bitorder="little")
                args.update(aux=dev.put(mask))
            else:
                self.aux = dev.rand((b, m, n), self.cd)
                buf = dev.sentinel(max(stride * b, self.aux_ld * n), self.cd)
                for i in range(b):
                    buf[i * stride:i * stride + self.aux_ld * n].reshape(n, self.aux_ld).T[:m] = \
                        dev.encode(self.aux[i], self.cd)
                args.update(aux=dev.put(buf))
            args.update(aux_ld=self.aux_ld, aux_stride=stride)
        self.ptrs = {"bias": args["bias"], "aux": args["aux"]}
        return args

    def args(self) -> dict[str, Any]:
        out: dict[str, Any] = {a.field: a.default for a in spec.DESC_WIRE}
        out.update(compute=self.compute, scale=self.scale, transa=self.transa, transb=self.transb,
                   epilogue=self.epilogue, pmode=self.pmode, bias_type=self.bias_type)
        for x, mat in self.mats.items():
            _, rows, cols = mat.values.shape
            out.update({x + "type": mat.t, x + "order": mat.order, x + "rows": rows, x + "cols": cols,
                        x + "ld": mat.ld, x + "batch": self.batch, x + "stride": mat.stride, x: mat.ptr})
        out.update(workspace=0, workspace_size=0)
        return out

    def scalars(self, dev: Dev) -> dict[str, Any]:
        a, b = (v if is_complex(self.scale) else complex(v).real for v in (self.alpha, self.beta))
        if self.pmode == 0:
            return {"alpha": host(a, self.scale), "beta": host(b, self.scale)}
        return {"alpha": dev.scalar(a, self.scale), "beta": dev.scalar(b, self.scale)}

    # ------------------------------------------------------------------ the reference
    def op(self, x: str) -> np.ndarray:
        v = self.mats[x].values
        trans = self.transa if x == "A" else self.transb
        if trans == 0:
            return v
        t = np.swapaxes(v, -1, -2)
        return np.conj(t) if trans == 2 else t

    def reference(self) -> dict[str, np.ndarray]:
        """D, and the bias gradient / auxiliary output the epilogue writes, in float64/complex128."""
        alpha, beta = (v if is_complex(self.scale) else complex(v).real for v in (self.alpha, self.beta))
        x = alpha * (self.op("A") @ self.op("B"))
        if beta != 0:
            x = x + beta * self.mats["C"].values
        out: dict[str, np.ndarray] = {}
        epi = self.epi
        if epi.bias == "add":
            x = x + self.bias[:, :, None]
        if epi.aux == "out":
            out["aux"] = (x > 0) if epi.act == "relu" else x
        if epi.act == "relu":
            x = np.maximum(x, 0)
        elif epi.act == "gelu":
            x = gelu(x)
        elif epi.act == "drelu":
            x = np.where(self.aux, x, 0)
        elif epi.act == "dgelu":
            x = x * gelu_grad(self.aux)
        if epi.bias == "rows":
            out["bias"] = x.sum(axis=2)
        elif epi.bias == "a":
            out["bias"] = self.op("A").sum(axis=2)
        elif epi.bias == "b":
            out["bias"] = self.op("B").sum(axis=1)
        out["D"] = x
        return out

    def tolerance_k(self) -> int:
        """Accumulated roundings the comparison allows: k products plus the epilogue's few operations."""
        return self.k + 8


def assert_close(got: np.ndarray, ref: np.ndarray, t: int, k: int, acc: int) -> None:
    """|got - ref| <= 8 * (u_out + k * u_acc) * max(1, max|ref|), blas_harness's rule."""
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    tol = 8 * (EPS[t] + k * EPS[acc]) * scale
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def acc_type(p: Problem) -> int:
    """The type whose unit roundoff the arithmetic accumulates: float32 for fp32 compute (fp16/bf16 data too)."""
    return {C32F: S, C64F: D, C16F: S}[p.compute] if not is_complex(p.cd) else p.cd
