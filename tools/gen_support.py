"""What the build-time C generators share (gen_protocol_c.py, gen_cublas_c.py, gen_cublaslt_c.py; CMake runs them).

Each runs as `PYTHONPATH=ROOT python tools/gen_<spec>_c.py OUTDIR [--depfile FILE]`: the package it reads is the source
tree's (checked: an older pyvgpu installed in site-packages would generate stale C), the outputs are rewritten only
when their text changes (no needless C rebuilds), and the depfile names every source file the generator imported,
so that CMake regenerates when any of them changes (its DEPFILE), not only those someone remembered to list.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def check_source_tree() -> None:
    """Exit with a clear message when `pyvgpu` is not this tree's (PYTHONPATH was not set to the source root)."""
    import pyvgpu  # noqa: PLC0415 (what is on the path decides; checked here, not at import)
    got = Path(pyvgpu.__file__).resolve().parent
    if got != ROOT / "pyvgpu":
        raise SystemExit(f"{Path(sys.argv[0]).name}: imported pyvgpu from {got}, not from {ROOT / 'pyvgpu'}; "
                         f"run with PYTHONPATH={ROOT}")


def write_files(outdir: Path, files: dict[str, str]) -> list[Path]:
    """Write generated files (name -> text) into outdir, leaving unchanged ones alone."""
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = outdir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:   # keep mtimes: no needless rebuilds
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def source_inputs() -> list[Path]:
    """Every file of this tree the running generator has imported (itself included)."""
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and Path(path).resolve().is_relative_to(ROOT):
            files.add(Path(path).resolve())
    return sorted(files)


def write_depfile(depfile: Path, outputs: list[Path], inputs: list[Path]) -> None:
    """A Makefile-syntax depfile: the first output depends on every input (CMake's DEPFILE reads it)."""
    def esc(p: Path) -> str:
        return str(p.resolve()).replace(" ", "\\ ")
    depfile.parent.mkdir(parents=True, exist_ok=True)
    depfile.write_text(f"{esc(outputs[0])}: " + " \\\n  ".join(esc(p) for p in inputs) + "\n", encoding="utf-8")


def main(argv: list[str], files: Callable[[], dict[str, str]]) -> int:
    """OUTDIR [--depfile FILE]: writes files() into OUTDIR (and the depfile)."""
    parser = argparse.ArgumentParser(prog=Path(argv[0]).name, description=sys.modules["__main__"].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", type=Path, help="where the generated files go")
    parser.add_argument("--depfile", type=Path, help="also write a depfile naming every imported source file")
    args = parser.parse_args(argv[1:])
    check_source_tree()
    outputs = write_files(args.outdir, files())
    if args.depfile:
        write_depfile(args.depfile, outputs, source_inputs())
    return 0
