"""Smoke test of bench/blas_bench.py: a quick configuration runs end to end, directly and through libvcublas and a
daemon, and its figures are sane (the emulated GEMMs agree with NumPy's; a cuBLAS call in a loop costs no
blocking round trip). No timing assertions: the machine is shared and noisy."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_blas_bench_quick(tmp_path):
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "blas_bench.py"), "--quick", "--rounds", "2",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    rows = report["direct"]
    assert [r["case"].split()[0] for r in rows] == ["SGEMM", "GemmEx", "SGEMM"]
    for r in rows:
        assert all(math.isfinite(r[k]) and r[k] > 0 for k in ("flops", "emu_s", "numpy_s", "ratio"))
        assert r["max_abs_err"] <= (0.05 if "fp16" in r["case"] else 1e-3)
    assert "| SGEMM 128^3 (fp32) |" in proc.stdout
    rem = report["remote"]                      # through libvcublas: a real program, a daemon
    assert rem["round_trips_per_call"] == 0 and rem["loop_calls"] == 50
    assert rem["maxerr_col0"] < 1e-3 and rem["remote_sgemm_ms"] > 0 and rem["numpy_ms"] > 0
