"""CodeBudget: the host memory one session's modules hold on one emulated device, bounded.

Two kinds of holdings are charged (docs/security.md, "PTX and translated kernels"):
- a loaded module: its PTX text (kept: kernels are parsed and translated on their first launch) and its index
  (emu/module.py `EmuModule.held`); held until the module is unloaded;
- a translated kernel: its IR, generated code and bytecode, estimated from its size (emu/module.py); while it is
  being translated, the larger peak of that work (Python's compiler builds a syntax tree of the generated source);
  with what its launch plans keep (finished chunks for the next launch, LaunchPlan.keep: `charge`, only while
  they fit);
  a cache: the least recently launched translations are dropped to make room for a new one (their module translates
  them again at their next launch).
Past the bound (EmuLimits.max_code_bytes) a load or a first launch fails with cudaErrorMemoryAllocation.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections import OrderedDict
from typing import Callable, Hashable

from pyvgpu_daemon.errors import CudaError

# The peak of a load or a translation is short-lived Python objects: freed, but kept by the C allocator (glibc holds
# freed heap pages) unless handed back; what is returned at once is worth it above this size (a trim costs ~40 ms).
TRIM_ABOVE = 16 << 20


def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):        # not glibc: its allocator keeps what it keeps
        return None


_trim = _malloc_trim()


def give_back(peak: int) -> None:
    """After work whose peak was `peak` bytes: hand the memory it freed back to the OS."""
    if _trim is not None and peak >= TRIM_ABOVE:
        _trim(0)


class CodeBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0                      # bytes held: modules + translations
        self.cached = 0                    # of which translations (droppable)
        self._lru: OrderedDict[Hashable, tuple[int, Callable[[], None]]] = OrderedDict()
        self._lock = threading.Lock()      # the worker and the loop's tiny launches may both touch the LRU order
        self._last: Hashable | None = None  # the key at the newest end of the LRU order, when known
        self.drops = 0                     # translations dropped so far (a run's launches reuse plans until one is)

    def hold(self, nbytes: int, what: str) -> None:
        """Charge what a loaded module holds (never dropped: `release` gives it back)."""
        self._make_room(nbytes, what)
        with self._lock:
            self.used += nbytes

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes

    def admit(self, key: Hashable, nbytes: int, drop: Callable[[], None], what: str) -> None:
        """Charge a translation about to be made; `drop()` is called if it is later dropped to make room."""
        self._make_room(nbytes, what)
        with self._lock:
            self._lru[key] = (nbytes, drop)
            self._last = key
            self.used += nbytes
            self.cached += nbytes

    def settle(self, key: Hashable, nbytes: int) -> None:
        """An admitted translation is done: it holds `nbytes` from now on (less than its peak)."""
        with self._lock:
            entry = self._lru.get(key)
            if entry is not None:
                self.used += nbytes - entry[0]
                self.cached += nbytes - entry[0]
                self._lru[key] = (nbytes, entry[1])

    def charge(self, key: Hashable, nbytes: int) -> bool:
        """Add nbytes (< 0: give back) to an admitted translation's holding, for what its launch plans keep
        (LaunchPlan.keep: finished chunks); False, nothing charged, when they do not fit without dropping another
        translation or the translation is gone (dropped with what its plans kept: a late give-back is ignored)."""
        with self._lock:
            entry = self._lru.get(key)
            if entry is None or (nbytes > 0 and self.used + nbytes > self.limit):
                return False
            self._lru[key] = (entry[0] + nbytes, entry[1])
            self.used += nbytes
            self.cached += nbytes
            return True

    def touch(self, key: Hashable) -> None:
        """A translation was used: it is dropped last."""
        if self._last == key:
            return      # already the newest (every repeated launch of one kernel): no lock on the launch path
        with self._lock:
            self._last = key
            if key in self._lru:
                self._lru.move_to_end(key)

    def forget(self, key: Hashable) -> None:
        """A translation its owner let go (module unloaded, translation failed)."""
        with self._lock:
            entry = self._lru.pop(key, None)
            self._last = None
            if entry is not None:
                self.used -= entry[0]
                self.cached -= entry[0]

    def _make_room(self, nbytes: int, what: str) -> None:
        with self._lock:
            if self.used - self.cached + nbytes > self.limit:
                raise CudaError("cudaErrorMemoryAllocation",
                                f"{what}: {nbytes} B more would exceed the emulator's bound of {self.limit} B of "
                                f"modules and translated kernels per session and device ({self.used - self.cached} "
                                f"B held by modules; PYVGPU_EMU_MAX_CODE_BYTES)")
            dropped = []
            while self.used + nbytes > self.limit and self._lru:
                _key, (n, drop) = self._lru.popitem(last=False)
                self._last = None
                self.used -= n
                self.cached -= n
                dropped.append(drop)
            self.drops += len(dropped)
        for drop in dropped:
            drop()
