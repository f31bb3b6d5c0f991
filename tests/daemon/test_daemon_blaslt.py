"""LT_MATMUL through a daemon (emulated GPU), spoken with the Python protocol client: a matmul is one frame that
carries its descriptors' attributes (no cuBLASLt objects on the daemon), runs in order with the device's other
work, answers a refusal as its cudaError_t (deferred when sent fire-and-forget), and an operand outside the
session's memory is a sticky fault like a kernel's."""
from __future__ import annotations

import numpy as np

from pyvgpu import cublaslt_spec as spec
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME
from test_daemon_blas import get, put

E = ERROR_CODES
EPI = spec.ENUMS["cublasLtEpilogue_t"]
F32 = 0


def matmul_args(m: int, n: int, k: int, A: int, B: int, D: int, **over) -> dict:
    args = {a.field: a.default for a in spec.DESC_WIRE}
    args.update(compute=68, scale=F32)
    for x, (rows, cols, ptr) in {"A": (m, k, A), "B": (k, n, B), "C": (m, n, D), "D": (m, n, D)}.items():
        args.update({x + "type": F32, x + "order": 0, x + "rows": rows, x + "cols": cols, x + "ld": rows,
                     x + "batch": 1, x + "stride": 0, x: ptr})
    args.update(alpha=np.float32(1).tobytes(), beta=np.float32(0).tobytes(), workspace=0, workspace_size=0)
    args.update(over)
    return args


def lt(c: Client, args: dict, reply: bool = True):
    names = OP_BY_NAME["LT_MATMUL"].arg_names
    values = {"dev": 0, "stream": 0, **args}
    return c.call("LT_MATMUL", *(values[n] for n in names), reply=reply)


def test_matmul_with_bias_and_gelu(client):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    pa, pb, pbias = put(client, a), put(client, b), put(client, bias)
    pd = put(client, np.full((6, 5), np.nan, np.float32))
    err, _, _ = lt(client, matmul_args(6, 5, 4, pa, pb, pd, epilogue=EPI["CUBLASLT_EPILOGUE_GELU_BIAS"],
                                       bias=pbias, alpha=np.float32(0.5).tobytes()))
    assert err == 0
    x = 0.5 * a.astype(np.float64) @ b + bias[:, None]
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(get(client, pd, (6, 5), np.float32), want, rtol=0, atol=1e-5)


def test_refusals_are_deferred_to_the_next_synchronizing_op(client):
    pa = put(client, np.zeros((4, 4), np.float32))
    bad = matmul_args(4, 4, 4, pa, pa, pa, Aorder=2)                 # COL32: not offered
    assert lt(client, bad, reply=False) == (0, None, b"")           # sent, nobody waited
    err, _, _ = client.call("DEVICE_SYNC", 0)
    assert err == E["cudaErrorNotSupported"]
    assert client.call("DEVICE_SYNC", 0)[0] == 0                     # not sticky
    err, _, _ = lt(client, matmul_args(4, 4, 4, pa, pa, pa, Brows=3))   # inner sizes differ
    assert err == E["cudaErrorInvalidValue"]
    err, _, _ = lt(client, matmul_args(4, 4, 4, pa, pa, pa, pmode=1))   # device mode: 8-byte addresses
    assert err == E["cudaErrorInvalidValue"]
    err, _, _ = lt(client, matmul_args(4, 4, 4, pa, pa, pa, alpha=b"\0" * 8))   # host mode: the scale type's size
    assert err == E["cudaErrorInvalidValue"]


def test_operand_outside_the_session_is_a_sticky_fault(client):
    pa = put(client, np.ones((4, 4), np.float32))
    lt(client, matmul_args(4, 4, 4, pa, pa + (1 << 20), pa), reply=False)
    err, _, _ = client.call("DEVICE_SYNC", 0)
    assert err == E["cudaErrorIllegalAddress"]
    assert client.call("DEVICE_SYNC", 0)[0] == E["cudaErrorIllegalAddress"]


def heuristic_args(args: dict, **prefs) -> list:
    values = {"dev": 0, **args, "max_workspace": 0, "align_a": 256, "align_b": 256, "align_c": 256, "align_d": 256,
              **prefs}
    return [values[n] for n in OP_BY_NAME["LT_HEURISTIC"].arg_names]


def test_heuristic_answers_by_the_table(client):
    args = matmul_args(4, 4, 4, 0, 0, 0)
    assert client.call("LT_HEURISTIC", *heuristic_args(args)) == (0, [1, 0], b"")     # one algorithm, no workspace
    assert client.call("LT_HEURISTIC", *heuristic_args({**args, "Aorder": 2}))[0] == E["cudaErrorNotSupported"]
    assert client.call("LT_HEURISTIC", *heuristic_args({**args, "Brows": 3}))[0] == E["cudaErrorInvalidValue"]
    assert client.call("LT_HEURISTIC", *heuristic_args(args, align_b=12))[0] == E["cudaErrorInvalidValue"]


def test_no_algorithm_for_what_nvidias_library_refuses_on_gpus(client, daemon):
    """DRELU_BGRAD and DGELU_BGRAD: the table accepts them, NumPy could compute them, but NVIDIA's cuBLASLt found no
    algorithm for them on an H100 and an H200 (cublaslt_spec.EPILOGUES): the emulated GPU offers none either (the
    heuristic answers 0 algorithms, the matmul cudaErrorNotSupported, the log says why), while DRELU alone runs."""
    pa = put(client, np.ones((8, 8), np.float32))
    paux, pbias = put(client, np.zeros(128 * 8 // 32, np.uint32)), put(client, np.zeros(8, np.float32))
    for name in ("CUBLASLT_EPILOGUE_DRELU_BGRAD", "CUBLASLT_EPILOGUE_DGELU_BGRAD"):
        aux_ld = 128 if "DRELU" in name else 8
        args = matmul_args(8, 8, 8, pa, pa, pa, epilogue=EPI[name], bias=pbias, aux=paux, aux_ld=aux_ld)
        assert spec.check({n: args[n] for n in spec.INT_NAMES}) is None        # a valid call
        assert client.call("LT_HEURISTIC", *heuristic_args(args)) == (0, [0, 0], b"")
        assert lt(client, args)[0] == E["cudaErrorNotSupported"]
        assert f"{name}: NVIDIA's cuBLASLt has no algorithm for it" in daemon.log_text()
    drelu = matmul_args(8, 8, 8, pa, pa, pa, epilogue=EPI["CUBLASLT_EPILOGUE_DRELU"], aux=paux, aux_ld=128)
    assert client.call("LT_HEURISTIC", *heuristic_args(drelu)) == (0, [1, 0], b"")
    assert lt(client, drelu)[0] == 0


def test_lt_matmul_is_fire_and_forget_device_work():
    spec_ = OP_BY_NAME["LT_MATMUL"]
    assert spec_.code == spec.OP_LT_MATMUL and 500 <= spec_.code <= 559
    assert spec_.flags & spec_.flags.ASYNC and not spec_.flags & spec_.flags.SYNC
    assert spec_.arg_names[:2] == ("dev", "stream") and spec_.arg_names[2:] == spec.MATMUL_NAMES
