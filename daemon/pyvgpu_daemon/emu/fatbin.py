"""Fat binary decoding (nvcc 13 layout).

An image handed to the emulator is one of
  * a fatbin container: u32 magic 0xBA55ED50 | u16 version | u16 header size | u64 payload size, followed by
    entries; several containers may follow each other;
  * a fatbin wrapper (u32 magic 0x466243B1, the 24-byte `__fatBinC_Wrapper_t`) immediately followed by its
    container (the client sends the bytes the wrapper's pointer designates, but accept both);
  * PTX source text.

Each entry has a 64-byte fixed header (kind 1 = PTX, 2 = ELF; header size at 4; payload size at 8; compressed
size at 16; arch at 28; flags at 40 with 0x8000 = zstd, 0x2000 = raw LZ4 block; uncompressed size at 56).

Decompression is bounded: all entries of one image together may inflate to `max_bytes` (EmuLimits.max_image_bytes)
and no decoder is ever asked for more, whatever sizes the headers claim (a 64 KiB zstd frame can claim 2 GiB).
"""
from __future__ import annotations

import io
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


DEFAULT_MAX_BYTES = 64 << 20


def _too_big(claimed: int, room: int) -> CudaError:
    return CudaError("cudaErrorInvalidKernelImage",
                     f"fatbin entry decompresses to {claimed} bytes, more than the {room} bytes left of the image's "
                     f"bound (PYVGPU_EMU_MAX_IMAGE_BYTES)")


def _unzstd(raw: bytes, room: int) -> bytes:
    import zstandard
    claimed = zstandard.frame_content_size(raw)       # the frame's own claim, -1 when absent
    if claimed > room:
        raise _too_big(claimed, room)
    # A stream reader fills its output as it goes: reading room + 1 bytes can never allocate more than that.
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
        out = reader.read(room + 1)
    if len(out) > room:
        raise _too_big(len(out), room)
    return out


def _decompress(payload: bytes, flags: int, compressed: int, uncompressed: int, room: int) -> bytes:
    """One entry's payload, decompressed into at most `room` bytes."""
    raw = payload[:compressed] if compressed else payload
    if not flags & (FLAG_ZSTD | FLAG_LZ4):
        if len(payload) > room:
            raise _too_big(len(payload), room)
        return payload
    if flags & FLAG_LZ4 and not flags & FLAG_ZSTD and uncompressed > room:
        raise _too_big(uncompressed, room)            # LZ4 allocates the size the header claims
    try:
        if flags & FLAG_ZSTD:
            return _unzstd(raw, room)
        import lz4.block
        return lz4.block.decompress(raw, uncompressed_size=uncompressed)
    except CudaError:
        raise
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a corrupt image
        codec = "zstd" if flags & FLAG_ZSTD else "LZ4"
        raise CudaError("cudaErrorInvalidKernelImage", f"fatbin entry: {codec} decompression failed: {exc}") from exc


def parse_container(buf: bytes, pos: int = 0, room: int = DEFAULT_MAX_BYTES,
                    decompress: tuple[int, ...] = (KIND_PTX,)) -> tuple[list[FatbinEntry], int]:
    """Decode one container at `pos`; returns its entries and the offset just past it. Entries of the kinds in
    `decompress` are decompressed (together at most `room` bytes), the others kept as stored."""
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
        if kind in decompress:
            data = _decompress(payload, flags, compressed, uncompressed, room)
            room -= len(data)
        else:
            data = payload  # e.g. ELF images on the emulator: never executed, kept as stored
        entries.append(FatbinEntry(kind, arch, flags, data))
        p += ehsize + esize
    return entries, end


def parse_image(image: bytes, max_bytes: int = DEFAULT_MAX_BYTES,
                decompress: tuple[int, ...] = (KIND_PTX,)) -> list[FatbinEntry]:
    """All entries of a fatbin image (one or more containers, optionally behind a wrapper); the entries of the
    kinds in `decompress` are decompressed, to at most max_bytes in all (cudaErrorInvalidKernelImage beyond)."""
    buf = bytes(image)
    pos = 0
    if len(buf) >= 4 and struct.unpack_from("<I", buf, 0)[0] == WRAPPER_MAGIC:
        pos = 24 if len(buf) >= 24 + 16 else 16
        if struct.unpack_from("<I", buf, pos)[0] != CONTAINER_MAGIC:
            raise CudaError("cudaErrorInvalidKernelImage", "fatbin wrapper is not followed by its container")
    entries: list[FatbinEntry] = []
    while pos + 16 <= len(buf) and struct.unpack_from("<I", buf, pos)[0] == CONTAINER_MAGIC:
        room = max_bytes - sum(len(e.data) for e in entries if e.kind in decompress)
        more, pos = parse_container(buf, pos, room, decompress)
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


def select_ptx(image: bytes, sm: int = 75, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The PTX text of the highest architecture not above `sm`; when the image holds only PTX for newer
    architectures (CuPy's prebuilt CUB kernels: compute_120 alone), the newest of those: the emulator translates
    it and refuses, by name at load, only the instructions it does not implement.

    No PTX at all (SASS only: a library built for real GPUs) → cudaErrorNoKernelImageForDevice, one line naming
    the kernels found in the image's cubins and saying that the emulated GPU runs PTX.
    """
    entries = parse_image(image, max_bytes)
    ptx = [e for e in entries if e.is_ptx]
    if not ptx:
        names: list[str] = []
        for e in entries:
            if e.kind == KIND_ELF:
                names.extend(n for n in elf_kernel_names(e.data) if n not in names)
        archs = sorted({e.arch for e in entries if e.kind == KIND_ELF})
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise CudaError("cudaErrorNoKernelImageForDevice",
                        f"the image holds no PTX, only SASS for {', '.join(f'sm_{a}' for a in archs) or 'nothing'} "
                        f"(kernels {shown or 'unknown'}): the emulated GPU runs PTX; rebuild with "
                        f"-gencode arch=compute_{sm},code=compute_{sm} or run it on a real GPU")
    older = [e for e in ptx if e.arch <= sm]
    best = max(older or ptx, key=lambda e: e.arch)
    return best.data.rstrip(b"\0").decode("utf-8", errors="replace")
