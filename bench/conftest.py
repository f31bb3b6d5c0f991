"""pytest-benchmark suites of the hot paths (bench/test_hotpaths.py): `pytest bench/ --benchmark-only`.

Not part of CI's pass/fail (CI runs `pytest tests`); the checkout's own daemon and test helpers come first on the
path, as for the other benchmarks here."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "daemon"), str(ROOT), str(ROOT / "tests")]
