"""The cuBLAS routines pyvgpu supports, as one declarative table: the single source of truth for libvcublas's
generated entry points and argument checks (C, phase B) and for the daemon's execution of them (Python).

Standard library only (like protocol.py): the C build imports it (tools/gen_cublas_c.py) before the package is installed.

Two levels:

* A `Family` is one remoted operation (one wire op in the 200-299 range): its canonical arguments in the order of
  cuBLAS's most general entry point (e.g. cublasGemmStridedBatchedEx for GEMM), every argument saying how it
  travels (by value; a scalar read from host or device memory by the handle's pointer mode; a device vector or
  matrix with its dimensions, leading dimension / increment and batch stride; a device array of device pointers; a
  result written to host or device memory). Element types are arguments too (cudaDataType values), so one family
  serves S/D/C/Z/H/Ex.
* An `Entry` is one exported C function (cublasSgemm_v2, cublasHgemmStridedBatched, cublasGemmEx, ...): a family
  plus the arguments it binds (types, and e.g. batchCount=1 for the non-batched GEMMs). Its C prototype is derived
  from the family (bound arguments dropped, element types substituted) and tests check it against cublas_api.h;
  every Entry also has the ILP64 twin `<name>_64` (int64_t sizes) NVIDIA exports.

Argument checks are derived from the table, the way cuBLAS documents them (CUBLAS_STATUS_INVALID_VALUE for a
negative size, a zero increment where Level 2 forbids it, a leading dimension below max(1, rows), an enum value
outside its set, a NULL scalar or result pointer), plus each family's own `Check`s, written as small Python
expressions over the argument names that `check()` evaluates here and `c_expr()` translates to C, so the client's
and the daemon's checks cannot drift apart. Unsupported GEMM type/compute combinations are
CUBLAS_STATUS_NOT_SUPPORTED (the `GEMM_TYPES` table).

Enum values are cuBLAS 13's (cublas_api.h of nvidia-cublas 13.10.0.20, library_types.h of CUDA 13.0); status
names and strings are what NVIDIA's libcublas.so.13 returns; tests/interposer/test_cublas_spec.py checks all of them.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Callable, Mapping, Union

from pyvgpu.cuda_errors import CUDA_ERRORS

# ----------------------------------------------------------------------------------------------- constants
CUBLAS_VERSION = 131000            # CUBLAS_VER_MAJOR * 10000 + MINOR * 100 + PATCH of the headers we follow
CUBLAS_VER = (13, 10, 0)           # libraryPropertyType MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
CUDART_VERSION = 13000             # cublasGetCudartVersion() of NVIDIA's 13.x library

# (value, name, cublasGetStatusString text) as libcublas.so.13 answers; other values: "unrecognized status".
STATUSES: tuple[tuple[int, str, str], ...] = (
    (0, "CUBLAS_STATUS_SUCCESS", "success"),
    (1, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"),
    (3, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"),
    (7, "CUBLAS_STATUS_INVALID_VALUE", "an unsupported value or parameter was passed to the function"),
    (8, "CUBLAS_STATUS_ARCH_MISMATCH", "the function requires an architectural feature absent from the device"),
    (11, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"),
    (13, "CUBLAS_STATUS_EXECUTION_FAILED", "the function failed to launch on the GPU"),
    (14, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"),
    (15, "CUBLAS_STATUS_NOT_SUPPORTED", "the requested functionality is not supported"),
    (16, "CUBLAS_STATUS_LICENSE_ERROR", "the license check failed"),
)
UNKNOWN_STATUS_TEXT = "unrecognized status"
STATUS: dict[str, int] = {name: value for value, name, _ in STATUSES}
SUCCESS = STATUS["CUBLAS_STATUS_SUCCESS"]
INVALID_VALUE = STATUS["CUBLAS_STATUS_INVALID_VALUE"]
NOT_SUPPORTED = STATUS["CUBLAS_STATUS_NOT_SUPPORTED"]

# cuBLAS enums: C type -> {enumerator: value}. Only the enumerators a valid call may use are listed where cuBLAS
# rejects the others (CUBLAS_OP_CONJG is "not supported in the current release").
ENUMS: dict[str, dict[str, int]] = {
    "cublasOperation_t": {"CUBLAS_OP_N": 0, "CUBLAS_OP_T": 1, "CUBLAS_OP_C": 2},
    "cublasFillMode_t": {"CUBLAS_FILL_MODE_LOWER": 0, "CUBLAS_FILL_MODE_UPPER": 1},
    "cublasDiagType_t": {"CUBLAS_DIAG_NON_UNIT": 0, "CUBLAS_DIAG_UNIT": 1},
    "cublasSideMode_t": {"CUBLAS_SIDE_LEFT": 0, "CUBLAS_SIDE_RIGHT": 1},
    "cublasPointerMode_t": {"CUBLAS_POINTER_MODE_HOST": 0, "CUBLAS_POINTER_MODE_DEVICE": 1},
    "cublasMath_t": {"CUBLAS_DEFAULT_MATH": 0, "CUBLAS_TENSOR_OP_MATH": 1, "CUBLAS_PEDANTIC_MATH": 2,
                     "CUBLAS_TF32_TENSOR_OP_MATH": 3, "CUBLAS_FP32_EMULATED_BF16X9_MATH": 4,
                     "CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH": 8},
    "cublasComputeType_t": {"CUBLAS_COMPUTE_16F": 64, "CUBLAS_COMPUTE_16F_PEDANTIC": 65,
                            "CUBLAS_COMPUTE_32F": 68, "CUBLAS_COMPUTE_32F_PEDANTIC": 69,
                            "CUBLAS_COMPUTE_32F_FAST_16F": 74, "CUBLAS_COMPUTE_32F_FAST_16BF": 75,
                            "CUBLAS_COMPUTE_32F_FAST_TF32": 77, "CUBLAS_COMPUTE_32F_EMULATED_16BFX9": 78,
                            "CUBLAS_COMPUTE_64F": 70, "CUBLAS_COMPUTE_64F_PEDANTIC": 71,
                            "CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT": 79,
                            "CUBLAS_COMPUTE_32I": 72, "CUBLAS_COMPUTE_32I_PEDANTIC": 73},
    "cublasGemmAlgo_t": {"CUBLAS_GEMM_DEFAULT": -1,
                         **{f"CUBLAS_GEMM_ALGO{i}": i for i in range(24)},
                         "CUBLAS_GEMM_DEFAULT_TENSOR_OP": 99,
                         **{f"CUBLAS_GEMM_ALGO{i}_TENSOR_OP": 100 + i for i in range(16)},
                         "CUBLAS_GEMM_AUTOTUNE": 999},
}
# cublasMath_t flag OR-ed onto a mode (cublasSetMathMode accepts mode | this).
MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
POINTER_MODE_HOST = 0
POINTER_MODE_DEVICE = 1


@dataclass(frozen=True)
class DataType:
    """A cudaDataType the supported routines read or write."""
    name: str
    value: int
    size: int                # bytes per element
    is_complex: bool
    ctype: str               # element type in cuBLAS's typed prototypes ("void" where none exists)


DATA_TYPES: tuple[DataType, ...] = (
    DataType("CUDA_R_16F", 2, 2, False, "__half"),
    DataType("CUDA_R_16BF", 14, 2, False, "void"),
    DataType("CUDA_R_32F", 0, 4, False, "float"),
    DataType("CUDA_R_64F", 1, 8, False, "double"),
    DataType("CUDA_C_32F", 4, 8, True, "cuComplex"),
    DataType("CUDA_C_64F", 5, 16, True, "cuDoubleComplex"),
    DataType("CUDA_R_32I", 10, 4, False, "int"),          # amax/amin results (int API)
    DataType("CUDA_R_64I", 24, 8, False, "int64_t"),      # amax/amin results (_64 API)
)
DTYPE: dict[str, DataType] = {t.name: t for t in DATA_TYPES}
DTYPE_BY_VALUE: dict[int, DataType] = {t.value: t for t in DATA_TYPES}
COMPUTE: dict[str, int] = ENUMS["cublasComputeType_t"]

# Named constants usable in the expressions of the table (rows/cols/checks).
CONSTANTS: dict[str, int] = {
    "OP_N": 0, "OP_T": 1, "OP_C": 2, "LOWER": 0, "UPPER": 1, "LEFT": 0, "RIGHT": 1,
    **{t.name: t.value for t in DATA_TYPES},
}

# ----------------------------------------------------------------------------------------------- GEMM types
_C16 = ("CUBLAS_COMPUTE_16F", "CUBLAS_COMPUTE_16F_PEDANTIC")
_C32 = ("CUBLAS_COMPUTE_32F", "CUBLAS_COMPUTE_32F_PEDANTIC", "CUBLAS_COMPUTE_32F_FAST_16F",
        "CUBLAS_COMPUTE_32F_FAST_16BF", "CUBLAS_COMPUTE_32F_FAST_TF32", "CUBLAS_COMPUTE_32F_EMULATED_16BFX9")
_C64 = ("CUBLAS_COMPUTE_64F", "CUBLAS_COMPUTE_64F_PEDANTIC", "CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT")


@dataclass(frozen=True)
class GemmType:
    """One supported (compute, A/B, C) combination of the GEMM family and the type of its alpha/beta."""
    computes: tuple[str, ...]
    ab: str
    c: str
    scale: str


# The common subset of cuBLAS's cublasGemmEx type table (fp16/bf16/fp32/fp64 and complex fp32/fp64); any other
# combination is CUBLAS_STATUS_NOT_SUPPORTED, as cuBLAS answers for combinations it lacks.
GEMM_TYPES: tuple[GemmType, ...] = (
    GemmType(_C16, "CUDA_R_16F", "CUDA_R_16F", "CUDA_R_16F"),
    GemmType(_C32, "CUDA_R_16F", "CUDA_R_16F", "CUDA_R_32F"),
    GemmType(_C32, "CUDA_R_16F", "CUDA_R_32F", "CUDA_R_32F"),
    GemmType(_C32, "CUDA_R_16BF", "CUDA_R_16BF", "CUDA_R_32F"),
    GemmType(_C32, "CUDA_R_16BF", "CUDA_R_32F", "CUDA_R_32F"),
    GemmType(_C32, "CUDA_R_32F", "CUDA_R_32F", "CUDA_R_32F"),
    GemmType(_C32, "CUDA_C_32F", "CUDA_C_32F", "CUDA_C_32F"),
    GemmType(_C64, "CUDA_R_64F", "CUDA_R_64F", "CUDA_R_64F"),
    GemmType(_C64, "CUDA_C_64F", "CUDA_C_64F", "CUDA_C_64F"),
)


def gemm_scale_type(atype: int, btype: int, ctype: int, compute: int) -> int:
    """cudaDataType of alpha/beta for a supported GEMM combination, -1 if the combination is not supported."""
    for t in GEMM_TYPES:
        if (atype == btype == DTYPE[t.ab].value and ctype == DTYPE[t.c].value
                and any(COMPUTE[c] == compute for c in t.computes)):
            return DTYPE[t.scale].value
    return -1


def is_complex(dtype: int) -> bool:
    t = DTYPE_BY_VALUE.get(dtype)
    return bool(t and t.is_complex)


_REAL_PART = {"CUDA_C_32F": "CUDA_R_32F", "CUDA_C_64F": "CUDA_R_64F"}


def real_of(dtype: int) -> int:
    """The real type of a complex cudaDataType's parts; a real type is its own."""
    t = DTYPE_BY_VALUE.get(dtype)
    return DTYPE[_REAL_PART[t.name]].value if t and t.name in _REAL_PART else dtype


# Functions usable in expressions (each has a C twin: pvb_<name>).
FUNCTIONS: dict[str, Callable[..., Any]] = {"max": max, "min": min, "is_complex": is_complex, "real_of": real_of,
                                            "gemm_scale_type": gemm_scale_type}

# ----------------------------------------------------------------------------------------------- argument kinds
Expr = str   # a Python expression over argument names, CONSTANTS and FUNCTIONS; translated to C by c_expr()


@dataclass(frozen=True)
class Enum:
    """A by-value enum; a value outside `values` (enumerator names of `ctype`) is CUBLAS_STATUS_INVALID_VALUE."""
    name: str
    ctype: str
    values: tuple[str, ...] | None = None     # None: every enumerator of ctype in ENUMS

    def allowed(self) -> tuple[int, ...]:
        table = ENUMS[self.ctype]
        return tuple(table[v] for v in (self.values or tuple(table)))


_SDCZ_NAMES = ("CUDA_R_32F", "CUDA_R_64F", "CUDA_C_32F", "CUDA_C_64F")
_DOT_EX_NAMES = ("CUDA_R_16F", "CUDA_R_16BF", *_SDCZ_NAMES)


@dataclass(frozen=True)
class TypeArg:
    """A cudaDataType / cublasComputeType_t by value, giving the element type of the data arguments naming it.
    A value outside `values` is CUBLAS_STATUS_NOT_SUPPORTED (None: the family's checks decide)."""
    name: str
    ctype: str = "cudaDataType"
    values: tuple[str, ...] | None = _SDCZ_NAMES


@dataclass(frozen=True)
class Dim:
    """A size (int, or int64_t in the _64 API). quick: a negative value is a quick return (Level 1), not an error."""
    name: str
    quick: bool = False


@dataclass(frozen=True)
class Ld:
    """A leading dimension; the matrix naming it checks it against max(1, rows)."""
    name: str


@dataclass(frozen=True)
class Inc:
    """A vector increment (negative: the vector runs backwards from its last element, BLAS's convention)."""
    name: str
    nonzero: bool = False     # Level 2: incx == 0 is CUBLAS_STATUS_INVALID_VALUE


@dataclass(frozen=True)
class Stride:
    """Elements between consecutive matrices of a strided batch (long long int in every API)."""
    name: str


@dataclass(frozen=True)
class Scalar:
    """alpha/beta/c/s: a pointer to one element, in host or device memory by the handle's pointer mode."""
    name: str
    dtype: str                # a TypeArg name, or a derived name (see Family.derived)


@dataclass(frozen=True)
class Vector:
    """A device vector of n elements; `inc` is an Inc argument or an expression ("1" for the pivot and info arrays of
    the batched solvers). optional: NULL is allowed and means "none" (getrfBatched without pivoting)."""
    name: str
    dtype: str
    n: Expr
    inc: Expr
    access: str = "r"         # "r", "w" or "rw"
    optional: bool = False


@dataclass(frozen=True)
class Matrix:
    """A column-major device matrix of rows x cols with leading dimension `ld` (and a strided batch if given)."""
    name: str
    dtype: str
    rows: Expr
    cols: Expr
    ld: str
    access: str = "r"
    stride: str | None = None
    batch: str | None = None


@dataclass(frozen=True)
class MatrixArray:
    """A device array of `count` device pointers, each to a rows x cols matrix with leading dimension ld (an Ld
    argument, or an expression: geqrfBatched's arrays of tau vectors)."""
    name: str
    dtype: str
    rows: Expr
    cols: Expr
    ld: str
    count: str
    access: str = "r"


@dataclass(frozen=True)
class Result:
    """One element written to host or device memory by the handle's pointer mode (host: the call waits for it)."""
    name: str
    dtype: str
    index: bool = False       # amax/amin: an int (int64_t in the _64 API), whatever dtype says


@dataclass(frozen=True)
class HostInfo:
    """`int *info` in host memory that the client sets at once, LAPACK's way: 0 when the arguments are valid, -i when
    the i-th parameter (the handle is the 1st) is not. It never travels (getrsBatched, geqrfBatched, gelsBatched)."""
    name: str


Arg = Union[Enum, TypeArg, Dim, Ld, Inc, Stride, Scalar, Vector, Matrix, MatrixArray, Result, HostInfo]


@dataclass(frozen=True)
class Check:
    """`expr` true means the call fails with `status` (a STATUS name); `arg` is the argument it is about (a HostInfo
    reports its position)."""
    expr: Expr
    status: str
    why: str
    arg: str | None = None


@dataclass(frozen=True)
class Family:
    """One remoted operation. `args` excludes the handle (always first in C)."""
    name: str
    code: int
    args: tuple[Arg, ...]
    checks: tuple[Check, ...] = ()
    derived: dict[str, Expr] = field(default_factory=dict)   # extra names computed from the args (e.g. scaleType)
    doc: str = ""
    work: Expr = "n"          # multiply-adds of one call (the emulated device refuses calls above its budget)

    def __repr__(self) -> str:
        return f"Family({self.name})"

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(f"{self.name} has no argument {name!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    @property
    def wire_names(self) -> tuple[str, ...]:
        """The arguments that travel (a HostInfo is the client's alone)."""
        return tuple(a.name for a in self.args if not isinstance(a, HostInfo))


def _ops(*names: str) -> tuple[str, ...]:
    return tuple(f"CUBLAS_OP_{n}" for n in names)


OP = "cublasOperation_t"
FILL = "cublasFillMode_t"
DIAG = "cublasDiagType_t"
SIDE = "cublasSideMode_t"
_OPA = "m if transa == OP_N else k"
_KA = "k if transa == OP_N else m"
_OPB = "k if transb == OP_N else n"
_KB = "n if transb == OP_N else k"

# ----------------------------------------------------------------------------------------------- families
AXPY = Family("BLAS_AXPY", 200, (
    Dim("n", quick=True), Scalar("alpha", "alphaType"), TypeArg("alphaType"),
    Vector("x", "xType", "n", "incx"), TypeArg("xType"), Inc("incx"),
    Vector("y", "xType", "n", "incy", "rw"), Inc("incy"),
), checks=(Check("alphaType != xType", "CUBLAS_STATUS_NOT_SUPPORTED", "alpha type"),), doc="y = alpha * x + y")
SCAL = Family("BLAS_SCAL", 201, (
    Dim("n", quick=True), Scalar("alpha", "alphaType"), TypeArg("alphaType"),
    Vector("x", "xType", "n", "incx", "rw"), TypeArg("xType"), Inc("incx"),
), checks=(Check("alphaType != xType and alphaType != real_of(xType)", "CUBLAS_STATUS_NOT_SUPPORTED", "alpha type"),),
    doc="x = alpha * x (n <= 0 or incx <= 0: nothing)")
DOT = Family("BLAS_DOT", 202, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx"), TypeArg("xType"), Inc("incx"),
    Vector("y", "xType", "n", "incy"), Inc("incy"), Result("result", "xType"),
    Enum("conj", "cublasOperation_t", _ops("N", "C")),
), doc="result = sum(op(x) * y), op = conj for dotc (n <= 0: 0)")
NRM2 = Family("BLAS_NRM2", 203, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx"), TypeArg("xType"), Inc("incx"),
    Result("result", "resultType"), TypeArg("resultType"),
), checks=(Check("resultType != real_of(xType)", "CUBLAS_STATUS_NOT_SUPPORTED", "result type"),),
    doc="result = ||x||_2 (n <= 0 or incx <= 0: 0)")
ASUM = Family("BLAS_ASUM", 204, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx"), TypeArg("xType"), Inc("incx"),
    Result("result", "resultType"), TypeArg("resultType"),
), checks=(Check("resultType != real_of(xType)", "CUBLAS_STATUS_NOT_SUPPORTED", "result type"),),
    doc="result = sum(|Re x| + |Im x|) (n <= 0 or incx <= 0: 0)")
IAMAX = Family("BLAS_IAMAX", 205, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx"), TypeArg("xType"), Inc("incx"),
    Result("result", "resultType", index=True), TypeArg("resultType", values=("CUDA_R_32I", "CUDA_R_64I")),
    Dim("minimum"),
), checks=(Check("minimum > 1", "CUBLAS_STATUS_INVALID_VALUE", "minimum is 0 or 1"),),
    doc="result = 1-based index of the first max (minimum=0) or min (minimum=1) of |Re x| + |Im x|")
COPY = Family("BLAS_COPY", 206, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx"), TypeArg("xType"), Inc("incx"),
    Vector("y", "xType", "n", "incy", "w"), Inc("incy"),
), doc="y = x")
SWAP = Family("BLAS_SWAP", 207, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx", "rw"), TypeArg("xType"), Inc("incx"),
    Vector("y", "xType", "n", "incy", "rw"), Inc("incy"),
), doc="x <-> y")
ROT = Family("BLAS_ROT", 208, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx", "rw"), TypeArg("xType"), Inc("incx"),
    Vector("y", "xType", "n", "incy", "rw"), Inc("incy"),
    Scalar("c", "cType"), TypeArg("cType"), Scalar("s", "sType"), TypeArg("sType"),
), checks=(Check("cType != real_of(xType) or (sType != xType and sType != real_of(xType))",
                 "CUBLAS_STATUS_NOT_SUPPORTED", "c/s types"),), doc="x, y = c*x + s*y, -conj(s)*x + c*y")
GEMV = Family("BLAS_GEMV", 220, (
    Enum("trans", OP), Dim("m"), Dim("n"), Scalar("alpha", "dtype"),
    Matrix("A", "dtype", "m", "n", "lda"), Ld("lda"),
    Vector("x", "dtype", "n if trans == OP_N else m", "incx"), Inc("incx", nonzero=True),
    Scalar("beta", "dtype"), Vector("y", "dtype", "m if trans == OP_N else n", "incy", "rw"),
    Inc("incy", nonzero=True), TypeArg("dtype"),
), doc="y = alpha * op(A) x + beta * y (beta == 0: y is not read)", work="m * n")
GER = Family("BLAS_GER", 221, (
    Dim("m"), Dim("n"), Scalar("alpha", "dtype"),
    Vector("x", "dtype", "m", "incx"), Inc("incx", nonzero=True),
    Vector("y", "dtype", "n", "incy"), Inc("incy", nonzero=True),
    Matrix("A", "dtype", "m", "n", "lda", "rw"), Ld("lda"), TypeArg("dtype"),
    Enum("conj", "cublasOperation_t", _ops("N", "C")),
), doc="A = alpha * x op(y)^T + A, op = conj for gerc", work="m * n")
TRSV = Family("BLAS_TRSV", 222, (
    Enum("uplo", FILL), Enum("trans", OP), Enum("diag", DIAG), Dim("n"),
    Matrix("A", "dtype", "n", "n", "lda"), Ld("lda"),
    Vector("x", "dtype", "n", "incx", "rw"), Inc("incx", nonzero=True), TypeArg("dtype"),
), doc="solve op(A) x = b for x in place, A triangular (uplo), unit diagonal if diag", work="n * n")
SYMV = Family("BLAS_SYMV", 223, (
    Enum("uplo", FILL), Dim("n"), Scalar("alpha", "dtype"),
    Matrix("A", "dtype", "n", "n", "lda"), Ld("lda"),
    Vector("x", "dtype", "n", "incx"), Inc("incx", nonzero=True),
    Scalar("beta", "dtype"), Vector("y", "dtype", "n", "incy", "rw"), Inc("incy", nonzero=True),
    TypeArg("dtype"),
), doc="y = alpha * A x + beta * y, A symmetric stored in its uplo triangle", work="n * n")
GEMM = Family("BLAS_GEMM", 240, (
    Enum("transa", OP), Enum("transb", OP), Dim("m"), Dim("n"), Dim("k"),
    Scalar("alpha", "scaleType"),
    Matrix("A", "Atype", _OPA, _KA, "lda", stride="strideA", batch="batchCount"), TypeArg("Atype", values=None),
    Ld("lda"), Stride("strideA"),
    Matrix("B", "Btype", _OPB, _KB, "ldb", stride="strideB", batch="batchCount"), TypeArg("Btype", values=None),
    Ld("ldb"), Stride("strideB"),
    Scalar("beta", "scaleType"),
    Matrix("C", "Ctype", "m", "n", "ldc", "rw", stride="strideC", batch="batchCount"), TypeArg("Ctype", values=None),
    Ld("ldc"), Stride("strideC"), Dim("batchCount"),
    TypeArg("computeType", "cublasComputeType_t", None), Enum("algo", "cublasGemmAlgo_t"),
), checks=(
    Check("gemm_scale_type(Atype, Btype, Ctype, computeType) < 0", "CUBLAS_STATUS_NOT_SUPPORTED",
          "type/compute combination"),
), derived={"scaleType": "gemm_scale_type(Atype, Btype, Ctype, computeType)"},
    doc="C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i] for each of batchCount strided matrices",
    work="batchCount * m * n * max(k, 1)")
GEMM_BATCHED = Family("BLAS_GEMM_BATCHED", 241, (
    Enum("transa", OP), Enum("transb", OP), Dim("m"), Dim("n"), Dim("k"),
    Scalar("alpha", "scaleType"),
    MatrixArray("Aarray", "Atype", _OPA, _KA, "lda", "batchCount"), TypeArg("Atype", values=None), Ld("lda"),
    MatrixArray("Barray", "Btype", _OPB, _KB, "ldb", "batchCount"), TypeArg("Btype", values=None), Ld("ldb"),
    Scalar("beta", "scaleType"),
    MatrixArray("Carray", "Ctype", "m", "n", "ldc", "batchCount", "rw"), TypeArg("Ctype", values=None), Ld("ldc"),
    Dim("batchCount"), TypeArg("computeType", "cublasComputeType_t", None), Enum("algo", "cublasGemmAlgo_t"),
), checks=GEMM.checks, derived=GEMM.derived,
    doc="C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i], the matrices given by device arrays of pointers",
    work="batchCount * m * n * max(k, 1)")
GEAM = Family("BLAS_GEAM", 242, (
    Enum("transa", OP), Enum("transb", OP), Dim("m"), Dim("n"),
    Scalar("alpha", "dtype"), Matrix("A", "dtype", "m if transa == OP_N else n", "n if transa == OP_N else m",
                                     "lda"), Ld("lda"),
    Scalar("beta", "dtype"), Matrix("B", "dtype", "m if transb == OP_N else n", "n if transb == OP_N else m",
                                    "ldb"), Ld("ldb"),
    Matrix("C", "dtype", "m", "n", "ldc", "w"), Ld("ldc"), TypeArg("dtype"),
), checks=(
    Check("A == C and m > 0 and n > 0 and (transa != OP_N or lda != ldc)", "CUBLAS_STATUS_INVALID_VALUE",
          "in place on A needs transa == N and lda == ldc"),
    Check("B == C and m > 0 and n > 0 and (transb != OP_N or ldb != ldc)", "CUBLAS_STATUS_INVALID_VALUE",
          "in place on B needs transb == N and ldb == ldc"),
), doc="C = alpha * op(A) + beta * op(B) (alpha == 0: A not read; beta == 0: B not read)", work="m * n")
DGMM = Family("BLAS_DGMM", 243, (
    Enum("mode", SIDE), Dim("m"), Dim("n"), Matrix("A", "dtype", "m", "n", "lda"), Ld("lda"),
    Vector("x", "dtype", "m if mode == LEFT else n", "incx"), Inc("incx"),
    Matrix("C", "dtype", "m", "n", "ldc", "w"), Ld("ldc"), TypeArg("dtype"),
), doc="C = diag(x) A (LEFT) or A diag(x) (RIGHT)", work="m * n")
TRSM = Family("BLAS_TRSM", 244, (
    Enum("side", SIDE), Enum("uplo", FILL), Enum("trans", OP), Enum("diag", DIAG), Dim("m"), Dim("n"),
    Scalar("alpha", "dtype"), Matrix("A", "dtype", "m if side == LEFT else n", "m if side == LEFT else n", "lda"),
    Ld("lda"), Matrix("B", "dtype", "m", "n", "ldb", "rw"), Ld("ldb"), TypeArg("dtype"),
), doc="solve op(A) X = alpha B (LEFT) or X op(A) = alpha B (RIGHT); X overwrites B",
    work="m * n * (m if side == LEFT else n)")
SYRK = Family("BLAS_SYRK", 245, (
    Enum("uplo", FILL), Enum("trans", OP), Dim("n"), Dim("k"), Scalar("alpha", "dtype"),
    Matrix("A", "dtype", "n if trans == OP_N else k", "k if trans == OP_N else n", "lda"), Ld("lda"),
    Scalar("beta", "dtype"), Matrix("C", "dtype", "n", "n", "ldc", "rw"), Ld("ldc"), TypeArg("dtype"),
), checks=(
    Check("is_complex(dtype) and trans == OP_C", "CUBLAS_STATUS_INVALID_VALUE",
          "complex syrk takes N or T (C is herk's)"),
), doc="C = alpha * op(A) op(A)^T + beta * C in the uplo triangle of C only", work="n * n * max(k, 1)")

DOT_EX = Family("BLAS_DOT_EX", 209, (
    Dim("n", quick=True), Vector("x", "xType", "n", "incx"), TypeArg("xType", values=_DOT_EX_NAMES), Inc("incx"),
    Vector("y", "yType", "n", "incy"), TypeArg("yType", values=_DOT_EX_NAMES), Inc("incy"),
    Result("result", "resultType"), TypeArg("resultType", values=_DOT_EX_NAMES),
    TypeArg("executionType", values=_SDCZ_NAMES), Enum("conj", "cublasOperation_t", _ops("N", "C")),
), checks=(
    Check("yType != xType or resultType != xType or executionType != (CUDA_R_32F if xType == CUDA_R_16F or "
          "xType == CUDA_R_16BF else xType)", "CUBLAS_STATUS_NOT_SUPPORTED", "x/y/result/execution types"),
), doc="result = sum(op(x) * y) in the execution type (cublasDotEx/DotcEx: fp16 and bf16 data too)")
SBMV = Family("BLAS_SBMV", 224, (
    Enum("uplo", FILL), Dim("n"), Dim("k"), Scalar("alpha", "dtype"),
    Matrix("A", "dtype", "k + 1", "n", "lda"), Ld("lda"),
    Vector("x", "dtype", "n", "incx"), Inc("incx", nonzero=True),
    Scalar("beta", "dtype"), Vector("y", "dtype", "n", "incy", "rw"), Inc("incy", nonzero=True), TypeArg("dtype"),
), doc="y = alpha * A x + beta * y, A symmetric with k sub/super-diagonals in band storage (uplo)",
    work="n * (k + 1)")
_TRI = "m if side == LEFT else n"
TRSM_BATCHED = Family("BLAS_TRSM_BATCHED", 246, (
    Enum("side", SIDE), Enum("uplo", FILL), Enum("trans", OP), Enum("diag", DIAG), Dim("m"), Dim("n"),
    Scalar("alpha", "dtype"), MatrixArray("A", "dtype", _TRI, _TRI, "lda", "batchCount"), Ld("lda"),
    MatrixArray("B", "dtype", "m", "n", "ldb", "batchCount", "rw"), Ld("ldb"), Dim("batchCount"), TypeArg("dtype"),
), doc="trsm on each of batchCount pairs of matrices given by device arrays of pointers",
    work="batchCount * m * n * (m if side == LEFT else n)")
_PIVOTS = "CUDA_R_32I"       # pivot and info arrays: int
GETRF_BATCHED = Family("BLAS_GETRF_BATCHED", 247, (
    Dim("n"), MatrixArray("A", "dtype", "n", "n", "lda", "batchSize", "rw"), Ld("lda"),
    Vector("P", "itype", "n * batchSize", "1", "w", optional=True), Vector("info", "itype", "batchSize", "1", "w"),
    Dim("batchSize"), TypeArg("dtype"), TypeArg("itype", values=(_PIVOTS,)),
), doc="LU of each A[i] in place, with partial pivoting (P[i*n + j]: the 1-based row swapped with row j) or "
       "without (P NULL); info[i] = k > 0 when U(k,k) is exactly zero", work="batchSize * n * n * n")
GETRS_BATCHED = Family("BLAS_GETRS_BATCHED", 248, (
    Enum("trans", OP), Dim("n"), Dim("nrhs"), MatrixArray("Aarray", "dtype", "n", "n", "lda", "batchSize"),
    Ld("lda"), Vector("devIpiv", "itype", "n * batchSize", "1", optional=True),
    MatrixArray("Barray", "dtype", "n", "nrhs", "ldb", "batchSize", "rw"), Ld("ldb"), HostInfo("info"),
    Dim("batchSize"), TypeArg("dtype"), TypeArg("itype", values=(_PIVOTS,)),
), doc="solve op(A[i]) X = B[i] with getrfBatched's LU and pivots (NULL: none); X overwrites B[i]",
    work="batchSize * n * n * max(nrhs, 1)")
GETRI_BATCHED = Family("BLAS_GETRI_BATCHED", 249, (
    Dim("n"), MatrixArray("A", "dtype", "n", "n", "lda", "batchSize"), Ld("lda"),
    Vector("P", "itype", "n * batchSize", "1", optional=True), MatrixArray("C", "dtype", "n", "n", "ldc", "batchSize",
                                                                          "w"),
    Ld("ldc"), Vector("info", "itype", "batchSize", "1", "w"), Dim("batchSize"), TypeArg("dtype"),
    TypeArg("itype", values=(_PIVOTS,)),
), doc="C[i] = inverse of A[i] from getrfBatched's LU and pivots; info[i] = k > 0 when U(k,k) is zero",
    work="batchSize * n * n * n")
GEQRF_BATCHED = Family("BLAS_GEQRF_BATCHED", 250, (
    Dim("m"), Dim("n"), MatrixArray("Aarray", "dtype", "m", "n", "lda", "batchSize", "rw"), Ld("lda"),
    MatrixArray("TauArray", "dtype", "min(m, n)", "1", "max(1, min(m, n))", "batchSize", "w"), HostInfo("info"),
    Dim("batchSize"), TypeArg("dtype"),
), doc="Householder QR of each A[i] in place, LAPACK's geqrf layout (R above the diagonal, reflectors below, tau)",
    work="batchSize * m * n * n")
GELS_BATCHED = Family("BLAS_GELS_BATCHED", 251, (
    Enum("trans", OP), Dim("m"), Dim("n"), Dim("nrhs"), MatrixArray("Aarray", "dtype", "m", "n", "lda", "batchSize",
                                                                    "rw"),
    Ld("lda"), MatrixArray("Carray", "dtype", "m", "nrhs", "ldc", "batchSize", "rw"), Ld("ldc"), HostInfo("info"),
    Vector("devInfoArray", "itype", "batchSize", "1", "w", optional=True), Dim("batchSize"), TypeArg("dtype"),
    TypeArg("itype", values=(_PIVOTS,)),
), checks=(
    Check("trans != OP_N", "CUBLAS_STATUS_NOT_SUPPORTED", "only CUBLAS_OP_N", "trans"),
    Check("m < n", "CUBLAS_STATUS_NOT_SUPPORTED", "m < n (underdetermined)", "n"),
), doc="least squares min ||A[i] X - C[i]|| for m >= n, full rank: A[i] becomes its QR (geqrf's layout), the "
       "first n rows of C[i] the solution; devInfoArray[i] = k > 0 when R(k,k) is zero",
    work="batchSize * m * n * (n + nrhs)")

FAMILIES: tuple[Family, ...] = (AXPY, SCAL, DOT, NRM2, ASUM, IAMAX, COPY, SWAP, ROT, GEMV, GER, TRSV, SYMV,
                                GEMM, GEMM_BATCHED, GEAM, DGMM, TRSM, SYRK, DOT_EX, SBMV, TRSM_BATCHED,
                                GETRF_BATCHED, GETRS_BATCHED, GETRI_BATCHED, GEQRF_BATCHED, GELS_BATCHED)
FAMILY: dict[str, Family] = {f.name: f for f in FAMILIES}

# ----------------------------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class Entry:
    """One exported C function implemented by a family with some arguments bound."""
    name: str
    family: Family
    bind: Mapping[str, int] = field(default_factory=dict)
    ilp64: bool = True        # NVIDIA exports a _64 twin (the batched solvers have none)

    def __repr__(self) -> str:
        return f"Entry({self.name})"

    def widths(self) -> tuple[bool, ...]:
        """The API widths NVIDIA exports: (False, True) for the int and _64 entry points, or (False,)."""
        return (False, True) if self.ilp64 else (False,)

    @property
    def name64(self) -> str:
        return self.name + "_64"

    def binding(self, ilp64: bool = False) -> dict[str, int]:
        """Bound arguments of the int (or _64) entry point: amax/amin's index result is an int or an int64_t."""
        out = dict(self.bind)
        for a in self.family.args:
            if isinstance(a, Result) and a.index:
                out[a.dtype] = DTYPE["CUDA_R_64I" if ilp64 else "CUDA_R_32I"].value
        return out

    def params(self) -> tuple[Arg, ...]:
        """The C parameters after the handle, in order."""
        bound = self.binding()
        return tuple(a for a in self.family.args if a.name not in bound)

    def position(self, arg: str | None) -> int:
        """The 1-based place of an argument among the C parameters (the handle is 1st; 0 when not a parameter)."""
        for i, a in enumerate(self.params()):
            if a.name == arg:
                return i + 2
        return 0


def _t(name: str) -> int:
    return DTYPE[name].value


S, D, C, Z, H, BF = "CUDA_R_32F", "CUDA_R_64F", "CUDA_C_32F", "CUDA_C_64F", "CUDA_R_16F", "CUDA_R_16BF"
_REAL_OF = {S: S, D: D, C: S, Z: D, H: H}
_SDCZ = {"S": S, "D": D, "C": C, "Z": Z}
_NO_BATCH = {"strideA": 0, "strideB": 0, "strideC": 0, "batchCount": 1}
_GEMM_COMPUTE = {S: "CUBLAS_COMPUTE_32F", D: "CUBLAS_COMPUTE_64F", C: "CUBLAS_COMPUTE_32F",
                 Z: "CUBLAS_COMPUTE_64F", H: "CUBLAS_COMPUTE_16F"}


def _gemm_bind(t: str) -> dict[str, int]:
    return {"Atype": _t(t), "Btype": _t(t), "Ctype": _t(t), "computeType": COMPUTE[_GEMM_COMPUTE[t]], "algo": -1}


def _entries() -> tuple[Entry, ...]:
    out: list[Entry] = []

    def add(name: str, fam: Family, **bind: int) -> None:
        out.append(Entry(name, fam, bind))

    for p, t in _SDCZ.items():
        add(f"cublas{p}axpy_v2", AXPY, alphaType=_t(t), xType=_t(t))
        add(f"cublas{p}scal_v2", SCAL, alphaType=_t(t), xType=_t(t))
        add(f"cublas{p}copy_v2", COPY, xType=_t(t))
        add(f"cublas{p}swap_v2", SWAP, xType=_t(t))
        add(f"cublasI{p.lower()}amax_v2", IAMAX, xType=_t(t), minimum=0)
        add(f"cublasI{p.lower()}amin_v2", IAMAX, xType=_t(t), minimum=1)
        add(f"cublas{p}rot_v2", ROT, xType=_t(t), cType=_t(_REAL_OF[t]), sType=_t(t))
        add(f"cublas{p}gemv_v2", GEMV, dtype=_t(t))
        add(f"cublas{p}trsv_v2", TRSV, dtype=_t(t))
        add(f"cublas{p}symv_v2", SYMV, dtype=_t(t))
        add(f"cublas{p}geam", GEAM, dtype=_t(t))
        add(f"cublas{p}dgmm", DGMM, dtype=_t(t))
        add(f"cublas{p}trsm_v2", TRSM, dtype=_t(t))
        add(f"cublas{p}syrk_v2", SYRK, dtype=_t(t))
    for p, t in (("S", S), ("D", D)):
        add(f"cublas{p}dot_v2", DOT, xType=_t(t), conj=0)
        add(f"cublas{p}nrm2_v2", NRM2, xType=_t(t), resultType=_t(t))
        add(f"cublas{p}asum_v2", ASUM, xType=_t(t), resultType=_t(t))
        add(f"cublas{p}ger_v2", GER, dtype=_t(t), conj=0)
    for p, t, r in (("C", C, "Sc"), ("Z", Z, "Dz")):
        add(f"cublas{p}dotu_v2", DOT, xType=_t(t), conj=0)
        add(f"cublas{p}dotc_v2", DOT, xType=_t(t), conj=2)
        add(f"cublas{r}nrm2_v2", NRM2, xType=_t(t), resultType=_t(_REAL_OF[t]))
        add(f"cublas{r}asum_v2", ASUM, xType=_t(t), resultType=_t(_REAL_OF[t]))
        add(f"cublas{p}{r[0].lower()}scal_v2", SCAL, alphaType=_t(_REAL_OF[t]), xType=_t(t))
        add(f"cublas{p}{r[0].lower()}rot_v2", ROT, xType=_t(t), cType=_t(_REAL_OF[t]), sType=_t(_REAL_OF[t]))
        add(f"cublas{p}geru_v2", GER, dtype=_t(t), conj=0)
        add(f"cublas{p}gerc_v2", GER, dtype=_t(t), conj=2)
    for p, t in {**_SDCZ, "H": H}.items():
        add(f"cublas{p}gemm{'_v2' if p != 'H' else ''}", GEMM, **_gemm_bind(t), **_NO_BATCH)
        add(f"cublas{p}gemmStridedBatched", GEMM, **_gemm_bind(t))
        add(f"cublas{p}gemmBatched", GEMM_BATCHED, **_gemm_bind(t))
    for p, t in _SDCZ.items():
        add(f"cublas{p}trsmBatched", TRSM_BATCHED, dtype=_t(t))
        for name, fam in ((f"cublas{p}getrfBatched", GETRF_BATCHED), (f"cublas{p}getrsBatched", GETRS_BATCHED),
                          (f"cublas{p}getriBatched", GETRI_BATCHED), (f"cublas{p}geqrfBatched", GEQRF_BATCHED),
                          (f"cublas{p}gelsBatched", GELS_BATCHED)):
            ints = {"itype": _t(_PIVOTS)} if "itype" in fam.names else {}
            out.append(Entry(name, fam, {"dtype": _t(t), **ints}, ilp64=False))
    for p, t in (("S", S), ("D", D)):
        add(f"cublas{p}sbmv_v2", SBMV, dtype=_t(t))
    add("cublasDotEx", DOT_EX, conj=0)
    add("cublasDotcEx", DOT_EX, conj=2)
    add("cublasSgemmEx", GEMM, computeType=COMPUTE["CUBLAS_COMPUTE_32F"], algo=-1, **_NO_BATCH)
    add("cublasGemmEx", GEMM, **_NO_BATCH)
    add("cublasGemmStridedBatchedEx", GEMM)
    add("cublasGemmBatchedEx", GEMM_BATCHED)
    return tuple(out)


ENTRIES: tuple[Entry, ...] = _entries()
ENTRY: dict[str, Entry] = {e.name: e for e in ENTRIES}

# Supported functions whose logic lives on the client (hand-written C, csrc/cublas/api_*.c): handle lifecycle and
# state, version and status strings, and the host<->device copy helpers (the core's 2D copies).
LOCAL_ENTRIES: tuple[str, ...] = (
    "cublasCreate_v2", "cublasDestroy_v2", "cublasGetVersion_v2", "cublasGetProperty", "cublasGetCudartVersion",
    "cublasSetStream_v2", "cublasGetStream_v2", "cublasGetPointerMode_v2", "cublasSetPointerMode_v2",
    "cublasGetMathMode", "cublasSetMathMode", "cublasSetWorkspace_v2", "cublasGetStatusName",
    "cublasGetStatusString",
    *(f"cublas{d}{w}{a}{s}" for d in ("Set", "Get") for w in ("Vector", "Matrix") for a in ("", "Async")
      for s in ("", "_64")),
    # cuBLASXt (csrc/cublas/api_xt.c): the handle, its configuration, and GEMM tiled over the selected GPUs
    "cublasXtCreate", "cublasXtDestroy", "cublasXtDeviceSelect", "cublasXtGetNumBoards", "cublasXtMaxBoards",
    "cublasXtSetBlockDim", "cublasXtGetBlockDim", "cublasXtGetPinningMemMode", "cublasXtSetPinningMemMode",
    "cublasXtSetCpuRoutine", "cublasXtSetCpuRatio", "cublasXtSgemm", "cublasXtDgemm", "cublasXtCgemm",
    "cublasXtZgemm",
)

# ----------------------------------------------------------------------------------------------- expressions
_ALLOWED_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Add,
                  ast.Sub, ast.Mult, ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.IfExp,
                  ast.Call, ast.Name, ast.Load, ast.Constant)
_CODE_CACHE: dict[tuple[str, int], CodeType] = {}    # (expression, id of the table's functions)


def _parse(expr: Expr, functions: Mapping[str, Callable[..., Any]] = FUNCTIONS) -> ast.Expression:
    tree = ast.parse(expr, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"cublas_spec: {type(node).__name__} not allowed in {expr!r}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in functions):
            raise ValueError(f"cublas_spec: unknown function in {expr!r}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, int):
            raise ValueError(f"cublas_spec: only integer literals in {expr!r}")
    return tree


def evaluate(expr: Expr, values: Mapping[str, Any], constants: Mapping[str, int] = CONSTANTS,
             functions: Mapping[str, Callable[..., Any]] = FUNCTIONS) -> Any:
    """Value of a table expression for the given argument values (ints; pointers as ints). Another table (the
    cuBLASLt one) passes its own constants and functions."""
    key = (expr, id(functions))
    code = _CODE_CACHE.get(key)
    if code is None:
        code = _CODE_CACHE[key] = compile(_parse(expr, functions), f"<cublas_spec {expr}>", "eval")
    return eval(code, {"__builtins__": {}, **functions, **constants}, dict(values))  # noqa: S307 (table text only)


_C_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_C_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def c_expr(expr: Expr, name_of: Callable[[str], str] = lambda n: n, constants: Mapping[str, int] = CONSTANTS,
           functions: Mapping[str, Callable[..., Any]] = FUNCTIONS) -> str:
    """The C translation of a table expression; `name_of` maps an argument name to its C lvalue (a function f of
    the table is called as pvb_f in C)."""

    def emit(node: ast.AST) -> str:
        if isinstance(node, ast.Expression):
            return emit(node.body)
        if isinstance(node, ast.BoolOp):
            op = " && " if isinstance(node.op, ast.And) else " || "
            return "(" + op.join(emit(v) for v in node.values) + ")"
        if isinstance(node, ast.UnaryOp):
            return ("(!" if isinstance(node.op, ast.Not) else "(-") + emit(node.operand) + ")"
        if isinstance(node, ast.BinOp):
            return f"({emit(node.left)} {_C_BINOPS[type(node.op)]} {emit(node.right)})"
        if isinstance(node, ast.Compare):
            parts, left = [], node.left
            for op, right in zip(node.ops, node.comparators):
                parts.append(f"{emit(left)} {_C_CMPOPS[type(op)]} {emit(right)}")
                left = right
            return "(" + " && ".join(parts) + ")"
        if isinstance(node, ast.IfExp):
            return f"({emit(node.test)} ? {emit(node.body)} : {emit(node.orelse)})"
        if isinstance(node, ast.Call):
            return f"pvb_{node.func.id}(" + ", ".join(emit(a) for a in node.args) + ")"
        if isinstance(node, ast.Name):
            if node.id in constants:
                return f"{constants[node.id]}"
            return name_of(node.id)
        if isinstance(node, ast.Constant):
            return f"{node.value}"
        raise ValueError(f"cublas_spec: cannot translate {ast.dump(node)}")

    return emit(_parse(expr, functions))


# ----------------------------------------------------------------------------------------------- checks
@dataclass(frozen=True)
class Failure:
    status: int
    why: str
    arg: str | None = None


def _generic_checks(fam: Family) -> tuple[Check, ...]:
    """The checks every argument kind implies, in argument order."""
    out: list[Check] = []
    for a in fam.args:
        if isinstance(a, TypeArg) and a.values is not None:
            allowed = " and ".join(f"{a.name} != {v}" for v in a.values)
            out.append(Check(allowed, "CUBLAS_STATUS_NOT_SUPPORTED", f"{a.name} is not a supported type", a.name))
        elif isinstance(a, Enum):
            allowed = " and ".join(f"{a.name} != {v}" for v in a.allowed())
            out.append(Check(allowed, "CUBLAS_STATUS_INVALID_VALUE", f"{a.name} is not a valid {a.ctype}", a.name))
        elif isinstance(a, Dim) and not a.quick:
            out.append(Check(f"{a.name} < 0", "CUBLAS_STATUS_INVALID_VALUE", f"{a.name} < 0", a.name))
        elif isinstance(a, Inc) and a.nonzero:
            out.append(Check(f"{a.name} == 0", "CUBLAS_STATUS_INVALID_VALUE", f"{a.name} == 0", a.name))
        elif isinstance(a, (Matrix, MatrixArray)):
            out.append(Check(f"{a.ld} < max(1, {a.rows})", "CUBLAS_STATUS_INVALID_VALUE",
                             f"{a.ld} < max(1, rows of {a.name})", a.ld))
        elif isinstance(a, (Scalar, Result)):
            out.append(Check(f"{a.name} == 0", "CUBLAS_STATUS_INVALID_VALUE", f"{a.name} is NULL", a.name))
    return tuple(out)


def all_checks(fam: Family) -> tuple[Check, ...]:
    return _generic_checks(fam) + fam.checks


_ALL_CHECKS: dict[str, tuple[Check, ...]] = {f.name: all_checks(f) for f in FAMILIES}


def check(fam: Family, values: Mapping[str, Any]) -> Failure | None:
    """The first failing check of a call, or None. `values`: every argument of the family by name (ints; scalar
    and result pointers as ints, where a host-mode value counts as a non-NULL pointer)."""
    for c in _ALL_CHECKS[fam.name]:
        if evaluate(c.expr, values):
            return Failure(STATUS[c.status], c.why, c.arg)
    return None


def derived(fam: Family, values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: evaluate(expr, values) for name, expr in fam.derived.items()}


# ----------------------------------------------------------------------------------------------- C prototypes
def _elem_ctype(dtype_ref: str, bind: Mapping[str, int], fam: Family) -> str:
    """C element type of a data argument: the bound cudaDataType's, else void (the Ex API)."""
    if dtype_ref in bind:
        return DTYPE_BY_VALUE[bind[dtype_ref]].ctype
    if dtype_ref == "scaleType" and "computeType" in bind:
        # GEMM's alpha/beta: typed by the bound types, or (cublasSgemmEx: only the compute type bound) by the
        # real scale type of that compute type.
        scale = gemm_scale_type(bind.get("Atype", -1), bind.get("Btype", -1), bind.get("Ctype", -1),
                                bind["computeType"])
        if scale < 0:
            scale = next(DTYPE[t.scale].value for t in GEMM_TYPES if not DTYPE[t.c].is_complex
                         and any(COMPUTE[c] == bind["computeType"] for c in t.computes))
        return DTYPE_BY_VALUE[scale].ctype
    return "void"


def c_params(entry: Entry, ilp64: bool = False) -> list[tuple[str, str]]:
    """[(C type, name)] of the entry point, handle first, as cublas_api.h spells them (normalised)."""
    int_t = "int64_t" if ilp64 else "int"
    bind = entry.binding(ilp64)
    out = [("cublasHandle_t", "handle")]
    for a in entry.params():
        if isinstance(a, (Enum, TypeArg)):
            out.append((a.ctype, a.name))
        elif isinstance(a, (Dim, Ld, Inc)):
            out.append((int_t, a.name))
        elif isinstance(a, Stride):
            out.append(("long long int", a.name))
        elif isinstance(a, Scalar):
            out.append((f"const {_elem_ctype(a.dtype, bind, entry.family)}*", a.name))
        elif isinstance(a, Result):
            t = int_t if a.index else _elem_ctype(a.dtype, bind, entry.family)
            out.append((f"{t}*", a.name))
        elif isinstance(a, (Vector, Matrix)):
            t = _elem_ctype(a.dtype, bind, entry.family)
            out.append((f"{t}*" if "w" in a.access else f"const {t}*", a.name))
        elif isinstance(a, MatrixArray):
            t = _elem_ctype(a.dtype, bind, entry.family)
            out.append((f"{t}* const*" if "w" in a.access else f"const {t}* const*", a.name))
        elif isinstance(a, HostInfo):
            out.append(("int*", a.name))
        else:  # pragma: no cover - every kind is handled above
            raise TypeError(a)
    return out


# ----------------------------------------------------------------------------------------------- wire view
# Each family is one op of pyvgpu/protocol.py (the argument table above is its spec). Before its own arguments an op
# carries the handle's state at the time of the call: the daemon handle, the stream, the pointer mode and the math
# mode. Sizes, increments and strides travel as i64 (one wire form for the int and _64 APIs), enums and types as
# i32, device pointers (vectors, matrices, pointer arrays, device-mode results) as ptr, scalars as bytes: the
# value's bytes in host pointer mode, the 8-byte little-endian device address in device pointer mode. A result in
# host pointer mode is ptr 0 and comes back as the reply's payload (its bytes), so only those calls wait.
WIRE_PREFIX = "dev:dev handle:blas stream:stream pmode:u32 math:u32"
WIRE_TYPE: dict[type, str] = {Enum: "i32", TypeArg: "i32", Dim: "i64", Ld: "i64", Inc: "i64", Stride: "i64",
                              Scalar: "bytes", Vector: "ptr", Matrix: "ptr", MatrixArray: "ptr", Result: "ptr"}
# Handle ops (their codes follow the families').
OP_CREATE, OP_DESTROY, OP_SET_WORKSPACE = 290, 291, 292
MAX_HANDLES_PER_DEVICE = 1024       # cuBLAS handles one session may hold on one device (daemon-side bound)


def wire_args(fam: Family) -> str:
    return WIRE_PREFIX + " " + " ".join(f"{a.name}:{WIRE_TYPE[type(a)]}" for a in fam.args
                                        if not isinstance(a, HostInfo))


def has_result(fam: Family) -> bool:
    return any(isinstance(a, Result) for a in fam.args)


# cuBLAS statuses <-> the cudaError_t numbers the wire carries. A status the daemon refuses a call with travels as
# its cudaError_t; a cudaError_t a waiting call gets back becomes its status (anything not listed: the GPU failed
# to run it, CUBLAS_STATUS_EXECUTION_FAILED). Device faults inside an asynchronous call stay cudaErrors: the next
# synchronizing CUDA call reports them, as on a GPU.
STATUS_CUDA: tuple[tuple[str, str], ...] = (
    ("CUBLAS_STATUS_INVALID_VALUE", "cudaErrorInvalidValue"),
    ("CUBLAS_STATUS_NOT_SUPPORTED", "cudaErrorNotSupported"),
    ("CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation"),
    ("CUBLAS_STATUS_NOT_INITIALIZED", "cudaErrorInvalidResourceHandle"),
    ("CUBLAS_STATUS_EXECUTION_FAILED", "cudaErrorLaunchOutOfResources"),
    ("CUBLAS_STATUS_ARCH_MISMATCH", "cudaErrorNoKernelImageForDevice"),
    ("CUBLAS_STATUS_INTERNAL_ERROR", "cudaErrorUnknown"),
)
_CUDA_CODE = {name: value for value, name, _ in CUDA_ERRORS}


def cuda_error_of_status(status: int) -> int:
    for st_name, cuda_name in STATUS_CUDA:
        if STATUS[st_name] == status:
            return _CUDA_CODE[cuda_name]
    return _CUDA_CODE["cudaErrorUnknown"]


def status_of_cuda_error(err: int) -> int:
    if err == 0:
        return SUCCESS
    for st_name, cuda_name in STATUS_CUDA:
        if _CUDA_CODE[cuda_name] == err:
            return STATUS[st_name]
    return STATUS["CUBLAS_STATUS_EXECUTION_FAILED"]


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--list":
        for e in ENTRIES:
            print(f"{e.name:32s} {e.family.name:18s} " + ", ".join(f"{t} {n}" for t, n in c_params(e)))
        return 0
    print("usage: python -m pyvgpu.cublas_spec --list", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
