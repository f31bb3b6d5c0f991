"""The C view of pyvgpu/cublas_spec.py, generated at build time into libvcublas's build directory (CMake runs it).

    PYTHONPATH=. python tools/gen_cublas_c.py OUTDIR [--depfile FILE]

writes two files:
- cublas_gen.h: statuses and their strings, data-type constants and sizes, the expression functions of the table
  (pvb_max, pvb_is_complex, pvb_real_of, pvb_gemm_scale_type), the status <-> cudaError_t mapping, and per family
  an argument struct (every argument as int64_t: sizes, enums, types, pointer values) with its check function
  (the table's checks translated by cublas_spec.c_expr, in the order cublas_spec.check evaluates them);
- calls_gen.c: every supported entry point (int and _64 API) with NVIDIA's name and an ABI-equivalent prototype:
  fill the family's struct from the parameters and the bound arguments, check it (a refusal returns its status at
  once), turn scalars into their wire bytes by the handle's pointer mode, and send the family's op with the
  generated sender (pv_send_<OP>, fire-and-forget; pv_call_<OP> when a result goes to host memory).

Standard library only (like gen_protocol_c.py): the build runs it before the package is installed.
"""
from __future__ import annotations

import sys

import gen_support

from pyvgpu import cublas_spec as S

GENERATED = "/* Generated from pyvgpu/cublas_spec.py by tools/gen_cublas_c.py. Do not edit. */"


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _switch(fn: str, cases: list[tuple[int, str]], default: str) -> list[str]:
    out = [f"static inline int64_t {fn}(int64_t t)", "{", "    switch (t) {"]
    for value, ret in cases:
        out += [f"    case {value}:", f"        return {ret};"]
    out += ["    default:", f"        return {default};", "    }", "}", ""]
    return out


def helpers() -> list[str]:
    """What every table's generated C shares (libvcublasLt's header too): statuses and their strings, data types,
    versions, the expression functions of cublas_spec (pvb_max, pvb_dtype_size, pvb_is_complex, pvb_real_of,
    pvb_gemm_scale_type) and the status <-> cudaError_t mapping."""
    out = [f"#define PVB_{name} {value}" for value, name, _ in S.STATUSES]
    out += [f"#define PVB_{t.name} {t.value}" for t in S.DATA_TYPES]
    out += [f"#define PVB_{name} {value}" for name, value in S.COMPUTE.items()]
    out += [f"#define PVB_CUBLAS_VERSION {S.CUBLAS_VERSION}", f"#define PVB_CUDART_VERSION {S.CUDART_VERSION}",
            f"#define PVB_VER_MAJOR {S.CUBLAS_VER[0]}", f"#define PVB_VER_MINOR {S.CUBLAS_VER[1]}",
            f"#define PVB_VER_PATCH {S.CUBLAS_VER[2]}",
            f"#define PVB_POINTER_MODE_HOST {S.POINTER_MODE_HOST}",
            f"#define PVB_POINTER_MODE_DEVICE {S.POINTER_MODE_DEVICE}",
            f"#define PVB_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION {S.MATH_DISALLOW_REDUCED_PRECISION_REDUCTION}"]
    out += ["", "struct pvb_status_desc { int code; const char *name; const char *text; };",
            "static const struct pvb_status_desc pvb_status_table[] = {"]
    out += [f'    {{ {v}, "{n}", "{_c_string(text)}" }},' for v, n, text in S.STATUSES]
    out += ["};", f"#define PVB_STATUS_TABLE_LEN {len(S.STATUSES)}",
            f'#define PVB_UNKNOWN_STATUS_TEXT "{S.UNKNOWN_STATUS_TEXT}"', "",
            "/* cublas(Lt)GetStatusName (which = 0) and GetStatusString (which = 1) of a status. */",
            "static inline const char *pvb_status_words(int status, int which)", "{",
            "    for (int i = 0; i < PVB_STATUS_TABLE_LEN; i++)",
            "        if (pvb_status_table[i].code == status)",
            "            return which ? pvb_status_table[i].text : pvb_status_table[i].name;",
            "    return PVB_UNKNOWN_STATUS_TEXT;", "}", "",
            "/* cublasMath_t values cublasSetMathMode accepts (besides the DISALLOW_REDUCED_PRECISION flag). */",
            "static const int pvb_math_modes[] = { " + ", ".join(str(v) for v in S.ENUMS["cublasMath_t"].values())
            + " };", "", "static inline int64_t pvb_max(int64_t a, int64_t b) { return a > b ? a : b; }",
            "static inline int64_t pvb_min(int64_t a, int64_t b) { return a < b ? a : b; }", ""]
    out += _switch("pvb_dtype_size", [(t.value, str(t.size)) for t in S.DATA_TYPES], "0")
    out += _switch("pvb_is_complex", [(t.value, "1") for t in S.DATA_TYPES if t.is_complex], "0")
    out += _switch("pvb_real_of", [(t.value, str(S.real_of(t.value))) for t in S.DATA_TYPES
                                   if S.real_of(t.value) != t.value], "t")
    out += ["static inline int64_t pvb_gemm_scale_type(int64_t a, int64_t b, int64_t c, int64_t compute)", "{",
            "    if (a != b)", "        return -1;"]
    for t in S.GEMM_TYPES:
        computes = " || ".join(f"compute == {S.COMPUTE[c]}" for c in t.computes)
        out += [f"    if (a == {S.DTYPE[t.ab].value} && c == {S.DTYPE[t.c].value} && ({computes}))",
                f"        return {S.DTYPE[t.scale].value};"]
    out += ["    return -1;", "}", "",
            "/* cuBLAS status -> the cudaError_t the wire carries, and back (cublas_spec.STATUS_CUDA). */"]
    errs = {name: value for value, name, _ in S.CUDA_ERRORS}
    out += _switch("pvb_cuda_of_status", [(S.STATUS[st], str(errs[ce])) for st, ce in S.STATUS_CUDA],
                   str(errs["cudaErrorUnknown"]))
    out += _switch("pvb_status_of_cuda", [(0, "0")] + [(errs[ce], str(S.STATUS[st])) for st, ce in S.STATUS_CUDA],
                   str(S.STATUS["CUBLAS_STATUS_EXECUTION_FAILED"]))
    return out


def header() -> str:
    out = [GENERATED, "#ifndef PVB_CUBLAS_GEN_H", "#define PVB_CUBLAS_GEN_H", "", "#include <stdint.h>", ""]
    out += helpers()
    for fam in S.FAMILIES:
        out += [f"/* {fam.name} ({fam.code}): {fam.doc} */", f"struct pvb_args_{fam.name} {{"]
        out += [f"    int64_t {a.name};" for a in fam.args]
        out += ["};", f"static inline int pvb_check_{fam.name}(const struct pvb_args_{fam.name} *a, const char **why)",
                "{"]
        for c in S.all_checks(fam):
            out += [f"    if ({S.c_expr(c.expr, lambda n: f'a->{n}')}) {{",
                    f'        *why = "{_c_string(c.why)}";', f"        return {S.STATUS[c.status]};", "    }"]
        out += ["    return 0;", "}", ""]
    out += ["#endif", ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------- entry points
def _c_param(ctype: str, name: str) -> str:
    """An ABI-equivalent C declaration (no cuBLAS headers here: enums are ints, element pointers void pointers)."""
    if ctype == "cublasHandle_t":
        return f"struct pvb_handle *{name}"
    if "*" in ctype:
        return f"{'const ' if ctype.startswith('const') else ''}void *{name}"
    if ctype in ("int", "int64_t", "long long int"):
        return f"{ctype} {name}"
    return f"int {name}"          # cublasOperation_t, cudaDataType, ... (C enums)


def _wire_value(a: S.Arg) -> str:
    if isinstance(a, S.Scalar):
        return f"{a.name}_v, {a.name}_n"
    if isinstance(a, (S.Enum, S.TypeArg)):
        return f"(int32_t)pvb_a.{a.name}"
    if isinstance(a, (S.Vector, S.Matrix, S.MatrixArray, S.Result)):
        return f"(uint64_t)pvb_a.{a.name}"
    return f"pvb_a.{a.name}"


def _dtype_expr(fam: S.Family, ref: str) -> str:
    if ref in fam.derived:
        return S.c_expr(fam.derived[ref], lambda n: f"pvb_a.{n}")
    return f"pvb_a.{ref}"


def entry_point(e: S.Entry, ilp64: bool) -> list[str]:
    """One entry point. Its locals are pvb_-prefixed: cuBLAS parameter names (c, s, x, ...) stay free."""
    fam = e.family
    name = e.name64 if ilp64 else e.name
    params = S.c_params(e, ilp64)
    bound = e.binding(ilp64)
    out = [f"PV_API pvb_status {name}(" + ", ".join(_c_param(t, n) for t, n in params) + ")", "{",
           "    struct pvb_call pvb_c;",
           "    pvb_status pvb_st = pvb_begin(handle, &pvb_c);",
           "    if (pvb_st != PVB_CUBLAS_STATUS_SUCCESS)",
           "        return pvb_st;",
           f"    struct pvb_args_{fam.name} pvb_a = {{"]
    fields = []
    for a in fam.args:
        if a.name in bound:
            fields.append(f".{a.name} = {bound[a.name]}")
        elif any(n == a.name and "*" in t for t, n in params):
            fields.append(f".{a.name} = (int64_t)(uintptr_t){a.name}")
        else:
            fields.append(f".{a.name} = {a.name}")
    out += [f"        {f}," for f in fields]
    out += ["    };", "    const char *pvb_why = \"\";"]
    info = next((a for a in fam.args if isinstance(a, S.HostInfo)), None)
    if info is None:
        out += [f"    pvb_st = pvb_check_{fam.name}(&pvb_a, &pvb_why);"]
    else:
        # LAPACK's host info: the checks inline, so the failing one's parameter position is known here
        out += ["    int pvb_pos = 0;"]
        for i, c in enumerate(S.all_checks(fam)):
            out += [f"    {'else ' if i else ''}if ({S.c_expr(c.expr, lambda n: f'pvb_a.{n}')}) {{",
                    f"        pvb_st = {S.STATUS[c.status]};", f'        pvb_why = "{_c_string(c.why)}";',
                    f"        pvb_pos = {e.position(c.arg)};", "    }"]
        out += [f"    if ({info.name})", f"        *(int *){info.name} = pvb_st != PVB_CUBLAS_STATUS_SUCCESS ? -pvb_pos : 0;"]
    out += ["    if (pvb_st != PVB_CUBLAS_STATUS_SUCCESS)",
            f'        return pvb_refused(&pvb_c, "{name}", pvb_st, pvb_why);']
    for a in fam.args:
        if isinstance(a, S.Scalar):
            out += [f"    unsigned char {a.name}_v[PVB_SCALAR_MAX];",
                    f"    size_t {a.name}_n = pvb_scalar(&pvb_c, {a.name}, {_dtype_expr(fam, a.dtype)}, {a.name}_v);"]
    wire = ", ".join(_wire_value(a) for a in fam.args if not isinstance(a, S.HostInfo))
    prefix = "pvb_c.dev, pvb_c.remote, pvb_c.stream, (uint32_t)pvb_c.pmode, (uint32_t)pvb_c.math"
    result = next((a for a in fam.args if isinstance(a, S.Result)), None)
    if result is not None:
        size = f"(size_t)pvb_dtype_size({_dtype_expr(fam, result.dtype)})"
        out += ["    if (pvb_c.pmode == PVB_POINTER_MODE_HOST) {",
                f"        pvb_a.{result.name} = 0;      /* the value comes back as the reply's payload */",
                "        size_t pvb_got = 0;",
                f"        cudaError_t pvb_err = pv_call_{fam.name}({prefix}, {wire}, {result.name}, {size}, &pvb_got);",
                f'        return pvb_waited(&pvb_c, "{name}", pvb_err, pvb_got, {size});',
                "    }"]
    out += [f'    return pvb_sent(&pvb_c, "{name}", pv_send_{fam.name}({prefix}, {wire}));', "}", ""]
    return out


def calls_source() -> str:
    out = [GENERATED, '#include "vcublas.h"', ""]
    for e in S.ENTRIES:
        for ilp64 in e.widths():
            out += entry_point(e, ilp64)
    return "\n".join(out)


def files() -> dict[str, str]:
    """The generated files, by name."""
    return {"cublas_gen.h": header(), "calls_gen.c": calls_source()}


if __name__ == "__main__":
    raise SystemExit(gen_support.main(sys.argv, files))
