"""The one exception type that carries a CUDA error code from a backend or the emulator to the wire."""
from __future__ import annotations

from pyvgpu.protocol import ERROR_CODES, ERROR_NAMES

# Errors after which a device context is unusable until cudaDeviceReset, as on a real GPU.
STICKY_ERRORS: frozenset[int] = frozenset(
    ERROR_CODES[name]
    for name in (
        "cudaErrorIllegalAddress", "cudaErrorMisalignedAddress", "cudaErrorAssert", "cudaErrorLaunchFailure",
        "cudaErrorIllegalInstruction", "cudaErrorInvalidAddressSpace", "cudaErrorInvalidPc",
        "cudaErrorHardwareStackError", "cudaErrorLaunchTimeout",
    )
)


class CudaError(Exception):
    """A failure with a cudaError_t code; `message` is for the daemon log, the client sees the code."""

    def __init__(self, code: int | str, message: str = "") -> None:
        self.code = ERROR_CODES[code] if isinstance(code, str) else int(code)
        self.message = message
        super().__init__(f"{ERROR_NAMES.get(self.code, self.code)}: {message}" if message else ERROR_NAMES.get(self.code, str(self.code)))

    @property
    def sticky(self) -> bool:
        return self.code in STICKY_ERRORS
