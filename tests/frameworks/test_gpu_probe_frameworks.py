"""The framework probe's rule for a script that fails under pyvgpu (tests/frameworks/gpu_probe_frameworks.py): not
applicable when it fails natively too and nothing that passed natively failed under pyvgpu; pyvgpu's failure
otherwise. Outputs in tests/frameworks/fwcheck.py's format, as the 11:57 H100 run printed them."""
from __future__ import annotations

import subprocess

from gpu_probe_frameworks import native_verdict, python_for

ROW_STACK = "AttributeError: module 'numpy' has no attribute 'row_stack'"
NUMBA = "".join(f"WRONG {c}: {ROW_STACK}\n" for c in ("saxpy", "shared-memory block sums", "atomic histogram")) \
    + "numba: 0 ok, 0 refused, 3 wrong or failed\n"


def test_failing_natively_the_same_way_is_not_applicable():
    assert native_verdict(NUMBA, 1, NUMBA) == f"fails natively: WRONG saxpy: {ROW_STACK}"


def test_a_crash_before_any_check_natively_is_not_applicable():
    assert native_verdict(NUMBA, 1, "Traceback ...\nImportError: no numpy\n") == "fails natively: ImportError: no numpy"
    assert native_verdict("", 139, "") == "fails natively: exit 139"


def test_native_pass_blames_pyvgpu():
    remote = "ok dot\nWRONG jnp.dot: JaxRuntimeError: cudaErrorNotSupported\njax: 1 ok, 0 refused, 1 wrong or failed\n"
    assert native_verdict(remote, 0, "ok dot\nok jnp.dot\njax: 2 ok, 0 refused, 0 wrong or failed\n") is None


def test_a_check_that_passed_natively_and_failed_through_pyvgpu_blames_pyvgpu():
    remote = "WRONG conv: cudaErrorNoKernelImageForDevice\nWRONG adam: NaN\n"
    native = "ok conv\nWRONG adam: NaN\ntorch: 1 ok, 0 refused, 1 wrong or failed\n"
    assert native_verdict(remote, 1, native) is None
    assert native_verdict("refused conv: cudaErrorNotSupported\n", 1, native) is None


def test_the_numba_prelude_runs_the_script_as_itself(tmp_path):
    """The NumPy 2.5 shim of the numba script's processes (GPU check only): the script runs as __main__ with its own
    arguments; where NumPy has np.row_stack (here) it is left as NumPy made it; where not, it is np.vstack."""
    script = tmp_path / "s.py"
    script.write_text("import sys, numpy as np\n"
                      "print(__name__, sys.argv[1:], np.row_stack is np.vstack, np.row_stack([[1], [2]]).tolist())\n")
    out = subprocess.run([*python_for("numba"), str(script), "--real", "x"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip().splitlines()[-1] == "__main__ ['--real', 'x'] False [[1], [2]]"
    gone = tmp_path / "gone.py"                     # NumPy 2.5 simulated: the alias deleted before the prelude runs
    gone.write_text("import numpy, sys\ndel numpy.row_stack\ncode = sys.argv[1]\nsys.argv = ['-c'] + sys.argv[2:]\n"
                    "exec(code)\n")
    out = subprocess.run([python_for("numba")[0], str(gone), python_for("numba")[2], str(script), "y"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "numpy shim: np.row_stack = np.vstack" in out and out.strip().splitlines()[-1].endswith("True [[1], [2]]")
    assert python_for("torch") == python_for("numba")[:1]
