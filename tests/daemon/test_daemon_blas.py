"""cuBLAS ops through a daemon (emulated GPU), spoken with the Python protocol client: handles live in the session,
family ops with scalars and results in both pointer modes, statuses as cudaError_t on the wire, deferred errors of
fire-and-forget calls, sticky faults, and the cleanup of handles with the session."""
from __future__ import annotations

import time

import numpy as np

from pyvgpu import cublas_spec as spec
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME

E = ERROR_CODES
HOST, DEVICE = spec.POINTER_MODE_HOST, spec.POINTER_MODE_DEVICE


def ok(c: Client, op: str, *args, payload=b""):
    err, result, data = c.call(op, *args, payload=payload)
    assert err == 0, f"{op}: error {err}"
    return result, data


def put(c: Client, arr: np.ndarray) -> int:
    ptr, _ = ok(c, "MALLOC", 0, arr.nbytes)
    ok(c, "MEMCPY_HTOD", 0, ptr, 0, payload=arr.tobytes(order="F"))
    return ptr


def get(c: Client, ptr: int, shape, dtype) -> np.ndarray:
    _, data = ok(c, "MEMCPY_DTOH", 0, ptr, int(np.prod(shape)) * np.dtype(dtype).itemsize, 0)
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F")


def blas(c: Client, entry: str, handle: int, pmode: int = HOST, reply: bool = True, stream: int = 0,
         ilp64: bool = False, **args):
    """One family op as libvcublas sends it for `entry` (its bound arguments plus these)."""
    e = spec.ENTRY[entry]
    full = {**e.binding(ilp64), **args}
    names = OP_BY_NAME[e.family.name].arg_names
    values = {"dev": 0, "handle": handle, "stream": stream, "pmode": pmode, "math": 0, **full}
    return c.call(e.family.name, *(values[n] for n in names), reply=reply)


def f32(v) -> bytes:
    return np.float32(v).tobytes()


def addr(p: int) -> bytes:
    return int(p).to_bytes(8, "little")


def test_sgemm_host_and_device_scalars(client):
    h, _ = ok(client, "BLAS_CREATE", 0)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    pa, pb = put(client, a), put(client, b)
    pc = put(client, np.full((5, 4), np.nan, np.float32))
    args = dict(transa=0, transb=0, m=5, n=4, k=3, A=pa, lda=5, B=pb, ldb=3, C=pc, ldc=5)
    err, _, _ = blas(client, "cublasSgemm_v2", h, alpha=f32(2), beta=f32(0), **args)
    assert err == 0
    np.testing.assert_allclose(get(client, pc, (5, 4), np.float32), 2 * a @ b, rtol=1e-5, atol=1e-5)
    # device pointer mode: alpha, beta read from device memory at execution time, sent fire-and-forget
    palpha, pbeta = put(client, np.array([0.5], np.float32)), put(client, np.array([1.0], np.float32))
    blas(client, "cublasSgemm_v2", h, DEVICE, reply=False, alpha=addr(palpha), beta=addr(pbeta), **args)
    np.testing.assert_allclose(get(client, pc, (5, 4), np.float32), 2.5 * a @ b, rtol=1e-5, atol=1e-5)


def test_results_host_mode_in_reply_device_mode_in_memory(client):
    h, _ = ok(client, "BLAS_CREATE", 0)
    x = np.arange(1, 8, dtype=np.float64)
    px = put(client, x)
    err, result, payload = blas(client, "cublasDdot_v2", h, n=7, x=px, incx=1, y=px, incy=1, result=0)
    assert err == 0 and result is None and np.frombuffer(payload, np.float64)[0] == np.dot(x, x)
    pr = put(client, np.zeros(1, np.int64))
    err, _, payload = blas(client, "cublasIdamax_v2", h, DEVICE, ilp64=True, n=7, x=px, incx=1, result=pr)
    assert err == 0 and payload == b"" and get(client, pr, (1,), np.int64)[0] == 7
    err, _, payload = blas(client, "cublasIdamin_v2", h, n=7, x=px, incx=1, result=0)
    assert np.frombuffer(payload, np.int32)[0] == 1                 # int API: a 4-byte result


def test_refused_calls_are_cuda_errors_on_the_wire(client):
    h, _ = ok(client, "BLAS_CREATE", 0)
    p = put(client, np.zeros(16, np.float32))
    args = dict(transa=0, transb=0, m=4, n=4, k=4, alpha=f32(1), A=p, lda=3, B=p, ldb=4, beta=f32(0), C=p,
                ldc=4)
    err, _, _ = blas(client, "cublasSgemm_v2", h, **args)
    assert err == E["cudaErrorInvalidValue"] == spec.cuda_error_of_status(spec.INVALID_VALUE)
    err, _, _ = blas(client, "cublasGemmEx", h, **{**args, "lda": 4, "Atype": 0, "Btype": 0, "Ctype": 2,
                                                    "computeType": 68, "algo": -1})
    assert err == E["cudaErrorNotSupported"]
    err, _, _ = blas(client, "cublasSgemm_v2", 0xdead, **{**args, "lda": 4})
    assert err == E["cudaErrorInvalidResourceHandle"]              # unknown handle
    err, _, _ = blas(client, "cublasSgemm_v2", h, pmode=7, **{**args, "lda": 4})
    assert err == E["cudaErrorInvalidValue"]                       # pointer mode that is none
    err, _, _ = blas(client, "cublasSgemm_v2", h, DEVICE, **{**args, "lda": 4, "alpha": b"\x01\x02"})
    assert err == E["cudaErrorInvalidValue"]                       # a device address is 8 bytes


def test_fire_and_forget_failure_is_deferred_and_fault_is_sticky(client):
    h, _ = ok(client, "BLAS_CREATE", 0)
    p = put(client, np.zeros(4, np.float32))
    blas(client, "cublasSscal_v2", h, reply=False, n=-1, alpha=f32(2), x=p, incx=0)     # fine: quick return
    blas(client, "cublasSgemv_v2", h, reply=False, trans=0, m=2, n=2, alpha=f32(1), A=p, lda=2, x=p, incx=0,
         beta=f32(0), y=p, incy=1)                                 # incx == 0: refused
    err, _, _ = client.call("DEVICE_SYNC", 0)
    assert err == E["cudaErrorInvalidValue"]
    ok(client, "DEVICE_SYNC", 0)                                   # reported once
    blas(client, "cublasSaxpy_v2", h, reply=False, n=100, alpha=f32(1), x=p, incx=1, y=p, incy=1)  # past the end
    err, _, _ = client.call("DEVICE_SYNC", 0)
    assert err == E["cudaErrorIllegalAddress"]
    err, _, _ = client.call("MEM_GET_INFO", 0)
    assert err == E["cudaErrorIllegalAddress"]                     # sticky, as a kernel fault
    ok(client, "DEVICE_RESET", 0)
    err, _, _ = blas(client, "cublasSscal_v2", h, n=1, alpha=f32(1), x=p, incx=1)
    assert err == E["cudaErrorInvalidResourceHandle"]              # the reset destroyed the handle


def test_handles_destroy_bound_and_die_with_the_session(daemon):
    with Client.connect("127.0.0.1", daemon.port) as c:
        hs = [ok(c, "BLAS_CREATE", 0)[0] for _ in range(3)]
        ok(c, "BLAS_SET_WORKSPACE", 0, hs[0], 0, 0)
        p = put(c, np.zeros(64, np.uint8))
        ok(c, "BLAS_SET_WORKSPACE", 0, hs[0], p, 64)
        err, _, _ = c.call("BLAS_SET_WORKSPACE", 0, hs[0], p, 65)
        assert err == E["cudaErrorInvalidValue"]                   # not memory of this session
        c.call("BLAS_DESTROY", 0, hs[1], reply=False)
        err, _, _ = c.call("BLAS_DESTROY", 0, hs[1])
        assert err == E["cudaErrorInvalidResourceHandle"]
        with Client.connect("127.0.0.1", daemon.port) as watcher:
            mine = [s for s in watcher.status()["sessions"] if s["id"] == c.session]
            assert mine[0]["devices"][0]["blas_handles"] == 2
    with Client.connect("127.0.0.1", daemon.port) as watcher:
        deadline = time.monotonic() + 10
        while any(s["devices"] for s in watcher.status()["sessions"] if s["id"] != watcher.session):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert "ops (" in daemon.log_text()


def test_handle_count_is_bounded(client):
    for _ in range(spec.MAX_HANDLES_PER_DEVICE):
        ok(client, "BLAS_CREATE", 0)
    err, _, _ = client.call("BLAS_CREATE", 0)
    assert err == E["cudaErrorMemoryAllocation"]      # libvcublas: CUBLAS_STATUS_ALLOC_FAILED
