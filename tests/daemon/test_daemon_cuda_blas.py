"""cuBLAS on the real-GPU backend without a GPU: backends/cublas_cuda.py drives a fake libcublas through cffi the
way it drives NVIDIA's (the same cdata arguments), over the fake driver of fake_driver.py whose device
memory is host memory, through the daemon's handlers (so the region checks against the session's memory apply).

Checked: which entry point a family call picks (typed, Ex, ILP64 or int), the order and values of its arguments,
host and device pointer mode for scalars and results, the handle's stream / pointer mode / math mode / workspace
set on the real handle only when they change, statuses mapped to cudaError_t, operands outside the session's
memory refused before the library is called, handles destroyed with the session.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

cffi = pytest.importorskip("cffi", reason="cffi is a test dependency")

from pyvgpu import cublas_spec as spec  # noqa: E402
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME  # noqa: E402
from pyvgpu_daemon.handlers import dispatch  # noqa: E402
from pyvgpu_daemon.backends.cublas_cuda import Cublas, cdef, pick_entry  # noqa: E402
from pyvgpu_daemon.backends.base import KernelDesc  # noqa: E402
from pyvgpu_daemon.backends.cuda import CudaBackend  # noqa: E402
from pyvgpu_daemon.errors import CudaError  # noqa: E402
from pyvgpu_daemon.session import DeviceState, Session, release_device  # noqa: E402
from fake_driver import FakeDriver  # noqa: E402

E = ERROR_CODES
H16, F32 = spec.DTYPE["CUDA_R_16F"].value, spec.DTYPE["CUDA_R_32F"].value


def addr(ffi, p) -> int:
    return int(ffi.cast("uintptr_t", p))


def mem(address: int, count: int, dtype) -> np.ndarray:
    """The fake device's memory at an address (host memory) as an array."""
    nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype)


class FakeCublas:
    """A few cuBLAS routines with cuBLAS's semantics over the fake device memory; every call is recorded."""

    def __init__(self, ffi) -> None:
        self.ffi = ffi
        self.calls: list[tuple[str, dict]] = []
        self.state: dict[int, dict] = {}
        self.status = 0                     # what the next routine answers
        self.next = 0x5000

    # ------------------------------------------------------------------ handles
    def cublasCreate_v2(self, out):
        self.next += 16
        out[0] = self.ffi.cast("void *", self.next)
        self.state[self.next] = {"stream": 0, "pmode": 0, "math": 0, "workspace": (0, 0), "sets": []}
        return 0

    def _h(self, h) -> dict:
        return self.state[addr(self.ffi, h)]

    def cublasDestroy_v2(self, h):
        del self.state[addr(self.ffi, h)]
        return 0

    def cublasSetStream_v2(self, h, s):
        st = self._h(h)
        st.update(stream=addr(self.ffi, s), workspace=(0, 0))    # as cuBLAS: back to its own workspace
        st["sets"].append("stream")
        return 0

    def cublasSetPointerMode_v2(self, h, mode):
        self._h(h).update(pmode=mode)
        self._h(h)["sets"].append("pmode")
        return 0

    def cublasSetMathMode(self, h, mode):
        self._h(h).update(math=mode)
        self._h(h)["sets"].append("math")
        return 0

    def cublasSetWorkspace_v2(self, h, ws, size):
        self._h(h).update(workspace=(addr(self.ffi, ws), size))
        self._h(h)["sets"].append("workspace")
        return 0

    # ------------------------------------------------------------------ routines
    def _scalar(self, h, p, dtype) -> float:
        if self._h(h)["pmode"] == spec.POINTER_MODE_DEVICE:
            return float(mem(addr(self.ffi, p), 1, dtype)[0])
        return float(np.frombuffer(self.ffi.buffer(p, np.dtype(dtype).itemsize), dtype=dtype)[0])

    def _record(self, name: str, params: dict) -> int:
        self.calls.append((name, params))
        return self.status

    def cublasSgemm_v2_64(self, h, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
        st = self._record("cublasSgemm_v2_64", dict(transa=transa, transb=transb, m=m, n=n, k=k, lda=lda, ldb=ldb,
                                                    ldc=ldc))
        if st:
            return st
        a = mem(addr(self.ffi, A), lda * k, np.float32).reshape(k, lda).T[:m]        # transa == N here
        b = mem(addr(self.ffi, B), ldb * n, np.float32).reshape(n, ldb).T[:k]
        c = mem(addr(self.ffi, C), ldc * n, np.float32).reshape(n, ldc).T[:m]
        al, be = self._scalar(h, alpha, np.float32), self._scalar(h, beta, np.float32)
        c[...] = al * a @ b + (be * c if be else 0)
        return 0

    def cublasGemmStridedBatchedEx_64(self, h, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype,
                                      ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo):
        return self._record("cublasGemmStridedBatchedEx_64",
                            dict(Atype=Atype, Btype=Btype, Ctype=Ctype, computeType=computeType, algo=algo,
                                 strideA=strideA, strideB=strideB, strideC=strideC, batchCount=batchCount,
                                 alpha=self._scalar(h, alpha, np.float32)))

    def cublasSdot_v2_64(self, h, n, x, incx, y, incy, result):
        self._record("cublasSdot_v2_64", dict(n=n, incx=incx, incy=incy))
        xs = mem(addr(self.ffi, x), n * incx, np.float32)[::incx]
        ys = mem(addr(self.ffi, y), n * incy, np.float32)[::incy]
        value = np.float32(np.dot(xs, ys))
        if self._h(h)["pmode"] == spec.POINTER_MODE_DEVICE:
            mem(addr(self.ffi, result), 1, np.float32)[0] = value
        else:
            self.ffi.buffer(result, 4)[:] = value.tobytes()
        return 0

    def cublasIsamax_v2(self, h, n, x, incx, result):
        self._record("cublasIsamax_v2", dict(n=n, incx=incx))
        xs = mem(addr(self.ffi, x), n * incx, np.float32)[::incx]
        self.ffi.buffer(result, 4)[:] = np.int32(np.argmax(np.abs(xs)) + 1).tobytes()
        return 0


class FakeSolvers(FakeCublas):
    """The batched solvers' entry points (int API only, a host info pointer): the call is recorded."""

    def cublasSgetrsBatched(self, h, trans, n, nrhs, Aarray, lda, devIpiv, Barray, ldb, info, batchSize):
        info[0] = 0
        return self._record("cublasSgetrsBatched", dict(trans=trans, n=n, nrhs=nrhs, lda=lda, ldb=ldb,
                                                        batchSize=batchSize, ipiv=addr(self.ffi, devIpiv)))


class Daemonless:
    """The daemon's handler layer for one session on the fake GPU, with a fake library (`fake`): cuBLAS's unless
    another is given with the backend's keyword for it and its loader class (test_daemon_cuda_blaslt.py's)."""

    def __init__(self, fake_class: type = FakeCublas, keyword: str = "cublas", loader: type = Cublas) -> None:
        self.ffi = cffi.FFI()
        self.fake = fake_class(self.ffi)
        self.backend = CudaBackend(driver=FakeDriver(), **{keyword: loader(lib=self.fake, ffi=self.ffi)})
        self.session = Session(1, "test", self.backend, 1)
        self.st = DeviceState(0, None)       # type: ignore[arg-type]  (no worker: ops run inline here)

    def op(self, name: str, *args, payload: bytes = b""):
        out = dispatch.execute(self.session, self.st, self.backend, OP_BY_NAME[name], [0, *args], payload, False)
        return out.err, out.result, out.payload

    def put(self, arr: np.ndarray) -> int:
        err, p, _ = self.op("MALLOC", arr.nbytes)
        assert err == 0
        assert self.op("MEMCPY_HTOD", p, 0, payload=arr.tobytes(order="F"))[0] == 0
        return p

    def blas(self, entry: str, handle: int, pmode: int = 0, ilp64: bool = False, stream: int = 0, math: int = 0,
             **args):
        e = spec.ENTRY[entry]
        values = {"handle": handle, "stream": stream, "pmode": pmode, "math": math, **e.binding(ilp64), **args}
        return self.op(e.family.name, *(values[n] for n in OP_BY_NAME[e.family.name].arg_names[1:]))


def f32(v) -> bytes:
    return np.float32(v).tobytes()


def test_cdef_declares_every_entry_point_cffi_accepts():
    ffi = cffi.FFI()
    ffi.cdef(cdef())                          # a wrong declaration would fail here
    assert "cublasGemmBatchedEx_64" in cdef() and "cublasIsamin_v2(" in cdef()


def test_entry_choice():
    gemm = {**spec.ENTRY["cublasHgemm"].binding(), "batchCount": 1}
    assert pick_entry(spec.GEMM, gemm) == (spec.ENTRY["cublasHgemm"], True)
    batched = {**spec.ENTRY["cublasGemmStridedBatchedEx"].binding(), "Atype": H16, "Btype": H16, "Ctype": F32,
               "computeType": spec.COMPUTE["CUBLAS_COMPUTE_32F"], "algo": -1, "strideA": 0, "strideB": 0,
               "strideC": 0, "batchCount": 4}
    assert pick_entry(spec.GEMM, batched) == (spec.ENTRY["cublasGemmStridedBatchedEx"], True)
    iamax32 = {**spec.ENTRY["cublasIsamax_v2"].binding(False)}
    assert pick_entry(spec.IAMAX, iamax32) == (spec.ENTRY["cublasIsamax_v2"], False)


def test_sgemm_scalars_state_and_results_through_the_fake_library():
    d = Daemonless()
    err, h, _ = d.op("BLAS_CREATE")
    assert err == 0
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    pa, pb, pc = d.put(a), d.put(b), d.put(np.zeros((4, 5), np.float32))
    gemm = dict(transa=0, transb=0, m=4, n=5, k=3, A=pa, lda=4, B=pb, ldb=3, C=pc, ldc=4)
    assert d.blas("cublasSgemm_v2", h, alpha=f32(2), beta=f32(0), **gemm)[0] == 0
    c = mem(pc, 20, np.float32).reshape(5, 4).T
    np.testing.assert_allclose(c, 2 * a @ b, rtol=1e-6)
    assert d.fake.calls[-1] == ("cublasSgemm_v2_64", dict(transa=0, transb=0, m=4, n=5, k=3, lda=4, ldb=3, ldc=4))
    (state,) = d.fake.state.values()
    assert state["sets"] == []                                # host mode, default stream, default math: unchanged
    # device pointer mode and a math mode: set on the real handle once, then left alone
    ps = d.put(np.array([1.0, 1.0], np.float32))
    dev_scalars = dict(alpha=ps.to_bytes(8, "little"), beta=(ps + 4).to_bytes(8, "little"))
    for _ in range(2):
        assert d.blas("cublasSgemm_v2", h, 1, math=3, **dev_scalars, **gemm)[0] == 0
    assert state["sets"] == ["pmode", "math"] and state["pmode"] == 1 and state["math"] == 3
    np.testing.assert_allclose(mem(pc, 20, np.float32).reshape(5, 4).T, 4 * a @ b, rtol=1e-5)
    # results: host mode comes back as the reply's payload, device mode lands in device memory
    x = d.put(np.arange(1, 9, dtype=np.float32))
    err, _, payload = d.blas("cublasSdot_v2", h, n=4, x=x, incx=2, y=x, incy=2, result=0, ilp64=True)
    assert err == 0 and np.frombuffer(payload, np.float32)[0] == 1 + 9 + 25 + 49
    r = d.put(np.zeros(1, np.float32))
    assert d.blas("cublasSdot_v2", h, 1, n=8, x=x, incx=1, y=x, incy=1, result=r)[2] == b""
    assert mem(r, 1, np.float32)[0] == 204
    err, _, payload = d.blas("cublasIsamax_v2", h, n=8, x=x, incx=1, result=0)   # int API: the int entry
    assert err == 0 and np.frombuffer(payload, np.int32)[0] == 8 and d.fake.calls[-1][0] == "cublasIsamax_v2"


def test_stream_workspace_and_ex_entry():
    d = Daemonless()
    h = d.op("BLAS_CREATE")[1]
    s = 0x7777
    d.st.streams[s] = 0xABC0                   # a backend stream object (cuda-python's convert to their value)
    ws = d.put(np.zeros(256, np.uint8))
    assert d.op("BLAS_SET_WORKSPACE", h, ws, 256)[0] == 0
    pa = d.put(np.zeros(64, np.float16))
    pc = d.put(np.zeros(64, np.float32))
    args = dict(transa=0, transb=0, m=4, n=4, k=4, alpha=f32(1.5), A=pa, Atype=H16, lda=4, strideA=16, B=pa,
                Btype=H16, ldb=4, strideB=16, beta=f32(0), C=pc, Ctype=F32, ldc=4, strideC=16, batchCount=2,
                computeType=spec.COMPUTE["CUBLAS_COMPUTE_32F"], algo=-1)
    assert d.blas("cublasGemmStridedBatchedEx", h, stream=s, **args)[0] == 0
    (state,) = d.fake.state.values()
    assert state["stream"] == 0xABC0 and state["workspace"] == (ws, 256)   # re-applied after the stream change
    assert state["sets"] == ["workspace", "stream", "workspace"]
    name, got = d.fake.calls[-1]
    assert name == "cublasGemmStridedBatchedEx_64"
    assert got == dict(Atype=H16, Btype=H16, Ctype=F32, computeType=68, algo=-1, strideA=16, strideB=16,
                       strideC=16, batchCount=2, alpha=1.5)


def test_regions_checked_before_the_library_and_statuses_mapped():
    d = Daemonless()
    h = d.op("BLAS_CREATE")[1]
    p = d.put(np.zeros(16, np.float32))
    gemm = dict(transa=0, transb=0, m=4, n=4, k=4, alpha=f32(1), A=p, lda=4, B=p, ldb=4, beta=f32(0), C=p, ldc=4)
    calls = len(d.fake.calls)
    assert d.blas("cublasSgemm_v2", h, **{**gemm, "ldc": 5})[0] == E["cudaErrorInvalidValue"]   # C past the end
    assert d.blas("cublasSgemm_v2", h, **{**gemm, "B": 0x1000})[0] == E["cudaErrorInvalidValue"]  # not ours
    assert d.blas("cublasSgemm_v2", h, 1, **{**gemm, "alpha": (p + 64).to_bytes(8, "little"),
                                             "beta": p.to_bytes(8, "little")})[0] == E["cudaErrorInvalidValue"]
    assert len(d.fake.calls) == calls                         # none of them reached the library
    d.fake.status = spec.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"]
    assert d.blas("cublasSgemm_v2", h, **gemm)[0] == E["cudaErrorLaunchOutOfResources"]
    d.fake.status = spec.NOT_SUPPORTED
    assert d.blas("cublasSgemm_v2", h, **gemm)[0] == E["cudaErrorNotSupported"]


def test_batched_solver_entry_without_ilp64_twin_and_host_info():
    d = Daemonless()
    d.fake = FakeSolvers(d.ffi)
    d.backend.cublas = d.backend.cublas.__class__(lib=d.fake, ffi=cffi.FFI())
    h = d.op("BLAS_CREATE")[1]
    a = d.put(np.eye(2, dtype=np.float32))
    arr = d.put(np.array([a], np.uint64))
    args = dict(trans=0, n=2, nrhs=2, Aarray=arr, lda=2, devIpiv=0, Barray=arr, ldb=2, batchSize=1)
    assert d.blas("cublasSgetrsBatched", h, **args)[0] == 0
    assert d.fake.calls[-1] == ("cublasSgetrsBatched", dict(trans=0, n=2, nrhs=2, lda=2, ldb=2, batchSize=1,
                                                            ipiv=0))
    assert d.blas("cublasSgetrsBatched", h, **{**args, "Barray": arr + 8})[0] == E["cudaErrorInvalidValue"]


def test_handles_die_with_the_session():
    d = Daemonless()
    for _ in range(3):
        d.op("BLAS_CREATE")
    assert len(d.fake.state) == 3
    release_device(d.session, d.st)
    assert d.fake.state == {} and d.st.blas_handles == {}


def test_cluster_attributes_cublas_sets_reach_the_driver():
    """cuBLAS's cublasCreate sets CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED on a kernel of an H100 (GPU run
    3: libvcuda refused it and cublasCreate answered CUBLAS_STATUS_INTERNAL_ERROR where NVIDIA's cuBLAS runs over
    pyvgpu's driver): the cluster attributes of FUNC_SET_ATTR go to the driver's cuFuncSetAttribute under their own
    CU_FUNC_ATTRIBUTE_* numbers and are recorded on the kernel; the driver's refusal comes back as the op's error, and
    an attribute that is not settable (CLUSTER_SIZE_MUST_BE_SET, 10) never reaches the driver."""
    drv = FakeDriver()
    ctx = CudaBackend(driver=drv).open_context(0, 1 << 40, 1)
    k = KernelDesc("gemm", [], handle=77)
    for attr, value in ((14, 1), (15, 2), (11, 2), (12, 1), (13, 1)):
        ctx.func_set_attr(None, k, attr, value)
    assert drv.func_attrs == [(77, 14, 1), (77, 15, 2), (77, 11, 2), (77, 12, 1), (77, 13, 1)]
    assert k.attrs == {"non_portable_cluster_size_allowed": 1, "cluster_scheduling_policy_preference": 2,
                       "required_cluster_width": 2, "required_cluster_height": 1, "required_cluster_depth": 1}
    with pytest.raises(CudaError) as exc:
        ctx.func_set_attr(None, k, 10, 1)
    assert exc.value.code == E["cudaErrorInvalidValue"] and len(drv.func_attrs) == 5
