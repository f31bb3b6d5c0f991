"""The daemon process's memory tuning: glibc's malloc and Python's cyclic garbage collector.

The emulator's NumPy temporaries are large (a 1M-lane float64 vector is 8 MB). With glibc's defaults every one
above the (dynamic) mmap threshold is mmap'd and unmapped again, and freed heap tops are trimmed back to the
kernel, so each instruction pays page faults on fresh zero pages. Raising M_MMAP_THRESHOLD and M_TRIM_THRESHOLD
keeps those buffers in the heap and reuses them (fma.rn.f32 over 1M lanes: 6 ms → 2.9 ms).

Best effort: on a libc without mallopt (musl, macOS) nothing changes and the reason is logged at debug level.

The collector: a stream of small ops allocates a few container objects per op (argument lists, FastOps, tags), so
with CPython's default young-generation threshold (700) a collection runs every ~100 ops, and every tenth of those
walks the older generation too, whose objects (the modules, the spec, the backend's tables and plans, each session's
state) are almost all there for good. tune_gc freezes what exists once the daemon is set up (gc.freeze: never
scanned again, never freed) and collects the young generation every GC_YOUNG allocations: daemon CPU per op of
a framework's step 7.0 → 6.4 µs, of launches, memsets and event records 5.7 → 5.5 µs (medians of 4 side by side,
bench/README.md, issue 22 part 5). Reference counting frees everything that is not in a cycle at once, so only
cyclic garbage waits longer, and the older generations keep CPython's ratios.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger("pyvgpu.daemon")

M_TRIM_THRESHOLD = -1        # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20    # glibc's ceiling for this setting on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 256 << 20   # freed heap kept for reuse before it is returned to the kernel

GC_YOUNG = 20000             # allocations between young collections (CPython's default 700)

_applied: bool | None = None


def tune_malloc(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Raise glibc's mmap and trim thresholds once per process. → True when both settings took effect."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        gnu_get_libc_version = libc.gnu_get_libc_version     # glibc only: other libcs differ in mallopt's codes
    except (OSError, AttributeError) as exc:
        log.debug("malloc tuning skipped: not glibc (%s)", exc)
        return False
    gnu_get_libc_version.restype = ctypes.c_char_p
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok_mmap = mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    ok_trim = mallopt(M_TRIM_THRESHOLD, int(trim_threshold)) == 1
    _applied = ok_mmap and ok_trim
    log.debug("glibc %s malloc tuning: mmap threshold %d (%s), trim threshold %d (%s)",
              gnu_get_libc_version().decode(), mmap_threshold, "ok" if ok_mmap else "refused",
              trim_threshold, "ok" if ok_trim else "refused")
    return _applied


def tune_gc(young: int = GC_YOUNG) -> None:
    """Once the daemon is set up: freeze what exists (never garbage) and make young collections rarer; the older
    generations keep CPython's ratios (a collection of each every 10 of the one below)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young, older, oldest)
    log.debug("gc: %d objects frozen, young collections every %d allocations", gc.get_freeze_count(), young)
