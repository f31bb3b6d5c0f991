"""numba-cuda against NumPy (run under `pyvgpu run`): jitted kernels with shared memory, atomics and a block
reduction. --no-nvjitlink makes numba take the path it takes where nvJitLink is not installed (PTX linked with the
driver's cuLink*); without it numba links with nvJitLink (on emulated GPUs pyvgpu's PTX-only one, which
`pyvgpu run` preloads). Tolerances: float32 results within 1e-5 of NumPy's, absolute and relative (block sums 1e-4),
integer counts exact."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from fwcheck import Checks, close


def hide_nvjitlink() -> None:
    """numba-cuda and cuda.core decide by whether nvJitLink exports __nvJitLinkVersion."""
    from cuda.bindings._internal import nvjitlink
    real = nvjitlink._inspect_function_pointer
    nvjitlink._inspect_function_pointer = lambda name: 0 if name == "__nvJitLinkVersion" else real(name)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-nvjitlink", action="store_true")
    args = ap.parse_args()
    if args.no_nvjitlink:
        hide_nvjitlink()
    import warnings
    warnings.simplefilter("ignore")
    from numba import cuda
    c = Checks()

    @cuda.jit
    def block_sums(a, out):
        s = cuda.shared.array(128, dtype=np.float32)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        s[t] = a[i] if i < a.size else np.float32(0)
        cuda.syncthreads()
        step = 64
        while step > 0:
            if t < step:
                s[t] += s[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            out[cuda.blockIdx.x] = s[0]

    @cuda.jit
    def histogram(v, bins):
        i = cuda.grid(1)
        if i < v.size:
            cuda.atomic.add(bins, v[i] % bins.size, 1)

    @cuda.jit
    def saxpy(a, x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = a * x[i] + y[i]

    rng = np.random.default_rng(3)
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    v = rng.integers(0, 1 << 20, 5000).astype(np.int32)

    def run_saxpy():
        dy = cuda.to_device(y)
        saxpy[(x.size + 127) // 128, 128](np.float32(2.5), cuda.to_device(x), dy)
        return close(dy.copy_to_host(), 2.5 * x + y)

    def run_sums():
        out = cuda.device_array(8, np.float32)
        block_sums[8, 128](cuda.to_device(x), out)
        want = [x[i * 128:(i + 1) * 128].sum() for i in range(8)]
        return close(out.copy_to_host(), want, 1e-4)

    def run_hist():
        bins = cuda.to_device(np.zeros(17, np.int32))
        histogram[(v.size + 255) // 256, 256](cuda.to_device(v), bins)
        return np.array_equal(bins.copy_to_host(), np.bincount(v % 17, minlength=17)) or "counts differ"

    c.run("saxpy", run_saxpy)
    c.run("shared-memory block sums", run_sums)
    c.run("atomic histogram", run_hist)
    return c.finish("numba")


if __name__ == "__main__":
    sys.exit(main())
