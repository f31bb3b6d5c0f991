"""Mixed load (issue 23, done-when of part 1): RUNS runs of CLIENTS concurrent CUDA clients x NOPS mixed operations
against one emulated-GPU daemon, every byte read back checked (tests/cuda/load_mixed.cu through libvcudart; the
load itself: tests/mixed_load.py). Prints one line per run and a total; exits 1 on any mismatch or failed client.

    python bench/load_bench.py [--runs 10] [--clients 32] [--ops 1000] [--backend emu]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from harness import start_daemon  # noqa: E402
from mixed_load import failed, run_clients  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--backend", default="emu")
    a = ap.parse_args()
    total_bad = total_mismatch = 0
    with tempfile.TemporaryDirectory() as work:
        for run in range(a.runs):
            d = start_daemon(Path(work), "--emu-devices", "1", "--compress", "off", backend=a.backend)
            try:
                t0 = time.monotonic()
                runs = run_clients(d, a.clients, a.ops, seed0=run * a.clients)
                dt = time.monotonic() - t0
            finally:
                d.stop()
            bad = failed(runs)
            mismatches = sum(max(r.mismatches, 0) for r in runs)
            total_bad += len(bad)
            total_mismatch += mismatches
            timeouts = d.log_text().count("timed out")
            print(f"run {run + 1}: {a.clients} clients x {a.ops} ops in {dt:.1f} s, "
                  f"{sum(r.checked for r in runs)} bytes checked, {mismatches} mismatches, {len(bad)} failed clients, "
                  f"{timeouts} sessions timed out", flush=True)
            for r in bad[:3]:
                print(f"  seed {r.seed}: rc {r.rc}: {r.output.strip().splitlines()[-1:]}", flush=True)
    print(f"total: {a.runs} runs, {total_mismatch} mismatches, {total_bad} failed clients")
    return 1 if total_bad or total_mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
