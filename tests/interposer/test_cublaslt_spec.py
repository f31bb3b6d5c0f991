"""pyvgpu/cublaslt_spec.py and the generated csrc/cublaslt files against NVIDIA's cuBLASLt 13 (cublasLt.h of the
pinned nvidia-cublas wheel, fetched by the cublas_include fixture; the export list committed from its
libcublasLt.so.13).

- enum, attribute, capability values, the opaque types' sizes and the heuristic result's layout as the header
  defines them (a compiled static_assert per value);
- every attribute's size as the header's documentation of it states (the library's where they differ: the three
  grouped preferences, 8 bytes in NVIDIA's library, "uint32_t" in the header's comment);
- the committed stubs and version script are what the generator makes from the committed export list; a library
  built from them exports exactly NVIDIA's functions under NVIDIA's version node;
- every function libvcublasLt implements is one NVIDIA exports and cublasLt.h declares;
- the C translation of the matmul's checks agrees with the Python evaluation on thousands of argument sets, and
  the descriptors' generated structs fit NVIDIA's opaque storage.
"""
from __future__ import annotations

import random
import re
import subprocess
import sys

import pyvgpu
from harness import NVCC, ROOT
from pyvgpu import cublas_spec as blas
from pyvgpu import cublaslt_spec as spec
from pyvgpu.protocol import OP_BY_NAME

sys.path.insert(0, str(ROOT / "tools"))
import gen_cublas_stubs  # noqa: E402
import gen_cublaslt_c as cublaslt_c  # noqa: E402

LT = gen_cublas_stubs.LIBRARIES["cublaslt"]
LT_DIR = LT.out_dir
# Where the header's comment and NVIDIA's library disagree, the library (probed: GetAttribute with size 0 answers 8).
LIBRARY_SIZES = {"CUBLASLT_MATMUL_PREF_GROUPED_AVERAGE_REDUCTION_DIM": 8,
                 "CUBLASLT_MATMUL_PREF_GROUPED_DESC_D_AVERAGE_ROWS": 8,
                 "CUBLASLT_MATMUL_PREF_GROUPED_DESC_D_AVERAGE_COLS": 8}
_SIZES = {"int8_t": 1, "uint16_t": 2, "int32_t": 4, "uint32_t": 4, "float": 4, "int64_t": 8, "uint64_t": 8}


def test_values_compile_against_the_header(cublas_include, tmp_path):
    checks = [f"static_assert((long long){name} == {value}, \"{name}\");"
              for table in spec.ENUMS.values() for name, value in table.items()]
    for d in spec.DESCRIPTORS:
        checks += [f"static_assert((int){a.name} == {a.value}, \"{a.name}\");" for a in d.attrs]
        checks.append(f"static_assert(sizeof({d.opaque}) == {d.opaque_size}, \"{d.opaque}\");")
    checks += [f"static_assert((int){c.name} == {c.value}, \"{c.name}\");" for c in spec.ALGO_CAPS]
    checks += [f"static_assert(CUBLASLT_NUMERICAL_IMPL_FLAGS_{k} == {v}ull, \"{k}\");"
               for k, v in spec.NUMERICAL_IMPL.items()]
    checks += ["static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, \"heuristic result\");",
               "static_assert(offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize) == 64, \"ws\");",
               "static_assert(offsetof(cublasLtMatmulHeuristicResult_t, state) == 72, \"state\");",
               "static_assert(offsetof(cublasLtMatmulHeuristicResult_t, wavesCount) == 76, \"waves\");",
               f"static_assert((int)CUBLAS_FILL_MODE_FULL == {spec.FILL_MODE_FULL}, \"fill\");",
               f"static_assert(CUBLAS_VERSION == {spec.LT_VERSION}, \"version\");"]
    src = tmp_path / "values.cu"
    src.write_text("#include <cublasLt.h>\n#include <cstddef>\n" + "\n".join(checks) + "\n")
    proc = subprocess.run([NVCC, "-c", "-I", str(cublas_include), str(src), "-o", str(tmp_path / "values.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _documented_sizes(header: str) -> dict[str, int]:
    """Each attribute's size from the type its comment documents ("int32_t, default: ...", "const void *", ...)."""
    out = {}
    for m in re.finditer(r"/\*\*((?:(?!\*/).)*?)\*/\s*(CUBLASLT_\w+)\s*=\s*(\d+)\s*,", header, re.S):
        t = re.search(r"^\s*\*?\s*(?:[A-Z][\w ]*case: |Forward pass: |readonly, set by \w+\(\)\s*\*\s*)?(const\s+)?"
                      r"(u?int(?:8|16|32|64)_t|float|void|cublasLt\w+_t)\s*(\*)?", m.group(1), re.M)
        if t:
            out[m.group(2)] = 8 if t.group(3) or t.group(2) == "cublasLtEmulationDesc_t" else _SIZES.get(t.group(2), 4)
    return out


def test_attribute_sizes_are_the_documented_types(cublas_include):
    documented = _documented_sizes((cublas_include / "cublasLt.h").read_text())
    wrong = [(a.name, a.size, documented.get(a.name)) for d in spec.DESCRIPTORS for a in d.attrs
             if a.size != LIBRARY_SIZES.get(a.name, documented.get(a.name))]
    assert not wrong
    assert all(documented[n] == 4 for n in LIBRARY_SIZES)      # the disagreement is still there (else drop it)


def test_generated_stubs_are_up_to_date(cublas_include):
    import cublas_wheel
    protos = cublas_wheel.read_prototypes(cublas_include, LT.headers)
    c_text, map_text = gen_cublas_stubs.generate(gen_cublas_stubs.read_exports(LT.exports), protos, LT)
    assert (LT_DIR / "unsupported_gen.c").read_text() == c_text, "run tools/gen_cublas_stubs.py"
    assert (LT_DIR / "libcublasLt.map").read_text() == map_text, "run tools/gen_cublas_stubs.py"


def test_stub_library_exports_nvidias_functions(tmp_path):
    rows = gen_cublas_stubs.read_exports(LT.exports)
    assert len(rows) == 222 and {node for _, node in rows} == {"libcublasLt.so.13"}
    logger = tmp_path / "logger.c"
    logger.write_text('#include "stubs.h"\n'
                      "pvb_status pvb_unsupported(const char *name, atomic_int *once) { (void)name; (void)once;"
                      " return 15; }\n")
    lib = tmp_path / "libcublasLt.so.13"
    subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
                    f"-I{LT_DIR}", str(LT_DIR / "unsupported_gen.c"), str(logger), "-Wl,-soname,libcublasLt.so.13",
                    f"-Wl,--version-script={LT_DIR / 'libcublasLt.map'}", "-Wl,-z,defs", "-o", str(lib)], check=True)
    dyn = subprocess.run(["objdump", "-T", str(lib)], capture_output=True, text=True, check=True).stdout
    exported = {(p[6], p[5]) for p in (line.split() for line in dyn.splitlines())
                if len(p) == 7 and p[2] == "DF" and p[3] == ".text"}
    assert exported == set(rows)


def test_implemented_functions_are_nvidias(cublas_include):
    import cublas_wheel
    lib = pyvgpu.lib_path().parent / "libvcublasLt.so"
    dyn = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    strong = {line.split()[2].split("@")[0] for line in dyn.splitlines() if line.split()[1] == "T"}
    exported = {n for n, _ in gen_cublas_stubs.read_exports(LT.exports)}
    declared = cublas_wheel.read_prototypes(cublas_include, LT.headers)
    assert strong and strong <= exported and strong <= set(declared), sorted(strong - exported - set(declared))
    for must in ("cublasLtMatmul", "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatrixLayoutSetAttribute",
                 "cublasLtMatmulDescInit_internal", "cublasLtMatmulPreferenceCreate"):
        assert must in strong


def _sample(rng: random.Random) -> dict[str, int]:
    """Argument values around every boundary the checks test."""
    types = [t.value for t in blas.DATA_TYPES] + [7, 99]
    computes = list(blas.COMPUTE.values()) + [0, 66]
    epis = list(spec.EPILOGUE) + [3, 999]
    dims = [-1, 0, 1, 2, 3, 4, 8, 128]
    out: dict[str, int] = {}
    for n, t in spec.matmul_wire():
        if t == "bytes":
            continue
        if n in ("compute",):
            out[n] = rng.choice(computes)
        elif n == "scale" or n.endswith("type"):
            out[n] = rng.choice(types + [-1] if n in ("aux_type", "bias_type") else types)
        elif n == "epilogue":
            out[n] = rng.choice(epis)
        elif n in ("A", "B", "C", "D", "bias", "aux", "workspace"):
            out[n] = rng.choice([0, 0x1000, 0x2000])
        elif n.endswith("order"):
            out[n] = rng.choice([0, 0, 1, 2])
        elif n in ("transa", "transb", "transc", "pmode", "fill"):
            out[n] = rng.choice([0, 0, 1, 2, 3])
        else:
            out[n] = rng.choice(dims)
    return out


def test_c_checks_agree_with_python(tmp_path):
    (tmp_path / "cublaslt_gen.h").write_text(cublaslt_c.header())
    rng = random.Random(5)
    cases = []
    for _ in range(3000):
        v = _sample(rng)
        if rng.random() < 0.6:        # a consistent problem, so the later checks are reached too
            m, n, k = rng.choice([1, 2, 4]), rng.choice([1, 3]), rng.choice([0, 2])
            v.update(Arows=m, Acols=k, Brows=k, Bcols=n, Crows=m, Ccols=n, Drows=m, Dcols=n, transa=0, transb=0,
                     transc=0, fill=2, **{x + s: 1 for x in "ABCD" for s in ("batch",)},
                     **{x + "order": 0 for x in "ABCD"}, **{x + "ld": 8 for x in "ABCD"})
            if rng.random() < 0.5:
                v.update(compute=68, scale=0, Atype=0, Btype=0, Ctype=0, Dtype=0, pmode=0)
        cases.append(v)
    lines = ['#include <stdio.h>', '#include "cublaslt_gen.h"', "int main(void)", "{", "    const char *why;"]
    for i, v in enumerate(cases):
        init = ", ".join(f".{k} = {val}" for k, val in v.items())
        lines += [f"    {{ struct pvl_matmul_args a{i} = {{ {init} }}; why = \"\";",
                  f"      int st = pvl_check_matmul(&a{i}, &why);", '      printf("%d %s\\n", st, why); }']
    lines += ["    return 0;", "}"]
    (tmp_path / "checks.c").write_text("\n".join(lines) + "\n")
    exe = tmp_path / "checks"
    subprocess.run(["cc", "-std=c11", "-O0", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function",
                    f"-I{tmp_path}", str(tmp_path / "checks.c"), "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    statuses = set()
    for v, line in zip(cases, got, strict=True):
        failure = spec.check(v)
        want = f"{failure.status} {failure.why}" if failure else "0 "
        assert line.rstrip() == want.rstrip(), v
        statuses.add(failure.status if failure else 0)
    assert statuses == {0, blas.INVALID_VALUE, blas.NOT_SUPPORTED}       # the samples reach every outcome


def test_wire_view_and_descriptor_tables():
    op = OP_BY_NAME["LT_MATMUL"]
    assert op.code == spec.OP_LT_MATMUL and [a.name for a in op.args] == ["dev", "stream", *spec.MATMUL_NAMES]
    for d in spec.DESCRIPTORS:
        values = [a.value for a in d.attrs]
        fields = [a.field for a in d.attrs]
        assert len(set(values)) == len(values) and len(set(fields)) == len(fields), d.name
        assert all(a.use in ("wire", "stored", "refuse") for a in d.attrs)
    header = cublaslt_c.header()
    for d in spec.DESCRIPTORS:         # the structs fit NVIDIA's storage (a compiled _Static_assert says so too)
        assert f"sizeof(struct pvl_{d.name}) <= {d.opaque_size}" in header
    assert set(spec.EPILOGUE) == set(spec.ENUMS["cublasLtEpilogue_t"].values())
