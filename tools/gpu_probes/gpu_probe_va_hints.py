"""Which virtual addresses the GPU host's driver gives when asked for them (cuMemAddressReserve with a hint).

The cuda backend places each session's memory in the pointer window of its host, at one of the window's candidate
places (backends/cuda_vmm.py, window_candidates: 16 TiB above window k's address (k + 1) TiB, then 48 TiB above,
then the address itself), so that pointers of different GPU hosts never collide. GPU runs 2 and 3 (H100, driver
580) showed the driver never placing a range at 1 TiB, whatever else was free there. This probe asks the driver
itself, natively (no pyvgpu), at hints from 1 TiB to 120 TiB and at the candidate places of the first two windows,
and reports where a hint is honoured, so that CANDIDATE_OFFSETS can be confirmed or changed from facts. It passes
when it could ask; what it found is its summary and va_hints.json.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

TIB = 1 << 40
HINTS_TIB = (1, 2, 3, 4, 8, 16, 17, 18, 32, 33, 48, 49, 50, 64, 100, 120)   # 17/18, 49/50: windows 1, 2's places
SIZE = 64 << 20


def main() -> int:
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        print(f"va hints: not applicable: no libcuda.so.1 ({exc})")
        return 77
    u64 = ctypes.c_uint64
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for what, err in (("cuInit", cu.cuInit(0)), ("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0)),
                      ("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)),
                      ("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))):
        if err:
            print(f"va hints: {what} failed with {err}")
            return 1
    cu.cuMemAddressReserve.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, ctypes.c_size_t, u64, u64]
    cu.cuMemAddressFree.argtypes = [u64, ctypes.c_size_t]
    rows = []
    for tib in HINTS_TIB:
        hint = tib * TIB
        got = u64()
        err = cu.cuMemAddressReserve(ctypes.byref(got), SIZE, 2 << 20, hint, 0)
        rows.append({"hint_tib": tib, "error": err, "got": got.value, "honoured": err == 0 and got.value == hint})
        if err == 0:
            cu.cuMemAddressFree(got.value, SIZE)
    unhinted = u64()
    err = cu.cuMemAddressReserve(ctypes.byref(unhinted), SIZE, 2 << 20, 0, 0)
    if err == 0:
        cu.cuMemAddressFree(unhinted.value, SIZE)
    out = Path(os.environ.get("PYVGPU_GPU_CHECK_OUT", "."))
    (out / "va_hints.json").write_text(json.dumps({"size": SIZE, "rows": rows, "unhinted": unhinted.value}, indent=1))
    for r in rows:
        print(f"hint {r['hint_tib']:>3} TiB: error {r['error']}, got {r['got']:#x}"
              f"{' (honoured)' if r['honoured'] else ''}")
    yes = [str(r["hint_tib"]) for r in rows if r["honoured"]]
    no = [str(r["hint_tib"]) for r in rows if not r["honoured"]]
    print(f"va hints: honoured at {','.join(yes) or 'none'} TiB; not at {','.join(no) or 'none'} TiB; "
          f"unhinted {unhinted.value:#x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
