#!/usr/bin/env bash
# Install everything pyvgpu needs on Debian/Ubuntu and install the package (which builds libvcudart.so).
# Idempotent: installs only what is missing and skips the build when the sources did not change.
#   PYTHON=/path/to/python   install into that interpreter instead of the automatic choice (see common.sh)
#   PYVGPU_SETUP_FORCE=1     rebuild and reinstall even when nothing changed
#   PYVGPU_EXTRAS=test       pip extras to install with the package (default: test, plus cuda when
#                            nvidia-smi lists a GPU)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

say "1/3 system packages (C compiler, CMake, msgpack-c, OpenSSL)"
apt_ensure build-essential cmake pkg-config libmsgpack-dev libssl-dev

say "2/3 Python"
choose_python
info "using $PY ($("$PY" -V 2>&1))"

say "3/3 pyvgpu (pip install: builds libvcudart.so with CMake via scikit-build-core)"
extras="${PYVGPU_EXTRAS-test}"
# The daemon's real-GPU backend needs cuda-python: add it when this host has an NVIDIA GPU, so that
# `--backend auto` can pick the GPU (without it, auto falls back to the emulated device).
if [ -z "${PYVGPU_EXTRAS+x}" ] && command -v nvidia-smi >/dev/null 2>&1 \
        && grep -q '^GPU' <<<"$(nvidia-smi -L 2>/dev/null || true)"; then
    info "NVIDIA GPU found: installing the cuda extra (cuda-python) for the daemon's real-GPU backend"
    extras="test,cuda"
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
stamp_dir="$ROOT/build"
stamp="$stamp_dir/.setup-stamp-$(printf '%s' "$PY" | cksum | cut -d' ' -f1)"
digest="$( { printf '%s\n' "$PY" "$extras"; \
             find pyproject.toml CMakeLists.txt csrc pyvgpu daemon -type f \
                  ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 2>/dev/null \
             | sort -z | xargs -0 cksum; } | cksum | cut -d' ' -f1)"
installed_ok() {
    "$PY" - <<'PYEOF' >/dev/null 2>&1
import pyvgpu, pyvgpu_daemon, pyvgpu.cli
pyvgpu.lib_path()
PYEOF
}
missing_requirements() {  # requirements of the package and its extras that this Python lacks (no versions checked)
    "$PY" - "$extras" <<'PYEOF' 2>/dev/null || true
import re, sys
from importlib import metadata
try:
    import tomllib
except ImportError:          # Python 3.10: skip the check
    sys.exit(0)
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = list(project.get("dependencies", []))
for extra in filter(None, sys.argv[1].split(",")):
    reqs += project.get("optional-dependencies", {}).get(extra, [])
for req in reqs:
    try:
        metadata.version(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0])
    except metadata.PackageNotFoundError:
        print(req)
PYEOF
}
pip_show="$("$PY" -m pip show pyvgpu 2>/dev/null || true)"   # (not piped into grep -q: SIGPIPE + pipefail)
if grep -qxF "Editable project location: $ROOT" <<<"$pip_show"; then
    # A developer's editable install of this checkout: the Python code is already live. Reinstalling would put
    # a copy of libvcudart.so into site-packages that shadows later source builds, so build it where
    # `pyvgpu lib` finds it in a checkout (build/dev) instead, and add only missing dependencies.
    info "pyvgpu is installed editable from $ROOT: building libvcudart.so in build/dev (cmake)"
    cmake -S "$ROOT" -B "$ROOT/build/dev" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$ROOT/build/dev" -j "$(nproc 2>/dev/null || echo 2)"
    mapfile -t missing < <(missing_requirements)
    if [ "${#missing[@]}" -gt 0 ]; then
        info "installing missing dependencies: ${missing[*]}"
        "$PY" -m pip install --disable-pip-version-check --progress-bar off "${missing[@]}"
    fi
elif [ -z "${PYVGPU_SETUP_FORCE:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] && installed_ok; then
    info "already installed and up to date (sources unchanged since the last set-up; PYVGPU_SETUP_FORCE=1 rebuilds)"
else
    pip_args=(install --disable-pip-version-check --progress-bar off)
    # Build in this Python when it already has the build backend (no network needed), else let pip fetch it.
    if "$PY" -c 'import scikit_build_core' >/dev/null 2>&1; then
        pip_args+=(--no-build-isolation)
    fi
    info "$PY -m pip ${pip_args[*]} $spec"
    "$PY" -m pip "${pip_args[@]}" "$spec"
    mkdir -p "$stamp_dir"
    printf '%s\n' "$digest" > "$stamp"
fi

if lib="$("$PY" -c 'import pyvgpu; print(pyvgpu.lib_path())' 2>/dev/null)"; then
    info "interposer library: $lib"
    dev_lib="$ROOT/build/dev/lib/libvcudart.so"
    if [ "$lib" != "$dev_lib" ] && [ -f "$dev_lib" ] && [ "$dev_lib" -nt "$lib" ]; then
        warn "$dev_lib is newer than $lib, which is the one found first; PYVGPU_LIB=$dev_lib selects it"
    fi
else
    rm -f "$stamp"
    warn "libvcudart.so was not found after the install: $("$PY" -c 'import pyvgpu; pyvgpu.lib_path()' 2>&1 | tail -1)"
fi
info "pyvgpu command: $PY_SCRIPTS/pyvgpu"
