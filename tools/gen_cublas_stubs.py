#!/usr/bin/env python3
"""Generate the fallback entry points of libvcublas and libvcublasLt from the export lists of NVIDIA's
libcublas.so.13 and libcublasLt.so.13 and cuBLAS's headers.

The outputs are committed, so the libraries build on a machine that has never seen NVIDIA's cuBLAS:

    python tools/gen_cublas_stubs.py [--library cublas|cublaslt] [--refresh-exports]

Per library (both unless --library says which; cuBLASLt's files are under csrc/cublaslt/ with the same names):
Inputs:  csrc/cublas/cublas_exports.txt  `name version-node` per defined function of NVIDIA's libcublas.so.13
                                         (--refresh-exports rewrites it from the pinned nvidia-cublas wheel's
                                         library with `objdump -T`), and the prototypes in cublas_api.h, cublas.h
                                         and cublasXt.h (cublasLt.h for cuBLASLt; tools/cublas_wheel.py fetches
                                         them into build/cublas/).
Outputs: csrc/cublas/unsupported_gen.c   one WEAK stub per export: logs its name once and returns
                                         CUBLAS_STATUS_NOT_SUPPORTED (functions returning cublasStatus_t), or
                                         nothing / 0 / NULL / a zero complex by return type (the legacy cublas.h
                                         API returns void, scalars and cuComplex). Strong definitions of the
                                         supported routines replace them at link time.
         csrc/cublas/libcublas.map       the linker version script: each export under its version node.

Stubs are declared with the prototype's return type (as an ABI-equivalent C type) and no parameters: on x86-64
System V the caller owns its argument registers and stack, so ignoring arguments is safe, but the return type must
match (cuComplex comes back in xmm0, cuDoubleComplex in xmm0:xmm1). Exports that no header declares (internal
entry points such as cublasGetBackdoor) are stubbed as returning cublasStatus_t, the convention of every cuBLAS
function that is not part of the legacy API.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import cublas_wheel   # beside this file: first on sys.path when it runs, and for the tests that import it

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Library:
    soname: str                  # NVIDIA's library, and the version node of its exports
    out_dir: Path                # where the generated files are committed
    exports_name: str            # the export list's file name there
    headers: tuple[str, ...]     # the headers whose CUBLASWINAPI declarations the library exports
    what: str                    # in the generated files' comments

    @property
    def exports(self) -> Path:
        return self.out_dir / self.exports_name

    @property
    def map_name(self) -> str:
        return self.soname.split(".so")[0] + ".map"


LIBRARIES: dict[str, Library] = {
    "cublas": Library("libcublas.so.13", ROOT / "csrc" / "cublas", "cublas_exports.txt",
                      cublas_wheel.PROTOTYPE_HEADERS, "cuBLAS's"),
    "cublaslt": Library("libcublasLt.so.13", ROOT / "csrc" / "cublaslt", "cublaslt_exports.txt",
                        ("cublasLt.h",), "cublasLt.h"),
}
CUBLAS = LIBRARIES["cublas"]
OUT_DIR = CUBLAS.out_dir
EXPORTS = CUBLAS.exports

# return type -> (C type of the stub, return statement after logging); None = `return` nothing.
STATUS_TYPES = ("cublasStatus_t", "cublasStatus")
RETURN_RULES: dict[str, tuple[str, str | None]] = {
    "void": ("void", None),
    "int": ("int", "0"),
    "size_t": ("size_t", "0"),
    "float": ("float", "0.0f"),
    "double": ("double", "0.0"),
    "const char*": ("const char *", "NULL"),
    "cuComplex": ("struct pvb_complex", "(struct pvb_complex){0.0f, 0.0f}"),
    "cuDoubleComplex": ("struct pvb_double_complex", "(struct pvb_double_complex){0.0, 0.0}"),
}


def refresh_exports(lib: Path, version: str, soname: str = CUBLAS.soname) -> str:
    """`name node` lines for every defined function of the library, sorted, with a provenance header."""
    out = subprocess.run(["objdump", "-T", str(lib)], check=True, capture_output=True, text=True).stdout
    rows: set[tuple[str, str]] = set()
    nodes: set[str] = set()
    for line in out.splitlines():
        parts = line.split()
        # 0000000000202ac0 g    DF .text	0000000000000476  libcublas.so.13 cublasXtCsymm
        if len(parts) == 7 and parts[1] == "g" and parts[2] == "DF" and parts[3] != "*UND*":
            rows.add((parts[6], parts[5]))
        elif len(parts) == 7 and parts[3] == "*ABS*" and parts[5] == parts[6]:
            nodes.add(parts[5])     # the version node's own symbol
    head = [f"# Exported functions of NVIDIA's {soname} (nvidia-cublas {version}, `objdump -T`, defined",
            "# symbols), written by tools/gen_cublas_stubs.py --refresh-exports. One per line: name version-node.",
            f"# Version nodes: {' '.join(sorted(nodes))}"]
    return "\n".join(head + [f"{n} {v}" for n, v in sorted(rows)]) + "\n"


def read_exports(path: Path = EXPORTS) -> list[tuple[str, str]]:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, node = line.split()
            rows.append((name, node))
    return rows


def generate(exports: list[tuple[str, str]], protos: dict[str, cublas_wheel.Prototype],
             library: Library = CUBLAS) -> tuple[str, str]:
    lines = [
        f"/* Generated by tools/gen_cublas_stubs.py from {library.soname}'s export list and {library.what} headers.",
        " * Do not edit. One weak fallback per export; the strong definitions of the supported routines replace",
        " * them at link time. */",
        '#include "stubs.h"',
        "",
    ]
    for i, (name, _node) in enumerate(exports):
        proto = protos.get(name)
        ret = proto.ret if proto else "cublasStatus_t"
        lines.append(f"/* {ret} {name}(...){'' if proto else ' -- not in the headers'} */")
        lines.append(f"static atomic_int pvb_once_{i};")
        if ret in STATUS_TYPES:
            lines.append(f"PVB_WEAK_API pvb_status {name}(void) {{ return pvb_unsupported(__func__, &pvb_once_{i}); }}")
            continue
        if ret not in RETURN_RULES:
            raise SystemExit(f"gen_cublas_stubs: no stub rule for return type {ret!r} of {name}")
        ctype, value = RETURN_RULES[ret]
        body = f"(void)pvb_unsupported(__func__, &pvb_once_{i});" + (f" return {value};" if value else "")
        lines.append(f"PVB_WEAK_API {ctype} {name}(void) {{ {body} }}")
    lines.append("")
    nodes: dict[str, list[str]] = {}
    for name, node in exports:
        nodes.setdefault(node, []).append(name)
    vmap = [f"/* Generated by tools/gen_cublas_stubs.py: each export of {library.soname} under NVIDIA's version node. */"]
    for node, names in nodes.items():
        vmap += [f"{node} {{", "  global:"] + [f"    {n};" for n in names] + ["  local:", "    *;", "};"]
    vmap.append("")
    return "\n".join(lines), "\n".join(vmap)


def regenerate(library: Library, version: str, refresh: bool) -> None:
    inc = cublas_wheel.fetch(version, want_lib=library.soname if refresh else False)
    if refresh:
        library.exports.write_text(refresh_exports(cublas_wheel.lib_path(version, library.soname), version,
                                                   library.soname))
    exports = read_exports(library.exports)
    protos = cublas_wheel.read_prototypes(inc, library.headers)
    c_text, map_text = generate(exports, protos, library)
    (library.out_dir / "unsupported_gen.c").write_text(c_text)
    (library.out_dir / library.map_name).write_text(map_text)
    missing = [n for n, _ in exports if n not in protos]
    print(f"{library.soname}: {len(exports)} exports; {len(missing)} without a header prototype (stubbed as "
          "cublasStatus_t): " + " ".join(missing), file=sys.stderr)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh-exports", action="store_true",
                    help="rewrite the export list from the pinned wheel's library (downloads the wheel)")
    ap.add_argument("--library", choices=sorted(LIBRARIES), action="append",
                    help="the library to regenerate (repeatable; default: all)")
    ap.add_argument("--version", default=cublas_wheel.PINNED_VERSION)
    args = ap.parse_args(argv)
    for name in args.library or sorted(LIBRARIES):
        regenerate(LIBRARIES[name], args.version, args.refresh_exports)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
