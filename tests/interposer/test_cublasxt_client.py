"""cuBLASXt through NVIDIA's prototypes (cffi over cublasXt.h of the nvidia-cublas wheel), on two GPUs of two
daemons: GEMM in S/D/C/Z on host matrices (leading dimensions above the minimum, every transpose, beta over C and
beta == 0 over NaN), tiled with a small block dimension so both GPUs get tiles, against float64/complex128 NumPy
(tolerance 8 x (u + k u) x max(1, |C|) of the type); device-memory operands too; the handle and configuration calls
and their refusals."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pyvgpu

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parents[1] / "tools"))
import cublas_wheel  # noqa: E402

XT_TYPES = """
typedef struct cublasXtContext *cublasXtHandle_t;
typedef int cublasXtPinnedMemMode_t, cublasXtOpType_t, cublasXtBlasOp_t;
"""
NAMES = ["cublasXtCreate", "cublasXtDestroy", "cublasXtDeviceSelect", "cublasXtGetNumBoards", "cublasXtMaxBoards",
         "cublasXtSetBlockDim", "cublasXtGetBlockDim", "cublasXtGetPinningMemMode", "cublasXtSetPinningMemMode",
         "cublasXtSetCpuRatio", "cublasXtSetCpuRoutine", "cublasXtSgemm", "cublasXtDgemm", "cublasXtCgemm",
         "cublasXtZgemm", "cublasXtSsyrk"]

SCRIPT = r"""
import json, sys
import numpy as np
import cffi
ffi = cffi.FFI(); ffi.cdef(open(sys.argv[1]).read())
cudart = ffi.dlopen(sys.argv[2]); lib = ffi.dlopen(sys.argv[3])
o = {}
n_dev = ffi.new("int *"); cudart.cudaGetDeviceCount(n_dev)
o["devices"] = n_dev[0]
h = ffi.new("cublasXtHandle_t *")
o["create"] = lib.cublasXtCreate(h); H = h[0]
a_ = ffi.new("float *", 1.0)
o["before_select"] = lib.cublasXtSgemm(H, 0, 0, 1, 1, 1, a_, a_, 1, a_, 1, a_, a_, 1)
ids = ffi.new("int[2]", [0, 1]); bad = ffi.new("int[2]", [0, 5]); dup = ffi.new("int[2]", [1, 1])
boards = ffi.new("int *"); mx = ffi.new("int *")
o["select"] = [lib.cublasXtDeviceSelect(H, 2, bad), lib.cublasXtDeviceSelect(H, 2, dup),
               lib.cublasXtDeviceSelect(H, 0, ids), lib.cublasXtDeviceSelect(H, 2, ids)]
o["boards"] = [lib.cublasXtGetNumBoards(2, ids, boards), boards[0], lib.cublasXtMaxBoards(mx), mx[0]]
bd = ffi.new("int *")
o["block"] = [lib.cublasXtGetBlockDim(H, bd), bd[0], lib.cublasXtSetBlockDim(H, 0), lib.cublasXtSetBlockDim(H, 48),
              lib.cublasXtGetBlockDim(H, bd), bd[0]]
pm = ffi.new("int *")
o["pinning"] = [lib.cublasXtSetPinningMemMode(H, 1), lib.cublasXtGetPinningMemMode(H, pm), pm[0],
                lib.cublasXtSetPinningMemMode(H, 2)]
o["cpu"] = [lib.cublasXtSetCpuRatio(H, 0, 0, 0.0), lib.cublasXtSetCpuRatio(H, 0, 0, 1.5),
            lib.cublasXtSetCpuRoutine(H, 0, 0, ffi.NULL), lib.cublasXtSetCpuRoutine(H, 12, 0, ffi.NULL)]
T = {"S": (np.float32, 2.0 ** -24), "D": (np.float64, 2.0 ** -53), "C": (np.complex64, 2.0 ** -24),
     "Z": (np.complex128, 2.0 ** -53)}
CT = {"S": "float", "D": "double", "C": "cuComplex", "Z": "cuDoubleComplex"}
rng = np.random.default_rng(3)
def rand(shape, dt):
    x = rng.uniform(-1, 1, shape)
    if np.dtype(dt).kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dt)
def host(x, ld):                       # column-major with leading dimension ld (padding NaN)
    buf = np.full((x.shape[1], ld), np.nan, dtype=x.dtype)
    buf[:, :x.shape[0]] = x.T
    return buf
keep = []
def scalar(p, v):
    buf = ffi.from_buffer(np.array([v], dtype=T[p][0]))
    keep.append(buf)                       # a cast does not keep its source alive
    return ffi.cast(f"{CT[p]} *", buf)
def op(x, t):
    return x if t == 0 else (x.conj().T if t == 2 else x.T)
results = {}
for p in "SDCZ":
    dt, u = T[p]
    for ta, tb, beta in ((0, 0, 0.5), (1, 0, 0.0), (0, 1, -1.0), (2, 2, 1.0)):
        m, n, k = 101, 77, 130
        ar, ac = (m, k) if ta == 0 else (k, m)
        br, bc = (k, n) if tb == 0 else (n, k)
        A, B, C = rand((ar, ac), dt), rand((br, bc), dt), rand((m, n), dt)
        hA, hB, hC = host(A, ar + 3), host(B, br + 1), host(C, m + 2)
        if beta == 0:
            hC[:, :m] = np.nan                     # beta == 0: C is not read
        keep += [hA, hB, hC]
        alpha = 1.5 - (0.5j if p in "CZ" else 0)
        st = getattr(lib, f"cublasXt{p}gemm")(H, ta, tb, m, n, k, scalar(p, alpha),
                                                  ffi.cast(f"{CT[p]} *", ffi.from_buffer(hA)), ar + 3,
                                                  ffi.cast(f"{CT[p]} *", ffi.from_buffer(hB)), br + 1, scalar(p, beta),
                                                  ffi.cast(f"{CT[p]} *", ffi.from_buffer(hC)), m + 2)
        want = alpha * op(A.astype(complex), ta) @ op(B.astype(complex), tb) + beta * C
        got = hC[:, :m].T
        tol = 8 * (u + k * u) * max(1.0, float(np.abs(want).max()))
        results[f"{p}{ta}{tb}"] = [st, float(np.abs(got - want).max()), tol, bool(np.isnan(hC[:, m:]).all())]
o["gemm"] = results
# device-memory operands: A and B on GPU1, C in host memory
m = n = k = 64
A, B, C = rand((m, k), np.float32), rand((k, n), np.float32), np.zeros((n, m), np.float32)
dA = ffi.new("void **"); dB = ffi.new("void **")
cudart.cudaSetDevice(1)
cudart.cudaMalloc(dA, A.nbytes); cudart.cudaMalloc(dB, B.nbytes)
cudart.cudaMemcpy(dA[0], ffi.from_buffer(np.ascontiguousarray(A.T)), A.nbytes, 1)
cudart.cudaMemcpy(dB[0], ffi.from_buffer(np.ascontiguousarray(B.T)), B.nbytes, 1)
one = ffi.new("float *", 1.0); zero = ffi.new("float *", 0.0)
st = lib.cublasXtSgemm(H, 0, 0, m, n, k, one, dA[0], m, dB[0], k, zero, ffi.cast("float *", ffi.from_buffer(C)), m)
o["device_operands"] = [st, float(np.abs(C.T - A.astype(np.float64) @ B).max())]
o["refused"] = [lib.cublasXtSgemm(H, 3, 0, 2, 2, 2, one, one, 2, one, 2, one, ffi.cast("float *", 0), 2),
                lib.cublasXtSgemm(H, 0, 0, 4, 2, 2, one, one, 3, one, 2, one, ffi.cast("float *", 0), 4),
                lib.cublasXtSsyrk(H, 0, 0, 2, 2, one, one, 2, one, ffi.cast("float *", 0), 2)]
o["destroy"] = [lib.cublasXtDestroy(H), lib.cublasXtDestroy(H)]
print(json.dumps(o))
"""


@pytest.fixture(scope="module")
def cdef_file(cublas_include, tmp_path_factory):
    import cublas_cases
    protos = cublas_wheel.read_prototypes(cublas_include)
    path = tmp_path_factory.mktemp("xtcdef") / "cublasxt.cdef"
    path.write_text(cublas_cases.cdef(protos, []) + XT_TYPES + "int cudaGetDeviceCount(int *n);\n"
                    + "int cudaSetDevice(int d);\n"
                    + cublas_cases.cdef(protos, NAMES).replace(cublas_cases.CDEF_TYPES, ""))
    return path


def test_gemm_tiled_over_two_daemons(daemon_factory, cdef_file, tmp_path):
    daemons = [daemon_factory(), daemon_factory()]
    lib_dir = pyvgpu.lib_path().parent
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYVGPU_HOSTS", "LD_PRELOAD")},
           "XDG_CONFIG_HOME": str(tmp_path), "PYVGPU_HOSTS": ",".join(d.address for d in daemons),
           "PYVGPU_STATS": str(tmp_path / "stats.txt")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(cdef_file), str(lib_dir / "libvcudart.so"),
                           str(lib_dir / "libvcublas.so")], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    o = json.loads(proc.stdout.strip().splitlines()[-1])
    assert o["devices"] == 2 and o["create"] == 0
    assert o["before_select"] == 1                               # CUBLAS_STATUS_NOT_INITIALIZED
    assert o["select"] == [7, 7, 7, 0]
    assert o["boards"] == [0, 2, 0, 2]
    assert o["block"] == [0, 1024, 7, 0, 0, 48]
    assert o["pinning"] == [0, 0, 1, 7]
    assert o["cpu"] == [0, 7, 0, 7]
    assert len(o["gemm"]) == 16
    for name, (st, err, tol, padding_kept) in o["gemm"].items():
        assert st == 0 and err <= tol and padding_kept, (name, st, err, tol)
    assert o["device_operands"][0] == 0 and o["device_operands"][1] <= 8 * 65 * 2.0 ** -24 * 64
    assert o["refused"] == [7, 7, 15]
    assert "cublasXtSsyrk is not supported by libvcublas" in proc.stderr
    assert o["destroy"] == [0, 1]
    # Both GPUs computed tiles: 16 GEMMs of 3 x 2 tiles (block 48) dealt round-robin, so each GPU waited for at
    # least 3 tile downloads per GEMM besides its 3 buffers' allocations and frees (MALLOC and FREE wait too).
    rows = {line.split()[0]: line.split() for line in (tmp_path / "stats.txt").read_text().splitlines() if line}
    for gpu in ("GPU0", "GPU1"):
        assert int(rows[gpu][3]) >= 16 * (3 + 6), rows[gpu]
