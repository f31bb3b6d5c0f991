"""Which virtual addresses the GPU host's driver gives when asked for them (cuMemAddressReserve with a hint), and
what cuMemGetInfo says around allocations: the facts backends/cuda_vmm.py and tests/cuda/api_memory.cu rest on.

The cuda backend places each session's memory in the pointer window of its host, at one of the window's candidate
places (backends/cuda_vmm.py, window_candidates: 16 TiB above window k's address (k + 1) TiB, then 48 TiB above,
then the address itself). GPU runs 2 and 3 (H100, driver 580) showed the driver never placing a range at 1 TiB; GPU
run 4 showed it giving 64 MiB ranges at every hint from 2 to 120 TiB in this probe, while the daemon, which then
reserved 2 MiB at a time, got none of its hints (its ranges went to 0x7f...). The backend now reserves slabs of at
least 64 MiB (cuda_vmm.MIN_RESERVE) and maps allocations inside them. This probe asks the driver itself, natively
(no pyvgpu):
  hints     64 MiB at hints from 1 to 120 TiB (17/18, 49/50 TiB: windows 1 and 2's places)
  sizes     2 MiB .. 1 GiB at 17 TiB, in the primary context: from which size on a hint is honoured
  created   the same two sizes the daemon used (2 and 64 MiB) at 17 TiB with a context of cuCtxCreate current, as
            each session of the daemon has, then again with 64 MiB of host memory registered (cuMemHostRegister,
            as the daemon's staging of replies: backends/cuda_staging.py)
  slab      the backend's way: 64 MiB reserved at 17 TiB, two granules created and mapped inside it (at +0 and
            +4 MiB), made read-write, written with cuMemsetD32 and read back
  backend   the cuda backend's own code (cuda_vmm.WindowMemory through cuda-python, as the daemon runs it) allocating
            300 B, 3 MiB and 64 MiB for window 1 in the primary context: which window place holds each (0: 16 TiB
            above the window's address), and what it logged
  meminfo   free memory (cuMemGetInfo) before and after cuMemCreate of 64 MiB, its release, cuMemAlloc of 64 MiB
            and its free, three times: how much each moves it on this GPU, shared with whatever else runs
  findings  why a 64 MiB hint is refused (GPU run 5, H200: during a JAX session the daemon's 64 MiB slabs went to one
            address 0x7f... at 18 hints over three window places): 64 MiB slabs held at 20 TiB + k * 64 MiB for k up
            to 400 (does a long run of held slabs stay honoured?); hints inside this process's own memory (a malloc'd
            block, a Python object's page, a fresh anonymous mmap) and at an mmap just unmapped (does the driver need
            the CPU range free?); reserve, free, re-reserve the same hint at once and at the next 64 MiB; a hole left
            among the driver's own ranges (256 MiB reserved unhinted and freed, cuMemAlloc'd and freed, or
            cuMemAlloc'd in a created context that then ended, as a session that left), then a
            64 MiB hint, that range held and the hint again, and 256 MiB at the hint (the backend's retry)
It passes when it could ask; what it found is its last line and va_hints.json.
"""
from __future__ import annotations

import ctypes
import json
import logging
import mmap
import os
import sys
from pathlib import Path

TIB = 1 << 40
MIB = 1 << 20
HINTS_TIB = (1, 2, 3, 4, 8, 16, 17, 18, 32, 33, 48, 49, 50, 64, 100, 120)   # 17/18, 49/50: windows 1, 2's places
SIZE = 64 * MIB
SIZES_MIB = (2, 4, 8, 16, 32, 64, 128, 1024)
AT = 17 * TIB                      # window 1's first place (cuda_vmm.window_candidates)
GRAN = 2 * MIB

u64 = ctypes.c_uint64


class Prop(ctypes.Structure):
    """CUmemAllocationProp (cuda.h): type, requestedHandleTypes, location {type, id}, win32HandleMetaData,
    allocFlags {compressionType, gpuDirectRDMACapable, usage, reserved[4]}."""
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("loc_type", ctypes.c_int),
                ("loc_id", ctypes.c_int), ("win32", ctypes.c_void_p), ("compression", ctypes.c_ubyte),
                ("rdma", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Access(ctypes.Structure):
    """CUmemAccessDesc: location {type, id}, flags."""
    _fields_ = [("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int), ("flags", ctypes.c_int)]


def declare(cu: ctypes.CDLL) -> None:
    cu.cuMemAddressReserve.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, ctypes.c_size_t, u64, u64]
    cu.cuMemAddressFree.argtypes = [u64, ctypes.c_size_t]
    cu.cuMemCreate.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, ctypes.POINTER(Prop), u64]
    cu.cuMemRelease.argtypes = [u64]
    cu.cuMemMap.argtypes = [u64, ctypes.c_size_t, ctypes.c_size_t, u64, u64]
    cu.cuMemUnmap.argtypes = [u64, ctypes.c_size_t]
    cu.cuMemSetAccess.argtypes = [u64, ctypes.c_size_t, ctypes.POINTER(Access), ctypes.c_size_t]
    cu.cuMemsetD32_v2.argtypes = [u64, ctypes.c_uint, ctypes.c_size_t]
    cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, u64, ctypes.c_size_t]
    cu.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
    cu.cuMemFree_v2.argtypes = [u64]
    cu.cuCtxCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int]
    cu.cuCtxDestroy_v2.argtypes = [ctypes.c_void_p]
    cu.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    cu.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    cu.cuMemHostUnregister.argtypes = [ctypes.c_void_p]


def try_hint(cu: ctypes.CDLL, hint: int, size: int) -> dict:
    got = u64()
    err = cu.cuMemAddressReserve(ctypes.byref(got), size, GRAN, hint, 0)
    if err == 0:
        cu.cuMemAddressFree(got.value, size)
    return {"hint": hint, "size": size, "error": err, "got": got.value, "honoured": err == 0 and got.value == hint}


def prop_of(dev: int) -> Prop:
    p = Prop()
    p.type, p.loc_type, p.loc_id = 1, 1, dev          # CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE
    return p


def slab(cu: ctypes.CDLL, dev: int) -> str:
    """The backend's way (cuda_vmm._place): granules mapped inside a 64 MiB range reserved at a hint."""
    base = u64()
    err = cu.cuMemAddressReserve(ctypes.byref(base), SIZE, GRAN, AT, 0)
    if err:
        return f"FAIL reserve: error {err}"
    where = "at the hint" if base.value == AT else f"at {base.value:#x}, not at the hint"
    prop, handles, mapped, words = prop_of(dev), [], [], GRAN // 4
    try:
        for off in (0, 4 * MIB):
            h = u64()
            if (err := cu.cuMemCreate(ctypes.byref(h), GRAN, ctypes.byref(prop), 0)):
                return f"FAIL cuMemCreate: error {err}"
            handles.append(h.value)
            if (err := cu.cuMemMap(base.value + off, GRAN, 0, h.value, 0)):
                return f"FAIL cuMemMap at +{off >> 20} MiB: error {err}"
            mapped.append(base.value + off)
            acc = Access(1, dev, 3)                        # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            if (err := cu.cuMemSetAccess(base.value + off, GRAN, ctypes.byref(acc), 1)):
                return f"FAIL cuMemSetAccess at +{off >> 20} MiB: error {err}"
            if (err := cu.cuMemsetD32_v2(base.value + off, 0x5A000000 + off, words)):
                return f"FAIL cuMemsetD32 at +{off >> 20} MiB: error {err}"
        for off in (0, 4 * MIB):
            back = (ctypes.c_uint * words)()
            if (err := cu.cuMemcpyDtoH_v2(back, base.value + off, GRAN)):
                return f"FAIL cuMemcpyDtoH at +{off >> 20} MiB: error {err}"
            if any(v != 0x5A000000 + off for v in back):
                return f"FAIL wrong bytes at +{off >> 20} MiB"
        return f"ok ({where})"
    finally:
        for p in mapped:
            cu.cuMemUnmap(p, GRAN)
        for h in handles:
            cu.cuMemRelease(h)
        cu.cuMemAddressFree(base.value, SIZE)


def backend_way() -> dict:
    """cuda_vmm.WindowMemory as the daemon runs it (cuda-python), in this process's primary context."""
    try:
        from cuda.bindings import driver as drv
        from pyvgpu.protocol import VA_WINDOW_BYTES
        from pyvgpu_daemon.backends.cuda import check
        from pyvgpu_daemon.backends.cuda_vmm import WindowMemory, window_candidates
    except ImportError as exc:
        return {"result": f"not run ({exc})"}
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())     # type: ignore[method-assign]
    logger = logging.getLogger("pyvgpu.daemon")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    places: list = []
    try:
        dev = check(drv.cuDeviceGet(0), "cuDeviceGet")
        check(drv.cuCtxSetCurrent(check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")),
              "cuCtxSetCurrent")
        mem = WindowMemory(drv, 0, VA_WINDOW_BYTES, check)
        try:
            for size in (300, 3 * MIB, SIZE):
                ptr = mem.malloc(size)
                places.append(next((i for i, base in enumerate(window_candidates(VA_WINDOW_BYTES))
                                    if base <= ptr and ptr + size <= base + VA_WINDOW_BYTES), f"{ptr:#x}"))
        finally:
            mem.release_all()
    except Exception as exc:  # noqa: BLE001 - what failed is the finding
        said.append(f"{type(exc).__name__}: {exc}")
    finally:
        logger.removeHandler(handler)
    return {"result": f"places {places}" + (f"; said: {' | '.join(said)[:600]}" if said else ""), "places": places,
            "said": said}


def reserve(cu: ctypes.CDLL, hint: int, size: int) -> tuple[int, int]:
    """(error, address) of cuMemAddressReserve at `hint`; the range stays reserved (the caller frees it)."""
    got = u64()
    err = cu.cuMemAddressReserve(ctypes.byref(got), size, GRAN, hint, 0)
    return err, got.value if err == 0 else 0


def where(hint: int, err: int, got: int) -> str:
    if err:
        return f"error {err}"
    return "honoured" if got == hint else f"placed at {got:#x}"


def findings(cu: ctypes.CDLL, dev: ctypes.c_int, primary: ctypes.c_void_p) -> list[dict]:
    """The module docstring's findings: one dict each, with a one-line `said`."""
    out: list[dict] = []
    held: list[tuple[int, int]] = []

    def free_held() -> None:
        for ptr, n in held:
            cu.cuMemAddressFree(ptr, n)
        held.clear()

    base = 20 * TIB                                     # no window's place (cuda_vmm.window_candidates)
    refused = []
    for k in range(400):
        err, got = reserve(cu, base + k * SIZE, SIZE)
        if got:
            held.append((got, SIZE))
        if err or got != base + k * SIZE:
            refused.append((k, where(base + k * SIZE, err, got)))
    free_held()
    out.append({"what": "held slabs", "refused": refused[:20],
                "said": f"64 MiB slabs held at 20 TiB + k*64 MiB, k < 400: {400 - len(refused)} honoured"
                        + (f", first refused k={refused[0][0]} ({refused[0][1]})" if refused else "")})

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = libc.malloc(4096)
    obj = bytearray(64)
    anon = mmap.mmap(-1, 4 * SIZE)
    anon_at = ctypes.addressof(ctypes.c_char.from_buffer(anon))
    gone = mmap.mmap(-1, 4 * SIZE)
    gone_at = ctypes.addressof(ctypes.c_char.from_buffer(gone))
    gone.close()                                        # unmapped: free in this process again
    down = lambda a: a & ~(GRAN - 1)                    # noqa: E731 - the granule holding a
    up = lambda a: -(-a // GRAN) * GRAN                 # noqa: E731
    for what, hint in (("a malloc'd block", down(block or 0)), ("a Python object's page", down(id(obj))),
                       ("a fresh anonymous mmap", up(anon_at)), ("an mmap just unmapped", up(gone_at))):
        err, got = reserve(cu, hint, SIZE)
        if got:
            cu.cuMemAddressFree(got, SIZE)
        out.append({"what": what, "hint": hint, "error": err, "got": got,
                    "said": f"64 MiB at {what} ({hint:#x}): {where(hint, err, got)}"})
    libc.free(block)
    del obj
    anon.close()

    again = 21 * TIB
    steps = []
    for hint in (again, again, again + SIZE):           # reserve + free, then the same hint at once, then the next
        err, got = reserve(cu, hint, SIZE)
        steps.append(where(hint, err, got))
        if got:
            cu.cuMemAddressFree(got, SIZE)
    out.append({"what": "re-reserve", "steps": steps,
                "said": f"64 MiB at 21 TiB: {steps[0]}; freed and asked again: {steps[1]}; next 64 MiB: {steps[2]}"})

    hole = 22 * TIB
    for how in ("reserved", "cuMemAlloc", "cuMemAlloc'd in a context that then ended"):
        if how.startswith("cuMemAlloc'd"):          # a session that left (GPU run 5: the third session's ranges)
            own, p = ctypes.c_void_p(), u64()
            err = cu.cuCtxCreate_v2(ctypes.byref(own), 0, dev)
            if err == 0:
                err = cu.cuMemAlloc_v2(ctypes.byref(p), 4 * SIZE)
                cu.cuCtxSetCurrent(primary)
                cu.cuCtxDestroy_v2(own)
            got = p.value if err == 0 else 0
        elif how == "reserved":
            err, got = reserve(cu, 0, 4 * SIZE)
            if got:
                cu.cuMemAddressFree(got, 4 * SIZE)
        else:
            p = u64()
            err = cu.cuMemAlloc_v2(ctypes.byref(p), 4 * SIZE)
            got = p.value if err == 0 else 0
            if got:
                cu.cuMemFree_v2(got)
        steps = [f"256 MiB {how}, freed, at {got:#x}" if got else f"256 MiB {how}: error {err}"]
        e1, g1 = reserve(cu, hole, SIZE)                # the hint; held, as the backend's retry holds it
        if g1:
            held.append((g1, SIZE))
        steps.append(f"64 MiB at 22 TiB: {where(hole, e1, g1)}")
        e2, g2 = reserve(cu, hole + (1 << 30), SIZE)
        if g2:
            held.append((g2, SIZE))
        steps.append(f"held, 64 MiB at 22 TiB + 1 GiB: {where(hole + (1 << 30), e2, g2)}")
        e3, g3 = reserve(cu, hole + (2 << 30), 4 * SIZE)
        if g3:
            held.append((g3, 4 * SIZE))
        steps.append(f"256 MiB at 22 TiB + 2 GiB: {where(hole + (2 << 30), e3, g3)}")
        free_held()
        out.append({"what": f"hole ({how})", "freed_at": got, "steps": steps, "said": "; ".join(steps)})
    return out


def meminfo(cu: ctypes.CDLL, dev: int) -> list[dict]:
    """Free memory (MiB) moved by cuMemCreate/cuMemRelease and cuMemAlloc/cuMemFree of 64 MiB, three times."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()

    def now() -> int:
        cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        return free.value

    rows, prop = [], prop_of(dev)
    for _ in range(3):
        h, p = u64(), u64()
        f0 = now()
        e1 = cu.cuMemCreate(ctypes.byref(h), SIZE, ctypes.byref(prop), 0)
        f1 = now()
        if not e1:
            cu.cuMemRelease(h.value)
        f2 = now()
        e2 = cu.cuMemAlloc_v2(ctypes.byref(p), SIZE)
        f3 = now()
        if not e2:
            cu.cuMemFree_v2(p.value)
        f4 = now()
        rows.append({"errors": [e1, e2], "free_mib": [f / MIB for f in (f0, f1, f2, f3, f4)],
                     "create": (f1 - f0) / MIB, "release": (f2 - f1) / MIB, "alloc": (f3 - f2) / MIB,
                     "free": (f4 - f3) / MIB, "total_mib": total.value / MIB})
    return rows


def main() -> int:
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        print(f"va hints: not applicable: no libcuda.so.1 ({exc})")
        return 77
    declare(cu)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for what, err in (("cuInit", cu.cuInit(0)), ("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0)),
                      ("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)),
                      ("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))):
        if err:
            print(f"va hints: {what} failed with {err}")
            return 1
    rows = [{**try_hint(cu, tib * TIB, SIZE), "hint_tib": tib} for tib in HINTS_TIB]
    unhinted = try_hint(cu, 0, SIZE)["got"]
    sizes = [{**try_hint(cu, AT, mib * MIB), "mib": mib} for mib in SIZES_MIB]
    created, own = [], ctypes.c_void_p()
    if cu.cuCtxCreate_v2(ctypes.byref(own), 0, dev) == 0:           # a session's context, as the daemon makes
        created = [{**try_hint(cu, AT, mib * MIB), "mib": mib} for mib in (2, 64)]
        host = mmap.mmap(-1, SIZE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(host))
        if cu.cuMemHostRegister_v2(addr, SIZE, 0) == 0:
            created += [{**try_hint(cu, AT, mib * MIB), "mib": mib, "host_registered": True} for mib in (2, 64)]
            cu.cuMemHostUnregister(addr)
        slab_result = slab(cu, dev.value)
        cu.cuCtxSetCurrent(ctx)
        cu.cuCtxDestroy_v2(own)
    else:
        slab_result = slab(cu, dev.value)
    info = meminfo(cu, dev.value)
    found = findings(cu, dev, ctx)
    backend = backend_way()
    out = Path(os.environ.get("PYVGPU_GPU_CHECK_OUT", "."))
    (out / "va_hints.json").write_text(json.dumps({"size": SIZE, "rows": rows, "unhinted": unhinted, "sizes": sizes,
                                                   "created_context": created, "slab": slab_result,
                                                   "backend": backend, "meminfo": info,
                                                   "findings": found}, indent=1))
    for r in rows:
        print(f"hint {r['hint_tib']:>3} TiB, 64 MiB: error {r['error']}, got {r['got']:#x}"
              f"{' (honoured)' if r['honoured'] else ''}")
    for what, table in (("primary context", sizes), ("created context", created)):
        for r in table:
            print(f"{what}{', host memory registered' if r.get('host_registered') else ''}: {r['mib']:>4} MiB at "
                  f"17 TiB: error {r['error']}, got {r['got']:#x}"
                  f"{' (honoured)' if r['honoured'] else ''}")
    print(f"slab (64 MiB at 17 TiB, granules mapped at +0 and +4 MiB): {slab_result}")
    print(f"backend (cuda_vmm.WindowMemory, 300 B, 3 MiB, 64 MiB for window 1): {backend['result']}")
    for r in info:
        print(f"meminfo (MiB, total {r['total_mib']:.0f}): cuMemCreate 64 MiB {r['create']:+.0f}, cuMemRelease "
              f"{r['release']:+.0f}, cuMemAlloc 64 MiB {r['alloc']:+.0f}, cuMemFree {r['free']:+.0f}; errors "
              f"{r['errors']}")
    for f in found:
        print(f"finding: {f['said']}")
    yes = [str(r["hint_tib"]) for r in rows if r["honoured"]]
    no = [str(r["hint_tib"]) for r in rows if not r["honoured"]]
    small = [str(r["mib"]) for r in sizes if r["honoured"]]
    moved = ",".join(f"{r['create']:+.0f}" for r in info)
    in_ctx = ",".join(f"{r['mib']}{'h' if r.get('host_registered') else ''}" for r in created if r["honoured"])
    print(f"va hints: 64 MiB honoured at {','.join(yes) or 'none'} TiB, not at {','.join(no) or 'none'} TiB; "
          f"unhinted {unhinted:#x}; at 17 TiB honoured for {','.join(small) or 'no'} MiB; created context "
          f"{in_ctx or 'none'} MiB (h: host memory registered); slab {slab_result}; backend's window places "
          f"{backend.get('places', backend['result'])}; cuMemCreate 64 MiB moved free by {moved} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
