"""Real GPUs through cuda-python's driver API (placeholder until the full backend lands)."""
from __future__ import annotations


def probe() -> tuple[int, str]:
    """(number of usable GPUs, reason when 0). Never raises."""
    try:
        from cuda.bindings import driver
    except Exception as exc:  # noqa: BLE001
        return 0, f"cuda-python not importable: {exc}"
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0, f"cuInit failed: {err.name}"
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0, f"cuDeviceGetCount failed: {err.name}"
        return int(count), "" if count else "driver reports zero devices"
    except Exception as exc:  # noqa: BLE001
        return 0, f"{type(exc).__name__}: {exc}"


class CudaBackend:  # replaced below by the full implementation
    name = "cuda"
