"""NVIDIA's cuFFT through CuPy against NumPy (run under `pyvgpu run`): cuFFT runs as NVIDIA built it over libvcuda.
1D and 2D complex-to-complex, 1D real-to-complex and back, and a prime length (Bluestein's algorithm, more kernels),
in single precision. On the emulated GPU a plan's
kernels that ship only SASS are refused (`refused NAME`, one line naming libcufft), never a wrong transform.

Tolerance: 1e-4 relative to the largest magnitude (n <= 67, unit-variance inputs, NumPy's float64 FFT as
reference; a float32 FFT's error grows as log n)."""
from __future__ import annotations

import sys

import numpy as np

from fwcheck import Checks


def near(got, want) -> bool | str:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    err = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    return True if err <= 1e-4 else f"max relative error {err}"


def main() -> int:
    import cupy as cp
    c = Checks(allow_refusal="--allow-refusal" in sys.argv)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64)
    img = (rng.standard_normal((16, 8)) + 1j * rng.standard_normal((16, 8))).astype(np.complex64)
    r = rng.standard_normal(64).astype(np.float32)
    c.run("fft c2c 1d", lambda: near(cp.fft.fft(cp.asarray(x)).get(), np.fft.fft(x.astype(np.complex128))))
    c.run("ifft c2c 1d", lambda: near(cp.fft.ifft(cp.asarray(x)).get(), np.fft.ifft(x.astype(np.complex128))))
    c.run("fft2 c2c 2d", lambda: near(cp.fft.fft2(cp.asarray(img)).get(), np.fft.fft2(img.astype(np.complex128))))
    c.run("rfft r2c 1d", lambda: near(cp.fft.rfft(cp.asarray(r)).get(), np.fft.rfft(r.astype(np.float64))))
    c.run("irfft c2r 1d", lambda: near(cp.fft.irfft(cp.fft.rfft(cp.asarray(r))).get(), r.astype(np.float64)))
    p = (rng.standard_normal(67) + 1j * rng.standard_normal(67)).astype(np.complex64)
    c.run("fft c2c prime", lambda: near(cp.fft.fft(cp.asarray(p)).get(), np.fft.fft(p.astype(np.complex128))))
    return c.finish("cufft")


if __name__ == "__main__":
    sys.exit(main())
