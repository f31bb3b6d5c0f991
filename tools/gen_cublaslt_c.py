"""The C view of pyvgpu/cublaslt_spec.py, generated at build time into libvcublasLt's build directory (CMake runs it).

    PYTHONPATH=. python tools/gen_cublaslt_c.py OUTDIR [--depfile FILE]

writes two files:
- cublaslt_gen.h: what gen_cublas_c.helpers() gives every table (statuses, types, expression functions), this table's
  expression functions (pvb_epi_*, pvb_multiple_of), one struct per descriptor (layout, matmul descriptor,
  preference, algorithm) with a member per attribute in NVIDIA's storage type, each descriptor's attribute table
  (value, offset, size) that cublasLt*SetAttribute/GetAttribute copy through, its defaults, the check of its
  `refuse` attributes (a feature pyvgpu does not offer, refused unless at its default), the LT_MATMUL argument
  struct (every int argument as int64_t) and its checks (cublaslt_spec.CHECKS in C, in the order Python evaluates
  them), and pyvgpu's algorithm's capabilities;
- lt_calls_gen.c: pvl_matmul_args() fills the argument struct from a descriptor and four layouts, pvl_send_matmul()
  sends it as LT_MATMUL and pvl_call_heuristic() asks LT_HEURISTIC, with the generated senders.

Standard library only (like gen_cublas_c.py): the build runs it before the package is installed.
"""
from __future__ import annotations

import sys

import gen_support

import gen_cublas_c as cublas_c
from pyvgpu import cublaslt_spec as L
from pyvgpu import cublas_spec as B

GENERATED = "/* Generated from pyvgpu/cublaslt_spec.py by tools/gen_cublaslt_c.py. Do not edit. */"
# Even: bit 0 of a descriptor's magic says it lives in the caller's storage (api_lt.c).
MAGIC = {"layout": 0x4C544C58, "desc": 0x4C54444C, "pref": 0x4C545046}
ALGO_MAGIC = 0x4F474C4154425650    # "PVBTALGO": the first word of an algorithm pyvgpu's heuristic returned


def _c(expr: str, name_of=lambda n: n) -> str:
    return B.c_expr(expr, name_of, L.CONSTANTS, L.FUNCTIONS)


def _c_type(ctype: str) -> str:
    return "uint64_t" if ctype == "void*" else ctype     # pointers are stored as their value


def _literal(a: L.Attr) -> str:
    if isinstance(a.default, str):
        return a.default                                   # a create() argument of the same name
    if a.ctype == "float":
        return f"{float(a.default)}f"
    if a.ctype in ("uint64_t", "void*"):
        return f"UINT64_C({a.default})"
    return f"{a.default}"


def _bool_fn(name: str, fn, domain) -> list[str]:
    out = [f"static inline int64_t pvb_{name}(int64_t e)", "{", "    switch (e) {"]
    for v in domain:
        r = fn(v)
        if r:
            out += [f"    case {v}:", f"        return {r};"]
    out += ["    default:", "        return 0;", "    }", "}", ""]
    return out


def _functions() -> list[str]:
    epis = list(L.EPILOGUE)
    out = _bool_fn("epi_known", L.epi_known, epis)
    out += _bool_fn("epi_bias_in", L.epi_bias_in, epis)
    out += _bool_fn("epi_bias_out", L.epi_bias_out, epis)
    out += _bool_fn("epi_bgrad", L.epi_bgrad, epis)
    out += _bool_fn("epi_aux", L.epi_aux, epis)
    out += ["static inline int64_t pvb_multiple_of(int64_t x, int64_t q) { return x >= 0 && x % q == 0; }", ""]
    return out


def _descriptor(d: L.Descriptor) -> list[str]:
    out = [f"/* {d.opaque} storage holds one (cublasLt*Init_internal); attributes in NVIDIA's types. */",
           f"struct pvl_{d.name} {{"]
    out += ["    uint64_t magic;" if d.name == "algo" else "    uint32_t magic;"]
    out += [f"    {_c_type(a.ctype)} {a.field};{'' if a.use == 'wire' else '     /* ' + a.use + ' */'}"
            for a in d.attrs]
    if d.name == "algo":     # what cublasLtMatmulAlgoInit/heuristics knew when they made it (for its capabilities)
        out += ["    int32_t compute;", "    int32_t atype;"]
    out += ["};",
            f"_Static_assert(sizeof(struct pvl_{d.name}) <= {d.opaque_size}, \"pvl_{d.name} fits {d.opaque}\");",
            f"static const struct pvl_attr pvl_{d.name}_attrs[] = {{"]
    ro = L.ALGO_CONFIG_READONLY
    out += [f"    {{ {a.value}, offsetof(struct pvl_{d.name}, {a.field}), {a.size}, {int(a.name in ro)} }},"
            f"   /* {a.name} */" for a in d.attrs]
    out += ["};", f"#define PVL_{d.name.upper()}_NATTRS {len(d.attrs)}", ""]
    params = "".join(f", int64_t {n}" for n in d.create_args)
    out += [f"static inline void pvl_{d.name}_defaults(struct pvl_{d.name} *x{params})", "{",
            "    memset(x, 0, sizeof *x);"]
    out += [f"    x->{a.field} = ({_c_type(a.ctype)}){_literal(a)};" for a in d.attrs if a.default != 0]
    out += ["}", ""]
    refused = [a for a in d.attrs if a.use == "refuse"]
    if d.name in ("layout", "desc"):
        out += [f"/* A `refuse` attribute away from its default: a feature pyvgpu does not offer. */",
                f"static inline int pvl_{d.name}_refused(const struct pvl_{d.name} *x, const char **why)", "{"]
        for a in refused:
            out += [f"    if (x->{a.field} != ({_c_type(a.ctype)}){_literal(a)}) {{",
                    f'        *why = "{a.name} is not supported";',
                    f"        return {B.STATUS[a.status]};", "    }"]
        out += ["    return 0;", "}", ""]
    return out


def _matmul_checks() -> list[str]:
    out = ["/* LT_MATMUL (op " + str(L.OP_LT_MATMUL) + "): every int argument by its wire name. */",
           "struct pvl_matmul_args {"]
    out += [f"    int64_t {n};" for n in L.INT_NAMES]
    out += ["};", "static inline int pvl_check_matmul(const struct pvl_matmul_args *a, const char **why)", "{"]
    local = set(L.DERIVED)
    ref = lambda n: n if n in local else f"a->{n}"   # noqa: E731 - derived names are locals
    for name, expr in L.DERIVED.items():
        out.append(f"    int64_t {name} = {_c(expr, ref)};")
    out += [f"    (void){name};" for name in L.DERIVED]
    for c in L.CHECKS:
        out += [f"    if ({_c(c.expr, ref)}) {{", f'        *why = "{cublas_c._c_string(c.why)}";',
                f"        return {B.STATUS[c.status]};", "    }"]
    out += ["    return 0;", "}", ""]
    return out


def _caps() -> list[str]:
    out = ["/* pyvgpu's algorithm's capabilities (cublasLtMatmulAlgoCapGetAttribute); NUMERICAL_IMPL_FLAGS depends on",
           " * the algorithm's types: pvl_impl_flags(). */",
           "struct pvl_cap { int attr; int size; int count; uint64_t values[4]; };",
           "static const struct pvl_cap pvl_caps[] = {"]
    for c in L.ALGO_CAPS:
        vals = ", ".join(f"UINT64_C({v})" for v in c.values)
        out.append(f"    {{ {c.value}, {L.CTYPE_SIZE[c.ctype]}, {len(c.values)}, {{ {vals} }} }},   /* {c.name} */")
    out += ["};", f"#define PVL_NCAPS {len(L.ALGO_CAPS)}",
            f"#define PVL_CAP_NUMERICAL_IMPL_FLAGS "
            f"{next(c.value for c in L.ALGO_CAPS if c.name == 'CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS')}", "",
            "static inline uint64_t pvl_impl_flags(int64_t compute, int64_t atype)", "{",
            "    uint64_t acc, in;", "    switch (compute) {"]
    for v in sorted(B.COMPUTE.values()):
        flags = L.impl_flags(v, 0)
        out += [f"    case {v}:", f"        acc = UINT64_C({flags & 0xff00});", "        break;"]
    out += ["    default:", f"        acc = UINT64_C({L.NUMERICAL_IMPL['ACCUMULATOR_32F']});", "    }",
            "    switch (atype) {"]
    for t in B.DATA_TYPES:
        out += [f"    case {t.value}:", f"        in = UINT64_C({L.impl_flags(68, t.value) & 0xff0000});",
                "        break;"]
    out += ["    default:", f"        in = UINT64_C({L.NUMERICAL_IMPL['INPUT_32F']});", "    }",
            f"    return UINT64_C({L.NUMERICAL_IMPL['FMA']}) | acc | in;", "}", ""]
    return out


def header() -> str:
    out = [GENERATED, "#ifndef PVL_CUBLASLT_GEN_H", "#define PVL_CUBLASLT_GEN_H", "",
           "#include <stddef.h>", "#include <stdint.h>", "#include <string.h>", ""]
    out += cublas_c.helpers()
    out += _functions()
    out += [f"#define PVL_LT_VERSION {L.LT_VERSION}", f"#define PVL_CUDART_VERSION {L.CUDART_VERSION}",
            f"#define PVL_POINTER_MODE_HOST {L.POINTER_MODE_HOST}",
            f"#define PVL_POINTER_MODE_DEVICE {L.POINTER_MODE_DEVICE}",
            f"#define PVL_ALGO_MAGIC UINT64_C({ALGO_MAGIC:#x})",
            f"#define PVL_MAX_HEURISTIC_RESULTS {L.MAX_HEURISTIC_RESULTS}",
            *(f"#define PVL_{k.upper()}_MAGIC {v:#x}u" for k, v in MAGIC.items()),
            *(f"_Static_assert((PVL_{k.upper()}_MAGIC & 1u) == 0, \"bit 0 is the caller-storage flag\");"
              for k in MAGIC), "",
            "/* One attribute: its cublasLt*Attributes_t value, where it lives in the struct, its size in bytes. */",
            "struct pvl_attr { int value; size_t offset; size_t size; int readonly; };", ""]
    for d in L.DESCRIPTORS:
        out += _descriptor(d)
    out += _matmul_checks()
    out += _caps()
    out += ["#endif", ""]
    return "\n".join(out)


def _arg_value(name: str) -> str:
    for a in L.DESC_WIRE:
        if a.field == name:
            return f"(int64_t)d->{a.field}"
    for i, m in enumerate(L.MATRICES):
        for a in L.LAYOUT_WIRE:
            if m + a.field == name:
                return f"(int64_t)l[{i}]->{a.field}"
    return f"(int64_t)(uintptr_t){name}"


def _wire(args: list[tuple[str, str]], special: dict[str, str]) -> str:
    """A generated sender's arguments: the struct's members by wire type, `special` ones as given."""
    cast = {"i32": "(int32_t)", "i64": ""}
    return ", ".join(special.get(n, f"{cast.get(t, '(uint64_t)')}a->{n}") for n, t in args)


def calls_source() -> str:
    ptrs = ", ".join(f"const void *{p}" for p in L.POINTERS)
    out = [GENERATED, '#include "vcublaslt.h"', "",
           "void pvl_matmul_args(struct pvl_matmul_args *a, const struct pvl_desc *d,",
           f"                     const struct pvl_layout *const l[4], {ptrs}, size_t workspace_size)", "{"]
    out += [f"    a->{n} = {_arg_value(n)};" if n != "workspace_size" else "    a->workspace_size = "
            "(int64_t)workspace_size;" for n in L.INT_NAMES]
    out += ["}", "",
            "cudaError_t pvl_send_matmul(struct pv_device *dev, uint64_t stream, const struct pvl_matmul_args *a,",
            "                            const void *alpha, size_t alpha_n, const void *beta, size_t beta_n)", "{"]
    special = {"alpha": "alpha, alpha_n", "beta": "beta, beta_n"}
    out += [f"    return pv_send_LT_MATMUL(dev, stream, {_wire(L.matmul_wire(), special)});", "}", ""]
    out += ["cudaError_t pvl_call_heuristic(struct pv_device *dev, const struct pvl_matmul_args *a, uint64_t max_ws,",
            "                               const uint32_t align[4], uint64_t result[2])", "{"]
    special = {"max_workspace": "max_ws", **{f"align_{x}": f"align[{i}]" for i, x in enumerate("abcd")}}
    out += [f"    return pv_call_LT_HEURISTIC(dev, {_wire(L.heuristic_wire(), special)}, result);", "}", ""]
    return "\n".join(out)


def files() -> dict[str, str]:
    """The generated files, by name."""
    return {"cublaslt_gen.h": header(), "lt_calls_gen.c": calls_source()}


if __name__ == "__main__":
    raise SystemExit(gen_support.main(sys.argv, files))
