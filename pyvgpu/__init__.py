"""pyvgpu: remote and pooled GPUs for unmodified CUDA programs."""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path

__version__ = "0.1.0"
LIB_NAME = "libvcudart.so"          # the runtime drop-in (SONAME libcudart.so.13), for LD_PRELOAD
DRIVER_LIB_NAME = "libvcuda.so.1"   # the driver drop-in (SONAME libcuda.so.1), beside it with its link names
# nvJitLink linking PTX only (SONAME libnvJitLink.so.13): for emulated GPUs alone, so not one of the libraries
# preloaded always (`pyvgpu run` adds it against emulated GPUs, pyvgpu/frameworks.py)
PTX_LINKER_LIB_NAME = "libvnvJitLink.so"


def lib_candidates(name: str = LIB_NAME) -> list[Path]:
    """Where a client library may be, most specific first: beside $PYVGPU_LIB, the package dir, a source build,
    site-packages. All client libraries live in one directory."""
    here = Path(__file__).resolve().parent
    out: list[Path] = []
    if os.environ.get("PYVGPU_LIB"):
        given = Path(os.environ["PYVGPU_LIB"])
        out.append(given if name == LIB_NAME else given.parent / name)
    out.append(here / "lib" / name)
    # A source checkout's own build wins over an older copy in site-packages (editable installs put one there).
    out.append(here.parent / "build" / "dev" / "lib" / name)
    for key in ("platlib", "purelib"):
        out.append(Path(sysconfig.get_paths()[key]) / "pyvgpu" / "lib" / name)
    return out


def lib_path(name: str = LIB_NAME) -> Path:
    """A client library (libvcudart by default); FileNotFoundError naming the places searched when it is missing."""
    candidates = lib_candidates(name)
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"{name} not found; looked in: " + ", ".join(map(str, candidates))
                            + " (build it with `pip install .` or `cmake -S . -B build/dev && cmake --build build/dev`)")


def forwarded_libraries(directory: Path) -> list[Path]:
    """pyvgpu's drop-ins for NVIDIA's libraries in a client-library directory (libvcudart, libvcuda, libvcublas,
    libvnvml, ...: every libv*.so* file; the names programs look for are aliases of these), runtime and driver
    first. `pyvgpu run` preloads them all, so that each one's SONAME is taken before a program or a Python wheel
    loads NVIDIA's copy (by RUNPATH, or by absolute path after an already-loaded check, as cuda-pathfinder does).
    The PTX-only nvJitLink is not one of them: real GPUs keep NVIDIA's."""
    found = sorted(p for p in directory.glob("libv*.so*")
                   if p.is_file() and not p.is_symlink() and p.name != PTX_LINKER_LIB_NAME)
    first = [directory / LIB_NAME, directory / DRIVER_LIB_NAME]
    return [p for p in first if p in found] + [p for p in found if p not in first]


def lib_dir() -> Path:
    """The directory holding every client library and the names programs look for (libcuda.so.1, libcuda.so,
    libcudart.so.13): for LD_LIBRARY_PATH and `-L... -lcuda`."""
    return lib_path(DRIVER_LIB_NAME).parent
