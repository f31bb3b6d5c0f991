"""NVIDIA's cuSOLVER through CuPy against NumPy (run under `pyvgpu run`): cuSOLVER runs as NVIDIA built it over
libvcuda, its cuBLAS calls go to libvcublas. Cholesky (potrf, fp32 and fp64) and singular values (gesvd); --more
adds a Cholesky solve (potrf + potrs) and QR (geqrf + orgqr), right on the emulated GPU too but ~40 s of emulation
more; --real adds those, LU solve (getrf + getrs) and a symmetric eigensolver (syevd), for real GPUs: on the emulated GPU getrf's pivot kernel (`getrf_pivot`) loops without end (it ends with
cudaErrorLaunchTimeout at the emulator's launch limit, never a wrong number) and syevd takes ~2 minutes.

Tolerances: fp32 results within 1e-4 (absolute and relative; n = 8, well-conditioned inputs, NumPy's LAPACK in the
same precision as reference), fp64 within 1e-10."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from fwcheck import Checks, close

N = 8


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--more", action="store_true", help="also Cholesky solve and QR")
    ap.add_argument("--real", action="store_true", help="everything, with LU solve and eigh (real GPUs)")
    args = ap.parse_args()
    import cupy as cp
    import cupyx.lapack
    c = Checks()
    rng = np.random.default_rng(11)
    a = rng.standard_normal((N, N)).astype(np.float32)
    spd = a @ a.T + N * np.eye(N, dtype=np.float32)           # symmetric positive definite, condition ~ 10
    b = rng.standard_normal((N, 2)).astype(np.float32)
    spd64 = spd.astype(np.float64)
    c.run("cholesky f32", lambda: close(cp.linalg.cholesky(cp.asarray(spd)).get(), np.linalg.cholesky(spd), 1e-4))
    c.run("cholesky f64", lambda: close(cp.linalg.cholesky(cp.asarray(spd64)).get(), np.linalg.cholesky(spd64),
                                        1e-10))
    c.run("singular values", lambda: close(cp.linalg.svd(cp.asarray(a), compute_uv=False).get(),
                                           np.linalg.svd(a, compute_uv=False), 1e-4))

    def qr() -> bool | str:
        q, r = cp.linalg.qr(cp.asarray(a))
        q, r = q.get(), r.get()
        if not np.allclose(np.triu(r), r):
            return "R is not upper triangular"
        if (got := close(q.T @ q, np.eye(N), 1e-4)) is not True:
            return f"Q not orthogonal: {got}"
        return close(q @ r, a, 1e-4)
    if args.more or args.real:
        c.run("cholesky solve", lambda: close(cupyx.lapack.posv(cp.asarray(spd), cp.asarray(b)).get(),
                                              np.linalg.solve(spd, b), 1e-4))
        c.run("qr", qr)
    if args.real:
        c.run("lu solve", lambda: close(cp.linalg.solve(cp.asarray(a + N * np.eye(N, dtype=np.float32)),
                                                        cp.asarray(b)).get(),
                                        np.linalg.solve(a + N * np.eye(N, dtype=np.float32), b), 1e-4))
        c.run("eigh", lambda: close(cp.linalg.eigh(cp.asarray(spd))[0].get(), np.linalg.eigh(spd)[0], 1e-4))
    return c.finish("cusolver")


if __name__ == "__main__":
    sys.exit(main())
