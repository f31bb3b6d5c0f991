"""The framework probe's rule for a script that fails under pyvgpu (tests/frameworks/gpu_probe_frameworks.py): not
applicable when it fails natively too and nothing that passed natively failed under pyvgpu; pyvgpu's failure
otherwise. Outputs in tests/frameworks/fwcheck.py's format, as the 11:57 H100 run printed them."""
from __future__ import annotations

from gpu_probe_frameworks import native_verdict

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
