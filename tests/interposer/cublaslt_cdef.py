"""cffi declarations of cuBLASLt as NVIDIA's cublasLt.h declares it: every function's prototype read from the
header of the pinned nvidia-cublas wheel (tools/cublas_wheel.read_prototypes), over the header's types written out
here for cffi (enums as ints; the opaque structs and the heuristic result with the header's layouts, which
test_cublaslt_spec.py compiles against the header), plus the few CUDA runtime calls the tests need."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import cublas_wheel  # noqa: E402

TYPES = """
typedef int cublasStatus_t;
typedef int cudaDataType, cudaDataType_t, cublasComputeType_t, libraryPropertyType;
typedef int cublasLtMatrixLayoutAttribute_t, cublasLtMatmulDescAttributes_t, cublasLtMatmulPreferenceAttributes_t,
    cublasLtMatmulAlgoCapAttributes_t, cublasLtMatmulAlgoConfigAttributes_t,
    cublasLtMatrixTransformDescAttributes_t, cublasLtEmulationDescAttributes_t;
typedef void *cudaStream_t;
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct { uint64_t data[14]; } cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct { uint64_t data[32]; } cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct { uint64_t data[8]; } cublasLtMatrixTransformDescOpaque_t;
typedef cublasLtMatrixTransformDescOpaque_t *cublasLtMatrixTransformDesc_t;
typedef struct { uint64_t data[12]; } cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtEmulationDescOpaque_t;
typedef cublasLtEmulationDescOpaque_t *cublasLtEmulationDesc_t;
typedef struct {
    cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef void (*cublasLtLoggerCallback_t)(int logLevel, const char *functionName, const char *message);
typedef struct _IO_FILE FILE;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaDeviceSynchronize(void);
int cudaStreamCreate(cudaStream_t *s);
int cudaSetDevice(int device);
"""
# Declared by cublasLt.h but not exported by NVIDIA's library (so not by libvcublasLt either).
NOT_EXPORTED = ("cublasLtDisableCpuInstructionsSetMask",)


def prototypes(include: Path) -> dict[str, cublas_wheel.Prototype]:
    return {n: p for n, p in cublas_wheel.read_prototypes(include, ("cublasLt.h",)).items() if n not in NOT_EXPORTED}


def cdef(include: Path) -> str:
    lines = [TYPES]
    for name, p in prototypes(include).items():
        params = ", ".join(f"{a.ctype} {a.name}" for a in p.params) or "void"
        lines.append(f"{p.ret} {name}({params});")
    return "\n".join(lines)
