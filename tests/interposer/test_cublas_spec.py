"""pyvgpu/cublas_spec.py and the generated csrc/cublas files against NVIDIA's cuBLAS 13 (headers of the pinned
nvidia-cublas wheel, fetched by the cublas_include fixture; the export list committed from its libcublas.so.13).

- every entry point's C prototype (int and _64 API) as cublas_api.h declares it;
- every supported function exported by NVIDIA's library;
- enum, status and data-type values as the headers define them (a compiled static_assert per value);
- the committed stubs and version script are what the generator makes from the committed export list;
- a library built from the stubs exports exactly NVIDIA's functions under NVIDIA's version node, and a stub
  answers CUBLAS_STATUS_NOT_SUPPORTED (or 0 / a zero complex for the legacy API) and logs its name once;
- the C translation of every check agrees with the Python evaluation on thousands of argument sets;
- the generated C (tools/gen_cublas_c.py) has an entry point per entry and API width, and structs of int64_t.
"""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

from harness import NVCC, ROOT
from pyvgpu import cublas_spec as spec

sys.path.insert(0, str(ROOT / "tools"))
import cublas_wheel  # noqa: E402
import gen_cublas_c as cublas_c  # noqa: E402
import gen_cublas_stubs  # noqa: E402

CUBLAS_DIR = ROOT / "csrc" / "cublas"


@pytest.fixture(scope="module")
def protos(cublas_include):
    return cublas_wheel.read_prototypes(cublas_include)


@pytest.mark.parametrize("ilp64", [False, True], ids=["int", "_64"])
def test_entry_prototypes_match_cublas_api_h(protos, ilp64):
    mismatches = []
    for e in (e for e in spec.ENTRIES if ilp64 in e.widths()):
        name = e.name64 if ilp64 else e.name
        proto = protos.get(name)
        want = [(p.ctype, p.name) for p in proto.params] if proto else None
        if proto is None or proto.ret != "cublasStatus_t" or spec.c_params(e, ilp64) != want:
            mismatches.append(f"{name}: spec {spec.c_params(e, ilp64)} header {want}")
    assert not mismatches, "\n".join(mismatches)


def test_supported_functions_are_exported_by_nvidia(protos):
    exported = {name for name, _ in gen_cublas_stubs.read_exports()}
    wanted = {e.name64 if ilp64 else e.name for e in spec.ENTRIES for ilp64 in e.widths()} | set(spec.LOCAL_ENTRIES)
    assert wanted <= exported, sorted(wanted - exported)
    assert set(spec.LOCAL_ENTRIES) <= set(protos)
    assert len(spec.ENTRIES) == len({e.name for e in spec.ENTRIES})


def test_families_and_wire_view():
    codes = [f.code for f in spec.FAMILIES]
    assert len(set(codes)) == len(codes) and all(200 <= c < 300 for c in codes)
    for fam in spec.FAMILIES:
        names = fam.names
        assert len(set(names)) == len(names), fam.name
        # every name an argument refers to exists
        for a in fam.args:
            for ref in (getattr(a, "stride", None), getattr(a, "batch", None), getattr(a, "count", None)):
                assert ref is None or ref in names, (fam.name, a.name, ref)
            for ref in (getattr(a, "ld", None), getattr(a, "inc", None)):     # a name, or an expression over names
                assert ref is None or ref in names or spec.evaluate(ref, dict.fromkeys(names, 1)) >= 1, (fam.name, ref)
            dtype = getattr(a, "dtype", None)
            assert dtype is None or dtype in names or dtype in fam.derived, (fam.name, a.name, dtype)
        wire = spec.wire_args(fam).split()
        assert [w.split(":")[0] for w in wire] == ["dev", "handle", "stream", "pmode", "math", *fam.wire_names]


def test_enum_and_type_values_compile_against_the_headers(cublas_include, tmp_path):
    checks = [f"static_assert((int){name} == {value}, \"{name}\");"
              for table in spec.ENUMS.values() for name, value in table.items()]
    checks += [f"static_assert((int){name} == {value}, \"{name}\");" for value, name, _ in spec.STATUSES]
    checks += [f"static_assert((int){t.name} == {t.value}, \"{t.name}\");" for t in spec.DATA_TYPES]
    checks += [f"static_assert(sizeof({t.ctype}) == {t.size}, \"size of {t.ctype}\");" for t in spec.DATA_TYPES
               if t.ctype != "void"]
    checks += [f"static_assert(CUBLAS_VERSION == {spec.CUBLAS_VERSION}, \"version\");",
               f"static_assert(CUBLAS_VER_MAJOR == {spec.CUBLAS_VER[0]} && CUBLAS_VER_MINOR == {spec.CUBLAS_VER[1]}"
               f" && CUBLAS_VER_PATCH == {spec.CUBLAS_VER[2]}, \"version parts\");",
               "static_assert((int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION == "
               f"{spec.MATH_DISALLOW_REDUCED_PRECISION_REDUCTION}, \"flag\");"]
    src = tmp_path / "values.cu"
    src.write_text("#include <cublas_v2.h>\n#include <cstdint>\n" + "\n".join(checks) + "\n")
    proc = subprocess.run([NVCC, "-c", "-I", str(cublas_include), str(src), "-o", str(tmp_path / "values.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_generated_files_are_up_to_date(protos):
    c_text, map_text = gen_cublas_stubs.generate(gen_cublas_stubs.read_exports(), protos)
    assert (CUBLAS_DIR / "unsupported_gen.c").read_text() == c_text, "run tools/gen_cublas_stubs.py"
    assert (CUBLAS_DIR / "libcublas.map").read_text() == map_text, "run tools/gen_cublas_stubs.py"


def test_export_list_is_nvidias_shape():
    rows = gen_cublas_stubs.read_exports()
    names = [n for n, _ in rows]
    assert names == sorted(set(names)) and len(names) > 700
    assert {node for _, node in rows} == {"libcublas.so.13"}


def test_stub_library_exports_and_answers(tmp_path):
    """Build the stubs alone (with a minimal logger) the way libvcublas links them."""
    logger = tmp_path / "logger.c"
    logger.write_text('#include <stdio.h>\n#include "stubs.h"\n'
                      "pvb_status pvb_unsupported(const char *name, atomic_int *once)\n"
                      '{ if (!atomic_exchange(once, 1)) fprintf(stderr, "unsupported %s\\n", name); return 15; }\n')
    lib = tmp_path / "libcublas.so.13"
    subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
                    f"-I{CUBLAS_DIR}", str(CUBLAS_DIR / "unsupported_gen.c"), str(logger),
                    "-Wl,-soname,libcublas.so.13", f"-Wl,--version-script={CUBLAS_DIR / 'libcublas.map'}",
                    "-Wl,-z,defs", "-o", str(lib)], check=True)
    dyn = subprocess.run(["objdump", "-T", str(lib)], capture_output=True, text=True, check=True).stdout
    exported = {(p[6], p[5]) for p in (line.split() for line in dyn.splitlines())
                if len(p) == 7 and p[2] == "DF" and p[3] == ".text"}
    assert exported == {(n, v) for n, v in gen_cublas_stubs.read_exports()}
    dyn_section = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libcublas.so.13]" in dyn_section
    code = ("import ctypes, sys\n"
            f"lib = ctypes.CDLL({str(lib)!r})\n"
            "print(lib.cublasSgemm_v2(None), lib.cublasSgemm_v2(None))\n"
            "lib.cublasSnrm2.restype = ctypes.c_float\n"
            "class C(ctypes.Structure): _fields_ = [('x', ctypes.c_float), ('y', ctypes.c_float)]\n"
            "lib.cublasCdotu.restype = C\n"
            "c = lib.cublasCdotu(0)\n"
            "print(lib.cublasSnrm2(0), c.x, c.y)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["15", "15", "0.0", "0.0", "0.0"]
    assert proc.stderr.count("unsupported cublasSgemm_v2") == 1 and "unsupported cublasCdotu" in proc.stderr


def _sample(fam: spec.Family, rng: random.Random) -> dict[str, int]:
    """Argument values around every boundary the checks test: sizes -1..4, enums in and out of range, real data
    types and compute types, pointers that are NULL or equal to each other."""
    out: dict[str, int] = {}
    types = [t.value for t in spec.DATA_TYPES] + [7, 99]
    computes = list(spec.COMPUTE.values()) + [0, 66]
    for a in fam.args:
        if isinstance(a, spec.Enum):
            allowed = a.allowed()
            out[a.name] = rng.choice(list(allowed) + [max(allowed) + 1, -1 if -1 not in allowed else -2, 3])
        elif isinstance(a, spec.TypeArg):
            out[a.name] = rng.choice(computes if a.ctype == "cublasComputeType_t" else types)
        elif isinstance(a, (spec.Scalar, spec.Result, spec.Vector, spec.Matrix, spec.MatrixArray)):
            out[a.name] = rng.choice([0, 0x1000, 0x1000, 0x2000, 0x3000])
        else:
            out[a.name] = rng.choice([-1, 0, 1, 2, 3, 4, 5, 8])
    return out


def test_c_checks_agree_with_python(tmp_path):
    header = tmp_path / "cublas_gen.h"
    header.write_text(cublas_c.header())
    rng = random.Random(9)
    cases = [(fam, _sample(fam, rng)) for fam in spec.FAMILIES for _ in range(150)]
    lines = ['#include <stdio.h>', '#include "cublas_gen.h"', "int main(void)", "{", "    const char *why;"]
    for i, (fam, values) in enumerate(cases):
        init = ", ".join(f".{k} = {v}" for k, v in values.items())
        lines.append(f"    {{ struct pvb_args_{fam.name} a{i} = {{ {init} }}; why = \"\";")
        lines.append(f"      int st = pvb_check_{fam.name}(&a{i}, &why);")
        lines.append('      printf("%d %s\\n", st, why); }')
    lines += ["    return 0;", "}"]
    src = tmp_path / "checks.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "checks"
    subprocess.run(["cc", "-std=c11", "-O0", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function",
                    f"-I{tmp_path}", str(src), "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    statuses = set()
    for (fam, values), line in zip(cases, got, strict=True):
        failure = spec.check(fam, values)
        want = f"{failure.status} {failure.why}" if failure else "0 "
        assert line.rstrip() == want.rstrip(), (fam.name, values)
        statuses.add(failure.status if failure else 0)
    assert statuses == {0, spec.INVALID_VALUE, spec.NOT_SUPPORTED}       # the samples reach every outcome


def test_status_strings_table():
    names = {name for _, name, _ in spec.STATUSES}
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in names and spec.STATUS["CUBLAS_STATUS_NOT_SUPPORTED"] == 15
    assert spec.STATUS["CUBLAS_STATUS_INVALID_VALUE"] == 7 and spec.SUCCESS == 0
    header = cublas_c.header()
    for value, name, text in spec.STATUSES:
        assert f'{{ {value}, "{name}", "{text}" }},' in header


def test_c_expr_translation():
    assert spec.c_expr("m if transa == OP_N else k") == "((transa == 0) ? m : k)"
    assert spec.c_expr("A == C and (transa != OP_N or lda != ldc)", lambda n: f"a->{n}") == \
        "((a->A == a->C) && ((a->transa != 0) || (a->lda != a->ldc)))"
    assert spec.c_expr("max(1, n * k)") == "pvb_max(1, (n * k))"
    for bad in ("__import__('os')", "x.y", "m / 2", "'a'", "f(1)"):
        with pytest.raises(ValueError):
            spec.c_expr(bad)


def test_generated_structs_hold_every_argument_as_int64():
    """Every argument is an int64_t in the generated structs (pointers included): the C marshalling fills them
    without casts that could truncate a 64-bit size or address."""
    header = cublas_c.header()
    for fam in spec.FAMILIES:
        body = header[header.index(f"struct pvb_args_{fam.name} {{"):]
        body = body[:body.index("};")]
        fields = [line.split() for line in body.splitlines()[1:]]
        assert fields == [["int64_t", f"{n};"] for n in fam.names]


def test_status_cuda_mapping_round_trips():
    for name, _ in spec.STATUS_CUDA:
        st = spec.STATUS[name]
        assert spec.status_of_cuda_error(spec.cuda_error_of_status(st)) == st
    assert spec.status_of_cuda_error(0) == spec.SUCCESS
    assert spec.status_of_cuda_error(700) == spec.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"]   # illegal address


def test_c_entry_points_generated_for_every_entry():
    src = cublas_c.calls_source()
    variants = [(e, ilp64) for e in spec.ENTRIES for ilp64 in e.widths()]
    for e, ilp64 in variants:
        assert f"PV_API pvb_status {e.name64 if ilp64 else e.name}(" in src
    assert src.count("PV_API") == len(variants)
