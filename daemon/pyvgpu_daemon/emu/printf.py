"""Device printf (vprintf) formatted host-side.

nvcc packs printf's arguments into a buffer at natural alignment (int/unsigned/char: 4 bytes, long/long long and
pointers: 8, double: 8 — floats are promoted to double). Each conversion of the format string consumes the next
argument from that buffer; the text is formatted with C semantics for the common conversions.
"""
from __future__ import annotations

import re
import struct

from pyvgpu_daemon.errors import CudaError

_SPEC = re.compile(rb"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?(hh|h|ll|l|j|z|t|L)?([diouxXeEfFgGaAcspn%])")


def _c_format(flags: str, width, prec, conv: str, value) -> str:
    spec = "%" + flags + ("" if width is None else str(width)) + ("" if prec is None else "." + str(prec)) + conv
    return spec % value


def _pad(text: str, flags: str, w) -> str:
    if not w or len(text) >= w:
        return text
    if "-" in flags:
        return text.ljust(w)
    if "0" in flags:
        return text.zfill(w)
    return text.rjust(w)


def format_printf(chunk, lane: int, fmt_addr: int, args_addr: int) -> tuple[bytes, int]:
    fmt = chunk.read_cstring(lane, fmt_addr)
    out = bytearray()
    pos = 0
    argoff = 0
    nargs = 0

    def take(size: int) -> bytes:
        nonlocal argoff
        argoff = (argoff + size - 1) // size * size
        if args_addr == 0:
            raise CudaError("cudaErrorLaunchFailure", "printf: missing argument buffer")
        raw = chunk.read_bytes(lane, args_addr + argoff, size)
        argoff += size
        return raw

    for m in _SPEC.finditer(fmt):
        out += fmt[pos:m.start()]
        pos = m.end()
        flags, width, prec, length, conv = (x.decode() if x is not None else None for x in m.groups())
        if conv == "%":
            out += b"%"
            continue
        if width == "*":
            width = struct.unpack("<i", take(4))[0]
            nargs += 1
        if prec == "*":
            prec = struct.unpack("<i", take(4))[0]
            nargs += 1
        if prec == "":
            prec = 0
        w = int(width) if width is not None else None
        if w is not None and w < 0:
            flags += "-"
            w = -w
        p = int(prec) if prec is not None else None
        if p is not None and p < 0:
            p = None
        nargs += 1
        if conv in "diouxXc":
            wide = length in ("l", "ll", "j", "z", "t")
            raw = take(8 if wide else 4)
            signed = conv in "di"
            v = int.from_bytes(raw, "little", signed=signed)
            if length == "h":
                v = (v & 0xFFFF) - ((v & 0x8000) << 1 if signed else 0)
            elif length == "hh":
                v = (v & 0xFF) - ((v & 0x80) << 1 if signed else 0)
            if conv == "c":
                text = _c_format(flags, w, None, "c", chr(v & 0xFF))
            elif conv == "o" and "#" in flags:
                # C's alternate octal form is a leading 0 (Python would write 0o)
                digits = _c_format("", None, p, "o", v)
                if not digits.startswith("0"):
                    digits = "0" + digits
                text = _pad(digits, flags, w)
            else:
                c = "d" if conv in "diu" else conv
                fl = flags.replace("#", "") if c == "d" or v == 0 else flags   # C: %#x of 0 is "0"
                text = _c_format(fl, w, p, c, v)
            out += text.encode("latin-1")
        elif conv in "eEfFgGaA":
            v = struct.unpack("<d", take(8))[0]
            if conv in "aA":
                text = float.hex(v)
            else:
                if v != v or v in (float("inf"), float("-inf")):
                    s = ("-" if str(v).startswith("-") else ("+" if "+" in flags else "")) + \
                        ("nan" if v != v else "inf")
                    if conv.isupper():
                        s = s.upper()
                    text = s.rjust(w) if w and "-" not in flags else (s.ljust(w) if w else s)
                else:
                    text = _c_format(flags, w, p, conv, v)
            out += text.encode("latin-1")
        elif conv == "s":
            ptr = int.from_bytes(take(8), "little")
            s = b"(null)" if ptr == 0 else chunk.read_cstring(lane, ptr)
            if p is not None:
                s = s[:p]
            if w and len(s) < w:
                s = s.ljust(w) if "-" in flags else s.rjust(w)
            out += s
        elif conv == "p":
            ptr = int.from_bytes(take(8), "little")
            text = "(nil)" if ptr == 0 else f"0x{ptr:x}"
            if w:
                text = text.ljust(w) if "-" in flags else text.rjust(w)
            out += text.encode()
        elif conv == "n":
            take(8)
    out += fmt[pos:]
    return bytes(out), nargs
