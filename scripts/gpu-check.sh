#!/usr/bin/env bash
# The real-GPU check: on a host with an NVIDIA GPU, set up (scripts/setup.sh builds every client library and installs
# pyvgpu; cuda-python for the daemon's cuda backend), then tools/gpu_check.py: the GPU tests, the CUDA test programs
# through `--backend cuda` daemons, local against remote benchmarks, a report in build/gpu-check/report.md.
# Without a usable GPU it says so and exits 0 (CI has none: tests/control/test_gpu_check.py runs that path).
#   bash scripts/gpu-check.sh [--quick] [--out DIR]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

# Why no GPU can be used, before building anything (empty: there may be one; the CUDA driver has the last word).
no_gpu_reason() {
    case "${CUDA_VISIBLE_DEVICES-unset}" in
        ""|-1) echo "CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES}' hides every GPU"; return ;;
    esac
    if [ ! -e /dev/nvidiactl ] && ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "no NVIDIA driver here (no /dev/nvidiactl, no nvidia-smi)"
        return
    fi
    if command -v nvidia-smi >/dev/null 2>&1 && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        echo "nvidia-smi lists no GPU"
    fi
}

reason="$(no_gpu_reason)"
if [ -n "$reason" ]; then
    echo "gpu-check: no usable GPU: $reason; nothing to check"
    exit 0
fi

bash "$ROOT/scripts/setup.sh"
choose_python
if ! "$PY" -c "import cuda.bindings.driver" >/dev/null 2>&1 && ! "$PY" -c "from cuda import cuda" >/dev/null 2>&1; then
    say "cuda-python for the daemon's cuda backend"
    "$PY" -m pip install -q "cuda-python>=12.4" || die "cuda-python could not be installed: the cuda backend needs it"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="$PATH:/usr/local/cuda/bin"
fi
say "cuBLAS headers for the test programs (tools/cublas_wheel.py)"
info "$("$PY" "$ROOT/tools/cublas_wheel.py")"
say "GPU check (tools/gpu_check.py)"
exec "$PY" "$ROOT/tools/gpu_check.py" "$@"
