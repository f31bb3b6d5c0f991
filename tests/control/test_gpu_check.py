"""scripts/gpu-check.sh on a host without a usable GPU (CI): it says why and exits 0, without building anything.
Where a GPU is present, CUDA_VISIBLE_DEVICES='' hides it, so the same path runs everywhere."""
from __future__ import annotations

import os
import subprocess
import sys

from harness import ROOT


def test_gpu_check_without_a_gpu_says_so_and_exits_0():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpu-check: no usable GPU: CUDA_VISIBLE_DEVICES='' hides every GPU; nothing to check" in proc.stdout


def test_gpu_check_tool_reports_the_drivers_answer(tmp_path):
    """tools/gpu_check.py itself asks the CUDA driver (cuInit, cuDeviceGetCount); with every GPU hidden it finds none
    and exits 0 with the driver's reason."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("no usable GPU: ") and "nothing to check" in proc.stdout
    assert not (tmp_path / "report.md").exists()
