"""Fixtures of the client-core tests in this directory."""
from __future__ import annotations

import subprocess
import sys

import pytest

from harness import ROOT


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory):
    """The protocol's generated C headers (tools/gen_protocol_c.py), for compiling against csrc/core's headers."""
    out = tmp_path_factory.mktemp("gen")
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_protocol_c.py"), str(out)], check=True,
                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    return out
