"""Framework probe (real-GPU check): numba-cuda through pyvgpu (tools/gpu_probes/probe_common.py says how)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_common import main  # noqa: E402

BODY = '''
import numpy as np
from numba import cuda
step("init", lambda: f"{len(cuda.gpus)} device(s), {cuda.get_current_device().name}")
n = 1 << 20
@cuda.jit
def axpb(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * 2.0 + 1.0
def kernel():
    x = np.arange(n, dtype=np.float32)
    d_out = cuda.device_array_like(x)
    axpb[(n + 255) // 256, 256](cuda.to_device(x), d_out)
    np.testing.assert_array_equal(d_out.copy_to_host(), x * 2 + 1)
step("jit kernel", kernel)
step("synchronize", lambda: cuda.synchronize())
'''

if __name__ == "__main__":
    sys.exit(main("numba-cuda", "numba", BODY))
