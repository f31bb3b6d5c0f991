#!/usr/bin/env bash
# The whole test suite: set up (scripts/setup.sh installs the system packages, builds libvcudart.so and installs
# pyvgpu with its test dependencies into the chosen Python; scripts/setup-slurm.sh installs Slurm and munge for
# tests/slurm), then run pytest over tests/, then the whole suite a second time with the daemon forced to its Python
# frame path (PYVGPU_DAEMON_COMPILED=0: both paths must pass every test; docs/architecture.md, "The daemon's frame
# path"; the first pass took 18.7 min on an idle 2-core VM on 2026-11-26, the second takes about as long). The exit
# status is the first failing pass's (0 when both pass). Extra arguments go to both pytest runs
# (e.g. scripts/test.sh -x -k hostmap).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

bash "$ROOT/scripts/setup.sh"
bash "$ROOT/scripts/setup-slurm.sh"      # tests/slurm run real slurmctld/slurmd processes
bash "$ROOT/scripts/setup-frameworks.sh"     # the frameworks tier: PyTorch, CuPy, numba-cuda (tests/frameworks)
choose_python

# The CUDA toolkit's usual home is not always on PATH; the test fixtures look for nvcc on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="$PATH:/usr/local/cuda/bin"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/bin/nvcc ]; then
    warn "nvcc (CUDA 13) not found: the tests that build CUDA programs under tests/ cannot run here"
fi
# cuBLAS's headers for the CUDA test programs that call cuBLAS: read once out of PyPI's nvidia-cublas wheel with
# HTTP range requests (a few MB; the whole 444 MB wheel only where that fails), kept in build/cublas/. Only tests
# need them: a client running a binary needs nothing from NVIDIA.
say "cuBLAS headers for the test programs (tools/cublas_wheel.py)"
info "$("$PY" "$ROOT/tools/cublas_wheel.py")"
# --durations: each pass ends with its slowest tests, to see one that nears its timeout before it passes it
# (tests/README.md, "Test reliability").
say "running the test suite: $PY -m pytest -q tests --durations=25 $*"
status=0
"$PY" -m pytest -q tests --durations=25 "$@" || status=$?
# Tiers that never start a daemon run twice too: a list of those that do would go stale. One test is left to the
# first pass: the replay of every test program's captured frames starts its own daemons of each frame path (the
# environment does not change it) and takes about a minute.
ONCE=tests/daemon/test_framepath.py::test_captured_programs_same_on_both_paths
say "the whole suite again on the daemon's Python frame path: PYVGPU_DAEMON_COMPILED=0 $PY -m pytest -q tests --durations=25 --deselect $ONCE $*"
second=0
PYVGPU_DAEMON_COMPILED=0 "$PY" -m pytest -q tests --durations=25 --deselect "$ONCE" "$@" || second=$?
[ "$second" -eq 5 ] && second=0          # pytest's "no tests selected": the first pass has said so already
[ "$status" -eq 0 ] && status=$second
exit "$status"
