"""pyvgpu: remote and pooled GPUs for unmodified CUDA programs."""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path

__version__ = "0.1.0"
LIB_NAME = "libvcudart.so"


def lib_candidates() -> list[Path]:
    """Where libvcudart.so may be, most specific first: $PYVGPU_LIB, the package dir, a source build, site-packages."""
    here = Path(__file__).resolve().parent
    out: list[Path] = []
    if os.environ.get("PYVGPU_LIB"):
        out.append(Path(os.environ["PYVGPU_LIB"]))
    out.append(here / "lib" / LIB_NAME)
    # A source checkout's own build wins over an older copy in site-packages (editable installs put one there).
    out.append(here.parent / "build" / "dev" / "lib" / LIB_NAME)
    for key in ("platlib", "purelib"):
        out.append(Path(sysconfig.get_paths()[key]) / "pyvgpu" / "lib" / LIB_NAME)
    return out


def lib_path() -> Path:
    """The interposer library to LD_PRELOAD; FileNotFoundError naming the places searched when it is missing."""
    candidates = lib_candidates()
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"{LIB_NAME} not found; looked in: " + ", ".join(map(str, candidates))
                            + " (build it with `pip install .` or `cmake -S . -B build/dev && cmake --build build/dev`)")
