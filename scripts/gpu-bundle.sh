#!/usr/bin/env bash
# The offline bundle for scripts/gpu-check.sh on a GPU machine without network (tools/gpu_bundle.py): wheels of the
# Python packages its image lacks, the client libraries prebuilt for x86-64, msgpack-c/OpenSSL headers so they can
# be built there, cuBLAS's headers. Run it here (it needs PyPI), then carry the folder it prints:
#   bash scripts/gpu-bundle.sh [--out DIR] [--no-wheels] [--no-cublas]     (default DIR: .gpu-bundle, git-ignored)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
exec "$PY" "$ROOT/tools/gpu_bundle.py" make "$@"
