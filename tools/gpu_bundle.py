#!/usr/bin/env python3
"""The offline bundle of the real-GPU check: what scripts/gpu-check.sh needs on a GPU machine that reaches no package
registry, beyond what its image holds (../shared/reference/frameworks.md: Python 3.12 with torch, cupy, numba-cuda,
cuda-bindings, numpy, msgpack, uvloop, CMake, nvcc; no cffi, lz4, zstandard, cryptography, most likely no msgpack-c
or OpenSSL headers).

    python tools/gpu_bundle.py make [--out .gpu-bundle]     (scripts/gpu-bundle.sh runs this)
    python tools/gpu_bundle.py check [--bundle .gpu-bundle]  is the bundle current for this checkout?

The bundle (an ignored folder, carried to the GPU machine with the working tree):
  MANIFEST.json      the source digest the libraries were built from, the wheels and the modules they provide,
                     what each file weighs, the glibc/OpenSSL versions the libraries need
  wheels/*.whl       cffi + pycparser (the daemon's real cuBLAS), lz4, zstandard (compressed payloads and fatbins),
                     for CPython 3.12 on manylinux x86-64 (pip install --no-index there; cryptography is left out:
                     it only makes self-signed certificates for daemons listening beyond loopback)
  libs.tar.gz        the client libraries built here for x86-64 (lib/: libpvcore.so, libvcudart.so, libvcuda.so.1,
                     libvcublas.so, libvnvml.so.1 and their loader names; libpvdrvcall.so and pv_drvcall.h, the
                     daemon's compiled driver calls; libpvframe.so, the daemon's compiled frame path), msgpack-c
                     linked in statically: they
                     need only libssl.so.3, libcrypto.so.3 and glibc (checked with ldd when the bundle is made)
  sysroot.tar.gz     msgpack-c's headers and static archive with a CMake package file, OpenSSL's headers: so the
                     libraries build from the sources there even without libmsgpack-dev / libssl-dev
  cublas.tar.gz      cuBLAS's headers (tools/cublas_wheel.py's cache) for the cuBLAS test programs

The GPU check builds the libraries from the checkout's sources when it can and uses the carried ones only when that
fails, and only when their source digest (CMakeLists.txt, csrc/, pyvgpu/) equals the checkout's: stale prebuilt
libraries never run silently.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".gpu-bundle"
MANIFEST = "MANIFEST.json"
BUNDLE_VERSION = 1
# The sources the client libraries are built from (pyvgpu/: the generators CMake runs and the spec they read).
SOURCE_PATHS = ("CMakeLists.txt", "csrc", "pyvgpu")
# Distribution → the module it provides, for each package the project needs that the GPU image lacks.
WHEELS = {"cffi": "cffi", "pycparser": "pycparser", "lz4": "lz4", "zstandard": "zstandard"}
# What the GPU image holds (KINDS.md's package list), and why a missing requirement is not carried.
IMAGE_HAS = frozenset({"msgpack", "uvloop", "numpy", "prometheus_client", "cuda-python", "cuda-bindings",
                       "nvidia-cublas"})
NOT_CARRIED = {"cryptography": "only for self-signed certificates of daemons beyond loopback (pyvgpu/tls.py)"}
# The wheel tags of the GPU machine's python3 (CPython 3.12, glibc >= 2.28, x86-64).
WHEEL_PYTHON = "3.12"
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                   "manylinux1_x86_64")
# What a carried library may link against (anything else would have to be on the GPU machine).
ALLOWED_NEEDED = re.compile(r"^(linux-vdso\.so\.1|libssl\.so\.3|libcrypto\.so\.3|libc\.so\.6|libm\.so\.6|"
                            r"libpthread\.so\.0|libdl\.so\.2|ld-linux-x86-64\.so\.2|libpvcore\.so)$")
# libpvdrvcall.so (and pv_drvcall.h beside it, carried with lib/): the daemon's compiled calls of the cuda backend;
# libpvframe.so: the daemon's compiled frame path (framepath.py)
LIB_FILES = ("libpvcore.so", "libvcudart.so", "libvcuda.so.1", "libvcublas.so", "libvnvml.so.1", "libpvdrvcall.so",
             "libpvframe.so")
MiB = 1 << 20


# ---------------------------------------------------------------------------------------------- the source digest
def source_files(root: Path = ROOT) -> list[Path]:
    out: list[Path] = []
    for name in SOURCE_PATHS:
        p = root / name
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            # git-ignored build outputs (.gitignore: *.so, __pycache__) are not sources and do not travel
            out += [f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                    and f.suffix not in (".pyc", ".so") and not any(x.endswith(".egg-info") for x in f.parts)]
    return sorted(out)


def source_digest(root: Path = ROOT) -> str:
    """sha256 over (path, content) of every source the client libraries are built from; 16 hex digits."""
    h = hashlib.sha256()
    for f in source_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def read_manifest(bundle: Path) -> dict | None:
    try:
        return json.loads((bundle / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def stale_reason(bundle: Path, root: Path = ROOT) -> str:
    """Why the bundle's libraries do not belong to this checkout ('' when they do)."""
    man = read_manifest(bundle)
    if man is None:
        return f"no {MANIFEST} in {bundle}"
    if not (bundle / "libs.tar.gz").is_file():
        return f"no libs.tar.gz in {bundle}"
    here = source_digest(root)
    if man.get("source_digest") != here:
        return (f"the carried libraries were built from sources {man.get('source_digest')} "
                f"({man.get('made', '?')}) but this checkout's are {here}")
    return ""


# ---------------------------------------------------------------------------------------------- making it
def log(msg: str) -> None:
    print(f"gpu-bundle: {msg}", flush=True)


def build_libs(build_dir: Path) -> Path:
    """The client libraries, Release, built here from the checkout; → their lib directory."""
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DPython3_EXECUTABLE={sys.executable}"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2)], check=True,
                    stdout=subprocess.DEVNULL)
    return build_dir / "lib"


def check_linkage(lib_dir: Path) -> dict:
    """ldd: every library needs only ALLOWED_NEEDED; → the newest GLIBC_/OPENSSL_ symbol versions they use."""
    newest: dict[str, tuple[int, ...]] = {}
    for name in LIB_FILES:
        path = lib_dir / name
        ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
        # A library with no NEEDED entry at all (libpvframe.so uses no libc) reads "statically linked".
        needed = [line.split()[0] for line in ldd.splitlines()
                  if line.strip() and "statically linked" not in line]
        bad = [n for n in needed if not ALLOWED_NEEDED.match(Path(n).name)]
        if bad:
            raise SystemExit(f"gpu-bundle: {name} needs {bad}: a GPU machine may lack them (msgpack-c must be linked "
                             f"statically: install libmsgpack-dev, which ships the static archive)")
        syms = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
        for lib, ver in re.findall(r"\((GLIBC|OPENSSL)_([0-9.]+)\)", syms):
            v = tuple(int(x) for x in ver.split("."))
            newest[lib] = max(newest.get(lib, v), v)
    return {k: ".".join(map(str, v)) for k, v in newest.items()}


def _tar(path: Path, members: list[tuple[Path, str]]) -> None:
    with tarfile.open(path, "w:gz", compresslevel=9) as tf:
        for src, arcname in members:
            tf.add(src, arcname=arcname, recursive=True)


def pack_libs(lib_dir: Path, out: Path) -> None:
    """lib/ with the libraries and their loader-name symlinks (tar keeps the links)."""
    members = [(p, f"lib/{p.name}") for p in sorted(lib_dir.iterdir()) if p.is_file() or p.is_symlink()]
    _tar(out, members)


def _header_dirs() -> list[Path]:
    return [Path("/usr/include"), *sorted(Path("/usr/include").glob("*-linux-gnu"))]


def _find(patterns: list[str]) -> Path:
    for pat in patterns:
        for hit in sorted(Path("/").glob(pat.lstrip("/"))):
            return hit
    raise SystemExit(f"gpu-bundle: none of {patterns} found (install libmsgpack-dev and libssl-dev here)")


MSGPACK_CONFIG = """\
# msgpack-c as carried by tools/gpu_bundle.py: the static archive and headers beside this file
# (csrc/CMakeLists.txt's find_package(msgpack CONFIG) with -Dmsgpack_DIR=<this directory>).
get_filename_component(_pv_sysroot "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(NOT TARGET msgpackc-static)
  add_library(msgpackc-static STATIC IMPORTED)
  set_target_properties(msgpackc-static PROPERTIES
    IMPORTED_LOCATION "${_pv_sysroot}/lib/libmsgpackc.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_pv_sysroot}/include"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C")
endif()
set(msgpack_FOUND TRUE)
"""


def pack_sysroot(out: Path) -> None:
    """include/{msgpack.h, msgpack/, openssl/}, lib/libmsgpackc.a, cmake/msgpack-config.cmake."""
    members: list[tuple[Path, str]] = []
    msgpack_h = _find(["/usr/include/msgpack.h", "/usr/local/include/msgpack.h"])
    members.append((msgpack_h, "include/msgpack.h"))     # msgpack-c's C headers (not msgpack-cxx's C++ tree)
    members += [(f, f"include/msgpack/{f.name}") for f in sorted((msgpack_h.parent / "msgpack").glob("*.h"))]
    archive = _find(["/usr/lib/*-linux-gnu/libmsgpackc.a", "/usr/lib/*-linux-gnu/libmsgpack-c.a",
                     "/usr/lib/libmsgpackc.a", "/usr/local/lib/libmsgpack*.a"])
    members.append((archive, "lib/libmsgpackc.a"))
    for d in _header_dirs():       # Debian splits OpenSSL's headers: multiarch configuration.h + the rest
        if (d / "openssl").is_dir():
            members += [(f, f"include/openssl/{f.name}") for f in sorted((d / "openssl").iterdir())]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "msgpack-config.cmake"
        cfg.write_text(MSGPACK_CONFIG)
        members.append((cfg, "cmake/msgpack-config.cmake"))
        _tar(out, members)


def pack_cublas(out: Path) -> str:
    """cuBLAS's headers from tools/cublas_wheel.py's cache (fetched once): <version>/include/*.h."""
    sys.path.insert(0, str(ROOT / "tools"))
    import cublas_wheel   # noqa: PLC0415
    inc = cublas_wheel.fetch()
    version = inc.parent.name
    _tar(out, [(inc, f"{version}/include")])
    return version


def download_wheels(dest: Path, python_version: str) -> dict[str, str]:
    """pip download each of WHEELS (no dependencies: each is named) for the GPU machine's tags → {file: dist}."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", "-d", str(dest)]
    for plat in WHEEL_PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run([*cmd, *WHEELS], check=True)
    found: dict[str, str] = {}
    for whl in sorted(dest.glob("*.whl")):
        dist = whl.name.split("-")[0].lower().replace("_", "-")
        if dist not in WHEELS:
            raise SystemExit(f"gpu-bundle: unexpected wheel {whl.name}")
        if dist in found.values():
            raise SystemExit(f"gpu-bundle: two wheels of {dist} in {dest}: one version each, or pip refuses both")
        found[whl.name] = dist
    missing = set(WHEELS) - set(found.values())
    if missing:
        raise SystemExit(f"gpu-bundle: no wheel for {sorted(missing)}")
    return found


def weight(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def make(out: Path, python_version: str = WHEEL_PYTHON, wheels: bool = True, cublas: bool = True,
         build_dir: Path | None = None) -> dict:
    if platform.machine() != "x86_64":
        raise SystemExit(f"gpu-bundle: this machine is {platform.machine()}; the GPU machine is x86-64: build the "
                         "libraries there (gpu-check does when CMake works)")
    digest = source_digest()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.monotonic()
    log(f"client libraries from sources {digest} (cmake, Release)")
    lib_dir = build_libs(build_dir or ROOT / "build" / "gpu-bundle")
    needs = check_linkage(lib_dir)
    log(f"  they need libssl.so.3, libcrypto.so.3, glibc; newest symbol versions {needs}")
    pack_libs(lib_dir, out / "libs.tar.gz")
    log("msgpack-c and OpenSSL headers, msgpack-c's static archive (sysroot.tar.gz)")
    pack_sysroot(out / "sysroot.tar.gz")
    man: dict = {"bundle_version": BUNDLE_VERSION, "source_digest": digest,
                 "made": time.strftime("%Y-%m-%d %H:%M:%S %z"), "made_on": f"{platform.node()} {platform.platform()}",
                 "libs_need": needs, "wheels": {}, "modules": {}, "not_carried": NOT_CARRIED}
    if cublas:
        log("cuBLAS headers (cublas.tar.gz)")
        man["cublas_version"] = pack_cublas(out / "cublas.tar.gz")
    if wheels:
        log(f"wheels for CPython {python_version} manylinux x86-64: {', '.join(WHEELS)}")
        man["wheels"] = download_wheels(out / "wheels", python_version)
        man["modules"] = {dist: WHEELS[dist] for dist in man["wheels"].values()}
        man["wheel_python"] = python_version
    man["files"] = {p.relative_to(out).as_posix(): weight(p) for p in sorted(out.rglob("*")) if p.is_file()}
    (out / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    total = weight(out)
    log(f"{out} weighs {total / MiB:.1f} MiB ({time.monotonic() - t0:.0f} s); the tree that travels with it: "
        f"{(total + tree_weight()) / MiB:.1f} MiB of the 64 MiB limit")
    return man


def tree_weight() -> int:
    """What the rest of the working tree weighs (git's tracked + untracked-not-ignored files)."""
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                                "--exclude-standard"], capture_output=True, check=True).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        return 0
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make", help="build the bundle (needs PyPI for the wheels and the cuBLAS headers)")
    mk.add_argument("--out", type=Path, default=DEFAULT_DIR)
    mk.add_argument("--python-version", default=WHEEL_PYTHON, help="the GPU machine's Python (default %(default)s)")
    mk.add_argument("--no-wheels", action="store_true", help="leave the wheels out")
    mk.add_argument("--no-cublas", action="store_true", help="leave the cuBLAS headers out")
    ck = sub.add_parser("check", help="exit 1 with the reason when the bundle's libraries are not this checkout's")
    ck.add_argument("--bundle", type=Path, default=DEFAULT_DIR)
    a = ap.parse_args(argv)
    if a.cmd == "make":
        make(a.out, a.python_version, wheels=not a.no_wheels, cublas=not a.no_cublas)
        print(f"carry: {a.out.relative_to(ROOT) if a.out.is_relative_to(ROOT) else a.out}")
        return 0
    why = stale_reason(a.bundle)
    print(f"gpu-bundle: {why}" if why else f"gpu-bundle: {a.bundle} is current (sources {source_digest()})")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
