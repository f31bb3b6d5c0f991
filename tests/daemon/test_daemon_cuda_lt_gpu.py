"""Real GPU: LT_MATMUL on NVIDIA's cuBLASLt (a `--backend cuda` daemon) against the emulated GPU's (an emu daemon),
the same bytes in and out, for every epilogue of pyvgpu/cublaslt_spec.py in fp32, fp16 and bf16 with fp32 compute.

It settles, on a GPU, what the emulation assumed from NVIDIA's documentation alone: the ReLU bit mask's layout
(bit i of column j at bit i + j * ld, least significant bit first), GELU as the tanh approximation, where the bias
is added, which values the bias gradients sum (BGRADA/BGRADB: op(A)/op(B) over k, not scaled by alpha; the
DRELU/DGELU gradients: the rows of the new D), batch strides of bias and auxiliary matrices. Without a GPU it
skips (scripts/gpu-check.sh runs it: tools/gpu_check.py lists it among the GPU tests).

Which configurations must get an algorithm. Each epilogue is tried in the configurations NVIDIA's rules allow (the
base one; for those with a bias gradient also both transposes, 1 and 2 batch entries, odd and aligned sizes, less
what NVIDIA refuses by rule: BGRADB "only works with transposed B", BGRADA "only with non-transposed A", which the
table enforces on every backend, GPU run 1 on an H200 answering 801 for them). "NVIDIA's library offers no
algorithm" is an answer only for the documented refusals, the epilogues cublaslt_spec.EPILOGUES marks
no_gpu_algorithm (DRELU_BGRAD and DGELU_BGRAD: no algorithm in any of their 16 configurations in any type, GPU runs 2
and 3, H200 and H100): there the real GPU must refuse every configuration, by NVIDIA's heuristic itself (its
refusal in the daemon's log), and LT_MATMUL with it (801); a configuration it runs fails the test (the emulation
should then offer it again). Every configuration of every other epilogue must get an algorithm from NVIDIA's
heuristic and agree with the emulation: a heuristic forwarding that breaks (an attribute set wrong, a layout lost)
reads as "no algorithm" and fails here, naming the configuration and NVIDIA's words. GPU run 3 (H100, cuBLASLt 13.1,
17:31 UTC) passed every epilogue in every type under the looser rule (at least one configuration run): that settles
the epilogues tried in their base configuration alone (all but the four with a bias gradient); the 8 configurations
each of BGRADA and BGRADB are asserted one by one from this version on.

Tolerance between the two: 8 x (the output type's rounding + (k + 8) float32 roundings) x max(1, |value|); mask
bits must agree wherever the pre-activation is farther from 0 than that tolerance.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

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
ERR_NOT_SUPPORTED = 801
# How backends/cublaslt_cuda.py words a refusal by NVIDIA's heuristic itself (the problem reached the library, which
# answered a failing status or no result); any other "no algorithm" is pyvgpu's forwarding failing.
NVIDIA_REFUSALS = ("cublasLtMatmulAlgoGetHeuristic refused the problem", "NVIDIA's cuBLASLt heuristic has no algorithm")


@dataclass(frozen=True)
class Config:
    """One configuration of a problem: transposes, batch entries, sizes."""
    transa: int = 0
    transb: int = 0
    batch: int = 2
    m: int = 37
    n: int = 9
    k: int = 13

    def __str__(self) -> str:
        return f"op(A) {'NT'[self.transa]} op(B) {'NT'[self.transb]} batch {self.batch} m {self.m} n {self.n} k {self.k}"


def configs(name: str) -> list[Config]:
    """The base configuration (NVIDIA's rule for BGRADA/BGRADB applied) and, for the epilogues with a bias gradient,
    every transpose the rules allow, with 1 and 2 batch entries, at odd and at aligned sizes."""
    bgrad = spec.epi_bgrad(EPI[name])
    base = Config(transb=int(bgrad == 2))
    if not spec.epi_bias_out(EPI[name]):
        return [base]
    out = [base]
    for ta, tb, batch, (m, n, k) in itertools.product((0, 1), (0, 1), (2, 1), ((37, 9, 13), (64, 32, 16))):
        c = Config(ta, tb, batch, m, n, k)
        if c not in out and not (bgrad == 1 and ta) and not (bgrad == 2 and not tb):
            out.append(c)
    return out


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
        self.daemon = daemon
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

    def why(self, op: str) -> str:
        """The daemon's last log line about op (its reason for a refusal)."""
        lines = [ln for ln in self.daemon.log_text().splitlines() if op in ln]
        return lines[-1].split(": ", 1)[-1] if lines else f"(no {op} line in the daemon's log)"

    def place(self, buffers: dict[str, bytes], args: dict) -> dict:
        """The buffers uploaded; the call's arguments with their pointers (D is C: in place)."""
        ptrs = {name: self.put(raw) for name, raw in buffers.items()}
        return {**args, **ptrs, "D": ptrs["C"]}

    def algorithms(self, full: dict) -> int:
        """LT_HEURISTIC: how many algorithms the backend has for the placed problem."""
        q = {**full, "max_workspace": full["workspace_size"], "dev": 0,
             **{f"align_{x.lower()}": 256 for x in spec.MATRICES}}
        err, res, _ = self.c.call("LT_HEURISTIC", *(q[n] for n in OP_BY_NAME["LT_HEURISTIC"].arg_names))
        assert err == 0, (err, self.why("LT_HEURISTIC"))
        return int(res[0])

    def run(self, buffers: dict[str, bytes], full: dict) -> tuple[int, dict[str, bytes]]:
        """LT_MATMUL on the placed problem: (its error, the outputs read back)."""
        names = OP_BY_NAME["LT_MATMUL"].arg_names
        err, _, _ = self.c.call("LT_MATMUL", *({"dev": 0, "stream": 0, **full}[n] for n in names))
        if err:
            return err, {}
        return 0, {name: self.get(full[name], len(raw)) for name, raw in buffers.items()
                   if name in ("C", "bias", "aux")}


def problem(name: str, t: int, rng, cfg: Config = Config()) -> tuple[dict[str, bytes], dict]:
    epi = spec.EPILOGUE[EPI[name]]
    m, n, k, batch = cfg.m, cfg.n, cfg.k, cfg.batch
    shapes = {"A": (k, m) if cfg.transa else (m, k), "B": (n, k) if cfg.transb else (k, n), "C": (m, n), "D": (m, n)}
    strides = {"A": m * k + 3, "B": k * n + 5, "C": m * n + 7}
    strides["D"] = strides["C"]
    a, b, c = (rng.standard_normal(strides[x] * batch) for x in "ABC")
    buffers = {"A": enc(a, t).tobytes(), "B": enc(b, t).tobytes(), "C": enc(c, t).tobytes()}
    args = {a_.field: a_.default for a_ in spec.DESC_WIRE}
    args.update(compute=68, scale=0, epilogue=EPI[name], alpha=np.float32(1.5).tobytes(), transa=cfg.transa,
                transb=cfg.transb, beta=np.float32(0.5).tobytes(), workspace=0, workspace_size=0)
    for x, (rows, cols) in shapes.items():
        args.update({x + "type": t, x + "order": 0, x + "rows": rows, x + "cols": cols, x + "ld": rows,
                     x + "batch": batch, x + "stride": strides[x] if batch > 1 else 0})
    if epi.bias:
        length = n if epi.bias == "b" else m
        buffers["bias"] = enc(rng.standard_normal((length + 2) * batch), t).tobytes()
        args["bias_stride"] = length + 2 if batch > 1 else 0
    aux = spec.epi_aux(EPI[name])
    if aux:
        ld = 128 if aux == 1 else (m + 7) // 8 * 8
        args.update(aux_ld=ld, aux_stride=ld * n if batch > 1 else 0)
        if aux == 1:
            buffers["aux"] = rng.integers(0, 256, ld * n * batch // 8, dtype=np.uint8).tobytes()
        else:
            buffers["aux"] = enc(rng.standard_normal(ld * n * batch), t).tobytes()
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
    real, emu = sides
    t, _, eps = TYPES[tname]
    offered = not spec.epi_no_gpu_algorithm(EPI[name])
    for cfg in configs(name):
        buffers, args = problem(name, t, np.random.default_rng(EPI[name]), cfg)
        on_real, on_emu = real.place(buffers, args), emu.place(buffers, args)
        assert emu.algorithms(on_emu) == int(offered), (str(cfg), emu.why("LT_HEURISTIC"))
        found = real.algorithms(on_real)
        if not offered:
            assert found == 0, \
                f"{cfg}: NVIDIA's cuBLASLt runs {name} on this GPU, which the emulation refuses (cublaslt_spec.EPILOGUES)"
            why = real.why("LT_HEURISTIC")
            this = f"op(A) {'NT'[cfg.transa]} op(B) {'NT'[cfg.transb]}, m {cfg.m} n {cfg.n} k {cfg.k}, batch {cfg.batch}"
            assert any(w in why for w in NVIDIA_REFUSALS) and this in why, \
                f"{cfg}: not NVIDIA's heuristic's refusal of this problem: {why}"
            assert emu.run(buffers, on_emu)[0] == ERR_NOT_SUPPORTED, str(cfg)
            assert real.run(buffers, on_real)[0] == ERR_NOT_SUPPORTED, str(cfg)
            continue
        assert found == 1, (f"{cfg}: no algorithm for {name} ({tname}) on a real GPU, where only the documented "
                            f"refusals may have none: {real.why('LT_HEURISTIC')}")
        (err_r, got_r), (err_e, got_e) = real.run(buffers, on_real), emu.run(buffers, on_emu)
        assert err_r == 0, f"{cfg}: the heuristic has an algorithm but LT_MATMUL answered {err_r}: {real.why('LT_MATMUL')}"
        assert err_e == 0, (str(cfg), emu.why("LT_MATMUL"))
        compare(name, t, eps, buffers, args, cfg, got_r, got_e)


def compare(name: str, t: int, eps: float, buffers: dict, args: dict, cfg: Config, real: dict, emu: dict) -> None:
    tol = lambda ref: 8 * (eps + (cfg.k + 8) * 2.0 ** -24) * max(1.0, float(np.abs(ref).max()))   # noqa: E731
    d_real, d_emu = dec(real["C"], t), dec(emu["C"], t)
    np.testing.assert_allclose(d_real, d_emu, rtol=0, atol=tol(d_emu), err_msg=f"{name} D {cfg}")
    if "bias" in buffers:
        b_real, b_emu = dec(real["bias"], t), dec(emu["bias"], t)
        np.testing.assert_allclose(b_real, b_emu, rtol=0, atol=tol(b_emu) * max(cfg.k, cfg.n),
                                   err_msg=f"{name} bias {cfg}")
    aux = spec.epi_aux(EPI[name])
    if aux == 2:
        np.testing.assert_allclose(dec(real["aux"], t), dec(emu["aux"], t), rtol=0, atol=tol(dec(emu["aux"], t)),
                                   err_msg=f"{name} GELU input {cfg}")
    elif aux == 1 and spec.EPILOGUE[EPI[name]].aux == "out":
        bits_real = np.unpackbits(np.frombuffer(real["aux"], np.uint8), bitorder="little")
        bits_emu = np.unpackbits(np.frombuffer(emu["aux"], np.uint8), bitorder="little")
        pre = pre_activation(buffers, args, t, cfg)
        ld = args["aux_ld"]
        for i in range(cfg.batch):
            for j in range(cfg.n):
                lo = i * args["aux_stride"] + j * ld
                differ = bits_real[lo:lo + cfg.m] != bits_emu[lo:lo + cfg.m]
                assert not np.any(differ & (np.abs(pre[i][:, j]) > tol(pre))), (name, str(cfg), i, j)


def pre_activation(buffers: dict[str, bytes], args: dict, t: int, cfg: Config) -> list[np.ndarray]:
    """alpha op(A) op(B) + beta C + bias per batch entry, in float64 from the stored inputs."""
    a, b, c = (dec(buffers[x], t) for x in "ABC")
    bias = dec(buffers["bias"], t) if "bias" in buffers else None
    out = []
    for i in range(cfg.batch):
        mats = {}
        for x, v in (("A", a), ("B", b), ("C", c)):
            rows, cols = args[x + "rows"], args[x + "cols"]
            mats[x] = v[i * args[x + "stride"]:][:rows * cols].reshape(cols, rows).T
        ai = mats["A"].T if cfg.transa else mats["A"]
        bi = mats["B"].T if cfg.transb else mats["B"]
        x = 1.5 * ai @ bi + 0.5 * mats["C"]
        if bias is not None:
            x = x + bias[i * args["bias_stride"]:][:cfg.m][:, None]
        out.append(x)
    return out
