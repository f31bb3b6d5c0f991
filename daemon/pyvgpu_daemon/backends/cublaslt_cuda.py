"""cuBLASLt of a real GPU for the cuda backend: NVIDIA's libcublasLt.so.13 (the nvidia-cublas wheel, found and loaded
by backends/nvidia_libs.py) through cffi.

An LT_MATMUL (pyvgpu/cublaslt_spec.py) becomes NVIDIA's descriptors, rebuilt from the call's attributes: a matmul
descriptor (created with the compute and scale types, then every other `wire` attribute that differs from its
default set with NVIDIA's own setter and size), four matrix layouts likewise, and an algorithm from NVIDIA's
heuristic for that problem, asked with the call's workspace size and the alignment of its pointers (what PyTorch
asks with: the default preference assumes 256-byte alignment). The client's algorithm is pyvgpu's own (it runs
whatever the daemon chooses), so the daemon chooses here.

A plan (descriptors, layouts, algorithm) is kept per problem in an LRU cache of the context (LtSession): a model
runs the same few shapes over and over, and a heuristic query costs more than the matmul of a small problem.
Only the pointer attributes (bias, auxiliary matrix) change between calls of one plan; they are set on the cached
descriptor before each call (one worker thread per context: no other call sees it meanwhile).

Every refusal says which call refused which problem, in NVIDIA's words where cuBLASLt gives them: its logger's
error messages (level 1, through a callback; e.g. "CUBLASLT_EPILOGUE_BGRADB only works with transposed B") are
kept per thread and joined to the status of the call that logged them. The distinct ends of a matmul: the library
cannot be loaded (CUBLAS_STATUS_NOT_INITIALIZED, nvidia_libs.py); an attribute NVIDIA rejects (its status, naming
the attribute and value); the heuristic refuses the problem (its status, NOT_SUPPORTED with NVIDIA's reason) or
answers no algorithm (NOT_SUPPORTED); cublasLtMatmul refuses the heuristic's algorithm (its status). A daemon whose
environment sets CUBLASLT_LOG_LEVEL or CUBLASLT_LOG_MASK gets NVIDIA's own log instead, and no reasons.

cuBLASLt runs in the CUDA context current on the calling thread: the (session, device) worker's own context. The
library object and the cffi module are injectable for tests without a GPU.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

from pyvgpu import cublaslt_spec as spec
from pyvgpu_daemon.backends import nvidia_libs
from pyvgpu_daemon.blas import BlasError

CDEF = """
int cublasLtCreate(void **handle);
int cublasLtDestroy(void *handle);
int cublasLtMatmulDescCreate(void **desc, int compute, int scale);
int cublasLtMatmulDescDestroy(void *desc);
int cublasLtMatmulDescSetAttribute(void *desc, int attr, const void *buf, size_t size);
int cublasLtMatrixLayoutCreate(void **layout, int type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutDestroy(void *layout);
int cublasLtMatrixLayoutSetAttribute(void *layout, int attr, const void *buf, size_t size);
int cublasLtMatmulPreferenceCreate(void **pref);
int cublasLtMatmulPreferenceDestroy(void *pref);
int cublasLtMatmulPreferenceSetAttribute(void *pref, int attr, const void *buf, size_t size);
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; int state; float wavesCount; int reserved[4]; }
    cublasLtMatmulHeuristicResult_t;
int cublasLtMatmulAlgoGetHeuristic(void *handle, void *desc, void *a, void *b, void *c, void *d, void *pref,
                                   int requested, cublasLtMatmulHeuristicResult_t *results, int *returned);
int cublasLtMatmul(void *handle, void *desc, const void *alpha, const void *A, void *Adesc, const void *B,
                   void *Bdesc, const void *beta, const void *C, void *Cdesc, void *D, void *Ddesc,
                   const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_size, void *stream);
int cublasLtLoggerSetCallback(void (*callback)(int level, const char *function, const char *message));
int cublasLtLoggerSetLevel(int level);
int cublasLtLoggerSetFile(void *file);
void *fopen(const char *path, const char *mode);
"""
_CFFI_TYPE = {"void*": "uint64_t"}            # attributes are set from their bytes: a pointer is its value
POINTER_FIELDS = ("bias", "aux")              # descriptor attributes that change from call to call of one plan
_PREF = {a.field: a.value for a in spec.PREF_ATTRS}
PLAN_CACHE = 64                               # plans kept per context
OWN_LOG = ("CUBLASLT_LOG_LEVEL", "CUBLASLT_LOG_MASK")   # the daemon's user asked cuBLASLt for its own log
_NAMES = {v: k for k, v in spec.ENUMS["cublasLtEpilogue_t"].items()}
_COMPUTE = {v: k for k, v in spec.blas.COMPUTE.items()}


def alignment(address: int) -> int:
    """The largest power of two up to 256 that divides address (PyTorch's rule for the alignment preferences)."""
    a = 256
    while address % a:
        a //= 2
    return a


def describe(args: Mapping[str, int]) -> str:
    """A matmul problem in a few words, for messages: epilogue, types, transposes, sizes, batch."""
    def t(v: int) -> str:
        d = spec.blas.DTYPE_BY_VALUE.get(v)
        return d.name.replace("CUDA_", "") if d else str(v)
    op = {0: "N", 1: "T", 2: "C"}
    m, n = args["Drows"], args["Dcols"]
    k = args["Acols"] if args["transa"] == 0 else args["Arows"]
    return (f"{_NAMES.get(args['epilogue'], args['epilogue']).replace('CUBLASLT_', '')}, "
            f"A/B/C/D {'/'.join(t(args[x + 'type']) for x in spec.MATRICES)}, "
            f"{_COMPUTE.get(args['compute'], args['compute']).replace('CUBLAS_', '')}, "
            f"op(A) {op.get(args['transa'], '?')} op(B) {op.get(args['transb'], '?')}, "
            f"m {m} n {n} k {k}, batch {args['Dbatch']}")


class CublasLt:
    """One loaded libcublasLt.so.13 (per daemon process)."""

    def __init__(self, lib: Any = None, ffi: Any = None) -> None:
        if ffi is None:
            import cffi
            ffi = cffi.FFI()
        self.ffi = ffi
        ffi.cdef(CDEF)
        self.lib = lib if lib is not None else nvidia_libs.load(ffi, nvidia_libs.CUBLASLT)[0]
        self._said = threading.local()          # .lines: cuBLASLt's error messages on this thread since the last call
        self._logger = self._listen()

    def _listen(self) -> Any:
        """cuBLASLt's error messages into the calling thread's `_said`, not onto the daemon's stderr (lines without a
        session): the callback (kept alive), or None."""
        if any(os.environ.get(v) for v in OWN_LOG):
            return None
        try:
            callback = self.ffi.callback("void(int, const char *, const char *)", self._on_log)
            if self.lib.cublasLtLoggerSetCallback(callback) != 0 or self.lib.cublasLtLoggerSetLevel(1) != 0:
                return None
            devnull = self.ffi.dlopen(None).fopen(b"/dev/null", b"w")
            if devnull != self.ffi.NULL:
                self.lib.cublasLtLoggerSetFile(devnull)
        except AttributeError:          # a library without the logger (a test's stand-in)
            return None
        return callback

    def _on_log(self, level: int, function: Any, message: Any) -> None:
        if message != self.ffi.NULL:
            lines = getattr(self._said, "lines", None) or []
            self._said.lines = [*lines[-3:], self.ffi.string(message).decode(errors="replace").strip()]

    def check(self, status: int, what: str, args: Mapping[str, int] | None = None) -> None:
        """BlasError(status) naming the call, the problem and cuBLASLt's own reasons, unless status is success."""
        said, self._said.lines = getattr(self._said, "lines", None), None
        if status != 0:
            problem = f" for {describe(args)}" if args is not None else ""
            words = " ".join(said or ())
            raise BlasError(int(status), f"{what}{problem}" + (f": cuBLASLt says \"{words}\"" if words else ""))

    def value(self, ctype: str, v: int) -> Any:
        return self.ffi.new(_CFFI_TYPE.get(ctype, ctype) + " *", v)


@dataclass
class Plan:
    desc: Any
    layouts: list[Any]
    algo: Any                       # cffi cublasLtMatmulAlgo_t *
    pointers: dict[str, int]        # the pointer attributes the descriptor holds now
    workspace: int = 0              # the bytes the algorithm needs


class LtSession:
    """A context's cuBLASLt: its handle and plans. Used from the context's worker thread only."""

    def __init__(self, lt: CublasLt) -> None:
        self.lt = lt
        out = lt.ffi.new("void **")
        lt.check(lt.lib.cublasLtCreate(out), "cublasLtCreate")
        self.handle = out[0]
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()

    def close(self) -> None:
        for plan in self.plans.values():
            self._destroy(plan)
        self.plans.clear()
        if self.handle is not None:
            self.lt.lib.cublasLtDestroy(self.handle)
            self.handle = None

    def _destroy(self, plan: Plan) -> None:
        lib = self.lt.lib
        lib.cublasLtMatmulDescDestroy(plan.desc)
        for layout in plan.layouts:
            lib.cublasLtMatrixLayoutDestroy(layout)

    # ------------------------------------------------------------------ plans
    def _key(self, args: dict[str, Any]) -> tuple:
        shape = tuple(args[n] for n in spec.INT_NAMES if n not in spec.POINTERS and n not in POINTER_FIELDS)
        aligns = tuple(alignment(args[p]) for p in ("A", "B", "C", "D"))
        return shape + aligns

    def _plan(self, args: dict[str, Any]) -> Plan:
        key = self._key(args)
        plan = self.plans.get(key)
        if plan is not None:
            self.plans.move_to_end(key)
            return plan
        plan = self._make(args)
        self.plans[key] = plan
        if len(self.plans) > PLAN_CACHE:
            self._destroy(self.plans.popitem(last=False)[1])
        return plan

    def _make(self, args: dict[str, Any]) -> Plan:
        lt, lib, ffi = self.lt, self.lt.lib, self.lt.ffi
        out = ffi.new("void **")
        lt.check(lib.cublasLtMatmulDescCreate(out, args["compute"], args["scale"]), "cublasLtMatmulDescCreate", args)
        desc = out[0]
        layouts: list[Any] = []
        plan = Plan(desc, layouts, ffi.new("cublasLtMatmulAlgo_t *"), {})
        try:
            for a in spec.DESC_WIRE:
                if a.field in ("compute", "scale") or args[a.field] == a.default:
                    continue
                lt.check(lib.cublasLtMatmulDescSetAttribute(desc, a.value, lt.value(a.ctype, args[a.field]), a.size),
                         f"cublasLtMatmulDescSetAttribute({a.name} = {args[a.field]})", args)
                if a.field in POINTER_FIELDS:
                    plan.pointers[a.field] = args[a.field]
            for x in spec.MATRICES:
                lt.check(lib.cublasLtMatrixLayoutCreate(out, args[x + "type"], args[x + "rows"], args[x + "cols"],
                                                        args[x + "ld"]), f"cublasLtMatrixLayoutCreate({x}desc)", args)
                layouts.append(out[0])
                for a in spec.LAYOUT_WIRE:
                    if isinstance(a.default, str) or args[x + a.field] == a.default:
                        continue
                    lt.check(lib.cublasLtMatrixLayoutSetAttribute(out[0], a.value, lt.value(a.ctype, args[x + a.field]),
                                                                  a.size),
                             f"cublasLtMatrixLayoutSetAttribute({x}desc {a.name} = {args[x + a.field]})", args)
            self._heuristic(plan, args)
        except BaseException:
            self._destroy(plan)
            raise
        return plan

    def _heuristic(self, plan: Plan, args: dict[str, Any]) -> None:
        lt, lib, ffi = self.lt, self.lt.lib, self.lt.ffi
        out = ffi.new("void **")
        lt.check(lib.cublasLtMatmulPreferenceCreate(out), "cublasLtMatmulPreferenceCreate")
        pref = out[0]
        try:
            settings = [("max_workspace", "uint64_t", args["workspace_size"])]
            settings += [(f"align_{x.lower()}", "uint32_t", alignment(args[x])) for x in spec.MATRICES]
            for field, ctype, v in settings:
                lt.check(lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF[field], lt.value(ctype, v),
                                                                  spec.CTYPE_SIZE[ctype]),
                         f"cublasLtMatmulPreferenceSetAttribute({field} = {v})", args)
            results = ffi.new("cublasLtMatmulHeuristicResult_t[1]")
            count = ffi.new("int *")
            lt.check(lib.cublasLtMatmulAlgoGetHeuristic(self.handle, plan.desc, *plan.layouts, pref, 1, results,
                                                        count), "cublasLtMatmulAlgoGetHeuristic refused the problem",
                     args)
            if count[0] < 1:
                raise BlasError(spec.blas.NOT_SUPPORTED, "NVIDIA's cuBLASLt heuristic has no algorithm for "
                                                         f"{describe(args)} (within workspace {args['workspace_size']})")
            plan.algo[0] = results[0].algo
            plan.workspace = int(results[0].workspaceSize)
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)

    def heuristic(self, problem: dict[str, int], aligns: tuple[int, int, int, int]) -> tuple[int, int]:
        """NVIDIA's heuristic for a problem whose pointers will have these alignments: its plan is made (and kept:
        the matmul that follows finds it, its pointers being as aligned as the caller said). No algorithm:
        BlasError(CUBLAS_STATUS_NOT_SUPPORTED) saying why (handlers/blaslt.py answers it as 0 algorithms)."""
        args = {**problem, **dict(zip(spec.MATRICES, aligns))}   # a pointer of alignment a: a itself
        return 1, self._plan(args).workspace

    # ------------------------------------------------------------------ the call
    def matmul(self, stream: int, args: dict[str, Any]) -> None:
        lt, lib, ffi = self.lt, self.lt.lib, self.lt.ffi
        plan = self._plan(args)
        for a in spec.DESC_WIRE:          # this call's bias / auxiliary pointers on the plan's descriptor
            if a.field in POINTER_FIELDS and plan.pointers.get(a.field, 0) != args[a.field]:
                lt.check(lib.cublasLtMatmulDescSetAttribute(plan.desc, a.value, lt.value(a.ctype, args[a.field]),
                                                            a.size),
                         f"cublasLtMatmulDescSetAttribute({a.name} = {args[a.field]:#x})", args)
                plan.pointers[a.field] = args[a.field]
        scalars = [ffi.new("char[]", args[s]) if isinstance(args[s], bytes) else ffi.cast("void *", args[s])
                   for s in spec.SCALARS]
        p = {x: ffi.cast("void *", args[x]) for x in spec.POINTERS}
        lt.check(lib.cublasLtMatmul(self.handle, plan.desc, scalars[0], p["A"], plan.layouts[0], p["B"],
                                    plan.layouts[1], scalars[1], p["C"], plan.layouts[2], p["D"], plan.layouts[3],
                                    plan.algo, p["workspace"], args["workspace_size"], ffi.cast("void *", stream)),
                 "cublasLtMatmul with the heuristic's algorithm", args)


_LOADED = nvidia_libs.Loaded(CublasLt)


def library() -> CublasLt:
    """The process's libcublasLt (loaded on first use: a daemon without cuBLASLt clients never loads it)."""
    return _LOADED.get()
