"""Framework probe (real-GPU check): numba-cuda through pyvgpu (tools/gpu_probes/probe_common.py says how).

A NumPy shim in this probe's own processes (all three ways alike), nowhere else: numba-cuda registers an overload of
np.row_stack (numba_cuda/numba/cuda/np/arrayobj.py: `overload(np.row_stack)`, guarded only by NumPy >= 2.0) when it
first compiles a kernel, and NumPy 2.5 removed that alias of np.vstack, so on the GPU image every numba-cuda kernel
failed natively with "module 'numpy' has no attribute 'row_stack'" (GPU runs 1-3) and the probe had no verdict.
Where the alias is missing the probe puts it back (np.row_stack = np.vstack, what NumPy < 2.5 had) before numba is
imported, and says so in a step of its own ("numpy shim"). Checked without a GPU: with np.row_stack deleted from
NumPy 2.4, numba-cuda 0.30 compiles this probe's kernel to PTX for sm_90 with the shim and fails as above without.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_common import main  # noqa: E402

BODY = '''
import numpy as np
if not hasattr(np, "row_stack"):          # NumPy 2.5: see the module's docstring (this process only)
    np.row_stack = np.vstack
    step("numpy shim", lambda: f"np.row_stack = np.vstack for numba-cuda (NumPy {np.__version__}; this probe only)")
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
