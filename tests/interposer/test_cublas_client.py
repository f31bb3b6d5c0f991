"""libvcublas through NVIDIA's own prototypes (cffi over the headers of the nvidia-cublas wheel), against a daemon:
every supported entry point, int and _64 API, host and device pointer mode, gives what the emulated routine gives
for the same bytes called directly (tests/interposer/cublas_cases.py); the emulated routines themselves are checked against
float64 references in test_blas_emu.py. Plus what the client answers by itself: statuses of refused arguments at
once, handles, modes, versions, status strings, unsupported functions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pyvgpu
from pyvgpu import cublas_spec as spec

TESTS = Path(__file__).resolve().parent          # cublas_cases.py lives here
sys.path.insert(0, str(TESTS.parents[1] / "tools"))
import cublas_wheel  # noqa: E402

LOCAL = ["cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasGetStream_v2",
         "cublasSetPointerMode_v2", "cublasGetPointerMode_v2", "cublasSetMathMode", "cublasGetMathMode",
         "cublasSetWorkspace_v2", "cublasGetVersion_v2", "cublasGetProperty", "cublasGetCudartVersion",
         "cublasGetStatusName", "cublasGetStatusString", "cublasSsyr2k_v2"]

SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import cffi
import cublas_cases as cc
from pyvgpu import cublas_spec as spec
ffi = cffi.FFI(); ffi.cdef(open(sys.argv[2]).read())
cudart = ffi.dlopen(sys.argv[3]); lib = ffi.dlopen(sys.argv[4])
class Both:
    def __getattr__(self, n):
        return getattr(cudart if n.startswith("cuda") else lib, n)
both = Both()
h = ffi.new("cublasHandle_t *")
assert lib.cublasCreate_v2(h) == 0
out = {"mismatch": [], "cases": 0}
def mode(p):
    assert lib.cublasSetPointerMode_v2(h[0], p) == 0
for case in cc.all_cases():
    mode(case.pmode)
    status, remote, result = cc.run_remote(ffi, both, h[0], case)
    local, lresult = cc.run_local(case)
    out["cases"] += 1
    if status != 0:
        out["mismatch"].append(f"{case.name}: status {status}")
        continue
    for name, buf in case.buffers.items():
        if not cc.same(buf.dtype, remote[name], local[name]):
            out["mismatch"].append(f"{case.name}: operand {name} differs")
    if (result is None) != (lresult is None) or (result is not None and result != lresult and
            not cc.same(cc.result_type(case), result, lresult)):
        out["mismatch"].append(f"{case.name}: result {result!r} != {lresult!r}")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cdef_file(cublas_include, tmp_path_factory):
    import cublas_cases
    protos = cublas_wheel.read_prototypes(cublas_include)
    names = [e.name64 if ilp64 else e.name for e in spec.ENTRIES for ilp64 in e.widths()] + LOCAL
    path = tmp_path_factory.mktemp("cdef") / "cublas.cdef"
    path.write_text(cublas_cases.cdef(protos, names))
    return path


def run_script(script: str, cdef_file: Path, daemons, tmp_path, env=None) -> tuple[dict, str]:
    lib_dir = pyvgpu.lib_path().parent
    full = {**{k: v for k, v in os.environ.items() if k not in ("PYVGPU_HOSTS", "LD_PRELOAD")},
            "XDG_CONFIG_HOME": str(tmp_path), "PYVGPU_HOSTS": ",".join(d.address for d in daemons), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", script, str(TESTS), str(cdef_file), str(lib_dir / "libvcudart.so"),
                           str(lib_dir / "libvcublas.so")], capture_output=True, text=True, env=full, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_every_entry_point_marshals_like_the_table(daemon, cdef_file, tmp_path):
    out, _ = run_script(SCRIPT, cdef_file, [daemon], tmp_path)
    assert out["cases"] == sum(len(e.widths()) for e in spec.ENTRIES) * 2
    assert out["mismatch"] == []


LOCAL_SCRIPT = r"""
import json, sys
import cffi
ffi = cffi.FFI(); ffi.cdef(open(sys.argv[2]).read())
cudart = ffi.dlopen(sys.argv[3]); lib = ffi.dlopen(sys.argv[4])
o = {}
s = lambda f: ffi.string(f).decode()
o["names"] = [s(lib.cublasGetStatusName(v)) for v in (0, 7, 15, 2)]
o["strings"] = [s(lib.cublasGetStatusString(v)) for v in (1, 13, 99)]
v = ffi.new("int *")
o["version"] = [lib.cublasGetVersion_v2(ffi.NULL, v), v[0]]
o["props"] = [(lib.cublasGetProperty(t, v), v[0]) for t in (0, 1, 2)] + [lib.cublasGetProperty(3, v)]
o["cudart"] = lib.cublasGetCudartVersion()
h = ffi.new("cublasHandle_t *")
o["null_handle"] = [lib.cublasSetPointerMode_v2(ffi.NULL, 0), lib.cublasSgemm_v2(ffi.NULL, 0, 0, 1, 1, 1,
                    ffi.NULL, ffi.NULL, 1, ffi.NULL, 1, ffi.NULL, ffi.NULL, 1)]
o["create"] = lib.cublasCreate_v2(h)
H = h[0]
st = ffi.new("cudaStream_t *")
o["stream"] = [cudart.cudaStreamCreate(st), lib.cublasSetStream_v2(H, st[0])]
got = ffi.new("cudaStream_t *"); lib.cublasGetStream_v2(H, got); o["stream_same"] = got[0] == st[0]
o["bad_stream"] = lib.cublasSetStream_v2(H, ffi.cast("cudaStream_t", 0x1234))
o["modes"] = [lib.cublasSetPointerMode_v2(H, 1), lib.cublasGetPointerMode_v2(H, v), v[0],
              lib.cublasSetPointerMode_v2(H, 5), lib.cublasSetPointerMode_v2(H, 0)]
o["math"] = [lib.cublasSetMathMode(H, 3), lib.cublasSetMathMode(H, 16 | 2), lib.cublasGetMathMode(H, v), v[0],
             lib.cublasSetMathMode(H, 5)]
p = ffi.new("void **"); cudart.cudaMalloc(p, 4096)
o["workspace"] = [lib.cublasSetWorkspace_v2(H, p[0], 4096), lib.cublasSetWorkspace_v2(H, ffi.cast("void *",
                  int(ffi.cast("uintptr_t", p[0])) + 8), 64), lib.cublasSetWorkspace_v2(H, ffi.NULL, 0)]
one = ffi.new("float *", 1.0)
A = ffi.cast("float *", p[0])
o["refused"] = [lib.cublasSgemm_v2(H, 0, 0, -1, 2, 2, one, A, 2, A, 2, one, A, 2),      # m < 0
                lib.cublasSgemm_v2(H, 0, 0, 3, 2, 2, one, A, 2, A, 2, one, A, 3),       # lda < m
                lib.cublasSgemm_v2(H, 9, 0, 2, 2, 2, one, A, 2, A, 2, one, A, 2),       # transa
                lib.cublasSgemm_v2(H, 0, 0, 2, 2, 2, ffi.NULL, A, 2, A, 2, one, A, 2),  # alpha NULL
                lib.cublasSgemv_v2(H, 0, 2, 2, one, A, 2, A, 0, one, A, 1),             # incx == 0
                lib.cublasGemmEx(H, 0, 0, 2, 2, 2, one, A, 0, 2, A, 0, 2, one, A, 2, 2, 68, -1),   # fp32 -> fp16
                lib.cublasSdot_v2(H, 2, A, 1, A, 1, ffi.NULL)]                          # result NULL
o["unsupported"] = lib.cublasSsyr2k_v2(H, 0, 0, 2, 2, one, A, 2, A, 2, one, A, 2)
info = ffi.new("int *", 99)
arr = ffi.cast("float **", p[0])
o["host_info"] = [
    (lib.cublasSgetrsBatched(H, 0, -1, 1, arr, 1, ffi.NULL, arr, 1, info, 1), info[0]),     # n < 0: 3rd
    (lib.cublasSgetrsBatched(H, 0, 2, 1, arr, 2, ffi.NULL, arr, 1, info, 1), info[0]),      # ldb < n: 9th
    (lib.cublasSgeqrfBatched(H, 3, 2, arr, 2, arr, info, 1), info[0]),                     # lda < m: 5th
    (lib.cublasSgelsBatched(H, 1, 3, 2, 1, arr, 3, arr, 3, info, ffi.NULL, 1), info[0]),  # trans: 2nd
    (lib.cublasSgelsBatched(H, 0, 2, 3, 1, arr, 3, arr, 3, info, ffi.NULL, 1), info[0]),  # m < n: n, 4th
    (lib.cublasSgeqrfBatched(H, 0, 0, arr, 1, arr, info, 0), info[0])]                    # valid: 0
o["sync_after_refusals"] = cudart.cudaDeviceSynchronize()                 # nothing was sent
o["destroy"] = [lib.cublasDestroy_v2(H), lib.cublasDestroy_v2(H)]
print(json.dumps(o))
"""


def test_client_side_answers(daemon, cdef_file, tmp_path):
    o, err = run_script(LOCAL_SCRIPT, cdef_file, [daemon], tmp_path)
    assert o["names"] == ["CUBLAS_STATUS_SUCCESS", "CUBLAS_STATUS_INVALID_VALUE", "CUBLAS_STATUS_NOT_SUPPORTED",
                          "unrecognized status"]
    assert o["strings"] == ["the library was not initialized", "the function failed to launch on the GPU",
                            "unrecognized status"]
    assert o["version"] == [0, spec.CUBLAS_VERSION]
    assert o["props"] == [[0, 13], [0, 10], [0, 0], 7] and o["cudart"] == 13000
    assert o["null_handle"] == [1, 1]                     # CUBLAS_STATUS_NOT_INITIALIZED
    assert o["create"] == 0 and o["stream"] == [0, 0] and o["stream_same"] and o["bad_stream"] == 7
    assert o["modes"] == [0, 0, 1, 7, 0]
    assert o["math"] == [0, 0, 0, 18, 7]
    assert o["workspace"] == [0, 7, 0]
    assert o["refused"] == [7, 7, 7, 7, 7, 15, 7]
    assert o["unsupported"] == 15 and "cublasSsyr2k_v2 is not supported by libvcublas" in err
    assert o["host_info"] == [[7, -3], [7, -9], [7, -5], [15, -2], [15, -4], [0, 0]]   # LAPACK's -position
    assert o["sync_after_refusals"] == 0
    assert o["destroy"] == [0, 1]


def test_create_without_daemon_is_not_initialized(cdef_file, tmp_path):
    script = LOCAL_SCRIPT.split('h = ffi.new("cublasHandle_t *")')[0] + \
        'h = ffi.new("cublasHandle_t *")\no["create"] = lib.cublasCreate_v2(h)\nprint(json.dumps(o))\n'

    class Nowhere:
        address = "127.0.0.1:1"
    o, _ = run_script(script, cdef_file, [Nowhere()], tmp_path, env={"PYVGPU_CONNECT_TIMEOUT_MS": "500"})
    assert o["create"] == 1
