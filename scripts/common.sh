# Sourced by the scripts in this directory: logging, privilege escalation, choosing the Python to install into.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT

say()  { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }
die()  { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# Run a command as root: directly when we are root, else through sudo (non-interactive when there is no tty).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        if [ -t 0 ]; then sudo "$@"; else sudo -n "$@"; fi
    else
        die "need root to run: $* (run this script as root, or install sudo)"
    fi
}

dpkg_installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

# apt_ensure PKG...: install the packages that are missing (Debian/Ubuntu). No-op when all are present.
apt_ensure() {
    local missing=() pkg
    if ! command -v dpkg-query >/dev/null 2>&1; then
        warn "not a Debian/Ubuntu system: make sure these are installed yourself: $*"
        return 0
    fi
    for pkg in "$@"; do
        dpkg_installed "$pkg" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        info "system packages present: $*"
        return 0
    fi
    info "installing system packages: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

py_ok() {  # py_ok PYTHON: Python >= 3.10 with a working pip that may install packages
    "$1" - <<'PYEOF' >/dev/null 2>&1
import os, sys, sysconfig
assert sys.version_info >= (3, 10)
import pip  # noqa: F401
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
assert not (os.path.exists(marker) and sys.prefix == sys.base_prefix), "externally managed"
PYEOF
}

# Sets PY to the interpreter pyvgpu is installed into:
#   $PYTHON if set; else the project's .venv if it exists; else `python3`/`python` on PATH when pip may install
#   into it (a pyenv/conda/venv Python, CI); else a new .venv (Debian's system Python is "externally managed").
choose_python() {
    if [ -n "${PYTHON:-}" ]; then
        PY="$PYTHON"
    elif [ -x "$ROOT/.venv/bin/python" ]; then
        PY="$ROOT/.venv/bin/python"
    else
        PY="$(command -v python3 || command -v python || true)"
        if [ -z "$PY" ]; then
            apt_ensure python3 python3-venv python3-pip
            PY="$(command -v python3)"
        fi
        if ! py_ok "$PY"; then
            "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
                || die "$PY is Python $("$PY" -V 2>&1); pyvgpu needs Python >= 3.10"
            info "$PY may not be pip-installed into; using a virtual environment in $ROOT/.venv"
            "$PY" -m venv "$ROOT/.venv" 2>/dev/null || {
                rm -rf "$ROOT/.venv"
                local ver; ver="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
                apt_ensure python3-venv "python${ver}-venv"
                "$PY" -m venv "$ROOT/.venv"
            }
            PY="$ROOT/.venv/bin/python"
        fi
    fi
    py_ok "$PY" || die "$PY cannot install packages with pip (Python >= 3.10 with pip needed; set PYTHON=...)"
    PY_SCRIPTS="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
    export PY PY_SCRIPTS
}

# The installed `pyvgpu` command of that Python.
pyvgpu_cmd() {
    if [ -x "$PY_SCRIPTS/pyvgpu" ]; then "$PY_SCRIPTS/pyvgpu" "$@"; else "$PY" -m pyvgpu.cli "$@"; fi
}
