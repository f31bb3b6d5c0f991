#!/usr/bin/env bash
# The main job, from nothing: set up (scripts/setup.sh), start a local daemon on the best backend available
# (`auto`: this host's GPU if it has one, else the emulated GPU), build examples/hello with nvcc twice (-cudart
# shared, and the default static-runtime build), run both through pyvgpu (libvcudart, libvcuda), print what they
# computed, stop the daemon. Safe to run again.
#   PYVGPU_DEMO_PORT=N   port for the daemon (default: 7700, or the next free port above it)
#   PYVGPU_DEMO_BACKEND  auto (default), cuda or emu
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

bash "$ROOT/scripts/setup.sh"
choose_python

say "starting a local daemon"
port="${PYVGPU_DEMO_PORT:-$("$PY" - <<'PYEOF'
import socket
for port in range(7700, 7800):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
PYEOF
)}"
[ -n "$port" ] || die "no free port in 7700..7799 (set PYVGPU_DEMO_PORT)"
backend="${PYVGPU_DEMO_BACKEND:-auto}"
pyvgpu_cmd daemon start --detach --backend "$backend" --port "$port"
log="$("$PY" -c "from pyvgpu import config; print(config.daemon_log_path($port))")"
stop_daemon() {
    say "stopping the daemon"
    pyvgpu_cmd daemon stop --port "$port" || true
}
trap stop_daemon EXIT

say "GPUs the client sees (pyvgpu devices)"
pyvgpu_cmd devices --hosts "127.0.0.1:$port"

say "building examples/hello (nvcc -cudart shared)"
NVCC="${NVCC:-$(command -v nvcc || true)}"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
    cat <<MSG
    nvcc (the CUDA toolkit) is not installed, so the sample CUDA program cannot be built here.
    nvcc is needed only to BUILD CUDA programs: install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads),
    or build examples/hello/vector_add.cu on any machine that has it with
        nvcc -cudart shared -o hello examples/hello/vector_add.cu
    and run the binary here with:  pyvgpu run --hosts 127.0.0.1:<port> -- ./hello
    The daemon above worked: it answered 'pyvgpu devices'.
MSG
    exit 0
fi
out="$ROOT/build/examples/hello"
mkdir -p "$(dirname "$out")"
if [ ! -x "$out" ] || [ examples/hello/vector_add.cu -nt "$out" ]; then
    info "$NVCC -cudart shared -O2 -o $out examples/hello/vector_add.cu"
    "$NVCC" -cudart shared -O2 -o "$out" examples/hello/vector_add.cu
else
    info "up to date: $out"
fi

say "running examples/hello through libvcudart: pyvgpu run --hosts 127.0.0.1:$port -- build/examples/hello"
if ! pyvgpu_cmd run --hosts "127.0.0.1:$port" -- "$out"; then
    warn "the sample program failed; the daemon's log ($log) ends with:"
    tail -n 20 "$log" >&2 || true
    exit 1
fi
# The default nvcc build links NVIDIA's static runtime, which reaches the GPU through the driver: the same
# program then runs through libvcuda (the drop-in libcuda.so.1) with no rebuild for pyvgpu.
out_static="$ROOT/build/examples/hello_static"
if [ ! -x "$out_static" ] || [ examples/hello/vector_add.cu -nt "$out_static" ]; then
    info "$NVCC -O2 -o $out_static examples/hello/vector_add.cu   (default build: static CUDA runtime)"
    "$NVCC" -O2 -o "$out_static" examples/hello/vector_add.cu
fi
say "running the default (static runtime) build through libvcuda: pyvgpu run --hosts 127.0.0.1:$port -- build/examples/hello_static"
if ! pyvgpu_cmd run --hosts "127.0.0.1:$port" -- "$out_static"; then
    warn "the statically linked sample failed; the daemon's log ($log) ends with:"
    tail -n 20 "$log" >&2 || true
    exit 1
fi
actual="$("$PY" -c "from pyvgpu.client import Client
c = Client.connect('127.0.0.1', $port)
print(c.info.get('backend', '?')); c.close()" 2>/dev/null || echo "$backend")"
say "done: the vector add above ran on the daemon's GPU (backend $actual), through libvcudart and through libvcuda"
