"""One call of every supported cuBLAS entry point, made from the table's argument kinds, for checking libvcublas's
marshalling: the same call goes through libvcublas (NVIDIA's prototype, cffi, a daemon) and straight into the
emulated routine on a local heap holding the same bytes; every operand must come back the same.

A case picks sizes, operations, fill modes and types (the entry's bound ones, or a supported combination for
the Ex entries), leading dimensions one above the minimum, increments 2 and -1, batch strides with a gap, random
operands (triangular matrices made well conditioned), and scalars in the given pointer mode.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon import blas
from pyvgpu_daemon.blas import layout, numeric
from pyvgpu_daemon.emu.memory import DeviceMemory

H, BF, S32 = spec.DTYPE["CUDA_R_16F"].value, spec.DTYPE["CUDA_R_16BF"].value, spec.DTYPE["CUDA_R_32F"].value
C32 = spec.DTYPE["CUDA_C_32F"].value

CDEF_TYPES = """
typedef int cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;
typedef int cublasOperation_t, cublasFillMode_t, cublasDiagType_t, cublasSideMode_t, cublasPointerMode_t,
    cublasMath_t, cudaDataType, cublasComputeType_t, cublasGemmAlgo_t, libraryPropertyType;
typedef struct { float x, y; } cuComplex;
typedef struct { double x, y; } cuDoubleComplex;
typedef struct { unsigned short x; } __half;
typedef void *cudaStream_t;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaDeviceSynchronize(void);
int cudaStreamCreate(cudaStream_t *s);
"""


def cdef(protos: dict[str, Any], names: list[str]) -> str:
    """cffi declarations of the named functions as NVIDIA's headers declare them."""
    lines = [CDEF_TYPES]
    for n in names:
        p = protos[n]
        params = ", ".join(f"{a.ctype} {a.name}" for a in p.params) or "void"
        lines.append(f"{p.ret} {n}({params});")
    return "\n".join(lines)


@dataclass
class Buffer:
    data: bytes                     # initial contents
    dtype: int                      # element type (uint64 pointers for a pointer array: -1)
    parts: list[int] = field(default_factory=list)   # pointer array: the buffers its entries point at


@dataclass
class Case:
    entry: spec.Entry
    ilp64: bool
    pmode: int
    values: dict[str, Any]          # every family argument; buffers by name (filled in at run time)
    buffers: dict[str, Buffer]      # by name; pointer arrays' targets as "Aarray[0]", ...

    @property
    def name(self) -> str:
        return (self.entry.name64 if self.ilp64 else self.entry.name) + ("/device" if self.pmode else "/host")


def _ex_types(entry: spec.Entry) -> dict[str, int]:
    """Types for the GEMM entries that leave them to the caller: fp16 in, fp32 out, fp32 compute."""
    b = entry.bind
    if entry.family is spec.DOT_EX:           # DotEx: fp16 with fp32 execution; DotcEx: complex
        t, ex = (C32, C32) if b["conj"] else (H, S32)
        return {"xType": t, "yType": t, "resultType": t, "executionType": ex}
    if entry.family in (spec.GEMM, spec.GEMM_BATCHED) and "Atype" not in b:
        return {"Atype": H, "Btype": H, "Ctype": S32 if "computeType" in b else H,
                "computeType": spec.COMPUTE["CUBLAS_COMPUTE_32F"], "algo": -1}
    return {}


def _random(rng: np.random.Generator, count: int, t: int) -> bytes:
    x = rng.uniform(-1, 1, count)
    if numeric.storage(t).kind == "c":
        x = x + 1j * rng.uniform(-1, 1, count)
    if t == BF:
        return numeric.f32_to_bf16(x.astype(np.float32)).tobytes()
    return x.astype(numeric.storage(t)).tobytes()


_SOLVERS = (spec.TRSM_BATCHED, spec.GETRF_BATCHED, spec.GETRS_BATCHED, spec.GETRI_BATCHED, spec.GELS_BATCHED)


def build(entry: spec.Entry, ilp64: bool, pmode: int, seed: int) -> Case:
    fam = entry.family
    pick = random.Random(seed)
    rng = np.random.default_rng(seed)
    v: dict[str, Any] = {**entry.binding(ilp64), **_ex_types(entry)}
    sizes = {"m": 5, "n": 4, "k": 3, "batchCount": 2, "minimum": 0, "nrhs": 3, "batchSize": 2}
    for a in fam.args:
        if a.name in v or isinstance(a, spec.HostInfo):
            continue
        if isinstance(a, spec.Dim):
            v[a.name] = 7 if fam.code < 220 and a.name == "n" else sizes[a.name]
        elif isinstance(a, spec.Enum):
            allowed = a.allowed()
            if fam is spec.SYRK and a.name == "trans":
                allowed = (0, 1)
            if fam is spec.GELS_BATCHED:
                allowed = (0,)                      # gelsBatched: only CUBLAS_OP_N
            v[a.name] = pick.choice(allowed)
        elif isinstance(a, spec.Inc):
            v[a.name] = 2 if a.name == "incx" else -1
    for a in fam.args:                      # leading dimensions once the shapes are known
        if isinstance(a, (spec.Matrix, spec.MatrixArray)) and a.ld in fam.names:
            v[a.ld] = max(1, int(spec.evaluate(a.rows, v))) + 1
    types = {**v, **spec.derived(fam, v)}
    buffers: dict[str, Buffer] = {}
    for a in fam.args:
        if isinstance(a, spec.Matrix):
            t = types[a.dtype]
            rows, cols = int(spec.evaluate(a.rows, v)), int(spec.evaluate(a.cols, v))
            if a.stride and a.stride not in v:
                v[a.stride] = v[a.ld] * cols + 3
            shape, strides = layout.matrix(rows, cols, v[a.ld], v.get(a.batch) if a.batch else None,
                                           v.get(a.stride, 0) if a.stride else 0)
            reach = layout.span(shape, strides)
            count = reach[1] + 1 if reach else 1
            data = bytearray(_random(rng, count, t))
            if fam in (spec.TRSV, spec.TRSM) and a.name == "A":    # well conditioned: a big diagonal
                st = numeric.storage(t)
                diag = np.frombuffer(data, dtype=st).copy()
                diag[[i * (v[a.ld] + 1) for i in range(rows)]] += 4
                data = bytearray(diag.tobytes())
            buffers[a.name] = Buffer(bytes(data), t)
        elif isinstance(a, spec.MatrixArray):
            t = types[a.dtype]
            rows, cols = int(spec.evaluate(a.rows, v)), int(spec.evaluate(a.cols, v))
            ld = int(spec.evaluate(a.ld, v))
            parts = []
            for i in range(v[a.count]):
                data = np.frombuffer(_random(rng, ld * cols, t), dtype=numeric.storage(t)).copy()
                if a.name in ("A", "Aarray") and fam in _SOLVERS:     # well conditioned: a big diagonal
                    data[[j * (ld + 1) for j in range(min(rows, cols))]] += 4
                buffers[f"{a.name}[{i}]"] = Buffer(data.tobytes(), t)
                parts.append(i)
            buffers[a.name] = Buffer(b"", -1, parts)
        elif isinstance(a, spec.Vector) and a.optional and pmode == spec.POINTER_MODE_DEVICE:
            v[a.name] = 0                          # NULL: "none" (no pivoting, no info), one pointer mode of two
        elif isinstance(a, spec.Vector) and numeric.storage(types[a.dtype]).kind == "i":
            n = int(spec.evaluate(a.n, v))
            per = max(1, v.get("n", 1))
            # pivots: row j of each matrix swapped with a row at or below it (1-based); info arrays: zeros
            data = [rng.integers(j % per + 1, per + 1) for j in range(n)] if a.access == "r" else [0] * n
            buffers[a.name] = Buffer(np.array(data, dtype=np.int32).tobytes(), types[a.dtype])
        elif isinstance(a, spec.Vector):
            t = types[a.dtype]
            n = int(spec.evaluate(a.n, v))
            inc = int(spec.evaluate(a.inc, v))
            buffers[a.name] = Buffer(_random(rng, 1 + (n - 1) * abs(inc), t), t)
        elif isinstance(a, spec.Scalar):
            t = types[a.dtype]
            raw = _random(rng, 1, t)
            if pmode == spec.POINTER_MODE_DEVICE:
                buffers[a.name] = Buffer(raw, t)
            else:
                v[a.name] = raw
        elif isinstance(a, spec.Result):
            t = types[a.dtype]
            if pmode == spec.POINTER_MODE_DEVICE:
                buffers[a.name] = Buffer(bytes(spec.DTYPE_BY_VALUE[t].size), t)
            else:
                v[a.name] = None
    return Case(entry, ilp64, pmode, v, buffers)


def run_local(case: Case) -> tuple[dict[str, bytes], bytes | None]:
    """The call straight into the emulated routine; → (every buffer's bytes after it, the host result)."""
    mem = DeviceMemory(1 << 40, 16 << 20)
    ptrs = _place(case, lambda data: _local_put(mem, data))
    out = blas.execute(case.entry.family.name, mem, _args(case, ptrs))
    return {n: bytes(mem.read(ptrs[n], len(_contents(case, n, ptrs)))) for n in case.buffers}, out


def _local_put(mem: DeviceMemory, data: bytes) -> int:
    p = mem.alloc(len(data))
    mem.write(p, data)
    return p


def _contents(case: Case, name: str, ptrs: dict[str, int]) -> bytes:
    buf = case.buffers[name]
    if buf.dtype == -1:
        return np.array([ptrs[f"{name}[{i}]"] for i in buf.parts], dtype=np.uint64).tobytes()
    return buf.data


def _place(case: Case, put) -> dict[str, int]:
    """Allocate and fill every buffer (pointer arrays after their targets) with `put(bytes) -> address`."""
    ptrs: dict[str, int] = {}
    for name, buf in case.buffers.items():
        if buf.dtype != -1:
            ptrs[name] = put(buf.data)
    for name, buf in case.buffers.items():
        if buf.dtype == -1:
            ptrs[name] = put(_contents(case, name, ptrs))
    return ptrs


def _args(case: Case, ptrs: dict[str, int]) -> dict[str, Any]:
    args = dict(case.values)
    for a in case.entry.family.args:
        if a.name in ptrs:
            args[a.name] = ptrs[a.name]
    return args


def run_remote(ffi: Any, lib: Any, handle: Any, case: Case) -> tuple[int, dict[str, bytes], bytes | None]:
    """The call through libvcublas's entry point with NVIDIA's prototype; → (status, buffers after, result)."""
    def put(data: bytes) -> int:
        p = ffi.new("void **")
        assert lib.cudaMalloc(p, max(len(data), 1)) == 0
        assert lib.cudaMemcpy(p[0], data, len(data), 1) == 0
        return int(ffi.cast("uintptr_t", p[0]))

    ptrs = _place(case, put)
    args = _args(case, ptrs)
    fam = case.entry.family
    values = {k: (1 if v is None or isinstance(v, bytes) else v) for k, v in args.items()}
    types = {**values, **spec.derived(fam, values)}
    result = None
    c_args = []
    info = None
    for ctype, name in spec.c_params(case.entry, case.ilp64):
        if name == "handle":
            c_args.append(handle)
            continue
        arg = fam.arg(name)
        if isinstance(arg, spec.HostInfo):
            info = ffi.new("int *", 77)            # the client sets it: 0 for valid arguments
            c_args.append(info)
            continue
        val = args[name]
        if isinstance(arg, spec.Scalar) and isinstance(val, bytes):
            c_args.append(ffi.cast(ctype, ffi.from_buffer(val)))
        elif isinstance(arg, spec.Result) and val is None:
            result = ffi.new("char[]", spec.DTYPE_BY_VALUE[types[arg.dtype]].size)
            c_args.append(ffi.cast(ctype, result))
        elif "*" in ctype:
            c_args.append(ffi.cast(ctype, val))
        else:
            c_args.append(val)
    fn = case.entry.name64 if case.ilp64 else case.entry.name
    status = getattr(lib, fn)(*c_args)
    assert lib.cudaDeviceSynchronize() == 0
    assert info is None or info[0] == 0, f"{fn}: info {info[0]}"
    after = {}
    for name in case.buffers:
        size = len(_contents(case, name, ptrs))
        out = ffi.new("char[]", size)
        assert lib.cudaMemcpy(out, ffi.cast("void *", ptrs[name]), size, 2) == 0
        after[name] = bytes(ffi.buffer(out, size))
    for p in ptrs.values():
        lib.cudaFree(ffi.cast("void *", p))
    return status, after, (bytes(ffi.buffer(result)) if result is not None else None)


def all_cases() -> list[Case]:
    out = []
    for i, e in enumerate(spec.ENTRIES):
        for ilp64 in e.widths():
            for pmode in (spec.POINTER_MODE_HOST, spec.POINTER_MODE_DEVICE):
                out.append(build(e, ilp64, pmode, seed=i * 4 + ilp64 * 2 + pmode))
    return out


def same(t: int, a: bytes, b: bytes) -> bool:
    """Equal up to the last bits of the element type (BLAS kernels may round differently by alignment)."""
    if t < 0 or a == b:
        return a == b
    st = numeric.storage(t)
    x = numeric.bf16_to_f32(np.frombuffer(a, np.uint16)) if t == BF else np.frombuffer(a, st)
    y = numeric.bf16_to_f32(np.frombuffer(b, np.uint16)) if t == BF else np.frombuffer(b, st)
    if st.kind in "iu":
        return bool(np.array_equal(x, y))
    eps = {H: 2.0 ** -10, BF: 2.0 ** -7}.get(t, float(np.finfo(x.real.dtype).eps))
    return bool(np.allclose(x, y, rtol=16 * eps, atol=16 * eps, equal_nan=True))


def result_type(case: Case) -> int:
    fam = case.entry.family
    values = {k: (1 if v is None or isinstance(v, bytes) else v) for k, v in case.values.items()}
    types = {**values, **spec.derived(fam, values)}
    return next(types[a.dtype] for a in fam.args if isinstance(a, spec.Result))
