"""Smoke test of bench/remoting_bench.py: a tiny configuration runs end to end and its output is sane and internally
consistent. No timing assertions (the machine is shared and noisy)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

from harness import ROOT


def test_remoting_bench_tiny(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "remoting_bench.py"), "--quick", "--sizes", "65536",
                           "--rounds", "2", "--lat-iters", "20", "--ff-iters", "20", "--aggregate", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert "| H2D | pinned | 64 KiB |" in proc.stdout and "cudaMemGetInfo" in proc.stdout

    def pos(x):
        return isinstance(x, (int, float)) and math.isfinite(x) and x > 0

    bw = res["bandwidth"]
    assert {(r["direction"], r["memory"]) for r in bw} == {(d, m) for d in ("h2d", "d2h")
                                                           for m in ("pinned", "pageable")}
    for r in bw:
        assert r["bytes"] == 65536 and r["samples"] >= 2 and r["raw_samples"] >= 2
        assert all(pos(r[k]) for k in ("pyvgpu_GBps", "raw_GBps", "ratio", "pyvgpu_median_us", "raw_median_us"))
        assert math.isclose(r["ratio"], r["pyvgpu_GBps"] / r["raw_GBps"], rel_tol=1e-9)
        assert math.isclose(r["pyvgpu_GBps"], r["bytes"] / (r["pyvgpu_median_us"] * 1e3), rel_tol=1e-9)
    for r in res["latency"]:
        assert r["samples"] == 40 and r["raw_samples"] == 40
        assert 0 < r["pyvgpu_p50_us"] <= r["pyvgpu_p99_us"] and 0 < r["raw_p50_us"] <= r["raw_p99_us"]
        assert math.isclose(r["ratio_p50"], r["pyvgpu_p50_us"] / r["raw_p50_us"], rel_tol=1e-9)
    assert [r["op"] for r in res["fire_and_forget"]] == ["empty kernel <<<1,1>>>", "cudaMemsetAsync 4 B",
                                                         "cudaEventRecord"]
    for r in res["fire_and_forget"]:
        assert r["per_run"] == 20 and r["runs"] == 2
        assert all(pos(v) for k, v in r.items() if k not in ("op", "per_run", "runs"))
        # completed rate (enqueue + final sync) can never beat the enqueue rate alone
        assert r["pyvgpu_completed_per_s"] <= r["pyvgpu_enqueue_per_s"]
        assert r["raw_completed_per_s"] <= r["raw_send_per_s"]
    assert [r["direction"] for r in res["aggregate"]] == ["h2d", "d2h"]
    assert all(pos(r["pyvgpu_GBps"]) and pos(r["raw_GBps"]) for r in res["aggregate"])
