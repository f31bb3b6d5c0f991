"""What the cuda backend reads from a module image itself, where the driver has no call for it: the globals of its
cubins, or of its PTX when it has no cubin (no driver enumerates them), and, for drivers older than CUDA 12.4 (no
cuModuleEnumerateFunctions, cuFuncGetParamInfo), its kernels and their parameter layouts.

A cubin (64-bit ELF) names each kernel in a `.nv.info.<kernel>` section, whose EIATTR_KPARAM_INFO attributes give
every parameter's ordinal, offset and size (the facts cuFuncGetParamInfo answers from); its symbol table lists the
data objects (globals). A PTX image declares each kernel as `.entry name(params)`; the layout follows the PTX ISA's
parameter alignment rules (the emulator's parser and layout, emu/layout.py). Everything here is best effort and
never raises: an image it cannot read yields nothing, and the driver then has the last word (cuModuleGetFunction).
Decompression of fatbin entries is bounded as the emulator's is (emu/fatbin.py).
"""
from __future__ import annotations

import logging
import struct

log = logging.getLogger("pyvgpu.daemon")

SHT_SYMTAB = 2
STT_OBJECT = 1
EIATTR_KPARAM_INFO = 0x17
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4


def fatbin_entries(image: bytes) -> tuple[list[bytes], list[bytes]]:
    """(cubins, PTX texts) of an image: a fatbin (wrapper or container(s)), one cubin, or PTX text."""
    if image[:4] == b"\x7fELF":
        return [image], []
    from pyvgpu_daemon.emu import fatbin
    if not fatbin.is_fatbin(image):
        return [], [image.rstrip(b"\0")]
    try:
        entries = fatbin.parse_image(image, max(fatbin.DEFAULT_MAX_BYTES, 8 * len(image)),
                                     decompress=(fatbin.KIND_ELF, fatbin.KIND_PTX))
    except Exception as exc:  # noqa: BLE001 - best effort
        log.debug("fatbin scan stopped: %s", exc)
        return [], []
    return ([e.data for e in entries if e.kind == fatbin.KIND_ELF],
            [e.data.rstrip(b"\0") for e in entries if e.kind == fatbin.KIND_PTX])


def _sections(elf: bytes) -> list[tuple[str, int, int, int, int, int]]:
    """(name, type, offset, size, link, entsize) of every section of a 64-bit little-endian ELF; [] if it is not one."""
    if elf[:4] != b"\x7fELF" or len(elf) < 64 or elf[4] != 2:
        return []
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    stroff = raw[shstrndx][4] if shstrndx < len(raw) else 0

    def name(off: int) -> str:
        return elf[stroff + off:elf.index(b"\0", stroff + off)].decode("latin-1")
    return [(name(r[0]), r[1], r[4], r[5], r[6], r[9]) for r in raw]


def elf_global_names(elf: bytes) -> list[str]:
    """Names of data objects (STT_OBJECT, defined) in a 64-bit cubin's symbol table."""
    names: list[str] = []
    try:
        sections = _sections(elf)
        for _n, sh_type, off, size, link, entsize in sections:
            if sh_type != SHT_SYMTAB or not entsize:
                continue
            stroff = sections[link][2]
            for k in range(size // entsize):
                st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", elf, off + k * entsize)
                if st_info & 0xF == STT_OBJECT and st_shndx != 0 and st_name:
                    end = elf.index(b"\0", stroff + st_name)
                    names.append(elf[stroff + st_name:end].decode("latin-1"))
    except Exception:  # noqa: BLE001 - best effort
        pass
    return names


def _kparams(info: bytes) -> list[tuple[int, int]]:
    """[(offset, size)] by ordinal from one kernel's .nv.info section (EIATTR_KPARAM_INFO attributes)."""
    found: dict[int, tuple[int, int]] = {}
    i = 0
    while i + 4 <= len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", info, i + 2)
            value = info[i + 4:i + 4 + size]
            i += 4 + size
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            value = b""
            i += 4
        else:
            raise ValueError(f"unknown .nv.info attribute format {fmt}")
        if attr == EIATTR_KPARAM_INFO and len(value) >= 12:
            _index, ordinal, offset, flags = struct.unpack_from("<IHHI", value)
            found[ordinal] = (offset, (flags >> 18) & 0x3FFF)
    if sorted(found) != list(range(len(found))):
        raise ValueError("parameter ordinals with gaps")
    return [found[k] for k in range(len(found))]


def elf_kernels(elf: bytes) -> dict[str, list[tuple[int, int]]]:
    """Kernel name -> parameter layout [(offset, size)] of a cubin (every `.nv.info.<kernel>` section)."""
    out: dict[str, list[tuple[int, int]]] = {}
    try:
        for name, _t, off, size, _l, _e in _sections(elf):
            if name.startswith(".nv.info."):
                out[name[len(".nv.info."):]] = _kparams(elf[off:off + size])
    except Exception as exc:  # noqa: BLE001 - best effort
        log.debug("cubin kernel scan stopped: %s", exc)
    return out


def _parse_ptx(ptx: bytes):
    """The emulator's IR of a PTX text without function bodies (its parser, bounded by the emulator's limits: the
    headers and module variables are all that is asked of it here), or None."""
    from pyvgpu_daemon.emu.limits import EmuLimits
    from pyvgpu_daemon.emu.ptx.parser import parse_headers
    try:
        return parse_headers(ptx.decode("utf-8", errors="replace"), EmuLimits())[0]
    except Exception as exc:  # noqa: BLE001 - best effort
        log.debug("PTX scan stopped: %s", exc)
        return None


def ptx_kernels(ptx: bytes) -> dict[str, list[tuple[int, int]]]:
    """Kernel name -> parameter layout of a PTX text, by the emulator's parser and layout rules."""
    from pyvgpu_daemon.emu.layout import param_layout
    mod = _parse_ptx(ptx)
    return {f.name: param_layout(f) for f in mod.functions.values() if f.is_entry} if mod else {}


def ptx_globals(ptx: bytes) -> list[str]:
    """Names of a PTX text's module-scope .global and .const variables (what cuModuleGetGlobal finds)."""
    mod = _parse_ptx(ptx)
    return [v.name for v in mod.variables if v.space in ("global", "const") and not v.extern] if mod else []


def image_kernels(image: bytes) -> dict[str, list[tuple[int, int]]]:
    """Every kernel an image declares -> its parameter layout (cubins first: they are what the driver runs; PTX for
    kernels only PTX has)."""
    cubins, ptxs = fatbin_entries(image)
    out: dict[str, list[tuple[int, int]]] = {}
    for elf in cubins:
        for name, params in elf_kernels(elf).items():
            out.setdefault(name, params)
    for ptx in ptxs:
        for name, params in ptx_kernels(ptx).items():
            out.setdefault(name, params)
    return out


def image_globals(image: bytes) -> list[str]:
    """Names of the data objects of an image's cubins, each once; of its PTX when it has no cubin (the driver compiles
    that PTX for the device)."""
    cubins, ptxs = fatbin_entries(image)
    if cubins:
        return list(dict.fromkeys(n for elf in cubins for n in elf_global_names(elf)))
    return list(dict.fromkeys(n for ptx in ptxs for n in ptx_globals(ptx)))
