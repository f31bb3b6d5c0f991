#!/usr/bin/env bash
# The frameworks tier of the tests (tests/frameworks): PyTorch (cu13 build), CuPy (cupy-cuda13x) and numba-cuda,
# installed into the same Python as the rest of the tests with pip (cached by pip; a no-op when they are there).
# scripts/test.sh calls it after scripts/setup.sh. PYVGPU_FRAMEWORKS=0 skips it (tests/frameworks then fail, they
# do not skip). The versions are the ones the tests were written against.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
choose_python
if [ "${PYVGPU_FRAMEWORKS:-1}" = "0" ]; then
    warn "PYVGPU_FRAMEWORKS=0: frameworks not installed (tests/frameworks will fail)"
    exit 0
fi
FRAMEWORKS=(torch==2.14.1 "cupy-cuda13x==14.2.0" "numba-cuda==0.30.4")
say "frameworks tier: ${FRAMEWORKS[*]}"
start=$(date +%s)
if "$PY" - <<'PYEOF' >/dev/null 2>&1
from importlib import metadata
want = {"torch": "2.14.1", "cupy-cuda13x": "14.2.0", "numba-cuda": "0.30.4"}
assert all(metadata.version(k).split("+")[0] == v for k, v in want.items())
PYEOF
then
    info "already installed"
else
    "$PY" -m pip install --disable-pip-version-check --progress-bar off "${FRAMEWORKS[@]}"
fi
info "frameworks tier set up in $(( $(date +%s) - start )) s"
