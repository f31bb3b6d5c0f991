"""The C build regenerates what it generates from the Python specs whenever any of their inputs changes: in a copy of
the tree, editing the cuBLAS table changes the generated cuBLAS and cuBLASLt headers, and editing a module that only
the specs import (pyvgpu/cuda_errors.py, named nowhere in CMake) changes the protocol header, on the next build of
the generated targets alone (no C is compiled). Both CMake generators the project meets are tried: Unix Makefiles
(a developer's `cmake -S . -B build/dev`) and Ninja (scikit-build-core's wheel build), when installed."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import ROOT

GENERATED_TARGETS = ("pv_generated", "pvb_generated", "pvl_generated")
GENERATORS = ["Unix Makefiles"] + (["Ninja"] if shutil.which("ninja") else [])


def copy_tree(dst: Path) -> Path:
    """The files the C build reads: CMake's, csrc/, the generators and the Python specs."""
    src = dst / "src"
    src.mkdir(parents=True)
    shutil.copy2(ROOT / "CMakeLists.txt", src / "CMakeLists.txt")
    shutil.copytree(ROOT / "csrc", src / "csrc")
    shutil.copytree(ROOT / "tools", src / "tools", ignore=lambda d, names: [n for n in names if not n.endswith(".py")
                                                                            or n.startswith("gpu_")])
    shutil.copytree(ROOT / "pyvgpu", src / "pyvgpu", ignore=shutil.ignore_patterns("lib", "__pycache__"))
    return src


def build_generated(src: Path, build: Path) -> None:
    subprocess.run(["cmake", "--build", str(build), "--target", *GENERATED_TARGETS], check=True,
                   capture_output=True, text=True)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer holds {old!r}: update this test"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("generator", GENERATORS)
def test_editing_a_spec_regenerates_the_c(tmp_path, generator):
    src = copy_tree(tmp_path)
    build = tmp_path / "build"
    subprocess.run(["cmake", "-G", generator, "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                   check=True, capture_output=True, text=True)
    build_generated(src, build)
    blas_h = build / "csrc" / "cublas" / "gen" / "cublas_gen.h"
    lt_h = build / "csrc" / "cublaslt" / "gen" / "cublaslt_gen.h"
    proto_h = build / "csrc" / "gen" / "protocol_gen.h"
    assert "#define PVB_CUBLAS_VERSION 131000" in blas_h.read_text()
    assert "#define PVL_LT_VERSION 131000" in lt_h.read_text()
    before = proto_h.read_text()

    edit(src / "pyvgpu" / "cublas_spec.py", "CUBLAS_VERSION = 131000", "CUBLAS_VERSION = 131099")
    build_generated(src, build)
    assert "#define PVB_CUBLAS_VERSION 131099" in blas_h.read_text()
    assert "#define PVL_LT_VERSION 131099" in lt_h.read_text()      # cublaslt_spec.py imports the table

    # cuda_errors.py: an input of all three generators through the specs' imports, listed in no CMake file
    edit(src / "pyvgpu" / "cuda_errors.py", "is not supported on the current system or device.",
         "is not supported here (edited).")
    build_generated(src, build)
    after = proto_h.read_text()
    assert after != before and "not supported here (edited)." in after
    assert "not supported here (edited)." not in before


def test_no_cmake_file_lists_spec_inputs_by_hand():
    """The depfile is the one list of a generator's inputs: CMake names only the generator itself."""
    for cmake in [ROOT / "CMakeLists.txt", *(ROOT / "csrc").rglob("CMakeLists.txt")]:
        text = cmake.read_text()
        named = set(re.findall(r"\$\{CMAKE_SOURCE_DIR\}/pyvgpu/[a-z_]+\.py", text))
        assert not named, f"{cmake.relative_to(ROOT)} lists {sorted(named)}"
