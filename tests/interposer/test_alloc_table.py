"""The client's allocation table (csrc/core/registry.c: pv_alloc_*), which every pointer lookup of the client libraries
asks (which device a pointer is on, whether host memory is pinned, a copy's device ranges): its answers against a
plain model of what it promises, over random tables of mixed sizes with overlapping-looking ranges (device memory
placed over this process's host memory, as a GPU host's driver did in GPU run 3; a mapped buffer's device entry at its
host entry's very address; a large pool among small allocations), interior pointers, the bytes just past an end, gaps,
freed ranges and a device's entries forgotten.

The model: entries in order of their start (an entry added at a start already present goes after it); the entry
containing a pointer is the last one starting at or below it that contains it (of device memory only, for
pv_alloc_find_device). libpvcore is loaded in a process of its own (its table is the process's)."""
from __future__ import annotations

import bisect
import json
import random
import subprocess
import sys

from pyvgpu import lib_path

CDEF = """
struct pv_alloc { uint64_t ptr; size_t size; int dev; const void *owner; };
void pv_alloc_add_owned(uint64_t ptr, size_t size, int dev, const void *owner);
int pv_alloc_remove(uint64_t ptr, int *dev);
int pv_alloc_find(uint64_t ptr, struct pv_alloc *out);
int pv_alloc_find_device(uint64_t ptr, struct pv_alloc *out);
void pv_alloc_forget_device(int dev);
"""

# Runs a list of operations against libpvcore: ["add", ptr, size, dev] | ["remove", ptr] | ["forget", dev] |
# ["find", ptr, device_only]; prints one answer per operation.
SCRIPT = r"""
import json, sys, cffi
ffi = cffi.FFI(); ffi.cdef(sys.argv[2]); lib = ffi.dlopen(sys.argv[1])
a = ffi.new("struct pv_alloc *"); d = ffi.new("int *")
out = []
for op in json.load(sys.stdin):
    if op[0] == "add":
        lib.pv_alloc_add_owned(op[1], op[2], op[3], ffi.NULL); out.append(None)
    elif op[0] == "remove":
        rc = lib.pv_alloc_remove(op[1], d); out.append([rc, d[0] if rc == 0 else None])
    elif op[0] == "forget":
        lib.pv_alloc_forget_device(op[1]); out.append(None)
    else:
        rc = (lib.pv_alloc_find_device if op[2] else lib.pv_alloc_find)(op[1], a)
        out.append([a.ptr, a.size, a.dev] if rc == 0 else None)
print(json.dumps(out))
"""


class Model:
    """What the table promises, written the plain way."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, int]] = []       # (ptr, size, dev) in order of ptr, ties by insertion

    def starts(self) -> list[int]:
        return [e[0] for e in self.entries]

    def add(self, ptr: int, size: int, dev: int) -> None:
        self.entries.insert(bisect.bisect_right(self.starts(), ptr), (ptr, size, dev))

    def remove(self, ptr: int) -> list | None:
        i = bisect.bisect_right(self.starts(), ptr)
        if i == 0 or self.entries[i - 1][0] != ptr:
            return [-1, None]
        return [0, self.entries.pop(i - 1)[2]]

    def forget(self, dev: int) -> None:
        self.entries = [e for e in self.entries if e[2] != dev]

    def find(self, ptr: int, device_only: bool) -> list | None:
        for p, size, dev in reversed(self.entries[:bisect.bisect_right(self.starts(), ptr)]):
            if ptr < p + max(size, 1) and (not device_only or dev >= 0):
                return [p, size, dev]
        return None


MIB = 1 << 20
WINDOW = 0x7F0000000000            # device memory
HOST = 0x7F0000000000 + (40 << 30)  # pinned host buffers, some inside a device pool placed over them


def workload(rng: random.Random) -> list[list]:
    """Adds, removes, forgets and lookups: a pool of 48 GiB over host buffers, small allocations of mixed sizes with
    gaps, zero-size entries, mapped buffers (a device entry at a host entry's address), then frees and lookups of
    starts, interiors, last bytes, the byte past each end, gaps and freed ranges."""
    ops: list[list] = []
    live: list[tuple[int, int, int]] = []
    at = WINDOW
    for _ in range(400):                                    # small allocations with gaps, devices 0 and 1
        size = rng.choice((0, 1, 512, 4096, 65536, 2 * MIB, 20 * MIB))
        dev = rng.choice((0, 1))
        ops.append(["add", at, size, dev])
        live.append((at, size, dev))
        at += max(size, 1) + rng.choice((0, 512, 4096))     # sometimes adjacent: the next starts at this end
    for i in range(24):                                      # pinned host buffers (dev -1 - flags)
        p = HOST + i * 64 * MIB
        ops.append(["add", p, MIB, -1 - (i % 3)])
        live.append((p, MIB, -1 - (i % 3)))
    pool = HOST - (4 << 30)                                  # device memory placed over them (GPU run 3)
    ops.append(["add", pool, 48 << 30, 2])
    live.append((pool, 48 << 30, 2))
    for i in range(0, 24, 5):                                # mapped buffers: a device entry at the host address
        p = HOST + i * 64 * MIB
        ops.append(["add", p, MIB, 0])
        live.append((p, MIB, 0))
    freed: list[tuple[int, int]] = []
    for e in rng.sample(live, 120):                          # frees, some of a start shared by two entries
        ops.append(["remove", e[0]])
        freed.append((e[0], e[1]))
    ops.append(["remove", WINDOW + 3])                       # not a start
    for e in live:
        p, size, _ = e
        for q in (p, p + max(size, 1) - 1, p + max(size, 1), p + rng.randrange(max(size, 1)), p - 1):
            ops.append(["find", q, rng.random() < 0.5])
    for p, size in freed:
        ops.append(["find", p + rng.randrange(max(size, 1)), rng.random() < 0.5])
    for _ in range(300):
        ops.append(["find", rng.randrange(WINDOW - (1 << 30), HOST + (50 << 30)), rng.random() < 0.5])
    ops.append(["forget", 1])                                # a device reset forgets its entries
    for e in live:
        ops.append(["find", e[0] + max(e[1], 1) // 2, False])
    ops.append(["forget", 2])                                # the pool goes: the host buffers under it answer
    for i in range(24):
        ops.append(["find", HOST + i * 64 * MIB + 5, rng.random() < 0.5])
        ops.append(["find", HOST + i * 64 * MIB + 2 * MIB, False])
    return ops


def run_table(ops: list[list]) -> list:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(lib_path("libpvcore.so")), CDEF],
                          input=json.dumps(ops), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_lookups_answer_as_the_model():
    for seed in (1, 2):
        ops = workload(random.Random(seed))
        model = Model()
        want = []
        for op in ops:
            if op[0] == "add":
                model.add(*op[1:])
                want.append(None)
            elif op[0] == "remove":
                want.append(model.remove(op[1]))
            elif op[0] == "forget":
                model.forget(op[1])
                want.append(None)
            else:
                want.append(model.find(op[1], op[2]))
        got = run_table(ops)
        bad = [(op, g, w) for op, g, w in zip(ops, got, want) if g != w]
        assert not bad, f"seed {seed}: {len(bad)} of {len(ops)} answers differ, first {bad[:3]}"
        finds = [w for op, w in zip(ops, want) if op[0] == "find"]
        # the workload means something: hits and misses, device memory over host memory, host memory inside it
        assert sum(w is None for w in finds) > 100 and sum(w is not None for w in finds) > 1000
        assert any(w is not None and w[2] == 2 for w in finds) and any(w is not None and w[2] < 0 for w in finds)
