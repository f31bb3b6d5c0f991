"""Managed and mapped memory on the daemon: which ranges of a session are managed, and which of their bytes changed.

The client keeps a host copy of every managed range at the same address (docs/architecture.md, "Managed and mapped
memory"). It pushes the bytes the host changed (MANAGED_PUSH) before device work, and after a synchronization asks
which bytes the device changed (MANAGED_DIRTY). To answer that without tracking every kernel store, the daemon keeps
a digest of each page of each range as the client last saw it ("known") and compares it with the page's digest now.

The digest is NH (the universal hash of UMAC) with two independent random keys: for 32-bit words m and key k,
sum over word pairs of (m[2i] + k[2i] mod 2^32) * (m[2i+1] + k[2i+1] mod 2^32) mod 2^64. For any two different
pages the chance that one key collides is at most 2^-32, independently of the data (the keys are drawn at random per
daemon and never leave it), so a changed page goes unnoticed with probability at most 2^-64. It vectorizes in NumPy,
which a cryptographic hash per 4 KiB page would not (hashlib costs a Python call per page).
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pyvgpu.protocol import MANAGED_CONFLICT_ERROR, MANAGED_CONFLICT_WORD, MANAGED_RUN_HEADER, MAX_MANAGED_RUNS
from pyvgpu_daemon.errors import CudaError

PAGE = 4096                          # digest granularity (independent of the client's page size)
CHUNK = 16 << 20                     # bytes digested at a time (bounds the temporaries)
_RUN = struct.Struct(MANAGED_RUN_HEADER)
_KEYS = np.random.default_rng().integers(0, 1 << 32, size=(2, PAGE // 4), dtype=np.uint32)


def digest_pages(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """(npages, 2) uint64 digests of data split into PAGE-byte pages (a short last page is zero-padded)."""
    buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    n = -(-buf.size // PAGE)
    if buf.size != n * PAGE:
        padded = np.zeros(n * PAGE, np.uint8)
        padded[:buf.size] = buf
        buf = padded
    words = buf.view(np.uint32).reshape(n, PAGE // 4)
    out = np.empty((n, 2), np.uint64)
    summed = np.empty_like(words)
    lo = np.empty((n, PAGE // 8), np.uint64)
    hi = np.empty_like(lo)
    for j in range(2):
        np.add(words, _KEYS[j], out=summed)                # uint32 addition wraps, as NH wants
        pairs = summed.view(np.uint64)                    # word pairs (little endian: even word in the low half)
        np.bitwise_and(pairs, np.uint64(0xFFFFFFFF), out=lo)
        np.right_shift(pairs, np.uint64(32), out=hi)
        np.multiply(lo, hi, out=lo)                       # uint64 arithmetic wraps mod 2^64
        out[:, j] = np.add.reduce(lo, axis=1, dtype=np.uint64)
    return out


def zero_digests(size: int) -> np.ndarray:
    """Digests of `size` zero bytes (a fresh, zero-filled managed allocation)."""
    return np.repeat(digest_pages(bytes(PAGE)), -(-size // PAGE), axis=0)


@dataclass
class ManagedRange:
    start: int
    size: int
    known: np.ndarray                # (npages, 2) digests of the pages as the client last saw them
    unknown: np.ndarray              # (npages,) bool: the client has not seen this page yet

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def npages(self) -> int:
        return -(-self.size // PAGE)

    def page_span(self, first: int, count: int) -> tuple[int, int]:
        """(address, length) of pages [first, first+count) clipped to the range."""
        a = self.start + first * PAGE
        return a, min(self.end, a + count * PAGE) - a


# Reads `size` bytes at `addr` from the device (the context's memcpy_dtoh).
Reader = Callable[[int, int], bytes]


def digest_span(read: Reader, rng: ManagedRange, first: int, count: int) -> np.ndarray:
    parts = []
    step = CHUNK // PAGE
    for p in range(first, first + count, step):
        addr, length = rng.page_span(p, min(step, first + count - p))
        parts.append(digest_pages(read(addr, length)))
    return np.concatenate(parts) if parts else np.empty((0, 2), np.uint64)


@dataclass
class ManagedTable:
    """The managed ranges of one session on one device, by start address."""
    ranges: dict[int, ManagedRange] = field(default_factory=dict)
    _starts: list[int] = field(default_factory=list)

    def add(self, start: int, size: int, known: np.ndarray | None) -> ManagedRange:
        if len(self.ranges) >= MAX_MANAGED_RUNS:
            raise CudaError("cudaErrorMemoryAllocation",
                            f"more than {MAX_MANAGED_RUNS} managed ranges on one device")
        if self.find(start, max(size, 1)) is not None or self.find(start + size - 1, 1) is not None:
            raise CudaError("cudaErrorInvalidValue", f"[{start:#x}, +{size}) is already managed")
        npages = -(-size // PAGE)
        rng = ManagedRange(start, size, known if known is not None else np.zeros((npages, 2), np.uint64),
                           np.full(npages, known is None))
        self.ranges[start] = rng
        bisect.insort(self._starts, start)
        return rng

    def remove(self, start: int) -> None:
        if self.ranges.pop(start, None) is not None:
            self._starts.pop(bisect.bisect_left(self._starts, start))

    def find(self, addr: int, size: int) -> ManagedRange | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            rng = self.ranges[self._starts[i]]
            if addr + size <= rng.end:
                return rng
        return None

    def clear(self) -> None:
        self.ranges.clear()
        self._starts.clear()

    @property
    def nbytes(self) -> int:
        return sum(r.size for r in self.ranges.values())


@dataclass(frozen=True)
class Run:
    """One run of a MANAGED_PUSH: the host's bytes at `addr` and the same bytes as it last saw them from the device."""
    addr: int
    new: memoryview
    old: memoryview


def parse_runs(payload: bytes | bytearray | memoryview) -> list[Run]:
    """MANAGED_PUSH payload → runs; malformed → cudaErrorInvalidValue."""
    mv = memoryview(payload).cast("B")
    runs = []
    pos = 0
    while pos < len(mv):
        if pos + _RUN.size > len(mv):
            raise CudaError("cudaErrorInvalidValue", "managed push: truncated run header")
        addr, length = _RUN.unpack_from(mv, pos)
        pos += _RUN.size
        if length == 0 or pos + 2 * length > len(mv):
            raise CudaError("cudaErrorInvalidValue", f"managed push: run of {length} B at {addr:#x} is malformed")
        runs.append(Run(addr, mv[pos:pos + length], mv[pos + length:pos + 2 * length]))
        pos += 2 * length
    return runs


def conflict(addr: int, size: int, why: str) -> CudaError:
    """The sticky error of bytes both sides changed: the program's result would depend on which side won."""
    return CudaError(MANAGED_CONFLICT_ERROR, f"managed memory [{addr:#x}, +{size}): {why}; pyvgpu cannot know the "
                     "right value (concurrent host and device updates of the same bytes)", sticky=True)


WORD = MANAGED_CONFLICT_WORD          # conflicts are per aligned word (protocol.py)


def words_hit(addr: int, mask: np.ndarray) -> np.ndarray:
    """Per aligned WORD-byte word covering [addr, addr + mask.size): whether mask is set for any of its bytes."""
    lead = addr % WORD
    size = -(-(lead + mask.size) // WORD) * WORD
    if lead == 0 and size == mask.size and mask.flags.c_contiguous:
        padded = mask
    else:
        padded = np.zeros(size, bool)
        padded[lead:lead + mask.size] = mask
    return padded.view(np.dtype(f"u{WORD}")) != 0          # a word's bytes are 0 or 1: any of them set


@dataclass
class _Piece:
    """Runs of one range over consecutive whole pages [first, first + count), read, merged and written as one span."""
    first: int
    count: int
    runs: list[Run]


def _pieces(rng: ManagedRange, runs: list[Run]) -> list[_Piece]:
    """The runs of `rng` (sorted by address) grouped by the pages they touch: runs on the same or adjacent pages share
    a piece, up to CHUNK bytes (bounding the temporaries), never cutting a page two runs share."""
    out: list[_Piece] = []
    for run in runs:
        p0 = (run.addr - rng.start) // PAGE
        p1 = (run.addr + len(run.new) - 1 - rng.start) // PAGE
        last = out[-1] if out else None
        if last and (p0 < last.first + last.count or (p0 == last.first + last.count and last.count * PAGE < CHUNK)):
            last.count = max(last.count, p1 - last.first + 1)
            last.runs.append(run)
        else:
            out.append(_Piece(p0, p1 - p0 + 1, [run]))
    return out


def push(table: ManagedTable, read: Reader, write: Callable[[int, Any], None], payload: bytes) -> int:
    """Applies the host's changed bytes; a page whose device copy was still what the client knew becomes known in
    its new state, so it is not sent back; one the device changed meanwhile is reported by the next dirty scan.
    Bytes the device changed too since the host last saw them: nothing of the push is written, the sticky
    MANAGED_CONFLICT_ERROR names the first such run. The pages a push touches are read and written as spans (the
    device's bytes where the host changed nothing), on this device's worker: a peer device's kernel writing the same
    span at that moment could lose a byte. → bytes the host changed."""
    runs = parse_runs(payload)
    by_range: dict[int, list[Run]] = {}
    for run in runs:
        rng = table.find(run.addr, len(run.new))
        if rng is None:
            raise CudaError("cudaErrorInvalidValue",
                            f"managed push: [{run.addr:#x}, +{len(run.new)}) is not inside a managed range")
        by_range.setdefault(rng.start, []).append(run)
    plans: list[tuple[ManagedRange, _Piece, int, np.ndarray, np.ndarray]] = []
    for start, rruns in by_range.items():                  # every run checked before anything is written
        rng = table.ranges[start]
        for piece in _pieces(rng, sorted(rruns, key=lambda r: r.addr)):
            addr, length = rng.page_span(piece.first, piece.count)
            cur = np.frombuffer(bytes(read(addr, length)), np.uint8)
            new, old = cur.copy(), cur.copy()          # outside the runs both are the device's: nothing changed
            for run in piece.runs:
                o = run.addr - addr
                new[o:o + len(run.new)] = np.frombuffer(run.new, np.uint8)
                old[o:o + len(run.new)] = np.frombuffer(run.old, np.uint8)
            by_host = new != old
            both = words_hit(addr, by_host) & words_hit(addr, cur != old)
            if both.any():
                w = np.flatnonzero(both)
                lo, hi = max(addr, (addr // WORD + int(w[0])) * WORD), (addr // WORD + int(w[-1]) + 1) * WORD
                raise conflict(lo, hi - lo, "the host pushed words the device changed since the last synchronization")
            plans.append((rng, piece, addr, cur, np.where(by_host, new, cur)))
    for rng, piece, addr, cur, out in plans:
        f, n = piece.first, piece.count
        before, after = digest_pages(cur), digest_pages(out)
        write(addr, out)
        same = (before == rng.known[f:f + n]).all(axis=1) & ~rng.unknown[f:f + n]
        rng.known[f:f + n][same] = after[same]
    return sum(len(r.new) for r in runs)


def _page_spans(pages: list[int]) -> list[tuple[int, int]]:
    """Sorted page numbers → [(first, count)] of consecutive runs."""
    spans: list[tuple[int, int]] = []
    for p in pages:
        if spans and spans[-1][0] + spans[-1][1] == p:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((p, 1))
    return spans


def dirty(table: ManagedTable, read: Reader) -> list[list[int]]:
    """[[address, length]...] of the bytes of every range that changed since the client saw them (the client will
    fetch them now, so they become known). At most MAX_MANAGED_RUNS runs: the closest runs of one range are merged
    to fit (a table never holds more ranges than that)."""
    runs: list[tuple[int, list[int]]] = []           # (range start, [address, length])
    for start in sorted(table.ranges):
        rng = table.ranges[start]
        cur = digest_span(read, rng, 0, rng.npages)
        changed = (cur != rng.known).any(axis=1) | rng.unknown
        rng.known = cur
        rng.unknown[:] = False
        for f, n in _page_spans(np.flatnonzero(changed).tolist()):
            runs.append((start, list(rng.page_span(f, n))))
    excess = len(runs) - MAX_MANAGED_RUNS
    if excess > 0:
        same = [i for i in range(len(runs) - 1) if runs[i][0] == runs[i + 1][0]]
        same.sort(key=lambda i: runs[i + 1][1][0] - sum(runs[i][1]))
        merge = set(same[:excess])
        merged: list[tuple[int, list[int]]] = []
        for i, (start, r) in enumerate(runs):
            if merged and (i - 1) in merge:
                merged[-1][1][1] = r[0] + r[1] - merged[-1][1][0]
            else:
                merged.append((start, list(r)))
        runs = merged
    return [r for _, r in runs]
