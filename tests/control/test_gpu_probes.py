"""The framework probes' verdict (tools/gpu_probes/probe_common.py): a step that fails natively as well is not
pyvgpu's failure (GPU run 1: numba-cuda against NumPy 2.5 failed natively), a step that fails only through pyvgpu is."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu_probes"))
import probe_common  # noqa: E402

# Step "b" fails in the ways named by FAILS_B, step "a" in those named by FAILS_A (each way runs in its own process).
BODY = '''
import os
def fails(step):
    return os.environ["PROBE_WAY"] in os.environ.get("FAILS_" + step.upper(), "").split(",")
def b():
    if fails("b"):
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")    # as numba-cuda met NumPy 2.5
    return "fine"
step("a", lambda: 1 / 0 if fails("a") else "fine")
step("b", b)
'''


def run(monkeypatch, capsys, fails_a: str = "", fails_b: str = "") -> tuple[int, str]:
    def ways():
        return [(name, {**os.environ, "PROBE_WAY": name, "FAILS_A": fails_a, "FAILS_B": fails_b})
                for name in ("native", "driver", "pyvgpu run")]
    monkeypatch.setattr(probe_common, "ways", ways)
    monkeypatch.setenv("PYVGPU_GPU_CHECK_SECONDS", "120")
    rc = probe_common.main("toy", "os", BODY)
    return rc, capsys.readouterr().out.strip().splitlines()[-1]


@pytest.mark.parametrize("fails_a,fails_b,rc,says", [
    ("", "", 0, "toy: native 2/2; driver 2/2; pyvgpu run 2/2"),
    ("", "native,driver,pyvgpu run", probe_common.SKIP, "toy: not applicable: fails natively: b: FAIL "),
    ("driver", "native,driver,pyvgpu run", 1, "toy: fails through pyvgpu where native passes (driver: a)"),
    ("", "driver,pyvgpu run", 1, "toy: native 2/2; driver 1/2"),
    ("", "native,driver", 0, "toy: native 1/2"),                  # a pyvgpu way passed everything
])
def test_verdict(monkeypatch, capsys, fails_a, fails_b, rc, says):
    got_rc, last = run(monkeypatch, capsys, fails_a, fails_b)
    assert (got_rc, last[:len(says)]) == (rc, says), last
    if rc == probe_common.SKIP:
        assert "row_stack" in last                                # the native failure's own words
