"""cuBLAS of a real GPU for the cuda backend: NVIDIA's libcublas.so.13 (the nvidia-cublas wheel, found and loaded by
backends/nvidia_libs.py) through cffi.

A family call (pyvgpu/cublas_spec.py) is made through the most specific entry point of the table whose bound
arguments match it (cublasSgemm_v2_64 for a plain fp32 GEMM, cublasGemmStridedBatchedEx_64 for a batched fp16 one,
...), in its ILP64 form since the wire carries 64-bit sizes (amax/amin with an int result use the int form), with
its arguments in the order `cublas_spec.c_params` gives: the table that generated the client's entry points also
lays out this call, so the two cannot disagree on an argument's place or type.

The handle's stream, pointer mode and math mode are set on the real handle before a call when they differ from
the last call's (cublasSetStream resets the workspace, so a workspace the client set is applied again). Host-mode
scalars are passed as pointers to their bytes; a host-mode result is written to a host buffer whose bytes are the
reply (real cuBLAS blocks until it is there). Statuses other than success raise BlasError.

cuBLAS runs in the CUDA context current on the calling thread: the (session, device) worker's own context
(backends/cuda.py). The library object and the cffi module are injectable for tests without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.backends import nvidia_libs
from pyvgpu_daemon.blas import BlasError

# C types of the table's prototypes as cffi declares them (the ABI is what matters: enums are ints, every
# element pointer is a pointer).
_CFFI_TYPE = {"cublasHandle_t": "void *", "int": "int", "int64_t": "int64_t", "long long int": "long long",
              "cudaDataType": "int", "cublasComputeType_t": "int", "cublasGemmAlgo_t": "int"}
HANDLE_CDEF = """
int cublasCreate_v2(void **handle);
int cublasDestroy_v2(void *handle);
int cublasSetStream_v2(void *handle, void *stream);
int cublasSetPointerMode_v2(void *handle, int mode);
int cublasSetMathMode(void *handle, int mode);
int cublasSetWorkspace_v2(void *handle, void *workspace, size_t size);
"""


def _cffi_type(ctype: str) -> str:
    if "*" in ctype:
        return "void *"
    return _CFFI_TYPE.get(ctype, "int")        # the cublas*_t enums


def _variants() -> list[tuple[spec.Entry, bool]]:
    return [(e, ilp64) for e in spec.ENTRIES for ilp64 in reversed(e.widths())]


def cdef() -> str:
    """cffi declarations of every entry point a family call may use (both API widths)."""
    lines = [HANDLE_CDEF]
    for e, ilp64 in _variants():
        params = ", ".join(f"{_cffi_type(t)} {n}" for t, n in spec.c_params(e, ilp64))
        lines.append(f"int {e.name64 if ilp64 else e.name}({params});")
    return "\n".join(lines)


def pick_entry(fam: spec.Family, args: dict[str, Any]) -> tuple[spec.Entry, bool]:
    """The most specific (entry, ilp64) whose bound arguments equal the call's; the ILP64 form when both fit."""
    best: tuple[spec.Entry, bool] | None = None
    for e, ilp64 in _variants():
        if e.family is not fam or any(args.get(k) != v for k, v in e.binding(ilp64).items()):
            continue
        if best is None or (len(e.bind), ilp64) > (len(best[0].bind), best[1]):
            best = (e, ilp64)
    if best is None:
        raise BlasError(spec.NOT_SUPPORTED, f"{fam.name}: no cuBLAS entry point takes {args}")
    return best


@dataclass
class RealHandle:
    ptr: Any                       # cublasHandle_t (cffi void *)
    stream: int = 0
    pmode: int = spec.POINTER_MODE_HOST
    math: int = 0
    workspace: tuple[int, int] = (0, 0)


class Cublas:
    """One loaded libcublas.so.13 (per daemon process)."""

    def __init__(self, lib: Any = None, ffi: Any = None) -> None:
        if ffi is None:
            import cffi
            ffi = cffi.FFI()
        self.ffi = ffi
        ffi.cdef(cdef())
        self.lib = lib if lib is not None else nvidia_libs.load(ffi, nvidia_libs.CUBLAS)[0]

    def _check(self, status: int, what: str) -> None:
        if status != spec.SUCCESS:
            raise BlasError(int(status), what)

    # ------------------------------------------------------------------ handles
    def create(self) -> RealHandle:
        out = self.ffi.new("void **")
        self._check(self.lib.cublasCreate_v2(out), "cublasCreate")
        return RealHandle(out[0])

    def destroy(self, h: RealHandle) -> None:
        self._check(self.lib.cublasDestroy_v2(h.ptr), "cublasDestroy")

    def set_workspace(self, h: RealHandle, ptr: int, size: int) -> None:
        self._check(self.lib.cublasSetWorkspace_v2(h.ptr, self.ffi.cast("void *", ptr), size),
                    "cublasSetWorkspace")
        h.workspace = (ptr, size)

    def _state(self, h: RealHandle, stream: int, pmode: int, math: int) -> None:
        if stream != h.stream:
            self._check(self.lib.cublasSetStream_v2(h.ptr, self.ffi.cast("void *", stream)), "cublasSetStream")
            h.stream = stream
            if h.workspace != (0, 0):       # cublasSetStream went back to the library's own workspace
                self.set_workspace(h, *h.workspace)
        if pmode != h.pmode:
            self._check(self.lib.cublasSetPointerMode_v2(h.ptr, pmode), "cublasSetPointerMode")
            h.pmode = pmode
        if math != h.math:
            self._check(self.lib.cublasSetMathMode(h.ptr, math), "cublasSetMathMode")
            h.math = math

    # ------------------------------------------------------------------ calls
    def call(self, h: RealHandle, family: str, stream: int, pmode: int, math: int,
             args: dict[str, Any]) -> bytes | None:
        fam = spec.FAMILY[family]
        entry, ilp64 = pick_entry(fam, args)
        values = {k: (1 if v is None or isinstance(v, bytes) else v) for k, v in args.items()}
        types = {**values, **spec.derived(fam, values)}
        self._state(h, stream, pmode, math)
        ffi = self.ffi
        c_args: list[Any] = []
        result: tuple[Any, int] | None = None
        for ctype, name in spec.c_params(entry, ilp64):
            if name == "handle":
                c_args.append(h.ptr)
                continue
            arg = fam.arg(name)
            if isinstance(arg, spec.HostInfo):
                c_args.append(ffi.new("int *"))       # the client validated the arguments already
                continue
            v = args[name]
            if isinstance(arg, spec.Scalar) and isinstance(v, bytes):
                c_args.append(ffi.new("char[]", v))                  # host pointer mode: the value's bytes
            elif isinstance(arg, spec.Result) and v is None:
                size = spec.DTYPE_BY_VALUE[types[arg.dtype]].size
                buf = ffi.new("char[]", size)
                result = (buf, size)
                c_args.append(buf)
            elif "*" in ctype:
                c_args.append(ffi.cast("void *", v))
            else:
                c_args.append(v)
        name = entry.name64 if ilp64 else entry.name
        self._check(getattr(self.lib, name)(*c_args), name)
        return bytes(ffi.buffer(*result)) if result else None


_LOADED = nvidia_libs.Loaded(Cublas)


def library() -> Cublas:
    """The process's libcublas (loaded on first use: a daemon without cuBLAS clients never loads it)."""
    return _LOADED.get()


def stream_pointer(stream: Any) -> int:
    """A backend stream (cuda-python CUstream, None for the default stream) as the pointer cuBLAS takes."""
    if stream is None:
        return 0
    return int(stream)          # cuda-python handle types convert to the handle's value
