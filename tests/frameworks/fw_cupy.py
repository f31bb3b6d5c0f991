"""CuPy against NumPy (run under `pyvgpu run`): elementwise, reductions, argmax, scans, sort, fancy indexing, raw
kernels, streams, matmul; with --two-gpus, arrays on GPU 0 and GPU 1 (two daemons). Library kernels the GPU cannot
run (CuPy's CUB kernels on the emulated GPU) may be refused with a CUDA error; a wrong number never passes."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from fwcheck import Checks, close


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--two-gpus", action="store_true")
    ap.add_argument("--allow-refusal", action="store_true", help="a refused kernel image is not a failure")
    args = ap.parse_args()
    import cupy as cp
    c = Checks(args.allow_refusal)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(4096).astype(np.float32)
    i32 = rng.integers(-1000, 1000, 3000).astype(np.int32)
    a = rng.standard_normal((33, 47)).astype(np.float32)
    b = rng.standard_normal((47, 29)).astype(np.float32)
    c.run("copy h2d/d2h", lambda: np.array_equal(cp.asarray(x).get(), x) or "bytes differ")
    c.run("elementwise", lambda: close((cp.sin(cp.asarray(x)) * 2 + 1).get(), np.sin(x) * 2 + 1))
    c.run("elementwise int", lambda: np.array_equal((cp.asarray(i32) // 7 - 3).get(), i32 // 7 - 3) or "differ")
    c.run("sum", lambda: close(float(cp.asarray(x).sum()), float(x.sum()), 1e-3))
    c.run("max/min", lambda: close([float(cp.asarray(x).max()), float(cp.asarray(x).min())], [x.max(), x.min()]))
    c.run("mean axis", lambda: close(cp.asarray(a).mean(axis=0).get(), a.mean(axis=0), 1e-4))
    c.run("argmax", lambda: int(cp.asarray(x).argmax()) == int(x.argmax()) or "index differs")
    c.run("cumsum", lambda: np.array_equal(cp.cumsum(cp.asarray(i32)).get(), np.cumsum(i32)) or "differ")
    idx = rng.integers(0, x.size, 100)
    c.run("fancy indexing", lambda: np.array_equal(cp.asarray(x)[cp.asarray(idx)].get(), x[idx]) or "differ")
    c.run("boolean mask", lambda: np.array_equal(cp.asarray(x)[cp.asarray(x) > 0].get(), x[x > 0]) or "differ")
    raw = cp.RawKernel(r'''
    extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
        int i = blockDim.x * blockIdx.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }''', "saxpy")

    def raw_kernel():
        dx, dy = cp.asarray(x), cp.ones_like(cp.asarray(x))
        raw(((x.size + 255) // 256,), (256,), (np.float32(3), dx, dy, np.int32(x.size)))
        return close(dy.get(), 3 * x + 1)
    c.run("raw kernel", raw_kernel)

    def streams():
        s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
        with s1:
            y1 = cp.asarray(x) * 2
        with s2:
            y2 = cp.asarray(x) + 5
        ev = s1.record()
        s2.wait_event(ev)
        with s2:
            z = y1 + y2
        s2.synchronize()
        return close(z.get(), x * 2 + x + 5)
    c.run("streams and events", streams)
    c.run("matmul", lambda: close((cp.asarray(a) @ cp.asarray(b)).get(), a @ b, 1e-4))
    if args.two_gpus:
        def two():
            with cp.cuda.Device(0):
                g0 = cp.asarray(x) * 2
            with cp.cuda.Device(1):
                g1 = cp.asarray(x) + 1
                back = cp.asarray(g0)          # GPU 0 -> GPU 1 (two daemons: through the client or daemon to daemon)
                return close((back + g1).get(), x * 2 + x + 1)
        c.run("two GPUs", two)
    # Last: CuPy's sort runs its prebuilt Thrust kernels (PTX for compute_120 only), which an emulated GPU may refuse;
    # a refusal is reported at every later synchronization, so nothing after it could pass.
    c.run("sort", lambda: np.array_equal(cp.sort(cp.asarray(i32)).get(), np.sort(i32)) or "differ")
    return c.finish("cupy")


if __name__ == "__main__":
    sys.exit(main())
