"""Differential check of the emulator's warp-level and barrier semantics against a real GPU (issue 19 part 4).

Runs every case of warp_cases.fixed_cases() (PTX kernels, loaded as PTX text, so any GPU's driver JIT-compiles
them) through a pyvgpu daemon with the protocol client, and compares each output bit for bit with the emulator's
recorded output (expected_emu.npz beside this file). Each case's PTX names the oldest target that has its
instruction (warp_cases.Form.target: sm_75, or sm_80 for redux.sync), so a GPU's JIT accepts it; a case the device
refuses counts as a difference and the others still run. Against a `--backend cuda` daemon this is the real-GPU
check; against an emulated GPU it checks that the recording is current.

    python tests/differential/run.py --port 7700 [--host 127.0.0.1] [--device 0]   # exit 1 on any difference
    python tests/differential/run.py --port 7700 --record                          # rewrite expected_emu.npz
                                                                                   # (from an emu daemon only)

Where the ISA leaves a value unpredictable (warp_cases.py), the emulator gives what NVIDIA's GPUs are reported to
give; a difference there on a real GPU means that report was wrong, and the emulator must follow the GPU.
"""
from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):
    sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

from differential.warp_cases import (DONT_CARE, WORDS_OUT, Case, compare, fixed_cases, kernel_ptx,  # noqa: E402
                                     model)
from pyvgpu.client import Client  # noqa: E402

EXPECTED = HERE / "expected_emu.npz"


def case_key(i: int, case: Case) -> str:
    return f"{i:03d}_{case.name}_{case.nthreads}"


def load_expected() -> dict[str, np.ndarray]:
    with np.load(EXPECTED) as z:
        return {k: z[k] for k in z.files}


class LoadFailed(Exception):
    """The device refused a case's PTX (its message names the case and the error)."""


def run_case(c: Client, dev: int, case: Case, module_id: int) -> np.ndarray:
    """Load the case's PTX, run it on device `dev`, return its output words; LoadFailed if the device refuses the
    PTX."""
    err, info, _ = c.call("MODULE_LOAD", dev, module_id, payload=kernel_ptx(case.form).encode())
    if err:
        raise LoadFailed(f"{case.name} (.target {case.form.target}): MODULE_LOAD failed with error {err}")
    fid = info["kernels"]["k"]["id"]
    nout = case.nthreads * WORDS_OUT * 4
    inp = c.check("MALLOC", dev, case.inp.nbytes)[0]
    out = c.check("MALLOC", dev, nout)[0]
    try:
        c.check("MEMCPY_HTOD", dev, inp, 0, payload=case.inp.tobytes())
        c.check("MEMCPY_HTOD", dev, out, 0, payload=bytes(nout))
        c.check("LAUNCH", dev, fid, [1, 1, 1], [case.nthreads, 1, 1], 0, 0, payload=struct.pack("<QQ", inp, out))
        data = c.check("MEMCPY_DTOH", dev, out, nout, 0)[1]
        return np.frombuffer(data, np.uint32).reshape(case.nthreads, WORDS_OUT).copy()
    finally:
        c.call("FREE", dev, inp)
        c.call("FREE", dev, out)
        c.call("MODULE_UNLOAD", dev, module_id)


def run_all(host: str, port: int, dev: int = 0, limit: int | None = None, record: bool = False) -> list[str]:
    """Run the cases; → one line per difference (empty: all match). record: write the outputs as the new
    expected_emu.npz instead of comparing."""
    cases = fixed_cases()[:limit]
    expected = {} if record else load_expected()
    got: dict[str, np.ndarray] = {}
    failures: list[str] = []
    with Client.connect(host, port) as c:
        for i, case in enumerate(cases):
            key = case_key(i, case)
            try:
                out = run_case(c, dev, case, 1000 + i)
            except LoadFailed as e:
                if record:
                    raise
                failures.append(f"{key}: {e}")
                continue
            got[key] = out
            if not record:
                # words the model leaves open (warp_cases.DONT_CARE) are not compared
                exp = np.where(model(case) == DONT_CARE, DONT_CARE, expected[key])
                for line in compare(out, exp)[:4]:
                    failures.append(f"{key}: {line}")
    if record:
        np.savez_compressed(EXPECTED, **got)
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--record", action="store_true", help="rewrite expected_emu.npz (run against an emu daemon)")
    args = ap.parse_args(argv)
    failures = run_all(args.host, args.port, args.device, record=args.record)
    n = len(fixed_cases())
    if args.record:
        print(f"recorded {n} cases in {EXPECTED}")
        return 0
    for line in failures:
        print(f"DIFF {line}")
    print(f"differential: {n} cases, {'all identical' if not failures else f'{len(failures)} differences'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
