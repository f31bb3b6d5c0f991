"""cuBLASLt on the real-GPU backend without a GPU: backends/cublaslt_cuda.py drives a fake libcublasLt through cffi
the way it drives NVIDIA's (the same cdata arguments), over the fake driver of test_daemon_cuda.py whose device
memory is host memory, through the daemon's LT_MATMUL handler (so the region checks against the session's memory
apply).

Checked: NVIDIA's descriptors rebuilt from the call (only attributes away from their defaults set, with their
sizes), the heuristic asked once per problem with the call's workspace and the pointers' alignments, the plan
reused (only the bias/auxiliary pointers set again when they change), host and device scalars, the fake's result
against NumPy, statuses mapped to cudaError_t, operands outside the session's memory refused before the library
is called, the handle and plans released with the context.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

cffi = pytest.importorskip("cffi", reason="cffi is a test dependency")

from pyvgpu import cublas_spec as blas  # noqa: E402
from pyvgpu import cublaslt_spec as spec  # noqa: E402
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME  # noqa: E402
from pyvgpu_daemon.backends.cublaslt_cuda import CDEF, CublasLt, alignment  # noqa: E402
from pyvgpu_daemon.session import release_device  # noqa: E402
from test_daemon_cuda_blas import Daemonless as BlasDaemonless  # noqa: E402

E = ERROR_CODES
EPI = spec.ENUMS["cublasLtEpilogue_t"]
DESC = {a.value: a for a in spec.DESC_ATTRS}
LAYOUT = {a.value: a for a in spec.LAYOUT_ATTRS}
PREF = {a.value: a for a in spec.PREF_ATTRS}


def mem(address: int, count: int, dtype) -> np.ndarray:
    nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype)


class FakeCublasLt:
    """libcublasLt's calls the backend makes, with cuBLASLt's semantics for fp32 column-major matmuls (bias and
    ReLU epilogues) over the fake device memory; every call is recorded."""

    def __init__(self, ffi) -> None:
        self.ffi = ffi
        self.objects: dict[int, dict] = {}
        self.calls: list[tuple[str, object]] = []
        self.next = 0x9000
        self.status = 0                 # what the next matmul answers
        self.algos = 1                  # how many algorithms the heuristic finds

    def _new(self, out, kind: str, **state) -> int:
        self.next += 16
        self.objects[self.next] = {"kind": kind, **state}
        out[0] = self.ffi.cast("void *", self.next)
        return 0

    def _obj(self, p) -> dict:
        return self.objects[int(self.ffi.cast("uintptr_t", p))]

    def _destroy(self, p) -> int:
        del self.objects[int(self.ffi.cast("uintptr_t", p))]
        return 0

    def _set(self, name: str, table: dict, p, attr, buf, size) -> int:
        a = table[attr]
        assert size == a.size, (a.name, size)
        raw = bytes(self.ffi.buffer(buf, size))
        value = np.frombuffer(raw, dtype={"float": np.float32}.get(a.ctype, {1: np.int8, 2: np.uint16, 4: np.int32,
                                                                              8: np.int64}[size]))[0]
        self._obj(p)[a.field] = value.item()
        self.calls.append((name, a.field))
        return 0

    def cublasLtCreate(self, out):
        return self._new(out, "handle")

    def cublasLtDestroy(self, h):
        return self._destroy(h)

    def cublasLtMatmulDescCreate(self, out, compute, scale):
        return self._new(out, "desc", compute=compute, scale=scale)

    def cublasLtMatmulDescDestroy(self, p):
        return self._destroy(p)

    def cublasLtMatmulDescSetAttribute(self, p, attr, buf, size):
        return self._set("desc", DESC, p, attr, buf, size)

    def cublasLtMatrixLayoutCreate(self, out, t, rows, cols, ld):
        return self._new(out, "layout", type=t, rows=rows, cols=cols, ld=ld)

    def cublasLtMatrixLayoutDestroy(self, p):
        return self._destroy(p)

    def cublasLtMatrixLayoutSetAttribute(self, p, attr, buf, size):
        return self._set("layout", LAYOUT, p, attr, buf, size)

    def cublasLtMatmulPreferenceCreate(self, out):
        return self._new(out, "pref")

    def cublasLtMatmulPreferenceDestroy(self, p):
        return self._destroy(p)

    def cublasLtMatmulPreferenceSetAttribute(self, p, attr, buf, size):
        return self._set("pref", PREF, p, attr, buf, size)

    def cublasLtMatmulAlgoGetHeuristic(self, h, desc, a, b, c, d, pref, requested, results, returned):
        self.calls.append(("heuristic", dict(self._obj(pref))))
        returned[0] = min(requested, self.algos)
        if returned[0]:
            results[0].algo.data[0] = 0xA160
            results[0].workspaceSize = 512
        return 0

    def cublasLtMatmul(self, h, desc, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, ws, ws_size, stream):
        ffi = self.ffi
        d = dict(self._obj(desc))
        self.calls.append(("matmul", dict(desc=d, algo=algo.data[0], ws=int(ffi.cast("uintptr_t", ws)),
                                          ws_size=ws_size, stream=int(ffi.cast("uintptr_t", stream)))))
        if self.status:
            return self.status
        lay = [self._obj(x) for x in (la, lb, lc, ld)]

        def scalar(p) -> float:
            if d.get("pmode", 0) == 1:
                return float(mem(int(ffi.cast("uintptr_t", p)), 1, np.float32)[0])
            return float(np.frombuffer(ffi.buffer(p, 4), np.float32)[0])

        def view(p, lo) -> np.ndarray:
            return mem(int(ffi.cast("uintptr_t", p)), lo["ld"] * lo["cols"], np.float32).reshape(
                lo["cols"], lo["ld"]).T[:lo["rows"]]

        a, b, c, out = (view(p, lo) for p, lo in zip((A, B, C, D), lay))
        a = a.T if d.get("transa", 0) else a
        b = b.T if d.get("transb", 0) else b
        x = scalar(alpha) * a.astype(np.float64) @ b + scalar(beta) * c
        if d.get("epilogue", 1) & 4:
            x = x + mem(d["bias"], x.shape[0], np.float32)[:, None]
        if d.get("epilogue", 1) & 2:
            x = np.maximum(x, 0)
        out[...] = x
        return 0


class Daemonless(BlasDaemonless):
    """The daemon's handler layer for one session on the fake GPU with the fake libcublasLt."""

    def __init__(self) -> None:
        super().__init__(FakeCublasLt, "cublaslt", CublasLt)

    def matmul(self, stream: int = 0, **args) -> int:
        values = {"stream": stream, **args}
        return self.op("LT_MATMUL", *(values[n] for n in OP_BY_NAME["LT_MATMUL"].arg_names[1:]))[0]


def problem(m: int, n: int, k: int, A: int, B: int, C: int, D: int, **over) -> dict:
    args = {a.field: a.default for a in spec.DESC_WIRE}
    args.update(compute=68, scale=0)
    for x, (rows, cols, ptr) in {"A": (m, k, A), "B": (k, n, B), "C": (m, n, C), "D": (m, n, D)}.items():
        args.update({x + "type": 0, x + "order": 0, x + "rows": rows, x + "cols": cols, x + "ld": rows,
                     x + "batch": 1, x + "stride": 0, x: ptr})
    args.update(alpha=np.float32(1).tobytes(), beta=np.float32(0).tobytes(), workspace=0, workspace_size=0)
    args.update(over)
    return args


def test_cdef_is_what_cffi_accepts():
    cffi.FFI().cdef(CDEF)
    assert alignment(0x1000) == 256 and alignment(0x1004) == 4 and alignment(0x1002) == 2


def test_descriptors_rebuilt_plan_reused_and_results():
    d = Daemonless()
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    bias1, bias2 = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    pa, pb, pd = d.put(a), d.put(b), d.put(np.zeros((4, 5), np.float32))
    pb1, pb2, ws = d.put(bias1), d.put(bias2), d.put(np.zeros(1024, np.uint8))
    args = problem(4, 5, 3, pa, pb, pd, pd, epilogue=EPI["CUBLASLT_EPILOGUE_RELU_BIAS"], bias=pb1,
                   alpha=np.float32(2).tobytes(), workspace=ws, workspace_size=1024)
    assert d.matmul(**args) == 0
    np.testing.assert_allclose(mem(pd, 20, np.float32).reshape(5, 4).T, np.maximum(2 * a @ b + bias1[:, None], 0),
                               rtol=1e-6, atol=1e-6)
    names = [c for c in d.fake.calls if c[0] != "matmul"]
    # only the attributes away from their defaults were set (epilogue and bias), no layout attribute at all
    assert [f for kind, f in names if kind == "desc"] == ["epilogue", "bias"]
    assert not [f for kind, f in names if kind == "layout"]
    (heur,) = [c[1] for c in d.fake.calls if c[0] == "heuristic"]
    assert heur["max_workspace"] == 1024
    assert {heur[f"align_{x}"] for x in "abcd"} <= {alignment(p) for p in (pa, pb, pd)}
    matmul = d.fake.calls[-1][1]
    assert matmul["algo"] == 0xA160 and matmul["ws"] == ws and matmul["ws_size"] == 1024
    # the same problem again with another bias: the plan is reused, only the bias pointer set again
    d.fake.calls.clear()
    assert d.matmul(**{**args, "bias": pb2}) == 0
    assert [c for c in d.fake.calls if c[0] != "matmul"] == [("desc", "bias")]
    np.testing.assert_allclose(mem(pd, 20, np.float32).reshape(5, 4).T, np.maximum(2 * a @ b + bias2[:, None], 0),
                               rtol=1e-6, atol=1e-6)
    # device-mode scalars and a transposed, batched problem: a new plan with those attributes
    ps = d.put(np.array([0.5, 0.0], np.float32))
    d.fake.calls.clear()
    dev_args = problem(4, 5, 3, pa, pb, pd, pd, pmode=1, alpha=ps.to_bytes(8, "little"),
                       beta=(ps + 4).to_bytes(8, "little"))
    assert d.matmul(**dev_args) == 0
    assert ("desc", "pmode") in d.fake.calls and sum(c[0] == "heuristic" for c in d.fake.calls) == 1
    np.testing.assert_allclose(mem(pd, 20, np.float32).reshape(5, 4).T, 0.5 * a @ b, rtol=1e-6, atol=1e-6)
    d.fake.calls.clear()
    batched = problem(4, 5, 3, pa, pb, pd, pd, Abatch=2, Bbatch=2, Cbatch=2, Dbatch=2, Astride=0, Bstride=0,
                      Cstride=0, Dstride=0)
    d.matmul(**batched)
    assert [f for kind, f in d.fake.calls if kind == "layout"] == ["batch"] * 4


def test_regions_checked_before_the_library_and_statuses_mapped():
    d = Daemonless()
    p = d.put(np.zeros(16, np.float32))
    ok = problem(4, 4, 4, p, p, p, p)
    calls = len(d.fake.calls)
    assert d.matmul(**{**ok, "Cld": 5, "Dld": 5}) == E["cudaErrorInvalidValue"]  # C = D past the allocation's end
    assert d.matmul(**{**ok, "B": 0x1000}) == E["cudaErrorInvalidValue"]           # not this session's memory
    assert d.matmul(**{**ok, "epilogue": EPI["CUBLASLT_EPILOGUE_BIAS"], "bias": p + 60}) == E["cudaErrorInvalidValue"]
    assert d.matmul(**{**ok, "pmode": 1, "alpha": (p + 64).to_bytes(8, "little"),
                       "beta": p.to_bytes(8, "little")}) == E["cudaErrorInvalidValue"]
    assert d.matmul(**{**ok, "workspace": p, "workspace_size": 65}) == E["cudaErrorInvalidValue"]
    assert d.matmul(**{**ok, "Aorder": 2}) == E["cudaErrorNotSupported"]           # the table's checks first
    assert len(d.fake.calls) == calls                          # none of them reached the library
    # beta == 0 in host mode: C is not read, so it may be NULL (PyTorch's scaled_gemm passes C = NULL)
    assert d.matmul(**{**ok, "C": 0}) == 0
    d.fake.status = blas.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"]
    assert d.matmul(**ok) == E["cudaErrorLaunchOutOfResources"]
    d.fake.status = 0
    d.fake.algos = 0                                           # NVIDIA's heuristic finds nothing
    assert d.matmul(**problem(2, 2, 2, p, p, p, p)) == E["cudaErrorNotSupported"]


def test_heuristic_makes_the_plan_the_matmul_uses():
    d = Daemonless()
    p = d.put(np.zeros(16, np.float32))
    args = problem(4, 4, 4, p, p, p, p, workspace=p, workspace_size=64)
    names = OP_BY_NAME["LT_HEURISTIC"].arg_names[1:]
    al = alignment(p)                               # as the caller's preference says (PyTorch: from its pointers)
    query = {**args, "max_workspace": 64, "align_a": al, "align_b": al, "align_c": al, "align_d": al}
    err, result, _ = d.op("LT_HEURISTIC", *(query[n] for n in names))
    assert (err, result) == (0, [1, 512])           # NVIDIA's answer: an algorithm and its workspace
    (heur,) = [c[1] for c in d.fake.calls if c[0] == "heuristic"]
    assert heur["max_workspace"] == 64 and heur["align_a"] == al
    assert d.matmul(**args) == 0
    assert sum(c[0] == "heuristic" for c in d.fake.calls) == 1        # the matmul found the plan
    d.fake.algos = 0
    other = {**query, "Drows": 2, "Crows": 2, "Arows": 2, "Dld": 2, "Cld": 2, "Ald": 2}
    assert d.op("LT_HEURISTIC", *(other[n] for n in names))[:2] == (0, [0, 0])   # none: PyTorch falls back


def test_handle_and_plans_released_with_the_context():
    d = Daemonless()
    p = d.put(np.zeros(16, np.float32))
    d.matmul(**problem(4, 4, 4, p, p, p, p))
    d.matmul(**problem(2, 2, 2, p, p, p, p))
    kinds = sorted(o["kind"] for o in d.fake.objects.values())
    assert kinds == ["desc", "desc", "handle"] + ["layout"] * 8       # preferences are destroyed at once
    release_device(d.session, d.st)
    assert d.fake.objects == {}
