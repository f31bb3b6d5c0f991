"""The daemon's exceptions: CudaError, the one type that carries a CUDA error code from a backend or the emulator to
the wire, and SessionEnd, which ends one session (a protocol violation) with a reason for the log and the client."""
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


# Names that are not cudaError_t enumerators but that driver-API habits suggest; mapped to the runtime's code so a
# slip in a message name never turns into a KeyError inside an error path.
ALIASES: dict[str, str] = {
    "cudaErrorInvalidImage": "cudaErrorInvalidKernelImage",
    "cudaErrorInvalidHandle": "cudaErrorInvalidResourceHandle",
    "cudaErrorOutOfMemory": "cudaErrorMemoryAllocation",
    "cudaErrorNoBinaryForGpu": "cudaErrorNoKernelImageForDevice",
}


def code_of(name: str) -> int:
    """cudaError_t value of `name` (aliases allowed); unknown names give cudaErrorUnknown."""
    return ERROR_CODES.get(ALIASES.get(name, name), ERROR_CODES["cudaErrorUnknown"])


class CudaError(Exception):
    """A failure with a cudaError_t code; `message` is for the daemon log, the client sees the code."""

    def __init__(self, code: int | str, message: str = "", sticky: bool | None = None) -> None:
        if isinstance(code, str):
            if code not in ERROR_CODES and code not in ALIASES:
                message = f"[{code}] {message}"
            self.code = code_of(code)
        else:
            self.code = int(code)
        self.message = message
        self._sticky = sticky            # None: by the code (STICKY_ERRORS); a coherence conflict is always sticky
        super().__init__(f"{ERROR_NAMES.get(self.code, self.code)}: {message}" if message else ERROR_NAMES.get(self.code, str(self.code)))

    @property
    def sticky(self) -> bool:
        return self.code in STICKY_ERRORS if self._sticky is None else self._sticky


class SessionEnd(Exception):
    """Ends one session with a reason for the log (and the client's notice)."""
