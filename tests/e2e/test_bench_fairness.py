"""Smoke test of bench/fairness_bench.py: a short fair/off pair of 8-tenant runs completes and its figures are
consistent (every tenant measured, shares of device time summing to one). No fairness threshold here: the machine
is shared and noisy (tests/daemon/test_sharing.py asserts a share on a smaller run)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness import NVCC, ROOT


@pytest.mark.emu_only("the benchmark shares emulated GPUs (bench/fairness_bench.py starts --backend emu daemons)")
def test_fairness_bench_tiny(tmp_path):
    from pathlib import Path
    if not Path(NVCC).exists():
        pytest.skip("nvcc not installed")
    out = tmp_path / "f.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fairness_bench.py"), "--quick", "--only", "fairness",
                           "--seconds", "3", "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = json.loads(out.read_text())["fairness"]["runs"]
    assert [(r["scheduling"], r["flood"]) for r in runs] == [("fair", "kernels"), ("off", "kernels")]
    for r in runs:
        tenants = r["tenants"]
        assert [t["kind"] for t in tenants] == ["steady"] * 7 + ["flood-kernels"]
        assert all(t["ops"] > 0 and t["device_s"] > 0 for t in tenants)
        assert abs(sum(t["device_of_fair"] * t["fair_share"] for t in tenants) - 1.0) < 1e-9
        assert abs(sum(t["kernels_of_fair"] * t["fair_share"] for t in tenants) - 1.0) < 1e-9
        assert r["min_steady_kernels_of_fair"] == min(t["kernels_of_fair"] for t in tenants[:7])
    assert "fairness fair flood=kernels" in proc.stdout
