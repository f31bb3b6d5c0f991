#!/usr/bin/env bash
# The real-GPU check, offline and within a time budget (tools/gpu_check.py; docs/gpu-check.md): on a GPU machine
# that reaches no package registry, with what the image lacks carried in the offline bundle (scripts/gpu-bundle.sh
# makes .gpu-bundle/ here). No apt, no pip download, no virtual environment: it uses the `python3` on PATH (the GPU
# image's, with torch, cupy, cuda-bindings, numpy, msgpack, uvloop) and the checkout on PYTHONPATH.
#   bash scripts/gpu-check.sh [--budget SECONDS] [--out DIR] [--bundle DIR] [--stages LIST] [--libs HOW]
#   bash scripts/gpu-check.sh --rehearse ...   the same on a machine without a GPU or network: the chain stands in
#                                              for the GPU, in a network namespace of its own (unshare -n) when it can
# Without a usable GPU (and without --rehearse) it says so and exits 0. The report goes to --out, default $OUT when
# set, else build/gpu-check/out: report.md, report.json, gpu-check.log, logs.tar.gz, written as it goes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The interpreter: $PYTHON, else the first Python >= 3.10 with cuda-python (the daemon's cuda backend) among python3 on
# PATH and the GPU image's /opt/torch/.venv/bin/python3, else python3 on PATH (the report then says what is missing).
pick_python() {
    local c
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    for c in "$(command -v python3 || true)" /opt/torch/.venv/bin/python3 "$(command -v python || true)"; do
        if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info >= (3, 10)
import cuda.bindings.driver' >/dev/null 2>&1; then
            echo "$c"; return
        fi
    done
    command -v python3 || command -v python || true
}
PY="$(pick_python)"
if [ -z "$PY" ] || ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "gpu-check: no Python >= 3.10 on PATH (set PYTHON=...)" >&2
    exit 1
fi

rehearse=0
for arg in "$@"; do [ "$arg" = "--rehearse" ] && rehearse=1; done
# The rehearsal runs without network, as on the GPU machine: a new network namespace with only loopback up.
if [ "$rehearse" = 1 ] && [ -z "${PYVGPU_GPU_CHECK_NETNS:-}" ] && command -v unshare >/dev/null 2>&1; then
    for how in -n -rn; do
        if unshare "$how" true 2>/dev/null; then
            export PYVGPU_GPU_CHECK_NETNS="unshare $how"
            exec unshare "$how" bash -c '
                ip link set lo up 2>/dev/null || "$0" -c "
import fcntl, socket, struct
s = socket.socket(); req = struct.pack(\"16sH\", b\"lo\", 0)
flags = struct.unpack(\"16sH\", fcntl.ioctl(s, 0x8913, req))[1]
fcntl.ioctl(s, 0x8914, struct.pack(\"16sH\", b\"lo\", flags | 1))"
                exec bash "$1" "${@:2}"' "$PY" "${BASH_SOURCE[0]}" "$@"
        fi
    done
    echo "gpu-check: no network namespace (unshare -n failed): the rehearsal runs with this machine's network" >&2
fi

export PYTHONPATH="$ROOT:$ROOT/daemon${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" "$ROOT/tools/gpu_check.py" "$@"
