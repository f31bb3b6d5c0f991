"""What the framework scripts share (they run under `pyvgpu run`, as a user's program would): one line per check,
`ok NAME`, `refused NAME: why` (a CUDA error naming a kernel image the GPU cannot run) or `WRONG NAME: detail`
(a wrong number; or any other failure). The exit status is 1 when a check was wrong or failed, else 0; the last line
sums them up (what scripts/gpu-check.sh's framework stage shows)."""
from __future__ import annotations

import sys
import traceback
from typing import Callable

# Errors that mean "this GPU cannot run that kernel image" (CUDA's names, as frameworks quote them).
REFUSALS = ("cudaErrorNoKernelImageForDevice", "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image",
            "cudaErrorInvalidKernelImage", "CUDA_ERROR_INVALID_IMAGE", "cudaErrorInvalidPtx", "CUDA_ERROR_INVALID_PTX",
            "CUDA_ERROR_NOT_SUPPORTED", "cudaErrorNotSupported", "emulated GPU runs PTX")


class Checks:
    def __init__(self, allow_refusal: bool = False) -> None:
        self.allow_refusal = allow_refusal
        self.ok = self.refused = self.bad = 0

    def run(self, name: str, fn: Callable[[], object]) -> None:
        try:
            got = fn()
        except Exception as exc:               # noqa: BLE001 - every failure is reported, by name
            text = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
            if self.allow_refusal and any(r in text for r in REFUSALS):
                self.refused += 1
                print(f"refused {name}: {text}", flush=True)
            else:
                self.bad += 1
                print(f"WRONG {name}: {text}", flush=True)
                traceback.print_exc(file=sys.stderr)
            return
        if got is True or got is None:
            self.ok += 1
            print(f"ok {name}", flush=True)
        else:
            self.bad += 1
            print(f"WRONG {name}: {got}", flush=True)

    def finish(self, what: str) -> int:
        print(f"{what}: {self.ok} ok, {self.refused} refused, {self.bad} wrong or failed", flush=True)
        return 1 if self.bad else 0


def close(got, want, tol: float = 1e-5) -> bool | str:
    import numpy as np                          # noqa: PLC0415
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if np.allclose(got, want, rtol=tol, atol=tol):
        return True
    return f"max abs diff {np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))}"
