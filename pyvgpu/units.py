"""Byte sizes as people write them: `parse_size('1.5G')` for options and environment variables, `format_bytes`
for output. Binary units throughout (K = 1024)."""
from __future__ import annotations


def parse_size(text: str | int) -> int:
    """'4G', '512M', '1.5GiB', '1048576' → bytes; ValueError for anything else or a size that is not positive."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMGT" and t[-1:] else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise ValueError(f"bad size {text!r}: expected e.g. 512M, 2G or a number of bytes") from None
    if value <= 0:
        raise ValueError(f"bad size {text!r}: must be positive")
    return value


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
