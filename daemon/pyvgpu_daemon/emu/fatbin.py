"""Fat binary decoding (nvcc 13 layout).

An image handed to the emulator is one of
  * a fatbin container: u32 magic 0xBA55ED50 | u16 version | u16 header size | u64 payload size, followed by
    entries; several containers may follow each other;
  * a fatbin wrapper (u32 magic 0x466243B1, the 24-byte `__fatBinC_Wrapper_t`) immediately followed by its
    container (the client sends the bytes the wrapper's pointer designates, but accept both);
  * PTX source text.

Each entry has a 64-byte fixed header (kind 1 = PTX, 2 = ELF; header size at 4; payload size at 8; compressed
size at 16; arch at 28; flags at 40 with 0x8000 = zstd, 0x2000 = raw LZ4 block; uncompressed size at 56).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from pyvgpu_daemon.errors import CudaError

WRAPPER_MAGIC = 0x466243B1
CONTAINER_MAGIC = 0xBA55ED50
KIND_PTX = 1
KIND_ELF = 2
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000


@dataclass
class FatbinEntry:
    kind: int
    arch: int
    flags: int
    data: bytes            # decompressed payload

    @property
    def is_ptx(self) -> bool:
        return self.kind == KIND_PTX


def _decompress(payload: bytes, flags: int, compressed: int, uncompressed: int) -> bytes:
    if flags & FLAG_ZSTD:
        try:
            import zstandard
            raw = payload[:compressed] if compressed else payload
            out = zstandard.ZstdDecompressor().decompress(raw, max_output_size=max(uncompressed, 1))
        except Exception as exc:  # noqa: BLE001 - any decoder failure is a corrupt image
            raise CudaError("cudaErrorInvalidKernelImage", f"fatbin entry: zstd decompression failed: {exc}") from exc
        return out
    if flags & FLAG_LZ4:
        try:
            import lz4.block
            raw = payload[:compressed] if compressed else payload
            out = lz4.block.decompress(raw, uncompressed_size=uncompressed)
        except Exception as exc:  # noqa: BLE001
            raise CudaError("cudaErrorInvalidKernelImage", f"fatbin entry: LZ4 decompression failed: {exc}") from exc
        return out
    return payload


def parse_container(buf: bytes, pos: int = 0) -> tuple[list[FatbinEntry], int]:
    """Decode one container at `pos`; returns its entries and the offset just past it."""
    if len(buf) < pos + 16:
        raise CudaError("cudaErrorInvalidKernelImage", "fatbin: truncated container header")
    magic, _version, hsize, psize = struct.unpack_from("<IHHQ", buf, pos)
    if magic != CONTAINER_MAGIC:
        raise CudaError("cudaErrorInvalidKernelImage", f"fatbin: bad container magic {magic:#x}")
    start = pos + hsize
    end = start + psize
    if end > len(buf):
        raise CudaError("cudaErrorInvalidKernelImage", "fatbin: container payload runs past the image")
    entries = []
    p = start
    while p + 64 <= end:
        kind, _ver, ehsize, esize = struct.unpack_from("<HHIQ", buf, p)
        if ehsize < 64 or p + ehsize + esize > end:
            raise CudaError("cudaErrorInvalidKernelImage", f"fatbin: corrupt entry header at offset {p - pos}")
        compressed, = struct.unpack_from("<I", buf, p + 16)
        arch, = struct.unpack_from("<I", buf, p + 28)
        flags, = struct.unpack_from("<Q", buf, p + 40)
        uncompressed, = struct.unpack_from("<Q", buf, p + 56)
        payload = bytes(buf[p + ehsize:p + ehsize + esize])
        if kind == KIND_PTX:
            data = _decompress(payload, flags, compressed, uncompressed)
        else:
            data = payload  # ELF images are never executed; keep them as stored
        entries.append(FatbinEntry(kind, arch, flags, data))
        p += ehsize + esize
    return entries, end


def parse_image(image: bytes) -> list[FatbinEntry]:
    """All entries of a fatbin image (one or more containers, optionally behind a wrapper)."""
    buf = bytes(image)
    pos = 0
    if len(buf) >= 4 and struct.unpack_from("<I", buf, 0)[0] == WRAPPER_MAGIC:
        pos = 24 if len(buf) >= 24 + 16 else 16
        if struct.unpack_from("<I", buf, pos)[0] != CONTAINER_MAGIC:
            raise CudaError("cudaErrorInvalidKernelImage", "fatbin wrapper is not followed by its container")
    entries: list[FatbinEntry] = []
    while pos + 16 <= len(buf) and struct.unpack_from("<I", buf, pos)[0] == CONTAINER_MAGIC:
        more, pos = parse_container(buf, pos)
        entries.extend(more)
        pos = (pos + 7) & ~7
    if not entries and not buf.startswith(struct.pack("<I", CONTAINER_MAGIC)):
        raise CudaError("cudaErrorInvalidKernelImage", "not a fatbin image")
    return entries


def is_fatbin(image: bytes) -> bool:
    if len(image) < 4:
        return False
    return struct.unpack_from("<I", image, 0)[0] in (WRAPPER_MAGIC, CONTAINER_MAGIC)


def elf_kernel_names(elf: bytes) -> list[str]:
    """Kernel names from a cubin's `.text.<name>` sections (for error messages only)."""
    names: list[str] = []
    try:
        if elf[:4] != b"\x7fELF" or elf[4] != 2:
            return names
        shoff, = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
        sh = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
        stroff = sh[shstrndx][4]
        for s in sh:
            n = elf[stroff + s[0]:elf.index(b"\0", stroff + s[0])].decode("latin-1")
            if n.startswith(".text."):
                names.append(n[6:])
    except Exception:  # noqa: BLE001 - best effort
        pass
    return names


def select_ptx(image: bytes, sm: int = 75) -> str:
    """The PTX text of the highest architecture not above `sm`.

    No PTX at all (or only PTX for newer architectures) → cudaErrorNoKernelImageForDevice naming the kernels
    found in the image's cubins.
    """
    entries = parse_image(image)
    ptx = [e for e in entries if e.is_ptx and e.arch <= sm]
    if not ptx:
        names: list[str] = []
        for e in entries:
            if e.kind == KIND_ELF:
                names.extend(n for n in elf_kernel_names(e.data) if n not in names)
        archs = sorted({f"{'ptx' if e.is_ptx else 'sm'}_{e.arch}" for e in entries})
        raise CudaError("cudaErrorNoKernelImageForDevice",
                        f"no PTX for sm_{sm} or below in the fatbin (it holds {', '.join(archs) or 'nothing'}); "
                        f"the emulator needs PTX to run kernel(s) {', '.join(names) or '(unknown)'}; "
                        f"rebuild with -gencode arch=compute_{sm},code=compute_{sm} or similar")
    best = max(ptx, key=lambda e: e.arch)
    return best.data.rstrip(b"\0").decode("utf-8", errors="replace")
