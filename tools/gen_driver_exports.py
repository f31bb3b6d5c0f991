#!/usr/bin/env python3
"""Generate libvcuda's export surface from the CUDA 13.0 driver headers (docs/driver.md explains every rule).

Run on a machine with CUDA 13.0 when the headers change; the outputs are committed so the library builds without
CUDA:

    python tools/gen_driver_exports.py [--cuda /usr/local/cuda-13.0]

Inputs: cuda.h and cudaProfiler.h (preprocessed three ways: plain, CUDA_API_PER_THREAD_DEFAULT_STREAM, and
__CUDA_API_VERSION_INTERNAL which also declares the legacy ABIs), cudaGL.h, cudaEGL.h, cudaVDPAU.h (preprocessed
with stand-in GL/EGL/VDPAU headers: only names matter for them), the *Typedefs.h headers (one PFN_<name>_v<version>
typedef per ABI of every function), and pyvgpu/cuda_errors.py (cudaError_t numbers).

Outputs (csrc/driver/):
- driver_exports.txt  every exported function, one per line;
- curesult_gen.h      the CUresult values (CUDA_SUCCESS, CUDA_ERROR_*);
- exports_gen.c       one WEAK fallback per export (logs its name once, returns CUDA_ERROR_NOT_SUPPORTED; strong
                      definitions in api_*.c replace them at link time), the cuGetProcAddress table, the CUresult
                      names and descriptions, and the cudaError_t -> CUresult map;
- libcuda.map         the version script: every export global, unversioned (as the toolkit's link stub), the rest
                      local;
- pyvgpu/driver_abis.py  the cuGetProcAddress table's rows for the daemon's cuda backend (--py-out).

Pairing of PFN typedefs with symbols: for each base name, the k-th non-per-thread version is the k-th symbol in
the order name, name_v2, name_v3, ... (per-thread ones likewise). A probe C file asserts every pair with
__builtin_types_compatible_p, so a header change that breaks the rule fails here, not at run time.
"""
from __future__ import annotations

import argparse
import re
import runpy
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "csrc" / "driver"
MODES = ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], ["-D__CUDA_API_VERSION_INTERNAL"])
# (header with declarations, header with PFN typedefs). The interop headers need GL/EGL/VDPAU types: stand-ins.
HEADERS = (("cuda.h", "cudaTypedefs.h"), ("cudaProfiler.h", "cudaProfilerTypedefs.h"),
           ("cudaGL.h", "cudaGLTypedefs.h"), ("cudaEGL.h", "cudaEGLTypedefs.h"),
           ("cudaVDPAU.h", "cudaVDPAUTypedefs.h"))
STANDINS = {
    "GL/gl.h": "typedef unsigned int GLuint; typedef unsigned int GLenum;",
    "EGL/egl.h": "typedef void *EGLImageKHR; typedef void *EGLStreamKHR; typedef int EGLint;"
                 " typedef void *EGLSyncKHR;",
    "EGL/eglext.h": "",
    "vdpau/vdpau.h": "typedef unsigned VdpDevice; typedef void VdpGetProcAddress; typedef unsigned VdpVideoSurface;"
                     " typedef unsigned VdpOutputSurface; typedef int VdpChromaType; typedef int VdpRGBAFormat;",
}
# Entry points newer than the 13.0 headers that libvcuda offers: (name, the CUDA version that introduced it, as the
# CUDA 13.2 headers' PFN_<name>_v<version> typedef says). They join the export list and the cuGetProcAddress table
# like the header's own (one ABI each, no per-thread twin).
NEWER = (
    ("cuFuncGetParamCount", 13020),      # CUresult (CUfunction func, size_t *paramCount)
    ("cuKernelGetParamCount", 13020),    # CUresult (CUkernel kernel, size_t *paramCount)
)
# cudaError_t numbers cuda.h has no CUresult for, and what the driver library answers instead (docs/driver.md).
RUNTIME_ONLY = {
    "cudaErrorInvalidConfiguration": "CUDA_ERROR_INVALID_VALUE",
    "cudaErrorInvalidPitchValue": "CUDA_ERROR_INVALID_VALUE",
    "cudaErrorInvalidSymbol": "CUDA_ERROR_NOT_FOUND",
    "cudaErrorInvalidHostPointer": "CUDA_ERROR_INVALID_VALUE",
    "cudaErrorInvalidDevicePointer": "CUDA_ERROR_INVALID_VALUE",
    "cudaErrorInvalidMemcpyDirection": "CUDA_ERROR_INVALID_VALUE",
    "cudaErrorInsufficientDriver": "CUDA_ERROR_NOT_INITIALIZED",
    "cudaErrorStartupFailure": "CUDA_ERROR_NOT_INITIALIZED",
    "cudaErrorInvalidDeviceFunction": "CUDA_ERROR_INVALID_HANDLE",
    "cudaErrorMissingConfiguration": "CUDA_ERROR_LAUNCH_FAILED",
    "cudaErrorPriorLaunchFailure": "CUDA_ERROR_LAUNCH_FAILED",
}


def preprocess(inc: Path, standins: Path, header: str, defines: list[str]) -> str:
    """header preprocessed after cuda.h (the interop headers use its types and CUDAAPI without including it)."""
    src = f"#include <cuda.h>\n#include <{header}>\n"
    out = subprocess.run(["gcc", "-E", "-P", *defines, f"-I{standins}", f"-I{inc}", "-x", "c", "-"], input=src,
                         check=True, capture_output=True, text=True).stdout
    return " ".join(out.split())


def symbols(inc: Path, standins: Path) -> list[str]:
    names: set[str] = set()
    for header, _ in HEADERS:
        for defines in MODES:
            text = preprocess(inc, standins, header, defines)
            found = set(re.findall(r"\bCUresult (cu\w+) ?\(", text))
            found -= set(re.findall(r"\bstatic inline CUresult (cu\w+) ?\(", text))
            names |= found
    return sorted(names)


def pfns(inc: Path, standins: Path) -> list[tuple[str, int, str]]:
    out: set[tuple[str, int, str]] = set()
    for _, typedefs in HEADERS:
        text = preprocess(inc, standins, typedefs, ["-D__CUDA_API_VERSION_INTERNAL"])
        for full in re.findall(r"\bPFN_(cu\w+)\)", text):
            m = re.fullmatch(r"(cu\w+?)_v(\d+)(_ptds|_ptsz)?", full)
            if not m:
                raise SystemExit(f"unexpected typedef PFN_{full}")
            out.add((m.group(1), int(m.group(2)), m.group(3) or ""))
    return sorted(out)


def pair(syms: list[str], entries: list[tuple[str, int, str]]) -> list[tuple[str, int, str, str]]:
    """(base name, version, per-thread suffix, symbol) for every PFN typedef."""
    by_base: dict[tuple[str, bool], list[tuple[int, str]]] = defaultdict(list)
    for s in syms:
        m = re.fullmatch(r"(cu\w+?)(_v\d+)?(_ptds|_ptsz)?", s)
        assert m, s
        by_base[(m.group(1), bool(m.group(3)))].append((int((m.group(2) or "_v1")[2:]), s))
    pfn_by: dict[tuple[str, bool], list[tuple[int, str]]] = defaultdict(list)
    for base, ver, pt in entries:
        pfn_by[(base, bool(pt))].append((ver, pt))
    rows = []
    for key in sorted(set(by_base) | set(pfn_by)):
        vs, ss = sorted(pfn_by.get(key, [])), sorted(by_base.get(key, []))
        if len(vs) != len(ss):
            raise SystemExit(f"cannot pair {key}: typedefs {vs} vs symbols {ss}")
        rows += [(key[0], v, pt, s) for (v, pt), (_, s) in zip(vs, ss)]
    return rows


def check_pairs(inc: Path, standins: Path, rows: list[tuple[str, int, str, str]]) -> None:
    src = ["#define __CUDA_API_VERSION_INTERNAL 1"]
    src += [f"#include <{t}>" for _, t in HEADERS]
    for base, ver, pt, sym in rows:
        src.append(f"_Static_assert(__builtin_types_compatible_p(PFN_{base}_v{ver}{pt}, __typeof__(&{sym})), "
                   f"\"PFN_{base}_v{ver}{pt} is not the type of {sym}\");")
    with tempfile.NamedTemporaryFile("w", suffix=".c") as f:
        f.write("\n".join(src) + "\n")
        f.flush()
        subprocess.run(["gcc", "-fsyntax-only", f"-I{standins}", f"-I{inc}", f.name], check=True)


def curesults(inc: Path) -> list[tuple[int, str, str]]:
    body = re.search(r"typedef enum cudaError_enum\s*\{(.*?)\}\s*CUresult;", (inc / "cuda.h").read_text(), re.S)
    assert body, "CUresult enum not found"
    out = []
    for comment, name, value in re.findall(r"/\*\*(.*?)\*/\s*(CUDA_\w+)\s*=\s*(\d+)", body.group(1), re.S):
        text = " ".join(comment.replace("*", " ").split())
        text = re.sub(r"::|\\(p|c|b|ref)\s+", "", text)
        end = text.find(". ")
        out.append((int(value), name, (text if end < 0 else text[: end + 1]).strip()))
    return out


def c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def generate(syms: list[str], rows: list[tuple[str, int, str, str]], results: list[tuple[int, str, str]]) -> str:
    # this tree's table (a data module), read by path: an installed pyvgpu may be older
    CUDA_ERRORS = runpy.run_path(str(ROOT / "pyvgpu" / "cuda_errors.py"))["CUDA_ERRORS"]
    by_value = {v: n for v, n, _ in results}
    by_name = {n: v for v, n, _ in results}
    lines = ["/* Generated by tools/gen_driver_exports.py from the CUDA 13.0 driver headers. Do not edit.",
             " * One weak fallback per export (strong definitions in api_*.c replace them), the cuGetProcAddress",
             " * table, CUresult names and descriptions, and the cudaError_t -> CUresult map. */",
             '#include "driver.h"', ""]
    for s in syms:     # (flags named by their function: adding an export changes only its own lines)
        lines.append(f"static atomic_int once_{s};")
        lines.append(f"PV_WEAK_API CUresult {s}(void) {{ return pv_drv_unsupported(\"{s}\", &once_{s}); }}")
    lines += ["", "/* Sorted by base name, then per-thread flag, then version: what procaddr.c searches. */",
              "const struct pv_proc pv_procs[] = {"]
    for base, ver, pt, sym in sorted(rows, key=lambda r: (r[0], bool(r[2]), r[1])):
        lines.append(f"    {{\"{base}\", {ver}, {1 if pt else 0}, \"{sym}\", (void (*)(void)){sym}}},")
    lines += ["};", f"const int pv_nprocs = {len(rows)};", "",
              "const struct pv_curesult pv_curesults[] = {"]
    lines += [f"    {{{v}, \"{n}\", {c_string(t)}}}," for v, n, t in results]
    lines += ["};", f"const int pv_ncuresults = {len(results)};", "",
              "/* cudaError_t (the wire's numbers) -> CUresult: the same number where cuda.h defines it (NVIDIA's",
              " * runtime maps them 1:1), else the closest driver code; unknown numbers become CUDA_ERROR_UNKNOWN. */",
              "const struct pv_errmap pv_errmap[] = {"]
    for value, name, _ in CUDA_ERRORS:
        cu = by_value.get(value)
        if cu is None:
            cu = RUNTIME_ONLY.get(name, "CUDA_ERROR_UNKNOWN")
        lines.append(f"    {{{value}, {by_name[cu]}}},  /* {name} -> {cu} */")
    lines += ["};", f"const int pv_nerrmap = {len(CUDA_ERRORS)};", ""]
    return "\n".join(lines)


def surface(inc: Path) -> tuple[list[str], list[tuple[str, int, str, str]], dict[str, str]]:
    """Every exported symbol, (base name, version, per-thread suffix, symbol) per ABI (pairing checked), and the symbol
    each base name denotes in the headers."""
    with tempfile.TemporaryDirectory() as tmp:
        standins = Path(tmp)
        for rel, text in STANDINS.items():
            (standins / rel).parent.mkdir(parents=True, exist_ok=True)
            (standins / rel).write_text(text + "\n")
        syms = symbols(inc, standins)
        rows = pair(syms, pfns(inc, standins))
        check_pairs(inc, standins, rows)
        defaults = default_symbols(inc, standins, sorted({r[0] for r in rows}))
    known = set(syms)
    for name, version in NEWER:
        if name in known:
            raise SystemExit(f"{name} is in these headers already: drop it from NEWER")
        rows.append((name, version, "", name))
        defaults[name] = name
    return sorted(syms + [n for n, _ in NEWER]), rows, defaults


def default_symbols(inc: Path, standins: Path, bases: list[str]) -> dict[str, str]:
    """Base name -> the symbol a program compiled against these headers calls by that name (cuda.h's `#define
    cuCtxCreate cuCtxCreate_v4`; no define: the name itself), as the preprocessor expands it."""
    src = "".join(f"#include <{h}>\n" for h, _ in HEADERS) + "".join(f"@@ {b}\n" for b in bases)
    out = subprocess.run(["gcc", "-E", "-P", f"-I{standins}", f"-I{inc}", "-x", "c", "-"], input=src, check=True,
                         capture_output=True, text=True).stdout
    found = dict(zip(bases, (ln.split()[1] for ln in out.splitlines() if ln.startswith("@@ "))))
    assert len(found) == len(bases), "a base name did not expand to one symbol"
    return found


def python_table(rows: list[tuple[str, int, str, str]], defaults: dict[str, str]) -> str:
    """pyvgpu/driver_abis.py: the same table for the daemon's cuda backend (which ABI a symbol is, since which CUDA
    version), so that it and libvcuda's cuGetProcAddress read one source."""
    lines = ['"""Generated by tools/gen_driver_exports.py from the CUDA 13.0 driver headers (and its NEWER list). Do not',
             'edit.', '',
             'ABIS: every exported driver symbol -> (the base name cuGetProcAddress takes, the CUDA version that',
             'introduced that ABI, per-thread-default-stream twin). libvcuda\'s cuGetProcAddress table is the same rows',
             '(csrc/driver/exports_gen.c).', '',
             'CALLED: base name -> the symbol a program compiled against the headers calls by that name (their',
             '`#define cuCtxCreate cuCtxCreate_v4`), as cuda-bindings does."""', "",
             "ABIS: dict[str, tuple[str, int, bool]] = {"]
    for base, ver, pt, sym in sorted(rows, key=lambda r: r[3]):
        lines.append(f"    {sym!r}: ({base!r}, {ver}, {bool(pt)}),")
    lines += ["}", "", "CALLED: dict[str, str] = {"]
    lines += [f"    {b!r}: {s!r}," for b, s in sorted(defaults.items())]
    lines += ["}", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda", default="/usr/local/cuda-13.0", type=Path)
    ap.add_argument("--out", default=OUT_DIR, type=Path)
    ap.add_argument("--py-out", default=ROOT / "pyvgpu", type=Path, help="where driver_abis.py goes")
    args = ap.parse_args(argv)
    inc = args.cuda / "include"
    syms, rows, defaults = surface(inc)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "driver_exports.txt").write_text("\n".join(syms) + "\n")
    results = curesults(inc)
    (args.out / "exports_gen.c").write_text(generate(syms, rows, results))
    hdr = ["/* Generated by tools/gen_driver_exports.py from cuda.h: the CUresult values. Do not edit. */",
           "#ifndef PV_CURESULT_GEN_H", "#define PV_CURESULT_GEN_H"]
    hdr += [f"#define {n} {v}" for v, n, _ in results] + ["#endif", ""]
    (args.out / "curesult_gen.h").write_text("\n".join(hdr))
    vmap = ["/* Generated by tools/gen_driver_exports.py: the driver's exports, unversioned (as the toolkit's",
            " * libcuda.so link stub, so programs linked against either bind to either). */", "{", "  global:"]
    vmap += [f"    {s};" for s in syms] + ["  local:", "    *;", "};", ""]
    (args.out / "libcuda.map").write_text("\n".join(vmap))
    (args.py_out / "driver_abis.py").write_text(python_table(rows, defaults))
    print(f"{len(syms)} exports, {len(rows)} versioned names", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
