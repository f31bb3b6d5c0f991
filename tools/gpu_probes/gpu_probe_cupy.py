"""Framework probe (real-GPU check): CuPy through pyvgpu (tools/gpu_probes/probe_common.py says how)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_common import main  # noqa: E402

BODY = '''
import numpy as np
import cupy as cp
def init():
    props = cp.cuda.runtime.getDeviceProperties(0)
    return f"{cp.cuda.runtime.getDeviceCount()} device(s), {props['name'].decode()}"
step("init", init)
n = 1 << 20
step("copy", lambda: np.testing.assert_array_equal(cp.asnumpy(cp.asarray(np.arange(n, dtype=np.float32))),
                                                   np.arange(n, dtype=np.float32)))
step("elementwise (NVRTC)", lambda: np.testing.assert_array_equal(
    cp.asnumpy(cp.arange(n, dtype=cp.float32) * 2 + 1), np.arange(n, dtype=np.float32) * 2 + 1))
def kernel():
    k = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * y + 3.0f", "pv_probe_fma")
    x = np.random.default_rng(3).random(n, dtype=np.float32)
    got = cp.asnumpy(k(cp.asarray(x), cp.asarray(x)))
    np.testing.assert_allclose(got, x * x + np.float32(3), rtol=1e-6)
step("ElementwiseKernel", kernel)
def reduction():
    h = np.random.default_rng(4).random(n)
    got = float(cp.asarray(h).sum())
    e = abs(got - h.sum()) / abs(h.sum())
    assert e < 1e-12, f"sum rel err {e:.2e}"
    return f"rel err {e:.1e}"
step("reduction", reduction)
def matmul():
    rng = np.random.default_rng(5)
    a, b = rng.random((256, 256), dtype=np.float32), rng.random((256, 256), dtype=np.float32)
    e = rel_err(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)), a.astype(np.float64) @ b.astype(np.float64))
    assert e < 1e-5, f"float32 matmul rel err {e:.2e} (cuBLAS)"
    return f"rel err {e:.1e}"
step("matmul", matmul)
step("synchronize", lambda: cp.cuda.Device(0).synchronize())
'''

if __name__ == "__main__":
    sys.exit(main("cupy", "cupy", BODY))
