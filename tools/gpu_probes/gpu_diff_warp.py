"""Differential check (real-GPU check): issue 19's warp-level and barrier cases (tests/differential/run.py: PTX
kernels through the protocol client, compared bit for bit with the emulator's recorded outputs) against the check's
`--backend cuda` daemon. Its last line is run.py's summary; exit 0 when every case is identical."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "differential" / "run.py"

if __name__ == "__main__":
    if not RUN.is_file():
        print(f"warp cases: {RUN.relative_to(ROOT)} is not in this checkout")
        sys.exit(77)
    host, port = os.environ["PYVGPU_GPU_CHECK_HOSTS"].rsplit(":", 1)
    sys.exit(subprocess.call([sys.executable, str(RUN), "--host", host, "--port", port]))
