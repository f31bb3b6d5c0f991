"""The cuBLASLt API pyvgpu supports, as one declarative table: the single source of truth for libvcublasLt's
descriptors and generated C (tools/gen_cublaslt_c.py), the LT_MATMUL wire op (pyvgpu/protocol.py), and the daemon's
execution of a matmul (daemon blas/lt.py on the emulated GPU, backends/cublaslt_cuda.py on real GPUs).

Standard library only (like protocol.py and cublas_spec.py): the C build imports it (tools/gen_cublaslt_c.py) before
the package is installed.

* Descriptors are plain data on the client: a matrix layout, a matmul descriptor, a preference and an algorithm are
  C structs whose fields are the ATTRIBUTES below (one per cublasLt*Attribute_t value, with NVIDIA's size and
  default). Setting and getting an attribute copies bytes after checking the size, as NVIDIA's library does (it
  checks no values there; a matmul or a heuristic query does).
* A matmul is one fire-and-forget frame (LT_MATMUL) ordered on its stream: the descriptor's and the four layouts'
  `wire` attributes travel with it, by name (MATMUL_ARGS). Attributes that are not `wire` either have no effect on
  the supported types (stored only) or are refused by the client unless at their default (`refuse`).
* The call's checks are expressions over the wire names (cublas_spec's expression language, with this table's
  constants and functions), evaluated by the daemon in Python and compiled into libvcublasLt in C.
* The supported computation: D = epilogue(alpha * op(A) op(B) + beta * C) for the type combinations of cuBLAS's
  GEMM table (fp16/bf16 with fp32 or fp16 compute, fp32, fp64, complex), column- or row-major matrices, strided
  batches, and the epilogues of EPILOGUES (bias, ReLU and GELU with their auxiliary outputs, and the backward forms
  DReLU/DGELU with bias gradients and BGRADA/BGRADB).

Values are cublasLt.h's of nvidia-cublas 13.10.0.20 (tests compile them against the header); attribute sizes and
defaults are what NVIDIA's libcublasLt.so.13 of that wheel answers (probed without a GPU: descriptors work there);
where the header's comment and the library disagree (the grouped preference attributes: uint32_t in the comment,
8 bytes in the library) the library wins.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pyvgpu import cublas_spec as blas

# ----------------------------------------------------------------------------------------------- constants
LT_VERSION = blas.CUBLAS_VERSION         # cublasLtGetVersion() of NVIDIA's 13.10 library
CUDART_VERSION = blas.CUDART_VERSION     # cublasLtGetCudartVersion()
STATUSES = blas.STATUSES                 # libcublasLt answers the same names and strings (probed)
OP_LT_MATMUL = 500                       # the wire ops (issue 18's cuBLASLt range: 500-559)
OP_LT_HEURISTIC = 501
MAX_HEURISTIC_RESULTS = 1                # pyvgpu's matmul has one algorithm: the daemon's (see ALGO)

ENUMS: dict[str, dict[str, int]] = {
    "cublasLtOrder_t": {"CUBLASLT_ORDER_COL": 0, "CUBLASLT_ORDER_ROW": 1, "CUBLASLT_ORDER_COL32": 2,
                        "CUBLASLT_ORDER_COL4_4R2_8C": 3, "CUBLASLT_ORDER_COL32_2R_4R4": 4},
    "cublasLtPointerMode_t": {"CUBLASLT_POINTER_MODE_HOST": 0, "CUBLASLT_POINTER_MODE_DEVICE": 1,
                              "CUBLASLT_POINTER_MODE_DEVICE_VECTOR": 2,
                              "CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO": 3,
                              "CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST": 4},
    "cublasLtPointerModeMask_t": {"CUBLASLT_POINTER_MODE_MASK_HOST": 1, "CUBLASLT_POINTER_MODE_MASK_DEVICE": 2,
                                  "CUBLASLT_POINTER_MODE_MASK_DEVICE_VECTOR": 4,
                                  "CUBLASLT_POINTER_MODE_MASK_ALPHA_DEVICE_VECTOR_BETA_ZERO": 8,
                                  "CUBLASLT_POINTER_MODE_MASK_ALPHA_DEVICE_VECTOR_BETA_HOST": 16},
    "cublasLtBatchMode_t": {"CUBLASLT_BATCH_MODE_STRIDED": 0, "CUBLASLT_BATCH_MODE_POINTER_ARRAY": 1,
                            "CUBLASLT_BATCH_MODE_GROUPED": 2},
    "cublasLtEpilogue_t": {"CUBLASLT_EPILOGUE_DEFAULT": 1, "CUBLASLT_EPILOGUE_RELU": 2,
                           "CUBLASLT_EPILOGUE_RELU_AUX": 130, "CUBLASLT_EPILOGUE_BIAS": 4,
                           "CUBLASLT_EPILOGUE_RELU_BIAS": 6, "CUBLASLT_EPILOGUE_RELU_AUX_BIAS": 134,
                           "CUBLASLT_EPILOGUE_DRELU": 136, "CUBLASLT_EPILOGUE_DRELU_BGRAD": 152,
                           "CUBLASLT_EPILOGUE_GELU": 32, "CUBLASLT_EPILOGUE_GELU_AUX": 160,
                           "CUBLASLT_EPILOGUE_GELU_BIAS": 36, "CUBLASLT_EPILOGUE_GELU_AUX_BIAS": 164,
                           "CUBLASLT_EPILOGUE_DGELU": 192, "CUBLASLT_EPILOGUE_DGELU_BGRAD": 208,
                           "CUBLASLT_EPILOGUE_BGRADA": 256, "CUBLASLT_EPILOGUE_BGRADB": 512},
    "cublasLtMatmulSearch_t": {"CUBLASLT_SEARCH_BEST_FIT": 0, "CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID": 1},
    "cublasLtReductionScheme_t": {"CUBLASLT_REDUCTION_SCHEME_NONE": 0, "CUBLASLT_REDUCTION_SCHEME_INPLACE": 1,
                                  "CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE": 2,
                                  "CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE": 4, "CUBLASLT_REDUCTION_SCHEME_MASK": 7},
}
ORDER_COL, ORDER_ROW = 0, 1
POINTER_MODE_HOST, POINTER_MODE_DEVICE = 0, 1
FILL_MODE_FULL = 2                      # CUBLAS_FILL_MODE_FULL (cublas_api.h): the matmul descriptor's default
NUMERICAL_IMPL = {"FMA": 0x01, "ACCUMULATOR_16F": 0x01 << 8, "ACCUMULATOR_32F": 0x02 << 8,
                  "ACCUMULATOR_64F": 0x04 << 8, "INPUT_16F": 0x01 << 16, "INPUT_16BF": 0x02 << 16,
                  "INPUT_32F": 0x08 << 16, "INPUT_64F": 0x10 << 16}     # CUBLASLT_NUMERICAL_IMPL_FLAGS_*


@dataclass(frozen=True)
class Epilogue:
    """What an epilogue does, for the emulation and the checks. act: the point-wise function applied to the
    result (relu, gelu) or whose derivative at the auxiliary input multiplies it (drelu, dgelu); bias: "add" a
    bias vector of D's rows before the function, or write a gradient of the bias: "rows" (the sum of D's columns
    after the function), "a" (the sum of op(A) over k, BGRADA), "b" (the sum of op(B) over k, BGRADB, one per column
    of D); aux: "out" writes the function's input (GELU: the values; ReLU: a bit mask of the positives), "in"
    reads it (the backward forms). no_gpu_algorithm: why the emulated GPU offers no algorithm for it although the
    table accepts it (NVIDIA's cuBLASLt, the truth on a real GPU, found none); "" when it runs."""
    name: str
    act: str = ""
    bias: str = ""
    aux: str = ""
    no_gpu_algorithm: str = ""


# NVIDIA's cuBLASLt 13.1 found no algorithm for DRELU_BGRAD and DGELU_BGRAD on an H200 (GPU run 1) and an H100 (GPU
# run 3: fp32, fp16 and bf16, both transposes, 1 and 2 batch entries, odd and aligned sizes, 48 problems, "Failed to
# query heuristics"): the emulated GPU offers none either, so a program sees on it what it would see on a GPU.
_NO_BGRAD_ALGO = "NVIDIA's cuBLASLt has no algorithm for it on the GPUs tried (H100, H200)"
EPILOGUES: tuple[Epilogue, ...] = (
    Epilogue("CUBLASLT_EPILOGUE_DEFAULT"),
    Epilogue("CUBLASLT_EPILOGUE_RELU", "relu"),
    Epilogue("CUBLASLT_EPILOGUE_RELU_AUX", "relu", aux="out"),
    Epilogue("CUBLASLT_EPILOGUE_BIAS", bias="add"),
    Epilogue("CUBLASLT_EPILOGUE_RELU_BIAS", "relu", "add"),
    Epilogue("CUBLASLT_EPILOGUE_RELU_AUX_BIAS", "relu", "add", "out"),
    Epilogue("CUBLASLT_EPILOGUE_DRELU", "drelu", aux="in"),
    Epilogue("CUBLASLT_EPILOGUE_DRELU_BGRAD", "drelu", "rows", "in", _NO_BGRAD_ALGO),
    Epilogue("CUBLASLT_EPILOGUE_GELU", "gelu"),
    Epilogue("CUBLASLT_EPILOGUE_GELU_AUX", "gelu", aux="out"),
    Epilogue("CUBLASLT_EPILOGUE_GELU_BIAS", "gelu", "add"),
    Epilogue("CUBLASLT_EPILOGUE_GELU_AUX_BIAS", "gelu", "add", "out"),
    Epilogue("CUBLASLT_EPILOGUE_DGELU", "dgelu", aux="in"),
    Epilogue("CUBLASLT_EPILOGUE_DGELU_BGRAD", "dgelu", "rows", "in", _NO_BGRAD_ALGO),
    Epilogue("CUBLASLT_EPILOGUE_BGRADA", bias="a"),
    Epilogue("CUBLASLT_EPILOGUE_BGRADB", bias="b"),
)
EPILOGUE: dict[int, Epilogue] = {ENUMS["cublasLtEpilogue_t"][e.name]: e for e in EPILOGUES}
EPILOGUE_DEFAULT = ENUMS["cublasLtEpilogue_t"]["CUBLASLT_EPILOGUE_DEFAULT"]
RELU_MASK_LD_MULTIPLE = 128     # a ReLU bit mask's leading dimension and batch stride (in bits)
GELU_AUX_LD_MULTIPLE = 8        # a GELU input matrix's leading dimension and batch stride (in elements)

# ----------------------------------------------------------------------------------------------- attributes
# C storage types of attributes: their size in bytes (void* travels as a pointer).
CTYPE_SIZE: dict[str, int] = {"int8_t": 1, "uint16_t": 2, "int32_t": 4, "uint32_t": 4, "float": 4, "int64_t": 8,
                              "uint64_t": 8, "void*": 8}


@dataclass(frozen=True)
class Attr:
    """One attribute of a descriptor: its enumerator, C storage type and default as NVIDIA's library has them.

    field: the struct member, and (for `wire` attributes) the argument name of LT_MATMUL (layouts' with the matrix
    letter in front: Arows, Dld, ...). default: a number, or the name of a create() argument.
    use: "wire" (travels with every matmul), "stored" (no effect on the supported types: kept and answered), or
    "refuse" (a matmul refuses any value but the default with `status`: a feature pyvgpu does not offer)."""
    name: str
    value: int
    field: str
    ctype: str
    default: int | float | str = 0
    use: str = "wire"
    status: str = "CUBLAS_STATUS_NOT_SUPPORTED"

    @property
    def size(self) -> int:
        return CTYPE_SIZE[self.ctype]


def _refuse(name: str, value: int, field: str, ctype: str, default: int = 0,
            status: str = "CUBLAS_STATUS_NOT_SUPPORTED") -> Attr:
    return Attr(name, value, field, ctype, default, "refuse", status)


_INVALID = "CUBLAS_STATUS_INVALID_VALUE"   # what NVIDIA documents for scale pointers the types do not take
LAYOUT_ATTRS: tuple[Attr, ...] = (
    Attr("CUBLASLT_MATRIX_LAYOUT_TYPE", 0, "type", "uint32_t", "type"),
    Attr("CUBLASLT_MATRIX_LAYOUT_ORDER", 1, "order", "int32_t", ORDER_COL),
    Attr("CUBLASLT_MATRIX_LAYOUT_ROWS", 2, "rows", "uint64_t", "rows"),
    Attr("CUBLASLT_MATRIX_LAYOUT_COLS", 3, "cols", "uint64_t", "cols"),
    Attr("CUBLASLT_MATRIX_LAYOUT_LD", 4, "ld", "int64_t", "ld"),
    Attr("CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT", 5, "batch", "int32_t", 1),
    Attr("CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET", 6, "stride", "int64_t", 0),
    _refuse("CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET", 7, "plane_offset", "int64_t"),
    _refuse("CUBLASLT_MATRIX_LAYOUT_BATCH_MODE", 8, "batch_mode", "uint32_t"),
    _refuse("CUBLASLT_GROUPED_MATRIX_LAYOUT_ROWS_ARRAY", 9, "rows_array", "void*"),
    _refuse("CUBLASLT_GROUPED_MATRIX_LAYOUT_COLS_ARRAY", 10, "cols_array", "void*"),
    _refuse("CUBLASLT_GROUPED_MATRIX_LAYOUT_LD_ARRAY", 11, "ld_array", "void*"),
    _refuse("CUBLASLT_GROUPED_MATRIX_LAYOUT_ROWS_COLS_ARRAY_INTEGER_WIDTH", 12, "rows_cols_width", "int32_t"),
    _refuse("CUBLASLT_GROUPED_MATRIX_LAYOUT_LD_ARRAY_INTEGER_WIDTH", 13, "ld_width", "int32_t"),
)

DESC_ATTRS: tuple[Attr, ...] = (
    Attr("CUBLASLT_MATMUL_DESC_COMPUTE_TYPE", 0, "compute", "int32_t", "compute"),
    Attr("CUBLASLT_MATMUL_DESC_SCALE_TYPE", 1, "scale", "int32_t", "scale"),
    Attr("CUBLASLT_MATMUL_DESC_POINTER_MODE", 2, "pmode", "int32_t", POINTER_MODE_HOST),
    Attr("CUBLASLT_MATMUL_DESC_TRANSA", 3, "transa", "int32_t", 0),
    Attr("CUBLASLT_MATMUL_DESC_TRANSB", 4, "transb", "int32_t", 0),
    Attr("CUBLASLT_MATMUL_DESC_TRANSC", 5, "transc", "int32_t", 0),
    Attr("CUBLASLT_MATMUL_DESC_FILL_MODE", 6, "fill", "int32_t", FILL_MODE_FULL),
    Attr("CUBLASLT_MATMUL_DESC_EPILOGUE", 7, "epilogue", "uint32_t", EPILOGUE_DEFAULT),
    Attr("CUBLASLT_MATMUL_DESC_BIAS_POINTER", 8, "bias", "void*"),
    Attr("CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE", 10, "bias_stride", "int64_t"),
    Attr("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", 11, "aux", "void*"),
    Attr("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD", 12, "aux_ld", "int64_t"),
    Attr("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE", 13, "aux_stride", "int64_t"),
    _refuse("CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE", 14, "alpha_vector_stride", "int64_t"),
    Attr("CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET", 15, "sm_count", "int32_t"),          # a hint for real GPUs
    _refuse("CUBLASLT_MATMUL_DESC_A_SCALE_POINTER", 17, "a_scale", "void*", status=_INVALID),
    _refuse("CUBLASLT_MATMUL_DESC_B_SCALE_POINTER", 18, "b_scale", "void*", status=_INVALID),
    _refuse("CUBLASLT_MATMUL_DESC_C_SCALE_POINTER", 19, "c_scale", "void*", status=_INVALID),
    _refuse("CUBLASLT_MATMUL_DESC_D_SCALE_POINTER", 20, "d_scale", "void*", status=_INVALID),
    _refuse("CUBLASLT_MATMUL_DESC_AMAX_D_POINTER", 21, "amax_d", "void*", status=_INVALID),
    Attr("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE", 22, "aux_type", "int32_t", -1),
    _refuse("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER", 23, "aux_scale", "void*", status=_INVALID),
    _refuse("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER", 24, "aux_amax", "void*", status=_INVALID),
    Attr("CUBLASLT_MATMUL_DESC_FAST_ACCUM", 25, "fast_accum", "int8_t", 0, "stored"),      # fp8 only
    Attr("CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE", 26, "bias_type", "int32_t", -1),
    _refuse("CUBLASLT_MATMUL_DESC_A_SCALE_MODE", 31, "a_scale_mode", "int32_t"),
    _refuse("CUBLASLT_MATMUL_DESC_B_SCALE_MODE", 32, "b_scale_mode", "int32_t"),
    _refuse("CUBLASLT_MATMUL_DESC_C_SCALE_MODE", 33, "c_scale_mode", "int32_t"),
    _refuse("CUBLASLT_MATMUL_DESC_D_SCALE_MODE", 34, "d_scale_mode", "int32_t"),
    _refuse("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE", 35, "aux_scale_mode", "int32_t"),
    _refuse("CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER", 36, "d_out_scale", "void*", status=_INVALID),
    _refuse("CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE", 37, "d_out_scale_mode", "int32_t"),
    _refuse("CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR", 38, "emulation", "void*"),
    _refuse("CUBLASLT_MATMUL_DESC_ALPHA_BATCH_STRIDE", 39, "alpha_stride", "int64_t"),
    _refuse("CUBLASLT_MATMUL_DESC_BETA_BATCH_STRIDE", 40, "beta_stride", "int64_t"),
    Attr("CUBLASLT_MATMUL_DESC_BATCH_INVARIANCE_FLAGS", 41, "invariance", "int32_t", 0x8000),  # a hint for real GPUs
)

PREF_ATTRS: tuple[Attr, ...] = (      # preferences only steer the heuristic query: nothing travels
    Attr("CUBLASLT_MATMUL_PREF_SEARCH_MODE", 0, "search", "uint32_t", 0, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES", 1, "max_workspace", "uint64_t", 0, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK", 3, "reduction_mask", "uint32_t", 7, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES", 5, "align_a", "uint32_t", 256, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES", 6, "align_b", "uint32_t", 256, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES", 7, "align_c", "uint32_t", 256, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES", 8, "align_d", "uint32_t", 256, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT", 9, "max_waves", "float", 0.0, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_IMPL_MASK", 12, "impl_mask", "uint64_t", (1 << 64) - 1, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_GROUPED_AVERAGE_REDUCTION_DIM", 13, "grouped_k", "uint64_t", 0, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_GROUPED_DESC_D_AVERAGE_ROWS", 14, "grouped_rows", "uint64_t", 0, "stored"),
    Attr("CUBLASLT_MATMUL_PREF_GROUPED_DESC_D_AVERAGE_COLS", 15, "grouped_cols", "uint64_t", 0, "stored"),
)

# cublasLtMatmulAlgo_t's configuration (cublasLtMatmulAlgoConfig{Set,Get}Attribute): pyvgpu's one algorithm runs
# whatever configuration is set (the daemon chooses how to compute), so these are stored and answered.
ALGO_CONFIG_ATTRS: tuple[Attr, ...] = (
    Attr("CUBLASLT_ALGO_CONFIG_ID", 0, "id", "int32_t", 0, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_TILE_ID", 1, "tile", "uint32_t", 0, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_SPLITK_NUM", 2, "splitk", "int32_t", 1, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME", 3, "reduction", "uint32_t", 0, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING", 4, "swizzle", "uint32_t", 0, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION", 5, "custom", "uint32_t", 0, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_STAGES_ID", 6, "stages", "uint32_t", 0, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID", 7, "inner_shape", "uint16_t", 0, "stored"),
    Attr("CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID", 8, "cluster_shape", "uint16_t", 0, "stored"),
)
ALGO_CONFIG_READONLY = ("CUBLASLT_ALGO_CONFIG_ID",)     # "readonly, set by cublasLtMatmulAlgoInit()"


@dataclass(frozen=True)
class Cap:
    """A capability of pyvgpu's algorithm (cublasLtMatmulAlgoCapGetAttribute): its C type and value(s)."""
    name: str
    value: int
    ctype: str
    values: tuple[int, ...]


_EPILOGUE_MASK = 0
for _e in EPILOGUES:
    _EPILOGUE_MASK |= ENUMS["cublasLtEpilogue_t"][_e.name]
ALGO_CAPS: tuple[Cap, ...] = (
    Cap("CUBLASLT_ALGO_CAP_SPLITK_SUPPORT", 0, "int32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK", 1, "uint32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT", 2, "uint32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_STRIDED_BATCH_SUPPORT", 3, "int32_t", (1,)),
    Cap("CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT", 4, "int32_t", (1,)),
    Cap("CUBLASLT_ALGO_CAP_UPLO_SUPPORT", 5, "int32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_TILE_IDS", 6, "uint32_t", (0,)),             # CUBLASLT_MATMUL_TILE_UNDEFINED
    Cap("CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX", 7, "int32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_CUSTOM_MEMORY_ORDER", 10, "int32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_POINTER_MODE_MASK", 11, "uint32_t", (1 | 2,)),  # host and device
    Cap("CUBLASLT_ALGO_CAP_EPILOGUE_MASK", 12, "uint32_t", (_EPILOGUE_MASK,)),
    Cap("CUBLASLT_ALGO_CAP_STAGES_IDS", 13, "uint32_t", (0,)),           # CUBLASLT_MATMUL_STAGES_UNDEFINED
    Cap("CUBLASLT_ALGO_CAP_LD_NEGATIVE", 14, "int32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS", 15, "uint64_t", (NUMERICAL_IMPL["FMA"],)),
    Cap("CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES", 16, "uint32_t", (1,)),
    Cap("CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES", 17, "uint32_t", (1,)),
    Cap("CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES", 18, "uint32_t", (1,)),
    Cap("CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES", 19, "uint32_t", (1,)),
    Cap("CUBLASLT_ALGO_CAP_POINTER_ARRAY_BATCH_SUPPORT", 21, "int32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_FLOATING_POINT_EMULATION_SUPPORT", 22, "int32_t", (0,)),
    Cap("CUBLASLT_ALGO_CAP_POINTER_ARRAY_GROUPED_SUPPORT", 23, "int32_t", (0,)),
)

# The descriptor objects: C struct name, attribute table, the cublasLt opaque type whose storage Init_internal
# fills (its size in bytes: the generated struct must fit), and the public name used in messages.
@dataclass(frozen=True)
class Descriptor:
    name: str          # layout, desc, pref, algo
    attrs: tuple[Attr, ...]
    opaque: str
    opaque_size: int
    create_args: tuple[str, ...] = ()


DESCRIPTORS: tuple[Descriptor, ...] = (
    Descriptor("layout", LAYOUT_ATTRS, "cublasLtMatrixLayoutOpaque_t", 14 * 8, ("type", "rows", "cols", "ld")),
    Descriptor("desc", DESC_ATTRS, "cublasLtMatmulDescOpaque_t", 32 * 8, ("compute", "scale")),
    Descriptor("pref", PREF_ATTRS, "cublasLtMatmulPreferenceOpaque_t", 12 * 8),
    Descriptor("algo", ALGO_CONFIG_ATTRS, "cublasLtMatmulAlgo_t", 8 * 8),
)
DESCRIPTOR: dict[str, Descriptor] = {d.name: d for d in DESCRIPTORS}
MATRICES = ("A", "B", "C", "D")

# ----------------------------------------------------------------------------------------------- the matmul
# LT_MATMUL's arguments after `dev stream`: the descriptor's wire attributes, each matrix's wire layout attributes
# (prefixed by its letter), the scalars (alpha/beta: the value's bytes in host pointer mode, the 8-byte LE device
# address in device pointer mode), the matrices' device pointers and the workspace.
_WIRE_TYPE = {"int32_t": "i32", "uint32_t": "i32", "int64_t": "i64", "uint64_t": "i64", "void*": "ptr"}
DESC_WIRE: tuple[Attr, ...] = tuple(a for a in DESC_ATTRS if a.use == "wire")
LAYOUT_WIRE: tuple[Attr, ...] = tuple(a for a in LAYOUT_ATTRS if a.use == "wire")
SCALARS = ("alpha", "beta")
POINTERS = ("A", "B", "C", "D", "workspace")


def matmul_wire() -> list[tuple[str, str]]:
    """[(name, wire type)] of LT_MATMUL's arguments after `dev stream`, in order."""
    out = [(a.field, _WIRE_TYPE[a.ctype]) for a in DESC_WIRE]
    out += [(m + a.field, _WIRE_TYPE[a.ctype]) for m in MATRICES for a in LAYOUT_WIRE]
    out += [(s, "bytes") for s in SCALARS] + [(p, "ptr") for p in POINTERS] + [("workspace_size", "size")]
    return out


MATMUL_NAMES: tuple[str, ...] = tuple(n for n, _ in matmul_wire())
INT_NAMES: tuple[str, ...] = tuple(n for n, t in matmul_wire() if t != "bytes")   # what the checks see


def wire_args() -> str:
    return "dev:dev stream:stream " + " ".join(f"{n}:{t}" for n, t in matmul_wire())


# LT_HEURISTIC's arguments after `dev`: the problem (LT_MATMUL's int arguments but its data pointers and workspace)
# and what the preference asks of an algorithm: the workspace it may use and the alignments the pointers will have.
HEURISTIC_PREFS: tuple[tuple[str, str], ...] = (("max_workspace", "size"), ("align_a", "u32"), ("align_b", "u32"),
                                                 ("align_c", "u32"), ("align_d", "u32"))


def heuristic_wire() -> list[tuple[str, str]]:
    return [(n, t) for n, t in matmul_wire() if t != "bytes" and n not in POINTERS and n != "workspace_size"] + \
        list(HEURISTIC_PREFS)


def heuristic_args() -> str:
    return "dev:dev " + " ".join(f"{n}:{t}" for n, t in heuristic_wire())


def problem_of(heuristic: Mapping[str, int]) -> dict[str, int]:
    """LT_MATMUL's int arguments for a heuristic query's problem: no data pointers, the preference's workspace."""
    out = {n: heuristic[n] for n in INT_NAMES if n in heuristic}
    out.update(dict.fromkeys(POINTERS, 0), workspace_size=heuristic["max_workspace"])
    return out


# Constants and functions of the check expressions (each function has a C twin pvb_<name>, tools/gen_cublaslt_c.py).
CONSTANTS: dict[str, int] = {
    **blas.CONSTANTS, "COL": ORDER_COL, "ROW": ORDER_ROW, "PM_HOST": POINTER_MODE_HOST,
    "PM_DEVICE": POINTER_MODE_DEVICE, "FILL_FULL": FILL_MODE_FULL, "EPI_DEFAULT": EPILOGUE_DEFAULT,
    "RELU_LD": RELU_MASK_LD_MULTIPLE, "GELU_LD": GELU_AUX_LD_MULTIPLE,
}


def _epi(e: int, key: str) -> str:
    p = EPILOGUE.get(e)
    return getattr(p, key) if p else ""


def epi_known(e: int) -> int:
    return int(e in EPILOGUE)


def epi_bias_in(e: int) -> int:
    """The epilogue reads a bias vector (adds it)."""
    return int(_epi(e, "bias") == "add")


def epi_bias_out(e: int) -> int:
    """The epilogue writes a bias gradient: 1 of D's rows (DRELU/DGELU_BGRAD, BGRADA), 2 of D's columns (BGRADB)."""
    return {"rows": 1, "a": 1, "b": 2}.get(_epi(e, "bias"), 0)


def epi_bgrad(e: int) -> int:
    """The epilogue is a bias gradient of an operand: 1 of A (BGRADA), 2 of B (BGRADB)."""
    return {"a": 1, "b": 2}.get(_epi(e, "bias"), 0)


def epi_no_gpu_algorithm(e: int) -> str:
    """Why the emulated GPU has no algorithm for epilogue e (Epilogue.no_gpu_algorithm), or ""."""
    return _epi(e, "no_gpu_algorithm")


def epi_aux(e: int) -> int:
    """The epilogue's auxiliary matrix: 0 none, 1 a ReLU bit mask, 2 GELU inputs (in or out)."""
    if not _epi(e, "aux"):
        return 0
    return 1 if "relu" in _epi(e, "act") else 2


def multiple_of(x: int, q: int) -> int:
    """x is a non-negative multiple of q."""
    return int(x >= 0 and x % q == 0)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **blas.FUNCTIONS, "epi_known": epi_known, "epi_bias_in": epi_bias_in, "epi_bias_out": epi_bias_out,
    "epi_bgrad": epi_bgrad, "epi_aux": epi_aux, "multiple_of": multiple_of,
}

# Derived names the expressions use: the problem's m, n, k and op(A)/op(B)'s shapes.
DERIVED: dict[str, blas.Expr] = {
    "m": "Drows", "n": "Dcols",
    "opArows": "Arows if transa == OP_N else Acols", "k": "Acols if transa == OP_N else Arows",
    "opBrows": "Brows if transb == OP_N else Bcols", "opBcols": "Bcols if transb == OP_N else Brows",
    "scale_of_types": "gemm_scale_type(Atype, Btype, Ctype, compute)",
    "bias_dtype": "Dtype if bias_type == -1 else bias_type",
    "aux_dtype": "Dtype if aux_type == -1 else aux_type",
}

_C = blas.Check
S_INV, S_NS = "CUBLAS_STATUS_INVALID_VALUE", "CUBLAS_STATUS_NOT_SUPPORTED"


def _layout_checks(x: str) -> tuple[blas.Check, ...]:
    return (
        _C(f"{x}order != COL and {x}order != ROW", S_NS, f"{x}desc: only column- and row-major orders"),
        _C(f"{x}rows < 0 or {x}cols < 0", S_INV, f"{x}desc: rows/cols beyond int64"),
        _C(f"{x}ld < max(1, {x}rows if {x}order == COL else {x}cols)", S_INV,
           f"{x}desc: leading dimension below max(1, rows (column-major) / cols (row-major))"),
        _C(f"{x}batch < 1", S_INV, f"{x}desc: batch count < 1"),
    )


CHECKS: tuple[blas.Check, ...] = (
    _C("pmode != PM_HOST and pmode != PM_DEVICE", S_NS, "pointer mode: only host and device scalars"),
    _C("(transa != OP_N and transa != OP_T and transa != OP_C) or (transb != OP_N and transb != OP_T and "
       "transb != OP_C)", S_INV, "transa/transb is not a cublasOperation_t"),
    _C("transc != OP_N", S_NS, "TRANSC: only CUBLAS_OP_N"),
    _C("fill != FILL_FULL", S_NS, "FILL_MODE: only CUBLAS_FILL_MODE_FULL"),
    _C("scale_of_types < 0 or scale != scale_of_types", S_NS, "type/compute/scale combination"),
    _C("Dtype != Ctype", S_NS, "Dtype differs from Ctype"),
    *_layout_checks("A"), *_layout_checks("B"), *_layout_checks("C"), *_layout_checks("D"),
    _C("Crows != Drows or Ccols != Dcols", S_INV, "C and D shapes differ"),
    _C("opArows != m or opBcols != n or opBrows != k", S_INV, "op(A) op(B) is not m x n (inner sizes differ)"),
    _C("Abatch != Dbatch or Bbatch != Dbatch or Cbatch != Dbatch", S_INV, "batch counts differ"),
    _C("C == D and C != 0 and (Cld != Dld or Corder != Dorder or Cstride != Dstride)", S_INV,
       "in place (C == D) needs Cdesc equal to Ddesc"),
    _C("epi_known(epilogue) == 0", S_NS, "epilogue"),
    _C("epilogue != EPI_DEFAULT and is_complex(Dtype)", S_NS, "epilogues of complex matrices"),
    _C("(epi_bias_in(epilogue) or epi_bias_out(epilogue)) and bias == 0", S_INV, "the epilogue needs BIAS_POINTER"),
    _C("(epi_bias_in(epilogue) or epi_bias_out(epilogue)) and bias_dtype != Dtype and "
       "(epi_bias_out(epilogue) or bias_dtype != Atype or Dtype != CUDA_R_32F)", S_NS,
       "bias type: D's (or A's 16-bit type under a 32-bit D)"),
    # NVIDIA's cuBLASLt 13.1 refuses these in its heuristic ("CUBLASLT_EPILOGUE_BGRADA only works with
    # non-transposed A", "... BGRADB only works with transposed B"): its log, seen on the chain (docs/frameworks.md)
    _C("epi_bgrad(epilogue) == 1 and transa != OP_N", S_NS, "BGRADA only with non-transposed A"),
    _C("epi_bgrad(epilogue) == 2 and transb == OP_N", S_NS, "BGRADB only with transposed B"),
    _C("epi_aux(epilogue) and aux == 0", S_INV, "the epilogue needs EPILOGUE_AUX_POINTER"),
    _C("epi_aux(epilogue) and aux_ld < m", S_INV, "EPILOGUE_AUX_LD below D's rows"),
    _C("epi_aux(epilogue) == 1 and (multiple_of(aux_ld, RELU_LD) == 0 or multiple_of(aux_stride, RELU_LD) == 0)",
       S_INV, "a ReLU bit mask's leading dimension and batch stride are multiples of 128"),
    _C("epi_aux(epilogue) == 2 and (multiple_of(aux_ld, GELU_LD) == 0 or multiple_of(aux_stride, GELU_LD) == 0)",
       S_INV, "a GELU input matrix's leading dimension and batch stride are multiples of 8"),
    _C("epi_aux(epilogue) == 2 and aux_dtype != Dtype", S_NS, "GELU input type: D's"),
)
WORK: blas.Expr = "Dbatch * m * n * max(k, 1)"      # multiply-adds of one call (the emulated device's budget)


def derived(values: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, expr in DERIVED.items():
        out[name] = blas.evaluate(expr, {**values, **out}, CONSTANTS, FUNCTIONS)
    return out


def check(values: Mapping[str, int]) -> blas.Failure | None:
    """The first failing check of a matmul, or None. `values`: every int argument of LT_MATMUL by name (scalars
    are not needed: their pointer being non-NULL was checked by the caller)."""
    env = {**values, **derived(values)}
    for c in CHECKS:
        if blas.evaluate(c.expr, env, CONSTANTS, FUNCTIONS):
            return blas.Failure(blas.STATUS[c.status], c.why)
    return None


def work(values: Mapping[str, int]) -> int:
    return int(blas.evaluate(WORK, {**values, **derived(values)}, CONSTANTS, FUNCTIONS))


def scale_size(values: Mapping[str, int]) -> int:
    """Bytes of one alpha/beta value in host pointer mode (the scale type's element)."""
    t = blas.DTYPE_BY_VALUE.get(values["scale"])
    return t.size if t else 0


def impl_flags(compute: int, atype: int) -> int:
    """cublasLtNumericalImplFlags_t of pyvgpu's algorithm for these types (what IMPL_MASK preferences filter):
    fused multiply-adds, accumulated in the compute type's precision, inputs of A's type."""
    name = next((n for n, v in blas.COMPUTE.items() if v == compute), "")
    acc = "ACCUMULATOR_16F" if name.startswith("CUBLAS_COMPUTE_16F") else \
        "ACCUMULATOR_64F" if name.startswith("CUBLAS_COMPUTE_64F") else "ACCUMULATOR_32F"
    t = blas.DTYPE_BY_VALUE.get(atype)
    inp = {"CUDA_R_16F": "INPUT_16F", "CUDA_R_16BF": "INPUT_16BF", "CUDA_R_64F": "INPUT_64F",
           "CUDA_C_64F": "INPUT_64F"}.get(t.name if t else "", "INPUT_32F")
    return NUMERICAL_IMPL["FMA"] | NUMERICAL_IMPL[acc] | NUMERICAL_IMPL[inp]


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--wire":
        print(wire_args())
        return 0
    print("usage: python -m pyvgpu.cublaslt_spec --wire", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
