"""Device printf (vprintf) formatted host-side.

nvcc packs printf's arguments into a buffer at natural alignment (int/unsigned/char: 4 bytes, long/long long and
pointers: 8, double: 8 — floats are promoted to double). Each conversion of the format string consumes the next
argument from that buffer; the text is formatted with C semantics for the common conversions.

The chunk provides read_cstring and read_bytes (runtime/spaces.py).
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
    """One lane's printf: (the formatted text, the number of arguments it consumed)."""
    fmt = chunk.read_cstring(lane, fmt_addr)
    args = _Args(chunk, lane, args_addr)
    out = bytearray()
    pos = 0
    for m in _SPEC.finditer(fmt):
        out += fmt[pos:m.start()]
        pos = m.end()
        out += _conversion(m, args)
    out += fmt[pos:]
    return bytes(out), args.count


class _Args:
    """The argument buffer of one printf call, read in order at natural alignment."""

    def __init__(self, chunk, lane: int, addr: int) -> None:
        self.chunk, self.lane, self.addr = chunk, lane, addr
        self.off = 0
        self.count = 0

    def take(self, size: int) -> bytes:
        self.off = (self.off + size - 1) // size * size
        if self.addr == 0:
            raise CudaError("cudaErrorLaunchFailure", "printf: missing argument buffer")
        raw = self.chunk.read_bytes(self.lane, self.addr + self.off, size)
        self.off += size
        return raw


def _conversion(m: re.Match, args: _Args) -> bytes:
    flags, width, prec, length, conv = (x.decode() if x is not None else None for x in m.groups())
    if conv == "%":
        return b"%"
    if width == "*":
        width = struct.unpack("<i", args.take(4))[0]
        args.count += 1
    if prec == "*":
        prec = struct.unpack("<i", args.take(4))[0]
        args.count += 1
    if prec == "":
        prec = 0
    w = int(width) if width is not None else None
    if w is not None and w < 0:
        flags += "-"
        w = -w
    p = int(prec) if prec is not None else None
    if p is not None and p < 0:
        p = None
    args.count += 1
    if conv in "diouxXc":
        return _fmt_int(flags, w, p, length, conv, args)
    if conv in "eEfFgGaA":
        return _fmt_float(flags, w, p, conv, args)
    if conv == "s":
        return _fmt_str(flags, w, p, args)
    if conv == "p":
        return _fmt_ptr(flags, w, args)
    args.take(8)             # %n: consumes its pointer, writes nothing
    return b""


def _fmt_int(flags: str, w, p, length, conv: str, args: _Args) -> bytes:
    wide = length in ("l", "ll", "j", "z", "t")
    raw = args.take(8 if wide else 4)
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
    return text.encode("latin-1")


def _fmt_float(flags: str, w, p, conv: str, args: _Args) -> bytes:
    v = struct.unpack("<d", args.take(8))[0]
    if conv in "aA":
        text = float.hex(v)
    elif v != v or v in (float("inf"), float("-inf")):
        s = ("-" if str(v).startswith("-") else ("+" if "+" in flags else "")) + ("nan" if v != v else "inf")
        if conv.isupper():
            s = s.upper()
        text = s.rjust(w) if w and "-" not in flags else (s.ljust(w) if w else s)
    else:
        text = _c_format(flags, w, p, conv, v)
    return text.encode("latin-1")


def _fmt_str(flags: str, w, p, args: _Args) -> bytes:
    ptr = int.from_bytes(args.take(8), "little")
    s = b"(null)" if ptr == 0 else args.chunk.read_cstring(args.lane, ptr)
    if p is not None:
        s = s[:p]
    if w and len(s) < w:
        s = s.ljust(w) if "-" in flags else s.rjust(w)
    return s


def _fmt_ptr(flags: str, w, args: _Args) -> bytes:
    ptr = int.from_bytes(args.take(8), "little")
    text = "(nil)" if ptr == 0 else f"0x{ptr:x}"
    if w:
        text = text.ljust(w) if "-" in flags else text.rjust(w)
    return text.encode()
