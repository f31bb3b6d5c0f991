"""Real GPU: LT_MATMUL on NVIDIA's cuBLASLt (a `--backend cuda` daemon) against the emulated GPU's (an emu daemon),
the same bytes in and out, for every epilogue of pyvgpu/cublaslt_spec.py in fp32, fp16 and bf16 with fp32 compute.

It settles, on a GPU, what the emulation assumed from NVIDIA's documentation alone: the ReLU bit mask's layout
(bit i of column j at bit i + j * ld, least significant bit first), GELU as the tanh approximation, where the bias
is added, which values the bias gradients sum (BGRADA/BGRADB: op(A)/op(B) over k, not scaled by alpha; the
DRELU/DGELU gradients: the rows of the new D), batch strides of bias and auxiliary matrices. Without a GPU it
skips (scripts/gpu-check.sh runs it: tools/gpu_check.py lists it among the GPU tests).

Tolerance between the two: 8 x (the output type's rounding + (k + 8) float32 roundings) x max(1, |value|); mask
bits must agree wherever the pre-activation is farther from 0 than that tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

from harness import start_daemon
from pyvgpu import cublaslt_spec as spec
from pyvgpu.client import Client
from pyvgpu.protocol import OP_BY_NAME
from pyvgpu_daemon.backends.cuda import probe

GPU_COUNT, NO_GPU_REASON = probe()
pytestmark = pytest.mark.skipif(GPU_COUNT == 0, reason=f"no CUDA GPU ({NO_GPU_REASON})")

EPI = spec.ENUMS["cublasLtEpilogue_t"]
TYPES = {"fp32": (0, np.float32, 2.0 ** -24), "fp16": (2, np.float16, 2.0 ** -11), "bf16": (14, np.uint16, 2.0 ** -8)}
M, N, K, BATCH = 37, 9, 13, 2


def enc(x: np.ndarray, t: int) -> np.ndarray:
    if t == 14:
        u = np.asarray(x, np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.asarray(x).astype(TYPES[{0: "fp32", 2: "fp16"}[t]][1])


def dec(raw: bytes, t: int) -> np.ndarray:
    if t == 14:
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.frombuffer(raw, {0: np.float32, 2: np.float16}[t]).astype(np.float64)


class Side:
    """One daemon's session: the same buffers uploaded, LT_MATMUL run, results read back."""

    def __init__(self, daemon) -> None:
        self.c = Client.connect("127.0.0.1", daemon.port)

    def put(self, raw: bytes) -> int:
        err, p, _ = self.c.call("MALLOC", 0, len(raw))
        assert err == 0
        assert self.c.call("MEMCPY_HTOD", 0, p, 0, payload=raw)[0] == 0
        return p

    def get(self, p: int, size: int) -> bytes:
        err, _, data = self.c.call("MEMCPY_DTOH", 0, p, size, 0)
        assert err == 0
        return data

    def run(self, buffers: dict[str, bytes], args: dict) -> dict[str, bytes]:
        ptrs = {name: self.put(raw) for name, raw in buffers.items()}
        full = {**args, **{n: ptrs[n] for n in ("A", "B", "C") if n in ptrs}, "D": ptrs["C"]}
        for n in ("bias", "aux"):
            if n in ptrs:
                full[n] = ptrs[n]
        names = OP_BY_NAME["LT_MATMUL"].arg_names
        err, _, _ = self.c.call("LT_MATMUL", *({"dev": 0, "stream": 0, **full}[n] for n in names))
        assert err == 0
        return {name: self.get(ptrs[name], len(raw)) for name, raw in buffers.items() if name in ("C", "bias", "aux")}


def problem(name: str, t: int, rng) -> tuple[dict[str, bytes], dict]:
    epi = spec.EPILOGUE[EPI[name]]
    sa, sb, sc = M * K + 3, K * N + 5, M * N + 7
    a, b, c = (rng.standard_normal(s * BATCH) for s in (sa, sb, sc))
    buffers = {"A": enc(a, t).tobytes(), "B": enc(b, t).tobytes(), "C": enc(c, t).tobytes()}
    args = {a_.field: a_.default for a_ in spec.DESC_WIRE}
    args.update(compute=68, scale=0, epilogue=EPI[name], alpha=np.float32(1.5).tobytes(),
                beta=np.float32(0.5).tobytes(), workspace=0, workspace_size=0)
    for x, (rows, cols, stride) in {"A": (M, K, sa), "B": (K, N, sb), "C": (M, N, sc), "D": (M, N, sc)}.items():
        args.update({x + "type": t, x + "order": 0, x + "rows": rows, x + "cols": cols, x + "ld": rows,
                     x + "batch": BATCH, x + "stride": stride})
    if epi.bias:
        length = N if epi.bias == "b" else M
        buffers["bias"] = enc(rng.standard_normal((length + 2) * BATCH), t).tobytes()
        args["bias_stride"] = length + 2
    aux = spec.epi_aux(EPI[name])
    if aux == 1:
        ld = 128
        args.update(aux_ld=ld, aux_stride=ld * N)
        buffers["aux"] = rng.integers(0, 256, ld * N * BATCH // 8, dtype=np.uint8).tobytes()
    elif aux == 2:
        ld = (M + 7) // 8 * 8
        args.update(aux_ld=ld, aux_stride=ld * N)
        buffers["aux"] = enc(rng.standard_normal(ld * N * BATCH), t).tobytes()
    return buffers, args


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """One cuda and one emu daemon for all the cases (starting daemons costs more than the matmuls)."""
    daemons = [start_daemon(tmp_path_factory.mktemp(b), backend=b) for b in ("cuda", "emu")]
    real, emu = Side(daemons[0]), Side(daemons[1])
    yield real, emu
    for side, d in zip((real, emu), daemons):
        side.c.close()
        d.stop()


@pytest.mark.parametrize("name", sorted(EPI, key=EPI.get))
@pytest.mark.parametrize("tname", list(TYPES))
def test_real_cublaslt_agrees_with_the_emulation(sides, name, tname):
    t, _, eps = TYPES[tname]
    buffers, args = problem(name, t, np.random.default_rng(EPI[name]))
    real, emu = (side.run(buffers, args) for side in sides)
    tol = lambda ref: 8 * (eps + (K + 8) * 2.0 ** -24) * max(1.0, float(np.abs(ref).max()))   # noqa: E731
    d_real, d_emu = dec(real["C"], t), dec(emu["C"], t)
    np.testing.assert_allclose(d_real, d_emu, rtol=0, atol=tol(d_emu), err_msg=f"{name} D")
    if "bias" in buffers:
        b_real, b_emu = dec(real["bias"], t), dec(emu["bias"], t)
        np.testing.assert_allclose(b_real, b_emu, rtol=0, atol=tol(b_emu) * max(K, N), err_msg=f"{name} bias")
    aux = spec.epi_aux(EPI[name])
    if aux == 2:
        np.testing.assert_allclose(dec(real["aux"], t), dec(emu["aux"], t), rtol=0, atol=tol(dec(emu["aux"], t)),
                                   err_msg=f"{name} GELU input")
    elif aux == 1 and spec.EPILOGUE[EPI[name]].aux == "out":
        bits_real = np.unpackbits(np.frombuffer(real["aux"], np.uint8), bitorder="little")
        bits_emu = np.unpackbits(np.frombuffer(emu["aux"], np.uint8), bitorder="little")
        pre = pre_activation(buffers, args, t)
        ld = args["aux_ld"]
        for i in range(BATCH):
            for j in range(N):
                lo = i * args["aux_stride"] + j * ld
                differ = bits_real[lo:lo + M] != bits_emu[lo:lo + M]
                assert not np.any(differ & (np.abs(pre[i][:, j]) > tol(pre))), (name, i, j)


def pre_activation(buffers: dict[str, bytes], args: dict, t: int) -> list[np.ndarray]:
    """alpha A B + beta C + bias per batch entry, in float64 from the stored inputs."""
    a, b, c = (dec(buffers[x], t) for x in "ABC")
    bias = dec(buffers["bias"], t) if "bias" in buffers else None
    out = []
    for i in range(BATCH):
        ai = a[i * args["Astride"]:][:M * K].reshape(K, M).T
        bi = b[i * args["Bstride"]:][:K * N].reshape(N, K).T
        ci = c[i * args["Cstride"]:][:M * N].reshape(N, M).T
        x = 1.5 * ai @ bi + 0.5 * ci
        if bias is not None:
            x = x + bias[i * args["bias_stride"]:][:M][:, None]
        out.append(x)
    return out
