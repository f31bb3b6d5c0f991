"""Large kernels a CTA at a time (translator/ctasplit.py, ctagen.py's large kernels): CUB's onesweep and histogram
kernels (radix_sort_thrust's) now run a CTA at a time, split into region functions, with the lockstep path's bits
and a host model's sort; and stage 3's reviews run again with every kernel split into one-block regions and
emitted as a large kernel (one copy of each loop, guarded branches through BRANCH), so that the split's frame,
its suspensions and resumes across regions, its warp blocks and atomics are tested on small kernels too."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import ctagen, ctasplit

from harness import ptx_of
from test_emu_ctagen import (  # noqa: F401 (collected here again, under split_everything)
    test_a_diverged_thread_waits_at_its_barrier, test_a_global_fault_after_a_barrier_is_the_same_error,
    test_a_shared_fault_is_the_same_error, test_an_access_served_by_python_between_barriers,
    test_divergent_paths_loops_and_exits_reconverge_at_the_barrier, test_reductions_with_barriers_in_loops,
    test_scan_tiles_as_nvcc_writes_it)
from test_emu_stage3_review import every_barrier_kernel  # noqa: F401 (an autouse fixture: a CTA at a time)
from test_emu_stage3_review7 import (  # noqa: F401 (collected here again, under split_everything)
    test_a_grid_barrier_made_by_hand, test_a_register_read_before_its_one_definition_is_per_thread,
    test_a_shuffle_in_a_loop_lanes_leave, test_atomics_through_generic_addresses_every_width,
    test_votes_reductions_and_matches_on_two_paths)

SORT = Path(__file__).resolve().parents[2] / "bench" / "cuda" / "radix_sort_thrust.cu"
TILE = 11776                     # onesweep's tile (256 threads x 46 keys: its PTX's block offset)


@pytest.fixture(autouse=True)
def split_everything(request, monkeypatch):
    """The reviews' kernels split into regions of one block each and emitted as large kernels (not the CUB
    tests: those run as shipped)."""
    if "cub" not in request.node.name:
        monkeypatch.setattr(ctasplit, "SPLIT_BYTES", 0)
        monkeypatch.setattr(ctasplit, "REGION_BYTES", 1)
        monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)


def _sort_module(cta: bool | EmuLimits, mem: DeviceMemory) -> EmuModule:
    """The sort's module: a CTA at a time (cta True), the lockstep NumPy path (False), or with the limits given."""
    limits = cta if isinstance(cta, EmuLimits) else \
        EmuLimits(native="on", ctagen=True) if cta else EmuLimits(native="off", ctagen=False)
    return EmuModule.load(ptx_of(str(SORT)), mem, limits=limits)


def _onesweep(cta: bool | EmuLimits, keys: np.ndarray, bit: int) -> tuple[list[bytes], object]:
    """One onesweep pass (digit bits bit..bit+7) of keys with values 0..n-1, run as _sort_module(cta) runs it:
    (every buffer it writes, the kernel)."""
    n = len(keys)
    mem = DeviceMemory(1 << 40, 1 << 26)
    mod = _sort_module(cta, mem)
    name = next(k for k in mod.kernels if "Onesweep" in k)
    nb = -(-n // TILE)
    kin, kout, vin, vout = (mem.alloc(4 * n) for _ in range(4))
    look, ctrs, bout, bins = mem.alloc(4 * 256 * nb), mem.alloc(64), mem.alloc(8 * 256), mem.alloc(8 * 256)
    mem.write(kin, keys.tobytes())
    mem.write(vin, np.arange(n, dtype=np.uint32).tobytes())
    for a, size in ((look, 4 * 256 * nb), (ctrs, 64), (bout, 8 * 256)):
        mem.write(a, bytes(size))
    count = np.bincount((keys >> bit) & 255, minlength=256).astype(np.uint64)
    mem.write(bins, (np.cumsum(count) - count).astype(np.uint64).tobytes())
    mod.launch(name, (nb, 1, 1), (256, 1, 1), 0,
               struct.pack("<8QiiiB", look, ctrs, bout, bins, kout, kin, vout, vin, n, bit, 8, 0))
    out = [bytes(mem.read(a, s)) for a, s in ((kout, 4 * n), (vout, 4 * n), (look, 4 * 256 * nb), (ctrs, 64),
                                             (bout, 8 * 256))]
    return out, mod.kernel(name)


def test_cub_onesweep_runs_a_cta_at_a_time_split_with_the_lockstep_bits():
    """Three CTAs (the last one partial) of a pass over bits 8..15: split into region functions, compiled at -O1
    less the passes that cost the build (ctagen.OPT_BY_SIZE: LEAN_O1), every buffer it writes as the lockstep NumPy path writes it, the keys and values as a
    stable sort by the digit (the host's model) has them."""
    n = 2 * TILE + 1000
    keys = np.random.default_rng(7).integers(0, 1 << 32, n, dtype=np.uint32)
    got, kernel = _onesweep(True, keys, 8)
    assert isinstance(kernel.native_make(), ctagen.CtaCode), "onesweep did not run a CTA at a time"
    assert "fn_r1(" in kernel.native_source
    assert ctagen.flags(ctagen.PRELUDE_C + kernel.native_source)[-len(ctagen.LEAN_O1):] == ctagen.LEAN_O1
    order = np.argsort((keys >> 8) & 255, kind="stable")
    assert got[0] == keys[order].tobytes() and got[1] == order.astype(np.uint32).tobytes()
    want, lock = _onesweep(False, keys, 8)
    assert not isinstance(lock.native_make(), ctagen.CtaCode)
    assert got == want


def test_cub_histogram_runs_a_cta_at_a_time_with_the_host_counts():
    """CUB's radix histogram (atomics on shared and global memory), 5 CTAs over 40,960 keys (whole tiles: a partial
    one counts its padding on both paths): a large kernel (one copy of each loop), the counts of every digit of the
    four passes as the host's bincount and the lockstep path have them."""
    n = 40960
    keys = np.random.default_rng(3).integers(0, 1 << 32, n, dtype=np.uint32)
    outs = []
    for cta in (True, False):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _sort_module(cta, mem)
        name = next(k for k in mod.kernels if "HistogramKernel" in k)
        src, bins = mem.alloc(4 * n), mem.alloc(8 * 4 * 256)
        mem.write(src, keys.tobytes())
        mem.write(bins, bytes(8 * 4 * 256))
        mod.launch(name, (5, 1, 1), (256, 1, 1), 0, struct.pack("<QQQiiB", bins, src, n, 0, 32, 0))
        outs.append(bytes(mem.read(bins, 8 * 4 * 256)))
        assert isinstance(mod.kernel(name).native_make(), ctagen.CtaCode) == cta
    exp = np.stack([np.bincount((keys >> (8 * p)) & 255, minlength=256) for p in range(4)]).astype(np.uint64)
    assert outs[0] == exp.tobytes() and outs[0] == outs[1]
