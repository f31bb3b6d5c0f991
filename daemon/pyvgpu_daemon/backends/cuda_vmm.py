"""Device memory of one session on one real GPU inside the session's address window, so that pointers from
different GPU hosts never collide (each host's driver numbers its own address space).

The client numbers the windows: device r of a session whose hello said va_base has window index
(va_base + r * VA_WINDOW_BYTES) / VA_WINDOW_BYTES, unique across the client's hosts (csrc/core/hostmap.c). Where a
window lies on a GPU is the backend's choice among CANDIDATE_OFFSETS added to its index's address (window_candidates):
NVIDIA's driver 580 on an H100 honoured no hint at 1 TiB (GPU runs 2 and 3); NVIDIA DALI's VMM resource hinted from
17 TiB on (PR NVIDIA/DALI#3128, "allocation with a hint fails on some drivers"). So the first candidate is 16 TiB
above the index's address, the next 48 TiB above, the last the index's address itself (the emulator's). A candidate
set never overlaps another index's (up to 16 windows a client), and all lie in x86-64's 47-bit user space. The backend learns
per daemon which candidate the driver honours (WindowSpaces: the honoured one is tried first, a refused one no more),
and tools/gpu_probes/gpu_probe_va_hints.py asks a GPU host's driver directly. Where it honours none, ranges go where
the driver puts them (logged once per daemon and device, with what the driver answered): the client then keeps two
hosts' ranges apart itself (csrc/core/memory.c, pv_malloc_unique).

In the window the backend reserves no range smaller than MIN_RESERVE (64 MiB). GPU run 4 (H100, driver 580): in a
fresh process the driver gave 64 MiB ranges at every hint from 2 to 120 TiB (17 and 49 TiB included), while the
daemon, which reserved one granule (2 MiB) at a time, got none of its hints at 17, 49 or 1 TiB and every such range
at 0x7f...; in GPU run 2 the ranges of the bandwidth benchmark's large buffers landed at 1 TiB + 64 MiB, beside
their hint, the 2 MiB ones at 0x7f.... NVIDIA documents the address as a hint only; what the runs show is a driver
that places small ranges where it likes and large ones where asked (NVIDIA DALI also reserves gigabytes at a time
and maps blocks inside). So device memory is mapped inside slabs: ranges of at least MIN_RESERVE bytes reserved at
window addresses, each allocation backed with cuMemCreate and mapped with cuMemMap at a free place of a slab of its
session (a slab goes back when nothing is mapped in it, but for the session's largest empty window slab, kept until
the session ends: a loop of allocations and frees would else reserve a slab each time). Where the driver honours no
window place, each allocation has a range of its own where the driver puts it (another host's driver may hand out
the same addresses: the client's next try must get a range of its own). A program's own reservation (VMM_RESERVE) smaller than MIN_RESERVE without a
hint, or at a hint free in one of its session's slabs, is a stretch of a slab; else it is a range of its own:
without a hint, in the window; with one, of the program's size and, where the driver does not honour that, of
MIN_RESERVE bytes at the same hint, then RETRY_GROWTH times that (the misplaced ranges held meanwhile: the window's
retry policy, _hint_rounds, without its 1 GiB cap). The program sees its own size; the driver frees the whole.

Every mapping is made read-write for this device with cuMemSetAccess; freeing unmaps and releases it. The
granularity of such mappings is 2 MiB on current GPUs, so small allocations (up to half a granule) are carved out
of one-granule arenas (512-byte aligned, first fit, neighbours coalesced), and an arena goes back as soon as it is
empty; larger ones get a mapping of their own, rounded up to the granularity. The session is charged its requested
bytes (the handlers' quota check), as for cuMemAlloc; what rounding adds is bounded by one granule per large
allocation and by the live small allocations' arenas (address space costs no device memory).

Window addresses are handed out lowest first (freed ranges are reused); the window holds VA_WINDOW_BYTES. All
sessions of one daemon that use the same window share one WindowSpace (WindowSpaces, held by the backend): their
contexts live in one process, whose address space is one, so a real driver refuses a hint another session's range
already covers. A hint the driver still does not honour (its own ranges sit there) is skipped, growing steps ahead,
a few times, and each retry asks for a range 4 times larger (up to 1 GiB) at the next 1 GiB boundary while the range
the driver placed elsewhere stays held: NVIDIA's driver 580 on an H200 (GPU run 5) put every 64 MiB range at one
address of its own whatever its hint during a JAX session, as if it filled a hole among its own ranges first, and the
daemon, which freed each misplaced range at once, gave up all windows after one such round. A candidate counts as
refused (tried no more) after REFUSALS rounds in a row without a range; a range at it ends the count.
"""
from __future__ import annotations

import bisect
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from pyvgpu.protocol import VA_WINDOW_BYTES
from pyvgpu_daemon.errors import CudaError

log = logging.getLogger("pyvgpu.daemon")

TIB = 1 << 40
CANDIDATE_OFFSETS = (16 * TIB, 48 * TIB, 0)     # where window index k may lie: k TiB + each (module docstring)
USER_SPACE_END = 1 << 47                        # x86-64's user address space (4-level page tables)


def window_candidates(window: int) -> list[int]:
    """The addresses a window (the client's va_base + ordinal * VA_WINDOW_BYTES) may lie at on a GPU, in order."""
    return [window + off for off in CANDIDATE_OFFSETS if window + off + VA_WINDOW_BYTES <= USER_SPACE_END]

# Small allocations' alignment: the device's textureAlignment (512 on current GPUs), which a pointer a texture object
# reads must have (cudaResourceTypeLinear/Pitch2D, cudaErrorInvalidValue otherwise) and which programs take for granted
# of cudaMalloc's pointers. With 256, api_texture's tex1Dfetch texture over its fifth small allocation failed on an
# H100 (real-GPU run 3, api_texture.cu's cudaCreateTextureObject over linear memory: cudaErrorInvalidValue).
ALIGN = 512
HINT_TRIES = 6           # window addresses tried before the driver's own choice is taken
SKIP_STEP = 64 << 20     # the first skip past a hint the driver refused (4 times larger after each refusal)
MIN_RESERVE = 64 << 20   # the smallest range the backend reserves (module docstring: GPU runs 2 and 4)
RETRY_GROWTH = 4         # a range the driver placed elsewhere is asked for again this many times larger ...
MAX_RETRY = 1 << 30      # ... up to 1 GiB (honoured at 17 TiB on an H200: GPU run 5) ...
RETRY_ALIGN = 1 << 30    # ... at the next free 1 GiB boundary of the window
REFUSALS = 3             # rounds in a row without a range of a window place before it is given up for the daemon
PROGRAM_TRIES = 3        # tries at a program's own hint (its size, MIN_RESERVE, RETRY_GROWTH times that)
Check = Callable[[Any, str], Any]


@dataclass
class WindowSpace:
    """Free address ranges of a window, lowest first."""
    base: int
    size: int = VA_WINDOW_BYTES
    free: list[tuple[int, int]] = field(default_factory=list)      # (start, length), sorted, coalesced
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)   # sessions run on worker threads

    def __post_init__(self) -> None:
        self.free = [(self.base, self.size)]

    def take(self, size: int, align: int) -> int:
        """The lowest `align`-aligned free range of `size` bytes (removed from the free list); 0 when none."""
        with self.lock:
            return self._take(size, align)

    def _take(self, size: int, align: int) -> int:
        for i, (start, length) in enumerate(self.free):
            addr = -(-start // align) * align
            if addr + size <= start + length:
                del self.free[i]
                if addr > start:
                    self.free.insert(i, (start, addr - start))
                    i += 1
                if addr + size < start + length:
                    self.free.insert(i, (addr + size, start + length - addr - size))
                return addr
        return 0

    def claim(self, addr: int, size: int) -> bool:
        """Takes [addr, addr+size) out of the free list when it is all free (a caller's own address)."""
        with self.lock:
            return self._claim(addr, size)

    def _claim(self, addr: int, size: int) -> bool:
        i = bisect.bisect_right(self.free, (addr, float("inf"))) - 1
        if i < 0 or addr + size > self.free[i][0] + self.free[i][1]:
            return False
        start, length = self.free.pop(i)
        if addr + size < start + length:
            self.free.insert(i, (addr + size, start + length - addr - size))
        if addr > start:
            self.free.insert(i, (start, addr - start))
        return True

    def give(self, addr: int, size: int) -> None:
        """Returns [addr, addr+size) (taken earlier) to the free list, merging with its neighbours."""
        if not self.base <= addr < self.base + self.size:
            return                                   # a range the driver placed outside the window
        with self.lock:
            self._give(addr, size)

    def _give(self, addr: int, size: int) -> None:
        i = bisect.bisect_left(self.free, (addr, 0))
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == addr:
            i -= 1
            addr, size = self.free[i][0], self.free[i][1] + size
            del self.free[i]
        if i < len(self.free) and addr + size == self.free[i][0]:
            size += self.free[i][1]
            del self.free[i]
        self.free.insert(i, (addr, size))


@dataclass
class WindowSpaces:
    """The backend's WindowSpace per window address, shared by every session using it (one process, one address
    space), and what the daemon learnt of its driver: which window candidate it honours (tried first), which it
    refused (tried no more), whether it was told that ranges lie outside every window."""
    spaces: dict[int, WindowSpace] = field(default_factory=dict)
    order: list[int] = field(default_factory=lambda: list(range(len(CANDIDATE_OFFSETS))))
    refused: dict[int, int] = field(default_factory=dict)    # candidate -> rounds in a row it gave no range
    told: set[int] = field(default_factory=set)          # devices warned that ranges lie outside the windows
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def of(self, base: int) -> WindowSpace:
        with self.lock:
            return self._of(base)

    def _of(self, base: int) -> WindowSpace:
        return self.spaces.setdefault(base, WindowSpace(base))

    def candidates(self, window: int) -> list[tuple[int, WindowSpace]]:
        """(candidate, space) of `window` to try, the honoured candidate first, refused ones left out."""
        bases = window_candidates(window)
        with self.lock:
            return [(i, self._of(bases[i])) for i in self.order
                    if i < len(bases) and self.refused.get(i, 0) < REFUSALS]

    def holding(self, window: int, addr: int) -> WindowSpace | None:
        """The candidate space of `window` that holds addr, or None."""
        for base in window_candidates(window):
            if base <= addr < base + VA_WINDOW_BYTES:
                return self.of(base)
        return None

    def honoured(self, candidate: int, ordinal: int, addr: int) -> None:
        with self.lock:
            self.refused.pop(candidate, None)
            if self.order[0] == candidate:
                return
            self.order.remove(candidate)
            self.order.insert(0, candidate)
        log.info("device %d: the driver honours window addresses %d TiB above the window index's (%#x): tried "
                 "first from now on", ordinal, CANDIDATE_OFFSETS[candidate] // TIB, addr)

    def refuse(self, candidate: int, ordinal: int, addr: int, answer: str) -> None:
        """A round of HINT_TRIES gave no range at this candidate; REFUSALS such rounds in a row give it up (one
        refused hint does not: an H200's driver placed 64 MiB ranges elsewhere at every hint for a while, GPU run 5)."""
        with self.lock:
            rounds = self.refused[candidate] = self.refused.get(candidate, 0) + 1
        then = "not tried again" if rounds >= REFUSALS else f"tried again on the next range ({rounds} of {REFUSALS})"
        log.info("device %d: the driver refused window addresses %d TiB above the window index's (%#x; %s): %s",
                 ordinal, CANDIDATE_OFFSETS[candidate] // TIB, addr, answer, then)

    def outside(self, ordinal: int, ptr: int, size: int, window: int) -> None:
        with self.lock:
            if ordinal in self.told:
                return
            self.told.add(ordinal)
        log.warning("device %d: the driver placed a range of %s at %#x, not in the window at any of %s: pointers "
                    "there may collide with another GPU host's (the client keeps them apart: said once)", ordinal,
                    size_text(size), ptr, ", ".join(hex(b) for b in window_candidates(window)))


def _grown(want: int, cap: int = 0) -> int:
    """The bytes of the next try after a hint the driver did not honour: MIN_RESERVE, then RETRY_GROWTH times more
    (up to `cap` where one is given, never less than before)."""
    if want < MIN_RESERVE:
        return MIN_RESERVE
    grown = want * RETRY_GROWTH
    return max(want, min(grown, cap)) if cap else grown


def size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


@dataclass
class Chunk:
    """One mapped range: reserved, backed by one physical allocation, read-write for its device."""
    addr: int
    size: int
    handle: Any
    free: list[tuple[int, int]] = field(default_factory=list)     # an arena's free spans (offset, length)
    live: dict[int, int] = field(default_factory=dict)            # an arena's allocations: address -> length

    def carve(self, size: int) -> int:
        need = -(-max(size, 1) // ALIGN) * ALIGN
        for i, (off, length) in enumerate(self.free):
            if length >= need:
                self.free[i:i + 1] = [(off + need, length - need)] if length > need else []
                self.live[self.addr + off] = need
                return self.addr + off
        return 0

    def uncarve(self, ptr: int) -> None:
        off, length = ptr - self.addr, self.live.pop(ptr)
        i = bisect.bisect_left(self.free, (off, 0))
        if i > 0 and sum(self.free[i - 1]) == off:
            i -= 1
            off, length = self.free[i][0], self.free[i][1] + length
            del self.free[i]
        if i < len(self.free) and off + length == self.free[i][0]:
            length += self.free[i][1]
            del self.free[i]
        self.free.insert(i, (off, length))


class WindowMemory:
    """cudaMalloc, cudaFree and the managed allocations of one session on one real GPU, inside its window."""

    def __init__(self, drv: Any, ordinal: int, window: int, check: Check, spaces: WindowSpaces | None = None) -> None:
        self.drv = drv
        self.ordinal = ordinal
        self.check = check
        self.window = window                          # the client's window address (window_candidates)
        self.spaces = spaces or WindowSpaces()
        self.gran = 0
        self.arenas: list[Chunk] = []                 # sorted by address
        self._arena_bases: list[int] = []
        self.chunks: dict[int, Chunk] = {}            # every mapped range by start (arenas too)
        self.slabs: dict[int, WindowSpace] = {}       # the slabs' free addresses by slab start
        self._slab_bases: list[int] = []              # sorted
        self.reserved: dict[int, int] = {}            # every range reserved with the driver: start -> its size
        self.in_slabs: dict[int, int] = {}            # programs' ranges inside slabs: start -> size
        self.taken: dict[int, tuple[int, WindowSpace]] = {}   # ranges holding window addresses: start -> size, space

    # ------------------------------------------------------------------ the driver's calls
    def _location(self, obj: Any) -> None:
        obj.location.type = self.drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        obj.location.id = self.ordinal

    def prop(self) -> Any:
        prop = self.drv.CUmemAllocationProp()
        prop.type = self.drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        self._location(prop)
        return prop

    def granularity(self) -> int:
        if not self.gran:
            self.gran = int(self.check(self.drv.cuMemGetAllocationGranularity(
                self.prop(), self.drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity"))
        return self.gran

    def reserve(self, size: int, align: int, hint: int = 0) -> int:
        """A program's range (VMM_RESERVE; module docstring): a free stretch of a slab of this session when the hint
        lies there, or when there is no hint and the range is smaller than MIN_RESERVE; else a range of its own, in
        the window without a hint, at the hint as asked and else MIN_RESERVE bytes there. → its start (the driver's
        answer where it chose)."""
        if (hint and self._claim_in_slab(hint, size)) or (not hint and size < MIN_RESERVE):
            ptr = hint or self._place(size, align)
            self.in_slabs[ptr] = size
            return ptr
        if not hint:
            return self._reserve_window(size, align)[0]
        # a driver that places small ranges where it likes (GPU run 4), or fills a hole among its own ranges first
        # (GPU run 5): the program's size at its hint, then MIN_RESERVE bytes, then RETRY_GROWTH times more
        ptr, got, _ = self._hint_rounds(size, align, lambda attempt, want: hint, PROGRAM_TRIES, "hinted range")
        size = got or size
        if not ptr:                                   # no hint honoured: the driver's choice, as CUDA's
            ptr = int(self.check(self.drv.cuMemAddressReserve(size, align, 0, 0), "cuMemAddressReserve"))
        self.reserved[ptr] = size
        space = self.spaces.holding(self.window, ptr) if ptr == hint else None
        if space is not None and space.claim(ptr, size):
            self.taken[ptr] = (size, space)          # a caller's hint inside the window: no one else gets it
        return ptr

    def _reserve_window(self, size: int, align: int, outside: int = 0) -> tuple[int, int]:
        """`size` bytes in the window: its candidates in the daemon's order, each at its lowest free range. A
        candidate the driver gives no range in is refused for the daemon; with none left, `outside` bytes (else
        `size`) go where the driver puts them. → (start, bytes reserved)."""
        for candidate, space in self.spaces.candidates(self.window):
            ptr, got, answer = self._reserve_in(space, size, align)
            if ptr:
                self.spaces.honoured(candidate, self.ordinal, space.base)
                self.taken[ptr] = (got, space)
                self.reserved[ptr] = got
                return ptr, got
            if answer:
                self.spaces.refuse(candidate, self.ordinal, space.base, answer)
        size = outside or size
        ptr = int(self.check(self.drv.cuMemAddressReserve(size, align, 0, 0), "cuMemAddressReserve"))
        self.reserved[ptr] = size
        self.spaces.outside(self.ordinal, ptr, size, self.window)
        return ptr, size

    def _reserve_in(self, space: WindowSpace, size: int, align: int) -> tuple[int, int, str]:
        """A range of `space` the driver gives, of `size` bytes or more (_hint_rounds, HINT_TRIES tries at the lowest
        free addresses of `space`, after the first at RETRY_ALIGN boundaries); → (start, bytes reserved, "") or (0, 0,
        what the driver answered the last hint; empty when the space has no room left). A window range the driver
        does not give is skipped (kept out of the free list: the driver holds something there), and so is a growing
        stretch after it, so that the next try lands past the driver's own ranges (found on an H100: GPU run 2)."""
        def where(attempt: int, want: int) -> int:
            return space.take(want, align if attempt == 0 else max(align, RETRY_ALIGN))

        def missed(attempt: int, hinted: int, want: int) -> None:
            step = SKIP_STEP * 4 ** attempt            # the stretch skipped grows 4 times per try
            if step > want:
                space.claim(hinted + want, step - want)
        return self._hint_rounds(size, align, where, HINT_TRIES, "window range", MAX_RETRY, missed)

    def _hint_rounds(self, size: int, align: int, where: Callable[[int, int], int], tries: int, what: str,
                     cap: int = 0, missed: Callable[[int, int, int], None] | None = None) -> tuple[int, int, str]:
        """The one retry policy of hinted ranges, a program's (reserve) and a window's (_reserve_in): try `tries`
        times at where(attempt, bytes) (0: no place left, give up); a range the driver placed elsewhere is held until the
        round ends, and the next try asks for more bytes (_grown: MIN_RESERVE, then RETRY_GROWTH times more, up to
        `cap` where one is given). An H200's driver (GPU run 5) put 64 MiB ranges at one address of its own whatever
        their hint, as if it filled a hole among its own ranges first: held, the misplaced range fills that hole, and
        a larger one no longer fits it; an H100's (GPU run 4) honoured hints of large ranges only. → (start, bytes
        reserved, "") or (0, 0, what the driver answered the last try)."""
        want, answer = size, ""
        held: list[tuple[int, int]] = []
        try:
            for attempt in range(tries):
                hinted = where(attempt, want)
                if not hinted:
                    return 0, 0, answer
                ptr, why = self._reserve_at(want, align, hinted)
                if ptr == hinted:
                    if held:
                        log.info("device %d: %s of %s at %#x on try %d (the driver had placed %s)", self.ordinal,
                                 what, size_text(want), ptr, attempt + 1, answer)
                    return ptr, want, ""
                if ptr:
                    held.append((ptr, want))
                answer = f"{size_text(want)} at {hinted:#x}: {why}"
                if missed is not None:
                    missed(attempt, hinted, want)
                want = _grown(want, cap)
            return 0, 0, answer
        finally:
            for ptr, n in held:
                self.drv.cuMemAddressFree(ptr, n)

    def _reserve_at(self, size: int, align: int, addr: int) -> tuple[int, str]:
        """cuMemAddressReserve with the hint `addr`; → the driver's address (0 when it refused: a real driver may
        answer CUDA_ERROR_OUT_OF_MEMORY for a hint it cannot give; a lasting error shows in the unhinted try) and
        what it answered, for the log."""
        try:
            ptr = int(self.check(self.drv.cuMemAddressReserve(size, align, addr, 0), "cuMemAddressReserve"))
        except CudaError as exc:
            return 0, str(exc)
        return ptr, f"placed at {ptr:#x}"

    def unreserve(self, ptr: int, size: int) -> None:
        """Frees a range reserve() or a slab reserved (the whole of what was reserved, whatever `size` says)."""
        if ptr in self.in_slabs:
            self._unplace(ptr, self.in_slabs.pop(ptr))
            return
        self.drv.cuMemAddressFree(ptr, self.reserved.pop(ptr, size))
        held = self.taken.pop(ptr, None)
        if held is not None:
            held[1].give(ptr, held[0])

    def access(self, ptr: int, size: int, flags: Any) -> None:
        desc = self.drv.CUmemAccessDesc()
        self._location(desc)
        desc.flags = flags
        self.check(self.drv.cuMemSetAccess(ptr, size, [desc], 1), "cuMemSetAccess")

    # ------------------------------------------------------------------ slabs
    def _place(self, size: int, align: int) -> int:
        """Free addresses for `size` bytes (a multiple of the granularity) in a slab of this session, a new slab
        (reserved in the window) when none has room."""
        for base in self._slab_bases:
            ptr = self.slabs[base].take(size, align)
            if ptr:
                return ptr
        # Outside the window a range holds one allocation: another host's driver may hand out the same addresses,
        # and the client's second try (pv_malloc_unique) must get a range of its own, not the rest of this one.
        length = -(-size // MIN_RESERVE) * MIN_RESERVE
        base, length = self._reserve_window(length, max(align, self.granularity()), outside=size)
        slab = WindowSpace(base, length)
        self.slabs[base] = slab
        bisect.insort(self._slab_bases, base)
        return slab.take(size, align)

    def _claim_in_slab(self, addr: int, size: int) -> bool:
        i = bisect.bisect_right(self._slab_bases, addr) - 1
        return i >= 0 and self.slabs[self._slab_bases[i]].claim(addr, size)

    def _unplace(self, ptr: int, size: int) -> None:
        """Gives a slab's addresses back; a slab with nothing mapped goes back to the driver (_drop_empty_slabs)."""
        slab = self.slabs[self._slab_bases[bisect.bisect_right(self._slab_bases, ptr) - 1]]
        slab.give(ptr, size)
        if slab.free == [(slab.base, slab.size)]:
            self._drop_empty_slabs()

    def _drop_empty_slabs(self) -> None:
        """Empty slabs go back to the driver, all but the largest in the window: the session's spare, kept until
        release_all. A session that allocates and frees in a loop would else reserve and free a slab each time, and
        a real driver does not give a just-freed hint again at once (GPU run 6: a small program reserved three 1 GiB
        slabs in 300 ms), so each new slab costs retries. A range outside the window holds one allocation (_place)
        and is never kept. At most one empty slab stays: it holds address space only, no device memory."""
        empty = [slab for slab in self.slabs.values() if slab.free == [(slab.base, slab.size)]]
        spare = max((slab for slab in empty if slab.base in self.taken), key=lambda slab: slab.size, default=None)
        for slab in empty:
            if slab is not spare:
                del self.slabs[slab.base]
                self._slab_bases.remove(slab.base)
                self.unreserve(slab.base, slab.size)

    def _map_new(self, size: int, align: int) -> Chunk:
        """A fresh read-write range of `size` bytes (a multiple of the granularity) in the window."""
        drv = self.drv
        ptr = self._place(size, align)
        handle = None
        mapped = False
        try:
            handle = self.check(drv.cuMemCreate(size, self.prop(), 0), "cuMemCreate")
            self.check(drv.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")
            mapped = True
            self.access(ptr, size, drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        except CudaError:
            if mapped:
                drv.cuMemUnmap(ptr, size)
            if handle is not None:
                drv.cuMemRelease(handle)
            self._unplace(ptr, size)
            raise
        chunk = Chunk(ptr, size, handle)
        self.chunks[ptr] = chunk
        return chunk

    def _unmap(self, chunk: Chunk) -> None:
        del self.chunks[chunk.addr]
        try:
            self.drv.cuMemUnmap(chunk.addr, chunk.size)
            self.drv.cuMemRelease(chunk.handle)
        finally:
            self._unplace(chunk.addr, chunk.size)

    # ------------------------------------------------------------------ allocations
    def malloc(self, size: int, align: int = ALIGN) -> int:
        gran = self.granularity()
        if size <= gran // 2 and align <= ALIGN:
            for arena in self.arenas:
                ptr = arena.carve(size)
                if ptr:
                    return ptr
            arena = self._map_new(gran, gran)
            arena.free = [(0, gran)]
            i = bisect.bisect_left(self._arena_bases, arena.addr)
            self._arena_bases.insert(i, arena.addr)
            self.arenas.insert(i, arena)
            return arena.carve(size)
        rounded = -(-max(size, 1) // gran) * gran
        return self._map_new(rounded, max(gran, align)).addr

    def owns(self, ptr: int) -> bool:
        return self._arena_of(ptr) is not None or ptr in self.chunks

    def _arena_of(self, ptr: int) -> Chunk | None:
        i = bisect.bisect_right(self._arena_bases, ptr) - 1
        if i >= 0 and ptr in self.arenas[i].live:
            return self.arenas[i]
        return None

    def free(self, ptr: int) -> None:
        arena = self._arena_of(ptr)
        if arena is not None:
            arena.uncarve(ptr)
            if not arena.live:                       # empty: the granule goes back at once
                i = self.arenas.index(arena)
                del self.arenas[i], self._arena_bases[i]
                self._unmap(arena)
            return
        chunk = self.chunks.get(ptr)
        if chunk is None or chunk.free:
            raise CudaError("cudaErrorInvalidValue", f"free of {ptr:#x}: not an allocation of this device")
        self._unmap(chunk)

    def release_all(self) -> None:
        """Every range goes (reset, close: physical allocations outlive the context)."""
        for chunk in list(self.chunks.values()):
            try:
                self._unmap(chunk)
            except Exception as exc:  # noqa: BLE001 - keep releasing the others
                log.warning("device %d: releasing memory at %#x failed: %s", self.ordinal, chunk.addr, exc)
        self.chunks.clear()
        self.arenas.clear()
        self._arena_bases.clear()
        self.in_slabs.clear()                         # programs' ranges (given back before: their slabs go whole)
        for ptr in list(self.reserved):               # slabs a failed unmap left
            try:
                self.unreserve(ptr, 0)
            except Exception as exc:  # noqa: BLE001 - keep releasing the others
                log.warning("device %d: freeing the range at %#x failed: %s", self.ordinal, ptr, exc)
        self.slabs.clear()
        self._slab_bases.clear()
        for addr, (size, space) in self.taken.items():    # the shared spaces get this session's window ranges back
            space.give(addr, size)
        self.taken.clear()
