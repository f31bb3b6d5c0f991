"""cuBLASLt's matmul on the emulated GPU: D = epilogue(alpha * op(A) op(B) + beta * C), computed with NumPy over
the device heap.

    execute(memory, {"compute": 68, "scale": 0, ..., "alpha": b"...", "A": 0x1000000100, ...})

Arguments are LT_MATMUL's (pyvgpu/cublaslt_spec.py), by name: ints, and alpha/beta as the value's bytes (host
pointer mode) or a device address (device pointer mode). The call is checked first by the table's checks (the same
ones libvcublasLt applies on the client), charged against the work budget (blas.BlasLimits), then run.

Arithmetic: in the compute type's precision (numeric.compute_dtype: fp16/bf16 data with fp32 compute in float32,
as cuBLAS's emulation does), alpha/beta in the scale type; with alpha == 0 (or k == 0) A and B are not read, with
beta == 0 C is not read (NaN in it cannot leak), as cuBLAS documents. The epilogue works on the float result
before it is rounded to D's type:
- a bias (D's type, or A's 16-bit type under a 32-bit D) is added to every column;
- ReLU is max(x, 0); GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the one
  cuBLASLt implements (PyTorch's unfused fallback of its GELU epilogue uses approximate="tanh" for that reason);
- an auxiliary output holds the function's input: GELU's values in D's type, ReLU's signs as a bit mask;
- the backward forms multiply the result by the derivative at the auxiliary input (DRELU: the mask bit, DGELU:
  GELU's derivative) and write the bias gradient, the sum of each row of the new D (its type: the bias type);
- BGRADA/BGRADB write the sums of op(A) over k (one per row of D) / of op(B) over k (one per column of D).
Batches: each matrix, bias and auxiliary matrix advances by its batch stride; entries are computed in chunks
whose intermediates fit CHUNK_BYTES (a call holds no more than that beyond its operands, which all lie in the
session's memory).

Runs on the (session, device) worker thread like a kernel launch; floating-point exceptions are silent, as on a GPU.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from pyvgpu import cublas_spec as blas
from pyvgpu import cublaslt_spec as spec
from pyvgpu_daemon.blas import dense, lt_layout, numeric
from pyvgpu_daemon.blas.operands import LIMITS, BlasError, BlasLimits, HeapViews, HostValue
from pyvgpu_daemon.emu.memory import DeviceMemory

_SQRT_2_OVER_PI = np.sqrt(2.0 / np.pi)
_GELU_C = 0.044715


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3)))


def gelu_grad(x: np.ndarray) -> np.ndarray:
    """d gelu(x) / dx of the tanh approximation."""
    t = np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_C * x * x)


def _ints(args: Mapping[str, Any]) -> dict[str, int]:
    """The int arguments the checks see; every argument of LT_MATMUL must be there."""
    missing = set(spec.MATMUL_NAMES) ^ set(args)
    if missing:
        raise BlasError(blas.INVALID_VALUE, f"LT_MATMUL: arguments {sorted(missing)} missing or unknown")
    out = {}
    for n in spec.INT_NAMES:
        v = args[n]
        if not isinstance(v, int) or isinstance(v, bool):
            raise BlasError(blas.INVALID_VALUE, f"LT_MATMUL: {n} = {type(v).__name__}")
        out[n] = v
    return out


class LtOperands(HeapViews):
    """The call's operands as NumPy views of the heap (each checked against the session's allocations when made)."""

    def __init__(self, memory: DeviceMemory, args: Mapping[str, Any], v: Mapping[str, int]) -> None:
        super().__init__(memory, "LT_MATMUL")
        self.args = args
        self.v = v

    def mat(self, x: str) -> np.ndarray:
        """(batch, rows, cols) view of matrix x as stored (op() not applied)."""
        return self.view(self.v[x], numeric.storage(self.v[x + "type"]), *lt_layout.matrix(self.v, x), x)

    def scalar(self, name: str) -> np.generic:
        value, t = self.args[name], self.v["scale"]
        st = numeric.storage(t)
        if isinstance(value, HostValue):
            if len(value) != st.itemsize:
                raise BlasError(blas.INVALID_VALUE, f"{name}: {len(value)} bytes for a {st} scalar")
            return numeric.decode(value, t)
        return numeric.decode(self.view(value, st, (1,), (1,), name).tobytes(), t)

    def bias(self) -> np.ndarray:
        t = self.v["bias_dtype"]
        return self.view(self.v["bias"], numeric.storage(t), *lt_layout.bias(self.v), "bias")

    def gelu_aux(self) -> np.ndarray:
        t = self.v["aux_dtype"]
        return self.view(self.v["aux"], numeric.storage(t), *lt_layout.gelu_aux(self.v), "aux")

    def relu_mask(self) -> np.ndarray:
        return self.view(self.v["aux"], np.dtype(np.uint8), *lt_layout.relu_mask(self.v), "aux")


CHUNK_BYTES = 64 << 20     # the intermediate arrays one chunk of batch entries may take


def _mask_bits(mask: np.ndarray, m: int) -> np.ndarray:
    """(b, m, n) booleans of a (b, ceil(m/8), n) byte view: bit i of a column is bit i % 8 of byte i // 8."""
    return np.unpackbits(mask, axis=1, bitorder="little")[:, :m].astype(bool)


def _pack_bits(bits: np.ndarray) -> np.ndarray:
    return np.packbits(bits, axis=1, bitorder="little")


def _chunk(v: Mapping[str, int]) -> int:
    """Batch entries computed together: their intermediates (result, widened A and B, bias) fit CHUNK_BYTES, so a
    call holds that much beyond its operands whatever its batch count (operands with a batch stride of 0, legal and
    common for a shared weight or bias, are never expanded), and a large batch of tiny matrices is still a few
    NumPy calls."""
    m, n, k = v["m"], v["n"], v["k"]
    return max(1, CHUNK_BYTES // (16 * (m * n + m * k + k * n + m + n)))


def _run(o: LtOperands) -> None:
    v = o.v
    ctype = v["Dtype"]
    cdt = numeric.compute_dtype(ctype, v["compute"])
    alpha, beta = o.scalar("alpha"), o.scalar("beta")
    epi = spec.EPILOGUE[v["epilogue"]]
    d = o.mat("D")                                    # every region is checked before anything is written
    c = o.mat("C") if beta != 0 else None             # beta == 0: C is not read
    read_ab = alpha != 0 and v["k"] > 0               # alpha == 0 or k == 0: A and B are not read (for the product)
    a, b = (o.mat("A"), o.mat("B")) if read_ab or epi.bias in ("a", "b") else (None, None)
    bias = o.bias() if epi.bias else None
    aux = (o.relu_mask() if "relu" in epi.act else o.gelu_aux()) if epi.aux else None
    types = {"A": v["Atype"], "B": v["Btype"]}

    def op(x: str, view: np.ndarray) -> np.ndarray:
        return dense.op(numeric.load(view, types[x], cdt), v["trans" + x.lower()])

    step = _chunk(v)
    for i0 in range(0, v["Dbatch"], step):
        s = slice(i0, min(i0 + step, v["Dbatch"]))
        if read_ab:
            x = np.matmul(op("A", a[s]), op("B", b[s]))
            if alpha != 1:
                x *= cdt.type(alpha)
        else:
            x = np.zeros((s.stop - s.start, v["m"], v["n"]), dtype=cdt)
        if c is not None:
            x += cdt.type(beta) * numeric.load(c[s], v["Ctype"], cdt)
        if epi.bias == "add":
            x += numeric.load(bias[s], v["bias_dtype"], cdt)[:, :, None]
        if epi.aux == "out":
            if epi.act == "relu":
                aux[s] = _pack_bits(x > 0)
            else:
                numeric.store(aux[s], x, v["aux_dtype"])
        if epi.act == "relu":
            x = np.maximum(x, cdt.type(0))
        elif epi.act == "gelu":
            x = gelu(x)
        elif epi.act == "drelu":
            x = np.where(_mask_bits(aux[s], v["m"]), x, cdt.type(0))
        elif epi.act == "dgelu":
            x = x * gelu_grad(numeric.load(aux[s], v["aux_dtype"], cdt))
        if epi.bias == "rows":
            numeric.store(bias[s], x.sum(axis=2), v["bias_dtype"])
        elif epi.bias == "a":
            numeric.store(bias[s], op("A", a[s]).sum(axis=2), v["bias_dtype"])
        elif epi.bias == "b":
            numeric.store(bias[s], op("B", b[s]).sum(axis=1), v["bias_dtype"])
        numeric.store(d[s], x.astype(cdt, copy=False), ctype)


def execute(memory: DeviceMemory, args: Mapping[str, Any], limits: BlasLimits = LIMITS) -> None:
    values = _ints(args)
    failure = spec.check(values)
    if failure is not None:
        raise BlasError(failure.status, f"LT_MATMUL: {failure.why}")
    work = spec.work(values)
    if work > limits.max_work:
        raise BlasError(blas.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"],
                        f"LT_MATMUL: {work} multiply-adds exceed the emulated device's budget of {limits.max_work}")
    v = {**values, **spec.derived(values)}
    if v["m"] == 0 or v["n"] == 0:
        return
    with np.errstate(all="ignore"):
        _run(LtOperands(memory, args, v))
